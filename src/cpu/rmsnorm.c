// RMSNorm over the feature dimension (LLaMA variant): y = x·rstd·w with
// rstd = 1/√(Σx²/d + 1e-5). Row-wise (src/exact/norm_hd.h, shared with the GPU), so
// any split of rows gives the same bits; dw sums over rows go through leaf trees (R3).
#include <math.h>
#include <string.h>

#include "backend/kernels.h"
#include "exact/norm_hd.h"

void rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int64_t ntok,
                     int C) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < ntok; t++) ts_rmsnorm_row(out + t * C, &rstd[t], inp + t * C, w, C);
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
  for (int64_t t = 0; t < ntok; t++)
    ts_rmsnorm_dinp_row(dinp + t * C, dout + t * C, inp + t * C, w, rstd[t], C);
  return 0;
}
