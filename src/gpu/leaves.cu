// Sums of per-leaf partials on the GPU (kernels.h, ts_leaf_sum): the leaves
// one after another on the calling thread, each leaf's partial made by the
// backend's own kernels (the leaf function calls them) into a device buffer
// of this file's, apart from the shared scratch those kernels use. The first
// leaf's pieces are copied to their destinations and each later leaf's added
// on, in leaf order: a fixed association, so two runs agree bit for bit, but
// not the CPU's canonical tree: the GPU's tolerance tier (docs/EXACTNESS.md).
#include "gpu.h"

static float *partial;  // one leaf's partial
static size_t capacity; // its floats

extern "C" int cuda_leaf_sum(ts_ws *ws, float *const *dst, const size_t *len, int nparts,
                             int64_t nleaves, ts_leaf_fn fn, const void *ctx) {
  (void)ws;
  size_t n = 0;
  for (int k = 0; k < nparts; k++) n += len[k];
  if (n > capacity) {
    // cudaFree waits for the work that may still use the old buffer
    if (partial) ts_cuda_check(cudaFree(partial), "leaf_sum");
    partial = NULL;
    capacity = 0;
    if (cudaMalloc((void **)&partial, n * sizeof(float)) != cudaSuccess) {
      cudaGetLastError(); // out of memory is the caller's to report
      partial = NULL;
      return -1;
    }
    capacity = n;
  }
  for (int64_t li = 0; li < nleaves; li++) {
    fn(ctx, li, nparts ? partial : NULL);
    size_t off = 0;
    for (int k = 0; k < nparts; off += len[k], k++) {
      if (!dst[k] || !len[k]) continue;
      if (li == 0) cuda_copy(dst[k], partial + off, len[k] * sizeof(float));
      else cuda_add(dst[k], dst[k], partial + off, (int64_t)len[k]);
    }
  }
  return 0;
}
