// Ring attention (ring.h).
#include "ring.h"

#include <stdlib.h>
#include <string.h>

#include "backend/mem.h"
#include "cp.h"

// ---- exact ring attention ----------------------------------------------------------------

static int popcount(unsigned x) {
  int n = 0;
  for (; x; x &= x - 1) n++;
  return n;
}

unsigned ring_tree_levels(int c, int p) {
  // ts_tree_push_owned's counter (tree.c) without the data: pushing at
  // position q combines the levels below q's lowest 0 bit into that level.
  unsigned occ = 0;
  for (int q = c; q < p; q++) {
    int k = 0;
    for (; (q >> k) & 1; k++) occ &= ~(1u << k);
    occ |= 1u << k;
  }
  return occ;
}

int ring_tree_push(const ts_backend *be, float *planes, size_t n, int c, int p) {
  const unsigned occ = ring_tree_levels(c, p);
  int top = popcount(occ); // the plane that holds the carry
  // the occupied levels below p's lowest 0 bit are the stack's last planes,
  // lowest level last: each takes the carry as its right operand
  for (int k = 0; (p >> k) & 1; k++)
    if ((occ >> k) & 1u) {
      float *left = planes + (size_t)(top - 1) * n;
      be->add(left, left, planes + (size_t)top * n, (int64_t)n);
      top--;
    }
  return top + 1;
}

// Chunk (the block of place c) that place `at` holds at step i.
static int chunk_at(const ring_geom *g, int at, int i) { return ((at - i) % g->n + g->n) % g->n; }

// Planes (rows · 2·wk floats each) that place `from` sends after step i:
// its block's [K | V] and tree while places after it still need them, then
// the finished [dK | dV] alone on its way home.
static int sent_planes(const ring_geom *g, int from, int i) {
  const int c = chunk_at(g, from, i);
  if (c > from || from == g->n - 1) return 1;
  return 1 + popcount(ring_tree_levels(c, from + 1));
}

// Planes a message buffer needs: the largest message, and room for the
// partial pushed onto the tree it brings.
static int buffer_planes(const ring_geom *g) {
  int most = 1;
  for (int from = 0; from < g->n; from++)
    for (int i = 0; i < g->n; i++) {
      const int k = sent_planes(g, from, i);
      most = k > most ? k : most;
    }
  return most + 1;
}

int ring_exact_planes(const ring_geom *g) { return buffer_planes(g); }

void ring_exact_traffic(const ring_geom *g, ts_comm_count *fwd, ts_comm_count *bwd) {
  const uint64_t plane = (uint64_t)g->rows * 2 * g->wk * sizeof(float);
  const int prev_at = (g->at + g->n - 1) % g->n;
  for (int i = 0; i < g->n - 1; i++) ts_comm_tally(fwd, TS_COMM_SENDRECV, 2 * plane);
  for (int i = 0; i < g->n && g->n > 1; i++)
    ts_comm_tally(bwd, TS_COMM_SENDRECV,
                  (uint64_t)(sent_planes(g, g->at, i) + sent_planes(g, prev_at, i)) * plane);
}

void ring_exact_incall(const ring_geom *g, size_t *fwd, size_t *bwd) {
  const size_t plane = (size_t)g->rows * 2 * g->wk, sums = (size_t)g->as.H * g->rows;
  *fwd = sums * sizeof(float);                                         // lsum
  *bwd = (2 * (size_t)buffer_planes(g) * plane + sums) * sizeof(float); // cur, nxt, dsum
}

static int ring_hop(const ts_attn_io *io, const ring_geom *g, const float *send, size_t sfloats,
                    float *recv, size_t rfloats) {
  return ts_comm_sendrecv(io->seq, send, sfloats * sizeof(float), g->next, recv,
                          rfloats * sizeof(float), g->prev, io->l);
}

