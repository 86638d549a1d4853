// The activations' arithmetic for one element: GeLU (tanh form, GPT-2) and
// SwiGLU's gate (LLaMA). One source for the CPU's loops (src/cpu/gelu.c,
// src/cpu/swiglu.c) and the GPU's threads (src/gpu/elementwise.cu), so both
// compute the same bits (docs/EXACTNESS.md R5; docs/GPU.md's exact tier):
// plain IEEE operations in a fixed order and tessera's own exp.
#ifndef TS_ACTIVATION_HD_H
#define TS_ACTIVATION_HD_H
#include "base/hd.h"
#include "fastexp.h"

#define TS_GELU_K 0.7978845608028654f // sqrt(2/pi)

// tanh through one exp: much cheaper than libm's tanhf (which goes through
// expm1f) and vectorisable; accurate to a few ulp of (1 + tanh), which is
// all GeLU uses.
static inline TS_HD float ts_tanh_exp(float u) { return 1.0f - 2.0f / (ts_expf(2.0f * u) + 1.0f); }

static inline TS_HD float ts_gelu(float x) {
  float u = TS_GELU_K * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + ts_tanh_exp(u));
}

// dL/dx from dL/dy = dout.
static inline TS_HD float ts_gelu_backward(float x, float dout) {
  float u = TS_GELU_K * (x + 0.044715f * x * x * x);
  float th = ts_tanh_exp(u);
  float sech2 = 1.0f - th * th;
  float du = TS_GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
  return dout * (0.5f * (1.0f + th) + 0.5f * x * sech2 * du);
}

// σ(g), the gate's sigmoid.
static inline TS_HD float ts_sigmoid(float g) { return 1.0f / (1.0f + ts_expf(-g)); }

// h = silu(g)·u.
static inline TS_HD float ts_swiglu(float g, float u) { return g * ts_sigmoid(g) * u; }

// The gradients of h = silu(g)·u from dh: *dg and *du.
static inline TS_HD void ts_swiglu_backward(float g, float u, float dh, float *dg, float *du) {
  float s = ts_sigmoid(g);
  float silu = g * s;
  *du = dh * silu;
  *dg = dh * u * (s + silu * (1.0f - s));
}
#endif
