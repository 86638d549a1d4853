// The stage-boundary seam's io (boundary/boundary.h): what a codec sees of
// the model, filled here. The one place a codec's view of the model is
// written; every call of a codec goes through these wrappers.
#include "boundary/boundary.h"
#include "model_impl.h"

ts_boundary_io ts_model_codec_io(const ts_model *m) {
  return (ts_boundary_io){.cfg = &m->cfg, .be = m->be, .ws = (ts_ws *)&m->ws, .C = m->C,
                         .V = m->V, .T = m->T, .L = m->L, .ntok = m->ntok,
                         .ntok_global = m->ntok_global, .b0 = m->b0, .inputs = m->inputs,
                         .out = m->res ? m->res[m->l1] : NULL, .dres = m->dres,
                         .l0 = m->l0, .l1 = m->l1, .ntens = m->ntens, .nown = m->nown,
                         .ptens = m->ptens, .gtens = m->gtens, .bd = m->bd,
                         .state = m->bd_state, .identity = m->bd_identity,
                         .step = m->bd_step, .training = m->bd_training};
}

int ts_model_boundary_sync(ts_model *m, ts_comm *pipe, int p, int peer, int send, uint64_t step) {
  if (!m->bd->sync) return TS_OK;
  const ts_boundary_io io = ts_model_codec_io(m);
  return m->bd->sync(&io, pipe, p, peer, send, step);
}

int ts_model_boundary_after_step(ts_model *m, ts_comm *pipe, uint64_t step) {
  if (!m->bd->after_step) return TS_OK;
  const ts_boundary_io io = ts_model_codec_io(m);
  return m->bd->after_step(&io, pipe, step);
}
