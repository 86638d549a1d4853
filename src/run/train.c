// tessera train: the step loop, its JSONL log (docs/RUN-LOG.md) and its
// checkpoints (checkpoint.c).
//
// Training runs serially or data-parallel (--dp D under mpiexec): rank d of
// the data group holds sequences [d·B/D, (d+1)·B/D) of the global batch,
// runs forward and backward on them, and the gradients are summed over the
// group by the canonical tree (comm.h), which equals the serial tree because
// every rank's leaves are an aligned power-of-two subtree (layout.c checks
// it). The loss is combined the same way. Optimizer steps then run on every
// rank identically; rank 0 alone prints, logs and writes checkpoints.
//
// SIGTERM, SIGINT and SIGHUP (stop.c) stop the run between steps: every rank
// learns after each step whether any rank got one, so all stop after the
// same step, whose checkpoint is written as a periodic one would be.
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "log.h"
#include "mem.h"
#include "parallel/cp.h"
#include "parallel/grid.h"
#include "run/run.h"
#include "util.h"

// A hidden hook for the tests of failure handling: the rank named by
// TESSERA_FAULT_RANK fails as if its data file were unreadable, while the
// others go on into the first collective. The run must still end at once.
static int injected_fault(const ts_grid *g, const char *path) {
  const char *v = getenv("TESSERA_FAULT_RANK");
  if (!v || !*v || atoi(v) != g->world_rank) return TS_OK;
  return ts_fail(TS_ERUNTIME, "cannot read %s: fault injected on this rank (TESSERA_FAULT_RANK)",
                 path);
}

// The layout's name in the config record and the progress line:
// "serial", "dp2", "dp1-sp4-lss", "dp1-pp2-m4-1f1b", "dp1-sp2-upipe-u2-gqa",
// "serial-m4" (accumulation), "dp4-zero1" …
static void layout_name(const ts_grid *grid, const ts_layout *lay, char *buf, size_t cap) {
  const int D = grid->dp;
  if (grid->world_size == 1)
    snprintf(buf, cap, "serial");
  else if (grid->pp > 1)
    snprintf(buf, cap, "dp%d-pp%d-m%d-%s", D, grid->pp, lay->microbatches,
             lay->schedule ? "1f1b" : "gpipe");
  else if (grid->sp == 1)
    snprintf(buf, cap, "dp%d", D);
  else
    snprintf(buf, cap, "dp%d-sp%d-%s", D, grid->sp, ts_sp_mode_names[lay->sp_mode]);
  const ts_cp *cp = ts_cp_get(lay->sp_mode);
  if (grid->sp > 1 && cp->describe) // the strategy's settings
    cp->describe(lay, buf + strlen(buf), cap - strlen(buf));
  if (grid->pp == 1 && grid->sp == 1 && lay->microbatches > 1) // gradient accumulation
    snprintf(buf + strlen(buf), cap - strlen(buf), "-m%d", lay->microbatches);
  if (lay->zero) snprintf(buf + strlen(buf), cap - strlen(buf), "-zero%d", lay->zero);
}

// --resume, once the model and the optimizer exist: the checkpoint, opened
// and checked before they were allocated, loaded into them (every rank reads
// what it holds: a pipeline stage its part), and the log cut back to its step.
static int resume(const ts_shard *sh, ts_adamw *opt, const ts_run_ckpt *ck,
                  const ts_config *cfg, int root) {
  int rc;
  if ((rc = ts_run_load_checkpoint(sh->m, opt, sh->upd_p, sh->nupd, ck))) return rc;
  if (root && cfg->log_path[0] && (rc = ts_run_trim_log(cfg->log_path, ck))) return rc;
  if (root) printf("resumed from %s (step %" PRId64 ")\n", ts_ckpt_path(ck->ck), ck->step);
  return TS_OK;
}

