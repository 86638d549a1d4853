#include "optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/orthogonal.h"
#include "base/util.h"
#include "boundary/boundary.h"
#include "dist/owners.h"
#include "exact/exactmath.h"

int ts_adamw_init(ts_adamw *opt, size_t n) {
  opt->n = n;
  opt->step = 0;
  opt->scratch = NULL;
  opt->scratch_n = 0;
  // where the parameters are: the update runs there (backend.h)
  opt->be = ts_backend_current();
  opt->m = opt->be->alloc(n * sizeof(float));
  opt->v = opt->be->alloc(n * sizeof(float));
  if (!opt->m || !opt->v) return ts_fail(TS_ERUNTIME, "out of memory for optimizer state");
  return TS_OK;
}

void ts_adamw_free(ts_adamw *opt) {
  if (opt->be) { // else never set up: nothing to free
    opt->be->free(opt->m);
    opt->be->free(opt->v);
  }
  ts_free(opt->scratch);
  opt->m = opt->v = opt->scratch = NULL;
  opt->scratch_n = 0;
}

void ts_adamw_update(ts_adamw *opt, ts_tensor *params, ts_tensor *grads, int ntens,
                     float lr, float wd, float beta1, float beta2, float eps,
                     const unsigned char *skip) {
  opt->step++;
  float step_size, bc2_sqrt;
  ts_adamw_scalars(lr, beta1, beta2, opt->step, &step_size, &bc2_sqrt);
  size_t off = 0;
  for (int t = 0; t < ntens; t++) {
    float *p = params[t].data;
    const float *g = grads[t].data;
    int64_t n = ts_tensor_numel(&params[t]);
    float *m = opt->m + off, *v = opt->v + off;
    off += (size_t)n;
    if (skip && skip[t]) continue;
    float decay = params[t].ndim >= 2 ? 1.0f - lr * wd : 1.0f;
    opt->be->adamw(p, g, m, v, n, decay, beta1, beta2, step_size, bc2_sqrt, eps);
  }
}

void ts_adamw_scalars(float lr, float beta1, float beta2, uint64_t step, float *step_size,
                      float *bc2_sqrt) {
  // Same arithmetic as torch.optim.AdamW (non-fused, single tensor): decay,
  // moments, then p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps). β^step
  // is tessera's (exactmath.h), rounded to float as powf's would be: libm's
  // powf is not the same bits on every machine.
  float bc1 = 1.0f - (float)ts_powi((double)beta1, step);
  float bc2 = 1.0f - (float)ts_powi((double)beta2, step);
  *step_size = lr / bc1;
  *bc2_sqrt = sqrtf(bc2);
}

static int is_hidden_matrix(const ts_tensor *t) {
  return t->ndim == 2 && t->role == TS_ROLE_LAYER;
}

// Which group a tensor's update belongs to: AdamW's, Muon's, the boundary
// codec's own (boundary.h: SPEL for projectors, the codebooks' EMA), or
// AdamW with its scale constant along the output axis (a stream writer under
// a codec that confines the stream, boundary.h confines_stream: whatever the
// optimizer, as the SSN paper trains them).
enum { G_ADAMW = 0, G_MUON, G_CODEC, G_ROWWISE };

