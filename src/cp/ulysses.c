// Head-parallel attention: Ulysses and UPipe (ulysses.h).
#include "ulysses.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/mem.h"
#include "cp.h"

// The strategy's settings (io->state): heads per stage (Ulysses: all H in
// one stage) and UPipe's stage schedule.
typedef struct {
  int U, sched;
} headpar;

static const headpar *hp(const ts_attn_io *io) { return io->state; }

typedef headpar_heads stage_heads;

static int n_stages(const ts_attn_io *io) { return io->H / hp(io)->U; }

void headpar_forward_heads(int N, int U, int G, int sched, int s, int c, headpar_heads *h) {
  const int per = U / N;
  h->nq = per;
  h->nkv = 0;
  for (int k = 0; k < per; k++) {
    int q;
    if (sched == TS_UPIPE_GQA) {
      int round = s / G, g = s % G; // round: U groups; stage g: their g-th heads
      q = (round * U + c * per + k) * G + g;
    } else {
      q = s * U + c * per + k;
    }
    h->q[k] = q;
    int kv = q / G, found = -1;
    for (int i = 0; i < h->nkv; i++)
      if (h->kv[i] == kv) found = i;
    if (found < 0) {
      found = h->nkv;
      h->kv[h->nkv++] = kv;
    }
    h->kv_of[k] = found;
  }
}

// Forward stage s (natural or gqa schedule) for rank c.
static void forward_heads(const ts_attn_io *io, int s, int c, stage_heads *h) {
  headpar_forward_heads(io->seq->size, hp(io)->U, io->H / io->Hkv, hp(io)->sched, s, c, h);
}

void headpar_backward_heads(int N, int Ub, int G, int s, int c, headpar_heads *h) {
  const int per = Ub / N;
  h->nq = per;
  h->nkv = per / G;
  for (int k = 0; k < per; k++) {
    h->q[k] = s * Ub + c * per + k;
    h->kv_of[k] = k / G;
  }
  for (int i = 0; i < h->nkv; i++) h->kv[i] = (s * Ub + c * per) / G + i;
}

// Backward stage s (natural order, U_b heads, whole groups per rank).
static void backward_heads(const ts_attn_io *io, int Ub, int s, int c, stage_heads *h) {
  headpar_backward_heads(io->seq->size, Ub, io->H / io->Hkv, s, c, h);
}

static int gcd(int a, int b) { return b ? gcd(b, a % b) : a; }

int headpar_backward_stage(int U, int N, int G) { return U / gcd(U, N * G) * N * G; }

void headpar_stage_attention(const ts_backend *be, ts_ws *ws, const ts_attn_shape *layer,
                             const headpar_heads *mine, int sched, int N, int Tl, int C, int G,
                             const float *slot, size_t block, const float *kc, const float *vc,
                             int nkv, float *o, float *lse) {
  const int per = mine->nq, dh = layer->dh;
  const size_t w = (size_t)per * dh, wkv = (size_t)nkv * dh;
  for (int src = 0; src < N; src++) {
    ts_attn_shape as = *layer;
    as.Tq = Tl;
    as.q0 = src * Tl;
    as.Tk = layer->T;
    as.ldq = C;
    as.ldkv = (int)wkv;
    as.ldo = (int)w;
    float *oseg = o + (size_t)src * Tl * w;
    if (sched == TS_UPIPE_GQA) { // my heads are G·dh apart in the slot: one call each
      for (int k = 0; k < per; k++) {
        as.H = 1;
        as.Hkv = 1;
        as.h0 = mine->q[k];
        const float *q = slot + (size_t)src * block + (size_t)k * G * dh;
        const float *kk = kc + (size_t)mine->kv_of[k] * dh, *vv = vc + (size_t)mine->kv_of[k] * dh;
        be->attention_forward(ws, oseg + (size_t)k * dh, lse, q, kk, vv, &as);
      }
    } else {
      as.H = per;
      as.Hkv = mine->nkv;
      as.h0 = mine->q[0];
      be->attention_forward(ws, oseg, lse, slot + (size_t)src * w, kc, vc, &as);
    }
  }
}

int headpar_stage_backward(const ts_backend *be, ts_ws *ws, const ts_attn_shape *layer, int per,
                           int nkv, int h0, const float *Q, const float *K, const float *V,
                           const float *dO, float *O, float *lse, float *dQ, float *dK,
                           float *dV, float *dsum) {
  ts_attn_shape as = *layer;
  as.H = per;
  as.Hkv = nkv;
  as.h0 = h0;
  // the forward's output and lse, recomputed (same bits), then the backward
  be->attention_forward(ws, O, lse, Q, K, V, &as);
  if (be->attention_backward(ws, dQ, dK, dV, dsum, dO, Q, K, V, O, lse, &as) != 0)
    return ts_fail(TS_ERUNTIME, "out of memory in attention backward");
  return TS_OK;
}

