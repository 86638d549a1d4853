// Deterministic sums over rows (gpu.h): chunk partials, then the chunks in
// order. Column-parallel, so neighbouring threads read neighbouring floats.
#include "gpu.h"

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

extern "C" void cuda_column_sum(float *out, const float *x, int64_t rows, int cols,
                                int accumulate) {
  column_sums(out, x, rows, cols, accumulate);
  ts_cuda_finish("column_sum");
}