// --init-from: the checkpoint's parameters in place of the initialisation
// (every rank reads what it holds), the optimizer fresh, the step 0.
static int init_weights(const ts_shard *sh, const ts_run_ckpt *ck, int root) {
  int rc = ts_run_load_checkpoint(sh->m, NULL, NULL, 0, ck);
  if (rc) return rc;
  if (root) printf("initialised from %s (its step %" PRId64 "): new optimizer state and "
                   "schedule from step 0\n", ts_ckpt_path(ck->ck), ck->step);
  return TS_OK;
}

// The step record's tracked phase peaks (mem.h): ,"mem_peak_bytes":{…}. A
// phase this layout does not track (the attention of the serial and LSS
// layouts) is left out.
static void phase_peaks_json(char *buf, size_t cap) {
  int k = snprintf(buf, cap, ",\"mem_peak_bytes\":{"), first = 1;
  for (int ph = 0; ph < TS_NPHASES; ph++) {
    size_t b = ts_mem_peak((ts_phase)ph);
    if (b == 0) continue;
    k += snprintf(buf + k, cap - (size_t)k, "%s\"%s\":%zu", first ? "" : ",", ts_phase_names[ph], b);
    first = 0;
  }
  snprintf(buf + k, cap - (size_t)k, "}");
}

// The pipeline's in-flight microbatches on this (the first) stage and the
// bytes per token that cross a boundary, each way (X, Z or codes); "" without.
static void pipeline_json(const ts_shard *sh, char *buf, size_t cap) {
  buf[0] = 0;
  if (!sh->pl) return;
  snprintf(buf, cap,
           ",\"pipeline\":{\"stages\":%d,\"microbatches\":%d,\"schedule\":\"%s\","
           "\"peak_inflight\":%d,\"boundary_bytes_per_token\":{\"forward\":%d,"
           "\"backward\":%d}}",
           sh->pl->P, sh->pl->M, sh->pl->schedule ? "1f1b" : "gpipe", sh->pl->peak_inflight,
           (int)ts_model_boundary_bytes(sh->m, 0), (int)ts_model_boundary_bytes(sh->m, 1));
}

// What a step measured, for its record and progress line.
typedef struct {
  uint64_t step;
  float loss, norm, lr;
  double tps, dt, comm_s, compute_max, compute_min, compute_mean, mfu, rss, rss_max;
} step_stats;

// What this rank holds, by kind, and the model state (parameters, their
// copies, gradients, optimizer moments) summed and at most over the ranks:
// ,"state_bytes":{"params":…,"grads":…,"optimizer":…,"activations":…,
// "buffers":…,"model_sum":…,"model_max":…}. Collective over the world.
static void state_json(const ts_shard *sh, const ts_adamw *opt, char *buf, size_t cap) {
  ts_model *m = sh->m;
  double params = 0.0;
  const int nc = ts_model_num_copies(m);
  ts_tensor *c = calloc((size_t)nc + 1, sizeof *c);
  if (c) {
    ts_model_copies(m, c);
    for (int i = 0; i < nc; i++) params += (double)ts_tensor_numel(&c[i]);
    free(c);
  }
  params = 4.0 * (params + (double)ts_zero_held(sh, 0));
  const double grads = 4.0 * (double)ts_zero_held(sh, 1), moments = 8.0 * (double)opt->n;
  double sum, max;
  ts_mpi_sum_max(params + grads + moments, &sum, &max);
  snprintf(buf, cap,
           ",\"state_bytes\":{\"params\":%.0f,\"grads\":%.0f,\"optimizer\":%.0f,"
           "\"activations\":%zu,\"buffers\":%zu,\"model_sum\":%.0f,\"model_max\":%.0f}",
           params, grads, moments, ts_model_activation_bytes(m), ts_shard_buffer_bytes(sh), sum,
           max);
}

