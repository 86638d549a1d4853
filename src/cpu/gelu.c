// GeLU, tanh form (GPT-2). Element-wise: each element's arithmetic is
// src/exact/activation_hd.h's, which the GPU shares.
#include <math.h>

#include "backend/kernels.h"
#include "exact/activation_hd.h"
#include "exact/fastexp.h"

#define GELU_CHUNK 4096

// The chunk loops are compiled twice, for AVX2 and for baseline x86-64, and
// picked at load time. Element-wise IEEE arithmetic without contraction gives
// the same bits at any vector width, so the choice never changes a result.
TS_VECTOR_CLONES
static void gelu_chunk(float *out, const float *inp, int64_t n) {
  for (int64_t i = 0; i < n; i++) out[i] = ts_gelu(inp[i]);
}

TS_VECTOR_CLONES
static void gelu_backward_chunk(float *dinp, const float *inp, const float *dout, int64_t n) {
  for (int64_t i = 0; i < n; i++) dinp[i] = ts_gelu_backward(inp[i], dout[i]);
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
