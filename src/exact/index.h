// The global indices of the counter-based generator (docs/EXACTNESS.md R4,
// docs/ALGORITHMS.md §11), written once for the host and the device. A
// random draw is a pure function of (seed, purpose, step, index): these are
// the indices, so that whichever rank or device draws an element, it draws
// the serial run's number.
#ifndef TS_INDEX_H
#define TS_INDEX_H
#include <stdint.h>

#include "base/hd.h"

// Dropout of a token-wise activation (B sequences × T positions × C features,
// per layer): element (layer l, sequence b of the global batch Bg, position
// pos, feature 0). Feature c, or the next rows of one sequence, add c, C, ….
TS_HD static inline uint64_t ts_index_row(uint64_t l, uint64_t Bg, uint64_t b, uint64_t T,
                                          uint64_t pos, uint64_t C) {
  return ((l * Bg + b) * T + pos) * C;
}

// Dropout of the attention probabilities of layer l: element (sequence b,
// head 0, query 0, key 0), the base of ts_index_attn.
TS_HD static inline uint64_t ts_index_attn_layer(uint64_t l, uint64_t Bg, uint64_t b, uint64_t H,
                                                 uint64_t T) {
  return (l * Bg + b) * H * T * T;
}

// Probability (b, head h of the model's Hg, query position i, key position j)
// from the layer's base (b counts sequences from that base's).
TS_HD static inline uint64_t ts_index_attn(uint64_t base, uint64_t b, uint64_t Hg, uint64_t h,
                                           uint64_t T, uint64_t i, uint64_t j) {
  return base + ((b * Hg + h) * T + i) * T + j;
}
#endif
