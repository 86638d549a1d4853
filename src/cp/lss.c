// LSS sequence parallelism (docs/ALGORITHMS.md §2; the LSS Transformer paper) and
// its two ablations, as context-parallel strategies (strategy.h); their
// balanced layout is lss_zigzag.c.
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
//   lss-unfused  gradient averaging without the fusion: K and V gathered
//              separately, no concatenation, dK and dV reduce-scattered
//              apart: 4 per layer.
// Gradients are then averaged over the group without the positional
// embedding, whose rows each rank owns (shard.h's double averaging).
//
// Exactness: K and V are projected per head on whole-leaf row blocks, so the
// gathered rows are the serial bits whichever rank computes them; a rank's
// query tiles are an aligned subtree of the serial dK/dV tree over query
// tiles, and the reduce-scatter sums those subtrees over ranks in tree order
// (docs/EXACTNESS.md R3). So every variant is bit for bit the serial run.
#include <stdlib.h>
#include <string.h>

#include "cp.h"

const ts_lss_opts ts_lss_plain = {0, 0}, ts_lss_fused = {1, 0}, ts_lss_basic = {1, 1},
                  ts_lss_unfused = {0, 1};

static int basic(const ts_attn_io *io) { return ts_lss_opts_of(io)->separate_kv; }
static int concat(const ts_attn_io *io) { return ts_lss_opts_of(io)->concat; }

// K, V and their gradients hold the whole sequence: T rows. The strategy's
// own scratch holds T rows of C for the ablations' concatenation, and for
// the gathered norm output where V's rows cannot (Ckv < C: grouped-query
// attention); otherwise the gathered rows wait in V's buffer (gather_kv),
// and [dK | dV] go to the reduce-scatter in their own (reduce_scatter_kv):
// no buffer of the whole sequence beyond K, V, dK and dV.
static void lss_sizes(const ts_attn_io *io, ts_cp_sizes *out) {
  const int64_t N = io->ntok, Nk = (int64_t)io->B * io->T;
  const int own = concat(io) || io->Ckv < io->C;
  *out = (ts_cp_sizes){.layer_rows = N, .q_rows = N, .kv_rows = Nk, .dkv_rows = Nk,
                       .scratch = own ? (size_t)Nk * io->C : 0};
}

// V (Nk rows) from the gathered norm output x held in V's own buffer (C ==
// Ckv): a block of the rank's row count at a time through dtmp, so that each
// block's rows are read before they are written over. Row blocks of whole
// leaves: the same bits as one product over all the rows.
static void v_over_x(const ts_attn_io *io, float *v, int64_t Nk) {
  const int C = io->C, Ckv = io->Ckv, dh = io->dh, rows = io->cfg->leaf;
  const int64_t n = io->ntok;
  for (int64_t b = 0; b < Nk; b += n) {
    io->be->linear_forward_heads(io->tmp, v + (size_t)b * C, io->wv, io->bv, n, C, Ckv, dh, rows);
    io->be->copy(v + (size_t)b * Ckv, io->tmp, (size_t)n * Ckv * sizeof(float));
  }
}

// K and V of the whole sequence (Nk rows) from the rank's rows of the norm
// output (io->x).
static int gather_kv(const ts_attn_io *io) {
  const int C = io->C, Ckv = io->Ckv, dh = io->dh, rows = io->cfg->leaf;
  const int64_t N = io->ntok, Nk = (int64_t)io->B * io->T;
  if (basic(io)) { // un-fused: the local K and V rows, gathered separately
    const size_t bytes = (size_t)N * Ckv * sizeof(float);
    ts_cp_project_kv(io, io->tmp, io->tmp2);
    int rc = ts_comm_allgather(io->seq, io->tmp, io->k, bytes, io->l);
    return rc ? rc : ts_comm_allgather(io->seq, io->tmp2, io->v, bytes, io->l);
  }
  // fused: one gather of the norm output (into V's buffer when there is no
  // scratch: lss_sizes), then K and V of every row
  float *x = io->scratch ? io->scratch : io->v;
  int rc = ts_comm_allgather(io->seq, io->x, x, (size_t)N * C * sizeof(float), io->l);
  if (rc) return rc;
  io->be->linear_forward_heads(io->k, x, io->wk, io->bk, Nk, C, Ckv, dh, rows);
  if (x == io->v) v_over_x(io, io->v, Nk);
  else io->be->linear_forward_heads(io->v, x, io->wv, io->bv, Nk, C, Ckv, dh, rows);
  if (io->rope) io->be->rope_forward(io->k, Nk, io->T, 0, io->Hkv, dh, Ckv, io->rope); // every row
  return TS_OK;
}

