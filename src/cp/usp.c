// USP: head-parallel attention inside groups, ring attention across them
// (docs/ALGORITHMS.md §4; the UPipe paper's "Ulysses × ring" hybrid, after
// Fang & Zhao's unified sequence parallelism).
//
// The N ranks of the sequence group form R = N/U Ulysses groups of U
// neighbouring ranks: rank r = g·U + u is member u of group g. Rank r holds
// positions [r·Tl, (r+1)·Tl), so group g holds the block [g·Tb, (g+1)·Tb)
// of Tb = U·Tl positions.
//   forward   Q, K, V of the rank's rows (every head, the serial shapes) ·
//             one all-to-all inside the group: member u gets heads
//             [u·H/U, (u+1)·H/U) (and their key/value heads) of the group's
//             whole block · exact ring attention of those heads across the R
//             groups (member u of group g talks to member u of groups g ± 1;
//             ring.h): the group's queries walk the blocks g, g − 1, …, 0
//             carrying the online softmax · the output back to the rank's
//             rows by an all-to-all.
//   backward  dO and O to heads · the ring backward: the blocks go round the
//             groups again with the travelling tree of their dK, dV, and come
//             home finished · dQ, dK, dV back to the rank's rows.
// Per layer and sequence, in messages between pairs (sendrecv, counted):
// forward 2(U−1) for the all-to-alls and R−1 ring hops, backward 2(U−1) and R
// (ring.h's messages: [K | V] forward; backward [K | V] and the tree while
// groups ahead still need them, then the finished [dK | dV]).
// The all-to-alls are exchanges of U−1 rounds over the sequence group
// (round k: to member u+k, from member u−k), so no sub-communicator is made.
//
// U = N is Ulysses (one block), U = 1 is ring attention. The exchanges only
// move bytes and the ring part is exact ring attention, so USP is in the
// exact tier, like both; --fast merges the groups' blocks by their
// log-sum-exp instead (ring's tolerance version).
// What the rank keeps for backward is the size of its own rows' Q, K, V and
// lse, held head-sharded: Q' (Tb rows × H/U heads) in the layer's q buffer,
// K', V' in k, v.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/mem.h"
#include "cp.h"
#include "ring.h"

typedef struct {
  int U, R;  // group size, groups
  int g, u;  // this rank's group and place in it
} usp;

// The default degree: the largest U below N dividing N and the heads (so
// both the head-parallel and the ring parts exist when they can).
static int default_degree(int N, int H, int Hkv) {
  for (int U = N / 2; U > 1; U--)
    if (N % U == 0 && H % U == 0 && Hkv % U == 0) return U;
  return 1;
}

static int usp_check(const ts_config *cfg, ts_layout *lay) {
  const int N = lay->sp, H = cfg->n_head, Hkv = cfg->n_kv_head > 0 ? cfg->n_kv_head : H;
  if (lay->ulysses_degree == 0) lay->ulysses_degree = default_degree(N, H, Hkv);
  const int U = lay->ulysses_degree;
  if (U < 1 || N % U != 0)
    return ts_fail(TS_EUSAGE, "--ulysses-degree %d: must divide --sp %d (groups of U ranks)", U,
                   N);
  if (H % U != 0 || Hkv % U != 0)
    return ts_fail(TS_EUSAGE,
                   "--sp-mode usp with --ulysses-degree %d: the %d heads and %d key/value heads "
                   "must divide by %d (each rank of a group takes whole heads)",
                   U, H, Hkv, U);
  return TS_OK;
}

static void usp_sizes(const ts_attn_io *io, ts_cp_sizes *out) {
  const int64_t N = io->ntok;
  *out = (ts_cp_sizes){.layer_rows = N, .q_rows = N, .kv_rows = N, .dkv_rows = N};
}

// The settings of rank io->seq->rank under a layout (sp).
static usp settings(const ts_attn_io *io, const ts_seq_shard *sp) {
  const int N = io->seq->size;
  usp s;
  s.U = sp->ulysses_degree > 0 ? sp->ulysses_degree : default_degree(N, io->H, io->Hkv);
  s.R = N / s.U;
  s.g = io->seq->rank / s.U;
  s.u = io->seq->rank % s.U;
  return s;
}

