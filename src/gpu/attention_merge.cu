// Ring attention's merge on the GPU (kernels.h, ring_merge): one thread per
// (head, row), which merges the row's dh outputs and then writes its lse, so
// no thread reads an lse another one has rewritten. The arithmetic is the
// CPU's (src/cpu/attention_merge.c), expf and log1pf being the device's.
#include "gpu.h"

#define THREADS 256

__global__ void ring_merge_kernel(float *out, float *lse, const float *out_b, const float *lse_b,
                                  int rows, int H, int dh, int ldo) {
  int64_t x = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (x >= (int64_t)rows * H) return;
  int h = (int)(x / rows), i = (int)(x % rows);
  float la = lse[x], lb = lse_b[x];
  // σ(lb − la) and the new log-sum-exp, both from exp of a non-positive number
  float sig, lnew;
  if (lb <= la) {
    float e = expf(lb - la);
    sig = e / (1.0f + e);
    lnew = la + log1pf(e);
  } else {
    float e = expf(la - lb);
    sig = 1.0f / (1.0f + e);
    lnew = lb + log1pf(e);
  }
  float *o = out + (int64_t)i * ldo + (int64_t)h * dh;
  const float *ob = out_b + (int64_t)i * ldo + (int64_t)h * dh;
  for (int c = 0; c < dh; c++) o[c] = o[c] - sig * (o[c] - ob[c]);
  lse[x] = lnew;
}

extern "C" void cuda_ring_merge(float *out, float *lse, const float *out_b, const float *lse_b,
                                int rows, int H, int dh, int ldo) {
  int64_t n = (int64_t)rows * H;
  ts_launch(ring_merge_kernel, ts_blocks(n, THREADS), THREADS, 0, out, lse, out_b, lse_b, rows, H,
            dh, ldo);
  ts_cuda_finish("ring_merge");
}
