// The canonical tree of docs/EXACTNESS.md R3 over scalar leaves, one element
// at a time: the same additions in the same order as ts_tree (src/tree.h)
// makes on whole buffers. Compiled by the C compiler and by nvcc alike, so a
// GPU thread that owns one output element sums its leaves into the CPU's
// bits (the exact tier, docs/GPU.md). No empty leaves: every pushed leaf
// counts.
#ifndef TS_TREE_HD_H
#define TS_TREE_HD_H
#include <stdint.h>

#include "hd.h"

// Levels for up to 2^32 leaves.
#define TS_TREE1_LEVELS 33

typedef struct {
  uint64_t count;                // leaves pushed so far
  float slot[TS_TREE1_LEVELS];   // slot[k]: the complete subtree of 2^k leaves, when count's bit k is set
} ts_tree1;

static inline TS_HD void ts_tree1_init(ts_tree1 *t) { t->count = 0; }

// The next leaf: it merges with the complete subtrees to its left, left + right.
static inline TS_HD void ts_tree1_push(ts_tree1 *t, float leaf) {
  float carry = leaf;
  int k = 0;
  for (; (t->count >> k) & 1u; k++) carry = t->slot[k] + carry;
  t->slot[k] = carry;
  t->count++;
}

// The sum of every leaf pushed (+0 for none): the subtrees left combine from
// the lowest level up, each higher one the left operand.
static inline TS_HD float ts_tree1_finish(const ts_tree1 *t) {
  float acc = 0.0f;
  int any = 0;
  for (int k = 0; k < TS_TREE1_LEVELS; k++) {
    if (!((t->count >> k) & 1u)) continue;
    acc = any ? t->slot[k] + acc : t->slot[k];
    any = 1;
  }
  return acc;
}
#endif
