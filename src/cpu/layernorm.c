// LayerNorm over the feature dimension (GPT variant). Row-wise, so any split
// of rows gives the same bits (each row's arithmetic is src/exact/norm_hd.h's, which
// the GPU shares); dw/db sums over rows go through leaf trees.
#include <math.h>
#include <string.h>

#include "backend/kernels.h"
#include "exact/norm_hd.h"

void layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                       const float *w, const float *b, int64_t ntok, int C) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < ntok; t++)
    ts_layernorm_row(out + t * C, &mean[t], &rstd[t], inp + t * C, w, b, C);
}

typedef struct {
  const float *dout, *inp, *mean, *rstd;
  int leaf, C;
} ln_leaf_ctx;

// Leaf partial: [dw (C) | db (C)] summed over the leaf's rows in order.
static void ln_leaf(const void *vctx, int64_t li, float *out) {
  const ln_leaf_ctx *c = vctx;
  int C = c->C;
  float *dw = out, *db = out + C;
  memset(out, 0, 2 * (size_t)C * sizeof(float));
  for (int r = 0; r < c->leaf; r++) {
    int64_t t = li * c->leaf + r;
    const float *x = c->inp + t * C, *dy = c->dout + t * C;
    float m = c->mean[t], rs = c->rstd[t];
    for (int i = 0; i < C; i++) {
      float n = (x[i] - m) * rs;
      dw[i] += n * dy[i];
      db[i] += dy[i];
    }
  }
}

int layernorm_backward(ts_ws *ws, float *dinp, float *dw, float *db, const float *dout,
                       const float *inp, const float *w, const float *mean,
                       const float *rstd, int64_t ntok, int C) {
  ln_leaf_ctx c = {dout, inp, mean, rstd, ws->leaf, C};
  float *sum = ws->sumbuf;
  if (ts_leaf_tree_sum(ws, sum, 2 * (size_t)C, ntok / ws->leaf, ln_leaf, &c) != 0) return -1;
  memcpy(dw, sum, (size_t)C * sizeof(float));
  memcpy(db, sum + C, (size_t)C * sizeof(float));
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < ntok; t++)
    ts_layernorm_dinp_row(dinp + t * C, dout + t * C, inp + t * C, w, mean[t], rstd[t], C);
  return 0;
}