void ring_exact_forward_block(const ts_backend *be, ts_ws *ws, const ring_geom *g, int i, int c,
                              const float *q, const float *blk, float *out, float *lse,
                              float *lsum) {
  ts_attn_shape as = g->as;
  as.k0 = c * g->rows;
  as.ldkv = 2 * g->wk;
  be->attention_forward_block(ws, out, lse, lsum, q, blk, blk + g->wk, &as, i == 0, c == 0);
}

int ring_exact_forward(const ts_attn_io *io, const ring_geom *g, const float *q, float *blk[2],
                       float *out, float *lse) {
  const size_t nblk = (size_t)g->rows * 2 * g->wk;
  float *cur = blk[0], *nxt = blk[1];
  // the running sum of the online softmax (the accumulator lives in out and
  // the running max in lse until the last block finishes them)
  float *lsum = ts_mem_alloc((size_t)g->as.H * g->rows * sizeof(float));
  int rc = lsum ? TS_OK : ts_fail(TS_ERUNTIME, "out of memory (ring attention)");
  for (int i = 0; i < g->n && !rc; i++) {
    const int c = chunk_at(g, g->at, i);
    if (c <= g->at) // blocks at, at − 1, …, 0: the serial order of key tiles
      ring_exact_forward_block(io->be, io->ws, g, i, c, q, cur, out, lse, lsum);
    if (i < g->n - 1) {
      rc = ring_hop(io, g, cur, nblk, nxt, nblk);
      float *t = cur;
      cur = nxt;
      nxt = t;
    }
  }
  ts_mem_free(lsum);
  return rc;
}

int ring_exact_backward_block(const ts_backend *be, ts_ws *ws, const ring_geom *g, int i, int c,
                              float *planes, const float *dout, const float *q, const float *out,
                              const float *lse, float *dq, float *dsum) {
  const int wk = g->wk;
  const size_t P = (size_t)g->rows * 2 * wk; // floats of a plane
  const int d = popcount(ring_tree_levels(c, g->at));
  float *stack = planes + P, *part = stack + (size_t)d * P;
  ts_attn_shape as = g->as;
  as.k0 = c * g->rows;
  as.ldkv = 2 * wk;
  as.dq_acc = i > 0; // dQ: block at first, then at − 1, …, 0 (the forward's order)
  if (be->attention_backward(ws, dq, part, part + wk, dsum, dout, q, planes, planes + wk, out,
                             lse, &as) != 0)
    return ts_fail(TS_ERUNTIME, "out of memory in attention backward");
  ring_tree_push(be, stack, P, c, g->at);
  return TS_OK;
}

// The backward's message is a run of planes, each rows · 2·wk floats laid
// out as rows of [K | V] or [dK | dV]: plane 0 the block's keys and values,
// then the stack of its travelling tree, highest level first; a finished
// block is its one plane of [dK | dV].
int ring_exact_backward(const ts_attn_io *io, const ring_geom *g, const float *dout,
                        const float *q, const float *out, const float *lse, const float *k,
                        const float *v, float *dq, float *dk, float *dv, int ldd) {
  const int wk = g->wk, rows = g->rows, nb = buffer_planes(g);
  const size_t P = (size_t)rows * 2 * wk; // floats of a plane
  float *cur = ts_mem_alloc(nb * P * sizeof(float)), *nxt = ts_mem_alloc(nb * P * sizeof(float));
  float *dsum = ts_mem_alloc((size_t)g->as.H * rows * sizeof(float));
  int rc = cur && nxt && dsum ? TS_OK : ts_fail(TS_ERUNTIME, "out of memory (ring attention)");
  for (int64_t t = 0; t < rows && !rc; t++) { // plane 0: the own block
    memcpy(cur + (size_t)t * 2 * wk, k + (size_t)t * wk, (size_t)wk * sizeof(float));
    memcpy(cur + (size_t)t * 2 * wk + wk, v + (size_t)t * wk, (size_t)wk * sizeof(float));
  }
  const float *home = cur; // where the finished own block ends up
  for (int i = 0; i < g->n && !rc; i++) {
    const int c = chunk_at(g, g->at, i);
    const float *send = cur;
    if (c <= g->at) { // this place's queries see block c: add their terms
      float *stack = cur + P;
      if ((rc = ring_exact_backward_block(io->be, io->ws, g, i, c, cur, dout, q, out, lse, dq,
                                          dsum)))
        break;
      if (g->at == g->n - 1) send = stack; // the tree is complete: [dK | dV] alone
      home = stack;
    }
    if (g->n == 1) break; // one place: the block never leaves
    // n hops: every block visits every place and comes home
    const int prev_at = (g->at + g->n - 1) % g->n;
    rc = ring_hop(io, g, send, (size_t)sent_planes(g, g->at, i) * P, nxt,
                  (size_t)sent_planes(g, prev_at, i) * P);
    float *t = cur;
    cur = nxt;
    nxt = t;
    home = cur;
  }
  for (int64_t t = 0; t < rows && !rc; t++) { // the own rows' finished dK, dV
    memcpy(dk + (size_t)t * ldd, home + (size_t)t * 2 * wk, (size_t)wk * sizeof(float));
    memcpy(dv + (size_t)t * ldd, home + (size_t)t * 2 * wk + wk, (size_t)wk * sizeof(float));
  }
  ts_mem_free(cur);
  ts_mem_free(nxt);
  ts_mem_free(dsum);
  return rc;
}

