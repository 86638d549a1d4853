// Runs: training (with checkpoints, resume and the JSONL log), evaluation and
// the golden-file dump.
//
// Training runs serially or data-parallel (--dp D under mpiexec): rank d of
// the data group holds sequences [d·B/D, (d+1)·B/D) of the global batch,
// runs forward and backward on them, and the gradients are summed over the
// group by the canonical tree (comm.h), which equals the serial tree because
// every rank's leaves are an aligned power-of-two subtree (config.c checks
// it). The loss is combined the same way. Optimizer steps then run on every
// rank identically; rank 0 alone prints, logs and writes checkpoints.
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include <cblas.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend.h"
#include "ckpt.h"
#include "comm.h"
#include "data.h"
#include "kernels.h"
#include "log.h"
#include "mem.h"
#include "optim.h"
#include "parallel/cp.h"
#include "parallel/grid.h"
#include "parallel/shard.h"
#include "tessera.h"
#include "tree.h"
#include "util.h"

// Validation windows are keyed by steps far above any training step.
#define TS_EVAL_STEP_BASE (1ull << 39)

// The exactness contract wants single-threaded BLAS inside OpenMP tile loops.
// The thread count never changes a result; by default the ranks on one node
// share its threads.
static void setup_threads(const ts_config *cfg, int local_ranks) {
  if (cfg->threads > 0) {
    omp_set_num_threads(cfg->threads);
  } else if (local_ranks > 1) {
    int t = omp_get_max_threads() / local_ranks;
    omp_set_num_threads(t > 0 ? t : 1);
  }
  openblas_set_num_threads(1);
}

// Measured roof for MFU: 1024^3 sgemm on all threads, one warm-up call (it
// pays for page faults and thread start-up), then the best of eight.
static double measure_sgemm_roof(void) {
  const int n = 1024;
  float *a = ts_alloc((size_t)n * n * sizeof(float)), *b = ts_alloc((size_t)n * n * sizeof(float)),
        *c = ts_alloc((size_t)n * n * sizeof(float));
  if (!a || !b || !c) { ts_free(a); ts_free(b); ts_free(c); return 0.0; }
  for (size_t i = 0; i < (size_t)n * n; i++) { a[i] = 1e-3f * (float)(i % 97); b[i] = 1e-3f * (float)(i % 89); }
  openblas_set_num_threads(omp_get_max_threads());
  double best = 0.0;
  for (int r = 0; r < 9; r++) {
    double t0 = ts_now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    double dt = ts_now() - t0;
    double gf = 2.0 * n * n * (double)n / dt / 1e9;
    if (r > 0 && gf > best) best = gf;
  }
  openblas_set_num_threads(1);
  ts_free(a); ts_free(b); ts_free(c);
  return best;
}

static int load_batch(const ts_data *data, int split, const ts_config *cfg, uint64_t step,
                      int b0, int nb, int *inputs, int *targets) {
  for (int j = 0; j < nb; j++) {
    int rc = ts_data_window(data, split, cfg->seed, step, (uint64_t)(b0 + j), cfg->seq,
                            inputs + (size_t)j * cfg->seq, targets + (size_t)j * cfg->seq);
    if (rc) return rc;
  }
  return TS_OK;
}

// The global batch's loss from the shards' loss sums, each an aligned subtree
// of the serial loss tree: the tree over the group's sums, divided by the
// global token count exactly as the serial forward divides.
static int combine_loss(ts_comm *group, const float *local, int n, int64_t ntok_global,
                        float *out) {
  int P = group ? group->size : 1;
  float *all = malloc((size_t)P * n * sizeof(float)), *col = malloc((size_t)P * sizeof(float));
  if (!all || !col) { free(all); free(col); return ts_fail(TS_ERUNTIME, "out of memory"); }
  int rc = TS_OK;
  if (group)
    rc = ts_comm_allgather(group, local, all, (size_t)n * sizeof(float), -1); // all (P, n)
  else
    memcpy(all, local, (size_t)n * sizeof(float));
  for (int i = 0; i < n && !rc; i++) {
    for (int r = 0; r < P; r++) col[r] = all[(size_t)r * n + i];
    out[i] = ts_tree_sum(col, (size_t)P) / (float)ntok_global;
  }
  free(all);
  free(col);
  return rc;
}

static uint64_t param_hash(ts_model *m) {
  return ts_fnv1a64(TS_FNV_OFFSET, ts_model_params(m), ts_model_num_params(m) * sizeof(float));
}

