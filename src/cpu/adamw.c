// AdamW's element-wise update, the CPU backend's `adamw` (kernels.h): each
// element on its own, so the bits do not depend on the threads or the
// vector width. The step's scalars (the bias corrections) come from
// ts_adamw_scalars (src/train/optim.c).
#include <math.h>

#include "backend/kernels.h"
#include "exact/fastexp.h"

// Chunks of the update, compiled for AVX-512, AVX2 and baseline x86-64 and
// picked at load time. At short sequences AdamW is a sixth of a step (docs/
// PERFORMANCE.md, GPT-2's shape at T=64): seven floats a parameter read or
// written. Vector lanes hold different elements, square root and division are
// IEEE's in every lane, so the width never changes a bit.
#define ADAMW_CHUNK 4096

TS_VECTOR_CLONES
static void adamw_chunk(float *p, const float *g, float *m, float *v, int64_t n, float decay,
                        float beta1, float beta2, float step_size, float bc2_sqrt, float eps) {
  for (int64_t i = 0; i < n; i++) {
    float pi = p[i] * decay;
    float mi = m[i] * beta1 + g[i] * (1.0f - beta1);
    float vi = v[i] * beta2 + g[i] * g[i] * (1.0f - beta2);
    float denom = sqrtf(vi) / bc2_sqrt + eps;
    p[i] = pi - step_size * (mi / denom);
    m[i] = mi;
    v[i] = vi;
  }
}

void ts_adamw_elements(float *p, const float *g, float *m, float *v, int64_t n, float decay,
                       float beta1, float beta2, float step_size, float bc2_sqrt, float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < n; c += ADAMW_CHUNK) {
    const int64_t k = n - c < ADAMW_CHUNK ? n - c : ADAMW_CHUNK;
    adamw_chunk(p + c, g + c, m + c, v + c, k, decay, beta1, beta2, step_size, bc2_sqrt, eps);
  }
}
