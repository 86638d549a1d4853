// The canonical product (src/cpu/mm.h, docs/EXACTNESS.md R1) on the GPU: the
// exact tier's every matrix product, so its bits are the CPU's ts_mm and
// ts_mm_leaves. cuBLAS cannot give them: its kernels cut k, keep several
// accumulators per element and pick their tiling by shape, so the fast tier
// alone uses it. The definition, element by element:
//
//     t = +0;  for k = 0 .. K-1:  t = fmaf(op(A)(i,k), op(B)(k,j), t)
//     C(i,j) = alpha · t                 (overwrite)
//     C(i,j) = fmaf(alpha, t, C(i,j))    (accumulate)
//
// A block computes a 64 x 64 tile of C; its 256 threads each own 4 x 4
// elements and run their chains in registers, while op(A)'s and op(B)'s
// slices of 16 k are staged in shared memory (loaded together, coalesced
// along whichever index is contiguous). Each element's chain is one chain
// over k in increasing order, never cut or padded: the last slice of a chain
// stops at its own length, because an fma with a padding zero is not the
// identity (−0 + 0·x is +0). Elements past M or N are computed on padding and
// not stored. So the bits depend on the operands alone, not on M, N, the
// tiling or the launch, exactly as on the CPU. nvcc keeps every fmaf a
// single rounding and contracts nothing else (-fmad=false, Makefile.am).
#include "gpu.h"

extern "C" {
#include "exact/tree_hd.h"
}

#define MM_TILE 64    // a block's tile of C: MM_TILE x MM_TILE elements
#define MM_KT 16      // k per shared-memory slice
#define MM_THREADS 256 // 16 x 16 threads
#define MM_PER 4      // each thread's elements: MM_PER x MM_PER, 16 rows and 16 columns apart

