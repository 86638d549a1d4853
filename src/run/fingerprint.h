// The arithmetic fingerprint (src/run/fingerprint.c): the bits of a small
// fixed computation run through the kernels that training runs, hashed.
//
// Exact layouts promise the serial run's bits, and ranks on other machines
// promise the same bits too (docs/EXACTNESS.md): every product and sum has one
// definition and every function is tessera's own. What can still differ is
// what no flag shows: a build with other compiler flags (contraction into
// FMA, fast-math), a C library whose fmaf is not fused, a CPU left flushing
// subnormals to zero. Ranks compare their fingerprints before any step
// (src/run/agree.c), and `tessera info` prints it, so two machines can be
// compared by eye.
#ifndef TS_RUN_FINGERPRINT_H
#define TS_RUN_FINGERPRINT_H
#include <stddef.h>
#include <stdint.h>

// The parts hashed one by one, so that a difference can be named.
enum {
  TS_ARITH_ELEMENTARY,  // exp, log, pow, sin, cos (src/exact/exactmath.h, src/exact/fastexp.h)
  TS_ARITH_PRODUCTS,    // ts_mm, ts_tile_mm, Newton–Schulz
  TS_ARITH_NORMS,       // LayerNorm, RMSNorm, forward and backward
  TS_ARITH_ACTIVATIONS, // GeLU, SwiGLU
  TS_ARITH_ATTENTION,   // attention forward and backward, RoPE
  TS_ARITH_LOSS,        // cross-entropy and its tree sum
  TS_ARITH_OPTIMIZER,   // AdamW, the schedule, the gradient norm
  TS_ARITH_RANDOM,      // normal draws, dropout, seeded orthonormal bases
  TS_ARITH_SUBNORMALS,  // arithmetic on numbers below FLT_MIN
  TS_ARITH_NPARTS
};

typedef struct {
  uint64_t part[TS_ARITH_NPARTS]; // FNV-1a of each part's outputs
  uint64_t all;                   // FNV-1a of the parts
} ts_arith;

// Runs the computation (about a millisecond). Returns 0, or -1 when out of
// memory (*out is then all ones, which no computation gives).
int ts_arith_fingerprint(ts_arith *out);
// "fingerprint 0x0123456789abcdef": what `tessera info` prints.
void ts_arith_describe(char *buf, size_t cap);
// The name of part i ("matrix products", ...).
const char *ts_arith_part_name(int i);
#endif
