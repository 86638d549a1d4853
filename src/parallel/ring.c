// Ring attention (ring.h).
#include "parallel/ring.h"

#include <stdlib.h>
#include <string.h>

#include "mem.h"
#include "parallel/cp.h"

// Position of run k of rank q (ring: one run; ring-zigzag: chunks q, 2N-1-q).
static int run_at(const ts_model *m, int q, int k) {
  ts_cp_runs runs;
  ts_cp_positions(m->cp, m->seq->size, q, m->T, &runs);
  return runs.pos[k];
}

// Queries of this rank's run qi against keys of run kj of rank src.
static ts_attn_shape pair_shape(const ts_model *m, int l, float p, uint64_t step, int qi, int src,
                                int kj, int ldkv) {
  ts_attn_shape as = {.B = 1, .T = m->T, .H = m->H, .dh = m->dh, .tile = m->cfg.tile,
                      .dropout = p, .seed = m->cfg.seed, .step = step,
                      .index_base = ts_model_attn_base(m, l), .Tq = m->run_len,
                      .q0 = m->run_pos[qi], .Tk = m->run_len, .k0 = run_at(m, src, kj),
                      .Hkv = m->Hkv, .ldkv = ldkv};
  return as;
}

// Keys of that run are not all in the queries' future.
static int visible(const ts_model *m, int qi, int src, int kj) {
  return run_at(m, src, kj) <= m->run_pos[qi];
}

static int hop(ts_model *m, int l, float *send, float *recv, size_t floats) {
  const int N = m->seq->size, r = m->seq->rank;
  return ts_comm_sendrecv(m->seq, send, floats * sizeof(float), (r + 1) % N, recv,
                          floats * sizeof(float), (r + N - 1) % N, l);
}

// The rank's own Q, K, V rows and the output (and lse), live through the block.
static size_t own_bytes(const ts_model *m) {
  return ((size_t)2 * m->C + 2 * (size_t)m->Ckv + m->H) * m->Tl * sizeof(float);
}

// The layout of the travelling block and of the lse: rows of [K | V] (and
// [dK | dV] in backward), run after run; the lse of run k at k·H·run_len,
// (H, run_len).
int ring_forward(ts_model *m, int l, uint64_t step, float p) {
  const int N = m->seq->size, r = m->seq->rank, Tl = m->Tl, C = m->C, Ckv = m->Ckv;
  const int len = m->run_len, H = m->H;
  layer_acts *a = ts_layer_acts(m, l);
  ts_mem_phase(TS_PHASE_ATTN_FWD);
  ts_mem_hold(own_bytes(m));
  const size_t nblk = (size_t)Tl * 2 * Ckv;
  float *cur = ts_mem_alloc(nblk * sizeof(float)), *nxt = ts_mem_alloc(nblk * sizeof(float));
  float *ob = ts_mem_alloc((size_t)len * C * sizeof(float));
  float *lb = ts_mem_alloc((size_t)H * len * sizeof(float));
  int rc = TS_OK, have[2] = {0, 0};
  if (!cur || !nxt || !ob || !lb) rc = ts_fail(TS_ERUNTIME, "out of memory (ring attention)");
  for (int64_t t = 0; t < Tl && !rc; t++) { // the block: rows of [K | V]
    memcpy(cur + (size_t)t * 2 * Ckv, a->k + (size_t)t * Ckv, (size_t)Ckv * sizeof(float));
    memcpy(cur + (size_t)t * 2 * Ckv + Ckv, a->v + (size_t)t * Ckv, (size_t)Ckv * sizeof(float));
  }
  for (int i = 0; i < N && !rc; i++) {
    const int src = (r + N - i) % N; // whose keys this rank holds now
    for (int qi = 0; qi < m->nrun; qi++)
      for (int kj = 0; kj < m->nrun; kj++) {
        if (!visible(m, qi, src, kj)) continue; // keys all in the queries' future
        ts_attn_shape as = pair_shape(m, l, p, step, qi, src, kj, 2 * Ckv);
        const float *q = a->q + (size_t)qi * len * C, *k = cur + (size_t)kj * len * 2 * Ckv;
        float *out = a->att + (size_t)qi * len * C, *lse = a->lse + (size_t)qi * H * len;
        if (!have[qi]) {
          m->be->attention_forward(&m->ws, out, lse, q, k, k + Ckv, &as);
          have[qi] = 1;
        } else {
          m->be->attention_forward(&m->ws, ob, lb, q, k, k + Ckv, &as);
          m->be->ring_merge(out, lse, ob, lb, len, H, m->dh, C);
        }
      }
    if (i < N - 1) {
      rc = hop(m, l, cur, nxt, nblk);
      float *t = cur;
      cur = nxt;
      nxt = t;
    }
  }
  ts_mem_free(cur);
  ts_mem_free(nxt);
  ts_mem_free(ob);
  ts_mem_free(lb);
  ts_mem_release(own_bytes(m));
  ts_mem_phase(TS_PHASE_NONE);
  return rc;
}

