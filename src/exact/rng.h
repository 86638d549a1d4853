// Counter-based randomness (docs/EXACTNESS.md R4): every random number is a pure
// function of (seed, purpose, step, index), so it does not matter which rank
// or thread draws it, or in what order.
#ifndef TS_RNG_H
#define TS_RNG_H
#include <stdint.h>

// What the number is for; part of the key so streams never overlap.
enum {
  TS_RNG_INIT = 1,          // parameter initialisation (step = tensor index)
  TS_RNG_DROPOUT_ATTN = 2,  // attention-probability dropout
  TS_RNG_DROPOUT_PROJ = 3,  // dropout after the attention projection
  TS_RNG_DROPOUT_MLP = 4,   // dropout after the MLP
  TS_RNG_DATA = 5,          // window sampling
  TS_RNG_COMPRESS = 6,      // frozen bases of boundary compression (step = which basis)
  TS_RNG_VQ = 7,            // codebook init, dead-code rows and streamed codes (mapl-vq)
  TS_RNG_SAMPLE = 8,        // tessera sample's draws (step 0, index = the token's position)
};

// Philox4x32-10 (Salmon et al., SC'11) of counter (index, step, purpose) under
// key seed; returns the first 32-bit word. The counter holds 64 bits of index,
// 40 bits of step and 24 bits of purpose: steps are taken modulo 2^40.
uint32_t ts_rng_u32(uint64_t seed, uint32_t purpose, uint64_t step, uint64_t index);
// Uniform in [0, 1) with 24 random bits.
float ts_rng_uniform(uint64_t seed, uint32_t purpose, uint64_t step, uint64_t index);
// Standard normal by Box-Muller on two words of one Philox block.
float ts_rng_normal(uint64_t seed, uint32_t purpose, uint64_t step, uint64_t index);
// Uniform integer in [0, n) (n > 0), from 64 random bits so the bias is negligible.
uint64_t ts_rng_below(uint64_t seed, uint32_t purpose, uint64_t step, uint64_t index, uint64_t n);

#endif
