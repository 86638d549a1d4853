// Rotary position embedding (LLaMA variant): within each head of dh features
// the pairs (2i, 2i+1) are rotated by the angle t·θ^(−2i/dh) of the token's
// global position t. The angles' cosines and sines are computed once in
// double precision and rounded to float, so every rank and layout uses the
// same table bits.
#include <math.h>

#include "kernels.h"

void rope_table(float *cs, int T, int dh, double theta) {
  for (int t = 0; t < T; t++)
    for (int i = 0; i < dh / 2; i++) {
      double a = (double)t * pow(theta, -2.0 * i / (double)dh);
      cs[((size_t)t * (dh / 2) + i) * 2] = (float)cos(a);
      cs[((size_t)t * (dh / 2) + i) * 2 + 1] = (float)sin(a);
    }
}

// x (ntok rows of nh heads × dh; row stride ld) in place; row r has position
// t0 + r % T. dir = +1 rotates (forward), −1 rotates back (backward: the
// transpose of a rotation is its inverse).
static void rotate(float *x, int64_t ntok, int T, int t0, int nh, int dh, int ld,
                   const float *cs, float dir) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < ntok; r++) {
    const float *c = cs + (size_t)(t0 + r % T) * dh;
    for (int h = 0; h < nh; h++) {
      float *v = x + r * ld + (size_t)h * dh;
      for (int i = 0; i < dh / 2; i++) {
        float co = c[2 * i], si = dir * c[2 * i + 1];
        float a = v[2 * i], b = v[2 * i + 1];
        v[2 * i] = a * co - b * si;
        v[2 * i + 1] = a * si + b * co;
      }
    }
  }
}

void rope_forward(float *x, int64_t ntok, int T, int t0, int nh, int dh, int ld, const float *cs) {
  rotate(x, ntok, T, t0, nh, dh, ld, cs, 1.0f);
}

void rope_backward(float *dx, int64_t ntok, int T, int t0, int nh, int dh, int ld,
                   const float *cs) {
  rotate(dx, ntok, T, t0, nh, dh, ld, cs, -1.0f);
}
