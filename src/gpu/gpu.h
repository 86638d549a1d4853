// What the CUDA sources of the GPU backend share (nvcc, or g++ with
// TS_CUDA_EMULATE: tests/gpu_emu runs the same sources on the host for the
// tests). Pointers the kernels get are device-accessible: CUDA managed memory
// from the backend's allocator, or device memory. Work is queued on one
// stream per process; each kernels.h entry point finishes it (ts_cuda_finish)
// before returning, because the model's host code may read what it wrote next.
#ifndef TS_GPU_H
#define TS_GPU_H
#ifdef TS_CUDA_EMULATE
#include "cuda_emu.h"
#else
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#endif

extern "C" {
#include "backend/backend.h"
#include "backend/kernels.h"
#include "tessera.h"
}

cudaStream_t ts_cuda_stream(void);
cublasHandle_t ts_cuda_cublas(void);
// --precision bf16: matrix products and attention read their operands
// rounded to bf16; accumulation, master weights and every buffer stay fp32.
int ts_cuda_bf16(void);
// The exact tier (fp32 without --fast; docs/GPU.md): every kernel computes
// the CPU's canonical definition (docs/EXACTNESS.md), so the bits are the
// CPU's. Otherwise the fast tier: cuBLAS's products, within a tolerance.
int ts_cuda_exact(void);

// A CUDA error inside a kernel entry point cannot be returned through the
// kernels.h signatures: it ends the process (every MPI rank) with one line
// naming the operation. Never returns on error.
void ts_cuda_check(cudaError_t e, const char *what);
void ts_cublas_check(cublasStatus_t s, const char *what);
// Checks the launches queued by `what` and waits for them.
void ts_cuda_finish(const char *what);

// Rounds to bf16 and back when the backend runs in bf16 (the operand of a
// product), else the identity.
__device__ __forceinline__ float ts_operand(float x, int bf16) {
  return bf16 ? __bfloat162float(__float2bfloat16_rn(x)) : x;
}

// Device scratch of at least `bytes`, owned by the backend and reused by
// every operation (one stream, so one user at a time).
void *ts_cuda_scratch(size_t bytes);

// Sums over rows without atomics (the gradients of norms and biases): rows
// are cut into chunks of TS_CHUNK_ROWS, each chunk's column sums are taken in
// row order into partial (nchunks, n), then ts_cuda_sum_chunks adds the
// chunks in order: a fixed association, so two runs agree bit for bit.
#define TS_CHUNK_ROWS 256
void ts_cuda_sum_chunks(float *out, const float *partial, int64_t nchunks, int64_t n);
// out (n) = column sums of x (rows, n), through the chunks above.
void ts_cuda_column_sums(float *out, const float *x, int64_t rows, int64_t n);

// The exact tier's sums over rows: out (n) = the canonical tree over nleaves
// leaves of `leaf` rows of each leaf's column sums of x (rows n apart), each
// leaf's column summed in row order from its first row: ts_leaf_tree_sum of
// column_sum's partials on the CPU (a bias gradient), the same bits.
void ts_cuda_leaf_column_sums(float *out, const float *x, int64_t nleaves, int leaf, int64_t n);

// The canonical product (src/cpu/mm.h; src/gpu/mm.cu), the exact tier's
// every matrix product: ts_mm's arguments and bits, queued on the stream.
// C (M, N; rows ldc apart) = alpha·op(A)·op(B), or fmaf(alpha, ·, C) when
// accumulate; op(A)(i,k) = A[i*lda + k] (A[k*lda + i] when transA), op(B)(k,j)
// = B[k*ldb + j] (B[j*ldb + k] when transB).
void ts_cuda_mm(int transA, int transB, int M, int N, int K, float alpha, const float *A,
                int lda, const float *B, int ldb, int accumulate, float *C, int ldc);
// ts_mm_leaves: C (M, N) = the canonical tree over nleaves leaves of each
// leaf's chain over its `leaf` k, A[k*lda + i]·B[k*ldb + j].
void ts_cuda_mm_leaves(int M, int N, int nleaves, int leaf, const float *A, int lda,
                       const float *B, int ldb, float *C, int ldc);
// The same with rows of `add` added to each leaf's partial before the tree:
// for row i of C, the rows order[p], p in [start[i], start[i + 1]) (ascending),
// each to the partial of the leaf it lies in, in order (the token
// embedding's gradient: encoder_backward_wte in src/cpu/encoder.c).
void ts_cuda_mm_leaves_scatter(int M, int N, int nleaves, int leaf, const float *A, int lda,
                               const float *B, int ldb, float *C, int ldc, const float *add,
                               int ldadd, const int *order, const int *start);

// Blocks of `threads` covering n items.
static inline unsigned ts_blocks(int64_t n, int threads) {
  return (unsigned)((n + threads - 1) / threads);
}

// The type of a kernel parameter as written, in a context that deduces
// nothing, so that each launch argument converts to it as in a call.
template <typename T>
struct ts_param {
  typedef T type;
};

// Every launch of the backend: kernel<<<grid, block, shmem, stream>>>(args)
// on the backend's stream, or, emulated, the grid run on the host. One place
// for the <<<>>> syntax lets g++ compile the kernels' sources unchanged.
// A template kernel is named with its arguments: ts_launch(k<2>, ...).
template <typename... K>
inline void ts_launch(void (*kernel)(K...), dim3 grid, dim3 block, size_t shmem,
                      typename ts_param<K>::type... args) {
#ifdef TS_CUDA_EMULATE
  ts_emu_launch(kernel, grid, block, shmem, args...);
#else
  kernel<<<grid, block, shmem, ts_cuda_stream()>>>(args...);
#endif
}

// The kernels, one file each: cuda_<op> for every operation of the list, with
// its signature (extern "C" so the table in backend_cuda.cu and the tests can
// name them). A definition whose parameters differ is a second C function of
// the same name, which does not compile.
extern "C" {
#define TS_OP(op, cpu, ret, params) ret cuda_##op params;
#include "backend/backend_ops.def"
}
#endif
