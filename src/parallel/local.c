// The serial strategy: one rank holds whole sequences, so its attention is
// the canonical one of src/cpu/attention.c (docs/EXACTNESS.md R2) on its own
// Q, K and V. Every other strategy is checked against it.
#include "parallel/cp.h"

static void local_sizes(const ts_model *m, ts_cp_sizes *out) {
  const int64_t N = m->ntok; // B whole sequences
  *out = (ts_cp_sizes){.layer_rows = N, .q_rows = N, .kv_rows = N, .dkv_rows = N};
}

static int local_attn_forward(ts_model *m, int l, uint64_t step, float p) {
  const layer_params *w = &m->p.layer[l];
  layer_acts *a = ts_layer_acts(m, l);
  ts_cp_project_q(m, w, a->q);
  ts_cp_project_kv(m, w, a->k, a->v);
  ts_attn_shape as = ts_cp_attn_shape(m, l, p, step);
  m->be->attention_forward(&m->ws, a->att, a->lse, a->q, a->k, a->v, &as);
  return TS_OK;
}

static int local_attn_backward(ts_model *m, int l, uint64_t step) {
  layer_acts *a = ts_layer_acts(m, l);
  ts_attn_shape as = ts_cp_attn_shape(m, l, m->cfg.dropout, step);
  if (m->be->attention_backward(&m->ws, m->dq, m->dk, m->dv, m->dsum, m->datt, a->q, a->k, a->v,
                                a->att, a->lse, &as) != 0)
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
