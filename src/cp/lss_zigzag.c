// Balanced LSS (lss-zigzag) and its two ablations, as context-parallel
// strategies (strategy.h): the attention of the LSS family (lss.c) on a
// layout where rank r of N holds chunks r and 2N-1-r of 2N.
//
// Causal attention on contiguous segments is unbalanced: the rank with the
// last segment does about 2N-1 times the first's work. Here every rank does
// the same, with the same collectives per layer as its contiguous twin: the
// all-gather of the norm output (rank q's block is its two chunks) and one
// reduce-scatter of [dK | dV].
//
// Exactness. A rank's two runs are aligned subtrees of every sum over the
// sequence, and their partials are kept apart until the group has summed
// each (the gradient plan `run_partials`, src/model/run_partials.c): the tree
// over chunks 0..N-1 (the first runs, rank order) plus the tree over chunks
// N..2N-1 (the second runs, which is the mirror image of a tree over the
// ranks: the same pairs, so the same bits). dK/dV of a key row sum the same
// way over query tiles: the first runs' partials (only keys of the first half
// have any) and the second runs', summed over the group and added, rows of
// the second half taking the second runs' sum alone (the first runs' would
// add only -0.0, nothing).
//
// This file is the whole variant: its table's layout (`positions`), its
// gradient plan and its attention; the registry names it (strategies.def).
#include <string.h>

#include "cp.h"

static int basic(const ts_attn_io *io) { return ts_lss_opts_of(io)->separate_kv; }
static int concat(const ts_attn_io *io) { return ts_lss_opts_of(io)->concat; }

// Rows of the gathered norm output and of [dK | dV] per chunk.
static int chunk_of(int N, int q, int k) { return k ? 2 * N - 1 - q : q; }

static void zigzag_sizes(const ts_attn_io *io, ts_cp_sizes *out) {
  const int64_t N = io->ntok, Nk = (int64_t)io->B * io->T;
  // the gathered rows (T of C), or the reduce-scatter's 3/2 T rows of [dK | dV]
  const size_t gathered = (size_t)Nk * io->C, pack = (size_t)3 * Nk * io->Ckv;
  *out = (ts_cp_sizes){.layer_rows = N, .q_rows = N, .kv_rows = Nk, .dkv_rows = 2 * Nk,
                       .scratch = gathered > pack ? gathered : pack};
}

static int pow2(int x) { return x > 0 && (x & (x - 1)) == 0; }

static int zigzag_check(const ts_config *cfg, ts_layout *lay) {
  const int N = lay->sp, T = cfg->seq, len = T / (2 * N);
  const char *mode = ts_sp_mode_names[lay->sp_mode];
  if (T % (2 * N) != 0 || len % cfg->tile != 0 || len % cfg->leaf != 0 ||
      !pow2(len / cfg->tile) || !pow2(len / cfg->leaf))
    return ts_fail(TS_EUSAGE,
                   "--sp-mode %s with --sp %d: --seq %d must split into %d chunks of a "
                   "power of two of whole tiles (%d) and leaves (%d)",
                   mode, N, T, 2 * N, cfg->tile, cfg->leaf);
  return TS_OK;
}

