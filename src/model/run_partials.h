// The gradient plan of a strategy whose rank holds two runs of the sequence
// (strategy.h `run_partials`: lss-zigzag and its ablations): the model keeps
// the second run's gradient partials apart, so that the sequence group sums
// each run's over its ranks and adds the two, the serial tree's root.
#ifndef TS_RUN_PARTIALS_H
#define TS_RUN_PARTIALS_H
#include <stddef.h>

#include "backend/backend.h"
#include "tessera.h"

// The backend the model runs on, with its weight-gradient operations split
// at the run boundary: the first run's rows summed into the gradients, the
// second run's into m->grads2 (ts_model_second_run_grads). The model creates
// it for a strategy that declares run_partials, and frees it.
typedef struct {
  const ts_backend *real;
  ts_backend split;
  // a gradient summed outside the model's buffer (a pipeline's tied
  // embedding, pipeline.h) and its second run's twin: NULL, none
  float *outside, *outside2;
  size_t outside_len;
} ts_run_partials;
int ts_run_partials_create(ts_model *m);
void ts_run_partials_destroy(ts_model *m);
// Until called again: the second run's partials of the n floats at g (a
// gradient outside the model's buffer) go to g2 (n floats); g2 NULL ends it.
void ts_run_partials_outside(ts_model *m, float *g, float *g2, size_t n);
// m->grads2[lo, hi) set to -0.0, the identity of addition (after the group's sums).
void ts_run_partials_clear(ts_model *m, size_t lo, size_t hi);
size_t ts_run_partials_bytes(const ts_model *m);

#endif
