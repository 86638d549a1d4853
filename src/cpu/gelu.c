// GeLU, tanh form (GPT-2). Element-wise.
#include <math.h>

#include "fastexp.h"
#include "kernels.h"

#define GELU_K 0.7978845608028654f // sqrt(2/pi)
#define GELU_CHUNK 4096

// tanh through one exp: much cheaper than libm's tanhf (which goes through
// expm1f) and vectorisable; accurate to a few ulp of (1 + tanh), which is
// all GeLU uses.
static inline float tanh_exp(float u) { return 1.0f - 2.0f / (ts_expf(2.0f * u) + 1.0f); }

// The chunk loops are compiled twice, for AVX2 and for baseline x86-64, and
// picked at load time. Element-wise IEEE arithmetic without contraction gives
// the same bits at any vector width, so the choice never changes a result.
TS_VECTOR_CLONES
static void gelu_chunk(float *out, const float *inp, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float x = inp[i];
    float u = GELU_K * (x + 0.044715f * x * x * x);
    out[i] = 0.5f * x * (1.0f + tanh_exp(u));
  }
}

TS_VECTOR_CLONES
static void gelu_backward_chunk(float *dinp, const float *inp, const float *dout, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float x = inp[i];
    float u = GELU_K * (x + 0.044715f * x * x * x);
    float th = tanh_exp(u);
    float sech2 = 1.0f - th * th;
    float du = GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] = dout[i] * (0.5f * (1.0f + th) + 0.5f * x * sech2 * du);
  }
}

void gelu_forward(float *out, const float *inp, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < n; c += GELU_CHUNK)
    gelu_chunk(out + c, inp + c, n - c < GELU_CHUNK ? n - c : GELU_CHUNK);
}

void gelu_backward(float *dinp, const float *inp, const float *dout, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < n; c += GELU_CHUNK)
    gelu_backward_chunk(dinp + c, inp + c, dout + c, n - c < GELU_CHUNK ? n - c : GELU_CHUNK);
}
