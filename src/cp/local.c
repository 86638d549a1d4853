// The serial strategy: one rank holds whole sequences, so its attention is
// the canonical one of src/cpu/attention.c (docs/EXACTNESS.md R2) on its own
// Q, K and V. Every other strategy is checked against it.
#include "cp.h"

static void local_sizes(const ts_attn_io *io, ts_cp_sizes *out) {
  const int64_t N = io->ntok; // B whole sequences
  *out = (ts_cp_sizes){.layer_rows = N, .q_rows = N, .kv_rows = N, .dkv_rows = N};
}

static int local_attn_forward(const ts_attn_io *io) {
  ts_cp_project_q(io, io->q);
  ts_cp_project_kv(io, io->k, io->v);
  io->be->attention_forward(io->ws, io->att, io->lse, io->q, io->k, io->v, &io->shape);
  return TS_OK;
}

static int local_attn_backward(const ts_attn_io *io) {
  if (io->be->attention_backward(io->ws, io->dq, io->dk, io->dv, io->dsum, io->datt, io->q, io->k,
                                 io->v, io->att, io->lse, &io->shape) != 0)
    return ts_fail(TS_ERUNTIME, "out of memory in attention backward");
  return TS_OK;
}

const ts_cp ts_cp_local = {
    .name = "serial",
    .summary = "one rank holds whole sequences (the reference)",
    .exact = 1,
    .sizes = local_sizes,
    .attn_forward = local_attn_forward,
    .attn_backward = local_attn_backward,
};
