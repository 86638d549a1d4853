// Register-blocked products for attention's tiles (attention_tile.h).
//
// One small BLAS call per tile pair spent most of its time outside the
// arithmetic: packing both operands again on every call and the library's
// dispatch, for products only 64 deep. These kernels read the operands where
// they are (a transposed operand is packed once per tile by the caller) and
// keep a block of C in registers for the whole chain over k.
//
// The blocking never changes the bits: each element of C is its own chain
// of fused multiply-adds over k in ascending order, whatever the vector
// width, the block shape or the remainder path. The build has contraction
// off, so every fused multiply-add below is written out (fmaf or the
// intrinsics), and the scalar path computes the same bits as the vector ones.
#include "attention_tile.h"

#include "isa.h"
#include "mm.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define TS_TILE_X86 1
#include <immintrin.h>
#else
#define TS_TILE_X86 0
#endif

// The definition itself: one element at a time.
static void mm_scalar(float *C, int ldc, const float *A, ptrdiff_t ai, ptrdiff_t ak,
                      const float *B, int ldb, int M, int N, int K, float alpha, int accumulate) {
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      float t = 0.0f;
      for (int k = 0; k < K; k++) t = fmaf(A[i * ai + k * ak], B[(size_t)k * ldb + j], t);
      float *c = C + (size_t)i * ldc + j;
      *c = accumulate ? fmaf(alpha, t, *c) : alpha * t;
    }
}

#if TS_TILE_X86
#define AVX512 __attribute__((target("avx512f")))
#define AVX2 __attribute__((target("avx2,fma")))
#define INLINE static inline __attribute__((always_inline))

// rb rows (1..4) by 4 full vectors of 16 columns: 16 chains in registers,
// 4 loads of B and rb broadcasts of A per step of k.
AVX512 INLINE void blk512_wide(float *C, int ldc, const float *A, ptrdiff_t ai, ptrdiff_t ak,
                               const float *B, int ldb, int K, float alpha, int accumulate, const int rb) {
  __m512 t[4][4];
#pragma GCC unroll 4
  for (int r = 0; r < rb; r++)
#pragma GCC unroll 4
    for (int v = 0; v < 4; v++) t[r][v] = _mm512_setzero_ps();
  for (int k = 0; k < K; k++) {
    const float *b = B + (size_t)k * ldb;
    __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
    __m512 b2 = _mm512_loadu_ps(b + 32), b3 = _mm512_loadu_ps(b + 48);
#pragma GCC unroll 4
    for (int r = 0; r < rb; r++) {
      __m512 a = _mm512_set1_ps(A[r * ai + k * ak]);
      t[r][0] = _mm512_fmadd_ps(a, b0, t[r][0]);
      t[r][1] = _mm512_fmadd_ps(a, b1, t[r][1]);
      t[r][2] = _mm512_fmadd_ps(a, b2, t[r][2]);
      t[r][3] = _mm512_fmadd_ps(a, b3, t[r][3]);
    }
  }
  const __m512 al = _mm512_set1_ps(alpha);
#pragma GCC unroll 4
  for (int r = 0; r < rb; r++)
#pragma GCC unroll 4
    for (int v = 0; v < 4; v++) {
      float *c = C + (size_t)r * ldc + 16 * v;
      _mm512_storeu_ps(c, accumulate ? _mm512_fmadd_ps(al, t[r][v], _mm512_loadu_ps(c))
                                     : _mm512_mul_ps(al, t[r][v]));
    }
}

// rb rows by one vector of up to 16 columns (mask m): the narrow and the
// remainder columns. Masked-off lanes are neither read nor written.
AVX512 INLINE void blk512_one(float *C, int ldc, const float *A, ptrdiff_t ai, ptrdiff_t ak,
                              const float *B, int ldb, int K, float alpha, int accumulate, const int rb,
                              __mmask16 m) {
  __m512 t[4];
#pragma GCC unroll 4
  for (int r = 0; r < rb; r++) t[r] = _mm512_setzero_ps();
  for (int k = 0; k < K; k++) {
    __m512 b = _mm512_maskz_loadu_ps(m, B + (size_t)k * ldb);
#pragma GCC unroll 4
    for (int r = 0; r < rb; r++) t[r] = _mm512_fmadd_ps(_mm512_set1_ps(A[r * ai + k * ak]), b, t[r]);
  }
  const __m512 al = _mm512_set1_ps(alpha);
#pragma GCC unroll 4
  for (int r = 0; r < rb; r++) {
    float *c = C + (size_t)r * ldc;
    __m512 x = accumulate ? _mm512_fmadd_ps(al, t[r], _mm512_maskz_loadu_ps(m, c))
                          : _mm512_mul_ps(al, t[r]);
    _mm512_mask_storeu_ps(c, m, x);
  }
}

AVX512 INLINE void rows512(float *C, int ldc, const float *A, ptrdiff_t ai, ptrdiff_t ak,
                           const float *B, int ldb, int N, int K, float alpha, int accumulate, const int rb) {
  int j = 0;
  for (; j + 64 <= N; j += 64) blk512_wide(C + j, ldc, A, ai, ak, B + j, ldb, K, alpha, accumulate, rb);
  for (; j < N; j += 16) {
    __mmask16 m = N - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (N - j)) - 1);
    blk512_one(C + j, ldc, A, ai, ak, B + j, ldb, K, alpha, accumulate, rb, m);
  }
}

