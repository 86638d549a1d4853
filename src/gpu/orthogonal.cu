// Muon and SPEL on the GPU (orthogonal.h): the momentum, the Newton–Schulz or
// Polar Express iteration, and the update (SPEL's: the tangent projection,
// the direction and the retraction), with the CPU's orientation,
// coefficients and normalisation.
//
// The exact tier is src/cpu/orthogonal.c step by step: its canonical products
// (src/gpu/mm.cu) with its alpha and accumulate forms, every element-wise step
// in its order, and the norm's sum of squares in double in index order, so
// the bits are the CPU's. The fast tier: cuBLAS products, fp32 in either
// --precision: the iteration amplifies rounding (its first steps have
// coefficients near 8 and −24), so bf16 operands would not converge to the
// CPU's polar factor.
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

// The exact tier's: *out = 1 / (‖x‖_F·scale + 1e-7) with the CPU's sum, one
// double chain s += x[i]·x[i] in index order (frobenius in
// src/cpu/orthogonal.c). The block squares a slice of x together (each square
// exact in double, so who makes it does not matter) and thread 0 adds the
// slice in order: the chain cannot be split.
__global__ void inverse_norm_exact_kernel(float *out, const float *x, int64_t n, float scale) {
  __shared__ double sq[THREADS * 4];
  double s = 0.0;
  for (int64_t i0 = 0; i0 < n; i0 += THREADS * 4) {
    for (int q = 0; q < 4; q++) {
      const int64_t i = i0 + threadIdx.x + q * THREADS;
      sq[threadIdx.x + q * THREADS] = i < n ? (double)x[i] * x[i] : 0.0;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      const int64_t m = min((int64_t)THREADS * 4, n - i0);
      for (int64_t k = 0; k < m; k++) s += sq[k];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = (float)(1.0 / (sqrt(s) * scale + 1e-7));
}

// y = by · x, element by element (A2 = b·A and W' = a·W of the iteration).
__global__ void times_kernel(float *y, const float *x, int64_t n, float by) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __fmul_rn(by, x[i]);
}

// dst (cols × rows, row-major) = srcᵀ (rows × cols): a copy, bits unchanged.
__global__ void transpose_kernel(float *dst, const float *src, int rows, int cols) {
  int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= (int64_t)rows * cols) return;
  const int64_t i = k / cols, j = k % cols;
  dst[j * rows + i] = src[k];
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
  if (ts_cuda_exact()) {
    ts_launch(transpose_kernel, ts_blocks((int64_t)rows * cols, THREADS), THREADS, 0, dst, src,
              rows, cols);
    return;
  }
  const float one = 1.0f, zero = 0.0f;
  // column-major: src is (cols × rows); dst = its transpose (rows × cols)
  ts_cublas_check(cublasSgeam(ts_cuda_cublas(), CUBLAS_OP_T, CUBLAS_OP_N, rows, cols, &one, src,
                              cols, &zero, dst, rows, dst, rows),
                  "muon transpose");
}

// The floats of device scratch iterate needs for an m × n (wide) matrix: W,
// W', A, A2 and the norm.
static size_t iterate_scratch(int rows, int cols) {
  const size_t m = (size_t)(rows < cols ? rows : cols), n = (size_t)(rows < cols ? cols : rows);
  return 2 * m * n + 2 * m * m + 1;
}