static int usp_create(const ts_attn_io *io, const ts_seq_shard *sp, void **state) {
  usp *s = malloc(sizeof *s);
  if (!s) return ts_fail(TS_ERUNTIME, "out of memory");
  *s = settings(io, sp);
  *state = s;
  return TS_OK;
}

static void usp_destroy(const ts_attn_io *io) { free(io->state); }

static void usp_describe(const ts_layout *lay, char *buf, size_t cap) {
  snprintf(buf, cap, "-U%d", lay->ulysses_degree);
}

// ---- the all-to-all inside a group -----------------------------------------------------
// One tensor of an exchange: `rows` is the rank's Tl rows (row stride ld),
// member j's heads at columns [j·w, (j+1)·w); `heads` the group's Tb rows of
// this member's w columns (row stride hld), member j's rows at [j·Tl, (j+1)·Tl).
typedef struct {
  float *rows;
  int ld;
  float *heads;
  int hld, w;
} part;

enum { TO_HEADS, TO_ROWS };

// Every part at once, packed row by row into one message per peer.
static int exchange(const ts_attn_io *io, part *pt, int np, int dir) {
  const usp *s = io->state;
  const int Tl = io->Tl, base = io->seq->rank - s->u;
  size_t W = 0;
  for (int i = 0; i < np; i++) W += (size_t)pt[i].w;
  float *sb = ts_mem_alloc((size_t)Tl * W * sizeof(float));
  float *rb = ts_mem_alloc((size_t)Tl * W * sizeof(float));
  int rc = !sb || !rb ? ts_fail(TS_ERUNTIME, "out of memory (USP exchange)") : TS_OK;
  for (int k = 0; k < s->U && !rc; k++) {
    const int to = (s->u + k) % s->U, from = (s->u + s->U - k) % s->U;
    for (int64_t t = 0; t < Tl; t++) { // pack what `to` gets
      float *dst = sb + (size_t)t * W;
      for (int i = 0; i < np; i++) {
        const part *p = &pt[i];
        const float *src = dir == TO_HEADS ? p->rows + (size_t)t * p->ld + (size_t)to * p->w
                                           : p->heads + ((size_t)to * Tl + t) * p->hld;
        memcpy(dst, src, (size_t)p->w * sizeof(float));
        dst += p->w;
      }
    }
    const float *got = sb;
    if (k > 0) {
      const size_t bytes = (size_t)Tl * W * sizeof(float);
      rc = ts_comm_sendrecv(io->seq, sb, bytes, base + to, rb, bytes, base + from, io->l);
      got = rb;
    }
    for (int64_t t = 0; t < Tl && !rc; t++) { // unpack what `from` sent
      const float *src = got + (size_t)t * W;
      for (int i = 0; i < np; i++) {
        const part *p = &pt[i];
        float *dst = dir == TO_HEADS ? p->heads + ((size_t)from * Tl + t) * p->hld
                                     : p->rows + (size_t)t * p->ld + (size_t)from * p->w;
        memcpy(dst, src, (size_t)p->w * sizeof(float));
        src += p->w;
      }
    }
  }
  ts_mem_free(sb);
  ts_mem_free(rb);
  return rc;
}

// ---- the ring across groups ------------------------------------------------------------
// The shape of this member's heads of the group's queries against the keys
// of group src's block; ldkv: the row stride of the travelling block.
static ts_attn_shape block_shape(const ts_attn_io *io, int src, int ldkv) {
  const usp *s = io->state;
  const int Tb = s->U * io->Tl, Hu = io->H / s->U;
  ts_attn_shape as = {.B = 1, .T = io->T, .H = Hu, .dh = io->dh, .tile = io->cfg->tile,
                      .dropout = io->p, .seed = io->cfg->seed, .step = io->step,
                      .index_base = io->shape.index_base, .Tq = Tb, .q0 = s->g * Tb,
                      .Tk = Tb, .k0 = src * Tb, .h0 = s->u * Hu, .Hg = io->H,
                      .Hkv = io->Hkv / s->U, .ldq = Hu * io->dh, .ldkv = ldkv,
                      .ldo = Hu * io->dh};
  return as;
}

