// The canonical matrix product (src/cpu/mm.c): every product of the exact
// path, defined element by element so that its bits depend on nothing but
// the operands (docs/EXACTNESS.md R1):
//
//     t = +0;  for k = 0 .. K-1:  t = fma(op(A)(i,k), op(B)(k,j), t)
//     C(i,j) = alpha · t                 (accumulate = 0)
//     C(i,j) = fma(alpha, t, C(i,j))     (accumulate = 1; C + t when alpha is 1)
//
// One fused multiply-add chain per element, over k in increasing order,
// started from +0. Vector lanes hold different j, never different k, so the
// AVX-512, AVX2 + FMA, NEON and generic (fmaf) kernels give the same bits,
// and so do any blocking, any thread count and any cut of the rows or the
// columns into separate calls: the call's shape does not enter the result.
// (Attention's tile products, ts_tile_mm, are the same definition.)
#ifndef TS_MM_H
#define TS_MM_H
#include <stddef.h>

// C (M, N; rows ldc apart) as above. op(A) is (M, K): A[i*lda + k], or
// A[k*lda + i] when transA. op(B) is (K, N): B[k*ldb + j], or B[j*ldb + k]
// when transB. K = 0 gives t = +0. Runs on the OpenMP threads when called
// outside a parallel region and the product is large enough; inside one
// (a leaf's partial), on the calling thread alone.
void ts_mm(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
           const float *B, int ldb, int accumulate, float *C, int ldc);
// The same on a chosen instruction set (src/cpu/isa.h), for the tests:
// threads 0 as ts_mm, 1 on the calling thread alone. Returns -1 when this CPU
// or build lacks isa (or no memory could be had for a panel), 0 otherwise.
int ts_mm_isa(int isa, int threads, int transA, int transB, int M, int N, int K, float alpha,
              const float *A, int lda, const float *B, int ldb, int accumulate, float *C, int ldc);

// A weight gradient's sum over tokens, which the exactness contract makes a
// canonical tree over leaves of `leaf` tokens (docs/EXACTNESS.md R3), done
// in the product itself: for leaf l = 0 .. nleaves-1 its chain
//
//     t_l = +0;  for k = l·leaf .. (l+1)·leaf - 1:  t_l = fma(A[k*lda + i], B[k*ldb + j], t_l)
//
// (ts_mm's chain, transA and not transB, over the leaf's k), and C(i,j) =
// the t_l summed in ts_tree's order (src/exact/tree.h: the perfect binary tree over
// positions 0 .. nleaves-1, positions past the end empty). The same bits as
// each leaf's ts_mm(1, 0, M, N, leaf, 1, ...) pushed through a ts_tree, with
// no M x N partial per leaf in memory: the tree of a register block lives in
// registers and a few cache lines. nleaves 0 gives +0.
void ts_mm_leaves(int M, int N, int nleaves, int leaf, const float *A, int lda, const float *B,
                  int ldb, float *C, int ldc);
// The same on a chosen instruction set, for the tests (as ts_mm_isa).
int ts_mm_leaves_isa(int isa, int threads, int M, int N, int nleaves, int leaf, const float *A,
                     int lda, const float *B, int ldb, float *C, int ldc);
#endif
