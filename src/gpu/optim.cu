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
