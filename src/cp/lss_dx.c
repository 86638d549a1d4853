// lss-dx: LSS with the backward its paper describes (docs/ALGORITHMS.md §2).
//
// The forward is lss's: one all-gather of the norm output, K and V of every
// row computed locally, the rank's own queries only. The gathered rows are
// kept (one buffer per layer, or one for all with --checkpoint, which
// refills it). The backward then treats that all-gather as an operation to
// differentiate: from its partials of dK and dV over every key row, a rank
// forms the gradient of the whole gathered input, dx_full = dK·Wk + dV·Wv,
// adds its own queries' term dQ·Wq on its own rows, and one reduce-scatter
// of dx_full (T×d floats: half of lss's [dK | dV] for the GPT) leaves each
// rank the gradient of its rows. The K and V weight gradients are each
// rank's partials over every row, which the group's gradient all-reduce sums.
//
// Tolerance tier: dx and the K, V weight and bias gradients are the serial
// sums regrouped (by rank first, then the group's tree), so they differ from
// serial by rounding (docs/DISTRIBUTED.md states the bound; tests/mpi_sp.sh
// checks it). Every other tensor keeps the serial bits.
#include <stdlib.h>

#include "cp.h"

// The gathered norm outputs a rank keeps: B·T rows of C floats per layer.
static size_t gathered_layers(const ts_attn_io *io) { return io->cfg->checkpoint ? 1 : (size_t)io->L; }
static size_t gathered_floats(const ts_attn_io *io) { return (size_t)io->B * io->T * io->C; }
static float *gathered(const ts_attn_io *io) {
  return (float *)io->state + (io->cfg->checkpoint ? 0 : (size_t)io->l) * gathered_floats(io);
}

// lss's buffers, and the whole sequence's dx (B·T rows of C) as its own scratch.
static void lss_dx_sizes(const ts_attn_io *io, ts_cp_sizes *out) {
  const int64_t N = io->ntok, Nk = (int64_t)io->B * io->T;
  *out = (ts_cp_sizes){.layer_rows = N, .q_rows = N, .kv_rows = Nk, .dkv_rows = Nk,
                       .scratch = (size_t)Nk * io->C};
}

static int lss_dx_create(const ts_attn_io *io, const ts_seq_shard *sp, void **state) {
  *state = malloc(gathered_layers(io) * gathered_floats(io) * sizeof(float));
  return *state ? TS_OK : ts_fail(TS_ERUNTIME, "out of memory (lss-dx: the gathered layer inputs)");
}

static size_t lss_dx_bytes(const ts_attn_io *io) {
  return gathered_layers(io) * gathered_floats(io) * sizeof(float);
}

static void lss_dx_destroy(const ts_attn_io *io) { free(io->state); }

static int lss_dx_forward(const ts_attn_io *io) {
  const int C = io->C, Ckv = io->Ckv, dh = io->dh, rows = io->cfg->leaf;
  const int64_t Nk = (int64_t)io->B * io->T;
  float *x = gathered(io);
  ts_cp_project_q(io, io->q); // distributed Q: the rank's own queries only
  int rc = ts_comm_allgather(io->seq, io->x, x, (size_t)io->ntok * C * sizeof(float), io->l);
  if (rc) return rc;
  io->be->linear_forward_heads(io->k, x, io->wk, io->bk, Nk, C, Ckv, dh, rows);
  io->be->linear_forward_heads(io->v, x, io->wv, io->bv, Nk, C, Ckv, dh, rows);
  if (io->rope) io->be->rope_forward(io->k, Nk, io->T, 0, io->Hkv, dh, Ckv, io->rope); // every row
  ts_lss_attention_forward(io->be, io->ws, &io->shape, &io->runs, io->att, io->lse, io->q, io->k, io->v);
  return TS_OK;
}

