#include "optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "orthogonal.h"
#include "util.h"

int ts_adamw_init(ts_adamw *opt, size_t n) {
  opt->n = n;
  opt->step = 0;
  opt->scratch = NULL;
  opt->scratch_n = 0;
  opt->m = ts_alloc(n * sizeof(float));
  opt->v = ts_alloc(n * sizeof(float));
  if (!opt->m || !opt->v) return ts_fail(TS_ERUNTIME, "out of memory for optimizer state");
  return TS_OK;
}

void ts_adamw_free(ts_adamw *opt) {
  ts_free(opt->m);
  ts_free(opt->v);
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
}

static int is_hidden_matrix(const ts_tensor *t) {
  return t->ndim == 2 && strncmp(t->name, "h.", 2) == 0;
}

int ts_optimizer_step(ts_adamw *opt, ts_tensor *params, ts_tensor *grads, int ntens,
                      const ts_config *cfg, int64_t s) {
  const float lr = ts_lr_at(cfg, s);
  if (cfg->optimizer == TS_OPT_ADAMW) {
    ts_adamw_update(opt, params, grads, ntens, lr, cfg->weight_decay, cfg->beta1, cfg->beta2,
                    cfg->eps, NULL);
    return TS_OK;
  }
  unsigned char *skip = calloc((size_t)ntens, 1);
  if (!skip) return ts_fail(TS_ERUNTIME, "out of memory");
  size_t need = 0;
  for (int t = 0; t < ntens; t++)
    if ((skip[t] = (unsigned char)is_hidden_matrix(&params[t]))) {
      size_t k = ts_ortho_scratch((int)params[t].shape[0], (int)params[t].shape[1]);
      if (k > need) need = k;
    }
  if (need > opt->scratch_n) {
    ts_free(opt->scratch);
    opt->scratch = ts_alloc(need * sizeof(float));
    opt->scratch_n = opt->scratch ? need : 0;
    if (!opt->scratch) {
      free(skip);
      return ts_fail(TS_ERUNTIME, "out of memory (Muon scratch)");
    }
  }
  ts_adamw_update(opt, params, grads, ntens, lr, cfg->weight_decay, cfg->beta1, cfg->beta2,
                  cfg->eps, skip);
  // Muon on the same schedule: --muon-lr scaled as AdamW's lr is
  const float mlr = cfg->lr > 0.0f ? cfg->muon_lr * (lr / cfg->lr) : 0.0f;
  const ts_ortho how = cfg->optimizer == TS_OPT_MUON_PE ? TS_ORTHO_PE : TS_ORTHO_NS;
  size_t off = 0;
  for (int t = 0; t < ntens; t++) {
    const size_t n = (size_t)ts_tensor_numel(&params[t]);
    if (skip[t])
      ts_muon_update(params[t].data, grads[t].data, opt->m + off, (int)params[t].shape[0],
                     (int)params[t].shape[1], mlr, cfg->weight_decay, 0.95f, how, 5, opt->scratch);
    off += n;
  }
  free(skip);
  return TS_OK;
}

#define NORM_CHUNK 65536

float ts_grad_norm(const float *g, size_t n) {
  size_t nchunks = (n + NORM_CHUNK - 1) / NORM_CHUNK;
  double *part = malloc((nchunks ? nchunks : 1) * sizeof(double));
  if (!part) return NAN;
#pragma omp parallel for schedule(static)
  for (size_t c = 0; c < nchunks; c++) {
    size_t lo = c * NORM_CHUNK, hi = lo + NORM_CHUNK < n ? lo + NORM_CHUNK : n;
    double s = 0.0;
    for (size_t i = lo; i < hi; i++) s += (double)g[i] * (double)g[i];
    part[c] = s;
  }
  double s = 0.0;
  for (size_t c = 0; c < nchunks; c++) s += part[c];
  free(part);
  return (float)sqrt(s);
}

void ts_clip(float *g, size_t n, float norm, float clip) {
  if (clip <= 0.0f || !(norm > clip)) return;
  float coef = clip / (norm + 1e-6f);
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) g[i] *= coef;
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
