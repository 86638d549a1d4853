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

#include "backend/backend.h"
#include "backend/mem.h"
#include "boundary/boundary.h"
#include "base/util.h"
#include "cp/strategy.h"
#include "dist/grid.h"
#include "log.h"
#include "run.h"

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
  ts_tensor c;
  for (int i = 0; ts_model_copy(m, i, &c); i++) params += (double)ts_tensor_numel(&c);
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
  char comm_json[4096], mem_json[384], pipe_json[256], dev_json[64] = "";
  if (ts_grid_counts_json(grid, comm_json, sizeof comm_json) < 0) snprintf(comm_json, sizeof comm_json, "{}");
  phase_peaks_json(mem_json, sizeof mem_json);
  // what the fit check counts beyond state_bytes (ts_mem_estimate incall,
  // comm_buffers): the attention calls' own buffers at their most, the
  // groups' packing buffers as they stand (rank 0's)
  const size_t used = strlen(mem_json);
  snprintf(mem_json + used, sizeof mem_json - used,
           ",\"incall_bytes\":%zu,\"comm_buffer_bytes\":%zu", ts_mem_alloc_peak(),
           ts_grid_buffer_bytes(grid));
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

// A run in progress: what the steps of ts_train share.
typedef struct {
  ts_config cfg;
  ts_layout lay;
  ts_grid *grid;
  ts_data *data;
  ts_shard sh;
  ts_adamw opt;
  ts_log log;
  ts_run_ckpt ck; // --resume or --init-from: open from the checks until loaded
  ts_run_ranks ranks;
  int *inputs, *targets; // this rank's batch
  int root;              // rank 0 alone talks to people and files
  int shards;            // --zero: the state's shards (1 without)
  int64_t start;         // the step the run starts after (a resumed one's)
  int64_t saved;         // the latest checkpoint's step (0: none)
  const ts_backend *be;
  double roof, fpt; // the roof MFU is measured against (0: none) and FLOPs a token
  double roof_blas; // OpenBLAS's sgemm rate alone (0: none), the other roof reported
  char state[320];  // the step record's state_bytes member
  char layout[64];  // the layout's name
} trainer;

// The layout's rules and its process grid; threads, memory shares and the
// signal handlers of this process.
static int setup(trainer *t, const ts_config *cfg_in, const ts_layout *lay_in) {
  t->cfg = *cfg_in;
  t->lay = lay_in ? *lay_in
                  : (ts_layout){.dp = 1, .sp = 1, .pp = 1, .sp_mode = TS_SP_LSS,
                                .upipe_sched = -1, .microbatches = 1};
  int rc;
  if ((rc = ts_layout_check(&t->cfg, &t->lay, ts_backend_current()->name)) ||
      (rc = ts_grid_create(t->lay.dp, t->lay.sp, t->lay.pp, &t->grid)))
    return rc;
  // mapl-vq's stream by microbatch: the model's microbatches are the data
  // ranks' in global order, so a step has --dp x --microbatches of them (the
  // serial run with --microbatches M equals every layout of M; a resumed run
  // must have the checkpoint's)
  if (t->cfg.vq_stream_microbatches < 0) t->cfg.vq_stream_microbatches = t->lay.dp * t->lay.microbatches;
  ts_run_setup_threads(&t->cfg, t->grid->local_size);
  ts_model_set_memory_share(t->grid->local_size); // the node's ranks share its memory
  t->shards = t->lay.zero ? t->grid->replica->size : 1;
  ts_model_set_state_shards(t->shards, t->lay.zero, t->lay.dp);
  t->root = t->grid->world_rank == 0;
  if (!t->root) t->cfg.quiet = 1;
  ts_run_stopped(0);
  ts_run_stop_install(!t->cfg.quiet);
  return TS_OK;
}