// The ring across the groups for exact ring attention (ring.h): place g is
// group g, and this member talks to member u of the groups g ± 1.
static ring_geom group_ring(const ts_attn_io *io) {
  const usp *s = io->state;
  const int N = io->seq->size, r = io->seq->rank;
  ring_geom g = {.n = s->R, .at = s->g, .next = (r + s->U) % N, .prev = (r + N - s->U) % N,
                 .rows = s->U * io->Tl, .wk = (io->Hkv / s->U) * io->dh,
                 .as = block_shape(io, 0, 0)};
  return g;
}

// One hop round the groups: to member u of group g+1, from group g−1.
static int hop(const ts_attn_io *io, float *send, float *recv, size_t floats) {
  const usp *s = io->state;
  const int N = io->seq->size, r = io->seq->rank;
  return ts_comm_sendrecv(io->seq, send, floats * sizeof(float), (r + s->U) % N, recv,
                          floats * sizeof(float), (r + N - s->U) % N, io->l);
}

static int usp_attn_forward(const ts_attn_io *io) {
  const usp *s = io->state;
  const int Tl = io->Tl, C = io->C, Ckv = io->Ckv, dh = io->dh, Tb = s->U * Tl;
  const int Hu = io->H / s->U, wq = Hu * dh, wk = (io->Hkv / s->U) * dh;
  ts_mem_phase(TS_PHASE_ATTN_FWD);
  float *q = ts_mem_alloc((size_t)Tl * C * sizeof(float));
  float *k = ts_mem_alloc((size_t)Tl * Ckv * sizeof(float));
  float *v = ts_mem_alloc((size_t)Tl * Ckv * sizeof(float));
  float *cur = ts_mem_alloc((size_t)Tb * 2 * wk * sizeof(float)); // the block: rows of [K' | V']
  float *nxt = ts_mem_alloc((size_t)Tb * 2 * wk * sizeof(float));
  float *o = ts_mem_alloc((size_t)Tb * wq * sizeof(float)); // O' (Tb, wq)
  // --fast: a block's own output and lse, merged into o's
  const int fast = io->cfg->fast;
  float *ob = fast ? ts_mem_alloc((size_t)Tb * wq * sizeof(float)) : NULL;
  float *lb = fast ? ts_mem_alloc((size_t)Hu * Tb * sizeof(float)) : NULL;
  int rc = !q || !k || !v || !cur || !nxt || !o || (fast && (!ob || !lb))
               ? ts_fail(TS_ERUNTIME, "out of memory (USP attention)")
               : TS_OK;
  if (!rc) {
    // the rank's rows, every head, as the serial model projects them
    ts_cp_project_q(io, q);
    ts_cp_project_kv(io, k, v);
    // to heads: Q' kept in the layer's q, K', V' in its k, v and in the block
    part pt[] = {{q, C, io->q, wq, wq}, {k, Ckv, cur, 2 * wk, wk}, {v, Ckv, cur + wk, 2 * wk, wk}};
    rc = exchange(io, pt, 3, TO_HEADS);
  }
  if (!rc)
    for (int64_t t = 0; t < Tb; t++) {
      memcpy(io->k + (size_t)t * wk, cur + (size_t)t * 2 * wk, (size_t)wk * sizeof(float));
      memcpy(io->v + (size_t)t * wk, cur + (size_t)t * 2 * wk + wk, (size_t)wk * sizeof(float));
    }
  if (!rc && !fast) { // the ring across the groups, exact (ring.h)
    const ring_geom rg = group_ring(io);
    float *blk[2] = {cur, nxt};
    rc = ring_exact_forward(io, &rg, io->q, blk, o, io->lse);
  }
  // --fast: at hop i the block of group g − i, visible unless it wrapped, merged
  for (int i = 0; i < s->R && !rc && fast; i++) {
    const int src = (s->g + s->R - i) % s->R;
    if (src <= s->g) {
      ts_attn_shape as = block_shape(io, src, 2 * wk);
      if (i == 0) {
        io->be->attention_forward(io->ws, o, io->lse, io->q, cur, cur + wk, &as);
      } else {
        io->be->attention_forward(io->ws, ob, lb, io->q, cur, cur + wk, &as);
        io->be->ring_merge(o, io->lse, ob, lb, Tb, Hu, dh, wq);
      }
    }
    if (i < s->R - 1) {
      rc = hop(io, cur, nxt, (size_t)Tb * 2 * wk);
      float *t = cur;
      cur = nxt;
      nxt = t;
    }
  }
  if (!rc) { // the output back to the rank's rows
    part pt[] = {{io->att, C, o, wq, wq}};
    rc = exchange(io, pt, 1, TO_ROWS);
  }
  ts_mem_free(q); ts_mem_free(k); ts_mem_free(v);
  ts_mem_free(cur); ts_mem_free(nxt);
  ts_mem_free(o); ts_mem_free(ob); ts_mem_free(lb);
  ts_mem_phase(TS_PHASE_NONE);
  return rc;
}