// Mean validation loss over cfg->eval_batches batches (fixed windows). Each
// rank (serial: the only one) evaluates its shard of every batch; the batch
// losses are combined as in training, then averaged in order.
static int evaluate(ts_shard *sh, const ts_data *data, const ts_config *cfg, ts_comm *group,
                    int *inputs, int *targets, float *out) {
  int E = cfg->eval_batches;
  float *sums = calloc((size_t)E, sizeof(float)), *losses = calloc((size_t)E, sizeof(float));
  if (!sums || !losses) { free(sums); free(losses); return ts_fail(TS_ERUNTIME, "out of memory"); }
  int rc = TS_OK;
  for (int i = 0; i < E && !rc; i++) {
    rc = load_batch(data, TS_SPLIT_VAL, cfg, TS_EVAL_STEP_BASE + (uint64_t)i, sh->b0, sh->nb,
                    inputs, targets);
    if (!rc) rc = ts_shard_pass(sh, inputs, targets, 0, 0, &sums[i]);
  }
  if (!rc) rc = combine_loss(group, sums, E, (int64_t)cfg->batch * cfg->seq, losses);
  if (!rc) {
    float sum = 0.0f;
    for (int i = 0; i < E; i++) sum += losses[i];
    *out = sum / (float)E;
  }
  free(sums);
  free(losses);
  return rc;
}

// ---- checkpoints ---------------------------------------------------------------------
static int mkdir_p(const char *dir) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s", dir);
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(tmp, 0777) != 0 && errno != EEXIST)
      return ts_fail(TS_ERUNTIME, "cannot create directory %s: %s", tmp, strerror(errno));
    *p = '/';
  }
  if (mkdir(tmp, 0777) != 0 && errno != EEXIST)
    return ts_fail(TS_ERUNTIME, "cannot create directory %s: %s", tmp, strerror(errno));
  return TS_OK;
}

// Parameters, then the AdamW moments as "adam.m.<name>" / "adam.v.<name>".
static int ckpt_tensors(ts_model *m, ts_adamw *opt, ts_tensor **out) {
  int n = ts_model_num_tensors(m);
  ts_tensor *t = calloc((size_t)3 * n, sizeof(ts_tensor));
  if (!t) return -1;
  ts_model_tensors(m, t, NULL);
  size_t off = 0;
  for (int i = 0; i < n; i++) {
    for (int k = 1; k <= 2; k++) {
      ts_tensor *s = &t[k * n + i];
      *s = t[i];
      snprintf(s->name, sizeof s->name, "adam.%c.%s", k == 1 ? 'm' : 'v', t[i].name);
      s->data = (k == 1 ? opt->m : opt->v) + off;
    }
    off += (size_t)ts_tensor_numel(&t[i]);
  }
  *out = t;
  return 3 * n;
}

static int save_checkpoint(ts_model *m, ts_adamw *opt, const ts_config *cfg, int64_t step) {
  int rc = mkdir_p(cfg->ckpt_dir);
  if (rc) return rc;
  char cfgjson[TS_CONFIG_JSON_MAX], stepbuf[32], optbuf[32], path[4200];
  if ((rc = ts_config_to_json(cfg, cfgjson, sizeof cfgjson))) return rc;
  ts_tensor *t;
  int n = ckpt_tensors(m, opt, &t);
  if (n < 0) return ts_fail(TS_ERUNTIME, "out of memory writing a checkpoint");
  snprintf(stepbuf, sizeof stepbuf, "%" PRId64, step);
  snprintf(optbuf, sizeof optbuf, "%" PRIu64, opt->step);
  ts_meta meta[] = {
      {"tessera.config", cfgjson},
      {"tessera.step", stepbuf},
      {"tessera.adam_step", optbuf},
      // Data windows and dropout masks are pure functions of (seed, step,
      // index): the step is the whole data position and generator state.
      {"tessera.data_position", stepbuf},
      {"tessera.rng", "philox4x32-10 counter-based, keyed by (seed, purpose, step, index)"},
  };
  snprintf(path, sizeof path, "%s/step-%08" PRId64 ".safetensors", cfg->ckpt_dir, step);
  rc = ts_ckpt_write(path, t, n, meta, (int)(sizeof meta / sizeof meta[0]));
  free(t);
  return rc;
}

// Highest-numbered step-*.safetensors in dir; 0 and path "" when none.
static int64_t latest_checkpoint(const char *dir, char *path, size_t cap) {
  DIR *d = opendir(dir);
  path[0] = 0;
  if (!d) return -1;
  int64_t best = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    long long s;
    char tail[64];
    if (sscanf(e->d_name, "step-%lld.%63s", &s, tail) == 2 && strcmp(tail, "safetensors") == 0 &&
        s > best) {
      best = s;
      if ((size_t)snprintf(path, cap, "%s/%s", dir, e->d_name) >= cap) path[0] = 0;
    }
  }
  closedir(d);
  return best;
}