int ts_optimizer_step(ts_adamw *opt, ts_tensor *params, ts_tensor *grads, int ntens,
                      const ts_config *cfg, int64_t s) {
  const float lr = ts_lr_at(cfg, s);
  const ts_boundary *bd = ts_boundary_get(cfg->compress);
  unsigned char *group = calloc((size_t)ntens, 1);
  if (!group) return ts_fail(TS_ERUNTIME, "out of memory");
  size_t need = 0;
  int special = 0;
  for (int t = 0; t < ntens; t++) {
    if (bd->confines_stream && params[t].writes_stream) {
      group[t] = G_ROWWISE;
      special = 1;
      continue;
    }
    if (cfg->optimizer != TS_OPT_ADAMW && is_hidden_matrix(&params[t])) group[t] = G_MUON;
    else if (bd->owns && bd->owns(params[t].role)) group[t] = G_CODEC;
    else continue;
    special = 1;
    size_t k = ts_ortho_scratch((int)params[t].shape[0], (int)params[t].shape[1]);
    if (k > need) need = k;
  }
  if (need > opt->scratch_n) {
    ts_free(opt->scratch);
    opt->scratch = ts_alloc(need * sizeof(float));
    opt->scratch_n = opt->scratch ? need : 0;
    if (!opt->scratch) {
      free(group);
      return ts_fail(TS_ERUNTIME, "out of memory (Muon and SPEL scratch)");
    }
  }
  ts_adamw_update(opt, params, grads, ntens, lr, cfg->weight_decay, cfg->beta1, cfg->beta2,
                  cfg->eps, special ? group : NULL);
  // Muon and SPEL on AdamW's schedule: their peak rates scaled as AdamW's is
  const float sched = cfg->lr > 0.0f ? lr / cfg->lr : 0.0f;
  const float mlr = cfg->muon_lr * sched;
  const ts_ortho how = cfg->optimizer == TS_OPT_MUON_PE ? TS_ORTHO_PE : TS_ORTHO_NS;
  float step_size, bc2_sqrt; // AdamW's, whose step count ts_adamw_update advanced
  ts_adamw_scalars(lr, cfg->beta1, cfg->beta2, opt->step, &step_size, &bc2_sqrt);
  size_t off = 0;
  for (int t = 0; t < ntens; t++) {
    const size_t n = (size_t)ts_tensor_numel(&params[t]);
    const int rows = (int)params[t].shape[0], cols = (int)params[t].shape[1];
    float *p = params[t].data, *buf = opt->m + off;
    const float *g = grads[t].data;
    off += n;
    if (group[t] == G_MUON)
      opt->be->muon_update(p, g, buf, rows, cols, mlr, cfg->weight_decay, 0.95f, how, 5,
                           opt->scratch);
    else if (group[t] == G_CODEC && bd->update) // NULL: they stay (mapl-frozen's projector)
      bd->update(cfg, params, grads, ntens, t, buf, sched, (uint64_t)s + 1, opt->scratch);
    else if (group[t] == G_ROWWISE)
      ts_adamw_rowwise(&params[t], p, g, buf, opt->v + (off - n),
                       params[t].ndim >= 2 ? 1.0f - lr * cfg->weight_decay : 1.0f, cfg->beta1,
                       cfg->beta2, step_size, bc2_sqrt, cfg->eps);
  }
  free(group);
  return TS_OK;
}

#define NORM_CHUNK 65536

// The norm as a fold over the vector (owners.h): chunk c's sum of squares is
// a double sum over its elements in order, from 0, and the total the double
// sum of the chunks' in order. Elements left out (statistics) add nothing.
typedef struct {
  double total, partial; // the finished chunks' sum; the current chunk's so far
  int64_t chunk;         // the current chunk (−1: none yet)
  int oom;
} norm_state;

static void norm_next_chunk(norm_state *st, int64_t c, double start) {
  if (st->chunk >= 0) st->total += st->partial;
  st->partial = start;
  st->chunk = c;
}

// The sums of squares of k whole chunks, each its own chain in element order.
// Four chunks go side by side so that their adds' latencies overlap (one
// chain alone waits on each add); a chunk's chain, and so its bits, is the
// one it has alone.
static void sumsq_chunks(double *part, const float *g, size_t k) {
  const size_t quads = (k + 3) / 4;
#pragma omp parallel for schedule(static)
  for (size_t q = 0; q < quads; q++) {
    const size_t j = 4 * q;
    if (k - j >= 4) {
      const float *a = g + j * NORM_CHUNK, *b = a + NORM_CHUNK, *c = b + NORM_CHUNK,
                  *d = c + NORM_CHUNK;
      double sa = 0.0, sb = 0.0, sc = 0.0, sd = 0.0;
      for (size_t e = 0; e < NORM_CHUNK; e++) {
        sa += (double)a[e] * (double)a[e];
        sb += (double)b[e] * (double)b[e];
        sc += (double)c[e] * (double)c[e];
        sd += (double)d[e] * (double)d[e];
      }
      part[j] = sa, part[j + 1] = sb, part[j + 2] = sc, part[j + 3] = sd;
    } else {
      for (size_t r = j; r < k; r++) {
        const float *a = g + r * NORM_CHUNK;
        double s = 0.0;
        for (size_t e = 0; e < NORM_CHUNK; e++) s += (double)a[e] * (double)a[e];
        part[r] = s;
      }
    }
  }
}

