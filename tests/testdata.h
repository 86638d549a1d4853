// Deterministic test data and the reference tree shared by the unit tests: a splitmix64 stream and
// floats with a wide dynamic range, for which almost every association of a
// sum rounds differently (so a tree summed in the wrong order cannot match a
// reference by accident).
#ifndef TS_TESTDATA_H
#define TS_TESTDATA_H
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

// The reference every tree test compares with, written as plainly as possible.
// Perfect binary tree over positions [lo, lo + size) of `leaves` (leaf i is
// m floats at leaves + i*m; present[i] == 0 or i >= n means empty). Returns 0
// for an all-empty subtree, else 1 with the sum in out; left operand first.
static inline int ref_tree(float *out, const float *leaves, const int *present, size_t n, size_t m,
                    size_t lo, size_t size) {
  if (size == 1) {
    if (lo >= n || (present && !present[lo])) return 0;
    memcpy(out, leaves + lo * m, m * sizeof(float));
    return 1;
  }
  float *right = malloc(m * sizeof(float));
  if (!right) abort();
  int hl = ref_tree(out, leaves, present, n, m, lo, size / 2);
  int hr = ref_tree(right, leaves, present, n, m, lo + size / 2, size / 2);
  if (hl && hr)
    for (size_t i = 0; i < m; i++) out[i] = out[i] + right[i];
  else if (hr)
    memcpy(out, right, m * sizeof(float));
  free(right);
  return hl || hr;
}
#endif
