// LSS sequence parallelism (docs/ALGORITHMS.md §2; the LSS Transformer paper) and
// its two ablations, as context-parallel strategies (cp.h).
//
// Rank s of the N-rank group holds positions [s·T/N, (s+1)·T/N) of one
// sequence (t0 = s·Tl). Its queries attend to the whole sequence's keys:
//   lss        one fused all-gather of the norm output per layer, then K and V
//              of every row computed locally (distributed Q: each rank only
//              its own queries); backward one reduce-scatter of the packed
//              [dK | dV] partials. 2 collectives per layer.
//   lss-fused  + an all-gather of the attention outputs (concatenation) and its
//              reduce-scatter backward: 4 per layer.
//   lss-basic  K and V projected locally and gathered separately, + the
//              concatenation: 6 per layer.
// Gradients are then averaged over the group without the positional
// embedding, whose rows each rank owns (shard.h's double averaging).
//
// Exactness: K and V are projected per head on whole-leaf row blocks, so the
// gathered rows are the serial bits whichever rank computes them; a rank's
// query tiles are an aligned subtree of the serial dK/dV tree over query
// tiles, and the reduce-scatter sums those subtrees over ranks in tree order
// (docs/EXACTNESS.md R3). So every variant is bit for bit the serial run.
#include <string.h>

#include "parallel/cp.h"

extern const ts_cp ts_cp_lss, ts_cp_lss_fused, ts_cp_lss_basic;

static int basic(const ts_model *m) { return m->cp == &ts_cp_lss_basic; }
// The ablations concatenate the attention outputs of the group.
static int concat(const ts_model *m) { return m->cp != &ts_cp_lss; }

// K, V and the gathered norm output hold the whole sequence: T rows.
static void lss_sizes(const ts_model *m, ts_cp_sizes *out) {
  const int64_t N = m->ntok, Nk = (int64_t)m->B * m->T;
  *out = (ts_cp_sizes){.layer_rows = N, .q_rows = N, .kv_rows = Nk, .dkv_rows = Nk,
                       .scratch = (size_t)Nk * m->C * 2}; // gathered rows, packed [dK|dV], full dE
}

// K and V of the whole sequence (Nk rows) from the rank's rows of the norm
// output (m->ln_out).
static int gather_kv(ts_model *m, int l, const layer_params *w, layer_acts *a) {
  const int C = m->C, Ckv = m->Ckv, dh = m->dh, rows = m->cfg.leaf;
  const int64_t N = m->ntok, Nk = (int64_t)m->B * m->T;
  if (basic(m)) { // un-fused: the local K and V rows, gathered separately
    const size_t bytes = (size_t)N * Ckv * sizeof(float);
    ts_cp_project_kv(m, w, m->dtmp, m->dtmp2);
    int rc = ts_comm_allgather(m->seq, m->dtmp, a->k, bytes, l);
    return rc ? rc : ts_comm_allgather(m->seq, m->dtmp2, a->v, bytes, l);
  }
  // fused: one gather of the norm output, then K and V of every row
  int rc = ts_comm_allgather(m->seq, m->ln_out, m->spbuf, (size_t)N * C * sizeof(float), l);
  if (rc) return rc;
  m->be->linear_forward_heads(a->k, m->spbuf, w->wk, w->bk, Nk, C, Ckv, dh, rows);
  m->be->linear_forward_heads(a->v, m->spbuf, w->wv, w->bv, Nk, C, Ckv, dh, rows);
  if (m->llama) m->be->rope_forward(a->k, Nk, m->T, 0, m->Hkv, dh, Ckv, m->rope); // every row
  return TS_OK;
}

// The concatenation: the group's attention outputs gathered, the rank going
// on from its own rows of them.
static int concat_forward(ts_model *m, int l, float *att) {
  const size_t n = (size_t)m->ntok * m->C;
  int rc = ts_comm_allgather(m->seq, att, m->spbuf, n * sizeof(float), l);
  if (!rc) memcpy(att, m->spbuf + (size_t)m->t0 * m->C, n * sizeof(float));
  return rc;
}

// The concatenation's backward: each rank's gradient of the whole output
// (its own rows; the others -0.0, the identity of addition) reduce-scattered,
// so rank s receives the sum over ranks of its rows, bit for bit its own.
static int concat_backward(ts_model *m, int l, float *datt) {
  const size_t n = (size_t)m->ntok * m->C, nk = (size_t)m->B * m->T * m->C;
  float *full = m->spbuf, *own = full + (size_t)m->t0 * m->C;
  for (size_t i = 0; i < nk; i++) full[i] = -0.0f;
  memcpy(own, datt, n * sizeof(float));
  int rc = ts_comm_reduce_scatter_tree(m->seq, full, nk, l);
  if (!rc) memcpy(datt, own, n * sizeof(float));
  return rc;
}