static int usp_attn_backward(const ts_attn_io *io) {
  const usp *s = io->state;
  const int Tl = io->Tl, C = io->C, Ckv = io->Ckv, dh = io->dh, Tb = s->U * Tl;
  const int Hu = io->H / s->U, wq = Hu * dh, wk = (io->Hkv / s->U) * dh, wb = 4 * wk;
  ts_mem_phase(TS_PHASE_ATTN_BWD);
  float *dO = ts_mem_alloc((size_t)Tb * wq * sizeof(float));
  float *o = ts_mem_alloc((size_t)Tb * wq * sizeof(float));
  float *dq = ts_mem_alloc((size_t)Tb * wq * sizeof(float));
  int rc = !dO || !o || !dq ? ts_fail(TS_ERUNTIME, "out of memory (USP attention)") : TS_OK;
  if (!rc) { // dO' and O' (the forward's output, exchanged again rather than kept)
    part pt[] = {{io->datt, C, dO, wq, wq}, {io->att, C, o, wq, wq}};
    rc = exchange(io, pt, 2, TO_HEADS);
  }
  if (!io->cfg->fast) { // the ring across the groups, exact (ring.h), then dQ, dK, dV to rows
    float *dkv = ts_mem_alloc((size_t)Tb * 2 * wk * sizeof(float)); // rows of [dK' | dV']
    if (!rc && !dkv) rc = ts_fail(TS_ERUNTIME, "out of memory (USP attention)");
    if (!rc) {
      const ring_geom rg = group_ring(io);
      rc = ring_exact_backward(io, &rg, dO, io->q, o, io->lse, io->k, io->v, dq, dkv, dkv + wk,
                               2 * wk);
    }
    if (!rc) {
      part pt[] = {{io->dq, C, dq, wq, wq}, {io->dk, Ckv, dkv, 2 * wk, wk},
                   {io->dv, Ckv, dkv + wk, 2 * wk, wk}};
      rc = exchange(io, pt, 3, TO_ROWS);
    }
    ts_mem_free(dO); ts_mem_free(o); ts_mem_free(dq); ts_mem_free(dkv);
    ts_mem_phase(TS_PHASE_NONE);
    return rc;
  }
  // --fast: [K' | V' | dK' | dV'] round the groups, the blocks' terms added as they come
  float *dqb = ts_mem_alloc((size_t)Tb * wq * sizeof(float));
  float *cur = ts_mem_alloc((size_t)Tb * wb * sizeof(float)); // rows of [K' | V' | dK' | dV']
  float *nxt = ts_mem_alloc((size_t)Tb * wb * sizeof(float));
  float *part_kv = ts_mem_alloc((size_t)Tb * wb * sizeof(float)); // a block's dK', dV' terms
  float *dsum = ts_mem_alloc((size_t)Hu * Tb * sizeof(float));
  if (!rc && (!dqb || !cur || !nxt || !part_kv || !dsum))
    rc = ts_fail(TS_ERUNTIME, "out of memory (USP attention)");
  for (int64_t t = 0; t < Tb && !rc; t++) {
    float *row = cur + (size_t)t * wb;
    memcpy(row, io->k + (size_t)t * wk, (size_t)wk * sizeof(float));
    memcpy(row + wk, io->v + (size_t)t * wk, (size_t)wk * sizeof(float));
    memset(row + 2 * wk, 0, (size_t)2 * wk * sizeof(float));
  }
  if (!rc) memset(dq, 0, (size_t)Tb * wq * sizeof(float));
  for (int i = 0; i < s->R && !rc; i++) {
    const int src = (s->g + s->R - i) % s->R;
    if (src <= s->g) {
      ts_attn_shape as = block_shape(io, src, wb);
      if (io->be->attention_backward(io->ws, dqb, part_kv + 2 * wk, part_kv + 3 * wk, dsum, dO,
                                    io->q, cur, cur + wk, o, io->lse, &as) != 0) {
        rc = ts_fail(TS_ERUNTIME, "out of memory in attention backward");
        break;
      }
      // this block's terms: dQ' summed over the blocks, dK', dV' into the travelling one
      io->be->add(dq, dq, dqb, (int64_t)Tb * wq);
      io->be->add_rows(cur + 2 * wk, wb, cur + 2 * wk, wb, part_kv + 2 * wk, wb, Tb, 2 * wk);
    }
    // R hops: the block visits every group and comes home (R = 1: it never left)
    if (s->R == 1) break;
    rc = hop(io, cur, nxt, (size_t)Tb * wb);
    float *t = cur;
    cur = nxt;
    nxt = t;
  }
  if (!rc) { // dQ, dK, dV back to the rank's rows
    part pt[] = {{io->dq, C, dq, wq, wq}, {io->dk, Ckv, cur + 2 * wk, wb, wk},
                 {io->dv, Ckv, cur + 3 * wk, wb, wk}};
    rc = exchange(io, pt, 3, TO_ROWS);
  }
  ts_mem_free(dO); ts_mem_free(o); ts_mem_free(dq); ts_mem_free(dqb);
  ts_mem_free(cur); ts_mem_free(nxt); ts_mem_free(part_kv); ts_mem_free(dsum);
  ts_mem_phase(TS_PHASE_NONE);
  return rc;
}

