// Linear layers. The exact tier computes the CPU's canonical products
// (src/gpu/mm.cu: ts_mm's and ts_mm_leaves' bits) and the bias gradient's
// tree (src/cpu/linear.c), one launch over all rows: the product's bits do not
// depend on its shape, so neither do they on how the layer's rows are cut.
// The fast tier is cuBLAS. Buffers are row-major; cuBLAS is column-major, and
// a row-major (r, c) matrix is the column-major (c, r) one in the same bytes,
// so every cuBLAS product below is written transposed: Yᵀ = W·Xᵀ for Y = X·Wᵀ.
// The whole row range goes in one call. fp32 computes in fp32 (no TF32);
// bf16 rounds the operands to bf16 inside cuBLAS and accumulates in fp32.
#include "gpu.h"

#define THREADS 256

static cublasComputeType_t compute_type(void) {
  return ts_cuda_bf16() ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F;
}

// Column-major C (m, n) = alpha·op(A)·op(B) + beta·C, fp32 storage.
static void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int64_t n, int k,
                 const float *A, int lda, const float *B, int ldb, float beta, float *Cm, int ldc,
                 const char *what) {
  const float alpha = 1.0f;
  ts_cublas_check(cublasGemmEx(ts_cuda_cublas(), ta, tb, m, (int)n, k, &alpha, A, CUDA_R_32F, lda,
                               B, CUDA_R_32F, ldb, &beta, Cm, CUDA_R_32F, ldc, compute_type(),
                               CUBLAS_GEMM_DEFAULT),
                  what);
}

// y[r, k·hd + o] += b[heads[k]·hd + o] (heads NULL: head k), rows `ld` apart.
__global__ void bias_kernel(float *y, int ld, const float *b, const int *heads, int n, int hd,
                            int64_t ntok) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  int width = n * hd;
  if (i >= ntok * width) return;
  int64_t r = i / width;
  int j = (int)(i % width), k = j / hd, o = j % hd;
  int h = heads ? heads[k] : k;
  y[r * ld + j] += b[h * hd + o];
}

extern "C" void cuda_linear_forward_head_list(float *out, int ld, const float *inp, const float *W,
                                              const float *b, const int *heads, int n,
                                              int64_t ntok, int C, int hd, int rows) {
  (void)rows;
  int *dheads = NULL;
  if (ts_cuda_exact()) {
    // out[:, k·hd:(k+1)·hd] (rows ld apart) = inp (ntok, C) · W[h·hd:(h+1)·hd, :]ᵀ, h =
    // heads[k]; a head alone has the bits of its columns in the whole product
    if (heads == NULL) // heads 0..n-1 are W's first n·hd rows: one product
      ts_cuda_mm(0, 1, (int)ntok, n * hd, C, 1.0f, inp, C, W, C, 0, out, ld);
    else
      for (int k = 0; k < n; k++)
        ts_cuda_mm(0, 1, (int)ntok, hd, C, 1.0f, inp, C, W + (size_t)heads[k] * hd * C, C, 0,
                   out + (size_t)k * hd, ld);
  } else if (heads == NULL) {
    // heads 0..n-1 are W's first n·hd rows, contiguous: one product
    gemm(CUBLAS_OP_T, CUBLAS_OP_N, n * hd, ntok, C, W, C, inp, C, 0.0f, out, ld, "linear_forward");
  } else {
    for (int k = 0; k < n; k++) // out[:, k·hd:(k+1)·hd] = inp · W[heads[k]]ᵀ
      gemm(CUBLAS_OP_T, CUBLAS_OP_N, hd, ntok, C, W + (size_t)heads[k] * hd * C, C, inp, C, 0.0f,
           out + (size_t)k * hd, ld, "linear_forward_head_list");
  }
  if (heads) {
    // the head list may be host memory: the bias kernel reads a device copy
    dheads = (int *)ts_cuda_scratch((size_t)n * sizeof(int));
    ts_cuda_check(cudaMemcpyAsync(dheads, heads, (size_t)n * sizeof(int), cudaMemcpyDefault,
                                  ts_cuda_stream()),
                  "linear_forward_head_list");
  }
  // y (+)= b after the product, as the CPU's add_bias: y + b per element
  if (b) {
    int64_t total = ntok * n * hd;
    ts_launch(bias_kernel, ts_blocks(total, THREADS), THREADS, 0, out, ld, b, dheads, n, hd, ntok);
  }
  ts_cuda_finish("linear_forward");
}