// ---- tolerance ring attention (--fast, ring-zigzag) --------------------------------------
// Position of run k of rank q (ring: one run; ring-zigzag: chunks q, 2N-1-q).
static int run_at(const ts_attn_io *io, int q, int k) {
  ts_cp_runs runs;
  ts_cp_positions(io->cp, io->seq->size, q, io->T, &runs);
  return runs.pos[k];
}

// Queries of this rank's run qi against keys of run kj of rank src.
static ts_attn_shape pair_shape(const ts_attn_io *io, int qi, int src, int kj, int ldkv) {
  ts_attn_shape as = io->shape;
  as.B = 1;
  as.Tq = as.Tk = io->runs.len;
  as.q0 = io->runs.pos[qi];
  as.k0 = run_at(io, src, kj);
  as.ldkv = ldkv;
  return as;
}

// Keys of that run are not all in the queries' future.
static int visible(const ts_attn_io *io, int qi, int src, int kj) {
  return run_at(io, src, kj) <= io->runs.pos[qi];
}

static int hop(const ts_attn_io *io, float *send, float *recv, size_t floats) {
  const int N = io->seq->size, r = io->seq->rank;
  return ts_comm_sendrecv(io->seq, send, floats * sizeof(float), (r + 1) % N, recv,
                          floats * sizeof(float), (r + N - 1) % N, io->l);
}

// The rank's own Q, K, V rows and the output (and lse), live through the block.
static size_t own_bytes(const ts_attn_io *io) {
  return ((size_t)2 * io->C + 2 * (size_t)io->Ckv + io->H) * io->Tl * sizeof(float);
}

