// What the strategies share beyond their table (strategy.h): the model's
// internals they work on, a rank's two runs summed apart (run_partials.c),
// the projections and attention shapes several use (cp.c), and the LSS
// family's attention (lss.c).
#ifndef TS_CP_H
#define TS_CP_H
#include <stddef.h>
#include <stdint.h>

#include "model/model_impl.h"
#include "parallel/strategy.h"
#include "tessera.h"

// ---- a rank's two runs, summed as the serial tree (run_partials.c) ----------------------
// The backend the model runs on, with its weight-gradient operations split
// at the run boundary: the first run's rows summed into the gradients, the
// second run's into m->grads2 (ts_model_second_run_grads), so that the group
// sums each over its ranks and adds the two (the serial tree's root).
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

// ---- pieces several strategies share (cp.c) --------------------------------------------
// Chunks r and 2N-1-r of 2N (ring-zigzag, lss-zigzag): every rank does the
// same causal attention work.
void ts_cp_zigzag_positions(int n, int r, int T, ts_cp_runs *out);
// Q of the rank's rows (all heads, one call per head per leaf) from m->ln_out
// into q, rotated (LLaMA).
void ts_cp_project_q(ts_model *m, const layer_params *w, float *q);
// K and V of the rank's rows from m->ln_out into k, v; K rotated.
void ts_cp_project_kv(ts_model *m, const layer_params *w, float *k, float *v);
// The attention shape of the rank's query rows against the whole sequence's
// keys (a segment [t0, t0 + Tl) of B sequences).
ts_attn_shape ts_cp_attn_shape(const ts_model *m, int l, float p, uint64_t step);

// ---- the LSS family's attention (lss.c) ------------------------------------------------
// A rank's queries, its runs (rows k·len on: run k at position runs->pos[k]),
// against the whole sequence's keys k, v: one kernel call per run, of `rank`
// (ts_cp_attn_shape) with Tq and q0 set to the run's. lse is (H, len) run
// after run. The model's lss and lss-zigzag and bench/attention's --layout
// make exactly these calls.
void ts_lss_attention_forward(const ts_backend *be, ts_ws *ws, const ts_attn_shape *rank,
                              const ts_cp_runs *runs, float *att, float *lse, const float *q,
                              const float *k, const float *v);
// The backward: run k's dQ into its rows, its partials of dK and dV over every
// key row at dk + k·dkv_run, dv + k·dkv_run. TS_OK, or an error (out of memory).
int ts_lss_attention_backward(const ts_backend *be, ts_ws *ws, const ts_attn_shape *rank,
                              const ts_cp_runs *runs, float *dq, float *dk, float *dv,
                              size_t dkv_run, float *dsum, const float *datt, const float *q,
                              const float *k, const float *v, const float *att,
                              const float *lse);
#endif