// Elements g[0, n) at positions [at, at + n) into the fold: the parts of
// chunks element by element, whole chunks at once (the backend's sumsq_chunks
// where the gradients live, else threads over chunks: the same bits).
static void norm_range(norm_state *st, const float *g, uint64_t at, uint64_t n) {
  uint64_t i = 0;
  while (i < n) {
    const uint64_t pos = at + i;
    const int64_t c = (int64_t)(pos / NORM_CHUNK);
    if (pos % NORM_CHUNK == 0 && n - i >= NORM_CHUNK) {
      const size_t k = (size_t)((n - i) / NORM_CHUNK);
      double *part = malloc(k * sizeof(double));
      if (!part) {
        st->oom = 1;
        return;
      }
      const ts_backend *be = ts_backend_current();
      if (be->sumsq_chunks) {
        be->sumsq_chunks(part, g + i, k * NORM_CHUNK, NORM_CHUNK);
      } else {
        sumsq_chunks(part, g + i, k);
      }
      for (size_t j = 0; j < k; j++) norm_next_chunk(st, c + (int64_t)j, part[j]);
      free(part);
      i += (uint64_t)k * NORM_CHUNK;
      continue;
    }
    if (c != st->chunk) norm_next_chunk(st, c, 0.0);
    uint64_t stop = (uint64_t)(c + 1) * NORM_CHUNK - at;
    if (stop > n) stop = n;
    double s = st->partial;
    for (; i < stop; i++) s += (double)g[i] * (double)g[i];
    st->partial = s;
  }
}

static float norm_finish(norm_state *st) {
  if (st->oom) return NAN;
  norm_next_chunk(st, -1, 0.0);
  return (float)sqrt(st->total);
}

float ts_grad_norm(const float *g, size_t n) {
  norm_state st = {0.0, 0.0, -1, 0};
  norm_range(&st, g, 0, n);
  return norm_finish(&st);
}

// The trained tensors among grads[0, nt) into the fold, at their offsets
// from base (the model's buffer), or their canonical ones (base NULL) inside
// [lo, hi).
static void norm_tensors(norm_state *st, const ts_tensor *grads, int nt, const float *base,
                         uint64_t lo, uint64_t hi) {
  for (int t = 0; t < nt; t++) {
    const uint64_t at = base ? (uint64_t)(grads[t].data - base) : (uint64_t)grads[t].at;
    if (at < lo || at >= hi || ts_boundary_statistics(grads[t].role)) continue;
    norm_range(st, grads[t].data, at, (uint64_t)ts_tensor_numel(&grads[t]));
  }
}

float ts_grad_norm_trained(const ts_tensor *grads, int nt, size_t n) {
  norm_state st = {0.0, 0.0, -1, 0};
  if (nt > 0) norm_tensors(&st, grads, nt, grads[0].data, 0, n);
  return norm_finish(&st);
}

// The tensors by canonical offset, so that a run finds its own by a binary
// search: a tensor split holds thousands of pieces (one per row of a column
// block), and as many runs.
typedef struct {
  int64_t at;
  int i;
} by_at;

typedef struct {
  const ts_tensor *grads;
  int nt;
  const by_at *order;
} norm_ctx;

static int by_at_cmp(const void *a, const void *b) {
  const by_at *x = a, *y = b;
  return x->at < y->at ? -1 : x->at > y->at;
}

