// AdamW's element-wise update, the CPU backend's `adamw` (kernels.h): each
// element on its own, so the bits do not depend on the threads or the
// vector width. The step's scalars (the bias corrections) come from
// ts_adamw_scalars (src/train/optim.c).
#include <math.h>

#include "backend/kernels.h"

void ts_adamw_elements(float *p, const float *g, float *m, float *v, int64_t n, float decay,
                       float beta1, float beta2, float step_size, float bc2_sqrt, float eps) {
#pragma omp parallel for schedule(static)
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