// One kernel for both products. The plain product is one leaf of K (LEAVES
// 0: no tree, C written from the chain). ts_mm_leaves (LEAVES 1): for leaf
// l = 0 .. nleaves-1 its chain over k = l·leaf .. (l+1)·leaf − 1 (op(A)
// transposed, op(B) not), then optionally the scatter below, then pushed
// into the element's canonical tree (ts_tree1, src/exact/tree_hd.h: ts_tree's
// additions in ts_tree's order); C(i,j) = the tree's sum. The scatter (the
// token embedding's gradient, src/cpu/encoder.c): after leaf l's chain,
// t = t + add[r, j] for each row r of the leaf with order[p] = r for p in
// [start[i], start[i + 1]) (the rows whose token is i, ascending), in row
// order: the leaf's partial of a row of dwte that the batch's tokens
// scatter into, as the CPU makes it.
template <int LEAVES>
__global__ void __launch_bounds__(MM_THREADS)
    mm_kernel(int transA, int transB, int M, int N, int nleaves, int leaf, float alpha,
              const float *A, int lda, const float *B, int ldb, int accumulate, float *C,
              int ldc, const float *add, int ldadd, const int *order, const int *start) {
  // As[kk][ii] = op(A)(i0 + ii, k0 + kk), Bs[kk][jj] = op(B)(k0 + kk, j0 + jj); a row
  // one float longer than the tile, so that a load along k spreads over the banks
  __shared__ float As[MM_KT][MM_TILE + 1], Bs[MM_KT][MM_TILE + 1];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int64_t i0 = (int64_t)blockIdx.x * MM_TILE, j0 = (int64_t)blockIdx.y * MM_TILE;
  float t[MM_PER][MM_PER];
  ts_tree1 tree[LEAVES ? MM_PER * MM_PER : 1];
  int p[MM_PER], pend[MM_PER]; // the scatter's next row and its end, per row of the thread
  if (LEAVES) {
    for (int e = 0; e < MM_PER * MM_PER; e++) ts_tree1_init(&tree[e]);
    for (int r = 0; r < MM_PER; r++) {
      const int64_t i = i0 + ty + 16 * r;
      p[r] = order && i < M ? start[i] : 0;
      pend[r] = order && i < M ? start[i + 1] : 0;
    }
  }
  for (int l = 0; l < nleaves; l++) {
    for (int r = 0; r < MM_PER; r++)
      for (int c = 0; c < MM_PER; c++) t[r][c] = 0.0f;
    const int64_t kbeg = (int64_t)l * leaf, kend = kbeg + leaf;
    for (int64_t k0 = kbeg; k0 < kend; k0 += MM_KT) {
      const int kn = (int)min((int64_t)MM_KT, kend - k0);
      for (int q = 0; q < MM_TILE * MM_KT / MM_THREADS; q++) {
        const int e = tid + q * MM_THREADS;
        // neighbouring threads read neighbouring floats of either layout
        const int ak = transA ? e / MM_TILE : e % MM_KT, ai = transA ? e % MM_TILE : e / MM_KT;
        const int bk = transB ? e % MM_KT : e / MM_TILE, bj = transB ? e / MM_KT : e % MM_TILE;
        const int64_t i = i0 + ai, ka = k0 + ak, j = j0 + bj, kb = k0 + bk;
        As[ak][ai] = i < M && ak < kn ? (transA ? A[ka * lda + i] : A[i * lda + ka]) : 0.0f;
        Bs[bk][bj] = j < N && bk < kn ? (transB ? B[j * ldb + kb] : B[kb * ldb + j]) : 0.0f;
      }
      __syncthreads();
      for (int kk = 0; kk < kn; kk++) {
        float a[MM_PER], b[MM_PER];
        for (int r = 0; r < MM_PER; r++) a[r] = As[kk][ty + 16 * r];
        for (int c = 0; c < MM_PER; c++) b[c] = Bs[kk][tx + 16 * c];
        for (int r = 0; r < MM_PER; r++)
          for (int c = 0; c < MM_PER; c++) t[r][c] = fmaf(a[r], b[c], t[r][c]);
      }
      __syncthreads();
    }
    if (LEAVES) {
      for (int r = 0; r < MM_PER; r++) {
        // the leaf's rows of this row's token, in row order
        for (; p[r] < pend[r] && order[p[r]] < kend; p[r]++) {
          const float *src = add + (int64_t)order[p[r]] * ldadd;
          for (int c = 0; c < MM_PER; c++) {
            const int64_t j = j0 + tx + 16 * c;
            if (j < N) t[r][c] = t[r][c] + src[j];
          }
        }
        for (int c = 0; c < MM_PER; c++) ts_tree1_push(&tree[r * MM_PER + c], t[r][c]);
      }
    }
  }
  for (int r = 0; r < MM_PER; r++) {
    const int64_t i = i0 + ty + 16 * r;
    if (i >= M) continue;
    for (int c = 0; c < MM_PER; c++) {
      const int64_t j = j0 + tx + 16 * c;
      if (j >= N) continue;
      float *y = C + i * ldc + j;
      if (LEAVES) *y = ts_tree1_finish(&tree[r * MM_PER + c]);
      else *y = accumulate ? fmaf(alpha, t[r][c], *y) : alpha * t[r][c];
    }
  }
}

static dim3 mm_grid(int M, int N) {
  return dim3(ts_blocks(M, MM_TILE), ts_blocks(N, MM_TILE));
}

void ts_cuda_mm(int transA, int transB, int M, int N, int K, float alpha, const float *A,
                int lda, const float *B, int ldb, int accumulate, float *C, int ldc) {
  if (M <= 0 || N <= 0) return;
  ts_launch(mm_kernel<0>, mm_grid(M, N), MM_THREADS, 0, transA, transB, M, N, 1, K, alpha, A,
            lda, B, ldb, accumulate, C, ldc, (const float *)NULL, 0, (const int *)NULL,
            (const int *)NULL);
}

void ts_cuda_mm_leaves_scatter(int M, int N, int nleaves, int leaf, const float *A, int lda,
                               const float *B, int ldb, float *C, int ldc, const float *add,
                               int ldadd, const int *order, const int *start) {
  if (M <= 0 || N <= 0) return;
  ts_launch(mm_kernel<1>, mm_grid(M, N), MM_THREADS, 0, 1, 0, M, N, nleaves, leaf, 1.0f, A, lda,
            B, ldb, 0, C, ldc, add, ldadd, order, start);
}

void ts_cuda_mm_leaves(int M, int N, int nleaves, int leaf, const float *A, int lda,
                       const float *B, int ldb, float *C, int ldc) {
  ts_cuda_mm_leaves_scatter(M, N, nleaves, leaf, A, lda, B, ldb, C, ldc, NULL, 0, NULL, NULL);
}