// The fields that must agree for a resumed run to continue the same run.
static int check_resume_config(const ts_config *cfg, const char *json, const char *path) {
  ts_config old = *cfg;
  // the fields a config writes only when set: absent means 0, not this run's value
  old.optimizer = 0, old.muon_lr = 0.0f;
  old.compress = old.compress_rank = old.compress_stages = 0, old.proj_lr = 0.0f;
  old.vq_groups = old.vq_rounds = old.vq_codes = old.vq_sync_codes = 0;
  old.vq_gamma = old.vq_commit = 0.0f;
  if (ts_config_from_json(&old, json) != TS_OK)
    return ts_fail(TS_ERUNTIME, "checkpoint %s: unreadable configuration", path);
#define SAME_INT(F, FLAG)                                                                 \
  if (old.F != cfg->F)                                                                    \
    return ts_fail(TS_EUSAGE, "--resume: checkpoint %s was written with %s %lld, this run has %lld", \
                   path, FLAG, (long long)old.F, (long long)cfg->F);
#define SAME_FLT(F, FLAG)                                                                 \
  if (memcmp(&old.F, &cfg->F, sizeof(float)) != 0)                                         \
    return ts_fail(TS_EUSAGE, "--resume: checkpoint %s was written with %s %g, this run has %g", \
                   path, FLAG, (double)old.F, (double)cfg->F);
  SAME_INT(vocab, "vocab") SAME_INT(d, "--d") SAME_INT(n_layer, "--layers")
  SAME_INT(n_head, "--heads") SAME_INT(d_ff, "--d-ff") SAME_INT(seq, "--seq")
  SAME_INT(tied, "--tied") SAME_INT(batch, "--batch") SAME_INT(steps, "--steps")
  SAME_INT(seed, "--seed") SAME_INT(tile, "--tile") SAME_INT(leaf, "--leaf")
  SAME_INT(warmup, "--warmup") SAME_INT(optimizer, "--optimizer")
  SAME_FLT(dropout, "--dropout") SAME_FLT(lr, "--lr") SAME_FLT(min_lr_frac, "--min-lr-frac")
  SAME_FLT(weight_decay, "--weight-decay") SAME_FLT(beta1, "beta1") SAME_FLT(beta2, "beta2")
  SAME_FLT(eps, "eps") SAME_FLT(grad_clip, "--grad-clip") SAME_FLT(val_frac, "--val-frac")
  SAME_FLT(muon_lr, "--muon-lr")
  if (old.compress != cfg->compress && old.compress >= 0 && old.compress < TS_COMPRESS_NMODES)
    return ts_fail(TS_EUSAGE, "--resume: checkpoint %s was written with --compress %s, this run "
                   "has %s", path, ts_compress_names[old.compress],
                   ts_compress_names[cfg->compress]);
  SAME_INT(compress, "--compress") SAME_INT(compress_rank, "--rank")
  SAME_INT(compress_stages, "--compress-stages") SAME_FLT(proj_lr, "--proj-lr")
  SAME_INT(vq_groups, "--vq-group") SAME_INT(vq_rounds, "--vq-rounds")
  SAME_INT(vq_codes, "--vq-codes") SAME_INT(vq_sync_codes, "--vq-sync-codes")
  SAME_FLT(vq_gamma, "--vq-gamma") SAME_FLT(vq_commit, "--vq-commit")
#undef SAME_INT
#undef SAME_FLT
  return TS_OK;
}

static int load_checkpoint(ts_model *m, ts_adamw *opt, const ts_config *cfg, const char *path,
                           int64_t *step_out) {
  ts_ckpt *ck;
  int rc = ts_ckpt_open(path, &ck);
  if (rc) return rc;
  const char *js = ts_ckpt_meta(ck, "tessera.config");
  const char *st = ts_ckpt_meta(ck, "tessera.step");
  const char *os = ts_ckpt_meta(ck, "tessera.adam_step");
  if (!js || !st || !os) {
    ts_ckpt_close(ck);
    return ts_fail(TS_ERUNTIME, "checkpoint %s: missing tessera metadata", path);
  }
  if ((rc = check_resume_config(cfg, js, path))) { ts_ckpt_close(ck); return rc; }
  ts_tensor *t;
  int n = ckpt_tensors(m, opt, &t);
  if (n < 0) { ts_ckpt_close(ck); return ts_fail(TS_ERUNTIME, "out of memory"); }
  for (int i = 0; i < n && !rc; i++) rc = ts_ckpt_load(ck, &t[i]);
  free(t);
  if (!rc) {
    *step_out = strtoll(st, NULL, 10);
    opt->step = strtoull(os, NULL, 10);
  }
  ts_ckpt_close(ck);
  return rc;
}