// Everything the run reads, checked before anything is allocated: that the
// model fits, the checkpoint it resumes or starts from, the data and its
// tokenizer; then that every rank agrees, and the checkpoint directory is
// this run's.
static int open_inputs(trainer *t) {
  ts_config *cfg = &t->cfg;
  const ts_grid *grid = t->grid;
  int rc;
  // a tensor split's ranks hold blocks of the layers' matrices (cp.h `split`)
  const int split = grid->sp > 1 && ts_cp_get(t->lay.sp_mode)->split ? grid->sp : 1;
  if ((rc = ts_run_check_fit(cfg, 1, grid->local_size, grid->pp, t->shards, t->lay.zero, split)))
    return rc;
  // (--resume: the checkpoint's data unless --data, resolved there)
  if (cfg->resume && (rc = ts_run_open_resume(cfg, grid->local_size, grid->pp, &t->ck))) return rc;
  if (cfg->resume && !t->ck.ck) { // so that a job script can always pass --resume
    if (t->root) printf("--resume: no checkpoint in %s yet: starting at step 0\n", cfg->ckpt_dir);
    cfg->resume = 0;
  }
  if (cfg->resume && t->ck.cfg.steps != cfg->steps && t->root)
    printf("--resume: --steps %d, the checkpoint's run had %d: the learning rate of steps %"
           PRId64 "..%d follows the schedule of a %d-step run\n", cfg->steps, t->ck.cfg.steps,
           t->ck.step + 1, cfg->steps, cfg->steps);
  if (cfg->init_from[0] && (rc = ts_run_open_init(cfg, grid->local_size, grid->pp, &t->ck)))
    return rc;
  // the format the files are read in, which the run records and a resumed
  // run must share (a look at their first bytes; the whole files come later)
  if ((rc = ts_data_resolve(cfg->data_path, cfg->val_path, cfg->data_format, &cfg->data_format)) ||
      (rc = ts_data_check_vocab(cfg->data_format, cfg->vocab, cfg->data_path)))
    return rc;
  // the tokenizer the data was made with, for its checkpoints (--tokenizer)
  if ((rc = ts_run_checkpoint_tokenizer(cfg))) return rc;
  if (cfg->resume && (rc = ts_run_check_resume_tokenizer(&t->ck))) return rc;
  if (cfg->init_from[0] && (rc = ts_run_check_init_source(&t->ck, cfg))) return rc;
  if ((rc = ts_run_open_data(cfg, cfg->data_path, &t->data))) return rc;
  if ((rc = injected_fault(grid, cfg->data_path))) return rc;
  ts_run_checkpoint_data(t->data);
  if (cfg->resume && (rc = ts_run_check_resume_data(&t->ck, t->data))) return rc;
  // every rank with the same computation, data and checkpoint, before any work
  if ((rc = ts_run_agree(cfg, &t->lay, t->data, &t->ck))) return rc;
  // --ckpt-dir: made, locked and checked before step 1, once the ranks agree
  // (--restart removes checkpoints); then what a killed run left there
  // (the directory's run lineage: continued on --resume, else a new one,
  // which every rank's checkpoints record)
  if ((rc = ts_run_root_verdict(t->root ? ts_run_claim_ckpt_dir(cfg, &t->ck) : TS_OK))) return rc;
  if (cfg->ckpt_dir[0] && (rc = ts_run_share_lineage())) return rc;
  if (t->root) {
    int gone = ts_run_remove_stale_temps(cfg);
    if (gone && !cfg->quiet) printf("removed %d temporary file%s a killed run left\n", gone,
                                    gone == 1 ? "" : "s");
  }
  // which process on which host is which rank, for the log and the output
  return ts_run_gather_ranks(&t->ranks);
}