// Projects heads `heads[0..n)` of the rank's rows into out at column k·dh for
// head k (row stride ld) with the serial kernel's shapes (docs/EXACTNESS.md R1);
// RoPE for LLaMA.
static void project(const ts_attn_io *io, float *out, int ld, const float *W, const float *b,
                    const int *heads, int n, int rotate, int nrot_heads) {
  const int dh = io->dh;
  io->be->linear_forward_head_list(out, ld, io->x, W, b, heads, n, io->ntok, io->C, dh, io->cfg->leaf);
  if (rotate && io->rope) io->be->rope_forward(out, io->ntok, io->Tl, io->t0, nrot_heads, dh, ld, io->rope);
}

static ts_attn_shape shape(const ts_attn_io *io) {
  ts_attn_shape as = {.B = 1, .T = io->T, .dh = io->dh, .tile = io->cfg->tile, .dropout = io->p,
                      .seed = io->cfg->seed, .step = io->step,
                      .index_base = io->shape.index_base, .Hg = io->H};
  return as;
}

// ---- forward -----------------------------------------------------------------------------
int headpar_forward(const ts_attn_io *io) {
  const int N = io->seq->size, r = io->seq->rank, U = hp(io)->U, per = U / N, dh = io->dh;
  const int C = io->C, Tl = io->Tl, T = io->T, nu = n_stages(io), G = io->H / io->Hkv;
  const size_t w = (size_t)per * dh;
  float *out = io->att; // the preallocated output: the rank's rows, all heads
  // live through the block: its input X and the output
  ts_mem_phase(TS_PHASE_ATTN_FWD);
  ts_mem_hold(2 * (size_t)Tl * C * sizeof(float));
  float *kc = NULL, *vc = NULL; // head-sharded K', V' (whole sequence) of the round
  int rc = TS_OK, nkv_sent = 0;
  for (int s = 0; s < nu && !rc; s++) {
    stage_heads mine, to[64];
    for (int c = 0; c < N; c++) forward_heads(io, s, c, &to[c]);
    mine = to[r];
    const int send_kv = hp(io)->sched != TS_UPIPE_GQA || s % G == 0;
    const int nkv = to[0].nkv; // the same count for every rank
    // 1. this rank's rows of the stage's query heads, chunk c for rank c
    float *qs = ts_mem_alloc((size_t)Tl * U * dh * sizeof(float));
    if (!qs) { rc = ts_fail(TS_ERUNTIME, "out of memory (UPipe stage buffers)"); break; }
    int qlist[64];
    for (int c = 0; c < N; c++)
      for (int k = 0; k < per; k++) qlist[c * per + k] = to[c].q[k];
    project(io, qs, U * dh, io->wq, io->bq, qlist, U, 1, U);
    // 2. Q' into slot s of the output: block src = src's rows of my heads,
    // stored where the output of src's heads for my rows will go
    ts_block2d sq = {(size_t)Tl, w, (size_t)U * dh, w, 1, 0};
    ts_block2d rq;
    float *slot;
    if (hp(io)->sched == TS_UPIPE_GQA) {
      // the stage's heads (j·G + g) are G·dh apart in the output rows
      rq = (ts_block2d){(size_t)Tl, (size_t)dh, (size_t)C, (size_t)per * G * dh, (size_t)per,
                        (size_t)G * dh};
      slot = out + (size_t)to[0].q[0] * dh;
    } else {
      rq = (ts_block2d){(size_t)Tl, w, (size_t)C, w, 1, 0};
      slot = out + (size_t)s * U * dh;
    }
    rc = ts_comm_alltoall_2d(io->seq, qs, &sq, slot, &rq, io->l);
    ts_mem_free(qs);
    // 3. K', V': the key/value heads each rank needs, over the whole sequence
    if (!rc && send_kv) {
      ts_mem_free(kc);
      ts_mem_free(vc);
      kc = vc = NULL;
      size_t wk = (size_t)nkv * dh;
      float *ks = ts_mem_alloc((size_t)Tl * N * wk * sizeof(float));
      int kvlist[64 * 64];
      for (int c = 0; c < N; c++)
        for (int i = 0; i < nkv; i++) kvlist[c * nkv + i] = to[c].kv[i];
      ts_block2d sk = {(size_t)Tl, wk, (size_t)N * wk, wk, 1, 0};
      ts_block2d rk = {(size_t)Tl, wk, wk, (size_t)Tl * wk, 1, 0};
      if (ks) {
        project(io, ks, N * (int)wk, io->wk, io->bk, kvlist, N * nkv, 1, N * nkv);
        kc = ts_mem_alloc((size_t)T * wk * sizeof(float));
        if (kc) rc = ts_comm_alltoall_2d(io->seq, ks, &sk, kc, &rk, io->l);
      }
      if (ks && kc && !rc) {
        project(io, ks, N * (int)wk, io->wv, io->bv, kvlist, N * nkv, 0, 0);
        vc = ts_mem_alloc((size_t)T * wk * sizeof(float));
        if (vc) rc = ts_comm_alltoall_2d(io->seq, ks, &sk, vc, &rk, io->l);
      }
      ts_mem_free(ks);
      if (!rc && (!ks || !kc || !vc)) rc = ts_fail(TS_ERUNTIME, "out of memory (UPipe stage buffers)");
      nkv_sent = nkv;
    }
    if (rc) break;
    // 4. attention of my heads over the whole sequence, one query segment at
    // a time (segment src's Q' rows sit in slot block src)
    float *o = ts_mem_alloc((size_t)T * w * sizeof(float));
    float *lse = ts_mem_alloc((size_t)per * Tl * sizeof(float));
    if (!o || !lse) {
      ts_mem_free(o);
      ts_mem_free(lse);
      rc = ts_fail(TS_ERUNTIME, "out of memory (UPipe stage buffers)");
      break;
    }
    const ts_attn_shape layer = shape(io);
    headpar_stage_attention(io->be, io->ws, &layer, &mine, hp(io)->sched, N, Tl, C, G, slot,
                            rq.block, kc, vc, nkv_sent, o, lse);
    ts_mem_free(lse);
    // 5. the output back: block c = segment c's rows of my heads, into the
    // slot (Q' is no longer needed)
    ts_block2d so = {(size_t)Tl, w, w, (size_t)Tl * w, 1, 0};
    rc = ts_comm_alltoall_2d(io->seq, o, &so, slot, &rq, io->l);
    ts_mem_free(o);
    if (hp(io)->sched != TS_UPIPE_GQA || s % G == G - 1) {
      ts_mem_free(kc);
      ts_mem_free(vc);
      kc = vc = NULL;
    }
  }
  ts_mem_free(kc);
  ts_mem_free(vc);
  ts_mem_release(2 * (size_t)Tl * C * sizeof(float));
  ts_mem_phase(TS_PHASE_NONE);
  return rc;
}

