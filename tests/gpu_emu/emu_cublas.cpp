// cublasGemmEx and cublasSgeam as src/gpu/ calls them (cuda_emu.h): fp32
// matrices, column-major, op N or T, as plain loops. It checks what cuBLAS checks
// (sizes, leading dimensions) and what the device would trip over later: a
// matrix that is not inside one device allocation, given its leading
// dimension. Its sums (over k in order, fp32) are not cuBLAS's tiling; the
// test bounds for products allow any fp32 order.
#include <stdio.h>
#include <stdlib.h>

#include "cuda_emu.h"

struct ts_emu_cublas {
  cudaStream_t stream;
};

cublasStatus_t cublasCreate(cublasHandle_t *h) {
  *h = (cublasHandle_t)calloc(1, sizeof(ts_emu_cublas));
  return *h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}

// One order of sums whatever the mode: no atomics, no reduced precision.
cublasStatus_t cublasSetAtomicsMode(cublasHandle_t h, cublasAtomicsMode_t mode) {
  (void)mode;
  return h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
  (void)mode;
  return h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

const char *cublasGetStatusString(cublasStatus_t s) {
  switch (s) {
  case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
  case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
  case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
  case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
  case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
  case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "unknown cuBLAS status";
}

namespace {
// Whether the column-major (rows, cols) matrix with leading dimension ld at p
// lies inside one device allocation.
bool inside(const void *p, int rows, int cols, int ld, const char *name) {
  if (rows == 0 || cols == 0) return true;
  size_t floats = (size_t)(cols - 1) * (size_t)ld + (size_t)rows;
  if (ts_emu_is_device(p, floats * sizeof(float))) return true;
  fprintf(stderr,
          "tessera CUDA emulator: cublasGemmEx: %s (%d x %d, ld %d) at %p is not inside one "
          "device allocation\n",
          name, rows, cols, ld, p);
  return false;
}

float operand(float x, bool bf16) {
  return bf16 ? __bfloat162float(__float2bfloat16_rn(x)) : x;
}
} // namespace

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void *alpha, const void *A, cudaDataType Atype,
                            int lda, const void *B, cudaDataType Btype, int ldb, const void *beta,
                            void *C, cudaDataType Ctype, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (Atype != CUDA_R_32F || Btype != CUDA_R_32F || Ctype != CUDA_R_32F ||
      (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_16BF) ||
      algo != CUBLAS_GEMM_DEFAULT)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  const bool an = ta == CUBLAS_OP_N, bn = tb == CUBLAS_OP_N;
  if ((!an && ta != CUBLAS_OP_T) || (!bn && tb != CUBLAS_OP_T)) return CUBLAS_STATUS_INVALID_VALUE;
  // cuBLAS's own argument checks
  const int arows = an ? m : k, acols = an ? k : m, brows = bn ? k : n, bcols = bn ? n : k;
  if (m < 0 || n < 0 || k < 0 || lda < (arows > 1 ? arows : 1) || ldb < (brows > 1 ? brows : 1) ||
      ldc < (m > 1 ? m : 1))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  if (!inside(C, m, n, ldc, "C") ||
      (k > 0 && (!inside(A, arows, acols, lda, "A") || !inside(B, brows, bcols, ldb, "B"))))
    return CUBLAS_STATUS_EXECUTION_FAILED;
  // alpha and beta are read now (host pointers); the product runs in stream order
  const float al = *(const float *)alpha, be = *(const float *)beta;
  const bool bf16 = compute == CUBLAS_COMPUTE_32F_FAST_16BF;
  const float *a = (const float *)A, *b = (const float *)B;
  float *c = (float *)C;
  ts_emu_enqueue([=] {
    for (int j = 0; j < n; j++)
      for (int i = 0; i < m; i++) {
        float s = 0.0f;
        for (int l = 0; l < k; l++) {
          float x = an ? a[i + (size_t)l * lda] : a[l + (size_t)i * lda];
          float y = bn ? b[l + (size_t)j * ldb] : b[j + (size_t)l * ldb];
          s += operand(x, bf16) * operand(y, bf16);
        }
        float *out = &c[i + (size_t)j * ldc];
        // beta 0: C is not read (it may hold anything, NaN included)
        *out = be == 0.0f ? al * s : al * s + be * *out;
      }
  });
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgeam(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, const float *alpha, const float *A, int lda, const float *beta,
                           const float *B, int ldb, float *C, int ldc) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  const bool an = ta == CUBLAS_OP_N, bn = tb == CUBLAS_OP_N;
  if ((!an && ta != CUBLAS_OP_T) || (!bn && tb != CUBLAS_OP_T)) return CUBLAS_STATUS_INVALID_VALUE;
  const int arows = an ? m : n, acols = an ? n : m, brows = bn ? m : n, bcols = bn ? n : m;
  if (m < 0 || n < 0 || lda < (arows > 1 ? arows : 1) || ldb < (brows > 1 ? brows : 1) ||
      ldc < (m > 1 ? m : 1))
    return CUBLAS_STATUS_INVALID_VALUE;
  // in place only as C = A (or B) untransposed with the same leading dimension
  if ((C == A && (!an || lda != ldc)) || (C == B && (!bn || ldb != ldc)))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  const float al = *alpha, be = *beta;
  if (!inside(C, m, n, ldc, "C") || (al != 0.0f && !inside(A, arows, acols, lda, "A")) ||
      (be != 0.0f && !inside(B, brows, bcols, ldb, "B")))
    return CUBLAS_STATUS_EXECUTION_FAILED;
  ts_emu_enqueue([=] {
    for (int j = 0; j < n; j++)
      for (int i = 0; i < m; i++) {
        float s = 0.0f;
        if (al != 0.0f) s = al * (an ? A[i + (size_t)j * lda] : A[j + (size_t)i * lda]);
        if (be != 0.0f) s += be * (bn ? B[i + (size_t)j * ldb] : B[j + (size_t)i * ldb]);
        C[i + (size_t)j * ldc] = s;
      }
  });
  return CUBLAS_STATUS_SUCCESS;
}