// This rank's share of the model (shard.h), initialised, resumed or loaded;
// the optimizer's state for what it updates; the batch's buffers.
static int build_state(trainer *t) {
  int rc;
  if ((rc = ts_shard_create(&t->cfg, t->grid, &t->lay, &t->sh))) return rc;
  ts_model_init(t->sh.m, t->cfg.seed);
  ts_zero_release(&t->sh); // --zero 3: the layers' parameters but this rank's shard
  // what this rank updates: its stage's tensors, or under --zero its shard of
  // them (shard.h), with moments for those alone
  if ((rc = ts_adamw_init(&t->opt, t->sh.nupd_floats))) return rc;
  const size_t nbatch = (size_t)(t->cfg.batch / t->grid->dp) * (size_t)t->cfg.seq;
  t->inputs = malloc(nbatch * sizeof(int));
  t->targets = malloc(nbatch * sizeof(int));
  if (!t->inputs || !t->targets) return ts_fail(TS_ERUNTIME, "out of memory");
  state_json(&t->sh, &t->opt, t->state, sizeof t->state);
  t->start = t->saved = t->cfg.resume ? t->ck.step : 0;
  if (t->cfg.resume && (rc = resume(&t->sh, &t->opt, &t->ck, &t->cfg, t->root))) return rc;
  if (t->cfg.init_from[0] && (rc = init_weights(&t->sh, &t->ck, t->root))) return rc;
  if (t->cfg.resume || t->cfg.init_from[0]) ts_zero_release(&t->sh); // --zero 3: own shards
  ts_run_close_checkpoint(&t->ck);
  return TS_OK;
}

// The log's first record (a resumed run's: its own start, whose layout and
// processes may differ, which compare skips like the first) and the
// run's banner.
static int open_log(trainer *t) {
  const ts_config *cfg = &t->cfg;
  const ts_grid *grid = t->grid;
  // MFU counts every rank's cores: the roof is one process's, times the world.
  // On a GPU the roof is the device's, which is not measured here (0: no MFU
  // in the log; bench/gpu.sh divides by the datasheet peak).
  t->be = ts_backend_current();
  t->roof = t->root && t->be == &ts_backend_cpu ? ts_run_sgemm_roof(&t->roof_blas) : 0.0;
  t->fpt = ts_model_flops_per_token(t->sh.m);
  const size_t np_model = ts_model_canonical_params(t->sh.m); // the canonical model's size
  int rc;
  if ((rc = ts_log_open(&t->log, t->root ? cfg->log_path : NULL, t->start > 0))) return rc;
  layout_name(grid, &t->lay, t->layout, sizeof t->layout);
  ts_run_checkpoint_layout(t->layout);
  const size_t cap = TS_CONFIG_JSON_MAX + 512 + strlen(t->ranks.json) +
                     strlen(ts_run_tokenizer_id());
  char *line = malloc(cap), *cj = malloc(TS_CONFIG_JSON_MAX);
  if (!line || !cj) rc = ts_fail(TS_ERUNTIME, "out of memory");
  else if (t->start > 0)
    snprintf(line, cap,
             "{\"type\":\"resume\",\"step\":%" PRId64 ",\"world\":%d,\"layout\":\"%s\","
             "\"ranks\":%s}", t->start, grid->world_size, t->layout, t->ranks.json);
  else if (!(rc = ts_config_to_json(cfg, cj, TS_CONFIG_JSON_MAX))) {
    const char *tokenizer = ts_run_tokenizer_id(); // "": none named, the field left out
    snprintf(line, cap,
             "{\"type\":\"config\",\"version\":\"%s\",\"world\":%d,\"layout\":\"%s\","
             "\"device\":\"%s\",\"precision\":\"%s\",\"comm\":\"%s\",\"params\":%zu,"
             "\"flops_per_token\":%.6g,\"roof_gflops\":%.1f,\"roof_blas_gflops\":%.1f,"
             "\"ranks\":%s,\"model\":%s%s%s}",
             TS_VERSION_STRING, grid->world_size, t->layout, t->be->name,
             ts_backend_precision_name(),
             grid->world_size == 1 ? "none" : ts_backend_uses_nccl() ? "nccl" : "mpi", np_model,
             t->fpt, t->roof, t->roof_blas, t->ranks.json, cj, tokenizer[0] ? ",\"tokenizer\":" : "",
             tokenizer);
  }
  if (!rc) rc = ts_log_line(&t->log, line);
  free(line);
  free(cj);
  if (rc) return rc;
  if (!cfg->quiet)
    printf("tessera train: %s, %zu parameters, B=%d T=%d, %d steps, %s (%d rank%s x %d threads), "
           "tile %d, leaf %d, sgemm roof %.0f GFLOP/s\n",
           cfg->preset, np_model, cfg->batch, cfg->seq, cfg->steps, t->layout, grid->world_size,
           grid->world_size == 1 ? "" : "s", omp_get_max_threads(), cfg->tile, cfg->leaf,
           t->roof);
  if (!cfg->quiet && grid->world_size > 1) printf("%s\n", t->ranks.text);
  return TS_OK;
}

