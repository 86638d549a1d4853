// Gradient partials per run, for a rank that holds two runs of a sequence
// whose sums must stay the serial tree (balanced LSS, lss-zigzag: chunks r
// and 2N-1-r of 2N; docs/DISTRIBUTED.md, docs/EXACTNESS.md R3).
//
// A weight gradient is a sum over the sequence's leaves, the canonical tree
// over the 2N chunks. Its root adds the tree over chunks 0..N-1 (rank r's
// first run) to the tree over chunks N..2N-1 (the ranks' second runs, rank
// N-1 first). The second is the mirror image of the tree over ranks 0..N-1
// of the second runs, and a mirror image sums the same pairs at every level
// (IEEE addition is commutative), so it is that tree's bits. So a rank keeps
// its two runs' partials apart, P (first run) in the model's gradients and Q
// (second) in a second buffer of the same layout; the sequence group sums
// each with the exact all-reduce, and P + Q is the serial root.
//
// The model computes its weight gradients through a few backend operations,
// each a canonical tree over the rows it is given. Wrapping those in a copy
// of the backend table that calls the real operation once per run -- the
// first half of the rows into the gradient, the second half into its twin in
// the second buffer -- splits every one of them at the run boundary without
// the model knowing. Row-wise outputs (a norm's input gradient) are the same
// whichever call computes them. A gradient summed outside the model's
// buffer -- a pipeline's tied embedding, which its last stage computes per
// microbatch into a buffer of its own (pipeline.h) -- is given a twin of its
// own for the call (ts_run_partials_outside), and summed the same way.
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "model_impl.h"
#include "run_partials.h"

// The model whose workspace an operation was given: the model calls every
// wrapped operation with its own &m->ws.
static ts_model *model_of(ts_ws *ws) {
  return (ts_model *)((char *)ws - offsetof(ts_model, ws));
}

static const ts_backend *real(const ts_model *m) { return ((const ts_run_partials *)m->rp)->real; }

// The second run's partial of a gradient the model writes at p (NULL stays
// NULL): the same offset in the second buffer, or in the caller's twin of a
// gradient it sums outside the model's buffer (ts_run_partials_outside).
static float *twin(const ts_model *m, float *p) {
  if (!p) return NULL;
  const ts_run_partials *rp = m->rp;
  if (rp->outside && p >= rp->outside && p < rp->outside + rp->outside_len)
    return rp->outside2 + (p - rp->outside);
  return m->grads2 + (p - m->grads);
}

static int split_linear_backward_weights(ts_ws *ws, float *dW, float *db, const float *dout,
                                   const float *inp, int64_t ntok, int C, int OC) {
  const ts_model *m = model_of(ws);
  const int64_t h = ntok / 2;
  int rc = real(m)->linear_backward_weights(ws, dW, db, dout, inp, h, C, OC);
  return rc | real(m)->linear_backward_weights(ws, twin(m, dW), twin(m, db), dout + h * OC,
                                               inp + h * C, h, C, OC);
}

static int split_layernorm_backward(ts_ws *ws, float *dinp, float *dw, float *db, const float *dout,
                              const float *inp, const float *w, const float *mean,
                              const float *rstd, int64_t ntok, int C) {
  const ts_model *m = model_of(ws);
  const int64_t h = ntok / 2;
  int rc = real(m)->layernorm_backward(ws, dinp, dw, db, dout, inp, w, mean, rstd, h, C);
  return rc | real(m)->layernorm_backward(ws, dinp + h * C, twin(m, dw), twin(m, db), dout + h * C,
                                          inp + h * C, w, mean + h, rstd + h, h, C);
}

static int split_rmsnorm_backward(ts_ws *ws, float *dinp, float *dw, const float *dout, const float *inp,
                            const float *w, const float *rstd, int64_t ntok, int C) {
  const ts_model *m = model_of(ws);
  const int64_t h = ntok / 2;
  int rc = real(m)->rmsnorm_backward(ws, dinp, dw, dout, inp, w, rstd, h, C);
  return rc | real(m)->rmsnorm_backward(ws, dinp + h * C, twin(m, dw), dout + h * C, inp + h * C,
                                        w, rstd + h, h, C);
}

