// SwiGLU (LLaMA variant): h = silu(g) ⊙ u with silu(g) = g·σ(g), where g and
// u are the gate and up projections. Element-wise.
#include "backend/kernels.h"
#include "exact/activation_hd.h"
#include "exact/fastexp.h"

TS_VECTOR_CLONES
void swiglu_forward(float *h, const float *g, const float *u, int64_t n) {
  for (int64_t i = 0; i < n; i++) h[i] = ts_swiglu(g[i], u[i]);
}

// dg, du from dh (dg may alias dh).
TS_VECTOR_CLONES
void swiglu_backward(float *dg, float *du, const float *g, const float *u, const float *dh,
                     int64_t n) {
  for (int64_t i = 0; i < n; i++) ts_swiglu_backward(g[i], u[i], dh[i], &dg[i], &du[i]);
}