// A diverged step stops the run before its update: nothing non-finite is
// applied, logged or checkpointed (every rank has the same loss and norm).
static int check_finite(const trainer *t, uint64_t step, float loss, float norm) {
  if (isfinite(loss) && isfinite(norm)) return TS_OK;
  char kept[64] = "no checkpoint was written";
  if (t->saved > 0 && t->cfg.ckpt_dir[0])
    snprintf(kept, sizeof kept, "the checkpoint of step %" PRId64 " is kept", t->saved);
  return ts_fail(TS_ERUNTIME, "step %" PRIu64 ": loss %g, gradient norm %g (diverged): stopped "
                 "before its update, %s; try a smaller --lr", step, (double)loss, (double)norm,
                 kept);
}

// Step s + 1 (docs/ARCHITECTURE.md "One step"): this rank's share of the
// batch, forward and backward, the gradients summed over the sequence and
// data groups (shard.h), the loss and the norm, clipping and the update.
static int step_update(trainer *t, int64_t s, step_stats *st) {
  const uint64_t step = (uint64_t)s + 1;
  ts_shard *sh = &t->sh;
  float lsum;
  int rc;
  ts_grid_reset_counts(t->grid);
  ts_mem_reset_peaks();
  st->step = step;
  if ((rc = ts_run_load_shard(t->data, TS_SPLIT_TRAIN, &t->cfg, step, sh, t->inputs, t->targets)) ||
      (rc = ts_shard_pass(sh, t->inputs, t->targets, step, 1, &lsum)) ||
      (rc = ts_shard_sync_grads(sh, t->grid->data)))
    return rc;
  // (in rounds, the shard's sum is the global one already)
  ts_comm *lgroup = t->grid->dp > 1 && !sh->strided ? t->grid->data : NULL;
  const int64_t ntok = (int64_t)t->cfg.batch * t->cfg.seq;
  if ((rc = ts_run_combine_loss(lgroup, &lsum, 1, ntok, &st->loss))) return rc;
  // over the stages' parts in canonical order (owners.h): the serial bits
  if ((rc = ts_grad_norm_owned(&sh->owners, sh->upd_g, sh->nupd, &st->norm)) ||
      (rc = check_finite(t, step, st->loss, st->norm)))
    return rc;
  ts_clip_tensors(sh->upd_g, sh->nupd, st->norm, t->cfg.grad_clip);
  st->lr = ts_lr_at(&t->cfg, s);
  if ((rc = ts_optimizer_step(&t->opt, sh->upd_p, sh->upd_g, sh->nupd, &t->cfg, s)) ||
      (rc = ts_shard_gather_params(sh)) || // --zero: every shard to every replica
      (rc = ts_model_boundary_after_step(sh->m, sh->pl ? sh->pl->pipe : NULL, step)))
    return rc;
  if (sh->pl) rc = ts_pipeline_sync_copies(sh->pl, sh->m, step);
  return rc;
}

// The step's time, the ranks' spread of compute and memory, and the signal
// any rank got (the launcher may have told one rank only), so that all stop
// after this same step: returns that signal (0: none). With causal attention
// a sequence's later segments are the heavier ones: busiest ÷ mean compute is
// the step's imbalance. One collective for them all: with more ranks than
// cores each costs milliseconds.
static int measure_step(const trainer *t, double dt, step_stats *st) {
  st->dt = dt;
  st->comm_s = ts_grid_comm_seconds(t->grid);
  st->tps = (double)t->cfg.batch * t->cfg.seq / dt;
  const double mine[3] = {dt - st->comm_s, ts_peak_rss_mb(), (double)ts_run_stop_requested()};
  double mx[3], mn[3], mean[3];
  ts_mpi_spread(mine, 3, mx, mn, mean);
  st->compute_max = mx[0];
  st->compute_min = mn[0];
  st->compute_mean = mean[0];
  st->rss_max = mx[1];
  st->mfu = t->roof > 0 ? t->fpt * st->tps / (t->roof * 1e9 * t->grid->world_size) : 0.0;
  st->rss = ts_peak_rss_mb();
  return (int)mx[2];
}

