// Linear layers: y = x·Wᵀ + b, and their gradients. Every product is the
// canonical one (mm.h), whose bits do not depend on the call's shape: a layer
// is one product over all its rows (its weight packed once, on all threads),
// and a head's columns projected alone are the same bits as in the whole.
#include <string.h>

#include "backend/kernels.h"
#include "mm.h"

// y (n, OC; rows ld apart) += b, row by row
static void add_bias(float *y, int ld, const float *b, int64_t n, int OC) {
#pragma omp parallel for schedule(static) if (n * OC >= 65536)
  for (int64_t r = 0; r < n; r++)
    for (int o = 0; o < OC; o++) y[r * ld + o] += b[o];
}

void linear_forward(float *out, const float *inp, const float *W, const float *b,
                    int64_t ntok, int C, int OC, int rows) {
  (void)rows; // the product's bits do not depend on how its rows are cut
  // out (ntok, OC) = inp (ntok, C) · Wᵀ
  ts_mm(0, 1, (int)ntok, OC, C, 1.0f, inp, C, W, C, 0, out, OC);
  if (b) add_bias(out, OC, b, ntok, OC);
}

void linear_forward_heads(float *out, const float *inp, const float *W, const float *b,
                          int64_t ntok, int C, int OC, int hd, int rows) {
  linear_forward_head_list(out, OC, inp, W, b, NULL, OC / hd, ntok, C, hd, rows);
}

void linear_forward_head_list(float *out, int ld, const float *inp, const float *W,
                              const float *b, const int *heads, int n, int64_t ntok, int C,
                              int hd, int rows) {
  (void)rows;
  // a run of consecutive heads is one product: its weight rows and its output
  // columns are adjacent, and the bits are those of one head at a time
  for (int k = 0, run; k < n; k += run) {
    const int h = heads ? heads[k] : k;
    for (run = 1; k + run < n && (heads ? heads[k + run] : k + run) == h + run;) run++;
    float *y = out + (size_t)k * hd;
    // y (ntok, run·hd; rows ld apart) = inp (ntok, C) · W[h·hd : (h+run)·hd, :]ᵀ
    ts_mm(0, 1, (int)ntok, run * hd, C, 1.0f, inp, C, W + (size_t)h * hd * C, C, 0, y, ld);
    if (b) add_bias(y, ld, b + (size_t)h * hd, ntok, run * hd);
  }
}

void linear_backward_input(float *dinp, const float *dout, const float *W, int64_t ntok,
                           int C, int OC, int rows, int accumulate) {
  (void)rows;
  // dx (ntok, C) (+)= dy (ntok, OC) · W (OC, C)
  ts_mm(0, 0, (int)ntok, C, OC, 1.0f, dout, OC, W, C, accumulate, dinp, C);
}

void linear_weight_leaf(float *out, const float *dout, const float *inp, int64_t leaf_index,
                        int leaf, int C, int OC) {
  const float *dy = dout + leaf_index * leaf * OC;
  const float *x = inp + leaf_index * leaf * C;
  // out (OC, C) = dy (leaf, OC)ᵀ · x (leaf, C)
  ts_mm(1, 0, OC, C, leaf, 1.0f, dy, OC, x, C, 0, out, C);
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
  const float *dout;
  int leaf, OC;
} bias_leaf_ctx;

// A leaf's bias partial: its rows of dout summed in order.
static void bias_leaf(const void *vctx, int64_t li, float *out) {
  const bias_leaf_ctx *c = vctx;
  column_sum(out, c->dout + li * c->leaf * c->OC, c->leaf, c->OC, 0);
}

int linear_backward_weights(ts_ws *ws, float *dW, float *db, const float *dout,
                            const float *inp, int64_t ntok, int C, int OC) {
  // dW (OC, C) = the canonical tree over leaves of dout (leaf, OC)ᵀ · inp (leaf, C),
  // summed inside the product (no OC x C partial per leaf); db its own tree
  const int nl = (int)(ntok / ws->leaf);
  ts_mm_leaves(OC, C, nl, ws->leaf, dout, OC, inp, C, dW, C);
  if (!db) return 0;
  bias_leaf_ctx c = {dout, ws->leaf, OC};
  return ts_leaf_tree_sum(ws, db, (size_t)OC, nl, bias_leaf, &c);
}
