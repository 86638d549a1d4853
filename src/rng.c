#include "rng.h"

#include <math.h>

// Philox4x32-10 constants (Random123).
#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

static void philox4x32_10(uint32_t ctr[4], uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; round++) {
    uint64_t p0 = (uint64_t)PHILOX_M0 * ctr[0];
    uint64_t p1 = (uint64_t)PHILOX_M1 * ctr[2];
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    uint32_t c0 = hi1 ^ ctr[1] ^ k0;
    uint32_t c2 = hi0 ^ ctr[3] ^ k1;
    ctr[0] = c0; ctr[1] = lo1; ctr[2] = c2; ctr[3] = lo0;
    k0 += PHILOX_W0;
    k1 += PHILOX_W1;
  }
}

static void block(uint32_t out[4], uint64_t seed, uint32_t purpose, uint64_t step,
                  uint64_t index) {
  // 128-bit counter: 64-bit index, 40 bits of step, 24 bits of purpose.
  out[0] = (uint32_t)index;
  out[1] = (uint32_t)(index >> 32);
  out[2] = (uint32_t)step;
  out[3] = (uint32_t)((step >> 32) & 0xFFu) | (purpose << 8);
  philox4x32_10(out, (uint32_t)seed, (uint32_t)(seed >> 32));
}

uint32_t ts_rng_u32(uint64_t seed, uint32_t purpose, uint64_t step, uint64_t index) {
  uint32_t r[4];
  block(r, seed, purpose, step, index);
  return r[0];
}

float ts_rng_uniform(uint64_t seed, uint32_t purpose, uint64_t step, uint64_t index) {
  return (float)(ts_rng_u32(seed, purpose, step, index) >> 8) * (1.0f / 16777216.0f);
}

float ts_rng_normal(uint64_t seed, uint32_t purpose, uint64_t step, uint64_t index) {
  uint32_t r[4];
  block(r, seed, purpose, step, index);
  // u1 in (0, 1] so the log is finite; computed in double, rounded once.
  double u1 = ((double)(r[0] >> 8) + 1.0) / 16777216.0;
  double u2 = (double)(r[1] >> 8) / 16777216.0;
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

uint64_t ts_rng_below(uint64_t seed, uint32_t purpose, uint64_t step, uint64_t index,
                      uint64_t n) {
  uint32_t r[4];
  block(r, seed, purpose, step, index);
  uint64_t x = ((uint64_t)r[1] << 32) | r[0];
  return x % n;
}