// ---- backward ----------------------------------------------------------------------------
// Q', K', V' of a backward stage again: projected on the rank's rows, then
// head-sharded (block c of the rank's rows to rank c). Q (T, per·dh), K and V
// (T, nkv·dh) receive the rank's heads over the whole sequence.
static int stage_qkv(const ts_attn_io *io, const stage_heads *to, int per, int nkv, float *Q, float *K,
                     float *V) {
  const int N = io->seq->size, Tl = io->Tl;
  const size_t w = (size_t)per * io->dh, wk = (size_t)nkv * io->dh;
  int qlist[64 * 64], kvlist[64 * 64];
  for (int c = 0; c < N; c++) {
    for (int k = 0; k < per; k++) qlist[c * per + k] = to[c].q[k];
    for (int i = 0; i < nkv; i++) kvlist[c * nkv + i] = to[c].kv[i];
  }
  float *ql = ts_mem_alloc((size_t)Tl * N * w * sizeof(float));
  float *kl = ts_mem_alloc((size_t)Tl * N * wk * sizeof(float));
  int rc = ql && kl ? TS_OK : ts_fail(TS_ERUNTIME, "out of memory (head-parallel backward buffers)");
  ts_block2d sq = {(size_t)Tl, w, (size_t)N * w, w, 1, 0}, rq = {(size_t)Tl, w, w, (size_t)Tl * w, 1, 0};
  ts_block2d sk = {(size_t)Tl, wk, (size_t)N * wk, wk, 1, 0}, rk = {(size_t)Tl, wk, wk, (size_t)Tl * wk, 1, 0};
  if (!rc) {
    project(io, ql, N * (int)w, io->wq, io->bq, qlist, N * per, 1, N * per);
    rc = ts_comm_alltoall_2d(io->seq, ql, &sq, Q, &rq, io->l);
  }
  if (!rc) {
    project(io, kl, N * (int)wk, io->wk, io->bk, kvlist, N * nkv, 1, N * nkv);
    rc = ts_comm_alltoall_2d(io->seq, kl, &sk, K, &rk, io->l);
  }
  if (!rc) {
    project(io, kl, N * (int)wk, io->wv, io->bv, kvlist, N * nkv, 0, 0);
    rc = ts_comm_alltoall_2d(io->seq, kl, &sk, V, &rk, io->l);
  }
  ts_mem_free(ql); // the local projections are sent: their memory goes back
  ts_mem_free(kl);
  return rc;
}

