// Philox4x32-10 (Salmon et al., SC'11; constants from Random123), written
// once for the host and the device so a dropout mask is the same function of
// (seed, purpose, step, index) on both (docs/EXACTNESS.md R4). rng.h is the API.
#ifndef TS_PHILOX_H
#define TS_PHILOX_H
#include <stdint.h>

#include "base/hd.h"

#define TS_PHILOX_M0 0xD2511F53u
#define TS_PHILOX_M1 0xCD9E8D57u
#define TS_PHILOX_W0 0x9E3779B9u
#define TS_PHILOX_W1 0xBB67AE85u

// The block of counter (index, step, purpose) under key seed. The 128-bit
// counter holds 64 bits of index, 40 bits of step and 24 bits of purpose.
TS_HD static inline void ts_philox_block(uint32_t out[4], uint64_t seed, uint32_t purpose,
                                         uint64_t step, uint64_t index) {
  uint32_t c[4] = {(uint32_t)index, (uint32_t)(index >> 32), (uint32_t)step,
                   (uint32_t)((step >> 32) & 0xFFu) | (purpose << 8)};
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int round = 0; round < 10; round++) {
    uint64_t p0 = (uint64_t)TS_PHILOX_M0 * c[0];
    uint64_t p1 = (uint64_t)TS_PHILOX_M1 * c[2];
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    uint32_t c0 = hi1 ^ c[1] ^ k0;
    uint32_t c2 = hi0 ^ c[3] ^ k1;
    c[0] = c0; c[1] = lo1; c[2] = c2; c[3] = lo0;
    k0 += TS_PHILOX_W0;
    k1 += TS_PHILOX_W1;
  }
  out[0] = c[0]; out[1] = c[1]; out[2] = c[2]; out[3] = c[3];
}

// Uniform in [0, 1) from the block's first word (24 random bits).
TS_HD static inline float ts_philox_uniform(uint64_t seed, uint32_t purpose, uint64_t step,
                                            uint64_t index) {
  uint32_t r[4];
  ts_philox_block(r, seed, purpose, step, index);
  return (float)(r[0] >> 8) * (1.0f / 16777216.0f);
}
#endif
