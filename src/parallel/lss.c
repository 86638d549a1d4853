// LSS sequence parallelism (docs/ALGORITHMS.md §2; the LSS Transformer paper) and
// its two ablations, as context-parallel strategies (strategy.h).
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
#include <stdlib.h>
#include <string.h>

#include "parallel/cp.h"

// What tells the variants apart (each table's `opts`): the ablations
// concatenate the attention outputs of the group (lss-fused, lss-basic), and
// lss-basic also gathers K and V separately, un-fused.
typedef struct {
  int concat, separate_kv;
} lss_opts;
static const lss_opts LSS = {0, 0}, LSS_FUSED = {1, 0}, LSS_BASIC = {1, 1};

static int basic(const ts_model *m) { return ((const lss_opts *)m->cp->opts)->separate_kv; }
static int concat(const ts_model *m) { return ((const lss_opts *)m->cp->opts)->concat; }

// K, V and their gradients hold the whole sequence: T rows. The strategy's
// own scratch holds T rows of C for the ablations' concatenation, and for
// the gathered norm output where V's rows cannot (Ckv < C: grouped-query
// attention); otherwise the gathered rows wait in V's buffer (gather_kv),
// and [dK | dV] go to the reduce-scatter in their own (reduce_scatter_kv):
// no buffer of the whole sequence beyond K, V, dK and dV.
static void lss_sizes(const ts_model *m, ts_cp_sizes *out) {
  const int64_t N = m->ntok, Nk = (int64_t)m->B * m->T;
  const int own = concat(m) || m->Ckv < m->C;
  *out = (ts_cp_sizes){.layer_rows = N, .q_rows = N, .kv_rows = Nk, .dkv_rows = Nk,
                       .scratch = own ? (size_t)Nk * m->C : 0};
}

// V (Nk rows) from the gathered norm output x held in V's own buffer (C ==
// Ckv): a block of the rank's row count at a time through dtmp, so that each
// block's rows are read before they are written over. Row blocks of whole
// leaves: the same bits as one product over all the rows.
static void v_over_x(ts_model *m, const layer_params *w, float *v, int64_t Nk) {
  const int C = m->C, Ckv = m->Ckv, dh = m->dh, rows = m->cfg.leaf;
  const int64_t n = m->ntok;
  for (int64_t b = 0; b < Nk; b += n) {
    m->be->linear_forward_heads(m->dtmp, v + (size_t)b * C, w->wv, w->bv, n, C, Ckv, dh, rows);
    m->be->copy(v + (size_t)b * Ckv, m->dtmp, (size_t)n * Ckv * sizeof(float));
  }
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
  // fused: one gather of the norm output (into V's buffer when there is no
  // scratch: lss_sizes), then K and V of every row
  float *x = m->spbuf ? m->spbuf : a->v;
  int rc = ts_comm_allgather(m->seq, m->ln_out, x, (size_t)N * C * sizeof(float), l);
  if (rc) return rc;
  m->be->linear_forward_heads(a->k, x, w->wk, w->bk, Nk, C, Ckv, dh, rows);
  if (x == a->v) v_over_x(m, w, a->v, Nk);
  else m->be->linear_forward_heads(a->v, x, w->wv, w->bv, Nk, C, Ckv, dh, rows);
  if (m->llama) m->be->rope_forward(a->k, Nk, m->T, 0, m->Hkv, dh, Ckv, m->rope); // every row
  return TS_OK;
}

// The concatenation: the group's attention outputs gathered (in rank order:
// rank q's rows are its block, q·n on, whatever positions they hold), the
// rank going on from its own rows of them.
static int concat_forward(ts_model *m, int l, float *att) {
  const size_t n = (size_t)m->ntok * m->C;
  int rc = ts_comm_allgather(m->seq, att, m->spbuf, n * sizeof(float), l);
  if (!rc) memcpy(att, m->spbuf + (size_t)m->seq->rank * n, n * sizeof(float));
  return rc;
}

