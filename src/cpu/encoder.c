// Token + positional embedding.
#include <stdlib.h>
#include <string.h>

#include "backend/kernels.h"
#include "mm.h"

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

// The rows of dwte that some token of the batch scatters into, a chunk of
// them at a time: each leaf's partial of those rows is the head's chain (from
// their columns of dlogits, gathered) plus the leaf's dout rows of those
// tokens added in the leaf's order, and the partials go through the
// canonical tree. The same additions, per element, as a whole (V, C) partial
// per leaf (encoder_wte_leaf_scatter) would make.
#define WTE_CHUNK 64

typedef struct {
  const float *dout, *x, *g; // g (ntok, n): the chunk's columns of dlogits, or NULL
  const int *tokens, *pos;   // pos[v]: v's index among the batch's tokens, or -1
  int q0, n;                 // the chunk: indices q0 .. q0+n-1
  int leaf, C;
} wte_rows_ctx;

static void wte_rows_leaf(const void *vctx, int64_t li, float *out) {
  const wte_rows_ctx *c = vctx;
  const int C = c->C;
  if (c->g)
    ts_mm(1, 0, c->n, C, c->leaf, 1.0f, c->g + li * c->leaf * c->n, c->n, c->x + li * c->leaf * C,
          C, 0, out, C);
  else
    memset(out, 0, (size_t)c->n * C * sizeof(float));
  for (int r = 0; r < c->leaf; r++) {
    const int64_t t = li * c->leaf + r;
    const int q = c->pos[c->tokens[t]] - c->q0;
    if (q < 0 || q >= c->n) continue;
    float *dst = out + (size_t)q * C;
    const float *src = c->dout + t * C;
    for (int i = 0; i < C; i++) dst[i] += src[i];
  }
}

int encoder_backward_wte(ts_ws *ws, float *dwte, const float *dout, const int *tokens,
                         const float *dlogits, const float *x, int64_t ntok, int V, int C) {
  const int leaf = ws->leaf, nl = (int)(ntok / leaf);
  // the rows no token touches: the head's tree of chains (ts_mm_leaves), or zeros
  if (dlogits)
    ts_mm_leaves(V, C, nl, leaf, dlogits, V, x, C, dwte, C);
  else
    memset(dwte, 0, (size_t)V * C * sizeof(float));
  // the batch's distinct tokens, ascending
  int *pos = malloc((size_t)V * sizeof(int));
  int *rows = malloc((size_t)(ntok < V ? ntok : V) * sizeof(int) + sizeof(int));
  float *g = dlogits ? malloc((size_t)ntok * WTE_CHUNK * sizeof(float)) : NULL;
  int rc = (!pos || !rows || (dlogits && !g)) ? -1 : 0;
  if (rc == 0) {
    for (int v = 0; v < V; v++) pos[v] = -1;
    for (int64_t t = 0; t < ntok; t++) pos[tokens[t]] = 0;
    int nt = 0;
    for (int v = 0; v < V; v++)
      if (pos[v] == 0) pos[v] = nt, rows[nt++] = v;
    for (int q0 = 0; q0 < nt && rc == 0; q0 += WTE_CHUNK) {
      const int n = nt - q0 < WTE_CHUNK ? nt - q0 : WTE_CHUNK;
      if (g)
        for (int64_t t = 0; t < ntok; t++)
          for (int q = 0; q < n; q++) g[t * n + q] = dlogits[t * V + rows[q0 + q]];
      wte_rows_ctx c = {dout, x, g, tokens, pos, q0, n, leaf, C};
      rc = ts_leaf_tree_sum(ws, ws->sumbuf, (size_t)n * C, nl, wte_rows_leaf, &c);
      for (int q = 0; q < n && rc == 0; q++)
        memcpy(dwte + (size_t)rows[q0 + q] * C, ws->sumbuf + (size_t)q * C, (size_t)C * sizeof(float));
    }
  }
  free(pos);
  free(rows);
  free(g);
  return rc;
}