// The concatenation: the group's attention outputs gathered (in rank order:
// rank q's rows are its block, q·n on, whatever positions they hold), the
// rank going on from its own rows of them.
int ts_lss_concat_forward(const ts_attn_io *io, float *att) {
  const size_t n = (size_t)io->ntok * io->C;
  int rc = ts_comm_allgather(io->seq, att, io->scratch, n * sizeof(float), io->l);
  if (!rc) memcpy(att, io->scratch + (size_t)io->seq->rank * n, n * sizeof(float));
  return rc;
}

// The concatenation's backward: each rank's gradient of the whole output
// (its own rows; the others -0.0, the identity of addition) reduce-scattered,
// so rank s receives the sum over ranks of its rows, bit for bit its own.
int ts_lss_concat_backward(const ts_attn_io *io, float *datt) {
  const size_t n = (size_t)io->ntok * io->C, nk = (size_t)io->B * io->T * io->C;
  float *full = io->scratch, *own = full + (size_t)io->seq->rank * n; // rank order: its rows
  for (size_t i = 0; i < nk; i++) full[i] = -0.0f;
  memcpy(own, datt, n * sizeof(float));
  int rc = ts_comm_reduce_scatter_tree(io->seq, full, nk, io->l);
  if (!rc) memcpy(datt, own, n * sizeof(float));
  return rc;
}

// The 2P blocks of buf (blk floats each: dK's P row blocks, then dV's)
// reordered in place into [dK_0 | dV_0 | dK_1 | dV_1 | ...], by the cycles
// of the permutation, one block at a time through tmp (blk floats).
static int interleave_blocks(const ts_backend *be, float *buf, int P, size_t blk, float *tmp) {
  unsigned char *done = calloc((size_t)2 * P, 1);
  if (!done) return ts_fail(TS_ERUNTIME, "out of memory");
  const size_t bytes = blk * sizeof(float);
  for (int start = 0; start < 2 * P; start++) {
    if (done[start]) continue;
    be->copy(tmp, buf + (size_t)start * blk, bytes);
    for (int p = start;;) { // position p takes the block that belongs there
      const int from = p % 2 == 0 ? p / 2 : P + p / 2;
      done[p] = 1;
      if (from == start) {
        be->copy(buf + (size_t)p * blk, tmp, bytes);
        break;
      }
      be->copy(buf + (size_t)p * blk, buf + (size_t)from * blk, bytes);
      p = from;
    }
  }
  free(done);
  return TS_OK;
}

