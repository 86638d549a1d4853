#include "optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "boundary/boundary.h"
#include "orthogonal.h"
#include "util.h"

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
  // Same arithmetic as torch.optim.AdamW (non-fused, single tensor): decay,
  // moments, then p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps).
  float bc1 = 1.0f - powf(beta1, (float)opt->step);
  float bc2 = 1.0f - powf(beta2, (float)opt->step);
  float step_size = lr / bc1;
  float bc2_sqrt = sqrtf(bc2);
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

void ts_adamw_elements(float *p, const float *g, float *m, float *v, int64_t n, float decay,
                       float beta1, float beta2, float step_size, float bc2_sqrt, float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) {
    float pi = p[i] * decay;
    float mi = m[i] * beta1 + g[i] * (1.0f - beta1);
    float vi = v[i] * beta2 + g[i] * g[i] * (1.0f - beta2);
    float denom = sqrtf(vi) / bc2_sqrt + eps;
    p[i] = pi - step_size * (mi / denom);
    m[i] = mi;
    v[i] = vi;
  }
}

static int is_hidden_matrix(const ts_tensor *t) {
  return t->ndim == 2 && t->role == TS_ROLE_LAYER;
}

// Which group a tensor's update belongs to: AdamW's, Muon's, or the boundary
// codec's own (boundary.h: SPEL for projectors, the codebooks' EMA).
enum { G_ADAMW = 0, G_MUON, G_CODEC };

int ts_optimizer_step(ts_adamw *opt, ts_tensor *params, ts_tensor *grads, int ntens,
                      const ts_config *cfg, int64_t s) {
  const float lr = ts_lr_at(cfg, s);
  const ts_boundary *bd = ts_boundary_get(cfg->compress);
  unsigned char *group = calloc((size_t)ntens, 1);
  if (!group) return ts_fail(TS_ERUNTIME, "out of memory");
  size_t need = 0;
  int special = 0;
  for (int t = 0; t < ntens; t++) {
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
  }
  free(group);
  return TS_OK;
}

#define NORM_CHUNK 65536

// Spans [lo, hi) of the gradient buffer that hold no gradient: mapl-vq's
// codebook slots (statistics for ts_vq_update). In buffer order.
typedef struct {
  size_t lo, hi;
} span;

static int statistic_spans(const ts_tensor *grads, int nt, span **out) {
  int ns = 0;
  *out = NULL;
  for (int t = 0; t < nt; t++) ns += ts_boundary_statistics(grads[t].role);
  if (ns == 0) return 0;
  span *sp = malloc((size_t)ns * sizeof *sp);
  if (!sp) return -1;
  ns = 0;
  for (int t = 0; t < nt; t++)
    if (ts_boundary_statistics(grads[t].role)) {
      sp[ns].lo = (size_t)(grads[t].data - grads[0].data);
      sp[ns].hi = sp[ns].lo + (size_t)ts_tensor_numel(&grads[t]);
      ns++;
    }
  *out = sp;
  return ns;
}

// Σ g² over [lo, hi) outside the spans, in index order: the same bits as
// the sum with zeros in the spans (adding +0 to a sum of squares is exact).
static double chunk_sumsq(const float *g, size_t lo, size_t hi, const span *sp, int ns) {
  double s = 0.0;
  int k = 0;
  for (size_t i = lo; i < hi;) {
    while (k < ns && sp[k].hi <= i) k++;
    size_t stop = k < ns && sp[k].lo < hi ? (sp[k].lo > i ? sp[k].lo : i) : hi;
    for (; i < stop; i++) s += (double)g[i] * (double)g[i];
    if (k < ns && sp[k].lo <= i && i < sp[k].hi) i = sp[k].hi < hi ? sp[k].hi : hi;
  }
  return s;
}

static float norm_outside(const float *g, size_t n, const span *sp, int ns) {
  size_t nchunks = (n + NORM_CHUNK - 1) / NORM_CHUNK;
  double *part = malloc((nchunks ? nchunks : 1) * sizeof(double));
  if (!part) return NAN;
  const ts_backend *be = ts_backend_current();
  if (ns == 0 && be->sumsq_chunks) { // where the gradients are (the same bits)
    be->sumsq_chunks(part, g, n, NORM_CHUNK);
  } else {
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < nchunks; c++) {
      size_t lo = c * NORM_CHUNK, hi = lo + NORM_CHUNK < n ? lo + NORM_CHUNK : n;
      part[c] = chunk_sumsq(g, lo, hi, sp, ns);
    }
  }
  double s = 0.0;
  for (size_t c = 0; c < nchunks; c++) s += part[c];
  free(part);
  return (float)sqrt(s);
}

float ts_grad_norm(const float *g, size_t n) { return norm_outside(g, n, NULL, 0); }

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

float ts_grad_norm_trained(const ts_tensor *grads, int nt, size_t n) {
  span *sp;
  int ns = statistic_spans(grads, nt, &sp);
  if (ns < 0) return NAN;
  float norm = norm_outside(grads[0].data, n, sp, ns);
  free(sp);
  return norm;
}

int ts_clip_trained(const ts_tensor *grads, int nt, size_t n, float norm, float clip) {
  span *sp;
  int ns = statistic_spans(grads, nt, &sp);
  if (ns < 0) return ts_fail(TS_ERUNTIME, "out of memory");
  float *g = grads[0].data;
  size_t lo = 0;
  for (int k = 0; k <= ns; k++) { // the trained runs between the spans
    size_t hi = k < ns ? sp[k].lo : n;
    ts_clip(g + lo, hi - lo, norm, clip);
    if (k < ns) lo = sp[k].hi;
  }
  free(sp);
  return TS_OK;
}

float ts_lr_at(const ts_config *cfg, int64_t s) {
  double lr = cfg->lr, lr_min = cfg->lr * cfg->min_lr_frac;
  if (s < cfg->warmup) return (float)(lr * (double)(s + 1) / cfg->warmup);
  int64_t span = cfg->steps - cfg->warmup;
  if (span < 1) span = 1;
  double prog = (double)(s - cfg->warmup) / (double)span;
  if (prog > 1.0) prog = 1.0;
  return (float)(lr_min + 0.5 * (lr - lr_min) * (1.0 + cos(3.141592653589793 * prog)));
}
