// Softmax cross-entropy per token over V classes, and the canonical loss sum.
#include "backend/kernels.h"
#include "exact/exactmath.h"
#include "exact/fastexp.h"

void crossentropy_forward(float *losses, const float *logits, const int *targets,
                          int64_t ntok, int V) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < ntok; t++) {
    const float *z = logits + t * V;
    float mx = z[0];
    for (int i = 1; i < V; i++) mx = z[i] > mx ? z[i] : mx;
    float s = 0.0f;
    for (int i = 0; i < V; i++) s += ts_expf(z[i] - mx);
    losses[t] = ts_logf(s) + mx - z[targets[t]]; // (not libm's: exactmath.h)
  }
}

void crossentropy_backward(float *dlogits, const float *logits, const int *targets,
                           float scale, int64_t ntok, int V) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < ntok; t++) {
    const float *z = logits + t * V;
    float *dz = dlogits + t * V;
    float mx = z[0];
    for (int i = 1; i < V; i++) mx = z[i] > mx ? z[i] : mx;
    // dz holds e^(z - max) first (vectorises), then the gradient; the sum is
    // taken in order, the same additions as the forward's.
    for (int i = 0; i < V; i++) dz[i] = ts_expf(z[i] - mx);
    float s = 0.0f;
    for (int i = 0; i < V; i++) s += dz[i];
    float inv = 1.0f / s;
    for (int i = 0; i < V; i++) dz[i] = dz[i] * inv * scale;
    dz[targets[t]] -= scale;
  }
}

float token_tree_sum(const float *vals, int64_t ntok, int leaf) {
  int64_t nl = ntok / leaf;
  float partial[4096];
  float acc_tree = 0.0f;
  // Leaf partials in order, then the canonical tree over leaves; chunks of
  // 4096 leaves are aligned subtrees, combined by the same tree.
  ts_tree t;
  ts_tree_init(&t, 1);
  for (int64_t base = 0; base < nl; base += 4096) {
    int cnt = (int)(nl - base < 4096 ? nl - base : 4096);
    for (int i = 0; i < cnt; i++) {
      const float *v = vals + (base + i) * leaf;
      float s = v[0];
      for (int r = 1; r < leaf; r++) s += v[r];
      partial[i] = s;
    }
    for (int i = 0; i < cnt; i++) ts_tree_push(&t, &partial[i]);
  }
  ts_tree_finish(&t, &acc_tree);
  ts_tree_free(&t);
  return acc_tree;
}
