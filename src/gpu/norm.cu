// LayerNorm (GPT) and RMSNorm (LLaMA) on the GPU, in two tiers (docs/GPU.md).
//  - Exact: a thread per row runs the CPU's row (src/exact/norm_hd.h, one source
//    for both), and a thread per feature sums the weight and bias gradients
//    as the CPU does: each leaf's rows in order from +0, then the canonical
//    tree over leaves (src/exact/tree_hd.h). The CPU's bits.
//  - Fast: a warp per row, the row's sums a fixed shuffle tree; the gradients
//    over rows in chunks, then over chunks (gpu.h). Every run gives the same
//    bits, not the CPU's.
// Never atomics.
#include "gpu.h"
#include "exact/norm_hd.h"
#include "exact/tree_hd.h"

#define WARP 32
#define ROWS_PER_BLOCK 8 // warps per block

// The sum of v over the warp, the same association in every lane.
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = WARP / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

static unsigned row_blocks(int64_t ntok) { return ts_blocks(ntok, ROWS_PER_BLOCK); }

// ---- the exact tier ---------------------------------------------------------------------------
#define THREADS 128

__global__ void layernorm_forward_exact(float *out, float *mean, float *rstd, const float *inp,
                                        const float *w, const float *b, int64_t ntok, int C) {
  int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (t < ntok) ts_layernorm_row(out + t * C, &mean[t], &rstd[t], inp + t * C, w, b, C);
}

__global__ void layernorm_dinp_exact(float *dinp, const float *dout, const float *inp,
                                     const float *w, const float *mean, const float *rstd,
                                     int64_t ntok, int C) {
  int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (t < ntok) ts_layernorm_dinp_row(dinp + t * C, dout + t * C, inp + t * C, w, mean[t], rstd[t], C);
}

// dw[i], db[i] (db NULL: RMSNorm, whose n is x·rstd): each leaf's rows from +0
// in order, as the CPU's leaf partials (src/cpu/layernorm.c, rmsnorm.c), then
// the canonical tree over the leaves.
__global__ void norm_param_exact(float *dw, float *db, const float *dout, const float *inp,
                                 const float *mean, const float *rstd, int64_t nleaves, int leaf,
                                 int C) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= C) return;
  ts_tree1 tw, tb;
  ts_tree1_init(&tw);
  ts_tree1_init(&tb);
  for (int64_t li = 0; li < nleaves; li++) {
    float pw = 0.0f, pb = 0.0f;
    for (int r = 0; r < leaf; r++) {
      int64_t t = li * leaf + r;
      float x = inp[t * C + i], dy = dout[t * C + i], rs = rstd[t];
      if (db) {
        float n = (x - mean[t]) * rs;
        pw += n * dy;
        pb += dy;
      } else {
        pw += x * rs * dy;
      }
    }
    ts_tree1_push(&tw, pw);
    if (db) ts_tree1_push(&tb, pb);
  }
  dw[i] = ts_tree1_finish(&tw);
  if (db) db[i] = ts_tree1_finish(&tb);
}

__global__ void rmsnorm_forward_exact(float *out, float *rstd, const float *inp, const float *w,
                                      int64_t ntok, int C) {
  int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (t < ntok) ts_rmsnorm_row(out + t * C, &rstd[t], inp + t * C, w, C);
}

__global__ void rmsnorm_dinp_exact(float *dinp, const float *dout, const float *inp,
                                   const float *w, const float *rstd, int64_t ntok, int C) {
  int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (t < ntok) ts_rmsnorm_dinp_row(dinp + t * C, dout + t * C, inp + t * C, w, rstd[t], C);
}

// ---- the fast tier ----------------------------------------------------------------------------

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
  if (ts_cuda_exact()) {
    ts_launch(layernorm_forward_exact, ts_blocks(ntok, THREADS), THREADS, 0, out, mean, rstd, inp,
              w, b, ntok, C);
    ts_cuda_finish("layernorm_forward");
    return;
  }
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
  if (ts_cuda_exact()) {
    ts_launch(norm_param_exact, ts_blocks(C, THREADS), THREADS, 0, dw, db, dout, inp, mean, rstd,
              ntok / ws->leaf, ws->leaf, C);
    ts_launch(layernorm_dinp_exact, ts_blocks(ntok, THREADS), THREADS, 0, dinp, dout, inp, w, mean,
              rstd, ntok, C);
    ts_cuda_finish("layernorm_backward");
    return 0;
  }
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
  if (ts_cuda_exact()) {
    ts_launch(rmsnorm_forward_exact, ts_blocks(ntok, THREADS), THREADS, 0, out, rstd, inp, w, ntok,
              C);
    ts_cuda_finish("rmsnorm_forward");
    return;
  }
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
  if (ts_cuda_exact()) {
    ts_launch(norm_param_exact, ts_blocks(C, THREADS), THREADS, 0, dw, (float *)NULL, dout, inp,
              (const float *)NULL, rstd, ntok / ws->leaf, ws->leaf, C);
    ts_launch(rmsnorm_dinp_exact, ts_blocks(ntok, THREADS), THREADS, 0, dinp, dout, inp, w, rstd,
              ntok, C);
    ts_cuda_finish("rmsnorm_backward");
    return 0;
  }
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
