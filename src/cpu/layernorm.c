// LayerNorm over the feature dimension (GPT variant). Row-wise, so any split
// of rows gives the same bits; dw/db sums over rows go through leaf trees.
#include <math.h>
#include <string.h>

#include "kernels.h"

void layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                       const float *w, const float *b, int64_t ntok, int C) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < ntok; t++) {
    const float *x = inp + t * C;
    float s = 0.0f;
    for (int i = 0; i < C; i++) s += x[i];
    float m = s / C;
    float v = 0.0f;
    for (int i = 0; i < C; i++) {
      float dx = x[i] - m;
      v += dx * dx;
    }
    v = v / C;
    float r = 1.0f / sqrtf(v + 1e-5f);
    float *y = out + t * C;
    for (int i = 0; i < C; i++) y[i] = (x[i] - m) * r * w[i] + b[i];
    mean[t] = m;
    rstd[t] = r;
  }
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
  for (int64_t t = 0; t < ntok; t++) {
    const float *x = inp + t * C, *dy = dout + t * C;
    float m = mean[t], rs = rstd[t];
    // dx = rstd * (g - mean(g) - n * mean(g * n)), g = dy * w, n = normalised x
    float sg = 0.0f, sgn = 0.0f;
    for (int i = 0; i < C; i++) {
      float n = (x[i] - m) * rs;
      float g = dy[i] * w[i];
      sg += g;
      sgn += g * n;
    }
    sg = sg / C;
    sgn = sgn / C;
    float *dx = dinp + t * C;
    for (int i = 0; i < C; i++) {
      float n = (x[i] - m) * rs;
      float g = dy[i] * w[i];
      dx[i] = (g - sg - n * sgn) * rs;
    }
  }
  return 0;
}
