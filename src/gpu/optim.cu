// AdamW on the GPU: the CPU's arithmetic (optim.c) element for element, with
// every product and sum rounded on its own (no fused multiply-add), so a
// GPU update of the same gradients gives the CPU's bits.
#include "gpu.h"

#define THREADS 256

__global__ void adamw_kernel(float *p, const float *g, float *m, float *v, int64_t n, float decay,
                             float beta1, float beta2, float step_size, float bc2_sqrt,
                             float eps) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float gi = g[i];
  float pi = __fmul_rn(p[i], decay);
  float mi = __fadd_rn(__fmul_rn(m[i], beta1), __fmul_rn(gi, 1.0f - beta1));
  float vi = __fadd_rn(__fmul_rn(v[i], beta2), __fmul_rn(__fmul_rn(gi, gi), 1.0f - beta2));
  float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2_sqrt), eps);
  p[i] = __fsub_rn(pi, __fmul_rn(step_size, __fdiv_rn(mi, denom)));
  m[i] = mi;
  v[i] = vi;
}

extern "C" void cuda_adamw(float *p, const float *g, float *m, float *v, int64_t n, float decay,
                           float beta1, float beta2, float step_size, float bc2_sqrt, float eps) {
  if (n <= 0) return;
  ts_launch(adamw_kernel, ts_blocks(n, THREADS), THREADS, 0, p, g, m, v, n, decay, beta1, beta2,
            step_size, bc2_sqrt, eps);
  ts_cuda_finish("adamw");
}

// The gradient norm's chunk sums: one thread per chunk, in index order, each
// step rounded on its own in double (no fused multiply-add): optim.c's bits.
__global__ void sumsq_chunks_kernel(double *part, const float *g, size_t n, size_t chunk,
                                    size_t nchunks) {
  size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= nchunks) return;
  size_t lo = c * chunk, hi = lo + chunk < n ? lo + chunk : n;
  double s = 0.0;
  for (size_t i = lo; i < hi; i++) s = __dadd_rn(s, __dmul_rn((double)g[i], (double)g[i]));
  part[c] = s;
}

extern "C" void cuda_sumsq_chunks(double *part, const float *g, size_t n, size_t chunk) {
  size_t nchunks = (n + chunk - 1) / chunk;
  if (nchunks == 0) return;
  double *dev = (double *)ts_cuda_scratch(nchunks * sizeof(double));
  ts_launch(sumsq_chunks_kernel, dim3(ts_blocks((int64_t)nchunks, THREADS)), dim3(THREADS), 0, dev,
            g, n, chunk, nchunks);
  ts_cuda_check(cudaMemcpyAsync(part, dev, nchunks * sizeof(double), cudaMemcpyDeviceToHost,
                                ts_cuda_stream()),
                "sumsq_chunks");
  ts_cuda_finish("sumsq_chunks");
}

__global__ void clip_scale_kernel(float *x, size_t n, float by) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= by;
}

extern "C" void cuda_scale(float *x, size_t n, float by) {
  if (n == 0) return;
  ts_launch(clip_scale_kernel, dim3(ts_blocks((int64_t)n, THREADS)), dim3(THREADS), 0, x, n, by);
  ts_cuda_finish("scale");
}