// A backward stage's kernel on the rank's heads (first query head q0) over
// the whole sequence: dO' of the heads in (the output gradient's columns
// [s·Ub·dh, (s+1)·Ub·dh) of every rank's rows, all-to-all), O' and its
// log-sum-exp recomputed, and *dQ (T, per·dh), *dK, *dV (T, nkv·dh) out,
// allocated here for the caller to free.
static int stage_kernel(const ts_attn_io *io, int Ub, int s, int q0, int per, int nkv, const float *Q,
                        const float *K, const float *V, float **dQ, float **dK, float **dV) {
  const int T = io->T, Tl = io->Tl, dh = io->dh;
  const size_t w = (size_t)per * dh, wk = (size_t)nkv * dh;
  float *O = ts_mem_alloc((size_t)T * w * sizeof(float)), *dO = ts_mem_alloc((size_t)T * w * sizeof(float));
  *dQ = ts_mem_alloc((size_t)T * w * sizeof(float));
  *dK = ts_mem_alloc((size_t)T * wk * sizeof(float));
  *dV = ts_mem_alloc((size_t)T * wk * sizeof(float));
  float *lse = ts_mem_alloc((size_t)per * T * sizeof(float));
  float *dsum = ts_mem_alloc((size_t)per * T * sizeof(float));
  int rc = O && dO && *dQ && *dK && *dV && lse && dsum
               ? TS_OK
               : ts_fail(TS_ERUNTIME, "out of memory (head-parallel backward buffers)");
  ts_block2d sd = {(size_t)Tl, w, (size_t)io->C, w, 1, 0}, rq = {(size_t)Tl, w, w, (size_t)Tl * w, 1, 0};
  if (!rc) rc = ts_comm_alltoall_2d(io->seq, io->datt + (size_t)s * Ub * dh, &sd, dO, &rq, io->l);
  if (!rc) {
    const ts_attn_shape layer = shape(io);
    rc = headpar_stage_backward(io->be, io->ws, &layer, per, nkv, q0, Q, K, V, dO, O, lse, *dQ, *dK,
                                *dV, dsum);
  }
  ts_mem_free(O);
  ts_mem_free(dO);
  ts_mem_free(lse);
  ts_mem_free(dsum);
  return rc;
}

int headpar_backward(const ts_attn_io *io) {
  const int N = io->seq->size, r = io->seq->rank, dh = io->dh, C = io->C, Ckv = io->Ckv;
  const int Tl = io->Tl, T = io->T, G = io->H / io->Hkv;
  // stages of whole groups on every rank
  const int Ub = headpar_backward_stage(hp(io)->U, N, G);
  const int per = Ub / N, nkv = per / G, nst = io->H / Ub;
  const size_t w = (size_t)per * dh, wk = (size_t)nkv * dh;
  ts_mem_phase(TS_PHASE_ATTN_BWD);
  // live through the block: X, the output, its gradient, and the gathered
  // dQ, dK, dV (rows of the rank)
  const size_t held = ((size_t)3 * C + C + 2 * (size_t)Ckv) * Tl * sizeof(float);
  ts_mem_hold(held);
  int rc = TS_OK;
  for (int s = 0; s < nst && !rc; s++) {
    stage_heads to[64];
    for (int c = 0; c < N; c++) backward_heads(io, Ub, s, c, &to[c]);
    float *Q = ts_mem_alloc((size_t)T * w * sizeof(float)), *K = ts_mem_alloc((size_t)T * wk * sizeof(float));
    float *V = ts_mem_alloc((size_t)T * wk * sizeof(float));
    float *dQ = NULL, *dK = NULL, *dV = NULL;
    rc = Q && K && V ? stage_qkv(io, to, per, nkv, Q, K, V)
                     : ts_fail(TS_ERUNTIME, "out of memory (head-parallel backward buffers)");
    if (!rc) rc = stage_kernel(io, Ub, s, to[r].q[0], per, nkv, Q, K, V, &dQ, &dK, &dV);
    // head-sharded -> sequence-sharded, into the stage's columns of dq, dk, dv
    ts_block2d bq = {(size_t)Tl, w, w, (size_t)Tl * w, 1, 0}, dq_r = {(size_t)Tl, w, (size_t)C, w, 1, 0};
    ts_block2d bk = {(size_t)Tl, wk, wk, (size_t)Tl * wk, 1, 0}, dk_r = {(size_t)Tl, wk, (size_t)Ckv, wk, 1, 0};
    if (!rc) rc = ts_comm_alltoall_2d(io->seq, dQ, &bq, io->dq + (size_t)s * Ub * dh, &dq_r, io->l);
    if (!rc) rc = ts_comm_alltoall_2d(io->seq, dK, &bk, io->dk + (size_t)s * (Ub / G) * dh, &dk_r, io->l);
    if (!rc) rc = ts_comm_alltoall_2d(io->seq, dV, &bk, io->dv + (size_t)s * (Ub / G) * dh, &dk_r, io->l);
    float *bufs[] = {Q, K, V, dQ, dK, dV};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) ts_mem_free(bufs[i]);
  }
  ts_mem_release(held);
  ts_mem_phase(TS_PHASE_NONE);
  return rc;
}