// X (rows × cols, row-major, on the device) in place ← `steps` steps of the
// iteration `how` on X/(‖X‖_F·scale + 1e-7), on the wide orientation as the
// CPU's iterate (src/cpu/orthogonal.c); scratch: iterate_scratch floats.
static void iterate(float *X, int rows, int cols, int steps, ts_ortho how, float *scratch,
                    const char *what) {
  const int tall = rows > cols, m = tall ? cols : rows, n = tall ? rows : cols;
  const int64_t mn = (int64_t)m * n, mm = (int64_t)m * m;
  float *W = scratch, *Wn = W + mn, *A = Wn + mn, *A2 = A + mm, *inv = A2 + mm;
  cudaStream_t st = ts_cuda_stream();
  // W (m × n, row-major) is the wide orientation of X
  if (tall) transpose(W, X, rows, cols);
  else ts_cuda_check(cudaMemcpyAsync(W, X, mn * sizeof(float), cudaMemcpyDeviceToDevice, st), what);
  const int exact = ts_cuda_exact();
  if (exact) // the CPU's scale is a float (1.01f), widened
    ts_launch(inverse_norm_exact_kernel, 1, THREADS, 0, inv, W, mn,
              how == TS_ORTHO_PE ? 1.01f : 1.0f);
  else ts_launch(inverse_norm_kernel, 1, THREADS, 0, inv, W, mn, how == TS_ORTHO_PE ? 1.01 : 1.0);
  ts_launch(scale_kernel, ts_blocks(mn, THREADS), THREADS, 0, W, inv, mn);
  for (int k = 0; k < steps; k++) {
    float a, b, c;
    ts_ortho_coefficients(how, k, &a, &b, &c);
    if (exact) {
      // A (m × m) = W Wᵀ; A2 = fma(c, A·A, b·A); W' = a·W, then W' + A2·W (accumulating)
      ts_cuda_mm(0, 1, m, m, n, 1.0f, W, n, W, n, 0, A, m);
      ts_launch(times_kernel, ts_blocks(mm, THREADS), THREADS, 0, A2, A, mm, b);
      ts_cuda_mm(0, 0, m, m, m, c, A, m, A, m, 1, A2, m);
      ts_launch(times_kernel, ts_blocks(mn, THREADS), THREADS, 0, Wn, W, mn, a);
      ts_cuda_mm(0, 0, m, n, m, 1.0f, A2, m, W, n, 1, Wn, n);
    } else {
      // Row-major W (m × n) is column-major M = Wᵀ (n × m): A = W·Wᵀ = MᵀM, and
      // W ← a·W + A2·W is M ← a·M + M·A2 (A2 symmetric).
      gemm(CUBLAS_OP_T, CUBLAS_OP_N, m, m, n, 1.0f, W, n, W, n, 0.0f, A, m);
      const float zero = 0.0f;
      ts_cublas_check(cublasSgeam(ts_cuda_cublas(), CUBLAS_OP_N, CUBLAS_OP_N, m, m, &b, A, m,
                                  &zero, A, m, A2, m),
                      what);
      gemm(CUBLAS_OP_N, CUBLAS_OP_N, m, m, m, c, A, m, A, m, 1.0f, A2, m);
      ts_cuda_check(cudaMemcpyAsync(Wn, W, mn * sizeof(float), cudaMemcpyDeviceToDevice, st),
                    what);
      gemm(CUBLAS_OP_N, CUBLAS_OP_N, n, m, m, 1.0f, W, n, A2, m, a, Wn, n);
    }
    float *t = W;
    W = Wn;
    Wn = t;
  }
  if (tall) transpose(X, W, m, n);
  else ts_cuda_check(cudaMemcpyAsync(X, W, mn * sizeof(float), cudaMemcpyDeviceToDevice, st), what);
}

extern "C" void cuda_muon_update(float *p, const float *g, float *buf, int rows, int cols,
                                 float lr, float wd, float beta, ts_ortho how, int steps,
                                 float *host_scratch) {
  (void)host_scratch;
  const int64_t mn = (int64_t)rows * cols;
  // u | the iteration's
  float *u = (float *)ts_cuda_scratch((mn + iterate_scratch(rows, cols)) * sizeof(float));
  ts_launch(muon_momentum_kernel, ts_blocks(mn, THREADS), THREADS, 0, u, buf, g, mn, beta);
  iterate(u, rows, cols, steps, how, u + mn, "muon");
  const float shape = sqrtf(rows > cols ? (float)rows / (float)cols : 1.0f);
  ts_launch(muon_apply_kernel, ts_blocks(mn, THREADS), THREADS, 0, p, u, mn, 1.0f - lr * wd, lr,
            shape);
  ts_cuda_finish("muon");
}

// ---- SPEL (the mapl codecs' projectors) ------------------------------------------------
// The products fp32 as Muon's, for the same reason: two Polar Express
// iterations a step, the second of them the retraction onto St(d, r).

// m = β·m + (1−β)·D; D = m (D: the Riemannian or the Euclidean gradient).
__global__ void spel_momentum_kernel(float *D, float *m, int64_t n, float beta) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = __fadd_rn(__fmul_rn(beta, m[i]), __fmul_rn(1.0f - beta, D[i]));
  m[i] = v;
  D[i] = v;
}

// A ← A − α·D.
__global__ void spel_apply_kernel(float *A, const float *D, int64_t n, float alpha) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) A[i] = __fsub_rn(A[i], __fmul_rn(alpha, D[i]));
}