// dQ of the rank's rows and the partials of dK, dV over every row, back
// through the rotations; then the weight gradients and the rank's dx.
static int lss_dx_backward(const ts_attn_io *io) {
  const int C = io->C, Ckv = io->Ckv, dh = io->dh, leaf = io->cfg->leaf;
  const int64_t N = io->ntok, Nk = (int64_t)io->B * io->T;
  const float *x = gathered(io);
  int rc = ts_lss_attention_backward(io->be, io->ws, &io->shape, &io->runs, io->dq, io->dk, io->dv, 0,
                                     io->dsum, io->datt, io->q, io->k, io->v, io->att, io->lse);
  if (rc) return rc;
  ts_rope_runs(io->be, &io->runs, N, dh, io->rope, io->dq, io->H, C, 1);
  if (io->rope) io->be->rope_backward(io->dk, Nk, io->T, 0, io->Hkv, dh, Ckv, io->rope);
  int tree_rc = io->be->linear_backward_weights(io->ws, io->dwq, io->dbq, io->dq, io->x, N, C, C);
  tree_rc |= io->be->linear_backward_weights(io->ws, io->dwk, io->dbk, io->dk, x, Nk, C, Ckv);
  tree_rc |= io->be->linear_backward_weights(io->ws, io->dwv, io->dbv, io->dv, x, Nk, C, Ckv);
  if (tree_rc) return ts_fail(TS_ERUNTIME, "out of memory (weight-gradient trees)");
  // dx of the gathered input: the rank's rows are block `rank` of it (the
  // all-gather's order)
  float *dx_full = io->scratch, *own = dx_full + (size_t)io->seq->rank * N * C;
  io->be->linear_backward_input(dx_full, io->dk, io->wk, Nk, C, Ckv, leaf, 0);
  io->be->linear_backward_input(dx_full, io->dv, io->wv, Nk, C, Ckv, leaf, 1);
  io->be->linear_backward_input(own, io->dq, io->wq, N, C, C, leaf, 1);
  if ((rc = ts_comm_reduce_scatter_tree(io->seq, dx_full, (size_t)Nk * C, io->l))) return rc;
  io->be->copy(io->dx, own, (size_t)N * C * sizeof(float));
  return TS_OK;
}

// What the two functions above move per layer (strategy.h `traffic`): the
// all-gather of the norm output, the reduce-scatter of dx (B·T rows of C).
static void lss_dx_traffic(const ts_attn_io *io, const ts_seq_shard *sp, ts_comm_count *fwd,
                           ts_comm_count *bwd) {
  const int P = io->seq->size;
  const size_t Nk = (size_t)io->B * io->T, C = (size_t)io->C;
  const size_t rows = (size_t)io->ntok;
  ts_comm_tally(fwd, TS_COMM_ALLGATHER, ts_comm_gather_bytes(rows * C * sizeof(float), P));
  ts_comm_tally(bwd, TS_COMM_REDUCE_SCATTER, ts_comm_tree_bytes(Nk * C, P, io->seq->rank));
}

// The sequence group's packing (strategy.h `incall`): dx's reduce-scatter.
static void lss_dx_incall(const ts_attn_io *io, const ts_seq_shard *sp, ts_cp_incall *out) {
  (void)sp;
  *out = (ts_cp_incall){
      .pack = ts_comm_pack_tree((size_t)io->B * io->T * io->C, io->seq->size)};
}

const ts_cp ts_cp_lss_dx = {
    .name = "lss-dx",
    .summary = "lss whose backward reduce-scatters dx (T x d floats) as its paper does: 2 "
               "collectives per layer",
    .exact = 0,
    .host_only = 1,
    .forms_dx = 1,
    .sizes = lss_dx_sizes,
    .create = lss_dx_create,
    .bytes = lss_dx_bytes,
    .traffic = lss_dx_traffic,
    .incall = lss_dx_incall,
    .destroy = lss_dx_destroy,
    .attn_forward = lss_dx_forward,
    .attn_backward = lss_dx_backward,
};
