// Sums of per-leaf partials on the GPU (kernels.h, ts_leaf_sum): the leaves
// one after another on the calling thread, each leaf's partial made by the
// backend's own kernels (the leaf function calls them) into a managed buffer
// of this file's, apart from the shared scratch those kernels use.
//
// The exact tier sums them as the CPU does (ts_leaf_tree_sum in
// src/cpu/workspace.c, docs/EXACTNESS.md R3): the canonical tree over leaf
// positions, streamed through a binary-counter stack of partials, each
// merge left + right where left is the complete subtree before it; then the
// subtrees left over from the lowest level up, each higher one the left
// operand. A buffer per level plus the leaf being made: at most
// log2(nleaves) + 2 partials in memory. The fast tier keeps one: the first
// leaf's pieces are copied to their destinations and each later leaf's added
// on, in leaf order: a fixed association, so two runs agree bit for bit, but
// not the CPU's (the tolerance tier).
#include "gpu.h"

extern "C" {
#include "exact/tree_hd.h"
}

#define THREADS 256
#define NBUF (TS_TREE1_LEVELS + 1) // a partial per level of the stack, and the carry

static float *buf[NBUF]; // partials, each `capacity` floats, allocated as needed
static size_t capacity;

// left[i] = left[i] + right[i]: one merge of the tree.
__global__ void leaf_merge_kernel(float *left, const float *right, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) left[i] = left[i] + right[i];
}

__global__ void leaf_zero_kernel(float *x, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = 0.0f;
}

// Buffer b of at least n floats (every buffer is of one capacity): 0, or -1
// when out of memory (the caller's to report).
static int have(int b, size_t n) {
  if (n > capacity) {
    // cudaFree waits for the work that may still use the old buffers
    for (int k = 0; k < NBUF; k++)
      if (buf[k]) ts_cuda_check(cudaFree(buf[k]), "leaf_sum");
    for (int k = 0; k < NBUF; k++) buf[k] = NULL;
    capacity = n;
  }
  // managed, as the model's buffers: a leaf function may write its partial
  // from the host too (mapl's anchor leaves clear it with memset)
  if (buf[b] == NULL && n > 0 &&
      cudaMallocManaged((void **)&buf[b], capacity * sizeof(float), cudaMemAttachGlobal) !=
          cudaSuccess) {
    cudaGetLastError();
    buf[b] = NULL;
    return -1;
  }
  return 0;
}

// The pieces of the sum in buf[s] (s < 0: no leaves, zeros) to their destinations.
static void scatter(int s, float *const *dst, const size_t *len, int nparts) {
  size_t off = 0;
  for (int k = 0; k < nparts; off += len[k], k++) {
    if (!dst[k] || !len[k]) continue;
    if (s >= 0) cuda_copy(dst[k], buf[s] + off, len[k] * sizeof(float));
    else ts_launch(leaf_zero_kernel, ts_blocks((int64_t)len[k], THREADS), THREADS, 0, dst[k], (int64_t)len[k]);
  }
}

// The exact tier's tree; n floats of partial per leaf.
static int tree_sum(float *const *dst, const size_t *len, int nparts, size_t n, int64_t nleaves,
                    ts_leaf_fn fn, const void *ctx) {
  int slot[TS_TREE1_LEVELS]; // slot[k]: the buffer of the complete subtree of 2^k leaves, or -1
  int used[NBUF] = {0};
  for (int k = 0; k < TS_TREE1_LEVELS; k++) slot[k] = -1;
  for (int64_t li = 0; li < nleaves; li++) {
    int c = 0;
    while (used[c]) c++; // a free buffer: at most one per level is held
    if (have(c, n) != 0) return -1;
    used[c] = 1;
    fn(ctx, li, buf[c]);
    int k = 0;
    for (; (li >> k) & 1; k++) { // left + right into the left, which carries on
      ts_launch(leaf_merge_kernel, ts_blocks((int64_t)n, THREADS), THREADS, 0, buf[slot[k]], buf[c],
                (int64_t)n);
      used[c] = 0;
      c = slot[k];
      slot[k] = -1;
    }
    slot[k] = c;
    // the next leaf may take a buffer merged from just now, and write it from the host
    ts_cuda_finish("leaf_sum");
  }
  int acc = -1;
  for (int k = 0; k < TS_TREE1_LEVELS; k++) {
    if (slot[k] < 0) continue;
    if (acc >= 0)
      ts_launch(leaf_merge_kernel, ts_blocks((int64_t)n, THREADS), THREADS, 0, buf[slot[k]], buf[acc],
                (int64_t)n);
    acc = slot[k];
  }
  scatter(acc, dst, len, nparts);
  ts_cuda_finish("leaf_sum");
  return 0;
}

extern "C" int cuda_leaf_sum(ts_ws *ws, float *const *dst, const size_t *len, int nparts,
                             int64_t nleaves, ts_leaf_fn fn, const void *ctx) {
  (void)ws;
  size_t n = 0;
  for (int k = 0; k < nparts; k++) n += len[k];
  if (nparts && ts_cuda_exact()) return tree_sum(dst, len, nparts, n, nleaves, fn, ctx);
  if (have(0, n) != 0) return -1;
  for (int64_t li = 0; li < nleaves; li++) {
    fn(ctx, li, nparts ? buf[0] : NULL);
    size_t off = 0;
    for (int k = 0; k < nparts; off += len[k], k++) {
      if (!dst[k] || !len[k]) continue;
      if (li == 0) cuda_copy(dst[k], buf[0] + off, len[k] * sizeof(float));
      else cuda_add(dst[k], dst[k], buf[0] + off, (int64_t)len[k]);
    }
  }
  return 0;
}