static int split_embedding_backward(ts_ws *ws, float *dwte, const float *dout, const int *tokens,
                              const float *dlogits, const float *x, int64_t ntok, int V, int C) {
  const ts_model *m = model_of(ws);
  const int64_t h = ntok / 2;
  int rc = real(m)->embedding_backward(ws, dwte, dout, tokens, dlogits, x, h, V, C);
  return rc | real(m)->embedding_backward(ws, twin(m, dwte), dout + h * C, tokens + h,
                                          dlogits ? dlogits + h * V : NULL, x + h * C, h, V, C);
}

// A leaf function seen from one run: its leaves numbered from that run's first.
typedef struct {
  ts_leaf_fn fn;
  const void *ctx;
  int64_t first;
} run_leaves;

static void run_leaf(const void *vctx, int64_t li, float *out) {
  const run_leaves *r = vctx;
  r->fn(r->ctx, r->first + li, out);
}

static int split_leaf_sum(ts_ws *ws, float *const *dst, const size_t *len, int nparts, int64_t nleaves,
                    ts_leaf_fn fn, const void *ctx) {
  const ts_model *m = model_of(ws);
  if (nparts == 0) return real(m)->leaf_sum(ws, dst, len, 0, nleaves, fn, ctx); // nothing summed
  float *second[8];
  if (nparts > 8) return -1;
  for (int k = 0; k < nparts; k++) second[k] = twin(m, dst[k]);
  const int64_t h = nleaves / 2;
  const run_leaves a = {fn, ctx, 0}, b = {fn, ctx, h};
  int rc = real(m)->leaf_sum(ws, dst, len, nparts, h, run_leaf, &a);
  return rc | real(m)->leaf_sum(ws, second, len, nparts, h, run_leaf, &b);
}

int ts_run_partials_create(ts_model *m) {
  ts_run_partials *rp = calloc(1, sizeof *rp);
  if (!rp) return ts_fail(TS_ERUNTIME, "out of memory");
  rp->real = m->be;
  rp->split = *m->be;
  rp->split.linear_backward_weights = split_linear_backward_weights;
  rp->split.layernorm_backward = split_layernorm_backward;
  rp->split.rmsnorm_backward = split_rmsnorm_backward;
  rp->split.embedding_backward = split_embedding_backward;
  rp->split.leaf_sum = split_leaf_sum;
  if (!(m->grads2 = m->be->alloc(m->nparams * sizeof(float)))) {
    free(rp);
    return ts_fail(TS_ERUNTIME, "out of memory (the second run's gradient partials)");
  }
  m->rp = rp;
  ts_run_partials_clear(m, 0, m->nparams);
  m->be = &rp->split;
  return TS_OK;
}

void ts_run_partials_destroy(ts_model *m) {
  ts_run_partials *rp = m->rp;
  if (!rp) return;
  m->be = rp->real;
  m->be->free(m->grads2);
  m->grads2 = NULL;
  m->rp = NULL;
  free(rp);
}

void ts_run_partials_outside(ts_model *m, float *g, float *g2, size_t n) {
  ts_run_partials *rp = m->rp;
  rp->outside = g2 ? g : NULL;
  rp->outside2 = g2;
  rp->outside_len = g2 ? n : 0;
}

void ts_run_partials_clear(ts_model *m, size_t lo, size_t hi) {
  // -0.0, the identity of addition: a gradient no operation wrote for the
  // second run adds nothing to the first run's
  for (size_t i = lo; i < hi; i++) m->grads2[i] = -0.0f;
}

size_t ts_run_partials_bytes(const ts_model *m) { return m->grads2 ? m->nparams * sizeof(float) : 0; }