// The layout of the travelling block and of the lse: rows of [K | V] (and
// [dK | dV] in backward), run after run; the lse of run k at k·H·run_len,
// (H, run_len).
int ring_forward(const ts_attn_io *io) {
  const int N = io->seq->size, r = io->seq->rank, Tl = io->Tl, C = io->C, Ckv = io->Ckv;
  const int len = io->runs.len, H = io->H;
  ts_mem_phase(TS_PHASE_ATTN_FWD);
  ts_mem_hold(own_bytes(io));
  const size_t nblk = (size_t)Tl * 2 * Ckv;
  float *cur = ts_mem_alloc(nblk * sizeof(float)), *nxt = ts_mem_alloc(nblk * sizeof(float));
  float *ob = ts_mem_alloc((size_t)len * C * sizeof(float));
  float *lb = ts_mem_alloc((size_t)H * len * sizeof(float));
  int rc = TS_OK, have[2] = {0, 0};
  if (!cur || !nxt || !ob || !lb) rc = ts_fail(TS_ERUNTIME, "out of memory (ring attention)");
  for (int64_t t = 0; t < Tl && !rc; t++) { // the block: rows of [K | V]
    memcpy(cur + (size_t)t * 2 * Ckv, io->k + (size_t)t * Ckv, (size_t)Ckv * sizeof(float));
    memcpy(cur + (size_t)t * 2 * Ckv + Ckv, io->v + (size_t)t * Ckv, (size_t)Ckv * sizeof(float));
  }
  for (int i = 0; i < N && !rc; i++) {
    const int src = (r + N - i) % N; // whose keys this rank holds now
    for (int qi = 0; qi < io->runs.n; qi++)
      for (int kj = 0; kj < io->runs.n; kj++) {
        if (!visible(io, qi, src, kj)) continue; // keys all in the queries' future
        ts_attn_shape as = pair_shape(io, qi, src, kj, 2 * Ckv);
        const float *q = io->q + (size_t)qi * len * C, *k = cur + (size_t)kj * len * 2 * Ckv;
        float *out = io->att + (size_t)qi * len * C, *lse = io->lse + (size_t)qi * H * len;
        if (!have[qi]) {
          io->be->attention_forward(io->ws, out, lse, q, k, k + Ckv, &as);
          have[qi] = 1;
        } else {
          io->be->attention_forward(io->ws, ob, lb, q, k, k + Ckv, &as);
          io->be->ring_merge(out, lse, ob, lb, len, H, io->dh, C);
        }
      }
    if (i < N - 1) {
      rc = hop(io, cur, nxt, nblk);
      float *t = cur;
      cur = nxt;
      nxt = t;
    }
  }
  ts_mem_free(cur);
  ts_mem_free(nxt);
  ts_mem_free(ob);
  ts_mem_free(lb);
  ts_mem_release(own_bytes(io));
  ts_mem_phase(TS_PHASE_NONE);
  return rc;
}

