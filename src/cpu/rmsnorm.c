// RMSNorm over the feature dimension (LLaMA variant): y = x·rstd·w with
// rstd = 1/√(Σx²/d + 1e-5). Row-wise, so any split of rows gives the same
// bits; dw sums over rows go through leaf trees (R3).
#include <math.h>
#include <string.h>

#include "kernels.h"

void rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int64_t ntok,
                     int C) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < ntok; t++) {
    const float *x = inp + t * C;
    float ss = 0.0f;
    for (int i = 0; i < C; i++) ss += x[i] * x[i];
    float r = 1.0f / sqrtf(ss / C + 1e-5f);
    float *y = out + t * C;
    for (int i = 0; i < C; i++) y[i] = x[i] * r * w[i];
    rstd[t] = r;
  }
}

typedef struct {
  const float *dout, *inp, *rstd;
  int leaf, C;
} rms_leaf_ctx;

// Leaf partial: dw (C) summed over the leaf's rows in order.
static void rms_leaf(const void *vctx, int64_t li, float *out) {
  const rms_leaf_ctx *c = vctx;
  int C = c->C;
  memset(out, 0, (size_t)C * sizeof(float));
  for (int r = 0; r < c->leaf; r++) {
    int64_t t = li * c->leaf + r;
    const float *x = c->inp + t * C, *dy = c->dout + t * C;
    float rs = c->rstd[t];
    for (int i = 0; i < C; i++) out[i] += x[i] * rs * dy[i];
  }
}

int rmsnorm_backward(ts_ws *ws, float *dinp, float *dw, const float *dout, const float *inp,
                     const float *w, const float *rstd, int64_t ntok, int C) {
  rms_leaf_ctx c = {dout, inp, rstd, ws->leaf, C};
  if (ts_leaf_tree_sum(ws, ws->sumbuf, (size_t)C, ntok / ws->leaf, rms_leaf, &c) != 0) return -1;
  memcpy(dw, ws->sumbuf, (size_t)C * sizeof(float));
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < ntok; t++) {
    const float *x = inp + t * C, *dy = dout + t * C;
    float rs = rstd[t];
    // dx = rstd·(g − n·mean(g·n)), g = dy·w, n = x·rstd
    float sgn = 0.0f;
    for (int i = 0; i < C; i++) sgn += dy[i] * w[i] * (x[i] * rs);
    sgn = sgn / C;
    float *dx = dinp + t * C;
    for (int i = 0; i < C; i++) dx[i] = (dy[i] * w[i] - x[i] * rs * sgn) * rs;
  }
  return 0;
}