// ---- what a layer moves and takes, from the geometry ------------------------------------
// strategy.h `traffic`: forward the exchange to heads of Q, K, V (U − 1
// swaps of the rank's rows of each peer's columns), the ring's hops across
// the groups, the output's exchange back; backward dO and O to heads, the
// ring backward (exact: ring.h's planes; --fast: R hops of [K | V | dK | dV]),
// dQ, dK, dV back.
static void usp_traffic(const ts_attn_io *io, const ts_seq_shard *sp, ts_comm_count *fwd,
                        ts_comm_count *bwd) {
  ts_attn_io at = *io;
  usp s = settings(io, sp);
  at.state = &s;
  const int dh = io->dh, wq = io->H / s.U * dh, wk = io->Hkv / s.U * dh;
  const uint64_t row = (uint64_t)io->Tl * sizeof(float), Tb = (uint64_t)s.U * io->Tl;
  for (int k = 1; k < s.U; k++) { // exchange(): a swap of Tl rows of W columns
    ts_comm_tally(fwd, TS_COMM_SENDRECV, 2 * row * (uint64_t)(wq + 2 * wk));
    ts_comm_tally(fwd, TS_COMM_SENDRECV, 2 * row * (uint64_t)wq);
    ts_comm_tally(bwd, TS_COMM_SENDRECV, 2 * row * (uint64_t)(2 * wq));
  }
  ts_comm_count ring_bwd[TS_COMM_NKINDS] = {{0, 0}};
  if (!io->cfg->fast) {
    const ring_geom rg = group_ring(&at);
    ring_exact_traffic(&rg, fwd, ring_bwd);
  } else {
    for (int i = 0; i < s.R - 1; i++)
      ts_comm_tally(fwd, TS_COMM_SENDRECV, 2 * Tb * 2 * wk * sizeof(float));
    for (int i = 0; i < s.R && s.R > 1; i++)
      ts_comm_tally(ring_bwd, TS_COMM_SENDRECV, 2 * Tb * 4 * wk * sizeof(float));
  }
  // the ring's messages between the two exchanges of the backward (the
  // order of a kind's calls does not change its count)
  for (int k = 0; k < TS_COMM_NKINDS; k++) {
    bwd[k].calls += ring_bwd[k].calls;
    bwd[k].bytes += ring_bwd[k].bytes;
  }
  for (int k = 1; k < s.U; k++)
    ts_comm_tally(bwd, TS_COMM_SENDRECV, 2 * row * (uint64_t)(wq + 2 * wk));
}