static int zigzag_forward(const ts_attn_io *io) {
  const int N = io->seq->size, C = io->C, Ckv = io->Ckv, dh = io->dh, rows = io->cfg->leaf;
  const int len = io->runs.len;
  ts_cp_project_q(io, io->q);
  int rc;
  if (basic(io)) { // the local K and V rows (rotated), gathered separately, each chunk to its place
    ts_cp_project_kv(io, io->tmp, io->tmp2);
    const float *local[2] = {io->tmp, io->tmp2};
    float *whole[2] = {io->k, io->v};
    for (int j = 0; j < 2; j++) {
      rc = ts_comm_allgather(io->seq, local[j], io->scratch, (size_t)io->ntok * Ckv * sizeof(float), io->l);
      if (rc) return rc;
      for (int q = 0; q < N; q++)
        for (int k = 0; k < 2; k++)
          memcpy(whole[j] + (size_t)chunk_of(N, q, k) * len * Ckv,
                 io->scratch + (size_t)(2 * q + k) * len * Ckv, (size_t)len * Ckv * sizeof(float));
    }
  } else { // fused: one gather of the norm output, K and V of every row into its place
    rc = ts_comm_allgather(io->seq, io->x, io->scratch, (size_t)io->ntok * C * sizeof(float), io->l);
    if (rc) return rc;
    // (row blocks of whole leaves: the serial bits whichever rank computes them)
    for (int q = 0; q < N; q++)
      for (int k = 0; k < 2; k++) {
        const float *x = io->scratch + (size_t)(2 * q + k) * len * C;
        const size_t at = (size_t)chunk_of(N, q, k) * len * Ckv;
        io->be->linear_forward_heads(io->k + at, x, io->wk, io->bk, len, C, Ckv, dh, rows);
        io->be->linear_forward_heads(io->v + at, x, io->wv, io->bv, len, C, Ckv, dh, rows);
      }
    if (io->rope) io->be->rope_forward(io->k, io->T, io->T, 0, io->Hkv, dh, Ckv, io->rope);
  }
  // each run's queries, lse (H, len) run after run
  ts_lss_attention_forward(io->be, io->ws, &io->shape, &io->runs, io->att, io->lse, io->q, io->k, io->v);
  return concat(io) ? ts_lss_concat_forward(io, io->att) : TS_OK;
}

// One reduce-scatter of nt tensors side by side ([dK | dV], or dK or dV
// alone for lss-basic), each t[j] holding 2T rows: the first run's partials
// over every key row, then the second run's. Rank q's part holds the first
// runs' rows of its first chunk, the second runs' of its first chunk and of
// its second (the first runs' are -0.0 there). On return rows [0, len) of
// t[j] are the rank's first chunk (the two sums added: the root of the tree
// over query tiles), rows [len, 2·len) its second.
static int zigzag_reduce_scatter(const ts_attn_io *io, float *const *t, int nt) {
  const int N = io->seq->size, r = io->seq->rank, Ckv = io->Ckv, len = io->runs.len, T = io->T;
  const int width = nt * Ckv;
  const size_t part = (size_t)len * width, row = (size_t)Ckv * sizeof(float);
  float *pack = io->scratch;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < 3 * N; i++) {
    const int q = i / 3, which = i % 3, second = which > 0;
    const int64_t from = (int64_t)second * T + (int64_t)chunk_of(N, q, which == 2) * len;
    for (int64_t u = 0; u < len; u++)
      for (int j = 0; j < nt; j++)
        memcpy(pack + (size_t)i * part + (size_t)u * width + (size_t)j * Ckv,
               t[j] + (size_t)(from + u) * Ckv, row);
  }
  int rc = ts_comm_reduce_scatter_tree(io->seq, pack, (size_t)3 * N * part, io->l);
  if (rc) return rc;
  const float *own = pack + (size_t)3 * r * part;
  for (int64_t u = 0; u < len; u++)
    for (int j = 0; j < nt; j++) {
      const float *x = own + (size_t)u * width + (size_t)j * Ckv, *y = x + part, *z = y + part;
      float *first = t[j] + (size_t)u * Ckv, *second = first + (size_t)len * Ckv;
      for (int c = 0; c < Ckv; c++) {
        first[c] = x[c] + y[c];
        second[c] = z[c];
      }
    }
  return TS_OK;
}