// dK, dV of every key row (each rank's partial over its query tiles) to the
// rows' owners, summed over the group in tree order (R3): one reduce-scatter
// of [dK | dV], rank q's rows of both side by side (two separate ones for
// lss-basic). dK and dV are one buffer (io->dkv_stride), reordered in
// place (interleave_blocks): the sums are element by element, so the order
// moves no bit. On return the first N rows of io->dk, io->dv are this rank's
// rows, the serial bits.
static int reduce_scatter_kv(const ts_attn_io *io) {
  const int Ckv = io->Ckv, P = io->seq->size, q = io->seq->rank;
  const int64_t N = io->ntok, Nk = (int64_t)io->B * io->T;
  const size_t row = (size_t)Ckv * sizeof(float), blk = (size_t)N * Ckv;
  int rc;
  if (basic(io)) {
    if ((rc = ts_comm_reduce_scatter_tree(io->seq, io->dk, (size_t)Nk * Ckv, io->l))) return rc;
    if ((rc = ts_comm_reduce_scatter_tree(io->seq, io->dv, (size_t)Nk * Ckv, io->l))) return rc;
    memmove(io->dk, io->dk + (size_t)io->t0 * Ckv, (size_t)N * row);
    memmove(io->dv, io->dv + (size_t)io->t0 * Ckv, (size_t)N * row);
    return TS_OK;
  }
  if (io->dkv_stride != (size_t)Nk * Ckv || Nk != (int64_t)P * N)
    return ts_fail(TS_ERUNTIME, "lss: dK and dV are not one buffer of the group's row blocks");
  if ((rc = interleave_blocks(io->be, io->dk, P, blk, io->tmp))) return rc;
  if ((rc = ts_comm_reduce_scatter_tree(io->seq, io->dk, 2 * (size_t)Nk * Ckv, io->l))) return rc;
  const float *own = io->dk + 2 * (size_t)q * blk; // [dK_q | dV_q]
  if (q > 0) io->be->copy(io->dk, own, blk * sizeof(float));
  if (2 * q + 1 != P) io->be->copy(io->dv, own + blk, blk * sizeof(float));
  return TS_OK;
}

// ---- the kernel calls of a rank (both layouts; bench/attention makes them too) -------------
void ts_lss_attention_forward(const ts_backend *be, ts_ws *ws, const ts_attn_shape *rank,
                              const ts_cp_runs *runs, float *att, float *lse, const float *q,
                              const float *k, const float *v) {
  const ts_attn_shape whole = ts_attn_resolved(rank);
  const int len = runs->len, C = whole.ldq, H = whole.H;
  for (int r = 0; r < runs->n; r++) { // each run's queries, lse (H, len) run after run
    ts_attn_shape as = *rank;
    as.Tq = len;
    as.q0 = runs->pos[r];
    be->attention_forward(ws, att + (size_t)r * len * C, lse + (size_t)r * H * len,
                          q + (size_t)r * len * C, k, v, &as);
  }
}

int ts_lss_attention_backward(const ts_backend *be, ts_ws *ws, const ts_attn_shape *rank,
                              const ts_cp_runs *runs, float *dq, float *dk, float *dv,
                              size_t dkv_run, float *dsum, const float *datt, const float *q,
                              const float *k, const float *v, const float *att,
                              const float *lse) {
  const ts_attn_shape whole = ts_attn_resolved(rank);
  const int len = runs->len, C = whole.ldq, H = whole.H;
  for (int r = 0; r < runs->n; r++) { // run r's dQ, and its partials of dK, dV over every key row
    ts_attn_shape as = *rank;
    as.Tq = len;
    as.q0 = runs->pos[r];
    const size_t at = (size_t)r * len * C;
    if (be->attention_backward(ws, dq + at, dk + r * dkv_run, dv + r * dkv_run, dsum, datt + at,
                               q + at, k, v, att + at, lse + (size_t)r * H * len, &as) != 0)
      return ts_fail(TS_ERUNTIME, "out of memory in attention backward");
  }
  return TS_OK;
}

static int lss_attn_forward(const ts_attn_io *io) {
  int rc;
  ts_cp_project_q(io, io->q); // distributed Q: the rank's own queries only
  if ((rc = gather_kv(io))) return rc;
  ts_lss_attention_forward(io->be, io->ws, &io->shape, &io->runs, io->att, io->lse, io->q, io->k, io->v);
  return concat(io) ? ts_lss_concat_forward(io, io->att) : TS_OK;
}

static int lss_attn_backward(const ts_attn_io *io) {
  int rc;
  if (concat(io) && (rc = ts_lss_concat_backward(io, io->datt))) return rc;
  if ((rc = ts_lss_attention_backward(io->be, io->ws, &io->shape, &io->runs, io->dq, io->dk, io->dv, 0, io->dsum,
                                      io->datt, io->q, io->k, io->v, io->att, io->lse)))
    return rc;
  return reduce_scatter_kv(io);
}

