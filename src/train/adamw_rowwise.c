// AdamW with the adaptive scale constant along a tensor's output axis: the
// optimizer of the stream writers under a codec that confines the residual
// stream to a subspace (boundary.h confines_stream; the SSN paper's
// "row-wise" AdamW, whose rows are our columns: tessera's projections are
// d × in). Each output vector (a column of a d × in projection, a row of an
// embedding, a whole bias) moves by its first moment times one scalar, so
// the update's projection onto the subspace is the projected moment's: the
// confinement after the step loses nothing that a per-element scale would
// have rotated out of the subspace.
//
// The moments keep AdamW's layout (so checkpoints, --zero's shards and
// resume are as for AdamW); the scale of an output vector is the root of the
// mean of its elements' second moments, summed in double in index order. On
// the host: the codec that asks for it refuses --device cuda.
#include <math.h>

#include "optim.h"

// One output vector of n elements, stride apart.
static void update_vector(float *p, const float *g, float *m, float *v, int64_t n, int64_t stride,
                          float decay, float beta1, float beta2, float step_size, float bc2_sqrt,
                          float eps) {
  double vsum = 0.0;
  for (int64_t k = 0; k < n; k++) {
    const int64_t i = k * stride;
    m[i] = m[i] * beta1 + g[i] * (1.0f - beta1);
    v[i] = v[i] * beta2 + g[i] * g[i] * (1.0f - beta2);
    vsum += (double)v[i];
  }
  const float denom = sqrtf((float)(vsum / (double)n)) / bc2_sqrt + eps;
  for (int64_t k = 0; k < n; k++) {
    const int64_t i = k * stride;
    p[i] = p[i] * decay - step_size * (m[i] / denom);
  }
}

void ts_adamw_rowwise(const ts_tensor *t, float *p, const float *g, float *m, float *v,
                      float decay, float beta1, float beta2, float step_size, float bc2_sqrt,
                      float eps) {
  const int axis = t->writes_stream - 1;
  if (t->ndim < 2) { // a bias: one output vector
    update_vector(p, g, m, v, t->shape[0], 1, decay, beta1, beta2, step_size, bc2_sqrt, eps);
    return;
  }
  const int64_t rows = t->shape[0], cols = t->shape[1];
  if (axis == 0) { // d × in: column j is input j's output vector
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < cols; j++)
      update_vector(p + j, g + j, m + j, v + j, rows, cols, decay, beta1, beta2, step_size,
                    bc2_sqrt, eps);
  } else { // n × d (an embedding): row i is one output vector
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < rows; i++)
      update_vector(p + i * cols, g + i * cols, m + i * cols, v + i * cols, cols, 1, decay, beta1,
                    beta2, step_size, bc2_sqrt, eps);
  }
}