// dK, dV of every key row (each rank's partial over its query tiles) to the
// rows' owners, summed over the group in tree order (R3): one reduce-scatter
// of the packed [dK | dV] (two separate ones for lss-basic). On return the
// first N rows of m->dk, m->dv are this rank's rows, the serial bits.
static int reduce_scatter_kv(ts_model *m, int l) {
  const int Ckv = m->Ckv;
  const int64_t N = m->ntok, Nk = (int64_t)m->B * m->T;
  const size_t row = (size_t)Ckv * sizeof(float);
  int rc;
  if (basic(m)) {
    if ((rc = ts_comm_reduce_scatter_tree(m->seq, m->dk, (size_t)Nk * Ckv, l))) return rc;
    if ((rc = ts_comm_reduce_scatter_tree(m->seq, m->dv, (size_t)Nk * Ckv, l))) return rc;
    memmove(m->dk, m->dk + (size_t)m->t0 * Ckv, (size_t)N * row);
    memmove(m->dv, m->dv + (size_t)m->t0 * Ckv, (size_t)N * row);
    return TS_OK;
  }
  float *pack = m->spbuf; // (Nk, 2·Ckv)
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < Nk; t++) {
    memcpy(pack + (size_t)t * 2 * Ckv, m->dk + (size_t)t * Ckv, row);
    memcpy(pack + (size_t)t * 2 * Ckv + Ckv, m->dv + (size_t)t * Ckv, row);
  }
  if ((rc = ts_comm_reduce_scatter_tree(m->seq, pack, (size_t)Nk * 2 * Ckv, l))) return rc;
  const float *own = pack + (size_t)m->t0 * 2 * Ckv;
  for (int64_t t = 0; t < N; t++) {
    memcpy(m->dk + (size_t)t * Ckv, own + (size_t)t * 2 * Ckv, row);
    memcpy(m->dv + (size_t)t * Ckv, own + (size_t)t * 2 * Ckv + Ckv, row);
  }
  return TS_OK;
}

static int lss_attn_forward(ts_model *m, int l, uint64_t step, float p) {
  const layer_params *w = &m->p.layer[l];
  layer_acts *a = ts_layer_acts(m, l);
  int rc;
  ts_cp_project_q(m, w, a->q); // distributed Q: the rank's own queries only
  if ((rc = gather_kv(m, l, w, a))) return rc;
  ts_attn_shape as = ts_cp_attn_shape(m, l, p, step);
  m->be->attention_forward(&m->ws, a->att, a->lse, a->q, a->k, a->v, &as);
  return concat(m) ? concat_forward(m, l, a->att) : TS_OK;
}

static int lss_attn_backward(ts_model *m, int l, uint64_t step) {
  layer_acts *a = ts_layer_acts(m, l);
  int rc;
  if (concat(m) && (rc = concat_backward(m, l, m->datt))) return rc;
  ts_attn_shape as = ts_cp_attn_shape(m, l, m->cfg.dropout, step);
  if (m->be->attention_backward(&m->ws, m->dq, m->dk, m->dv, m->dsum, m->datt, a->q, a->k, a->v,
                                a->att, a->lse, &as) != 0)
    return ts_fail(TS_ERUNTIME, "out of memory in attention backward");
  return reduce_scatter_kv(m, l);
}

const ts_cp ts_cp_lss = {
    .name = "lss",
    .summary = "fused all-gather, distributed Q, gradient averaging: 2 collectives per layer",
    .exact = 1,
    .sizes = lss_sizes,
    .attn_forward = lss_attn_forward,
    .attn_backward = lss_attn_backward,
};

const ts_cp ts_cp_lss_fused = {
    .name = "lss-fused",
    .summary = "LSS ablation: + concatenation of the attention outputs: 4 per layer",
    .exact = 1,
    .sizes = lss_sizes,
    .attn_forward = lss_attn_forward,
    .attn_backward = lss_attn_backward,
};

const ts_cp ts_cp_lss_basic = {
    .name = "lss-basic",
    .summary = "LSS ablation: K and V gathered separately + concatenation: 6 per layer",
    .exact = 1,
    .sizes = lss_sizes,
    .attn_forward = lss_attn_forward,
    .attn_backward = lss_attn_backward,
};
