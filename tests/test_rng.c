// The counter-based generator of docs/EXACTNESS.md R4: Philox4x32-10 known answers,
// the derived distributions, and the separation of streams by key.
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exact/exactmath.h"
#include "exact/rng.h"

// ---- known answers ------------------------------------------------------------------
// The published Random123 vectors for philox4x32_10 (counter c0..c3, key k0, k1).
// rng.c packs (seed, purpose, step, index) as
//   counter = {index lo, index hi, step lo, (step >> 32 & 0xff) | purpose << 8},
//   key     = {seed lo, seed hi},
// so every vector is reachable through the public API: purpose is 24 bits and
// step 40 bits, which covers any value of counter word 3.
// Observable output words: ts_rng_u32 returns word 0, and ts_rng_below with
// n = 2^64 - 1 returns (word1 << 32 | word0) unchanged unless that value is
// exactly n, so it shows words 0 and 1. Words 2 and 3 are never exposed by the
// public API, so they are not checked here.
typedef struct {
  uint32_t ctr[4], key[2];
  uint32_t out[4];
} kat;

static const kat kats[] = {
    {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
    {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
     {0xffffffffu, 0xffffffffu},
     {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
    {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
     {0xa4093822u, 0x299f31d0u},
     {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
};

typedef struct {
  uint64_t seed, step, index;
  uint32_t purpose;
} rng_args;

// Inverse of rng.c's packing.
static rng_args args_of(const kat *k) {
  rng_args a;
  a.index = (uint64_t)k->ctr[1] << 32 | k->ctr[0];
  a.step = (uint64_t)(k->ctr[3] & 0xffu) << 32 | k->ctr[2];
  a.purpose = k->ctr[3] >> 8;
  a.seed = (uint64_t)k->key[1] << 32 | k->key[0];
  return a;
}

static void test_philox_known_answers(void **state) {
  for (size_t i = 0; i < sizeof kats / sizeof kats[0]; i++) {
    rng_args a = args_of(&kats[i]);
    uint32_t w0 = ts_rng_u32(a.seed, a.purpose, a.step, a.index);
    if (w0 != kats[i].out[0])
      fail_msg("KAT %zu: word 0 = 0x%08x, want 0x%08x", i, w0, kats[i].out[0]);
    uint64_t w01 = ts_rng_below(a.seed, a.purpose, a.step, a.index, UINT64_MAX);
    uint64_t want = (uint64_t)kats[i].out[1] << 32 | kats[i].out[0];
    if (w01 != want)
      fail_msg("KAT %zu: words 1:0 = 0x%016llx, want 0x%016llx", i, (unsigned long long)w01,
               (unsigned long long)want);
  }
}

// The derived values are fixed functions of the block's words: checked on the
// first known answer, computed here the way docs/MODEL.md states them.
static void test_derived_values_of_known_block(void **state) {
  rng_args a = args_of(&kats[0]);
  uint32_t w0 = kats[0].out[0], w1 = kats[0].out[1];
  float u = ts_rng_uniform(a.seed, a.purpose, a.step, a.index);
  float uwant = (float)(w0 >> 8) / 16777216.0f;
  assert_memory_equal(&u, &uwant, sizeof u);
  double u1 = ((double)(w0 >> 8) + 1.0) / 16777216.0, u2 = (double)(w1 >> 8) / 16777216.0;
  // Box-Muller in double with tessera's log and cos, rounded once to float
  float z = (float)(sqrt(-2.0 * ts_log(u1)) * ts_cos(6.283185307179586 * u2));
  float zf = ts_rng_normal(a.seed, a.purpose, a.step, a.index);
  assert_memory_equal(&zf, &z, sizeof z);
  uint64_t x = (uint64_t)w1 << 32 | w0;
  for (uint64_t n = 1; n < 1000; n += 37)
    assert_int_equal(ts_rng_below(a.seed, a.purpose, a.step, a.index, n), x % n);
}

// ---- distributions over 1e6 draws ------------------------------------------------------
// Bounds are 5 standard errors of the estimate: a correct generator fails one
// of them with probability ~6e-7 (and the draws are fixed, so a pass is stable).
#define NDRAW 1000000

static void test_uniform_range_mean_variance(void **state) {
  double s = 0.0, s2 = 0.0;
  float lo = 1.0f, hi = 0.0f;
  for (uint64_t i = 0; i < NDRAW; i++) {
    float u = ts_rng_uniform(1234, TS_RNG_DATA, 7, i);
    assert_true(u >= 0.0f && u < 1.0f);
    // 24 random bits: u * 2^24 is an integer
    assert_true(u * 16777216.0f == floorf(u * 16777216.0f));
    lo = u < lo ? u : lo;
    hi = u > hi ? u : hi;
    s += u;
    s2 += (double)u * u;
  }
  double mean = s / NDRAW, var = s2 / NDRAW - mean * mean;
  // U(0,1): mean 1/2, sd of the mean sqrt(1/12/N); variance 1/12, sd of the
  // sample variance sqrt((1/80 - 1/144)/N) = sqrt(1/180/N).
  assert_true(fabs(mean - 0.5) <= 5.0 * sqrt(1.0 / 12.0 / NDRAW));
  assert_true(fabs(var - 1.0 / 12.0) <= 5.0 * sqrt(1.0 / 180.0 / NDRAW));
  assert_true(lo < 1e-4f && hi > 1.0f - 1e-4f); // the whole interval is reached
  // The largest value is below 1 and exactly 0 is possible: 0 and 1 - 2^-24
  // are the extremes of the 24-bit grid.
  assert_true(ts_rng_uniform(0, 0, 0, 0) < 1.0f);
}

static void test_normal_mean_variance(void **state) {
  double s = 0.0, s2 = 0.0, s4 = 0.0;
  long neg = 0, tail = 0;
  for (uint64_t i = 0; i < NDRAW; i++) {
    float z = ts_rng_normal(99, TS_RNG_INIT, 3, i);
    assert_true(isfinite(z));
    s += z;
    s2 += (double)z * z;
    s4 += (double)z * z * z * z;
    neg += z < 0.0f;
    tail += fabsf(z) > 2.0f;
  }
  double mean = s / NDRAW, var = s2 / NDRAW - mean * mean, m4 = s4 / NDRAW;
  // N(0,1): sd of the mean 1/sqrt(N); sd of the sample variance sqrt(2/N);
  // sd of the 4th moment sqrt((105 - 9)/N); P(z < 0) = 1/2; P(|z| > 2) = 0.0455.
  assert_true(fabs(mean) <= 5.0 / sqrt(NDRAW));
  assert_true(fabs(var - 1.0) <= 5.0 * sqrt(2.0 / NDRAW));
  assert_true(fabs(m4 - 3.0) <= 5.0 * sqrt(96.0 / NDRAW));
  assert_true(fabs((double)neg / NDRAW - 0.5) <= 5.0 * sqrt(0.25 / NDRAW));
  const double pt = 0.04550026389635842;
  assert_true(fabs((double)tail / NDRAW - pt) <= 5.0 * sqrt(pt * (1 - pt) / NDRAW));
}

static void test_below_range_and_uniformity(void **state) {
  // range, including n = 1 and n past 32 bits
  const uint64_t ns[] = {1, 2, 3, 7, 10, 1000, (1ull << 33) + 1, UINT64_MAX};
  for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++)
    for (uint64_t i = 0; i < 10000; i++) {
      uint64_t r = ts_rng_below(5, TS_RNG_DATA, k, i, ns[k]);
      assert_true(r < ns[k]);
      if (ns[k] == 1) assert_int_equal(r, 0);
    }
  // n = 10: every bin within 5 sd of N/10 (sd = sqrt(N * 0.1 * 0.9) = 300)
  long count[10] = {0};
  for (uint64_t i = 0; i < NDRAW; i++) count[ts_rng_below(77, TS_RNG_DATA, 1, i, 10)]++;
  for (int b = 0; b < 10; b++) assert_true(labs(count[b] - NDRAW / 10) <= 1500);
  // n past 2^32: the high half must be random too (mean of r / n ~ 1/2)
  const uint64_t big = (1ull << 40) + 12345;
  double s = 0.0;
  for (uint64_t i = 0; i < 100000; i++) s += (double)ts_rng_below(3, TS_RNG_DATA, 2, i, big) / big;
  assert_true(fabs(s / 100000 - 0.5) <= 5.0 * sqrt(1.0 / 12.0 / 100000));
}

// ---- streams -----------------------------------------------------------------------------

// Counts positions i < n where two streams agree; independent 32-bit streams
// agree with probability 2^-32 per position, so more than 1 in 4096 means
// they are related.
static int agreements(rng_args a, rng_args b, int n) {
  int same = 0;
  for (int i = 0; i < n; i++)
    same += ts_rng_u32(a.seed, a.purpose, a.step, a.index + (uint64_t)i) ==
            ts_rng_u32(b.seed, b.purpose, b.step, b.index + (uint64_t)i);
  return same;
}

static void test_streams_differ(void **state) {
  const rng_args base = {42, 10, 0, TS_RNG_DROPOUT_ATTN};
  const int n = 4096;
  // a pure function: the same arguments give the same stream
  assert_int_equal(agreements(base, base, n), n);
  rng_args v;
  for (uint32_t p = 1; p <= 5; p++) {
    if (p == base.purpose) continue;
    v = base; v.purpose = p;
    assert_true(agreements(base, v, n) <= 1);
  }
  // steps differing in the low word, and in bits 32..39 (the top of the 40-bit step)
  const uint64_t steps[] = {11, 12, 10 + (1ull << 32), 10 + (1ull << 39)};
  for (size_t k = 0; k < 4; k++) {
    v = base; v.step = steps[k];
    assert_true(agreements(base, v, n) <= 1);
  }
  // seeds differing in the low and in the high word
  const uint64_t seeds[] = {43, 42 + (1ull << 32), 42 ^ (1ull << 63)};
  for (size_t k = 0; k < 3; k++) {
    v = base; v.seed = seeds[k];
    assert_true(agreements(base, v, n) <= 1);
  }
  // indices: shifted by a non-multiple of the stream length, and in the high word
  const uint64_t idx[] = {1, 4096, 1ull << 32, 1ull << 63};
  for (size_t k = 0; k < 4; k++) {
    v = base; v.index = base.index + idx[k];
    assert_true(agreements(base, v, n) <= 1);
  }
  // one stream has no short repeats: neighbouring values differ
  int repeats = 0;
  for (uint64_t i = 1; i < 100000; i++)
    repeats += ts_rng_u32(1, 1, 1, i) == ts_rng_u32(1, 1, 1, i - 1);
  assert_true(repeats <= 1);
}

// Bits are balanced in every position of the output word (a stuck bit would
// make ts_rng_below and the uniform's 24 bits biased).
static void test_bit_balance(void **state) {
  long ones[32] = {0};
  const int n = 200000;
  for (uint64_t i = 0; i < (uint64_t)n; i++) {
    uint32_t w = ts_rng_u32(2024, TS_RNG_DROPOUT_MLP, 5, i);
    for (int b = 0; b < 32; b++) ones[b] += (w >> b) & 1u;
  }
  // 5 sd of a Binomial(n, 1/2) count: 5 * sqrt(n) / 2
  for (int b = 0; b < 32; b++) assert_true(fabs((double)ones[b] - n / 2.0) <= 2.5 * sqrt(n));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_philox_known_answers),
      cmocka_unit_test(test_derived_values_of_known_block),
      cmocka_unit_test(test_uniform_range_mean_variance),
      cmocka_unit_test(test_normal_mean_variance),
      cmocka_unit_test(test_below_range_and_uniformity),
      cmocka_unit_test(test_streams_differ),
      cmocka_unit_test(test_bit_balance),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