// After the update: the step's record, the validation loss and the
// checkpoint when due; a stop requested on any rank ends the run here.
static int after_step(trainer *t, const step_stats *st, int stop) {
  const ts_config *cfg = &t->cfg;
  const uint64_t step = st->step;
  const int last = step == (uint64_t)cfg->steps;
  int rc;
  if ((rc = log_step(&t->log, st, cfg, &t->sh, t->grid, t->be, t->state))) return rc;
  if (((cfg->eval_every > 0 && step % (uint64_t)cfg->eval_every == 0) || last) &&
      (rc = evaluate_and_log(&t->log, cfg, &t->sh, t->data, t->grid, step, t->inputs, t->targets)))
    return rc;
  if (cfg->ckpt_dir[0] &&
      ((cfg->ckpt_every > 0 && step % (uint64_t)cfg->ckpt_every == 0) || last || stop)) {
    // the log's records up to this step are on disk before the checkpoint is
    if (t->root && (rc = ts_log_sync(&t->log))) return rc;
    // every owner writes its part (without --zero the first data replica's
    // stages and sequence ranks: the others hold the same)
    if ((t->sh.zero || t->grid->dp_rank == 0) &&
        (rc = ts_run_save_checkpoint(&t->sh.owners, t->sh.m, &t->opt, t->sh.upd_p, t->sh.nupd,
                                     cfg, (int64_t)step)))
      return rc;
    // the older ones go once this one is in place (rank 0 renamed it)
    if (t->root && cfg->keep_last > 0 &&
        (rc = ts_run_prune_checkpoints(cfg->ckpt_dir, (int64_t)step, cfg->keep_last)))
      return rc;
    t->saved = (int64_t)step;
  }
  // After the last step the run is complete: nothing is left to resume.
  return stop && !last ? stopped(&t->log, cfg, stop, step) : TS_OK;
}

// The run complete: the final record, with the parameters' hash.
static int finish_run(trainer *t) {
  char line[256];
  uint64_t hash;
  int rc;
  if ((rc = ts_run_param_hash(&t->sh.owners, t->sh.m, &hash))) return rc;
  snprintf(line, sizeof line, "{\"type\":\"final\",\"step\":%d,\"param_hash\":\"%016" PRIx64 "\"}",
           t->cfg.steps, hash);
  if ((rc = ts_log_line(&t->log, line))) return rc;
  if (!t->cfg.quiet) printf("done: parameter hash %016" PRIx64 "\n", hash);
  return ts_log_close(&t->log);
}

static void trainer_free(trainer *t) {
  ts_run_stop_restore();
  if (t->log.f) fclose(t->log.f); // open only after an error, which is the one reported
  ts_run_close_checkpoint(&t->ck);
  ts_run_free_ranks(&t->ranks);
  free(t->inputs);
  free(t->targets);
  ts_adamw_free(&t->opt);
  ts_shard_free(&t->sh);
  ts_data_close(t->data);
  ts_grid_free(t->grid);
}

int ts_train(const ts_config *cfg_in, const ts_layout *lay_in) {
  trainer t = {0};
  int rc = setup(&t, cfg_in, lay_in);
  if (!rc) rc = open_inputs(&t);
  if (!rc) rc = build_state(&t);
  if (!rc) rc = open_log(&t);
  for (int64_t s = t.start; !rc && s < t.cfg.steps; s++) {
    step_stats st = {0};
    const double t0 = ts_now();
    if ((rc = step_update(&t, s, &st))) break;
    const int stop = measure_step(&t, ts_now() - t0, &st);
    rc = after_step(&t, &st, stop);
  }
  if (!rc) rc = finish_run(&t);
  if (t.grid) trainer_free(&t);
  return rc;
}
