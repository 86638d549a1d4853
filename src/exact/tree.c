#include "tree.h"
#include "tree_hd.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"

void ts_tree_init(ts_tree *t, size_t n) {
  memset(t, 0, sizeof *t);
  t->n = n;
  t->cap = n;
}

void ts_tree_resize(ts_tree *t, size_t n) {
  ts_tree_reset(t, 0);
  t->n = n <= t->cap ? n : t->cap;
}

void ts_tree_free(ts_tree *t) {
  for (int i = 0; i < t->nowned; i++) free(t->owned[i]);
  memset(t, 0, sizeof *t);
}

float *ts_tree_take(ts_tree *t) {
  if (t->npool > 0) return t->pool[--t->npool];
  if (t->nowned >= TS_TREE_MAX_BUFS) return NULL;
  float *b = NULL;
  if (posix_memalign((void **)&b, 64, t->cap * sizeof(float) + 64) != 0) return NULL;
  t->owned[t->nowned++] = b;
  return b;
}

// The most set bits of any k in [0, n].
static int max_popcount_upto(uint64_t n) {
  if (n == 0) return 0;
  const int bits = 64 - __builtin_clzll(n);
  return (n & (n + 1)) == 0 ? bits : bits - 1 > __builtin_popcountll(n) ? bits - 1
                                                                        : __builtin_popcountll(n);
}

int ts_tree_window_peak(int64_t nleaves, int window) {
  if (nleaves <= 0 || window <= 0) return 0;
  const uint64_t n = (uint64_t)nleaves, w = (uint64_t)window;
  if ((w & (w - 1)) == 0) { // a power of two: base = k·w holds popcount(k) partials
    const uint64_t full = n / w, rem = n % w;
    int peak = full ? max_popcount_upto(full - 1) + window : 0;
    const int last = rem ? __builtin_popcountll(full) + (int)rem : 0;
    return last > peak ? last : peak;
  }
  int peak = 0;
  for (uint64_t base = 0; base < n; base += w) {
    const int held = __builtin_popcountll(base) + (int)(n - base < w ? n - base : w);
    if (held > peak) peak = held;
  }
  return peak;
}

static void give(ts_tree *t, float *b) { t->pool[t->npool++] = b; }

void ts_tree_reset(ts_tree *t, uint64_t start) {
  if (t->part) { give(t, t->part); t->part = NULL; } // (a leaf left half pushed)
  for (int k = 0; k < TS_TREE_MAX_LEVELS; k++)
    if (t->slot[k]) { give(t, t->slot[k]); t->slot[k] = NULL; }
  t->count = start;
}

void ts_tree_add(float *a, const float *b, size_t n) {
  // Elementwise: any split of the index range gives the same bits.
#pragma omp parallel for schedule(static) if (n >= (1u << 16))
  for (size_t i = 0; i < n; i++) a[i] = a[i] + b[i];
}

// Merges carry, a complete subtree of 2^k leaves, with the complete
// subtrees to its left from level k up, and slots the result.
static void merge_from(ts_tree *t, int k, float *carry) {
  for (; (t->count >> k) & 1u; k++) {
    float *left = t->slot[k];
    t->slot[k] = NULL;
    if (left && carry) {
      ts_tree_add(left, carry, t->n); // left subtree + right subtree
      give(t, carry);
      carry = left;
    } else if (left) {
      carry = left;
    }
  }
  t->slot[k] = carry;
  t->count++;
}

int ts_tree_push(ts_tree *t, const float *leaf) {
  if (leaf && (t->count & 1u) && t->slot[0]) {
    // the leaf completes a pair: added straight into its left neighbour,
    // the same left + right as through a copy, one buffer fewer
    float *left = t->slot[0];
    t->slot[0] = NULL;
    ts_tree_add(left, leaf, t->n);
    merge_from(t, 1, left);
    return 0;
  }
  float *carry = NULL;
  if (leaf) {
    carry = ts_tree_take(t);
    if (!carry) return -1;
    memcpy(carry, leaf, t->n * sizeof(float));
  }
  ts_tree_push_owned(t, carry);
  return 0;
}

