// The pieces the run commands share (run.h).
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#ifdef TS_HAVE_BLAS
#include <cblas.h>
#endif
#include <limits.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "base/util.h"
#include "cpu/mm.h"
#include "exact/tree.h"
#include "run.h"

// The thread count never changes a result; by default the ranks on one node
// share its threads.
void ts_run_setup_threads(const ts_config *cfg, int local_ranks) {
  if (cfg->threads > 0) {
    omp_set_num_threads(cfg->threads);
  } else if (local_ranks > 1) {
    int t = omp_get_max_threads() / local_ranks;
    omp_set_num_threads(t > 0 ? t : 1);
  }
}

// One n^3 product on all threads: tessera's own (the exact path's kernel),
// or OpenBLAS's sgemm.
static void roof_product(int blas, int n, const float *a, const float *b, float *c) {
#ifdef TS_HAVE_BLAS
  if (blas) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    return;
  }
#endif
  ts_mm(0, 0, n, n, n, 1.0f, a, n, b, n, 0, c, n);
}

// Measured roof for MFU (tessera info says which): the faster of ts_mm and,
// when built with it, OpenBLAS's sgemm, on a 1024^3 product on all threads;
// OpenBLAS's own rate in *blas (0 without it) where blas is not NULL.
// Each is called once to warm up (page faults, thread start-up), then the
// best of four calls counts: about what eight calls of one cost. A slow
// machine (or an emulator) stops a kind's calls after a second.
double ts_run_sgemm_roof(double *blas) {
  const int n = 1024;
  float *a = ts_alloc((size_t)n * n * sizeof(float)), *b = ts_alloc((size_t)n * n * sizeof(float)),
        *c = ts_alloc((size_t)n * n * sizeof(float));
  if (!a || !b || !c) { ts_free(a); ts_free(b); ts_free(c); return 0.0; }
  for (size_t i = 0; i < (size_t)n * n; i++) { a[i] = 1e-3f * (float)(i % 97); b[i] = 1e-3f * (float)(i % 89); }
  double best = 0.0, rate[2] = {0.0, 0.0};
  if (blas) *blas = 0.0;
#ifdef TS_HAVE_BLAS
  const int kinds = 2;
  openblas_set_num_threads(omp_get_max_threads());
#else
  const int kinds = 1;
#endif
  for (int kind = 0; kind < kinds; kind++) {
    const double start = ts_now();
    for (int r = 0; r < 5 && (r < 2 || ts_now() - start < 1.0); r++) {
      double t0 = ts_now();
      roof_product(kind, n, a, b, c);
      double dt = ts_now() - t0;
      double gf = 2.0 * n * n * (double)n / dt / 1e9;
      if (r > 0 && gf > rate[kind]) rate[kind] = gf;
    }
    if (rate[kind] > best) best = rate[kind];
  }
  if (blas) *blas = rate[1];
#ifdef TS_HAVE_BLAS
  openblas_set_num_threads(1); // its threads would otherwise spin beside OpenMP's
#endif
  ts_free(a); ts_free(b); ts_free(c);
  return best;
}

int ts_run_open_data(const ts_config *cfg, const char *path, ts_data **out) {
  const ts_data_spec spec = {.path = path,
                             .val_path = cfg->val_path,
                             .format = cfg->data_format,
                             .vocab = cfg->vocab,
                             .val_frac = cfg->val_frac,
                             .min_len = (size_t)cfg->seq + 1};
  return ts_data_open_spec(&spec, out);
}

int ts_run_load_batch(const ts_data *data, int split, const ts_config *cfg, uint64_t step,
                      int b0, int nb, int *inputs, int *targets) {
  for (int j = 0; j < nb; j++) {
    int rc = ts_data_window(data, split, cfg->seed, step, (uint64_t)(b0 + j), cfg->seq,
                            inputs + (size_t)j * cfg->seq, targets + (size_t)j * cfg->seq);
    if (rc) return rc;
  }
  return TS_OK;
}