// ---- backward, dX stage by stage (upipe-dx) ----------------------------------------------
// The UPipe paper's backward: each stage's dQ, dK, dV come back as the
// rank's rows of the stage's heads and are used at once, so the gathered
// dQ, dK, dV of every head (γ units) are never held. The stage's rows of the
// projections' weight gradients are formed from them with the serial kernels
// (an element of a weight gradient depends on its own row's gradient only:
// the same bits as the model's one call); its terms of dX are added to dX,
// stage after stage. That sum, over heads in stages rather than in one chain
// over all of them, is the one change of bits: the tolerance tier, bound in
// docs/DISTRIBUTED.md.
//
// Live memory is counted as the paper's Table 7 counts it: X, the output
// and its gradient on entry (3 units of T/N·d); stage s consumes slot s of
// the output and of its gradient (its U heads' columns), whose memory the
// stage's recomputed output O' and received dO' take; dX (1 unit) is live
// from the end of stage 0. (The model's buffers stay allocated; this is the
// live set, what a caching allocator would need.) The peak is the paper's
// max(3 + 2γ/ν, 2 + 2γ/ν + 2(ν−1)/ν), with ν = H/U_b the backward's stages,
// plus the stage's log-sum-exp and row sums (2/(ν·dh) units).
// Stage s's part of the projections' backward (upipe-dx): gq (Tl, Ub·dh),
// gk and gv (Tl, Ub/G·dh) are the gradients of the stage's heads on the
// rank's rows, still rotated. Their rows of the weight gradients are formed
// with the serial kernels; their terms of dX are added to dX (stage 0's query
// term writes it). Returns the weight-gradient trees' out-of-memory flag.
static int stage_weights_dx(const ts_attn_io *io, int s, int Ub, float *gq, float *gk, float *gv) {
  const int C = io->C, dh = io->dh, G = io->H / io->Hkv, leaf = io->cfg->leaf;
  const int Uq = Ub * dh, Ukv = Ub / G * dh;
  const size_t oq = (size_t)s * Uq, okv = (size_t)s * Ukv;
  ts_rope_runs(io->be, &io->runs, io->ntok, dh, io->rope, gq, Ub, Uq, 1);
  ts_rope_runs(io->be, &io->runs, io->ntok, dh, io->rope, gk, Ub / G, Ukv, 1);
  int tree_rc = io->be->linear_backward_weights(io->ws, io->dwq + oq * C, io->dbq ? io->dbq + oq : NULL,
                                                gq, io->x, io->ntok, C, Uq);
  tree_rc |= io->be->linear_backward_weights(io->ws, io->dwk + okv * C, io->dbk ? io->dbk + okv : NULL, gk,
                                             io->x, io->ntok, C, Ukv);
  tree_rc |= io->be->linear_backward_weights(io->ws, io->dwv + okv * C, io->dbv ? io->dbv + okv : NULL, gv,
                                             io->x, io->ntok, C, Ukv);
  io->be->linear_backward_input(io->dx, gq, io->wq + oq * C, io->ntok, C, Uq, leaf, s > 0);
  io->be->linear_backward_input(io->dx, gk, io->wk + okv * C, io->ntok, C, Ukv, leaf, 1);
  io->be->linear_backward_input(io->dx, gv, io->wv + okv * C, io->ntok, C, Ukv, leaf, 1);
  return tree_rc;
}