// strategy.h `incall`: usp_attn_forward's and usp_attn_backward's buffers
// in their order (exchange()'s two of Tl rows of W columns each, the ring's
// own, ring.h), at their most. No packing: its messages are send/receives.
static void usp_incall(const ts_attn_io *io, const ts_seq_shard *sp, ts_cp_incall *out) {
  ts_attn_io at = *io;
  usp s = settings(io, sp);
  at.state = &s;
  const size_t Tl = (size_t)io->Tl, C = (size_t)io->C, Ckv = (size_t)io->Ckv, dh = io->dh;
  const size_t Tb = (size_t)s.U * Tl, Hu = (size_t)(io->H / s.U), wq = Hu * dh;
  const size_t wk = (size_t)(io->Hkv / s.U) * dh, f = sizeof(float);
  const int fast = io->cfg->fast;
  size_t ring_f = 0, ring_b = 0;
  if (!fast) {
    const ring_geom rg = group_ring(&at);
    ring_exact_incall(&rg, &ring_f, &ring_b);
  }
#define MAX(a, b) ((a) > (b) ? (a) : (b))
  // forward: q, k, v, the two blocks, O' (and --fast's block output, lse); then
  // the exchanges' buffers or the ring's sums
  const size_t fbase = (Tl * C + 2 * Tl * Ckv + 2 * Tb * 2 * wk + Tb * wq) * f +
                       (fast ? (Tb * wq + Hu * Tb) * f : 0);
  out->fwd = fbase + MAX(MAX(2 * Tl * (wq + 2 * wk) * f, ring_f), 2 * Tl * wq * f);
  // backward: dO', O', dQ'; exact: then [dK' | dV'] and the ring's own;
  // --fast: dQ' of a block, three blocks of [K | V | dK | dV], the row sums
  const size_t bbase = 3 * Tb * wq * f, to_heads = 2 * Tl * 2 * wq * f;
  const size_t to_rows = 2 * Tl * (wq + 2 * wk) * f;
  const size_t rest = fast ? (Tb * wq + 3 * Tb * 4 * wk + Hu * Tb) * f + to_rows
                           : Tb * 2 * wk * f + MAX(ring_b, to_rows);
  out->bwd = bbase + MAX(to_heads, rest);
  out->pack = 0;
#undef MAX
}

const ts_cp ts_cp_usp = {
    .name = "usp",
    .summary = "Ulysses inside groups of --ulysses-degree ranks, ring attention across them",
    .exact = 1,
    .check = usp_check,
    .sizes = usp_sizes,
    .create = usp_create,
    .destroy = usp_destroy,
    .attn_forward = usp_attn_forward,
    .attn_backward = usp_attn_backward,
    .traffic = usp_traffic,
    .incall = usp_incall,
    .describe = usp_describe,
    .own_flags = "--ulysses-degree",
};
