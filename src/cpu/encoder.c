// Token + positional embedding.
#include <string.h>

#include "kernels.h"

void encoder_forward(float *out, const int *tokens, const float *wte, const float *wpe,
                     int B, int T, int C) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < (int64_t)B * T; r++) {
    const float *e = wte + (size_t)tokens[r] * C;
    float *y = out + r * C;
    if (!wpe) { // no positional embedding (LLaMA: positions come from RoPE)
      memcpy(y, e, (size_t)C * sizeof(float));
      continue;
    }
    const float *p = wpe + (size_t)(r % T) * C;
    for (int i = 0; i < C; i++) y[i] = e[i] + p[i];
  }
}

void encoder_wte_leaf_scatter(float *out, const float *dout, const int *tokens,
                              int64_t leaf_index, int leaf, int C) {
  // rows in order: a fixed sequence of additions per token id
  for (int r = 0; r < leaf; r++) {
    int64_t t = leaf_index * leaf + r;
    float *dst = out + (size_t)tokens[t] * C;
    const float *src = dout + t * C;
    for (int i = 0; i < C; i++) dst[i] += src[i];
  }
}

int encoder_backward_wpe(ts_ws *ws, float *dwpe, const float *dout, int B, int T, int C) {
  // Row block j of wpe receives leaf (b, j) of every sequence b: its canonical
  // tree over (batch, position) leaves keeps only those positions, the others
  // being empty.
  int leaf = ws->leaf;
  int nj = T / leaf;
  int64_t nleaves = (int64_t)B * nj;
  for (int j = 0; j < nj; j++) {
    ts_tree_resize(&ws->tree, (size_t)leaf * C);
    for (int64_t li = 0; li < nleaves; li++) {
      const float *leafp = (li % nj == j) ? dout + li * leaf * C : NULL;
      if (ts_tree_push(&ws->tree, leafp) != 0) return -1;
    }
    ts_tree_finish(&ws->tree, dwpe + (size_t)j * leaf * C);
  }
  return 0;
}

typedef struct {
  const float *dout, *dlogits, *x;
  const int *tokens;
  int leaf, V, C;
} wte_leaf_ctx;

// Leaf partial of dwte: the tied head's weight partial (or zeros), then the scatter.
static void wte_leaf(const void *vctx, int64_t li, float *out) {
  const wte_leaf_ctx *c = vctx;
  if (c->dlogits)
    linear_weight_leaf(out, c->dlogits, c->x, li, c->leaf, c->C, c->V);
  else
    memset(out, 0, (size_t)c->V * c->C * sizeof(float));
  encoder_wte_leaf_scatter(out, c->dout, c->tokens, li, c->leaf, c->C);
}

int encoder_backward_wte(ts_ws *ws, float *dwte, const float *dout, const int *tokens,
                         const float *dlogits, const float *x, int64_t ntok, int V, int C) {
  wte_leaf_ctx c = {dout, dlogits, x, tokens, ws->leaf, V, C};
  return ts_leaf_tree_sum(ws, dwte, (size_t)V * C, ntok / ws->leaf, wte_leaf, &c);
}