int headpar_backward_dx(const ts_attn_io *io) {
  const int N = io->seq->size, r = io->seq->rank, dh = io->dh, C = io->C;
  const int Tl = io->Tl, T = io->T, G = io->H / io->Hkv;
  const int Ub = headpar_backward_stage(hp(io)->U, N, G);
  const int per = Ub / N, nkv = per / G, nst = io->H / Ub;
  const int Uq = Ub * dh, Ukv = Ub / G * dh; // the stage's columns of Q and of K, V
  const size_t w = (size_t)per * dh, wk = (size_t)nkv * dh;
  const size_t unit = (size_t)Tl * C * sizeof(float), slot = (size_t)Tl * Uq * sizeof(float);
  ts_mem_phase(TS_PHASE_ATTN_BWD);
  size_t held = 3 * unit; // X, the output, its gradient
  ts_mem_hold(held);
  int rc = TS_OK, tree_rc = TS_OK;
  for (int s = 0; s < nst && !rc; s++) {
    stage_heads to[64];
    for (int c = 0; c < N; c++) backward_heads(io, Ub, s, c, &to[c]);
    // 1. the stage's Q', K', V' again
    float *Q = ts_mem_alloc((size_t)T * w * sizeof(float)), *K = ts_mem_alloc((size_t)T * wk * sizeof(float));
    float *V = ts_mem_alloc((size_t)T * wk * sizeof(float));
    float *dQ = NULL, *dK = NULL, *dV = NULL, *gq = NULL, *gk = NULL, *gv = NULL;
    rc = Q && K && V ? stage_qkv(io, to, per, nkv, Q, K, V)
                     : ts_fail(TS_ERUNTIME, "out of memory (head-parallel backward buffers)");
    // 2. slot s of the output and of its gradient are consumed: O' and dO'
    // take their place
    ts_mem_release(2 * slot);
    held -= 2 * slot;
    if (!rc) rc = stage_kernel(io, Ub, s, to[r].q[0], per, nkv, Q, K, V, &dQ, &dK, &dV);
    ts_mem_free(Q);
    ts_mem_free(K);
    ts_mem_free(V);
    // 3. the stage's gradients back as the rank's rows, its heads only:
    // gq (Tl, Uq), gk and gv (Tl, Ukv)
    if (!rc) {
      gq = ts_mem_alloc(slot);
      gk = ts_mem_alloc((size_t)Tl * Ukv * sizeof(float));
      gv = ts_mem_alloc((size_t)Tl * Ukv * sizeof(float));
      if (!gq || !gk || !gv) rc = ts_fail(TS_ERUNTIME, "out of memory (head-parallel backward buffers)");
    }
    ts_block2d bq = {(size_t)Tl, w, w, (size_t)Tl * w, 1, 0}, gq_r = {(size_t)Tl, w, (size_t)Uq, w, 1, 0};
    ts_block2d bk = {(size_t)Tl, wk, wk, (size_t)Tl * wk, 1, 0}, gk_r = {(size_t)Tl, wk, (size_t)Ukv, wk, 1, 0};
    if (!rc) rc = ts_comm_alltoall_2d(io->seq, dQ, &bq, gq, &gq_r, io->l);
    if (!rc) rc = ts_comm_alltoall_2d(io->seq, dK, &bk, gk, &gk_r, io->l);
    if (!rc) rc = ts_comm_alltoall_2d(io->seq, dV, &bk, gv, &gk_r, io->l);
    ts_mem_free(dQ);
    ts_mem_free(dK);
    ts_mem_free(dV);
    if (s == 0) { // dX, from the end of stage 0 on
      ts_mem_hold(unit);
      held += unit;
    }
    // 4. back through the rotations, then the stage's rows of the weight
    // gradients and its terms of dX
    if (!rc) tree_rc |= stage_weights_dx(io, s, Ub, gq, gk, gv);
    ts_mem_free(gq);
    ts_mem_free(gk);
    ts_mem_free(gv);
  }
  ts_mem_release(held);
  ts_mem_phase(TS_PHASE_NONE);
  if (!rc && tree_rc) rc = ts_fail(TS_ERUNTIME, "out of memory (weight-gradient trees)");
  return rc;
}

// ---- the strategies (strategy.h) ----------------------------------------------------------

// Head-parallel attention (Ulysses, UPipe; ulysses.h): heads and key/value
// heads split over the group; UPipe's stages of U heads and their schedule.
// Resolves the defaults in *lay.
static int headpar_check(const ts_config *cfg, ts_layout *lay) {
  const int N = lay->sp, H = cfg->n_head;
  const int Hkv = cfg->n_kv_head > 0 ? cfg->n_kv_head : H, G = H / Hkv;
  const char *mode = ts_sp_mode_names[lay->sp_mode];
  if (N > 64 || H / N > 64)
    return ts_fail(TS_EUSAGE, "--sp-mode %s: at most 64 ranks and 64 heads per rank", mode);
  if (H % N != 0 || Hkv % N != 0)
    return ts_fail(TS_EUSAGE,
                   "--sp-mode %s with --sp %d: the %d heads and %d key/value heads must divide "
                   "by %d (each rank takes whole heads)",
                   mode, N, H, Hkv, N);
  if (lay->sp_mode == TS_SP_ULYSSES) return TS_OK; // all heads at once (its --upipe-* refused)
  if (lay->upipe_sched < 0) lay->upipe_sched = G > 1 ? 1 : 0;
  if (lay->upipe_sched == 1 && G == 1)
    return ts_fail(TS_EUSAGE, "--upipe-schedule gqa: the model has no key/value groups "
                              "(--kv-heads equals --heads)");
  if (lay->upipe_u == 0) lay->upipe_u = N; // the smallest stages
  const int U = lay->upipe_u, per = U / N;
  if (U < 1 || U % N != 0)
    return ts_fail(TS_EUSAGE, "--upipe-u %d: must be a multiple of --sp %d (every rank takes "
                              "U/N heads of a stage)", U, N);
  if (H % U != 0)
    return ts_fail(TS_EUSAGE, "--upipe-u %d: must divide the %d heads", U, H);
  if (lay->upipe_sched == 1 && Hkv % U != 0)
    return ts_fail(TS_EUSAGE,
                   "--upipe-u %d with --upipe-schedule gqa: must divide the %d key/value heads "
                   "(a stage takes one query head of U groups)",
                   U, Hkv);
  if (lay->upipe_sched == 0 && per % G != 0 && G % per != 0)
    return ts_fail(TS_EUSAGE,
                   "--upipe-u %d with --sp %d: each rank's %d heads of a stage must be whole "
                   "groups of %d or part of one",
                   U, N, per, G);
  return TS_OK;
}


