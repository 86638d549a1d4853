// Linear layers and the shared leaf-tree machinery for weight gradients.
#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

int ts_ws_init(ts_ws *ws, int tile, int leaf, size_t max_leaf_floats, int dh) {
  memset(ws, 0, sizeof *ws);
  ws->tile = tile;
  ws->leaf = leaf;
  ws->nthreads = omp_get_max_threads();
  ws->leaf_cap = max_leaf_floats;
  ws->leafbuf = calloc((size_t)ws->nthreads, sizeof(float *));
  // attention scratch per thread: S, dP (tile x tile), acc/dq (tile x dh),
  // dk|dv leaf (2 tile x dh), m, l (tile)
  ws->attn_cap = (size_t)2 * tile * tile + (size_t)4 * tile * dh + 4 * (size_t)tile;
  ws->attnbuf = calloc((size_t)ws->nthreads, sizeof(float *));
  ws->attntree = calloc((size_t)ws->nthreads, sizeof(ts_tree));
  if (!ws->leafbuf || !ws->attnbuf || !ws->attntree) return -1;
  for (int i = 0; i < ws->nthreads; i++) {
    if (posix_memalign((void **)&ws->leafbuf[i], 64, max_leaf_floats * sizeof(float)) ||
        posix_memalign((void **)&ws->attnbuf[i], 64, ws->attn_cap * sizeof(float)))
      return -1;
    ts_tree_init(&ws->attntree[i], (size_t)2 * tile * dh);
  }
  ts_tree_init(&ws->tree, max_leaf_floats);
  return 0;
}

void ts_ws_free(ts_ws *ws) {
  for (int i = 0; i < ws->nthreads; i++) {
    if (ws->leafbuf) free(ws->leafbuf[i]);
    if (ws->attnbuf) free(ws->attnbuf[i]);
    if (ws->attntree) ts_tree_free(&ws->attntree[i]);
  }
  free(ws->leafbuf);
  free(ws->attnbuf);
  free(ws->attntree);
  ts_tree_free(&ws->tree);
  memset(ws, 0, sizeof *ws);
}

int ts_leaf_tree_sum(ts_ws *ws, float *sum, size_t n, int64_t nleaves, ts_leaf_fn fn,
                     const void *ctx) {
  ts_tree_resize(&ws->tree, n);
  int W = ws->nthreads;
  for (int64_t base = 0; base < nleaves; base += W) {
    int cnt = (int)(nleaves - base < W ? nleaves - base : W);
    // Each leaf's partial is a fixed computation on that leaf alone, so which
    // thread computes it does not matter; the pushes below fix the order.
#pragma omp parallel for schedule(static, 1) num_threads(ws->nthreads)
    for (int i = 0; i < cnt; i++) fn(ctx, base + i, ws->leafbuf[i]);
    for (int i = 0; i < cnt; i++)
      if (ts_tree_push(&ws->tree, ws->leafbuf[i]) != 0) return -1;
  }
  ts_tree_finish(&ws->tree, sum);
  return 0;
}

void linear_forward(float *out, const float *inp, const float *W, const float *b,
                    int64_t ntok, int C, int OC, int tile) {
  int64_t ntiles = ntok / tile;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < ntiles; t++) {
    const float *x = inp + t * tile * C;
    float *y = out + t * tile * OC;
    // y (tile, OC) = x (tile, C) · Wᵀ
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, tile, OC, C, 1.0f, x, C, W, C,
                0.0f, y, OC);
    if (b)
      for (int r = 0; r < tile; r++)
        for (int o = 0; o < OC; o++) y[(size_t)r * OC + o] += b[o];
  }
}

void linear_forward_heads(float *out, const float *inp, const float *W, const float *b,
                          int64_t ntok, int C, int OC, int hd, int tile) {
  int64_t ntiles = ntok / tile;
  int nh = OC / hd;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < ntiles; t++) {
    const float *x = inp + t * tile * C;
    for (int h = 0; h < nh; h++) {
      float *y = out + t * tile * OC + (size_t)h * hd;
      // y (tile, hd) = x (tile, C) · W[h·hd : (h+1)·hd, :]ᵀ — one call per head
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, tile, hd, C, 1.0f, x, C,
                  W + (size_t)h * hd * C, C, 0.0f, y, OC);
      if (b)
        for (int r = 0; r < tile; r++)
          for (int o = 0; o < hd; o++) y[(size_t)r * OC + o] += b[h * hd + o];
    }
  }
}

void linear_backward_input(float *dinp, const float *dout, const float *W, int64_t ntok,
                           int C, int OC, int tile, int accumulate) {
  int64_t ntiles = ntok / tile;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < ntiles; t++) {
    // dx (tile, C) (+)= dy (tile, OC) · W (OC, C)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, tile, C, OC, 1.0f,
                dout + t * tile * OC, OC, W, C, accumulate ? 1.0f : 0.0f,
                dinp + t * tile * C, C);
  }
}

void linear_weight_leaf(float *out, const float *dout, const float *inp, int64_t leaf_index,
                        int leaf, int C, int OC) {
  const float *dy = dout + leaf_index * leaf * OC;
  const float *x = inp + leaf_index * leaf * C;
  // out (OC, C) = dy (leaf, OC)ᵀ · x (leaf, C)
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, leaf, 1.0f, dy, OC, x, C,
              0.0f, out, C);
}

typedef struct {
  const float *dout, *inp;
  int leaf, C, OC;
  int with_bias;
} weight_leaf_ctx;

static void weight_leaf(const void *vctx, int64_t li, float *out) {
  const weight_leaf_ctx *c = vctx;
  linear_weight_leaf(out, c->dout, c->inp, li, c->leaf, c->C, c->OC);
  if (c->with_bias) {
    // bias partial: rows of the leaf summed in order, after the weight block
    float *db = out + (size_t)c->OC * c->C;
    const float *dy = c->dout + li * c->leaf * c->OC;
    for (int o = 0; o < c->OC; o++) db[o] = dy[o];
    for (int r = 1; r < c->leaf; r++)
      for (int o = 0; o < c->OC; o++) db[o] += dy[(size_t)r * c->OC + o];
  }
}

int linear_backward_weights(ts_ws *ws, float *dW, float *db, const float *dout,
                            const float *inp, int64_t ntok, int C, int OC) {
  weight_leaf_ctx c = {dout, inp, ws->leaf, C, OC, db != NULL};
  size_t nw = (size_t)OC * C;
  size_t n = nw + (db ? (size_t)OC : 0);
  // dW and db are adjacent in the partial; the tree result is split back out.
  float *sum = ws->leafbuf[0]; // free again once the tree is finished
  if (ts_leaf_tree_sum(ws, sum, n, ntok / ws->leaf, weight_leaf, &c) != 0) return -1;
  memcpy(dW, sum, nw * sizeof(float));
  if (db) memcpy(db, sum + nw, (size_t)OC * sizeof(float));
  return 0;
}
