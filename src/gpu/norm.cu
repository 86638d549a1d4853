// LayerNorm (GPT) and RMSNorm (LLaMA) on the GPU. A warp per row: the row's
// sums are a fixed shuffle tree, so every run gives the same bits (not the
// CPU's, whose sums run in index order). The weight and bias gradients are
// sums over rows, taken in chunks of rows and then over chunks (gpu.h),
// never with atomics.
#include "gpu.h"

#define WARP 32
#define ROWS_PER_BLOCK 8 // warps per block

// The sum of v over the warp, the same association in every lane.
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = WARP / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

static unsigned row_blocks(int64_t ntok) { return ts_blocks(ntok, ROWS_PER_BLOCK); }

// ---- LayerNorm -------------------------------------------------------------------------------
__global__ void layernorm_forward_kernel(float *out, float *mean, float *rstd, const float *inp,
                                         const float *w, const float *b, int64_t ntok, int C) {
  int64_t t = (int64_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.y;
  int lane = threadIdx.x;
  if (t >= ntok) return;
  const float *x = inp + t * C;
  float s = 0.0f;
  for (int i = lane; i < C; i += WARP) s += x[i];
  float m = warp_sum(s) / C;
  float v = 0.0f;
  for (int i = lane; i < C; i += WARP) {
    float d = x[i] - m;
    v += d * d;
  }
  float r = 1.0f / sqrtf(warp_sum(v) / C + 1e-5f);
  float *y = out + t * C;
  for (int i = lane; i < C; i += WARP) y[i] = (x[i] - m) * r * w[i] + b[i];
  if (lane == 0) {
    mean[t] = m;
    rstd[t] = r;
  }
}

extern "C" void cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                       const float *w, const float *b, int64_t ntok, int C) {
  ts_launch(layernorm_forward_kernel, row_blocks(ntok), dim3(WARP, ROWS_PER_BLOCK), 0, out, mean,
            rstd, inp, w, b, ntok, C);
  ts_cuda_finish("layernorm_forward");
}

// dx = rstd·(g − mean(g) − n·mean(g·n)), g = dy·w, n the normalised x.
__global__ void layernorm_dinp_kernel(float *dinp, const float *dout, const float *inp,
                                      const float *w, const float *mean, const float *rstd,
                                      int64_t ntok, int C) {
  int64_t t = (int64_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.y;
  int lane = threadIdx.x;
  if (t >= ntok) return;
  const float *x = inp + t * C, *dy = dout + t * C;
  float m = mean[t], rs = rstd[t];
  float sg = 0.0f, sgn = 0.0f;
  for (int i = lane; i < C; i += WARP) {
    float g = dy[i] * w[i];
    sg += g;
    sgn += g * ((x[i] - m) * rs);
  }
  sg = warp_sum(sg) / C;
  sgn = warp_sum(sgn) / C;
  float *dx = dinp + t * C;
  for (int i = lane; i < C; i += WARP) {
    float n = (x[i] - m) * rs;
    dx[i] = (dy[i] * w[i] - sg - n * sgn) * rs;
  }
}

// The chunk partials, in two planes of (nchunks, C): dw's, then db's, each
// over the chunk's rows in row order.
__global__ void layernorm_param_kernel(float *partial, const float *dout, const float *inp,
                                       const float *mean, const float *rstd, int64_t ntok,
                                       int C) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int64_t chunk = blockIdx.y, nchunks = gridDim.y;
  if (i >= C) return;
  int64_t r0 = chunk * TS_CHUNK_ROWS, r1 = min(ntok, r0 + TS_CHUNK_ROWS);
  float dw = 0.0f, db = 0.0f;
  for (int64_t t = r0; t < r1; t++) {
    float dy = dout[t * C + i];
    dw += (inp[t * C + i] - mean[t]) * rstd[t] * dy;
    db += dy;
  }
  partial[chunk * C + i] = dw;
  partial[(nchunks + chunk) * C + i] = db;
}

