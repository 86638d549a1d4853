// Element-wise and row-gather kernels of the GPU backend: embeddings,
// activations, rotary embeddings, dropout, residual adds. One thread per
// element; each computes what the CPU reference computes for that element
// (src/cpu/), in the same order of operations and with the same exp
// (src/exact/activation_hd.h is both sides' source), so the bits are the CPU's in
// both tiers; the position embedding's gradient is the CPU's canonical tree.
#include "exact/activation_hd.h"
#include "gpu.h"
#include "exact/philox.h"
#include "exact/tree_hd.h"

#define THREADS 256

// ---- encoder ---------------------------------------------------------------------------
// out (B·T, C) = wte[tokens] + wpe[position]; wpe NULL: wte[tokens] alone.
__global__ void encoder_forward_kernel(float *out, const int *tokens, const float *wte,
                                       const float *wpe, int T, int C, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int64_t r = i / C;
  int c = (int)(i % C);
  float e = wte[(int64_t)tokens[r] * C + c];
  out[i] = wpe ? e + wpe[(r % T) * C + c] : e;
}

extern "C" void cuda_encoder_forward(float *out, const int *tokens, const float *wte,
                                     const float *wpe, int B, int T, int C) {
  int64_t n = (int64_t)B * T * C;
  ts_launch(encoder_forward_kernel, ts_blocks(n, THREADS), THREADS, 0, out, tokens, wte, wpe, T, C,
            n);
  ts_cuda_finish("encoder_forward");
}

// dwpe (T, C): row block j of `leaf` positions receives leaf (b, j) of every
// sequence b, through the canonical tree over all B·nj leaves in (batch,
// position) order with the other positions empty (src/cpu/encoder.c). One
// thread per element, so no two threads ever add into the same place.
__global__ void encoder_wpe_kernel(float *dwpe, const float *dout, int B, int T, int C, int leaf) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int nj = T / leaf;
  if (i >= (int64_t)nj * leaf * C) return;
  const int j = (int)(i / ((int64_t)leaf * C));
  ts_tree1 tree;
  ts_tree1_init(&tree);
  for (int64_t li = 0; li < (int64_t)B * nj; li++) {
    if (li % nj == j) ts_tree1_push(&tree, dout[(li - j) * leaf * C + i]);
    else ts_tree1_skip(&tree);
  }
  dwpe[i] = ts_tree1_finish(&tree);
}

extern "C" int cuda_encoder_backward_wpe(ts_ws *ws, float *dwpe, const float *dout, int B,
                                         int T, int C) {
  int64_t n = (int64_t)(T / ws->leaf) * ws->leaf * C;
  ts_launch(encoder_wpe_kernel, ts_blocks(n, THREADS), THREADS, 0, dwpe, dout, B, T, C, ws->leaf);
  ts_cuda_finish("encoder_backward_wpe");
  return 0;
}

// ---- GeLU (tanh form) and SwiGLU -----------------------------------------------------------
__global__ void gelu_forward_kernel(float *out, const float *inp, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = ts_gelu(inp[i]);
}

__global__ void gelu_backward_kernel(float *dinp, const float *inp, const float *dout,
                                     int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dinp[i] = ts_gelu_backward(inp[i], dout[i]);
}

extern "C" void cuda_gelu_forward(float *out, const float *inp, int64_t n) {
  ts_launch(gelu_forward_kernel, ts_blocks(n, THREADS), THREADS, 0, out, inp, n);
  ts_cuda_finish("gelu_forward");
}

extern "C" void cuda_gelu_backward(float *dinp, const float *inp, const float *dout, int64_t n) {
  ts_launch(gelu_backward_kernel, ts_blocks(n, THREADS), THREADS, 0, dinp, inp, dout, n);
  ts_cuda_finish("gelu_backward");
}

__global__ void swiglu_forward_kernel(float *h, const float *g, const float *u, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) h[i] = ts_swiglu(g[i], u[i]);
}

// dg may alias dh: each thread reads its dh before writing.
__global__ void swiglu_backward_kernel(float *dg, float *du, const float *g, const float *u,
                                       const float *dh, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float dgi, dui;
  ts_swiglu_backward(g[i], u[i], dh[i], &dgi, &dui);
  du[i] = dui;
  dg[i] = dgi;
}

extern "C" void cuda_swiglu_forward(float *h, const float *g, const float *u, int64_t n) {
  ts_launch(swiglu_forward_kernel, ts_blocks(n, THREADS), THREADS, 0, h, g, u, n);
  ts_cuda_finish("swiglu_forward");
}

