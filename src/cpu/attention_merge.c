// Merging two attention results over disjoint key sets by their
// log-sum-exp (ring attention's blocks, docs/ALGORITHMS.md §4).
#include "exact/attention_merge.h"

#include "backend/kernels.h"

void ring_merge(float *out, float *lse, const float *out_b, const float *lse_b, int rows, int H,
                int dh, int ldo) {
#pragma omp parallel for schedule(static)
  for (int64_t x = 0; x < (int64_t)rows * H; x++) {
    int h = (int)(x / rows), i = (int)(x % rows);
    ts_merge_head(out + (size_t)i * ldo + (size_t)h * dh, &lse[x],
                  out_b + (size_t)i * ldo + (size_t)h * dh, lse_b[x], dh);
  }
}
