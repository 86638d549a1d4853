// The token embedding's gradient on the GPU: the tied head's product
// (cuBLAS, when there is one), then dwte[v] += Σ of dout over the rows whose
// token is v. A scatter by token would need atomics; instead the rows are
// grouped by token on the host (a stable counting sort, so each group is in
// row order) and one thread per (token, feature) sums its group in that
// order: the same bits every run. One leaf's scatter (--fused-ce's leaves)
// is one thread per feature going down the leaf's rows.
#include <stdlib.h>

#include "gpu.h"

#define THREADS 256

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
  const int accumulate = dlogits != NULL; // onto the head's gradient
  if (dlogits) cuda_linear_backward_weights(ws, dwte, NULL, dlogits, x, ntok, C, V);
  // order (ntok) | start (V + 1), built on the host and copied over
  int *host = (int *)malloc(((size_t)ntok + 2 * ((size_t)V + 1)) * sizeof(int));
  if (host == NULL) ts_cuda_check(cudaErrorMemoryAllocation, "embedding_backward (host)");
  int *order = host, *start = host + ntok, *next = start + V + 1;
  for (int v = 0; v <= V; v++) start[v] = 0;
  for (int64_t t = 0; t < ntok; t++) start[tokens[t] + 1]++;
  for (int v = 0; v < V; v++) start[v + 1] += start[v];
  for (int v = 0; v <= V; v++) next[v] = start[v];
  for (int64_t t = 0; t < ntok; t++) order[next[tokens[t]]++] = (int)t;
  const size_t bytes = ((size_t)ntok + V + 1) * sizeof(int);
  int *dev = (int *)ts_cuda_scratch(bytes);
  ts_cuda_check(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, ts_cuda_stream()),
                "embedding_backward");
  int64_t n = (int64_t)V * C;
  ts_launch(embedding_backward_kernel, ts_blocks(n, THREADS), THREADS, 0, dwte, dout, dev,
            dev + ntok, V, C, accumulate);
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
