// exp for the hot loops (softmax, cross-entropy, GeLU): range reduction to
// 2^n · e^r with |r| <= ln2/2 and a degree-6 polynomial (max error ~1 ulp on
// the range we use). Written branch-free with plain IEEE operations so that
// loops over it vectorise, and every lane, and the scalar remainder, compute
// the same bits (no FMA contraction: built with -ffp-contract=off).
// libm's expf is correctly rounded but a scalar call per element, which was
// the largest non-BLAS cost of a training step.
#ifndef TS_FASTEXP_H
#define TS_FASTEXP_H

// Hot element-wise loops are compiled for AVX-512, AVX2 and baseline x86-64
// and picked at load time (GCC function multiversioning). Same bits any way:
// no FMA is enabled, contraction is off, reductions stay in order.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define TS_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TS_VECTOR_CLONES
#endif
#include <stdint.h>
#include <string.h>

#include "base/hd.h" // TS_HD: the GPU's exact tier computes the same bits from this source

static inline TS_HD float ts_expf(float x) {
  // Below -87.3 the result is under FLT_MIN: return exactly 0 (masked scores
  // are -inf and must give probability 0).
  const float lo = -87.3f, hi = 88.7f;
  float xc = x < lo ? lo : (x > hi ? hi : x);
  // round to nearest by the 1.5·2^23 trick: plain adds, vectorisable (floorf
  // is a libm call without SSE4.1)
  const float magic = 12582912.0f;
  float n = (xc * 1.44269504088896341f + magic) - magic;
  float r = xc - n * 0.693359375f;       // ln2 split in two so n·ln2_hi is exact
  r = r - n * -2.12194440e-4f;
  float r2 = r * r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r2 + r + 1.0f;
  // The exponent bits 2^n. A NaN x has reached here unclamped, and converting
  // a NaN to an integer (then shifting a negative) is undefined: it takes
  // n = 0 instead, and p, which is NaN, makes the result NaN. A finite n is
  // in [-126, 128], so n + 127 >= 1 and the bits are those of before.
  float nn = n == n ? n : 0.0f;
  uint32_t e = (uint32_t)((int32_t)nn + 127) << 23;
  float scale;
  memcpy(&scale, &e, sizeof scale);
  float y = p * scale;
  return x < lo ? 0.0f : y;
}
#endif
