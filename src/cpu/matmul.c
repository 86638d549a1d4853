// General products, for the code whose shapes are not the linear layers'
// (the tensor-split baseline's slices of weights and its products over the
// whole sequence): the canonical product (mm.h), whose bits do not depend on
// the call's shape.
#include "backend/kernels.h"
#include "mm.h"

void matmul(int transA, int transB, int M, int N, int K, const float *A, int lda, const float *B,
            int ldb, float beta, float *out, int ldc) {
  ts_mm(transA, transB, M, N, K, 1.0f, A, lda, B, ldb, beta != 0.0f, out, ldc);
}
