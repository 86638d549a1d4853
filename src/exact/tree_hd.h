// The canonical tree of docs/EXACTNESS.md R3 over scalar leaves, one element
// at a time: the same additions in the same order as ts_tree (src/exact/tree.h)
// makes on whole buffers. Compiled by the C compiler and by nvcc alike, so a
// GPU thread that owns one output element sums its leaves into the CPU's
// bits (the exact tier, docs/GPU.md). No empty leaves: every pushed leaf
// counts.
#ifndef TS_TREE_HD_H
#define TS_TREE_HD_H
#include <stdint.h>

#include "base/hd.h"

// Levels for up to 2^32 leaves.
#define TS_TREE1_LEVELS 33

typedef struct {
  uint64_t count;                // positions pushed so far
  uint64_t have;                 // bit k: slot[k] holds a sum (not all of its leaves empty)
  float slot[TS_TREE1_LEVELS];   // slot[k]: the complete subtree of 2^k positions, when count's bit k is set
} ts_tree1;

static inline TS_HD void ts_tree1_init(ts_tree1 *t) { t->count = 0; t->have = 0; }

// The next position, a leaf (full 1) or empty (full 0): it merges with the
// complete subtrees to its left, left + right.
static inline TS_HD void ts_tree1_push_or_skip(ts_tree1 *t, float leaf, int full) {
  float carry = leaf;
  int k = 0;
  for (; (t->count >> k) & 1u; k++) {
    const int left = (int)((t->have >> k) & 1u);
    if (left && full) carry = t->slot[k] + carry;
    else if (left) carry = t->slot[k];
    full |= left;
    t->have &= ~((uint64_t)1 << k);
  }
  if (full) {
    t->slot[k] = carry;
    t->have |= (uint64_t)1 << k;
  }
  t->count++;
}

static inline TS_HD void ts_tree1_push(ts_tree1 *t, float leaf) { ts_tree1_push_or_skip(t, leaf, 1); }
static inline TS_HD void ts_tree1_skip(ts_tree1 *t) { ts_tree1_push_or_skip(t, 0.0f, 0); }

// The sum of every leaf pushed (+0 for none): the subtrees left combine from
// the lowest level up, each higher one the left operand.
static inline TS_HD float ts_tree1_finish(const ts_tree1 *t) {
  float acc = 0.0f;
  int any = 0;
  for (int k = 0; k < TS_TREE1_LEVELS; k++) {
    if (!((t->have >> k) & 1u)) continue;
    acc = any ? t->slot[k] + acc : t->slot[k];
    any = 1;
  }
  return acc;
}
#endif