AVX512 static void mm_avx512(float *C, int ldc, const float *A, ptrdiff_t ai, ptrdiff_t ak,
                             const float *B, int ldb, int M, int N, int K, float alpha, int accumulate) {
  int i = 0;
  for (; i + 4 <= M; i += 4)
    rows512(C + (size_t)i * ldc, ldc, A + i * ai, ai, ak, B, ldb, N, K, alpha, accumulate, 4);
  for (; i < M; i++)
    rows512(C + (size_t)i * ldc, ldc, A + i * ai, ai, ak, B, ldb, N, K, alpha, accumulate, 1);
}

// AVX2 has 16 registers: rb rows (1..4) by 2 vectors of 8 columns (mask for
// the remainder: lanes whose mask is 0 are neither read nor written).
AVX2 INLINE void blk256(float *C, int ldc, const float *A, ptrdiff_t ai, ptrdiff_t ak,
                        const float *B, int ldb, int K, float alpha, int accumulate, const int rb, __m256i m0,
                        __m256i m1) {
  __m256 t[4][2];
#pragma GCC unroll 4
  for (int r = 0; r < rb; r++) t[r][0] = t[r][1] = _mm256_setzero_ps();
  for (int k = 0; k < K; k++) {
    const float *b = B + (size_t)k * ldb;
    __m256 b0 = _mm256_maskload_ps(b, m0), b1 = _mm256_maskload_ps(b + 8, m1);
#pragma GCC unroll 4
    for (int r = 0; r < rb; r++) {
      __m256 a = _mm256_broadcast_ss(A + r * ai + k * ak);
      t[r][0] = _mm256_fmadd_ps(a, b0, t[r][0]);
      t[r][1] = _mm256_fmadd_ps(a, b1, t[r][1]);
    }
  }
  const __m256 al = _mm256_set1_ps(alpha);
#pragma GCC unroll 4
  for (int r = 0; r < rb; r++) {
    float *c = C + (size_t)r * ldc;
    __m256 x0 = _mm256_mul_ps(al, t[r][0]), x1 = _mm256_mul_ps(al, t[r][1]);
    if (accumulate) {
      x0 = _mm256_fmadd_ps(al, t[r][0], _mm256_maskload_ps(c, m0));
      x1 = _mm256_fmadd_ps(al, t[r][1], _mm256_maskload_ps(c + 8, m1));
    }
    _mm256_maskstore_ps(c, m0, x0);
    _mm256_maskstore_ps(c + 8, m1, x1);
  }
}

// The mask of the lanes j .. j+7 that are below n.
AVX2 static inline __m256i lanes256(int j, int n) {
  __m256i idx = _mm256_add_epi32(_mm256_set1_epi32(j), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx);
}

AVX2 INLINE void rows256(float *C, int ldc, const float *A, ptrdiff_t ai, ptrdiff_t ak,
                         const float *B, int ldb, int N, int K, float alpha, int accumulate, const int rb) {
  for (int j = 0; j < N; j += 16)
    blk256(C + j, ldc, A, ai, ak, B + j, ldb, K, alpha, accumulate, rb, lanes256(j, N),
           lanes256(j + 8, N));
}

AVX2 static void mm_avx2(float *C, int ldc, const float *A, ptrdiff_t ai, ptrdiff_t ak,
                         const float *B, int ldb, int M, int N, int K, float alpha, int accumulate) {
  int i = 0;
  for (; i + 4 <= M; i += 4)
    rows256(C + (size_t)i * ldc, ldc, A + i * ai, ai, ak, B, ldb, N, K, alpha, accumulate, 4);
  for (; i < M; i++)
    rows256(C + (size_t)i * ldc, ldc, A + i * ai, ai, ak, B, ldb, N, K, alpha, accumulate, 1);
}

#endif

int ts_tile_mm_isa(int isa, float *C, int ldc, const float *A, ptrdiff_t ai, ptrdiff_t ak,
                   const float *B, int ldb, int M, int N, int K, float alpha, int accumulate) {
  if (!ts_isa_available(isa)) return -1;
#if TS_TILE_X86
  if (isa == TS_ISA_AVX512) {
    mm_avx512(C, ldc, A, ai, ak, B, ldb, M, N, K, alpha, accumulate);
    return 0;
  }
  if (isa == TS_ISA_AVX2) {
    mm_avx2(C, ldc, A, ai, ak, B, ldb, M, N, K, alpha, accumulate);
    return 0;
  }
#endif
  // NEON: the general product's kernels (the same definition), A read as it
  // lies when one of its strides is 1, as attention's operands always are
  if (isa == TS_ISA_NEON && (ak == 1 || ai == 1) &&
      ts_mm_isa(isa, 1, ak != 1, 0, M, N, K, alpha, A, (int)(ak == 1 ? ai : ak), B, ldb,
                accumulate, C, ldc) == 0)
    return 0;
  mm_scalar(C, ldc, A, ai, ak, B, ldb, M, N, K, alpha, accumulate);
  return 0;
}

void ts_tile_mm(float *C, int ldc, const float *A, ptrdiff_t ai, ptrdiff_t ak, const float *B,
                int ldb, int M, int N, int K, float alpha, int accumulate) {
  ts_tile_mm_isa(ts_isa(), C, ldc, A, ai, ak, B, ldb, M, N, K, alpha, accumulate);
}

void ts_tile_transpose(float *dst, const float *src, int lds, int rows, int cols) {
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) dst[(size_t)c * rows + r] = src[(size_t)r * lds + c];
}

void ts_tile_copy(float *dst, const float *src, int lds, int rows, int cols) {
  for (int r = 0; r < rows; r++)
    memcpy(dst + (size_t)r * cols, src + (size_t)r * lds, (size_t)cols * sizeof(float));
}
