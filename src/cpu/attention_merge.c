// Merging two attention results over disjoint key sets by their
// log-sum-exp (ring attention's blocks, docs/ALGORITHMS.md §4).
#include <math.h>

#include "kernels.h"

void ring_merge(float *out, float *lse, const float *out_b, const float *lse_b, int rows, int H,
                int dh, int ldo) {
#pragma omp parallel for schedule(static)
  for (int64_t x = 0; x < (int64_t)rows * H; x++) {
    int h = (int)(x / rows), i = (int)(x % rows);
    float la = lse[(size_t)h * rows + i], lb = lse_b[(size_t)h * rows + i];
    // σ(lb − la) and the new log-sum-exp, both from exp of a non-positive number
    float sig, lnew;
    if (lb <= la) {
      float e = expf(lb - la);
      sig = e / (1.0f + e);
      lnew = la + log1pf(e);
    } else {
      float e = expf(la - lb);
      sig = 1.0f / (1.0f + e);
      lnew = lb + log1pf(e);
    }
    float *o = out + (size_t)i * ldo + (size_t)h * dh;
    const float *ob = out_b + (size_t)i * ldo + (size_t)h * dh;
    for (int c = 0; c < dh; c++) o[c] = o[c] - sig * (o[c] - ob[c]);
    lse[(size_t)h * rows + i] = lnew;
  }
}