// No Q, K, V or lse kept between forward and backward: Q' lives in the
// output's rows, the stage's K', V' in tracked scratch; the backward
// recomputes. dK, dV come back as the rank's rows.
static void headpar_sizes(const ts_attn_io *io, ts_cp_sizes *out) {
  *out = (ts_cp_sizes){.layer_rows = io->ntok, .dkv_rows = io->ntok};
}

// What tells ulysses and upipe apart (each table's `opts`): upipe runs the
// heads in stages of U (--upipe-u) in its schedule's order.
typedef struct {
  int staged;
} headpar_opts;
static const headpar_opts ULYSSES = {0}, UPIPE = {1};

// The settings of a layout (sp): Ulysses runs all heads in one stage.
static headpar settings(const ts_attn_io *io, const ts_seq_shard *sp) {
  const int upipe = ((const headpar_opts *)io->cp->opts)->staged;
  return (headpar){.U = upipe ? sp->upipe_u : io->H, .sched = upipe ? sp->upipe_sched : 0};
}

static int headpar_create(const ts_attn_io *io, const ts_seq_shard *sp, void **state) {
  headpar *h = malloc(sizeof *h);
  if (!h) return ts_fail(TS_ERUNTIME, "out of memory");
  *h = settings(io, sp);
  *state = h;
  return TS_OK;
}

// What headpar_forward and headpar_backward move per layer (strategy.h
// `traffic`): per forward stage Q' out, K' and V' when the stage sends them
// (gqa: a round's first), the output back; per backward stage Q', K', V'
// again (stage_qkv), dO, and dQ, dK, dV back. Every block is Tl rows of the
// stage's heads on one rank.
static void headpar_traffic(const ts_attn_io *io, const ts_seq_shard *sp, ts_comm_count *fwd,
                            ts_comm_count *bwd) {
  const headpar h = settings(io, sp);
  const int N = io->seq->size, G = io->H / io->Hkv, dh = io->dh;
  const size_t Tl = (size_t)io->Tl, f = sizeof(float);
  for (int s = 0; s < io->H / h.U; s++) {
    stage_heads to0;
    headpar_forward_heads(N, h.U, G, h.sched, s, 0, &to0);
    const uint64_t q = ts_comm_gather_bytes(Tl * (size_t)(h.U / N) * dh * f, N);
    ts_comm_tally(fwd, TS_COMM_ALLTOALL, q);
    if (h.sched != TS_UPIPE_GQA || s % G == 0)
      for (int k = 0; k < 2; k++)
        ts_comm_tally(fwd, TS_COMM_ALLTOALL, ts_comm_gather_bytes(Tl * to0.nkv * dh * f, N));
    ts_comm_tally(fwd, TS_COMM_ALLTOALL, q);
  }
  const int Ub = headpar_backward_stage(h.U, N, G), per = Ub / N, nkv = per / G;
  const uint64_t q = ts_comm_gather_bytes(Tl * per * dh * f, N);
  const uint64_t kv = ts_comm_gather_bytes(Tl * nkv * dh * f, N);
  for (int s = 0; s < io->H / Ub; s++) {
    const uint64_t each[7] = {q, kv, kv, q, q, kv, kv}; // Q K V, dO, dQ dK dV
    for (int k = 0; k < 7; k++) ts_comm_tally(bwd, TS_COMM_ALLTOALL, each[k]);
  }
}

// The tracked allocations of headpar_forward and of the two backwards,
// replayed from the geometry in their order (strategy.h `incall`): bytes
// live, and the most at once.
typedef struct {
  size_t live, most;
} replay;

static void take(replay *m, size_t floats) {
  m->live += floats * sizeof(float);
  if (m->live > m->most) m->most = m->live;
}

static void give(replay *m, size_t floats) { m->live -= floats * sizeof(float); }

