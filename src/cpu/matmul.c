// General products, for the code whose shapes are not the linear layers'
// (the tensor-split baseline's slices of weights and its products over the
// whole sequence): fixed blocks of output rows, as R1 asks.
#include <cblas.h>

#include "kernels.h"

void matmul(int transA, int transB, int M, int N, int K, const float *A, int lda, const float *B,
            int ldb, float beta, float *out, int ldc) {
  const int blk = 64, nblk = (M + blk - 1) / blk;
#pragma omp parallel for schedule(dynamic, 1)
  for (int i = 0; i < nblk; i++) {
    int m0 = i * blk, mb = M - m0 < blk ? M - m0 : blk;
    const float *Ai = transA ? A + m0 : A + (size_t)m0 * lda;
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
                transB ? CblasTrans : CblasNoTrans, mb, N, K, 1.0f, Ai, lda, B, ldb, beta,
                out + (size_t)m0 * ldc, ldc);
  }
}
