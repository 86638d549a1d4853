// The products of attention's tiles (src/cpu/attention_tile.c).
//
// Every element of a product is one fused multiply-add chain over k in
// ascending order, started from +0:
//     t = +0;  for k = 0 .. K-1:  t = fma(A(i,k), B(k,j), t)
// and then scaled (C = alpha·t) or added to what C holds (C = fma(alpha, t, C),
// which is C + t when alpha is 1: BLAS's alpha with beta 0 or 1). That is
// the canonical product of every other matrix product too (src/cpu/mm.h,
// docs/EXACTNESS.md R1): it does not depend on the instruction set that runs
// it, on the blocking, nor on where the operands lie in memory. These are the
// same products for operands read in place, without packing, for the small
// tiles attention multiplies many times.
#ifndef TS_ATTENTION_TILE_H
#define TS_ATTENTION_TILE_H
#include <stddef.h>


// C (M, N; rows ldc apart) = alpha · A · B [+ C], where A(i, k) = A[i*ai + k*ak]
// (so a transposed A is only other strides) and B (K, N) has rows ldb apart.
void ts_tile_mm(float *C, int ldc, const float *A, ptrdiff_t ai, ptrdiff_t ak, const float *B,
                int ldb, int M, int N, int K, float alpha, int accumulate);
// The same on a chosen instruction set (src/cpu/isa.h; ts_tile_mm runs on
// ts_isa()): for the tests. Returns -1 if this CPU lacks it, 0 otherwise.
int ts_tile_mm_isa(int isa, float *C, int ldc, const float *A, ptrdiff_t ai, ptrdiff_t ak,
                   const float *B, int ldb, int M, int N, int K, float alpha, int accumulate);

// dst (cols, rows) = src (rows, cols; rows lds apart) transposed: the packed
// operand that lets a product with a transposed B read B's rows contiguously.
void ts_tile_transpose(float *dst, const float *src, int lds, int rows, int cols);
// dst (rows, cols) = src (rows, cols; rows lds apart), rows made contiguous.
void ts_tile_copy(float *dst, const float *src, int lds, int rows, int cols);
#endif