static int zigzag_backward(const ts_attn_io *io) {
  int rc;
  if (concat(io) && (rc = ts_lss_concat_backward(io, io->datt))) return rc;
  // run k's dQ, and its partials of dK, dV over every key row at row k·T
  if ((rc = ts_lss_attention_backward(io->be, io->ws, &io->shape, &io->runs, io->dq, io->dk, io->dv,
                                      (size_t)io->T * io->Ckv, io->dsum, io->datt, io->q, io->k, io->v,
                                      io->att, io->lse)))
    return rc;
  if (basic(io)) { // dK and dV apart
    if ((rc = zigzag_reduce_scatter(io, &io->dk, 1))) return rc;
    return zigzag_reduce_scatter(io, &io->dv, 1);
  }
  float *both[2] = {io->dk, io->dv};
  return zigzag_reduce_scatter(io, both, 2);
}

// What the functions above move per layer (strategy.h `traffic`): lss's
// gathers and concatenation, and the reduce-scatter of the 3N parts of
// len rows of the packed tensors (zigzag_reduce_scatter), one or two.
static void zigzag_traffic(const ts_attn_io *io, const ts_seq_shard *sp, ts_comm_count *fwd,
                           ts_comm_count *bwd) {
  const int N = io->seq->size, r = io->seq->rank, nt = basic(io) ? 1 : 2;
  const size_t rows = (size_t)io->ntok, C = io->C, Ckv = io->Ckv, f = sizeof(float);
  for (int j = 0; j < 3 - nt; j++) // zigzag_forward's gathers
    ts_comm_tally(fwd, TS_COMM_ALLGATHER, ts_comm_gather_bytes(rows * (basic(io) ? Ckv : C) * f, N));
  if (concat(io)) { // ts_lss_concat_forward, ts_lss_concat_backward
    ts_comm_tally(fwd, TS_COMM_ALLGATHER, ts_comm_gather_bytes(rows * C * f, N));
    ts_comm_tally(bwd, TS_COMM_REDUCE_SCATTER, ts_comm_tree_bytes((size_t)io->B * io->T * C, N, r));
  }
  const size_t part = (size_t)io->runs.len * nt * Ckv;
  for (int j = 0; j < 3 - nt; j++)
    ts_comm_tally(bwd, TS_COMM_REDUCE_SCATTER, ts_comm_tree_bytes((size_t)3 * N * part, N, r));
}

// The sequence group's packing (strategy.h `incall`): the concatenation's
// reduce-scatter and zigzag_reduce_scatter's 3N parts.
static void zigzag_incall(const ts_attn_io *io, const ts_seq_shard *sp, ts_cp_incall *out) {
  (void)sp;
  const int N = io->seq->size;
  const size_t part = (size_t)io->runs.len * (basic(io) ? 1 : 2) * io->Ckv;
  const size_t kv = ts_comm_pack_tree((size_t)3 * N * part, N);
  const size_t cat = concat(io) ? ts_comm_pack_tree((size_t)io->B * io->T * io->C, N) : 0;
  *out = (ts_cp_incall){.pack = cat > kv ? cat : kv};
}

// The balanced three differ in their options alone (basic() and concat() read them).
#define ZIGZAG(NAME, SUMMARY, OPTS)                                                             \
  {                                                                                             \
    .name = NAME, .summary = SUMMARY, .exact = 1, .host_only = 1, .run_partials = 1,            \
    .check = zigzag_check, .positions = ts_cp_zigzag_positions, .sizes = zigzag_sizes,          \
    .attn_forward = zigzag_forward, .attn_backward = zigzag_backward,                          \
    .traffic = zigzag_traffic, .incall = zigzag_incall, .opts = &OPTS,                          \
  }
const ts_cp ts_cp_lss_zigzag =
    ZIGZAG("lss-zigzag", "LSS balanced: chunks r and 2N-1-r of 2N, the same 2 collectives per layer",
           ts_lss_plain);
const ts_cp ts_cp_lss_fused_zigzag =
    ZIGZAG("lss-fused-zigzag", "lss-fused balanced as lss-zigzag: 4 per layer", ts_lss_fused);
const ts_cp ts_cp_lss_basic_zigzag =
    ZIGZAG("lss-basic-zigzag", "lss-basic balanced as lss-zigzag: 6 per layer", ts_lss_basic);

