// Canonical tree reductions (docs/EXACTNESS.md R3).
//
// A sum over leaves (runs of tokens, query tiles, batch elements) is the
// perfect binary tree over leaf positions 0, 1, 2, ... in order, adjacent
// pairs summed level by level; positions past the end, and positions pushed
// as "empty", contribute nothing (combining with an empty subtree is the
// identity, not an addition of zeros). Streaming leaves in order through a
// binary-counter stack builds exactly that tree with O(log n) buffers, so the
// result does not depend on how the leaves were split among threads or ranks
// as long as every part is an aligned power-of-two run of leaves.
#ifndef TS_TREE_H
#define TS_TREE_H
#include <stddef.h>
#include <stdint.h>

#define TS_TREE_MAX_LEVELS 48
// Buffers a tree may own: one per level, a carry, and up to 64 leaves handed
// out at once by ts_tree_take (one per thread computing leaves in parallel).
#define TS_TREE_MAX_BUFS (TS_TREE_MAX_LEVELS + 2 + 64)

typedef struct {
  size_t n;                              // floats per leaf
  size_t cap;                            // floats per buffer (>= n)
  uint64_t count;                        // leaf positions consumed so far
  float *slot[TS_TREE_MAX_LEVELS];       // slot[k]: a complete subtree of 2^k leaves, or NULL
  float *pool[TS_TREE_MAX_BUFS];         // free buffers
  int npool;
  float *owned[TS_TREE_MAX_BUFS];        // every buffer ever allocated, for free()
  int nowned;
  float *part;                           // the leaf pushed in parts: its copy, or NULL
} ts_tree;

void ts_tree_init(ts_tree *t, size_t n);
void ts_tree_free(ts_tree *t);
// Changes the leaf size of an empty tree (n <= the size it was created with).
void ts_tree_resize(ts_tree *t, size_t n);
// Restarts the tree at leaf position `start` (positions before it are empty).
void ts_tree_reset(ts_tree *t, uint64_t start);
// Pushes the leaf at the next position; leaf NULL = empty. Returns 0, or -1
// when out of memory.
int ts_tree_push(ts_tree *t, const float *leaf);
// A buffer of the tree's size for the caller to fill and hand back with
// ts_tree_push_owned, which pushes it without a copy. NULL when out of memory.
float *ts_tree_take(ts_tree *t);
void ts_tree_push_owned(ts_tree *t, float *leaf);
// The buffers a tree holds at once, at its most, while nleaves leaves are
// taken `window` at a time and then pushed owned (ts_leaf_tree_sum): one
// partial for each set bit of the leaves pushed before a window, and the
// window's own. The pool keeps them all: it is the tree's memory, in
// buffers of its cap, from then on.
int ts_tree_window_peak(int64_t nleaves, int window);
// Pushes `count` empty positions at once.
void ts_tree_skip(ts_tree *t, uint64_t count);
// Writes the sum of everything pushed (zeros when all were empty) into out.
// The tree is left reset to position 0.
void ts_tree_finish(ts_tree *t, float *out);

// A leaf pushed in parts, in place, for a caller that has its elements a
// part at a time (a gradient, layer by layer) and wants no whole copy of it:
// ts_tree_push_part does for leaf[lo, hi) what ts_tree_push does for the
// whole leaf, the same additions in the same order, so the same bits. The
// leaf's part is then given back to the system (ts_pages_discard: it reads
// zeros until written again), or when the leaf is the `last`, ts_tree_finish's
// sum of those elements is written over it. The part of every tree buffer it
// leaves dead goes back too, so that the tree's memory follows the parts.
// The parts of one leaf must not overlap; once they cover [0, n)
// ts_tree_push_parts_end moves to the next position (last: resets, as
// ts_tree_finish). The leaf must not be empty. -1: out of memory.
int ts_tree_push_part(ts_tree *t, float *leaf, size_t lo, size_t hi, int last);
void ts_tree_push_parts_end(ts_tree *t, int finished);

// The canonical tree sum of n scalars (x[i] is leaf i).
float ts_tree_sum(const float *x, size_t n);
// Elementwise a[i] += b[i] — the one addition every combine uses.
void ts_tree_add(float *a, const float *b, size_t n);
#endif
