// One row of LayerNorm (GPT) and RMSNorm (LLaMA), forward and input
// gradient: the sums run over the row's features in index order. One source
// for the CPU's loops over rows (src/cpu/layernorm.c, src/cpu/rmsnorm.c) and
// the GPU's exact tier, a thread per row (src/gpu/norm.cu), so both compute
// the same bits (docs/EXACTNESS.md R5, docs/GPU.md).
#ifndef TS_NORM_HD_H
#define TS_NORM_HD_H
#include <math.h>

#include "base/hd.h"

#define TS_NORM_EPS 1e-5f

// y (C) = (x − mean)·rstd·w + b; *mean, *rstd kept for the backward.
static inline TS_HD void ts_layernorm_row(float *y, float *mean, float *rstd, const float *x,
                                          const float *w, const float *b, int C) {
  float s = 0.0f;
  for (int i = 0; i < C; i++) s += x[i];
  float m = s / C;
  float v = 0.0f;
  for (int i = 0; i < C; i++) {
    float dx = x[i] - m;
    v += dx * dx;
  }
  v = v / C;
  float r = 1.0f / sqrtf(v + TS_NORM_EPS);
  for (int i = 0; i < C; i++) y[i] = (x[i] - m) * r * w[i] + b[i];
  *mean = m;
  *rstd = r;
}

// dx (C) = rstd·(g − mean(g) − n·mean(g·n)), g = dy·w, n the normalised x.
static inline TS_HD void ts_layernorm_dinp_row(float *dx, const float *dy, const float *x,
                                               const float *w, float m, float rs, int C) {
  float sg = 0.0f, sgn = 0.0f;
  for (int i = 0; i < C; i++) {
    float n = (x[i] - m) * rs;
    float g = dy[i] * w[i];
    sg += g;
    sgn += g * n;
  }
  sg = sg / C;
  sgn = sgn / C;
  for (int i = 0; i < C; i++) {
    float n = (x[i] - m) * rs;
    float g = dy[i] * w[i];
    dx[i] = (g - sg - n * sgn) * rs;
  }
}

// y (C) = x·rstd·w with rstd = 1/√(Σx²/C + eps); *rstd kept.
static inline TS_HD void ts_rmsnorm_row(float *y, float *rstd, const float *x, const float *w,
                                        int C) {
  float ss = 0.0f;
  for (int i = 0; i < C; i++) ss += x[i] * x[i];
  float r = 1.0f / sqrtf(ss / C + TS_NORM_EPS);
  for (int i = 0; i < C; i++) y[i] = x[i] * r * w[i];
  *rstd = r;
}

// dx (C) = rstd·(g − n·mean(g·n)), g = dy·w, n = x·rstd.
static inline TS_HD void ts_rmsnorm_dinp_row(float *dx, const float *dy, const float *x,
                                             const float *w, float rs, int C) {
  float sgn = 0.0f;
  for (int i = 0; i < C; i++) sgn += dy[i] * w[i] * (x[i] * rs);
  sgn = sgn / C;
  for (int i = 0; i < C; i++) dx[i] = (dy[i] * w[i] - x[i] * rs * sgn) * rs;
}
#endif