int ring_backward(const ts_attn_io *io) {
  const int N = io->seq->size, r = io->seq->rank, Tl = io->Tl, C = io->C, Ckv = io->Ckv;
  const int len = io->runs.len, H = io->H;
  // and the gradients: of the output in, of Q, K, V out
  const size_t held = own_bytes(io) + ((size_t)2 * C + 2 * (size_t)Ckv) * Tl * sizeof(float);
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
    memcpy(row, io->k + (size_t)t * Ckv, (size_t)Ckv * sizeof(float));
    memcpy(row + Ckv, io->v + (size_t)t * Ckv, (size_t)Ckv * sizeof(float));
    memset(row + 2 * Ckv, 0, (size_t)2 * Ckv * sizeof(float));
  }
  if (!rc) memset(io->dq, 0, (size_t)Tl * C * sizeof(float));
  for (int i = 0; i < N && !rc; i++) {
    const int src = (r + N - i) % N;
    for (int qi = 0; qi < io->runs.n && !rc; qi++)
      for (int kj = 0; kj < io->runs.n && !rc; kj++) {
        if (!visible(io, qi, src, kj)) continue;
        ts_attn_shape as = pair_shape(io, qi, src, kj, (int)w);
        float *blk = cur + (size_t)kj * len * w;
        const size_t qo = (size_t)qi * len * C;
        if (io->be->attention_backward(io->ws, dqb, part + 2 * Ckv, part + 3 * Ckv, dsum, io->datt + qo,
                               io->q + qo, blk, blk + Ckv, io->att + qo,
                               io->lse + (size_t)qi * H * len, &as) != 0) {
          rc = ts_fail(TS_ERUNTIME, "out of memory in attention backward");
          break;
        }
        // this pair's terms: dQ into the run's rows, dK, dV into the travelling block
        io->be->add(io->dq + qo, io->dq + qo, dqb, (int64_t)len * C);
        io->be->add_rows(blk + 2 * Ckv, (int)w, blk + 2 * Ckv, (int)w, part + 2 * Ckv, (int)w, len,
                        2 * Ckv);
      }
    if (rc) break;
    // N hops: the block visits every rank and comes home
    rc = hop(io, cur, nxt, nblk);
    float *t = cur;
    cur = nxt;
    nxt = t;
  }
  for (int64_t t = 0; t < Tl && !rc; t++) { // home: this rank's own dK, dV
    memcpy(io->dk + (size_t)t * Ckv, cur + (size_t)t * w + 2 * Ckv, (size_t)Ckv * sizeof(float));
    memcpy(io->dv + (size_t)t * Ckv, cur + (size_t)t * w + 3 * Ckv, (size_t)Ckv * sizeof(float));
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

// ---- the strategies (strategy.h) ----------------------------------------------------------
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
static void ring_sizes(const ts_attn_io *io, ts_cp_sizes *out) {
  const int64_t N = io->ntok;
  *out = (ts_cp_sizes){.layer_rows = N, .q_rows = N, .kv_rows = N, .dkv_rows = N};
}

// The ring of the sequence group for exact ring attention: place r is rank r.
static ring_geom ring_geometry(const ts_attn_io *io) {
  const int N = io->seq->size, r = io->seq->rank;
  ring_geom g = {.n = N, .at = r, .next = (r + 1) % N, .prev = (r + N - 1) % N, .rows = io->Tl,
                 .wk = io->Ckv, .as = io->shape};
  g.as.B = 1;
  g.as.Tk = io->Tl;
  return g;
}

static int exact_forward(const ts_attn_io *io) {
  const int Tl = io->Tl, Ckv = io->Ckv;
  const ring_geom g = ring_geometry(io);
  ts_mem_phase(TS_PHASE_ATTN_FWD);
  ts_mem_hold(own_bytes(io));
  const size_t nblk = (size_t)Tl * 2 * Ckv;
  float *blk[2] = {ts_mem_alloc(nblk * sizeof(float)), ts_mem_alloc(nblk * sizeof(float))};
  int rc = blk[0] && blk[1] ? TS_OK : ts_fail(TS_ERUNTIME, "out of memory (ring attention)");
  for (int64_t t = 0; t < Tl && !rc; t++) { // the block: rows of [K | V]
    memcpy(blk[0] + (size_t)t * 2 * Ckv, io->k + (size_t)t * Ckv, (size_t)Ckv * sizeof(float));
    memcpy(blk[0] + (size_t)t * 2 * Ckv + Ckv, io->v + (size_t)t * Ckv, (size_t)Ckv * sizeof(float));
  }
  if (!rc) rc = ring_exact_forward(io, &g, io->q, blk, io->att, io->lse);
  ts_mem_free(blk[0]);
  ts_mem_free(blk[1]);
  ts_mem_release(own_bytes(io));
  ts_mem_phase(TS_PHASE_NONE);
  return rc;
}

static int exact_backward(const ts_attn_io *io) {
  // and the gradients: of the output in, of Q, K, V out
  const size_t held = own_bytes(io) + ((size_t)2 * io->C + 2 * (size_t)io->Ckv) * io->Tl * sizeof(float);
  const ring_geom g = ring_geometry(io);
  ts_mem_phase(TS_PHASE_ATTN_BWD);
  ts_mem_hold(held);
  int rc = ring_exact_backward(io, &g, io->datt, io->q, io->att, io->lse, io->k, io->v, io->dq, io->dk,
                               io->dv, io->Ckv);
  ts_mem_release(held);
  ts_mem_phase(TS_PHASE_NONE);
  return rc;
}

static void project(const ts_attn_io *io) {
  ts_cp_project_q(io, io->q);
  ts_cp_project_kv(io, io->k, io->v);
}

// ring: exact; --fast keeps the log-sum-exp merge (the tolerance tier).
static int ring_attn_forward(const ts_attn_io *io) {
  project(io);
  return io->cfg->fast ? ring_forward(io) : exact_forward(io);
}

static int ring_attn_backward(const ts_attn_io *io) {
  return io->cfg->fast ? ring_backward(io) : exact_backward(io);
}

// ring-zigzag: the merge.
static int zigzag_attn_forward(const ts_attn_io *io) {
  project(io);
  return ring_forward(io);
}

// What a layer moves (strategy.h `traffic`), each hop a send and a receive
// of a block of Tl rows: forward N − 1 hops of [K | V]; backward N hops of
// [K | V | dK | dV] (the merge), or exactly the planes ring_exact_backward
// sends and receives (a block with its travelling tree).
static void traffic(const ts_attn_io *io, int merge, ts_comm_count *fwd, ts_comm_count *bwd) {
  const int N = io->seq->size;
  const size_t plane = (size_t)io->Tl * 2 * io->Ckv * sizeof(float);
  const ring_geom g = ring_geometry(io);
  if (!merge) {
    ring_exact_traffic(&g, fwd, bwd);
    return;
  }
  for (int i = 0; i < N - 1; i++) ts_comm_tally(fwd, TS_COMM_SENDRECV, 2 * plane);
  for (int i = 0; i < N; i++) ts_comm_tally(bwd, TS_COMM_SENDRECV, 4 * plane);
}

// What its calls take (strategy.h `incall`): exact, the two blocks of
// [K | V] forward and ring_exact's own; the merge (ring_forward,
// ring_backward), the travelling blocks and a run's output, lse, and
// backward terms. No packing: its messages are plain send/receives.
static void incall(const ts_attn_io *io, int merge, ts_cp_incall *out) {
  const size_t Tl = (size_t)io->Tl, len = (size_t)io->runs.len, C = (size_t)io->C;
  const size_t Ckv = (size_t)io->Ckv, H = (size_t)io->H, f = sizeof(float);
  *out = (ts_cp_incall){0, 0, 0};
  if (merge) {
    out->fwd = (2 * Tl * 2 * Ckv + len * C + H * len) * f;
    out->bwd = (2 * Tl * 4 * Ckv + len * 4 * Ckv + len * C + H * len) * f;
    return;
  }
  ring_geom g = ring_geometry(io);
  g.as.H = io->H; // (the geometry alone: no call's shape)
  ring_exact_incall(&g, &out->fwd, &out->bwd);
  out->fwd += 2 * Tl * 2 * Ckv * f;
}

static void ring_incall(const ts_attn_io *io, const ts_seq_shard *sp, ts_cp_incall *out) {
  incall(io, io->cfg->fast, out);
}

static void zigzag_incall(const ts_attn_io *io, const ts_seq_shard *sp, ts_cp_incall *out) {
  incall(io, 1, out);
}

static void ring_traffic(const ts_attn_io *io, const ts_seq_shard *sp, ts_comm_count *fwd,
                         ts_comm_count *bwd) {
  traffic(io, io->cfg->fast, fwd, bwd);
}

static void zigzag_traffic(const ts_attn_io *io, const ts_seq_shard *sp, ts_comm_count *fwd,
                           ts_comm_count *bwd) {
  traffic(io, 1, fwd, bwd);
}

const ts_cp ts_cp_ring = {
    .name = "ring",
    .summary = "ring attention: key/value blocks passed around the group in the serial order",
    .exact = 1,
    .sizes = ring_sizes,
    .attn_forward = ring_attn_forward,
    .attn_backward = ring_attn_backward,
    .traffic = ring_traffic,
    .incall = ring_incall,
};

const ts_cp ts_cp_ring_zigzag = {
    .name = "ring-zigzag",
    .summary = "ring attention on chunks r and 2N-1-r of 2N (balanced causal work)",
    .exact = 0,
    .check = zigzag_check,
    .positions = ts_cp_zigzag_positions,
    .sizes = ring_sizes,
    .attn_forward = zigzag_attn_forward,
    .attn_backward = ring_backward,
    .traffic = zigzag_traffic,
    .incall = zigzag_incall,
};