// The step's record in the log and, unless quiet, its progress line.
static int log_step(ts_log *log, const step_stats *st, const ts_config *cfg, const ts_shard *sh,
                    const ts_grid *grid, const ts_backend *be, const char *state) {
  char comm_json[4096], mem_json[256], pipe_json[256], dev_json[64] = "";
  if (ts_grid_counts_json(grid, comm_json, sizeof comm_json) < 0) snprintf(comm_json, sizeof comm_json, "{}");
  phase_peaks_json(mem_json, sizeof mem_json);
  pipeline_json(sh, pipe_json, sizeof pipe_json);
  // a GPU's: the peak of the bytes its allocator handed out (this rank's)
  const double dev_mb = be->peak_bytes ? (double)be->peak_bytes() / 1048576.0 : 0.0;
  if (be->peak_bytes) snprintf(dev_json, sizeof dev_json, ",\"device_peak_mb\":%.1f", dev_mb);
  char line[1024 + sizeof comm_json + sizeof mem_json + sizeof pipe_json + sizeof dev_json + 256];
  snprintf(line, sizeof line,
           "{\"type\":\"step\",\"step\":%" PRIu64 ",\"loss\":%.9g,\"loss_hex\":\"%a\","
           "\"grad_norm\":%.9g,\"grad_norm_hex\":\"%a\",\"lr\":%.9g,\"lr_hex\":\"%a\","
           "\"tokens_per_s\":%.1f,\"step_ms\":%.3f,\"comm_ms\":%.3f,\"compute_ms_max\":%.3f,"
           "\"compute_ms_mean\":%.3f,\"compute_ms_min\":%.3f,"
           "\"mfu\":%.4f,\"peak_rss_mb\":%.1f,\"peak_rss_mb_max\":%.1f%s%s%s%s,\"comm\":%s}",
           st->step, (double)st->loss, (double)st->loss, (double)st->norm, (double)st->norm,
           (double)st->lr, (double)st->lr, st->tps, st->dt * 1e3, st->comm_s * 1e3,
           st->compute_max * 1e3, st->compute_mean * 1e3, st->compute_min * 1e3, st->mfu, st->rss,
           st->rss_max, dev_json, mem_json, state, pipe_json, comm_json);
  int rc = ts_log_line(log, line);
  // memory: the process's peak, or on a GPU the device's; every
  // --log-every steps and the last (the log has them all: compare needs them)
  const uint64_t every = cfg->log_every > 1 ? (uint64_t)cfg->log_every : 1;
  if (!cfg->quiet && (st->step % every == 0 || st->step == (uint64_t)cfg->steps))
    printf("step %5" PRIu64 "/%d | loss %.4f | lr %.2e | norm %.3f | %7.0f tok/s | MFU %4.1f%% | %6.0f MB%s\n",
           st->step, cfg->steps, (double)st->loss, (double)st->lr, (double)st->norm, st->tps,
           100.0 * st->mfu, be->peak_bytes ? dev_mb : st->rss, be->peak_bytes ? " GPU" : "");
  fflush(stdout);
  return rc;
}

// The validation loss after `step`, its record and progress line.
static int evaluate_and_log(ts_log *log, const ts_config *cfg, ts_shard *sh, const ts_data *data,
                            ts_grid *grid, uint64_t step, int *inputs, int *targets) {
  char comm_json[4096], line[4096 + 256];
  float vl;
  ts_grid_reset_counts(grid);
  int rc = ts_run_evaluate(sh, data, cfg, grid->dp > 1 ? grid->data : NULL, inputs, targets, &vl);
  if (rc) return rc;
  if (ts_grid_counts_json(grid, comm_json, sizeof comm_json) < 0) snprintf(comm_json, sizeof comm_json, "{}");
  snprintf(line, sizeof line,
           "{\"type\":\"eval\",\"step\":%" PRIu64 ",\"val_loss\":%.9g,\"val_loss_hex\":\"%a\","
           "\"comm\":%s}",
           step, (double)vl, (double)vl, comm_json);
  if ((rc = ts_log_line(log, line))) return rc;
  if (!cfg->quiet) printf("step %5" PRIu64 " | val loss %.4f\n", step, (double)vl);
  return TS_OK;
}

