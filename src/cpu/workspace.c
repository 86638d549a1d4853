// Kernel scratch (per-thread leaf and attention buffers) and the parallel
// leaf-tree sum every weight gradient goes through.
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backend/kernels.h"

// Attention scratch per thread: the backward's S, dS (tile x tile), dK|dV
// part and leaf (2 x 2 tile x dh) and packed K, V, Kᵀ, Vᵀ, dO (5 tile x dh);
// the forward's S, acc and packed Q (tile x dh) and five rows of tile floats.
static size_t attn_floats(int tile, int dh) {
  return (size_t)2 * tile * tile + (size_t)9 * tile * dh + 5 * (size_t)tile;
}

size_t ts_ws_bytes(int nthreads, int tile, int dh, size_t max_leaf_floats, int64_t nleaves,
                   int64_t query_tiles) {
  const int window = nthreads < 64 ? nthreads : 64; // ts_leaf_tree_sum's W
  const size_t partial = max_leaf_floats * sizeof(float) + 64; // ts_tree_take's buffer
  const size_t attn_partial = (size_t)2 * tile * dh * sizeof(float) + 64;
  return max_leaf_floats * sizeof(float) +
         (size_t)ts_tree_window_peak(nleaves, window) * partial +
         (size_t)nthreads * (attn_floats(tile, dh) * sizeof(float) +
                             (size_t)ts_tree_window_peak(query_tiles, 1) * attn_partial);
}

int ts_ws_init(ts_ws *ws, int tile, int leaf, size_t max_leaf_floats, int dh) {
  memset(ws, 0, sizeof *ws);
  ws->tile = tile;
  ws->leaf = leaf;
  ws->nthreads = omp_get_max_threads();
  ws->leaf_cap = max_leaf_floats;
  ws->attn_cap = attn_floats(tile, dh);
  ws->attnbuf = calloc((size_t)ws->nthreads, sizeof(float *));
  ws->attntree = calloc((size_t)ws->nthreads, sizeof(ts_tree));
  if (!ws->attnbuf || !ws->attntree ||
      posix_memalign((void **)&ws->sumbuf, 64, max_leaf_floats * sizeof(float)))
    return -1;
  for (int i = 0; i < ws->nthreads; i++) {
    if (posix_memalign((void **)&ws->attnbuf[i], 64, ws->attn_cap * sizeof(float)))
      return -1;
    ts_tree_init(&ws->attntree[i], (size_t)2 * tile * dh);
  }
  ts_tree_init(&ws->tree, max_leaf_floats);
  return 0;
}

void ts_ws_free(ts_ws *ws) {
  for (int i = 0; i < ws->nthreads; i++) {
    if (ws->attnbuf) free(ws->attnbuf[i]);
    if (ws->attntree) ts_tree_free(&ws->attntree[i]);
  }
  free(ws->sumbuf);
  free(ws->attnbuf);
  free(ws->attntree);
  ts_tree_free(&ws->tree);
  memset(ws, 0, sizeof *ws);
}

int ts_leaf_tree_sum(ts_ws *ws, float *sum, size_t n, int64_t nleaves, ts_leaf_fn fn,
                     const void *ctx) {
  ts_tree_resize(&ws->tree, n);
  int W = ws->nthreads < 64 ? ws->nthreads : 64;
  float *leaf[64];
  for (int64_t base = 0; base < nleaves; base += W) {
    int cnt = (int)(nleaves - base < W ? nleaves - base : W);
    // Leaves are computed straight into tree buffers and pushed without a copy.
    for (int i = 0; i < cnt; i++)
      if (!(leaf[i] = ts_tree_take(&ws->tree))) return -1;
    // Each leaf's partial is a fixed computation on that leaf alone, so which
    // thread computes it does not matter; the pushes below fix the order.
#pragma omp parallel for schedule(static, 1) num_threads(ws->nthreads)
    for (int i = 0; i < cnt; i++) fn(ctx, base + i, leaf[i]);
    for (int i = 0; i < cnt; i++) ts_tree_push_owned(&ws->tree, leaf[i]);
  }
  ts_tree_finish(&ws->tree, sum);
  return 0;
}

int ts_leaf_sum(ts_ws *ws, float *const *dst, const size_t *len, int nparts, int64_t nleaves,
                ts_leaf_fn fn, const void *ctx) {
  if (nparts == 0) { // the leaves' work alone: nothing to sum, so any thread, any order
#pragma omp parallel for schedule(static) num_threads(ws->nthreads)
    for (int64_t li = 0; li < nleaves; li++) fn(ctx, li, NULL);
    return 0;
  }
  size_t n = 0;
  for (int k = 0; k < nparts; k++) n += len[k];
  // one piece goes straight to its destination; several are split from sumbuf
  if (nparts == 1 && dst[0]) return ts_leaf_tree_sum(ws, dst[0], n, nleaves, fn, ctx);
  if (ts_leaf_tree_sum(ws, ws->sumbuf, n, nleaves, fn, ctx) != 0) return -1;
  size_t off = 0;
  for (int k = 0; k < nparts; off += len[k], k++)
    if (dst[k]) memcpy(dst[k], ws->sumbuf + off, len[k] * sizeof(float));
  return 0;
}
