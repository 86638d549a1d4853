// Linear layers: y = x·Wᵀ + b on fixed row blocks, and their gradients.
#include <cblas.h>
#include <string.h>

#include "kernels.h"

void linear_forward(float *out, const float *inp, const float *W, const float *b,
                    int64_t ntok, int C, int OC, int rows) {
  int64_t nblocks = ntok / rows;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < nblocks; t++) {
    const float *x = inp + t * rows * C;
    float *y = out + t * rows * OC;
    // y (rows, OC) = x (rows, C) · Wᵀ
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, OC, C, 1.0f, x, C, W, C,
                0.0f, y, OC);
    if (b)
      for (int r = 0; r < rows; r++)
        for (int o = 0; o < OC; o++) y[(size_t)r * OC + o] += b[o];
  }
}

void linear_forward_heads(float *out, const float *inp, const float *W, const float *b,
                          int64_t ntok, int C, int OC, int hd, int rows) {
  linear_forward_head_list(out, OC, inp, W, b, NULL, OC / hd, ntok, C, hd, rows);
}

void linear_forward_head_list(float *out, int ld, const float *inp, const float *W,
                              const float *b, const int *heads, int n, int64_t ntok, int C,
                              int hd, int rows) {
  int64_t nblocks = ntok / rows;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < nblocks; t++) {
    const float *x = inp + t * rows * C;
    for (int k = 0; k < n; k++) {
      const int h = heads ? heads[k] : k;
      float *y = out + t * rows * ld + (size_t)k * hd;
      // y (rows, hd) = x (rows, C) · W[h·hd : (h+1)·hd, :]ᵀ — one call per head
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, hd, C, 1.0f, x, C,
                  W + (size_t)h * hd * C, C, 0.0f, y, ld);
      if (b)
        for (int r = 0; r < rows; r++)
          for (int o = 0; o < hd; o++) y[(size_t)r * ld + o] += b[h * hd + o];
    }
  }
}

void linear_backward_input(float *dinp, const float *dout, const float *W, int64_t ntok,
                           int C, int OC, int rows, int accumulate) {
  int64_t nblocks = ntok / rows;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < nblocks; t++) {
    // dx (rows, C) (+)= dy (rows, OC) · W (OC, C)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, C, OC, 1.0f,
                dout + t * rows * OC, OC, W, C, accumulate ? 1.0f : 0.0f,
                dinp + t * rows * C, C);
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

void column_sum(float *out, const float *x, int64_t rows, int cols, int accumulate) {
  // each column's rows in order; blocks of columns on the threads when it pays
  const int blk = 64, nblk = (cols + blk - 1) / blk;
#pragma omp parallel for schedule(static) if (rows * cols >= 65536)
  for (int b = 0; b < nblk; b++) {
    const int c0 = b * blk, c1 = c0 + blk < cols ? c0 + blk : cols;
    int64_t r = 0;
    if (!accumulate) {
      for (int c = c0; c < c1; c++) out[c] = x[c];
      r = 1;
    }
    for (; r < rows; r++)
      for (int c = c0; c < c1; c++) out[c] += x[r * cols + c];
  }
}

typedef struct {
  const float *dout, *inp;
  int leaf, C, OC;
  int with_bias;
} weight_leaf_ctx;

static void weight_leaf(const void *vctx, int64_t li, float *out) {
  const weight_leaf_ctx *c = vctx;
  linear_weight_leaf(out, c->dout, c->inp, li, c->leaf, c->C, c->OC);
  // bias partial: rows of the leaf summed in order, after the weight block
  if (c->with_bias)
    column_sum(out + (size_t)c->OC * c->C, c->dout + li * c->leaf * c->OC, c->leaf, c->OC, 0);
}

int linear_backward_weights(ts_ws *ws, float *dW, float *db, const float *dout,
                            const float *inp, int64_t ntok, int C, int OC) {
  weight_leaf_ctx c = {dout, inp, ws->leaf, C, OC, db != NULL};
  size_t nw = (size_t)OC * C;
  size_t n = nw + (db ? (size_t)OC : 0);
  // dW and db are adjacent in the partial; the tree result is split back out.
  float *sum = ws->sumbuf;
  if (ts_leaf_tree_sum(ws, sum, n, ntok / ws->leaf, weight_leaf, &c) != 0) return -1;
  memcpy(dW, sum, nw * sizeof(float));
  if (db) memcpy(db, sum + nw, (size_t)OC * sizeof(float));
  return 0;
}