// On resume, the log keeps the records up to the checkpoint and continues,
// so that a resumed run's log equals the log of the run done straight.
static int trim_log(const char *path, int64_t upto) {
  FILE *f = fopen(path, "r");
  if (!f) return TS_OK; // no old log: start a new one
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
  FILE *o = fopen(tmp, "w");
  if (!o) { fclose(f); return ts_fail(TS_ERUNTIME, "cannot write %s: %s", tmp, strerror(errno)); }
  char *line = NULL;
  size_t cap = 0;
  while (getline(&line, &cap, f) > 0) {
    const char *sp = strstr(line, "\"step\":");
    long long s = sp ? strtoll(sp + 7, NULL, 10) : 0;
    int is_final = strstr(line, "\"type\":\"final\"") != NULL;
    if (!is_final && s <= upto) fputs(line, o);
  }
  free(line);
  fclose(f);
  if (fclose(o) != 0 || rename(tmp, path) != 0) {
    unlink(tmp);
    return ts_fail(TS_ERUNTIME, "cannot rewrite log %s: %s", path, strerror(errno));
  }
  return TS_OK;
}

// ---- training ------------------------------------------------------------------------
// A hidden hook for the tests of failure handling: the rank named by
// TESSERA_FAULT_RANK fails as if its data file were unreadable, while the
// others go on into the first collective. The run must still end at once.
static int injected_fault(const ts_grid *g, const char *path) {
  const char *v = getenv("TESSERA_FAULT_RANK");
  if (!v || !*v || atoi(v) != g->world_rank) return TS_OK;
  return ts_fail(TS_ERUNTIME, "cannot read %s: fault injected on this rank (TESSERA_FAULT_RANK)",
                 path);
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
  int *inputs = NULL, *targets = NULL;
  ts_tensor *pt = NULL, *gt = NULL;
  if ((rc = ts_layout_check(&cfg, &lay)) || (rc = ts_grid_create(lay.dp, lay.sp, lay.pp, &grid)))
    return rc;
  setup_threads(&cfg, grid->local_size);
  ts_model_set_memory_share(grid->local_size); // the node's ranks share its memory
  // rank 0 alone talks to people and files
  const int root = grid->world_rank == 0;
  if (!root) cfg.quiet = 1;
  const int D = grid->dp, nb = cfg.batch / D, b0 = grid->dp_rank * nb;
  ts_comm *dgroup = grid->data;
  if ((rc = ts_data_open(cfg.data_path, cfg.val_frac, (size_t)cfg.seq + 1, &data))) goto done;
  if ((rc = injected_fault(grid, cfg.data_path))) goto done;
  if ((rc = ts_shard_create(&cfg, grid, &lay, &sh))) goto done;
  m = sh.m;
  ts_model_init(m, cfg.seed);
  size_t np = ts_model_num_params(m);
  if ((rc = ts_adamw_init(&opt, np))) goto done;
  int nt = ts_model_num_tensors(m);
  pt = calloc((size_t)nt, sizeof *pt);
  gt = calloc((size_t)nt, sizeof *gt);
  inputs = malloc((size_t)nb * cfg.seq * sizeof(int));
  targets = malloc((size_t)nb * cfg.seq * sizeof(int));
  if (!pt || !gt || !inputs || !targets) { rc = ts_fail(TS_ERUNTIME, "out of memory"); goto done; }
  ts_model_tensors(m, pt, gt);

  // Every rank reads the checkpoint (parameters and moments are replicated).
  int64_t start = 0;
  if (cfg.resume) {
    char path[4200];
    int64_t s = latest_checkpoint(cfg.ckpt_dir, path, sizeof path);
    if (s < 0) { rc = ts_fail(TS_ERUNTIME, "--resume: cannot open checkpoint directory %s", cfg.ckpt_dir); goto done; }
    if (s == 0) { rc = ts_fail(TS_ERUNTIME, "--resume: no checkpoint (step-*.safetensors) in %s", cfg.ckpt_dir); goto done; }
    if ((rc = load_checkpoint(m, &opt, &cfg, path, &start))) goto done;
    if (root && cfg.log_path[0] && (rc = trim_log(cfg.log_path, start))) goto done;
    if (root) printf("resumed from %s (step %" PRId64 ")\n", path, start);
  }

  // MFU counts every rank's cores: the roof is one process's, times the world.
  // On a GPU the roof is the device's, which is not measured here (0: no MFU
  // in the log; bench/gpu.sh divides by the datasheet peak).
  const ts_backend *be = ts_backend_current();
  double roof = root && be == &ts_backend_cpu ? measure_sgemm_roof() : 0.0;
  double fpt = ts_model_flops_per_token(m);
  if (root && cfg.log_path[0]) {
    log.f = fopen(cfg.log_path, start > 0 ? "a" : "w");
    if (!log.f) { rc = ts_fail(TS_ERUNTIME, "cannot write log %s: %s", cfg.log_path, strerror(errno)); goto done; }
  }
  char layout[64];
  if (grid->world_size == 1)
    snprintf(layout, sizeof layout, "serial");
  else if (grid->pp > 1)
    snprintf(layout, sizeof layout, "dp%d-pp%d-m%d-%s", D, grid->pp, lay.microbatches,
             lay.schedule ? "1f1b" : "gpipe");
  else if (grid->sp == 1)
    snprintf(layout, sizeof layout, "dp%d", D);
  else
    snprintf(layout, sizeof layout, "dp%d-sp%d-%s", D, grid->sp, ts_sp_mode_names[lay.sp_mode]);
  if (grid->sp > 1 && ts_cp_get(lay.sp_mode)->describe) // the strategy's settings
    ts_cp_get(lay.sp_mode)->describe(&lay, layout + strlen(layout), sizeof layout - strlen(layout));
  if (start == 0) {
    char cj[TS_CONFIG_JSON_MAX], line[TS_CONFIG_JSON_MAX + 512];
    if ((rc = ts_config_to_json(&cfg, cj, sizeof cj))) goto done;
    snprintf(line, sizeof line,
             "{\"type\":\"config\",\"version\":\"%s\",\"world\":%d,\"layout\":\"%s\","
             "\"device\":\"%s\",\"precision\":\"%s\",\"comm\":\"%s\",\"params\":%zu,"
             "\"flops_per_token\":%.6g,\"roof_gflops\":%.1f,\"model\":%s}",
             TS_VERSION_STRING, grid->world_size, layout, be->name, ts_backend_precision_name(),
             grid->world_size == 1 ? "none" : ts_backend_uses_nccl() ? "nccl" : "mpi", np, fpt,
             roof, cj);
    ts_log_line(&log, line);
  }
  if (!cfg.quiet)
    printf("tessera train: %s, %zu parameters, B=%d T=%d, %d steps, %s (%d rank%s x %d threads), "
           "tile %d, leaf %d, sgemm roof %.0f GFLOP/s\n",
           cfg.preset, np, cfg.batch, cfg.seq, cfg.steps, layout, grid->world_size,
           grid->world_size == 1 ? "" : "s", omp_get_max_threads(), cfg.tile, cfg.leaf, roof);

  const double tokens = (double)cfg.batch * cfg.seq;
  const int64_t ntok_global = (int64_t)cfg.batch * cfg.seq;
  char comm_json[4096];
  for (int64_t s = start; s < cfg.steps; s++) {
    uint64_t step = (uint64_t)s + 1;
    double t0 = ts_now();
    ts_grid_reset_counts(grid);
    ts_mem_reset_peaks();
    if ((rc = load_batch(data, TS_SPLIT_TRAIN, &cfg, step, b0, nb, inputs, targets))) goto done;
    // forward and backward over this rank's share, then the sums over the
    // sequence group and the data group (shard.h)
    float lsum, loss;
    if ((rc = ts_shard_pass(&sh, inputs, targets, step, 1, &lsum))) goto done;
    if ((rc = ts_shard_sync_grads(&sh, dgroup))) goto done;
    if ((rc = combine_loss(D > 1 ? dgroup : NULL, &lsum, 1, ntok_global, &loss))) goto done;
    float norm = ts_grad_norm_trained(gt, nt, np);
    if ((rc = ts_clip_trained(gt, nt, np, norm, cfg.grad_clip))) goto done;
    float lr = ts_lr_at(&cfg, s);
    if ((rc = ts_optimizer_step(&opt, pt, gt, nt, &cfg, s))) goto done;
    if (sh.pl && (rc = ts_pipeline_sync_boundaries(sh.pl, m, step))) goto done;
    double dt = ts_now() - t0;
    double comm_s = ts_grid_comm_seconds(grid);
    double tps = tokens / dt;
    // the busiest rank's compute and the largest memory: with causal
    // attention a sequence's later segments are the heavier ones
    double compute_max = dt - comm_s, rss_max = ts_peak_rss_mb();
    ts_mpi_max2(&compute_max, &rss_max);
    double mfu = roof > 0 ? fpt * tps / (roof * 1e9 * grid->world_size) : 0.0;
    double rss = ts_peak_rss_mb();
    if (!isfinite(loss)) {
      rc = ts_fail(TS_ERUNTIME, "step %" PRIu64 ": loss is %f (diverged); try a smaller --lr", step, (double)loss);
      goto done;
    }
    if (ts_grid_counts_json(grid, comm_json, sizeof comm_json) < 0) snprintf(comm_json, sizeof comm_json, "{}");
    // the tracked phases' peaks (mem.h); a phase this layout does not track
    // (the attention of the serial and LSS layouts) is left out
    char mem_json[256];
    {
      int k = snprintf(mem_json, sizeof mem_json, ",\"mem_peak_bytes\":{"), first = 1;
      for (int ph = 0; ph < TS_NPHASES; ph++) {
        size_t b = ts_mem_peak((ts_phase)ph);
        if (b == 0) continue;
        k += snprintf(mem_json + k, sizeof mem_json - (size_t)k, "%s\"%s\":%zu", first ? "" : ",",
                      ts_phase_names[ph], b);
        first = 0;
      }
      snprintf(mem_json + k, sizeof mem_json - (size_t)k, "}");
    }
    // the pipeline's in-flight microbatches on this (the first) stage
    // and the bytes per token that cross a boundary, each way (X, Z or codes)
    char pipe_json[256] = "";
    if (sh.pl)
      snprintf(pipe_json, sizeof pipe_json,
               ",\"pipeline\":{\"stages\":%d,\"microbatches\":%d,\"schedule\":\"%s\","
               "\"peak_inflight\":%d,\"boundary_bytes_per_token\":{\"forward\":%d,"
               "\"backward\":%d}}",
               sh.pl->P, sh.pl->M, sh.pl->schedule ? "1f1b" : "gpipe", sh.pl->peak_inflight,
               (int)ts_model_boundary_bytes(m, 0), (int)ts_model_boundary_bytes(m, 1));
    // a GPU's: the peak of the bytes its allocator handed out (this rank's)
    char dev_json[64] = "";
    const double dev_mb = be->peak_bytes ? (double)be->peak_bytes() / 1048576.0 : 0.0;
    if (be->peak_bytes) snprintf(dev_json, sizeof dev_json, ",\"device_peak_mb\":%.1f", dev_mb);
    char line[1024 + sizeof comm_json + sizeof mem_json + sizeof pipe_json + sizeof dev_json];
    snprintf(line, sizeof line,
             "{\"type\":\"step\",\"step\":%" PRIu64 ",\"loss\":%.9g,\"loss_hex\":\"%a\","
             "\"grad_norm\":%.9g,\"grad_norm_hex\":\"%a\",\"lr\":%.9g,\"lr_hex\":\"%a\","
             "\"tokens_per_s\":%.1f,\"step_ms\":%.3f,\"comm_ms\":%.3f,\"compute_ms_max\":%.3f,"
             "\"mfu\":%.4f,\"peak_rss_mb\":%.1f,\"peak_rss_mb_max\":%.1f%s%s%s,\"comm\":%s}",
             step, (double)loss, (double)loss, (double)norm, (double)norm, (double)lr, (double)lr,
             tps, dt * 1e3, comm_s * 1e3, compute_max * 1e3, mfu, rss, rss_max, dev_json,
             mem_json, pipe_json, comm_json);
    ts_log_line(&log, line);
    // memory: the process's peak, or on a GPU the device's
    if (!cfg.quiet)
      printf("step %5" PRIu64 "/%d | loss %.4f | lr %.2e | norm %.3f | %7.0f tok/s | MFU %4.1f%% | %6.0f MB%s\n",
             step, cfg.steps, (double)loss, (double)lr, (double)norm, tps, 100.0 * mfu,
             be->peak_bytes ? dev_mb : rss, be->peak_bytes ? " GPU" : "");
    fflush(stdout);
    int last = step == (uint64_t)cfg.steps;
    if ((cfg.eval_every > 0 && step % (uint64_t)cfg.eval_every == 0) || last) {
      float vl;
      ts_grid_reset_counts(grid);
      if ((rc = evaluate(&sh, data, &cfg, D > 1 ? dgroup : NULL, inputs, targets, &vl))) goto done;
      if (ts_grid_counts_json(grid, comm_json, sizeof comm_json) < 0) snprintf(comm_json, sizeof comm_json, "{}");
      snprintf(line, sizeof line,
               "{\"type\":\"eval\",\"step\":%" PRIu64 ",\"val_loss\":%.9g,\"val_loss_hex\":\"%a\","
               "\"comm\":%s}",
               step, (double)vl, (double)vl, comm_json);
      ts_log_line(&log, line);
      if (!cfg.quiet) printf("step %5" PRIu64 " | val loss %.4f\n", step, (double)vl);
    }
    if (root && cfg.ckpt_dir[0] && ((cfg.ckpt_every > 0 && step % (uint64_t)cfg.ckpt_every == 0) || last))
      if ((rc = save_checkpoint(m, &opt, &cfg, (int64_t)step))) goto done;
  }
  {
    char line[256];
    uint64_t hash = param_hash(m);
    snprintf(line, sizeof line, "{\"type\":\"final\",\"step\":%d,\"param_hash\":\"%016" PRIx64 "\"}",
             cfg.steps, hash);
    ts_log_line(&log, line);
    if (!cfg.quiet) printf("done: parameter hash %016" PRIx64 "\n", hash);
  }
  rc = TS_OK;
done:
  if (log.f) fclose(log.f);
  free(pt); free(gt); free(inputs); free(targets);
  ts_adamw_free(&opt);
  ts_shard_free(&sh);
  ts_data_close(data);
  ts_grid_free(grid);
  return rc;
}