int ts_run_load_shard(const ts_data *data, int split, const ts_config *cfg, uint64_t step,
                      const ts_shard *sh, int *inputs, int *targets) {
  if (!sh->strided) return ts_run_load_batch(data, split, cfg, step, sh->b0, sh->nb, inputs, targets);
  for (int j = 0; j < sh->nb / sh->s; j++) {
    const size_t at = (size_t)j * sh->s * cfg->seq;
    int rc = ts_run_load_batch(data, split, cfg, step, ts_shard_pass_first(sh, j), sh->s,
                               inputs + at, targets + at);
    if (rc) return rc;
  }
  return TS_OK;
}

// The global batch's loss from the shards' loss sums, each an aligned subtree
// of the serial loss tree: the tree over the group's sums, divided by the
// global token count exactly as the serial forward divides.
int ts_run_combine_loss(ts_comm *group, const float *local, int n, int64_t ntok_global,
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

static void hash_fold(void *state, const ts_owned_run *r, void *ctx) {
  uint64_t *h = state;
  *h = ts_fnv1a64(*h, (const float *)ctx + r->local, (size_t)r->len * sizeof(float));
}

int ts_run_param_hash(const ts_owners *o, ts_model *m, uint64_t *out) {
  uint64_t h = TS_FNV_OFFSET;
  int rc = ts_owners_fold(o, &h, sizeof h, hash_fold, ts_model_params(m));
  if (!rc) *out = h;
  return rc;
}

// A pipeline stage's weight matrices of `stages` (whole model: 1): its
// layers', the first stage's embeddings, the last's head (the tied head's
// embedding: the first holds a copy, values only, in *copies).
static double stage_floor(const ts_config *cfg, int stages, int split, int s, double *copies) {
  const double C = cfg->d, V = cfg->vocab, per = ts_config_param_floor(cfg);
  const double emb = V * C * (cfg->tied ? 1.0 : 2.0) + (cfg->variant == TS_LLAMA ? 0.0 : cfg->seq * C);
  const double layers = (per - emb) / stages / split; // the layers' share, of their blocks
  double own = layers;
  *copies = 0.0;
  if (s == 0) own += cfg->variant == TS_LLAMA ? 0.0 : cfg->seq * C; // wpe
  if (s == 0 && !cfg->tied) own += V * C;                           // wte
  if (s == stages - 1) own += V * C;                                // head, or the tied wte
  if (s == 0 && cfg->tied && stages > 1) *copies = V * C;
  return own;
}

// Each rank holds its stage's parameters (and gradients, and moments): the
// largest stage's matrices are the floor; on a GPU they live in its memory
// (the backend gives this rank's share), on the CPU in the node's.
int ts_run_check_fit(const ts_config *cfg, int training, int share, int stages, int shards,
                     int zero, int split) {
  const ts_backend *be = ts_backend_current();
  const int on_gpu = be->memory_bytes != NULL;
  double have = on_gpu ? (double)be->memory_bytes()
                       : (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE) /
                             (share > 1 ? share : 1);
  if (stages < 1) stages = 1;
  if (shards < 1) shards = 1;
  if (split < 1) split = 1;
  double np = 0.0, need = 0.0;
  for (int s = 0; s < stages; s++) {
    double copies, own = stage_floor(cfg, stages, split, s, &copies);
    double b = own * ts_state_bytes_per_param(training, shards, zero) + 4.0 * copies;
    if (b > need) need = b, np = own + copies;
  }
  if (!(have > 0) || need <= 0.9 * have) return TS_OK;
  char note[64] = "", stage[64] = ""; // as model.c's full estimate says it
  if (!on_gpu && share > 1) snprintf(note, sizeof note, " (its share: 1 of %d ranks)", share);
  if (stages > 1) snprintf(stage, sizeof stage, " (the largest of --pp %d stages)", stages);
  return ts_fail(TS_ERUNTIME,
                 "the model's weight matrices alone need %.1f GiB (%.3g parameters%s: --layers %d, "
                 "--d %d, --d-ff %d, vocab %d; values, gradients%s) but %s %.1f GiB%s; use a "
                 "smaller --model, --layers, --d or --d-ff, more pipeline stages (--pp), sharded "
                 "model state (--zero 1, 2, 3), or fewer ranks on this %s",
                 need / 1073741824.0, np, stage, cfg->n_layer, cfg->d, cfg->d_ff, cfg->vocab,
                 training ? ", AdamW moments" : "",
                 on_gpu ? "this rank's share of its GPU is" : "the machine has",
                 have / 1073741824.0, note, on_gpu ? "GPU" : "machine");
}

// Batch i of the tiled validation split: sequence j is the window from token
// (i·B + j)·T, the shard's sequences [b0, b0 + nb) of it.
static int load_tiled(const ts_data *data, const ts_config *cfg, int i, const ts_shard *sh,
                      int *inputs, int *targets) {
  for (int j = 0; j < sh->nb; j++) {
    const size_t start = ((size_t)i * cfg->batch + (size_t)(sh->b0 + j)) * (size_t)cfg->seq;
    int rc = ts_data_window_at(data, TS_SPLIT_VAL, start, cfg->seq,
                               inputs + (size_t)j * cfg->seq, targets + (size_t)j * cfg->seq);
    if (rc) return rc;
  }
  return TS_OK;
}

int ts_run_tiled_batches(const ts_data *data, const ts_config *cfg) {
  const size_t len = ts_data_split_len(data, TS_SPLIT_VAL);
  if (cfg->seq <= 0 || cfg->batch <= 0 || len < 1) return 0;
  const size_t windows = (len - 1) / (size_t)cfg->seq, batches = windows / (size_t)cfg->batch;
  return batches > INT_MAX ? INT_MAX : (int)batches;
}

// Mean validation loss over cfg->eval_batches batches: fixed random windows
// (TS_EVAL_RANDOM), or the split tiled from its start (TS_EVAL_TILED). Each
// rank (serial: the only one) evaluates its shard of every batch; the batch
// losses are combined as in training, then averaged in order.
int ts_run_evaluate_windows(ts_shard *sh, const ts_data *data, const ts_config *cfg,
                            ts_comm *group, int windows, int *inputs, int *targets, float *out) {
  int E = cfg->eval_batches;
  if (windows == TS_EVAL_TILED && sh->strided)
    return ts_fail(TS_EUSAGE, "a tiled evaluation is not built for a shard taken in rounds");
  float *sums = calloc((size_t)E, sizeof(float)), *losses = calloc((size_t)E, sizeof(float));
  if (!sums || !losses) { free(sums); free(losses); return ts_fail(TS_ERUNTIME, "out of memory"); }
  int rc = TS_OK;
  for (int i = 0; i < E && !rc; i++) {
    rc = windows == TS_EVAL_TILED
             ? load_tiled(data, cfg, i, sh, inputs, targets)
             : ts_run_load_shard(data, TS_SPLIT_VAL, cfg, TS_EVAL_STEP_BASE + (uint64_t)i, sh,
                                 inputs, targets);
    if (!rc) rc = ts_shard_pass(sh, inputs, targets, 0, 0, &sums[i]);
  }
  // (in rounds the shard's sums are the global ones already)
  if (!rc) rc = ts_run_combine_loss(sh->strided ? NULL : group, sums, E,
                                    (int64_t)cfg->batch * cfg->seq, losses);
  if (!rc) {
    float sum = 0.0f;
    for (int i = 0; i < E; i++) sum += losses[i];
    *out = sum / (float)E;
  }
  free(sums);
  free(losses);
  return rc;
}

int ts_run_evaluate(ts_shard *sh, const ts_data *data, const ts_config *cfg, ts_comm *group,
                    int *inputs, int *targets, float *out) {
  return ts_run_evaluate_windows(sh, data, cfg, group, TS_EVAL_RANDOM, inputs, targets, out);
}
