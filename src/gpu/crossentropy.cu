// Softmax cross-entropy on the GPU, in two tiers (docs/GPU.md).
//  - Exact: a thread per token row takes the row's max and Σ e^(z − max) in
//    index order with tessera's exp and log, as the CPU does
//    (src/cpu/crossentropy.c); the gradient is then a thread per element.
//    The CPU's bits.
//  - Fast: a block per row; the max and the sum are block reductions in a
//    fixed order (per-thread strided sums, then a shared-memory tree), so two
//    runs agree bit for bit.
#include <stdlib.h>

#include "exact/fastexp.h"
#include "exact/exactmath.h"
#include "gpu.h"

#define THREADS 256

// ---- the exact tier ---------------------------------------------------------------------------
// The row's max and Σ e^(z − max), in index order (the CPU's loops).
__device__ void row_stats_exact(const float *z, int V, float *mx, float *s) {
  float m = z[0];
  for (int i = 1; i < V; i++) m = z[i] > m ? z[i] : m;
  float acc = 0.0f;
  for (int i = 0; i < V; i++) acc += ts_expf(z[i] - m);
  *mx = m;
  *s = acc;
}

__global__ void crossentropy_forward_exact(float *losses, const float *logits, const int *targets,
                                           int64_t ntok, int V) {
  int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= ntok) return;
  const float *z = logits + t * V;
  float mx, s;
  row_stats_exact(z, V, &mx, &s);
  losses[t] = ts_logf(s) + mx - z[targets[t]];
}

// stats (ntok, 2): each row's max and 1/Σ.
__global__ void crossentropy_stats_exact(float *stats, const float *logits, int64_t ntok, int V) {
  int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= ntok) return;
  float mx, s;
  row_stats_exact(logits + t * V, V, &mx, &s);
  stats[2 * t] = mx;
  stats[2 * t + 1] = 1.0f / s;
}

// dz = e^(z − max)·(1/Σ)·scale, less scale at the target: the CPU's
// operations in its order. dz may be z itself (each thread reads its element
// before writing it).
__global__ void crossentropy_backward_exact(float *dlogits, const float *logits,
                                            const int *targets, const float *stats, float scale,
                                            int64_t ntok, int V) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= ntok * V) return;
  int64_t t = i / V;
  float g = ts_expf(logits[i] - stats[2 * t]) * stats[2 * t + 1] * scale;
  dlogits[i] = i - t * V == targets[t] ? g - scale : g;
}

// ---- the fast tier ----------------------------------------------------------------------------
// Reduces v over the block (THREADS threads) with op; every thread gets it.
template <typename Op>
__device__ float block_reduce(float v, float *sh, Op op) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = THREADS / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) sh[threadIdx.x] = op(sh[threadIdx.x], sh[threadIdx.x + s]);
    __syncthreads();
  }
  float r = sh[0];
  __syncthreads();
  return r;
}

struct max_op {
  __device__ float operator()(float a, float b) const { return a > b ? a : b; }
};
struct add_op {
  __device__ float operator()(float a, float b) const { return a + b; }
};

// The row's max and Σ e^(z − max).
__device__ void row_stats(const float *z, int V, float *sh, float *mx, float *s) {
  float m = -INFINITY;
  for (int i = threadIdx.x; i < V; i += THREADS) m = z[i] > m ? z[i] : m;
  m = block_reduce(m, sh, max_op());
  float acc = 0.0f;
  for (int i = threadIdx.x; i < V; i += THREADS) acc += expf(z[i] - m);
  *s = block_reduce(acc, sh, add_op());
  *mx = m;
}

__global__ void crossentropy_forward_kernel(float *losses, const float *logits,
                                            const int *targets, int V) {
  __shared__ float sh[THREADS];
  int64_t t = blockIdx.x;
  const float *z = logits + t * V;
  float mx, s;
  row_stats(z, V, sh, &mx, &s);
  if (threadIdx.x == 0) losses[t] = logf(s) + mx - z[targets[t]];
}

// dz = (softmax − onehot)·scale; dz may be z itself (each element is read
// before it is written, and the stats are taken before any write).
__global__ void crossentropy_backward_kernel(float *dlogits, const float *logits,
                                             const int *targets, float scale, int V) {
  __shared__ float sh[THREADS];
  int64_t t = blockIdx.x;
  const float *z = logits + t * V;
  float *dz = dlogits + t * V;
  float mx, s;
  row_stats(z, V, sh, &mx, &s);
  float inv = 1.0f / s;
  int target = targets[t];
  for (int i = threadIdx.x; i < V; i += THREADS) {
    float g = expf(z[i] - mx) * inv * scale;
    dz[i] = i == target ? g - scale : g;
  }
}

extern "C" void cuda_crossentropy_forward(float *losses, const float *logits, const int *targets,
                                          int64_t ntok, int V) {
  if (ts_cuda_exact()) {
    ts_launch(crossentropy_forward_exact, ts_blocks(ntok, THREADS), THREADS, 0, losses, logits,
              targets, ntok, V);
    ts_cuda_finish("crossentropy_forward");
    return;
  }
  ts_launch(crossentropy_forward_kernel, (unsigned)ntok, THREADS, 0, losses, logits, targets, V);
  ts_cuda_finish("crossentropy_forward");
}

extern "C" void cuda_crossentropy_backward(float *dlogits, const float *logits, const int *targets,
                                           float scale, int64_t ntok, int V) {
  if (ts_cuda_exact()) {
    float *stats = (float *)ts_cuda_scratch((size_t)ntok * 2 * sizeof(float));
    ts_launch(crossentropy_stats_exact, ts_blocks(ntok, THREADS), THREADS, 0, stats, logits, ntok,
              V);
    ts_launch(crossentropy_backward_exact, ts_blocks(ntok * V, THREADS), THREADS, 0, dlogits,
              logits, targets, (const float *)stats, scale, ntok, V);
    ts_cuda_finish("crossentropy_backward");
    return;
  }
  ts_launch(crossentropy_backward_kernel, (unsigned)ntok, THREADS, 0, dlogits, logits, targets,
            scale, V);
  ts_cuda_finish("crossentropy_backward");
}

// The loss's sum (kernels.h, token_tree_sum): one thread per leaf adds the
// leaf's values in order, as the CPU does, and the tree over the leaves is
// the CPU's own, on the host over the partials (token_tree_sum with leaves of
// one value): the CPU's bits.
__global__ void leaf_sums_kernel(float *partial, const float *vals, int64_t nleaves, int leaf) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= nleaves) return;
  const float *v = vals + i * leaf;
  float s = v[0];
  for (int r = 1; r < leaf; r++) s += v[r];
  partial[i] = s;
}

extern "C" float cuda_token_tree_sum(const float *vals, int64_t ntok, int leaf) {
  const int64_t nl = ntok / leaf;
  float *dev = (float *)ts_cuda_scratch((size_t)nl * sizeof(float));
  float *host = (float *)malloc((size_t)nl * sizeof(float));
  if (host == NULL) ts_cuda_check(cudaErrorMemoryAllocation, "token_tree_sum (host)");
  ts_launch(leaf_sums_kernel, ts_blocks(nl, THREADS), THREADS, 0, dev, vals, nl, leaf);
  ts_cuda_check(cudaMemcpyAsync(host, dev, (size_t)nl * sizeof(float), cudaMemcpyDeviceToHost,
                                ts_cuda_stream()),
                "token_tree_sum");
  ts_cuda_finish("token_tree_sum");
  float sum = token_tree_sum(host, nl, 1);
  free(host);
  return sum;
}
