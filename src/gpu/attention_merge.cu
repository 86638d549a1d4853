// Ring attention's merge on the GPU (kernels.h, ring_merge): one thread per
// (head, row), which merges the row's dh outputs and then writes its lse, so
// no thread reads an lse another one has rewritten. The arithmetic is the
// CPU's (src/exact/attention_merge.h), expf and log1pf being the device's.
#include "exact/attention_merge.h"
#include "gpu.h"

#define THREADS 256

__global__ void ring_merge_kernel(float *out, float *lse, const float *out_b, const float *lse_b,
                                  int rows, int H, int dh, int ldo) {
  int64_t x = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (x >= (int64_t)rows * H) return;
  int h = (int)(x / rows), i = (int)(x % rows);
  ts_merge_head(out + (int64_t)i * ldo + (int64_t)h * dh, &lse[x],
                out_b + (int64_t)i * ldo + (int64_t)h * dh, lse_b[x], dh);
}

extern "C" void cuda_ring_merge(float *out, float *lse, const float *out_b, const float *lse_b,
                                int rows, int H, int dh, int ldo) {
  int64_t n = (int64_t)rows * H;
  ts_launch(ring_merge_kernel, ts_blocks(n, THREADS), THREADS, 0, out, lse, out_b, lse_b, rows, H,
            dh, ldo);
  ts_cuda_finish("ring_merge");
}