static void norm_fold(void *state, const ts_owned_run *r, void *ctx) {
  const norm_ctx *c = ctx;
  const int64_t lo = (int64_t)r->at, hi = (int64_t)(r->at + r->len);
  int a = 0, b = c->nt; // the first tensor at or after lo
  while (a < b) {
    const int mid = a + (b - a) / 2;
    if (c->order[mid].at < lo) a = mid + 1;
    else b = mid;
  }
  for (int k = a; k < c->nt && c->order[k].at < hi; k++) {
    const ts_tensor *t = &c->grads[c->order[k].i];
    if (!ts_boundary_statistics(t->role))
      norm_range(state, t->data, (uint64_t)t->at, (uint64_t)ts_tensor_numel(t));
  }
}

int ts_grad_norm_owned(const ts_owners *o, const ts_tensor *grads, int nt, float *out) {
  norm_state st = {0.0, 0.0, -1, 0};
  by_at *order = malloc((size_t)(nt > 0 ? nt : 1) * sizeof *order);
  if (!order) return ts_fail(TS_ERUNTIME, "out of memory (gradient norm)");
  for (int i = 0; i < nt; i++) order[i] = (by_at){grads[i].at, i};
  qsort(order, (size_t)nt, sizeof *order, by_at_cmp);
  norm_ctx c = {grads, nt, order};
  int rc = ts_owners_fold(o, &st, sizeof st, norm_fold, &c);
  free(order);
  if (rc) return rc;
  if (st.oom) return ts_fail(TS_ERUNTIME, "out of memory (gradient norm)");
  *out = norm_finish(&st);
  return TS_OK;
}

void ts_clip(float *g, size_t n, float norm, float clip) {
  if (clip <= 0.0f || !(norm > clip)) return;
  float coef = clip / (norm + 1e-6f);
  const ts_backend *be = ts_backend_current();
  if (be->scale) {
    be->scale(g, n, coef);
    return;
  }
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) g[i] *= coef;
}

void ts_clip_tensors(const ts_tensor *grads, int nt, float norm, float clip) {
  for (int t = 0; t < nt; t++)
    if (!ts_boundary_statistics(grads[t].role))
      ts_clip(grads[t].data, (size_t)ts_tensor_numel(&grads[t]), norm, clip);
}

const char *const ts_lr_schedule_names[TS_LR_NSCHEDULES] = {"cosine", "linear", "constant",
                                                             "wsd"};

// After the warmup, progress p = (s - warmup) / max(1, steps - warmup) runs
// from 0 towards 1 (the last step's is (steps-1-warmup)/(steps-warmup): no
// schedule reaches lr_min, cosine's as before), and each shape maps it to a
// rate between lr and lr_min (docs/MODEL.md). In double, rounded once; the
// cosine is tessera's (exactmath.h).
float ts_lr_at(const ts_config *cfg, int64_t s) {
  double lr = cfg->lr, lr_min = cfg->lr * cfg->min_lr_frac;
  if (s < cfg->warmup) return (float)(lr * (double)(s + 1) / cfg->warmup);
  int64_t span = cfg->steps - cfg->warmup;
  if (span < 1) span = 1;
  double prog = (double)(s - cfg->warmup) / (double)span;
  if (prog > 1.0) prog = 1.0;
  switch (cfg->lr_schedule) {
  case TS_LR_LINEAR: return (float)(lr - (lr - lr_min) * prog);
  case TS_LR_CONSTANT: return (float)lr;
  case TS_LR_WSD: { // stable at lr, then linear to lr_min over the last decay_frac
    const double f = cfg->decay_frac, start = 1.0 - f;
    if (prog < start) return (float)lr;
    return (float)(lr - (lr - lr_min) * ((prog - start) / f));
  }
  default: return (float)(lr_min + 0.5 * (lr - lr_min) * (1.0 + ts_cos(3.141592653589793 * prog)));
  }
}