// What the functions above move per layer (strategy.h `traffic`): the
// all-gather of the norm output (or of K and V apart), the concatenation's
// all-gather and its reduce-scatter, and the reduce-scatter of [dK | dV] (or
// of each apart).
static void lss_traffic(const ts_attn_io *io, const ts_seq_shard *sp, ts_comm_count *fwd,
                        ts_comm_count *bwd) {
  const int P = io->seq->size, r = io->seq->rank;
  const size_t N = (size_t)io->ntok, Nk = (size_t)io->B * io->T, C = io->C, Ckv = io->Ckv;
  for (int k = 0; k < (basic(io) ? 2 : 1); k++) // gather_kv
    ts_comm_tally(fwd, TS_COMM_ALLGATHER,
                  ts_comm_gather_bytes(N * (basic(io) ? Ckv : C) * sizeof(float), P));
  if (concat(io)) {
    ts_comm_tally(fwd, TS_COMM_ALLGATHER, ts_comm_gather_bytes(N * C * sizeof(float), P));
    ts_comm_tally(bwd, TS_COMM_REDUCE_SCATTER, ts_comm_tree_bytes(Nk * C, P, r));
  }
  for (int k = 0; k < (basic(io) ? 2 : 1); k++) // reduce_scatter_kv
    ts_comm_tally(bwd, TS_COMM_REDUCE_SCATTER,
                  ts_comm_tree_bytes((basic(io) ? 1 : 2) * Nk * Ckv, P, r));
}

// What its calls take (strategy.h `incall`): no buffers of its own; the
// packing of its largest reduce-scatter, the concatenation's (B·T, C) or
// [dK | dV]'s.
static void lss_incall(const ts_attn_io *io, const ts_seq_shard *sp, ts_cp_incall *out) {
  (void)sp;
  const int P = io->seq->size;
  const size_t Nk = (size_t)io->B * io->T, kv = (basic(io) ? 1 : 2) * Nk * io->Ckv;
  const size_t cat = concat(io) ? ts_comm_pack_tree(Nk * io->C, P) : 0;
  *out = (ts_cp_incall){.pack = cat > ts_comm_pack_tree(kv, P) ? cat : ts_comm_pack_tree(kv, P)};
}

const ts_cp ts_cp_lss = {
    .name = "lss",
    .summary = "fused all-gather, distributed Q, gradient averaging: 2 collectives per layer",
    .exact = 1,
    .sizes = lss_sizes,
    .attn_forward = lss_attn_forward,
    .attn_backward = lss_attn_backward,
    .traffic = lss_traffic,
    .incall = lss_incall,
    .opts = &ts_lss_plain,
};

const ts_cp ts_cp_lss_fused = {
    .name = "lss-fused",
    .summary = "LSS ablation: + concatenation of the attention outputs: 4 per layer",
    .exact = 1,
    .sizes = lss_sizes,
    .attn_forward = lss_attn_forward,
    .attn_backward = lss_attn_backward,
    .traffic = lss_traffic,
    .incall = lss_incall,
    .opts = &ts_lss_fused,
};

const ts_cp ts_cp_lss_basic = {
    .name = "lss-basic",
    .summary = "LSS ablation: K and V gathered separately + concatenation: 6 per layer",
    .exact = 1,
    .sizes = lss_sizes,
    .attn_forward = lss_attn_forward,
    .attn_backward = lss_attn_backward,
    .traffic = lss_traffic,
    .incall = lss_incall,
    .opts = &ts_lss_basic,
};

const ts_cp ts_cp_lss_unfused = {
    .name = "lss-unfused",
    .summary = "LSS ablation: gradient averaging, K and V gathered separately: 4 per layer",
    .exact = 1,
    .sizes = lss_sizes,
    .attn_forward = lss_attn_forward,
    .attn_backward = lss_attn_backward,
    .traffic = lss_traffic,
    .incall = lss_incall,
    .opts = &ts_lss_unfused,
};
