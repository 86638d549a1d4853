// Deterministic test data shared by the unit tests: a splitmix64 stream and
// floats with a wide dynamic range, for which almost every association of a
// sum rounds differently (so a tree summed in the wrong order cannot match a
// reference by accident).
#ifndef TS_TESTDATA_H
#define TS_TESTDATA_H
#include <math.h>
#include <stddef.h>
#include <stdint.h>

static inline uint64_t mix64(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Random sign and mantissa, exponents over 2^-20 .. 2^20.
static inline void fill_wide(float *x, size_t n, uint64_t seed) {
  uint64_t s = seed;
  for (size_t i = 0; i < n; i++) {
    uint64_t r = mix64(&s);
    double mant = 1.0 + (double)(r & 0xFFFFFF) / 16777216.0;
    int e = (int)((r >> 24) % 41) - 20;
    x[i] = (float)(ldexp(mant, e) * ((r >> 40) & 1 ? -1.0 : 1.0));
  }
}
#endif