extern "C" void cuda_linear_forward(float *out, const float *inp, const float *W, const float *b,
                                    int64_t ntok, int C, int OC, int rows) {
  cuda_linear_forward_head_list(out, OC, inp, W, b, NULL, 1, ntok, C, OC, rows);
}

extern "C" void cuda_linear_forward_heads(float *out, const float *inp, const float *W,
                                          const float *b, int64_t ntok, int C, int OC, int hd,
                                          int rows) {
  cuda_linear_forward_head_list(out, OC, inp, W, b, NULL, OC / hd, ntok, C, hd, rows);
}

// dinp (ntok, C) (+)= dout (ntok, OC) · W (OC, C).
extern "C" void cuda_linear_backward_input(float *dinp, const float *dout, const float *W,
                                           int64_t ntok, int C, int OC, int rows, int accumulate) {
  (void)rows;
  if (ts_cuda_exact()) ts_cuda_mm(0, 0, (int)ntok, C, OC, 1.0f, dout, OC, W, C, accumulate, dinp, C);
  else
    gemm(CUBLAS_OP_N, CUBLAS_OP_N, C, ntok, OC, W, C, dout, OC, accumulate ? 1.0f : 0.0f, dinp, C,
         "linear_backward_input");
  ts_cuda_finish("linear_backward_input");
}

// dW (OC, C) = dout (ntok, OC)ᵀ · inp (ntok, C); db (OC) = column sums of dout.
// Exact: both sums over tokens are the canonical tree over leaves of ws->leaf
// rows (docs/EXACTNESS.md R3), dW's inside the product (ts_mm_leaves), db's
// over each leaf's column sums; rows past the last whole leaf are not summed,
// as on the CPU.
extern "C" int cuda_linear_backward_weights(ts_ws *ws, float *dW, float *db, const float *dout,
                                            const float *inp, int64_t ntok, int C, int OC) {
  if (ts_cuda_exact()) {
    const int nl = (int)(ntok / ws->leaf);
    ts_cuda_mm_leaves(OC, C, nl, ws->leaf, dout, OC, inp, C, dW, C);
    if (db) ts_cuda_leaf_column_sums(db, dout, nl, ws->leaf, OC);
    ts_cuda_finish("linear_backward_weights");
    return 0;
  }
  gemm(CUBLAS_OP_N, CUBLAS_OP_T, C, OC, (int)ntok, inp, C, dout, OC, 0.0f, dW, C,
       "linear_backward_weights");
  if (db) ts_cuda_column_sums(db, dout, ntok, OC);
  ts_cuda_finish("linear_backward_weights");
  return 0;
}

// out (OC, C) = the leaf's dout rowsᵀ · its inp rows: linear_backward_weights' product on one leaf.
extern "C" void cuda_linear_weight_leaf(float *out, const float *dout, const float *inp,
                                        int64_t leaf_index, int leaf, int C, int OC) {
  if (ts_cuda_exact())
    ts_cuda_mm(1, 0, OC, C, leaf, 1.0f, dout + leaf_index * leaf * OC, OC,
               inp + leaf_index * leaf * C, C, 0, out, C);
  else
    gemm(CUBLAS_OP_N, CUBLAS_OP_T, C, OC, leaf, inp + leaf_index * leaf * C, C,
         dout + leaf_index * leaf * OC, OC, 0.0f, out, C, "linear_weight_leaf");
  ts_cuda_finish("linear_weight_leaf");
}

// out (M, N; ldc) = op(A) · op(B) + beta·out, row-major: column-major that is
// outᵀ = op(B)ᵀ · op(A)ᵀ, each operand's bytes read as its transpose, so a
// row-major operand taken as is (op N) is the column-major one transposed.
// Exact: the CPU's matmul, ts_mm accumulating when beta is not 0 (out + the
// chain: matmul's callers pass beta 0 or 1).
extern "C" void cuda_matmul(int transA, int transB, int M, int N, int K, const float *A, int lda,
                            const float *B, int ldb, float beta, float *out, int ldc) {
  if (ts_cuda_exact())
    ts_cuda_mm(transA, transB, M, N, K, 1.0f, A, lda, B, ldb, beta != 0.0f, out, ldc);
  else
    gemm(transB ? CUBLAS_OP_T : CUBLAS_OP_N, transA ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, B, ldb,
         A, lda, beta, out, ldc, "matmul");
  ts_cuda_finish("matmul");
}