// ---- evaluation ----------------------------------------------------------------------
int ts_eval(const ts_config *cfg_in, const char *ckpt_path) {
  ts_config cfg = *cfg_in;
  setup_threads(&cfg, 1);
  ts_ckpt *ck = NULL;
  ts_data *data = NULL;
  ts_model *m = NULL;
  int *inputs = NULL, *targets = NULL;
  ts_tensor *pt = NULL;
  int rc = ts_ckpt_open(ckpt_path, &ck);
  if (rc) return rc;
  const char *js = ts_ckpt_meta(ck, "tessera.config");
  if (!js || ts_config_from_json(&cfg, js) != TS_OK) {
    rc = ts_fail(TS_ERUNTIME, "checkpoint %s: missing or unreadable tessera.config", ckpt_path);
    goto done;
  }
  // the model comes from the checkpoint; data and batches from the flags
  snprintf(cfg.data_path, sizeof cfg.data_path, "%s", cfg_in->data_path);
  cfg.eval_batches = cfg_in->eval_batches;
  cfg.val_frac = cfg_in->val_frac;
  if ((rc = ts_data_open(cfg.data_path, cfg.val_frac, (size_t)cfg.seq + 1, &data))) goto done;
  if ((rc = ts_model_create(&cfg, &m))) goto done;
  int nt = ts_model_num_tensors(m);
  pt = calloc((size_t)nt, sizeof *pt);
  inputs = malloc((size_t)cfg.batch * cfg.seq * sizeof(int));
  targets = malloc((size_t)cfg.batch * cfg.seq * sizeof(int));
  if (!pt || !inputs || !targets) { rc = ts_fail(TS_ERUNTIME, "out of memory"); goto done; }
  ts_model_tensors(m, pt, NULL);
  for (int i = 0; i < nt && !rc; i++) rc = ts_ckpt_load(ck, &pt[i]);
  if (rc) goto done;
  float vl;
  ts_shard whole = {.m = m, .nb = cfg.batch, .T = cfg.seq, .Tl = cfg.seq};
  if ((rc = evaluate(&whole, data, &cfg, NULL, inputs, targets, &vl))) goto done;
  const char *st = ts_ckpt_meta(ck, "tessera.step");
  printf("checkpoint %s (step %s): val loss %.6f (%a) over %d batches of %dx%d\n", ckpt_path,
         st ? st : "?", (double)vl, (double)vl, cfg.eval_batches, cfg.batch, cfg.seq);
done:
  free(pt); free(inputs); free(targets);
  ts_model_free(m);
  ts_data_close(data);
  ts_ckpt_close(ck);
  return rc;
}

