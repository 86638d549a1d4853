// Deterministic sums over rows (gpu.h), column-parallel, so neighbouring
// threads read neighbouring floats. The fast tier: chunk partials, then the
// chunks in order. The exact tier: the CPU's own association (column_sum in
// src/cpu/linear.c: each column's rows in order; a bias gradient: each leaf's
// column sums under the canonical tree), a thread per column.
#include "gpu.h"

extern "C" {
#include "exact/tree_hd.h"
}

#define THREADS 256

// out[j] (+)= Σ over chunks of partial[chunk, j], chunks in order.
__global__ void sum_chunks_kernel(float *out, const float *partial, int64_t nchunks, int64_t n,
                                  int accumulate) {
  int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= n) return;
  float s = partial[j];
  for (int64_t c = 1; c < nchunks; c++) s += partial[c * n + j];
  out[j] = accumulate ? out[j] + s : s;
}

void ts_cuda_sum_chunks(float *out, const float *partial, int64_t nchunks, int64_t n) {
  ts_launch(sum_chunks_kernel, ts_blocks(n, THREADS), THREADS, 0, out, partial, nchunks, n, 0);
}

// partial[chunk, j] = Σ rows of the chunk of x[row, j], in row order.
__global__ void column_chunk_kernel(float *partial, const float *x, int64_t rows, int64_t n) {
  int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  int64_t chunk = blockIdx.y;
  if (j >= n) return;
  int64_t r0 = chunk * TS_CHUNK_ROWS, r1 = min(rows, r0 + TS_CHUNK_ROWS);
  float s = x[r0 * n + j];
  for (int64_t r = r0 + 1; r < r1; r++) s += x[r * n + j];
  partial[chunk * n + j] = s;
}

// out (+)= the column sums of x, through the chunks.
static void column_sums(float *out, const float *x, int64_t rows, int64_t n, int accumulate) {
  int64_t nchunks = (rows + TS_CHUNK_ROWS - 1) / TS_CHUNK_ROWS;
  float *partial = (float *)ts_cuda_scratch((size_t)nchunks * n * sizeof(float));
  dim3 grid(ts_blocks(n, THREADS), (unsigned)nchunks);
  ts_launch(column_chunk_kernel, grid, THREADS, 0, partial, x, rows, n);
  ts_launch(sum_chunks_kernel, ts_blocks(n, THREADS), THREADS, 0, out, partial, nchunks, n,
            accumulate);
}

void ts_cuda_column_sums(float *out, const float *x, int64_t rows, int64_t n) {
  column_sums(out, x, rows, n, 0);
}

// out[j] = x[0, j] + x[1, j] + ... in row order, or out[j] + x[0, j] + ...
// when accumulating: column_sum's additions.
__global__ void column_rows_kernel(float *out, const float *x, int64_t rows, int64_t n,
                                   int accumulate) {
  int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= n) return;
  float s = accumulate ? out[j] : x[j];
  for (int64_t r = accumulate ? 0 : 1; r < rows; r++) s += x[r * n + j];
  out[j] = s;
}

// out[j] = the canonical tree over the leaves of each leaf's column j summed
// in row order (column_rows_kernel on the leaf's rows).
__global__ void leaf_column_kernel(float *out, const float *x, int64_t nleaves, int leaf,
                                   int64_t n) {
  int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= n) return;
  ts_tree1 tree;
  ts_tree1_init(&tree);
  for (int64_t l = 0; l < nleaves; l++) {
    const float *y = x + l * leaf * n + j;
    float s = y[0];
    for (int r = 1; r < leaf; r++) s += y[r * n];
    ts_tree1_push(&tree, s);
  }
  out[j] = ts_tree1_finish(&tree);
}

void ts_cuda_leaf_column_sums(float *out, const float *x, int64_t nleaves, int leaf, int64_t n) {
  ts_launch(leaf_column_kernel, ts_blocks(n, THREADS), THREADS, 0, out, x, nleaves, leaf, n);
}

extern "C" void cuda_column_sum(float *out, const float *x, int64_t rows, int cols,
                                int accumulate) {
  if (ts_cuda_exact())
    ts_launch(column_rows_kernel, ts_blocks(cols, THREADS), THREADS, 0, out, x, rows,
              (int64_t)cols, accumulate);
  else column_sums(out, x, rows, cols, accumulate);
  ts_cuda_finish("column_sum");
}