void ts_tree_push_owned(ts_tree *t, float *carry) { merge_from(t, 0, carry); }

void ts_tree_skip(ts_tree *t, uint64_t count) {
  // An empty leaf still merges the subtrees to its left when it completes a
  // level, so empties are pushed one by one (cheap: no copies).
  for (uint64_t i = 0; i < count; i++) ts_tree_push(t, NULL);
}

void ts_tree_finish(ts_tree *t, float *out) {
  // Pad with empty leaves up to the next power of two: the occupied slots
  // combine from the lowest level up, each higher slot being the left operand.
  float *acc = NULL;
  for (int k = 0; k < TS_TREE_MAX_LEVELS; k++) {
    float *s = t->slot[k];
    if (!s) continue;
    t->slot[k] = NULL;
    if (acc) {
      ts_tree_add(s, acc, t->n);
      give(t, acc);
    }
    acc = s;
  }
  if (acc) {
    memcpy(out, acc, t->n * sizeof(float));
    give(t, acc);
  } else {
    memset(out, 0, t->n * sizeof(float));
  }
  t->count = 0;
}

// Pushing in parts follows ts_tree_push's buffers exactly: with a left
// neighbour in slot 0 the leaf is added into it, else it is copied into a
// buffer of its own (taken at the first part); then the carry merges with
// the slots of the levels the position completes, each left + carry into
// the left, whose buffer carries on. The slots change only at the end.
static void dead(float *b, size_t lo, size_t hi) {
  ts_pages_discard(b + lo, (hi - lo) * sizeof(float));
}

int ts_tree_push_part(ts_tree *t, float *leaf, size_t lo, size_t hi, int last) {
  if (lo >= hi) return 0;
  const size_t m = hi - lo;
  float *carry;
  int k;
  if ((t->count & 1u) && t->slot[0]) {
    carry = t->slot[0];
    ts_tree_add(carry + lo, leaf + lo, m);
    k = 1;
  } else {
    if (!t->part && !(t->part = ts_tree_take(t))) return -1;
    carry = t->part;
    memcpy(carry + lo, leaf + lo, m * sizeof(float));
    k = 0;
  }
  for (; (t->count >> k) & 1u; k++) {
    float *left = t->slot[k];
    if (!left || left == carry) continue; // (slot 0's, added into already)
    ts_tree_add(left + lo, carry + lo, m);
    dead(carry, lo, hi);
    carry = left;
  }
  if (!last) {
    dead(leaf, lo, hi);
    return 0;
  }
  // the last leaf: ts_tree_finish's sums of these elements, from the lowest
  // slot above the carry's level up, each the left operand
  for (k++; k < TS_TREE_MAX_LEVELS; k++) {
    float *s = t->slot[k];
    if (!s) continue;
    ts_tree_add(s + lo, carry + lo, m);
    dead(carry, lo, hi);
    carry = s;
  }
  memcpy(leaf + lo, carry + lo, m * sizeof(float));
  dead(carry, lo, hi);
  return 0;
}

void ts_tree_push_parts_end(ts_tree *t, int finished) {
  float *carry = t->part;
  int k = 0;
  t->part = NULL;
  if ((t->count & 1u) && t->slot[0]) {
    carry = t->slot[0];
    t->slot[0] = NULL;
    k = 1;
  }
  for (; (t->count >> k) & 1u; k++) {
    float *left = t->slot[k];
    t->slot[k] = NULL;
    if (left && left != carry) {
      give(t, carry);
      carry = left;
    }
  }
  t->slot[k] = carry;
  t->count++;
  if (finished) ts_tree_reset(t, 0);
}

float ts_tree_sum(const float *x, size_t n) {
  // Same tree as ts_tree with scalar leaves (src/exact/tree_hd.h, which the GPU's
  // kernels share).
  ts_tree1 t;
  ts_tree1_init(&t);
  for (size_t i = 0; i < n; i++) ts_tree1_push(&t, x[i]);
  return ts_tree1_finish(&t);
}