// S (r × r) ← sym(S) = (S + Sᵀ)/2 off the diagonal, the CPU's 0.5·(S_ij + S_ji);
// out of place (from T), so no thread reads an element another has written.
__global__ void symmetrise_kernel(float *S, const float *T, int r) {
  int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= (int64_t)r * r) return;
  const int i = (int)(k / r), j = (int)(k % r);
  S[k] = i == j ? T[k] : __fmul_rn(0.5f, __fadd_rn(T[k], T[(int64_t)j * r + i]));
}

// out (d × r) = g − A·sym(Aᵀg), all row-major on the device; scratch: 2·r·r floats.
static void stiefel_tangent(float *out, const float *A, const float *g, int d, int r,
                            float *scratch) {
  float *T = scratch, *S = T + (int64_t)r * r;
  if (ts_cuda_exact()) {
    // T (r × r) = Aᵀ g; S = sym(T); out = g, then out = fma(−1, A·S, out): out − A S
    ts_cuda_mm(1, 0, r, r, d, 1.0f, A, r, g, r, 0, T, r);
    ts_launch(symmetrise_kernel, ts_blocks((int64_t)r * r, THREADS), THREADS, 0, S, T, r);
    ts_cuda_check(cudaMemcpyAsync(out, g, (size_t)d * r * sizeof(float),
                                  cudaMemcpyDeviceToDevice, ts_cuda_stream()),
                  "spel");
    ts_cuda_mm(0, 0, d, r, r, -1.0f, A, r, S, r, 1, out, r);
    return;
  }
  // Row-major A and g (d × r) are column-major Aᵀ and gᵀ (r × d): the
  // column-major product gᵀ·(Aᵀ)ᵀ = gᵀA is (Aᵀg)ᵀ, which sym makes the same.
  gemm(CUBLAS_OP_N, CUBLAS_OP_T, r, r, d, 1.0f, g, r, A, r, 0.0f, T, r);
  ts_launch(symmetrise_kernel, ts_blocks((int64_t)r * r, THREADS), THREADS, 0, S, T, r);
  ts_cuda_check(cudaMemcpyAsync(out, g, (size_t)d * r * sizeof(float), cudaMemcpyDeviceToDevice,
                                ts_cuda_stream()),
                "spel");
  // column-major outᵀ (r × d) = gᵀ − S·Aᵀ (S symmetric)
  gemm(CUBLAS_OP_N, CUBLAS_OP_N, r, d, r, -1.0f, S, r, A, r, 1.0f, out, r);
}

// Both steps: the direction D | the iteration's (which also holds the tangent's 2·r·r).
static void spel(float *A, const float *g, float *m, int d, int r, float alpha, float beta,
                 int steps, int constrained) {
  const int64_t n = (int64_t)d * r;
  size_t it = iterate_scratch(d, r);
  if (it < 2 * (size_t)r * r) it = 2 * (size_t)r * r;
  float *D = (float *)ts_cuda_scratch((n + it) * sizeof(float)), *scratch = D + n;
  if (constrained) stiefel_tangent(D, A, g, d, r, scratch); // the Riemannian gradient
  else
    ts_cuda_check(cudaMemcpyAsync(D, g, n * sizeof(float), cudaMemcpyDeviceToDevice,
                                  ts_cuda_stream()),
                  "spel");
  ts_launch(spel_momentum_kernel, ts_blocks(n, THREADS), THREADS, 0, D, m, n, beta);
  iterate(D, d, r, steps, TS_ORTHO_PE, scratch, "spel"); // the direction
  ts_launch(spel_apply_kernel, ts_blocks(n, THREADS), THREADS, 0, A, D, n, alpha);
  if (constrained) iterate(A, d, r, steps, TS_ORTHO_PE, scratch, "spel"); // the retraction
  ts_cuda_finish("spel");
}

extern "C" void cuda_spel_step(float *A, const float *g, float *m, int d, int r, float alpha,
                               float beta, int steps, float *host_scratch) {
  (void)host_scratch;
  spel(A, g, m, d, r, alpha, beta, steps, 1);
}

extern "C" void cuda_spel_step_unconstrained(float *A, const float *g, float *m, int d, int r,
                                             float alpha, float beta, int steps,
                                             float *host_scratch) {
  (void)host_scratch;
  spel(A, g, m, d, r, alpha, beta, steps, 0);
}
