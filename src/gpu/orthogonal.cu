// Muon on the GPU (orthogonal.h): the momentum, the Newton–Schulz or Polar
// Express iteration with cuBLAS products, and the update, with the CPU's
// orientation, coefficients and normalisation. The products are fp32 in
// either --precision: the iteration amplifies rounding (its first steps
// have coefficients near 8 and −24), so bf16 operands would not converge to
// the CPU's polar factor.
#include <math.h>

#include "gpu.h"

#define THREADS 256

// buf = β·buf + (1−β)·g; u = (1−β)·g + β·buf (Nesterov).
__global__ void muon_momentum_kernel(float *u, float *buf, const float *g, int64_t n, float beta) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float b = __fadd_rn(__fmul_rn(beta, buf[i]), __fmul_rn(1.0f - beta, g[i]));
  buf[i] = b;
  u[i] = __fadd_rn(__fmul_rn(1.0f - beta, g[i]), __fmul_rn(beta, b));
}

// *out = 1 / (‖x‖_F·scale + 1e-7), the norm in double by one block: strided
// per-thread sums, then a shared-memory tree (a fixed order).
__global__ void inverse_norm_kernel(float *out, const float *x, int64_t n, double scale) {
  __shared__ double sh[THREADS];
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += THREADS) s += (double)x[i] * x[i];
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int k = THREADS / 2; k > 0; k /= 2) {
    if (threadIdx.x < k) sh[threadIdx.x] += sh[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = (float)(1.0 / (sqrt(sh[0]) * scale + 1e-7));
}

__global__ void scale_kernel(float *x, const float *by, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= *by;
}

// p ← p·(1 − lr·wd) − lr·(u·shape).
__global__ void muon_apply_kernel(float *p, const float *u, int64_t n, float decay, float lr,
                                  float shape) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = __fsub_rn(__fmul_rn(p[i], decay), __fmul_rn(lr, __fmul_rn(u[i], shape)));
}

static void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                 const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
  ts_cublas_check(cublasGemmEx(ts_cuda_cublas(), ta, tb, m, n, k, &alpha, A, CUDA_R_32F, lda, B,
                               CUDA_R_32F, ldb, &beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT),
                  "muon");
}

// dst (cols × rows, row-major) = srcᵀ, src (rows × cols, row-major).
static void transpose(float *dst, const float *src, int rows, int cols) {
  const float one = 1.0f, zero = 0.0f;
  // column-major: src is (cols × rows); dst = its transpose (rows × cols)
  ts_cublas_check(cublasSgeam(ts_cuda_cublas(), CUBLAS_OP_T, CUBLAS_OP_N, rows, cols, &one, src,
                              cols, &zero, dst, rows, dst, rows),
                  "muon transpose");
}

extern "C" void cuda_muon_update(float *p, const float *g, float *buf, int rows, int cols,
                                 float lr, float wd, float beta, ts_ortho how, int steps,
                                 float *host_scratch) {
  (void)host_scratch;
  const int tall = rows > cols, m = tall ? cols : rows, n = tall ? rows : cols;
  const int64_t mn = (int64_t)m * n, mm = (int64_t)m * m;
  // u | W | W' | A | A2 | the norm
  float *u = (float *)ts_cuda_scratch((size_t)(3 * mn + 2 * mm + 1) * sizeof(float));
  float *W = u + mn, *Wn = W + mn, *A = Wn + mn, *A2 = A + mm, *inv = A2 + mm;
  cudaStream_t st = ts_cuda_stream();
  ts_launch(muon_momentum_kernel, ts_blocks(mn, THREADS), THREADS, 0, u, buf, g, mn, beta);
  // W (m × n, row-major) is the wide orientation of u
  if (tall) transpose(W, u, rows, cols);
  else ts_cuda_check(cudaMemcpyAsync(W, u, mn * sizeof(float), cudaMemcpyDeviceToDevice, st), "muon");
  ts_launch(inverse_norm_kernel, 1, THREADS, 0, inv, W, mn, how == TS_ORTHO_PE ? 1.01 : 1.0);
  ts_launch(scale_kernel, ts_blocks(mn, THREADS), THREADS, 0, W, inv, mn);
  // Row-major W (m × n) is column-major M = Wᵀ (n × m): A = W·Wᵀ = MᵀM, and
  // W ← a·W + A2·W is M ← a·M + M·A2 (A2 symmetric).
  for (int k = 0; k < steps; k++) {
    float a, b, c;
    ts_ortho_coefficients(how, k, &a, &b, &c);
    gemm(CUBLAS_OP_T, CUBLAS_OP_N, m, m, n, 1.0f, W, n, W, n, 0.0f, A, m);
    const float zero = 0.0f;
    ts_cublas_check(cublasSgeam(ts_cuda_cublas(), CUBLAS_OP_N, CUBLAS_OP_N, m, m, &b, A, m, &zero,
                                A, m, A2, m),
                    "muon");
    gemm(CUBLAS_OP_N, CUBLAS_OP_N, m, m, m, c, A, m, A, m, 1.0f, A2, m);
    ts_cuda_check(cudaMemcpyAsync(Wn, W, mn * sizeof(float), cudaMemcpyDeviceToDevice, st), "muon");
    gemm(CUBLAS_OP_N, CUBLAS_OP_N, n, m, m, 1.0f, W, n, A2, m, a, Wn, n);
    float *t = W;
    W = Wn;
    Wn = t;
  }
  if (tall) transpose(u, W, m, n);
  else ts_cuda_check(cudaMemcpyAsync(u, W, mn * sizeof(float), cudaMemcpyDeviceToDevice, st), "muon");
  const float shape = sqrtf(rows > cols ? (float)rows / (float)cols : 1.0f);
  ts_launch(muon_apply_kernel, ts_blocks(mn, THREADS), THREADS, 0, p, u, mn, 1.0f - lr * wd, lr,
            shape);
  ts_cuda_finish("muon");
}