static void headpar_incall(const ts_attn_io *io, const ts_seq_shard *sp, ts_cp_incall *out) {
  const headpar h = settings(io, sp);
  const int N = io->seq->size, G = io->H / io->Hkv, dh = io->dh, per = h.U / N;
  const size_t T = (size_t)io->T, Tl = (size_t)io->Tl, w = (size_t)per * dh;
  replay f = {0, 0}, b = {0, 0};
  size_t kv_held = 0, pack = 0;
  for (int s = 0; s < io->H / h.U; s++) { // the forward's stages
    stage_heads to0;
    headpar_forward_heads(N, h.U, G, h.sched, s, 0, &to0);
    const size_t wk = (size_t)to0.nkv * dh;
    take(&f, Tl * h.U * dh); // qs
    give(&f, Tl * h.U * dh);
    pack = pack > ts_comm_pack_2d(Tl * w, N) ? pack : ts_comm_pack_2d(Tl * w, N);
    if (h.sched != TS_UPIPE_GQA || s % G == 0) {
      give(&f, 2 * kv_held);
      take(&f, Tl * N * wk); // ks, then kc and vc
      take(&f, 2 * T * wk);
      give(&f, Tl * N * wk);
      kv_held = T * wk;
      if (ts_comm_pack_2d(Tl * wk, N) > pack) pack = ts_comm_pack_2d(Tl * wk, N);
    }
    take(&f, T * w + (size_t)per * Tl); // o, lse
    give(&f, T * w + (size_t)per * Tl);
    if (h.sched != TS_UPIPE_GQA || s % G == G - 1) {
      give(&f, 2 * kv_held);
      kv_held = 0;
    }
  }
  const int Ub = headpar_backward_stage(h.U, N, G), pb = Ub / N, dx = io->cp->forms_dx;
  const size_t wb = (size_t)pb * dh, wkb = (size_t)(pb / G) * dh;
  // every stage alike: Q, K, V; their local projections (stage_qkv); the
  // kernel's O, dO, dQ, dK, dV, lse, dsum (stage_kernel); upipe-dx: Q, K, V
  // go, the rank's rows of dQ, dK, dV come (gq, gk, gv)
  take(&b, T * wb + 2 * T * wkb);
  take(&b, Tl * N * (wb + wkb));
  give(&b, Tl * N * (wb + wkb));
  take(&b, 3 * T * wb + 2 * T * wkb + 2 * (size_t)pb * T);
  give(&b, 2 * T * wb + 2 * (size_t)pb * T);
  if (dx) {
    give(&b, T * wb + 2 * T * wkb);
    take(&b, Tl * (size_t)Ub * dh + 2 * Tl * (size_t)(Ub / G) * dh);
  }
  const size_t pb2 = ts_comm_pack_2d(Tl * (wb > wkb ? wb : wkb), N);
  *out = (ts_cp_incall){.fwd = f.most, .bwd = b.most, .pack = pack > pb2 ? pack : pb2};
}

static void headpar_destroy(const ts_attn_io *io) { free(io->state); }

static void upipe_describe(const ts_layout *lay, char *buf, size_t cap) {
  snprintf(buf, cap, "-u%d-%s", lay->upipe_u, lay->upipe_sched ? "gqa" : "natural");
}

const ts_cp ts_cp_ulysses = {
    .name = "ulysses",
    .summary = "head-parallel attention by all-to-alls (DeepSpeed Ulysses)",
    .exact = 1,
    .check = headpar_check,
    .sizes = headpar_sizes,
    .create = headpar_create,
    .destroy = headpar_destroy,
    .attn_forward = headpar_forward,
    .attn_backward = headpar_backward,
    .traffic = headpar_traffic,
    .incall = headpar_incall,
    .opts = &ULYSSES,
};

const ts_cp ts_cp_upipe = {
    .name = "upipe",
    .summary = "Ulysses in stages of U heads (UPipe, Untied Ulysses)",
    .exact = 1,
    .check = headpar_check,
    .sizes = headpar_sizes,
    .create = headpar_create,
    .destroy = headpar_destroy,
    .attn_forward = headpar_forward,
    .attn_backward = headpar_backward,
    .traffic = headpar_traffic,
    .incall = headpar_incall,
    .describe = upipe_describe,
    .own_flags = "--upipe-u --upipe-schedule",
    .opts = &UPIPE,
};

const ts_cp ts_cp_upipe_dx = {
    .name = "upipe-dx",
    .summary = "UPipe whose backward adds dX stage by stage (the paper's Table 7 memory)",
    .exact = 0,
    .forms_dx = 1,
    .check = headpar_check,
    .sizes = headpar_sizes,
    .create = headpar_create,
    .destroy = headpar_destroy,
    .attn_forward = headpar_forward,
    .attn_backward = headpar_backward_dx,
    .traffic = headpar_traffic, // the same messages: only where dX is summed differs
    .incall = headpar_incall,
    .describe = upipe_describe,
    .own_flags = "--upipe-u --upipe-schedule",
    .opts = &UPIPE,
};