extern "C" void cuda_swiglu_backward(float *dg, float *du, const float *g, const float *u,
                                     const float *dh, int64_t n) {
  ts_launch(swiglu_backward_kernel, ts_blocks(n, THREADS), THREADS, 0, dg, du, g, u, dh, n);
  ts_cuda_finish("swiglu_backward");
}

// ---- rotary position embedding ---------------------------------------------------------------
// One thread per pair (2i, 2i+1) of one head of one row; row r is at position
// t0 + r % T; cs (positions, dh/2, 2) holds cos and sin; dir −1 rotates back.
__global__ void rope_kernel(float *x, int64_t ntok, int T, int t0, int nh, int dh, int ld,
                            const float *cs, float dir) {
  int half = dh / 2;
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= ntok * nh * half) return;
  int p = (int)(i % half);
  int64_t rh = i / half;
  int h = (int)(rh % nh);
  int64_t r = rh / nh;
  const float *c = cs + ((int64_t)(t0 + r % T) * half + p) * 2;
  float co = c[0], si = dir * c[1];
  float *v = x + r * ld + (int64_t)h * dh + 2 * p;
  float a = v[0], b = v[1];
  v[0] = __fsub_rn(__fmul_rn(a, co), __fmul_rn(b, si));
  v[1] = __fadd_rn(__fmul_rn(a, si), __fmul_rn(b, co));
}

static void rope(float *x, int64_t ntok, int T, int t0, int nh, int dh, int ld, const float *cs,
                 float dir, const char *what) {
  int64_t n = ntok * nh * (dh / 2);
  ts_launch(rope_kernel, ts_blocks(n, THREADS), THREADS, 0, x, ntok, T, t0, nh, dh, ld, cs, dir);
  ts_cuda_finish(what);
}

extern "C" void cuda_rope_forward(float *x, int64_t ntok, int T, int t0, int nh, int dh, int ld,
                                  const float *cs) {
  rope(x, ntok, T, t0, nh, dh, ld, cs, 1.0f, "rope_forward");
}

extern "C" void cuda_rope_backward(float *dx, int64_t ntok, int T, int t0, int nh, int dh,
                                   int ld, const float *cs) {
  rope(dx, ntok, T, t0, nh, dh, ld, cs, -1.0f, "rope_backward");
}

// ---- dropout -------------------------------------------------------------------------------
// The mask of element i is ts_philox_uniform(seed, purpose, step, base + i) >= p,
// the same function the CPU evaluates: the same elements are dropped.
__global__ void dropout_kernel(float *x, int64_t n, float p, float scale, uint64_t seed,
                               uint32_t purpose, uint64_t step, uint64_t base) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float u = ts_philox_uniform(seed, purpose, step, base + (uint64_t)i);
  x[i] = u >= p ? x[i] * scale : 0.0f;
}

extern "C" void cuda_dropout_apply(float *x, int64_t n, float p, uint64_t seed, uint32_t purpose,
                                   uint64_t step, uint64_t base) {
  if (p <= 0.0f) return;
  float scale = 1.0f / (1.0f - p);
  ts_launch(dropout_kernel, ts_blocks(n, THREADS), THREADS, 0, x, n, p, scale, seed, purpose, step,
            base);
  ts_cuda_finish("dropout");
}

// ---- residual adds and copies ----------------------------------------------------------------
__global__ void add_kernel(float *dst, const float *a, const float *b, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = a[i] + b[i];
}

extern "C" void cuda_add(float *dst, const float *a, const float *b, int64_t n) {
  ts_launch(add_kernel, ts_blocks(n, THREADS), THREADS, 0, dst, a, b, n);
  ts_cuda_finish("add");
}

// dst = a + b on rows of cols floats, each one's rows ld_ apart (ldb 0: b is one row).
__global__ void add_rows_kernel(float *dst, int ldd, const float *a, int lda, const float *b,
                                int ldb, int64_t rows, int cols) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  int64_t r = i / cols;
  int c = (int)(i % cols);
  dst[r * ldd + c] = a[r * lda + c] + b[r * ldb + c];
}

extern "C" void cuda_add_rows(float *dst, int ldd, const float *a, int lda, const float *b, int ldb,
                              int64_t rows, int cols) {
  ts_launch(add_rows_kernel, ts_blocks(rows * cols, THREADS), THREADS, 0, dst, ldd, a, lda, b, ldb,
            rows, cols);
  ts_cuda_finish("add_rows");
}

extern "C" void cuda_copy(void *dst, const void *src, size_t bytes) {
  ts_cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, ts_cuda_stream()), "copy");
  ts_cuda_finish("copy");
}
