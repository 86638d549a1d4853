// Dropout with counter-based masks (R4): the mask of element i is a pure
// function of (seed, purpose, step, global index), so backward regenerates it.
#include "backend/kernels.h"
#include "exact/rng.h"

void dropout_apply(float *x, int64_t n, float p, uint64_t seed, uint32_t purpose,
                   uint64_t step, uint64_t base) {
  if (p <= 0.0f) return;
  float scale = 1.0f / (1.0f - p);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) {
    float u = ts_rng_uniform(seed, purpose, step, base + (uint64_t)i);
    x[i] = u >= p ? x[i] * scale : 0.0f;
  }
}