// The concatenation's backward: each rank's gradient of the whole output
// (its own rows; the others -0.0, the identity of addition) reduce-scattered,
// so rank s receives the sum over ranks of its rows, bit for bit its own.
static int concat_backward(ts_model *m, int l, float *datt) {
  const size_t n = (size_t)m->ntok * m->C, nk = (size_t)m->B * m->T * m->C;
  float *full = m->spbuf, *own = full + (size_t)m->seq->rank * n; // rank order: its rows
  for (size_t i = 0; i < nk; i++) full[i] = -0.0f;
  memcpy(own, datt, n * sizeof(float));
  int rc = ts_comm_reduce_scatter_tree(m->seq, full, nk, l);
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
// lss-basic). dK and dV are one buffer (dv follows dk's rows), reordered in
// place (interleave_blocks): the sums are element by element, so the order
// moves no bit. On return the first N rows of m->dk, m->dv are this rank's
// rows, the serial bits.
static int reduce_scatter_kv(ts_model *m, int l) {
  const int Ckv = m->Ckv, P = m->seq->size, q = m->seq->rank;
  const int64_t N = m->ntok, Nk = (int64_t)m->B * m->T;
  const size_t row = (size_t)Ckv * sizeof(float), blk = (size_t)N * Ckv;
  int rc;
  if (basic(m)) {
    if ((rc = ts_comm_reduce_scatter_tree(m->seq, m->dk, (size_t)Nk * Ckv, l))) return rc;
    if ((rc = ts_comm_reduce_scatter_tree(m->seq, m->dv, (size_t)Nk * Ckv, l))) return rc;
    memmove(m->dk, m->dk + (size_t)m->t0 * Ckv, (size_t)N * row);
    memmove(m->dv, m->dv + (size_t)m->t0 * Ckv, (size_t)N * row);
    return TS_OK;
  }
  if (m->dv != m->dk + (size_t)Nk * Ckv || Nk != (int64_t)P * N)
    return ts_fail(TS_ERUNTIME, "lss: dK and dV are not one buffer of the group's row blocks");
  if ((rc = interleave_blocks(m->be, m->dk, P, blk, m->dtmp))) return rc;
  if ((rc = ts_comm_reduce_scatter_tree(m->seq, m->dk, 2 * (size_t)Nk * Ckv, l))) return rc;
  const float *own = m->dk + 2 * (size_t)q * blk; // [dK_q | dV_q]
  if (q > 0) m->be->copy(m->dk, own, blk * sizeof(float));
  if (2 * q + 1 != P) m->be->copy(m->dv, own + blk, blk * sizeof(float));
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

// The rank's runs as the model holds them.
static ts_cp_runs model_runs(const ts_model *m) {
  return (ts_cp_runs){.n = m->nrun, .len = m->run_len, .pos = {m->run_pos[0], m->run_pos[1]}};
}

static int lss_attn_forward(ts_model *m, int l, uint64_t step, float p) {
  const layer_params *w = &m->p.layer[l];
  layer_acts *a = ts_layer_acts(m, l);
  int rc;
  ts_cp_project_q(m, w, a->q); // distributed Q: the rank's own queries only
  if ((rc = gather_kv(m, l, w, a))) return rc;
  ts_attn_shape as = ts_cp_attn_shape(m, l, p, step);
  const ts_cp_runs runs = model_runs(m);
  ts_lss_attention_forward(m->be, &m->ws, &as, &runs, a->att, a->lse, a->q, a->k, a->v);
  return concat(m) ? concat_forward(m, l, a->att) : TS_OK;
}

static int lss_attn_backward(ts_model *m, int l, uint64_t step) {
  layer_acts *a = ts_layer_acts(m, l);
  int rc;
  if (concat(m) && (rc = concat_backward(m, l, m->datt))) return rc;
  ts_attn_shape as = ts_cp_attn_shape(m, l, m->cfg.dropout, step);
  const ts_cp_runs runs = model_runs(m);
  if ((rc = ts_lss_attention_backward(m->be, &m->ws, &as, &runs, m->dq, m->dk, m->dv, 0, m->dsum,
                                      m->datt, a->q, a->k, a->v, a->att, a->lse)))
    return rc;
  return reduce_scatter_kv(m, l);
}

// ---- balanced LSS (lss-zigzag) -----------------------------------------------------------
// Causal attention on contiguous segments is unbalanced: the rank with the
// last segment does about 2N-1 times the first's work. lss-zigzag cuts the
// sequence into 2N chunks and gives rank r chunks r and 2N-1-r, so every rank
// does the same, with the same two collectives per layer: the all-gather of
// the norm output (rank q's block is its two chunks) and one reduce-scatter
// of [dK | dV].
//
// Exactness. A rank's two runs are aligned subtrees of every sum over the
// sequence, and their partials are kept apart until the group has summed
// each (run_partials.c): the tree over chunks 0..N-1 (the first runs, rank
// order) plus the tree over chunks N..2N-1 (the second runs, which is the
// mirror image of a tree over the ranks: the same pairs, so the same bits).
// dK/dV of a key row sum the same way over query tiles: the first runs'
// partials (only keys of the first half have any) and the second runs',
// summed over the group and added, rows of the second half taking the
// second runs' sum alone (the first runs' would add only -0.0, nothing).

// Rows of the gathered norm output and of [dK | dV] per chunk.
static int chunk_of(int N, int q, int k) { return k ? 2 * N - 1 - q : q; }

static void zigzag_sizes(const ts_model *m, ts_cp_sizes *out) {
  const int64_t N = m->ntok, Nk = (int64_t)m->B * m->T;
  // the gathered rows (T of C), or the reduce-scatter's 3/2 T rows of [dK | dV]
  const size_t gathered = (size_t)Nk * m->C, pack = (size_t)3 * Nk * m->Ckv;
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

static int zigzag_create(ts_model *m, const ts_seq_shard *sp) {
  (void)sp;
  return ts_run_partials_create(m);
}

static void zigzag_destroy(ts_model *m) { ts_run_partials_destroy(m); }

static size_t zigzag_bytes(const ts_model *m) { return ts_run_partials_bytes(m); }

static int zigzag_forward(ts_model *m, int l, uint64_t step, float p) {
  const layer_params *w = &m->p.layer[l];
  layer_acts *a = ts_layer_acts(m, l);
  const int N = m->seq->size, C = m->C, Ckv = m->Ckv, dh = m->dh, rows = m->cfg.leaf;
  const int len = m->run_len;
  ts_cp_project_q(m, w, a->q);
  int rc;
  if (basic(m)) { // the local K and V rows (rotated), gathered separately, each chunk to its place
    ts_cp_project_kv(m, w, m->dtmp, m->dtmp2);
    const float *local[2] = {m->dtmp, m->dtmp2};
    float *whole[2] = {a->k, a->v};
    for (int j = 0; j < 2; j++) {
      rc = ts_comm_allgather(m->seq, local[j], m->spbuf, (size_t)m->ntok * Ckv * sizeof(float), l);
      if (rc) return rc;
      for (int q = 0; q < N; q++)
        for (int k = 0; k < 2; k++)
          memcpy(whole[j] + (size_t)chunk_of(N, q, k) * len * Ckv,
                 m->spbuf + (size_t)(2 * q + k) * len * Ckv, (size_t)len * Ckv * sizeof(float));
    }
  } else { // fused: one gather of the norm output, K and V of every row into its place
    rc = ts_comm_allgather(m->seq, m->ln_out, m->spbuf, (size_t)m->ntok * C * sizeof(float), l);
    if (rc) return rc;
    // (row blocks of whole leaves: the serial bits whichever rank computes them)
    for (int q = 0; q < N; q++)
      for (int k = 0; k < 2; k++) {
        const float *x = m->spbuf + (size_t)(2 * q + k) * len * C;
        const size_t at = (size_t)chunk_of(N, q, k) * len * Ckv;
        m->be->linear_forward_heads(a->k + at, x, w->wk, w->bk, len, C, Ckv, dh, rows);
        m->be->linear_forward_heads(a->v + at, x, w->wv, w->bv, len, C, Ckv, dh, rows);
      }
    if (m->llama) m->be->rope_forward(a->k, m->T, m->T, 0, m->Hkv, dh, Ckv, m->rope);
  }
  ts_attn_shape as = ts_cp_attn_shape(m, l, p, step);
  const ts_cp_runs runs = model_runs(m); // each run's queries, lse (H, len) run after run
  ts_lss_attention_forward(m->be, &m->ws, &as, &runs, a->att, a->lse, a->q, a->k, a->v);
  return concat(m) ? concat_forward(m, l, a->att) : TS_OK;
}

// One reduce-scatter of nt tensors side by side ([dK | dV], or dK or dV
// alone for lss-basic), each t[j] holding 2T rows: the first run's partials
// over every key row, then the second run's. Rank q's part holds the first
// runs' rows of its first chunk, the second runs' of its first chunk and of
// its second (the first runs' are -0.0 there). On return rows [0, len) of
// t[j] are the rank's first chunk (the two sums added: the root of the tree
// over query tiles), rows [len, 2·len) its second.
static int zigzag_reduce_scatter(ts_model *m, int l, float *const *t, int nt) {
  const int N = m->seq->size, r = m->seq->rank, Ckv = m->Ckv, len = m->run_len, T = m->T;
  const int width = nt * Ckv;
  const size_t part = (size_t)len * width, row = (size_t)Ckv * sizeof(float);
  float *pack = m->spbuf;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < 3 * N; i++) {
    const int q = i / 3, which = i % 3, second = which > 0;
    const int64_t from = (int64_t)second * T + (int64_t)chunk_of(N, q, which == 2) * len;
    for (int64_t u = 0; u < len; u++)
      for (int j = 0; j < nt; j++)
        memcpy(pack + (size_t)i * part + (size_t)u * width + (size_t)j * Ckv,
               t[j] + (size_t)(from + u) * Ckv, row);
  }
  int rc = ts_comm_reduce_scatter_tree(m->seq, pack, (size_t)3 * N * part, l);
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

static int zigzag_backward(ts_model *m, int l, uint64_t step) {
  layer_acts *a = ts_layer_acts(m, l);
  int rc;
  if (concat(m) && (rc = concat_backward(m, l, m->datt))) return rc;
  // run k's dQ, and its partials of dK, dV over every key row at row k·T
  ts_attn_shape as = ts_cp_attn_shape(m, l, m->cfg.dropout, step);
  const ts_cp_runs runs = model_runs(m);
  if ((rc = ts_lss_attention_backward(m->be, &m->ws, &as, &runs, m->dq, m->dk, m->dv,
                                      (size_t)m->T * m->Ckv, m->dsum, m->datt, a->q, a->k, a->v,
                                      a->att, a->lse)))
    return rc;
  if (basic(m)) { // dK and dV apart
    if ((rc = zigzag_reduce_scatter(m, l, &m->dk, 1))) return rc;
    return zigzag_reduce_scatter(m, l, &m->dv, 1);
  }
  float *both[2] = {m->dk, m->dv};
  return zigzag_reduce_scatter(m, l, both, 2);
}

const ts_cp ts_cp_lss = {
    .name = "lss",
    .summary = "fused all-gather, distributed Q, gradient averaging: 2 collectives per layer",
    .exact = 1,
    .sizes = lss_sizes,
    .attn_forward = lss_attn_forward,
    .attn_backward = lss_attn_backward,
    .opts = &LSS,
};

const ts_cp ts_cp_lss_fused = {
    .name = "lss-fused",
    .summary = "LSS ablation: + concatenation of the attention outputs: 4 per layer",
    .exact = 1,
    .sizes = lss_sizes,
    .attn_forward = lss_attn_forward,
    .attn_backward = lss_attn_backward,
    .opts = &LSS_FUSED,
};

const ts_cp ts_cp_lss_basic = {
    .name = "lss-basic",
    .summary = "LSS ablation: K and V gathered separately + concatenation: 6 per layer",
    .exact = 1,
    .sizes = lss_sizes,
    .attn_forward = lss_attn_forward,
    .attn_backward = lss_attn_backward,
    .opts = &LSS_BASIC,
};

// The balanced three differ in their options alone (basic() and concat() read them).
#define ZIGZAG(NAME, SUMMARY, OPTS)                                                             \
  {                                                                                             \
    .name = NAME, .summary = SUMMARY, .exact = 1, .host_only = 1, .run_partials = 1,            \
    .check = zigzag_check, .positions = ts_cp_zigzag_positions, .sizes = zigzag_sizes,          \
    .create = zigzag_create, .bytes = zigzag_bytes, .destroy = zigzag_destroy,                  \
    .attn_forward = zigzag_forward, .attn_backward = zigzag_backward, .opts = &OPTS,            \
  }
const ts_cp ts_cp_lss_zigzag =
    ZIGZAG("lss-zigzag", "LSS balanced: chunks r and 2N-1-r of 2N, the same 2 collectives per layer",
           LSS);
const ts_cp ts_cp_lss_fused_zigzag =
    ZIGZAG("lss-fused-zigzag", "lss-fused balanced as lss-zigzag: 4 per layer", LSS_FUSED);
const ts_cp ts_cp_lss_basic_zigzag =
    ZIGZAG("lss-basic-zigzag", "lss-basic balanced as lss-zigzag: 6 per layer", LSS_BASIC);

