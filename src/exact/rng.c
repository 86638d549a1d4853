#include "rng.h"

#include <math.h>

#include "exactmath.h"
#include "philox.h"

uint32_t ts_rng_u32(uint64_t seed, uint32_t purpose, uint64_t step, uint64_t index) {
  uint32_t r[4];
  ts_philox_block(r, seed, purpose, step, index);
  return r[0];
}

float ts_rng_uniform(uint64_t seed, uint32_t purpose, uint64_t step, uint64_t index) {
  return ts_philox_uniform(seed, purpose, step, index);
}

float ts_rng_normal(uint64_t seed, uint32_t purpose, uint64_t step, uint64_t index) {
  uint32_t r[4];
  ts_philox_block(r, seed, purpose, step, index);
  // u1 in (0, 1] so the log is finite; computed in double, rounded once. The
  // log and cos are tessera's (exactmath.h), not the C library's, whose bits
  // vary between machines.
  double u1 = ((double)(r[0] >> 8) + 1.0) / 16777216.0;
  double u2 = (double)(r[1] >> 8) / 16777216.0;
  return (float)(sqrt(-2.0 * ts_log(u1)) * ts_cos(6.283185307179586 * u2));
}

uint64_t ts_rng_below(uint64_t seed, uint32_t purpose, uint64_t step, uint64_t index,
                      uint64_t n) {
  uint32_t r[4];
  ts_philox_block(r, seed, purpose, step, index);
  uint64_t x = ((uint64_t)r[1] << 32) | r[0];
  return x % n;
}
