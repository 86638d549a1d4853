// The token embedding's gradient on the GPU. A scatter by token would need
// atomics; instead the rows are grouped by token on the host (a stable
// counting sort, so each group is in row order) and each element of dwte is
// one thread's.
//
// The exact tier is the CPU's encoder_backward_wte (src/cpu/encoder.c), whose
// sum over tokens is the canonical tree over leaves (docs/EXACTNESS.md R3):
// leaf l's partial of row v is the tied head's chain over the leaf's tokens
// (or +0 without a head), plus the leaf's dout rows whose token is v added in
// row order; the partials go through the tree. With the head that is the
// leaves product with the scatter inside (src/gpu/mm.cu), every row of dwte at
// once (a row no token touches gets its chains' tree alone, ts_mm_leaves' bits,
// as on the CPU); without it the rows no token touches are +0 and a thread
// per (touched row, feature) makes the tree of its scatter partials.
//
// The fast tier: the tied head's product (cuBLAS, when there is one), then
// dwte[v] += Σ of dout over the rows whose token is v, one thread per (token,
// feature) summing its group in row order: the same bits every run. One
// leaf's scatter (--fused-ce's leaves) is one thread per feature going down
// the leaf's rows, the CPU's additions in its order, in both tiers.
#include <stdlib.h>

#include "gpu.h"

extern "C" {
#include "exact/tree_hd.h"
}

#define THREADS 256

// dwte[rows[q], c] = the canonical tree over the nl leaves of each leaf's
// partial: +0, then dout[r, c] for the leaf's rows r whose token is rows[q]
// (order[start[v]] .. order[start[v + 1] − 1], ascending), in row order.
__global__ void scatter_tree_kernel(float *dwte, const float *dout, const int *order,
                                    const int *start, const int *rows, int nt, int C, int nl,
                                    int leaf) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (int64_t)nt * C) return;
  const int v = rows[i / C], c = (int)(i % C);
  int p = start[v];
  const int end = start[v + 1];
  ts_tree1 tree;
  ts_tree1_init(&tree);
  for (int l = 0; l < nl; l++) {
    const int64_t lim = (int64_t)(l + 1) * leaf;
    float t = 0.0f;
    for (; p < end && order[p] < lim; p++) t = t + dout[(int64_t)order[p] * C + c];
    ts_tree1_push(&tree, t);
  }
  dwte[(int64_t)v * C + c] = ts_tree1_finish(&tree);
}

__global__ void embedding_zero_kernel(float *x, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = 0.0f;
}

// dwte[v, c] (+)= Σ_k dout[order[k], c] for k in [start[v], start[v + 1]).
__global__ void embedding_backward_kernel(float *dwte, const float *dout, const int *order,
                                          const int *start, int V, int C, int accumulate) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (int64_t)V * C) return;
  int v = (int)(i / C), c = (int)(i % C);
  float s = accumulate ? dwte[i] : 0.0f;
  for (int k = start[v]; k < start[v + 1]; k++) s += dout[(int64_t)order[k] * C + c];
  dwte[i] = s;
}

extern "C" int cuda_embedding_backward(ts_ws *ws, float *dwte, const float *dout,
                                       const int *tokens, const float *dlogits, const float *x,
                                       int64_t ntok, int V, int C) {
  const int exact = ts_cuda_exact();
  const int accumulate = dlogits != NULL; // onto the head's gradient
  if (dlogits && !exact) cuda_linear_backward_weights(ws, dwte, NULL, dlogits, x, ntok, C, V);
  // order (ntok) | start (V + 1) | the touched tokens, ascending (at most
  // min(ntok, V)), built on the host and copied over; next (V + 1): the sort's
  int *host = (int *)malloc(((size_t)2 * ntok + 2 * ((size_t)V + 1)) * sizeof(int));
  if (host == NULL) ts_cuda_check(cudaErrorMemoryAllocation, "embedding_backward (host)");
  int *order = host, *start = host + ntok, *rows = start + V + 1, *next = rows + ntok;
  for (int v = 0; v <= V; v++) start[v] = 0;
  for (int64_t t = 0; t < ntok; t++) start[tokens[t] + 1]++;
  int nt = 0;
  for (int v = 0; v < V; v++)
    if (start[v + 1]) rows[nt++] = v;
  for (int v = 0; v < V; v++) start[v + 1] += start[v];
  for (int v = 0; v <= V; v++) next[v] = start[v];
  for (int64_t t = 0; t < ntok; t++) order[next[tokens[t]]++] = (int)t;
  const size_t bytes = ((size_t)ntok + V + 1 + nt) * sizeof(int);
  int *dev = (int *)ts_cuda_scratch(bytes);
  ts_cuda_check(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, ts_cuda_stream()),
                "embedding_backward");
  const int64_t n = (int64_t)V * C;
  const int nl = (int)(ntok / ws->leaf);
  if (exact && dlogits) {
    // dwte (V, C) = the tree over leaves of dlogits (leaf, V)ᵀ · x (leaf, C), each
    // leaf's partial with its scatter
    ts_cuda_mm_leaves_scatter(V, C, nl, ws->leaf, dlogits, V, x, C, dwte, C, dout, C, dev,
                              dev + ntok);
  } else if (exact) {
    ts_launch(embedding_zero_kernel, ts_blocks(n, THREADS), THREADS, 0, dwte, n);
    if (nt > 0)
      ts_launch(scatter_tree_kernel, ts_blocks((int64_t)nt * C, THREADS), THREADS, 0, dwte, dout,
                dev, dev + ntok, dev + ntok + V + 1, nt, C, nl, ws->leaf);
  } else {
    ts_launch(embedding_backward_kernel, ts_blocks(n, THREADS), THREADS, 0, dwte, dout, dev,
              dev + ntok, V, C, accumulate);
  }
  ts_cuda_finish("embedding_backward");
  free(host);
  return 0;
}

// out[tokens[r], c] += dout[r, c] for the leaf's rows r in order: each
// element's additions are the CPU's, in its order.
__global__ void leaf_scatter_kernel(float *out, const float *dout, const int *tokens, int64_t r0,
                                    int leaf, int C) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int64_t t = r0; t < r0 + leaf; t++) out[(int64_t)tokens[t] * C + c] += dout[t * C + c];
}

extern "C" void cuda_embedding_leaf_scatter(float *out, const float *dout, const int *tokens,
                                            int64_t leaf_index, int leaf, int C) {
  ts_launch(leaf_scatter_kernel, ts_blocks(C, THREADS), THREADS, 0, out, dout, tokens,
            leaf_index * leaf, leaf, C);
  ts_cuda_finish("embedding_leaf_scatter");
}