// A run stopped by signal signo after `step`, its checkpoint (if any) of
// that step written: the log closed (no final record: the run is not
// finished) and TS_ESTOPPED with the one line that says how to go on.
static int stopped(ts_log *log, const ts_config *cfg, int signo, uint64_t step) {
  int rc = ts_log_close(log);
  if (rc) return rc;
  ts_run_stopped(signo);
  const char *sig = ts_run_signal_name(signo);
  if (!cfg->ckpt_dir[0])
    return ts_fail(TS_ESTOPPED, "stopped by %s after step %" PRIu64 " of %d: no --ckpt-dir, so "
                   "no checkpoint to resume from", sig, step, cfg->steps);
  return ts_fail(TS_ESTOPPED, "stopped by %s after step %" PRIu64 " of %d: checkpoint "
                 "%s/step-%08" PRIu64 ".safetensors written; to continue, run the same command "
                 "with --resume (--ckpt-dir %s)", sig, step, cfg->steps, cfg->ckpt_dir, step,
                 cfg->ckpt_dir);
}

int ts_train(const ts_config *cfg_in, const ts_layout *lay_in) {
  ts_config cfg = *cfg_in;
  ts_layout lay = lay_in ? *lay_in
                         : (ts_layout){.dp = 1, .sp = 1, .pp = 1, .sp_mode = TS_SP_LSS,
                                       .upipe_sched = -1, .microbatches = 1};
  int rc;
  ts_grid *grid = NULL;
  ts_data *data = NULL;
  ts_shard sh = {0};
  ts_model *m = NULL;
  ts_adamw opt = {0};
  ts_log log = {0};
  ts_run_ckpt ck = {0};
  ts_run_ranks ranks = {0};
  char *start_line = NULL;
  int *inputs = NULL, *targets = NULL;
  if ((rc = ts_layout_check(&cfg, &lay)) || (rc = ts_grid_create(lay.dp, lay.sp, lay.pp, &grid)))
    return rc;
  ts_run_setup_threads(&cfg, grid->local_size);
  ts_model_set_memory_share(grid->local_size); // the node's ranks share its memory
  const int shards = lay.zero ? grid->replica->size : 1; // --zero: the state's shards
  ts_model_set_state_shards(shards, lay.zero);
  // rank 0 alone talks to people and files
  const int root = grid->world_rank == 0;
  if (!root) cfg.quiet = 1;
  ts_run_stopped(0);
  ts_run_stop_install(!cfg.quiet);
  const int D = grid->dp, nb = cfg.batch / D;
  ts_comm *dgroup = grid->data;
  // Before anything is allocated: a model that cannot fit, and on --resume
  // everything in the checkpoint's header.
  // a tensor split's ranks hold blocks of the layers' matrices (cp.h `split`)
  const int split = grid->sp > 1 && ts_cp_get(lay.sp_mode)->split ? grid->sp : 1;
  if ((rc = ts_run_check_fit(&cfg, 1, grid->local_size, grid->pp, shards, lay.zero, split)))
    goto done;
  // (--resume: the checkpoint's data unless --data, resolved there)
  if (cfg.resume && (rc = ts_run_open_resume(&cfg, grid->local_size, grid->pp, &ck))) goto done;
  if (cfg.resume && !ck.ck) { // so that a job script can always pass --resume
    if (root) printf("--resume: no checkpoint in %s yet: starting at step 0\n", cfg.ckpt_dir);
    cfg.resume = 0;
  }
  if (cfg.resume && ck.cfg.steps != cfg.steps && root)
    printf("--resume: --steps %d, the checkpoint's run had %d: the learning rate of steps %"
           PRId64 "..%d follows the schedule of a %d-step run\n", cfg.steps, ck.cfg.steps,
           ck.step + 1, cfg.steps, cfg.steps);
  if (cfg.init_from[0] && (rc = ts_run_open_init(&cfg, grid->local_size, grid->pp, &ck)))
    goto done;
  // the format the files are read in, which the run records and a resumed
  // run must share (a look at their first bytes; the whole files come later)
  if ((rc = ts_data_resolve(cfg.data_path, cfg.val_path, cfg.data_format, &cfg.data_format)) ||
      (rc = ts_data_check_vocab(cfg.data_format, cfg.vocab, cfg.data_path)))
    goto done;
  // the tokenizer the data was made with, for its checkpoints (--tokenizer)
  if ((rc = ts_run_checkpoint_tokenizer(&cfg))) goto done;
  if (cfg.resume && (rc = ts_run_check_resume_tokenizer(&ck))) goto done;
  if (cfg.init_from[0] && (rc = ts_run_check_init_source(&ck, &cfg))) goto done;
  if ((rc = ts_run_open_data(&cfg, cfg.data_path, &data))) goto done;
  if ((rc = injected_fault(grid, cfg.data_path))) goto done;
  ts_run_checkpoint_data(data);
  if (cfg.resume && (rc = ts_run_check_resume_data(&ck, data))) goto done;
  // every rank with the same computation, data and checkpoint, before any work
  if ((rc = ts_run_agree(&cfg, &lay, data, &ck))) goto done;
  // --ckpt-dir: made, locked and checked before step 1, once the ranks agree
  // (--restart removes checkpoints); then what a killed run left there
  if ((rc = ts_run_root_verdict(root ? ts_run_claim_ckpt_dir(&cfg) : TS_OK))) goto done;
  if (root) {
    int gone = ts_run_remove_stale_temps(&cfg);
    if (gone && !cfg.quiet) printf("removed %d temporary file%s a killed run left\n", gone,
                                   gone == 1 ? "" : "s");
  }
  // which process on which host is which rank, for the log and the output
  if ((rc = ts_run_gather_ranks(&ranks))) goto done;
  if ((rc = ts_shard_create(&cfg, grid, &lay, &sh))) goto done;
  m = sh.m;
  ts_model_init(m, cfg.seed);
  ts_zero_release(&sh); // --zero 3: the layers' parameters but this rank's shard
  // this rank's parameters (a pipeline stage's), and the canonical model's
  // what this rank updates: its stage's tensors, or under --zero its shard of
  // them (shard.h), with moments for those alone; and the canonical model's size
  const size_t np_model = ts_model_canonical_params(m);
  if ((rc = ts_adamw_init(&opt, sh.nupd_floats))) goto done;
  const int nt = sh.nupd;
  ts_tensor *pt = sh.upd_p, *gt = sh.upd_g;
  inputs = malloc((size_t)nb * cfg.seq * sizeof(int));
  targets = malloc((size_t)nb * cfg.seq * sizeof(int));
  if (!inputs || !targets) { rc = ts_fail(TS_ERUNTIME, "out of memory"); goto done; }

  char state[320];
  state_json(&sh, &opt, state, sizeof state);
  const int64_t start = cfg.resume ? ck.step : 0;
  if (cfg.resume && (rc = resume(&sh, &opt, &ck, &cfg, root))) goto done;
  if (cfg.init_from[0] && (rc = init_weights(&sh, &ck, root))) goto done;
  if (cfg.resume || cfg.init_from[0]) ts_zero_release(&sh); // --zero 3: the layers' own shards
  ts_run_close_checkpoint(&ck);

  // MFU counts every rank's cores: the roof is one process's, times the world.
  // On a GPU the roof is the device's, which is not measured here (0: no MFU
  // in the log; bench/gpu.sh divides by the datasheet peak).
  const ts_backend *be = ts_backend_current();
  double roof = root && be == &ts_backend_cpu ? ts_run_sgemm_roof() : 0.0;
  double fpt = ts_model_flops_per_token(m);
  if ((rc = ts_log_open(&log, root ? cfg.log_path : NULL, start > 0))) goto done;
  char layout[64];
  layout_name(grid, &lay, layout, sizeof layout);
  ts_run_checkpoint_layout(layout);
  // the first line of a run's log; a resumed run's record of its own start
  // (its layout and processes may differ), which compare skips like the first
  const size_t line_cap = TS_CONFIG_JSON_MAX + 512 + strlen(ranks.json) +
                          strlen(ts_run_tokenizer_id());
  if (!(start_line = malloc(line_cap))) { rc = ts_fail(TS_ERUNTIME, "out of memory"); goto done; }
  if (start == 0) {
    char cj[TS_CONFIG_JSON_MAX];
    if ((rc = ts_config_to_json(&cfg, cj, sizeof cj))) goto done;
    const char *tokenizer = ts_run_tokenizer_id(); // "": none named, the field left out
    snprintf(start_line, line_cap,
             "{\"type\":\"config\",\"version\":\"%s\",\"world\":%d,\"layout\":\"%s\","
             "\"device\":\"%s\",\"precision\":\"%s\",\"comm\":\"%s\",\"params\":%zu,"
             "\"flops_per_token\":%.6g,\"roof_gflops\":%.1f,\"ranks\":%s,\"model\":%s%s%s}",
             TS_VERSION_STRING, grid->world_size, layout, be->name, ts_backend_precision_name(),
             grid->world_size == 1 ? "none" : ts_backend_uses_nccl() ? "nccl" : "mpi", np_model, fpt,
             roof, ranks.json, cj, tokenizer[0] ? ",\"tokenizer\":" : "", tokenizer);
  } else {
    snprintf(start_line, line_cap,
             "{\"type\":\"resume\",\"step\":%" PRId64 ",\"world\":%d,\"layout\":\"%s\","
             "\"ranks\":%s}", start, grid->world_size, layout, ranks.json);
  }
  if ((rc = ts_log_line(&log, start_line))) goto done;
  if (!cfg.quiet)
    printf("tessera train: %s, %zu parameters, B=%d T=%d, %d steps, %s (%d rank%s x %d threads), "
           "tile %d, leaf %d, sgemm roof %.0f GFLOP/s\n",
           cfg.preset, np_model, cfg.batch, cfg.seq, cfg.steps, layout, grid->world_size,
           grid->world_size == 1 ? "" : "s", omp_get_max_threads(), cfg.tile, cfg.leaf, roof);
  if (!cfg.quiet && grid->world_size > 1) printf("%s\n", ranks.text);

  const double tokens = (double)cfg.batch * cfg.seq;
  const int64_t ntok_global = (int64_t)cfg.batch * cfg.seq;
  int64_t saved = start; // the latest checkpoint's step (0: none)
  for (int64_t s = start; s < cfg.steps; s++) {
    uint64_t step = (uint64_t)s + 1;
    double t0 = ts_now();
    ts_grid_reset_counts(grid);
    ts_mem_reset_peaks();
    if ((rc = ts_run_load_shard(data, TS_SPLIT_TRAIN, &cfg, step, &sh, inputs, targets))) goto done;
    // forward and backward over this rank's share, then the sums over the
    // sequence group and the data group (shard.h)
    float lsum, loss;
    if ((rc = ts_shard_pass(&sh, inputs, targets, step, 1, &lsum))) goto done;
    if ((rc = ts_shard_sync_grads(&sh, dgroup))) goto done;
    // (in rounds, the shard's sum is the global one already)
    ts_comm *lgroup = D > 1 && !sh.strided ? dgroup : NULL;
    if ((rc = ts_run_combine_loss(lgroup, &lsum, 1, ntok_global, &loss))) goto done;
    float norm; // over the stages' parts in canonical order (owners.h): the serial bits
    if ((rc = ts_grad_norm_owned(&sh.owners, gt, nt, &norm))) goto done;
    // A diverged step stops the run before its update: nothing non-finite is
    // applied, logged or checkpointed (every rank has the same loss and norm).
    if (!isfinite(loss) || !isfinite(norm)) {
      char kept[64] = "no checkpoint was written";
      if (saved > 0 && cfg.ckpt_dir[0])
        snprintf(kept, sizeof kept, "the checkpoint of step %" PRId64 " is kept", saved);
      rc = ts_fail(TS_ERUNTIME, "step %" PRIu64 ": loss %g, gradient norm %g (diverged): stopped "
                   "before its update, %s; try a smaller --lr", step, (double)loss, (double)norm,
                   kept);
      goto done;
    }
    ts_clip_tensors(gt, nt, norm, cfg.grad_clip);
    float lr = ts_lr_at(&cfg, s);
    if ((rc = ts_optimizer_step(&opt, pt, gt, nt, &cfg, s))) goto done;
    if ((rc = ts_shard_gather_params(&sh))) goto done; // --zero: every shard to every replica
    if (sh.pl && (rc = ts_pipeline_sync_copies(sh.pl, m, step))) goto done;
    double dt = ts_now() - t0;
    double comm_s = ts_grid_comm_seconds(grid);
    double tps = tokens / dt;
    // the busiest, the lightest and the mean rank's compute (with causal
    // attention a sequence's later segments are the heavier ones: busiest ÷
    // mean is the step's imbalance) and the largest memory; and the signal
    // any rank got (the launcher may have told one rank only), so that all
    // stop after this same step. One collective for them all: with more
    // ranks than cores each costs milliseconds.
    const double mine[3] = {dt - comm_s, ts_peak_rss_mb(), (double)ts_run_stop_requested()};
    double mx[3], mn[3], mean[3];
    ts_mpi_spread(mine, 3, mx, mn, mean);
    const double rss_max = mx[1];
    const int stop = (int)mx[2];
    double mfu = roof > 0 ? fpt * tps / (roof * 1e9 * grid->world_size) : 0.0;
    double rss = ts_peak_rss_mb();
    const step_stats st = {step, loss, norm, lr, tps, dt, comm_s, mx[0], mn[0], mean[0], mfu, rss,
                           rss_max};
    if ((rc = log_step(&log, &st, &cfg, &sh, grid, be, state))) goto done;
    int last = step == (uint64_t)cfg.steps;
    if ((cfg.eval_every > 0 && step % (uint64_t)cfg.eval_every == 0) || last) {
      if ((rc = evaluate_and_log(&log, &cfg, &sh, data, grid, step, inputs, targets))) goto done;
    }
    if (cfg.ckpt_dir[0] &&
        ((cfg.ckpt_every > 0 && step % (uint64_t)cfg.ckpt_every == 0) || last || stop)) {
      // the log's records up to this step are on disk before the checkpoint is
      if (root && (rc = ts_log_sync(&log))) goto done;
      // every owner writes its part (without --zero the first data replica's
      // stages and sequence ranks: the others hold the same)
      if ((sh.zero || grid->dp_rank == 0) &&
          (rc = ts_run_save_checkpoint(&sh.owners, m, &opt, sh.upd_p, sh.nupd, &cfg,
                                       (int64_t)step)))
        goto done;
      // the older ones go once this one is in place (rank 0 renamed it)
      if (root && cfg.keep_last > 0 &&
          (rc = ts_run_prune_checkpoints(cfg.ckpt_dir, (int64_t)step, cfg.keep_last)))
        goto done;
      saved = (int64_t)step;
    }
    // After the last step the run is complete: nothing is left to resume.
    if (stop && !last) {
      rc = stopped(&log, &cfg, stop, step);
      goto done;
    }
  }
  {
    char line[256];
    uint64_t hash;
    if ((rc = ts_run_param_hash(&sh.owners, m, &hash))) goto done;
    snprintf(line, sizeof line, "{\"type\":\"final\",\"step\":%d,\"param_hash\":\"%016" PRIx64 "\"}",
             cfg.steps, hash);
    if ((rc = ts_log_line(&log, line))) goto done;
    if (!cfg.quiet) printf("done: parameter hash %016" PRIx64 "\n", hash);
  }
  rc = ts_log_close(&log);
done:
  ts_run_stop_restore();
  if (log.f) fclose(log.f); // open only after an error, which is the one reported
  ts_run_close_checkpoint(&ck);
  ts_run_free_ranks(&ranks);
  free(start_line);
  free(inputs); free(targets);
  ts_adamw_free(&opt);
  ts_shard_free(&sh);
  ts_data_close(data);
  ts_grid_free(grid);
  return rc;
}