extern "C" int cuda_layernorm_backward(ts_ws *ws, float *dinp, float *dw, float *db,
                                       const float *dout, const float *inp, const float *w,
                                       const float *mean, const float *rstd, int64_t ntok, int C) {
  (void)ws;
  int64_t nchunks = (ntok + TS_CHUNK_ROWS - 1) / TS_CHUNK_ROWS;
  float *partial = (float *)ts_cuda_scratch((size_t)nchunks * 2 * C * sizeof(float));
  ts_launch(layernorm_param_kernel, dim3(ts_blocks(C, 128), (unsigned)nchunks), 128, 0, partial,
            dout, inp, mean, rstd, ntok, C);
  ts_cuda_sum_chunks(dw, partial, nchunks, C);
  ts_cuda_sum_chunks(db, partial + nchunks * C, nchunks, C);
  ts_launch(layernorm_dinp_kernel, row_blocks(ntok), dim3(WARP, ROWS_PER_BLOCK), 0, dinp, dout, inp,
            w, mean, rstd, ntok, C);
  ts_cuda_finish("layernorm_backward");
  return 0;
}

// ---- RMSNorm ---------------------------------------------------------------------------------
__global__ void rmsnorm_forward_kernel(float *out, float *rstd, const float *inp, const float *w,
                                       int64_t ntok, int C) {
  int64_t t = (int64_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.y;
  int lane = threadIdx.x;
  if (t >= ntok) return;
  const float *x = inp + t * C;
  float ss = 0.0f;
  for (int i = lane; i < C; i += WARP) ss += x[i] * x[i];
  float r = 1.0f / sqrtf(warp_sum(ss) / C + 1e-5f);
  float *y = out + t * C;
  for (int i = lane; i < C; i += WARP) y[i] = x[i] * r * w[i];
  if (lane == 0) rstd[t] = r;
}

extern "C" void cuda_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w,
                                     int64_t ntok, int C) {
  ts_launch(rmsnorm_forward_kernel, row_blocks(ntok), dim3(WARP, ROWS_PER_BLOCK), 0, out, rstd, inp,
            w, ntok, C);
  ts_cuda_finish("rmsnorm_forward");
}

// dx = rstd·(g − n·mean(g·n)), g = dy·w, n = x·rstd.
__global__ void rmsnorm_dinp_kernel(float *dinp, const float *dout, const float *inp,
                                    const float *w, const float *rstd, int64_t ntok, int C) {
  int64_t t = (int64_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.y;
  int lane = threadIdx.x;
  if (t >= ntok) return;
  const float *x = inp + t * C, *dy = dout + t * C;
  float rs = rstd[t];
  float sgn = 0.0f;
  for (int i = lane; i < C; i += WARP) sgn += dy[i] * w[i] * (x[i] * rs);
  sgn = warp_sum(sgn) / C;
  float *dx = dinp + t * C;
  for (int i = lane; i < C; i += WARP) dx[i] = (dy[i] * w[i] - x[i] * rs * sgn) * rs;
}

__global__ void rmsnorm_param_kernel(float *partial, const float *dout, const float *inp,
                                     const float *rstd, int64_t ntok, int C) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int64_t chunk = blockIdx.y;
  if (i >= C) return;
  int64_t r0 = chunk * TS_CHUNK_ROWS, r1 = min(ntok, r0 + TS_CHUNK_ROWS);
  float dw = 0.0f;
  for (int64_t t = r0; t < r1; t++) dw += inp[t * C + i] * rstd[t] * dout[t * C + i];
  partial[chunk * C + i] = dw;
}

extern "C" int cuda_rmsnorm_backward(ts_ws *ws, float *dinp, float *dw, const float *dout,
                                     const float *inp, const float *w, const float *rstd,
                                     int64_t ntok, int C) {
  (void)ws;
  int64_t nchunks = (ntok + TS_CHUNK_ROWS - 1) / TS_CHUNK_ROWS;
  float *partial = (float *)ts_cuda_scratch((size_t)nchunks * C * sizeof(float));
  ts_launch(rmsnorm_param_kernel, dim3(ts_blocks(C, 128), (unsigned)nchunks), 128, 0, partial, dout,
            inp, rstd, ntok, C);
  ts_cuda_sum_chunks(dw, partial, nchunks, C);
  ts_launch(rmsnorm_dinp_kernel, row_blocks(ntok), dim3(WARP, ROWS_PER_BLOCK), 0, dinp, dout, inp,
            w, rstd, ntok, C);
  ts_cuda_finish("rmsnorm_backward");
  return 0;
}
