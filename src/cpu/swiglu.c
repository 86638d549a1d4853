// SwiGLU (LLaMA variant): h = silu(g) ⊙ u with silu(g) = g·σ(g), where g and
// u are the gate and up projections. Element-wise.
#include "fastexp.h"
#include "kernels.h"

TS_VECTOR_CLONES
void swiglu_forward(float *h, const float *g, const float *u, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float s = 1.0f / (1.0f + ts_expf(-g[i]));
    h[i] = g[i] * s * u[i];
  }
}

// dg, du from dh (dg may alias dh).
TS_VECTOR_CLONES
void swiglu_backward(float *dg, float *du, const float *g, const float *u, const float *dh,
                     int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float s = 1.0f / (1.0f + ts_expf(-g[i]));
    float d = dh[i];
    float silu = g[i] * s;
    du[i] = d * silu;
    dg[i] = d * u[i] * (s + silu * (1.0f - s));
  }
}