int ring_backward(ts_model *m, int l, uint64_t step) {
  const int N = m->seq->size, r = m->seq->rank, Tl = m->Tl, C = m->C, Ckv = m->Ckv;
  const int len = m->run_len, H = m->H;
  layer_acts *a = ts_layer_acts(m, l);
  // and the gradients: of the output in, of Q, K, V out
  const size_t held = own_bytes(m) + ((size_t)2 * C + 2 * (size_t)Ckv) * Tl * sizeof(float);
  ts_mem_phase(TS_PHASE_ATTN_BWD);
  ts_mem_hold(held);
  const size_t w = (size_t)4 * Ckv, nblk = (size_t)Tl * w; // rows of [K | V | dK | dV]
  float *cur = ts_mem_alloc(nblk * sizeof(float)), *nxt = ts_mem_alloc(nblk * sizeof(float));
  float *part = ts_mem_alloc((size_t)len * w * sizeof(float)); // a run's dK, dV (same layout)
  float *dqb = ts_mem_alloc((size_t)len * C * sizeof(float));
  float *dsum = ts_mem_alloc((size_t)H * len * sizeof(float));
  int rc = TS_OK;
  if (!cur || !nxt || !part || !dqb || !dsum)
    rc = ts_fail(TS_ERUNTIME, "out of memory (ring attention)");
  for (int64_t t = 0; t < Tl && !rc; t++) {
    float *row = cur + (size_t)t * w;
    memcpy(row, a->k + (size_t)t * Ckv, (size_t)Ckv * sizeof(float));
    memcpy(row + Ckv, a->v + (size_t)t * Ckv, (size_t)Ckv * sizeof(float));
    memset(row + 2 * Ckv, 0, (size_t)2 * Ckv * sizeof(float));
  }
  if (!rc) memset(m->dq, 0, (size_t)Tl * C * sizeof(float));
  for (int i = 0; i < N && !rc; i++) {
    const int src = (r + N - i) % N;
    for (int qi = 0; qi < m->nrun && !rc; qi++)
      for (int kj = 0; kj < m->nrun && !rc; kj++) {
        if (!visible(m, qi, src, kj)) continue;
        ts_attn_shape as = pair_shape(m, l, m->cfg.dropout, step, qi, src, kj, (int)w);
        float *blk = cur + (size_t)kj * len * w;
        const size_t qo = (size_t)qi * len * C;
        if (m->be->attention_backward(&m->ws, dqb, part + 2 * Ckv, part + 3 * Ckv, dsum, m->datt + qo,
                               a->q + qo, blk, blk + Ckv, a->att + qo,
                               a->lse + (size_t)qi * H * len, &as) != 0) {
          rc = ts_fail(TS_ERUNTIME, "out of memory in attention backward");
          break;
        }
        // this pair's terms: dQ into the run's rows, dK, dV into the travelling block
        m->be->add(m->dq + qo, m->dq + qo, dqb, (int64_t)len * C);
        m->be->add_rows(blk + 2 * Ckv, (int)w, blk + 2 * Ckv, (int)w, part + 2 * Ckv, (int)w, len,
                        2 * Ckv);
      }
    if (rc) break;
    // N hops: the block visits every rank and comes home
    rc = hop(m, l, cur, nxt, nblk);
    float *t = cur;
    cur = nxt;
    nxt = t;
  }
  for (int64_t t = 0; t < Tl && !rc; t++) { // home: this rank's own dK, dV
    memcpy(m->dk + (size_t)t * Ckv, cur + (size_t)t * w + 2 * Ckv, (size_t)Ckv * sizeof(float));
    memcpy(m->dv + (size_t)t * Ckv, cur + (size_t)t * w + 3 * Ckv, (size_t)Ckv * sizeof(float));
  }
  ts_mem_free(cur);
  ts_mem_free(nxt);
  ts_mem_free(part);
  ts_mem_free(dqb);
  ts_mem_free(dsum);
  ts_mem_release(held);
  ts_mem_phase(TS_PHASE_NONE);
  return rc;
}

// ---- the strategies (cp.h) ----------------------------------------------------------------
// ring-zigzag: chunks r and 2N-1-r of 2N, so that every rank does the same
// causal work.
static void zigzag_positions(int n, int r, int T, ts_cp_runs *out) {
  const int len = T / (2 * n);
  *out = (ts_cp_runs){.n = 2, .len = len, .pos = {r * len, (2 * n - 1 - r) * len}};
}

static int zigzag_check(const ts_config *cfg, ts_layout *lay) {
  const int N = lay->sp, T = cfg->seq;
  if (T % (2 * N) != 0 || (T / (2 * N)) % cfg->tile != 0 || (T / (2 * N)) % cfg->leaf != 0)
    return ts_fail(TS_EUSAGE,
                   "--sp-mode ring-zigzag with --sp %d: --seq %d must split into %d chunks of "
                   "whole tiles (%d) and leaves (%d)",
                   N, T, 2 * N, cfg->tile, cfg->leaf);
  return TS_OK;
}

// The rank's own rows of Q, K and V; the blocks travel through scratch of
// their own (ts_mem_alloc, tracked).
static void ring_sizes(const ts_model *m, ts_cp_sizes *out) {
  const int64_t N = m->ntok;
  *out = (ts_cp_sizes){.layer_rows = N, .q_rows = N, .kv_rows = N, .dkv_rows = N};
}

static int ring_attn_forward(ts_model *m, int l, uint64_t step, float p) {
  const layer_params *w = &m->p.layer[l];
  layer_acts *a = ts_layer_acts(m, l);
  ts_cp_project_q(m, w, a->q);
  ts_cp_project_kv(m, w, a->k, a->v);
  return ring_forward(m, l, step, p);
}

const ts_cp ts_cp_ring = {
    .name = "ring",
    .summary = "ring attention: key/value blocks passed around the group",
    .exact = 0,
    .sizes = ring_sizes,
    .attn_forward = ring_attn_forward,
    .attn_backward = ring_backward,
};

const ts_cp ts_cp_ring_zigzag = {
    .name = "ring-zigzag",
    .summary = "ring attention on chunks r and 2N-1-r of 2N (balanced causal work)",
    .exact = 0,
    .check = zigzag_check,
    .positions = zigzag_positions,
    .sizes = ring_sizes,
    .attn_forward = ring_attn_forward,
    .attn_backward = ring_backward,
};