// ---- golden dump ---------------------------------------------------------------------
static int write_text_atomic(const char *path, const char *text) {
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
  FILE *f = fopen(tmp, "w");
  if (!f) return ts_fail(TS_ERUNTIME, "cannot write %s: %s", tmp, strerror(errno));
  int bad = fputs(text, f) < 0;
  bad |= fflush(f) != 0;
  bad |= fsync(fileno(f)) != 0;
  bad |= fclose(f) != 0;
  if (bad || rename(tmp, path) != 0) {
    unlink(tmp);
    return ts_fail(TS_ERUNTIME, "cannot write %s: %s", path, strerror(errno));
  }
  return TS_OK;
}

int ts_dump(const ts_config *cfg_in, const char *out_dir, int traj_steps) {
  ts_config cfg = *cfg_in;
  cfg.steps = traj_steps; // the trajectory's schedule
  // The files must not depend on where the data lives or where logs go, so
  // that a dump made elsewhere compares byte for byte.
  const char *base = strrchr(cfg_in->data_path, '/');
  snprintf(cfg.data_path, sizeof cfg.data_path, "%s", base ? base + 1 : cfg_in->data_path);
  cfg.log_path[0] = cfg.ckpt_dir[0] = 0;
  cfg.threads = 0;
  setup_threads(&cfg, 1);
  int rc;
  ts_data *data = NULL;
  ts_model *m = NULL;
  ts_adamw opt = {0};
  int *inputs = NULL, *targets = NULL;
  ts_tensor *pt = NULL, *gt = NULL;
  float *binp = NULL, *btgt = NULL;
  char *result = NULL;
  if ((rc = mkdir_p(out_dir))) return rc;
  if ((rc = ts_data_open(cfg_in->data_path, cfg.val_frac, (size_t)cfg.seq + 1, &data))) goto done;
  if ((rc = ts_model_create(&cfg, &m))) goto done;
  ts_model_init(m, cfg.seed);
  size_t np = ts_model_num_params(m);
  int nt = ts_model_num_tensors(m);
  size_t ntok = (size_t)cfg.batch * cfg.seq;
  pt = calloc((size_t)nt + 2, sizeof *pt);
  gt = calloc((size_t)nt + 1, sizeof *gt);
  inputs = malloc(ntok * sizeof(int));
  targets = malloc(ntok * sizeof(int));
  binp = malloc(ntok * sizeof(float));
  btgt = malloc(ntok * sizeof(float));
  result = malloc(64 + (size_t)traj_steps * 128 + 512);
  if ((rc = ts_adamw_init(&opt, np))) goto done;
  if (!pt || !gt || !inputs || !targets || !binp || !btgt || !result) { rc = ts_fail(TS_ERUNTIME, "out of memory"); goto done; }
  ts_model_tensors(m, pt, gt);
  if ((rc = load_batch(data, TS_SPLIT_TRAIN, &cfg, 1, 0, cfg.batch, inputs, targets))) goto done;
  for (size_t i = 0; i < ntok; i++) { binp[i] = (float)inputs[i]; btgt[i] = (float)targets[i]; }

  char path[4200], cj[TS_CONFIG_JSON_MAX], buf[TS_CONFIG_JSON_MAX + 64];
  if ((rc = ts_config_to_json(&cfg, cj, sizeof cj))) goto done;
  snprintf(buf, sizeof buf, "{\"model\":%s}\n", cj);
  snprintf(path, sizeof path, "%s/config.json", out_dir);
  if ((rc = write_text_atomic(path, buf))) goto done;
  ts_tensor extra[2] = {{"batch.inputs", 2, {cfg.batch, cfg.seq}, binp},
                        {"batch.targets", 2, {cfg.batch, cfg.seq}, btgt}};
  pt[nt] = extra[0];
  pt[nt + 1] = extra[1];
  ts_meta meta[] = {{"tessera.config", cj}};
  snprintf(path, sizeof path, "%s/weights.safetensors", out_dir);
  if ((rc = ts_ckpt_write(path, pt, nt + 2, meta, 1))) goto done;

  float loss = ts_model_forward(m, inputs, targets, 1, 1);
  if ((rc = ts_model_backward(m, 1))) goto done;
  float norm = ts_grad_norm_trained(gt, nt, np);
  uint64_t lh = ts_fnv1a64(TS_FNV_OFFSET, ts_model_logits(m), ntok * cfg.vocab * sizeof(float));
  ts_tensor lt = {"logits", 3, {cfg.batch, cfg.seq, cfg.vocab}, (float *)ts_model_logits(m)};
  gt[nt] = lt;
  snprintf(path, sizeof path, "%s/grads.safetensors", out_dir);
  if ((rc = ts_ckpt_write(path, gt, nt + 1, meta, 1))) goto done;

  int len = sprintf(result,
                    "{\"loss\":%.9g,\"loss_hex\":\"%a\",\"logits_fnv1a64\":\"%016" PRIx64 "\","
                    "\"grad_norm_hex\":\"%a\",\"trajectory\":[",
                    (double)loss, (double)loss, lh, (double)norm);
  for (int s = 0; s < traj_steps; s++) {
    uint64_t step = (uint64_t)s + 1;
    float l = ts_model_forward(m, inputs, targets, step, 1);
    if ((rc = ts_model_backward(m, step))) goto done;
    float n2 = ts_grad_norm_trained(gt, nt, np);
    if ((rc = ts_clip_trained(gt, nt, np, n2, cfg.grad_clip))) goto done;
    if ((rc = ts_optimizer_step(&opt, pt, gt, nt, &cfg, s))) goto done;
    len += sprintf(result + len, "%s{\"step\":%d,\"loss\":%.9g,\"loss_hex\":\"%a\"}", s ? "," : "",
                   s + 1, (double)l, (double)l);
  }
  sprintf(result + len, "]}\n");
  snprintf(path, sizeof path, "%s/result.json", out_dir);
  rc = write_text_atomic(path, result);
done:
  free(pt); free(gt); free(inputs); free(targets); free(binp); free(btgt); free(result);
  ts_adamw_free(&opt);
  ts_model_free(m);
  ts_data_close(data);
  return rc;
}
