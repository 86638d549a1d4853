// Rotary position embedding (LLaMA variant): within each head of dh features
// the pairs (2i, 2i+1) are rotated by the angle t·θ^(−2i/dh) of the token's
// global position t. The angles' cosines and sines are computed once in
// double precision and rounded to float, so every rank and layout uses the
// same table bits; pow, cos and sin are tessera's own (exactmath.h), so every
// machine does too.
#include "backend/kernels.h"
#include "exact/exactmath.h"

void rope_table(float *cs, int T, int dh, double theta) {
  for (int i = 0; i < dh / 2; i++) {
    const double f = ts_pow(theta, -2.0 * i / (double)dh);
    for (int t = 0; t < T; t++) {
      double s, c;
      ts_sincos((double)t * f, &s, &c);
      cs[((size_t)t * (dh / 2) + i) * 2] = (float)c;
      cs[((size_t)t * (dh / 2) + i) * 2 + 1] = (float)s;
    }
  }
}

// x (ntok rows of nh heads × dh; row stride ld) in place; row r has position
// t0 + r % T. dir = +1 rotates (forward), −1 rotates back (backward: the
// transpose of a rotation is its inverse).
//
// The two coordinates of the pairs are computed in separate loops: written
// as one, the rotation is a complex multiplication, which GCC 12 at -O3 with
// FMA available (-march=native) turns into fused vfmaddsub instructions
// although contraction is off, and the bits change.
#define ROPE_PAIRS 64
static void rotate(float *x, int64_t ntok, int T, int t0, int nh, int dh, int ld,
                   const float *cs, float dir) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < ntok; r++) {
    const float *c = cs + (size_t)(t0 + r % T) * dh;
    float re[ROPE_PAIRS], im[ROPE_PAIRS];
    for (int h = 0; h < nh; h++) {
      float *v = x + r * ld + (size_t)h * dh;
      for (int i0 = 0; i0 < dh / 2; i0 += ROPE_PAIRS) {
        const int n = dh / 2 - i0 < ROPE_PAIRS ? dh / 2 - i0 : ROPE_PAIRS;
        const float *cp = c + 2 * i0;
        float *vp = v + 2 * i0;
        for (int i = 0; i < n; i++)
          re[i] = vp[2 * i] * cp[2 * i] - vp[2 * i + 1] * (dir * cp[2 * i + 1]);
        for (int i = 0; i < n; i++)
          im[i] = vp[2 * i] * (dir * cp[2 * i + 1]) + vp[2 * i + 1] * cp[2 * i];
        for (int i = 0; i < n; i++) {
          vp[2 * i] = re[i];
          vp[2 * i + 1] = im[i];
        }
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
