// Ring attention (ring.h).
#include "parallel/ring.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mem.h"

void ring_merge(float *out, float *lse, const float *out_b, const float *lse_b, int rows, int H,
                int dh, int ldo) {
#pragma omp parallel for schedule(static)
  for (int64_t x = 0; x < (int64_t)rows * H; x++) {
    int h = (int)(x / rows), i = (int)(x % rows);
    float la = lse[(size_t)h * rows + i], lb = lse_b[(size_t)h * rows + i];
    // σ(lb − la) and the new log-sum-exp, both from exp of a non-positive number
    float sig, lnew;
    if (lb <= la) {
      float e = expf(lb - la);
      sig = e / (1.0f + e);
      lnew = la + log1pf(e);
    } else {
      float e = expf(la - lb);
      sig = 1.0f / (1.0f + e);
      lnew = lb + log1pf(e);
    }
    float *o = out + (size_t)i * ldo + (size_t)h * dh;
    const float *ob = out_b + (size_t)i * ldo + (size_t)h * dh;
    for (int c = 0; c < dh; c++) o[c] = o[c] - sig * (o[c] - ob[c]);
    lse[(size_t)h * rows + i] = lnew;
  }
}

static ts_attn_shape block_shape(const ts_model *m, int l, float p, uint64_t step, int src,
                                 int ldkv) {
  ts_attn_shape as = {.B = 1, .T = m->T, .H = m->H, .dh = m->dh, .tile = m->cfg.tile,
                      .dropout = p, .seed = m->cfg.seed, .step = step,
                      .index_base = ts_model_attn_base(m, l), .Tq = m->Tl, .q0 = m->t0,
                      .Tk = m->Tl, .k0 = src * m->Tl, .Hkv = m->Hkv, .ldkv = ldkv};
  return as;
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

int ring_forward(ts_model *m, int l, uint64_t step, float p) {
  const int N = m->seq->size, r = m->seq->rank, Tl = m->Tl, C = m->C, Ckv = m->Ckv;
  layer_acts *a = ts_layer_acts(m, l);
  ts_mem_phase(TS_PHASE_ATTN_FWD);
  ts_mem_hold(own_bytes(m));
  const size_t nblk = (size_t)Tl * 2 * Ckv;
  float *cur = ts_mem_alloc(nblk * sizeof(float)), *nxt = ts_mem_alloc(nblk * sizeof(float));
  float *ob = ts_mem_alloc((size_t)Tl * C * sizeof(float));
  float *lb = ts_mem_alloc((size_t)m->H * Tl * sizeof(float));
  int rc = TS_OK;
  if (!cur || !nxt || !ob || !lb) rc = ts_fail(TS_ERUNTIME, "out of memory (ring attention)");
  for (int64_t t = 0; t < Tl && !rc; t++) { // the block: rows of [K | V]
    memcpy(cur + (size_t)t * 2 * Ckv, a->k + (size_t)t * Ckv, (size_t)Ckv * sizeof(float));
    memcpy(cur + (size_t)t * 2 * Ckv + Ckv, a->v + (size_t)t * Ckv, (size_t)Ckv * sizeof(float));
  }
  for (int i = 0; i < N && !rc; i++) {
    const int src = (r + N - i) % N; // whose keys this rank holds now
    if (src <= r) {                   // keys of later segments are all masked
      ts_attn_shape as = block_shape(m, l, p, step, src, 2 * Ckv);
      if (i == 0) {
        attention_forward(&m->ws, a->att, a->lse, a->q, cur, cur + Ckv, &as);
      } else {
        attention_forward(&m->ws, ob, lb, a->q, cur, cur + Ckv, &as);
        ring_merge(a->att, a->lse, ob, lb, Tl, m->H, m->dh, C);
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
  layer_acts *a = ts_layer_acts(m, l);
  // and the gradients: of the output in, of Q, K, V out
  const size_t held = own_bytes(m) + ((size_t)2 * C + 2 * (size_t)Ckv) * Tl * sizeof(float);
  ts_mem_phase(TS_PHASE_ATTN_BWD);
  ts_mem_hold(held);
  const size_t w = (size_t)4 * Ckv, nblk = (size_t)Tl * w; // rows of [K | V | dK | dV]
  float *cur = ts_mem_alloc(nblk * sizeof(float)), *nxt = ts_mem_alloc(nblk * sizeof(float));
  float *part = ts_mem_alloc(nblk * sizeof(float)); // one block's dK, dV (same layout)
  float *dqb = ts_mem_alloc((size_t)Tl * C * sizeof(float));
  float *dsum = ts_mem_alloc((size_t)m->H * Tl * sizeof(float));
  int rc = TS_OK;
  if (!cur || !nxt || !part || !dqb || !dsum) rc = ts_fail(TS_ERUNTIME, "out of memory (ring attention)");
  for (int64_t t = 0; t < Tl && !rc; t++) {
    float *row = cur + (size_t)t * w;
    memcpy(row, a->k + (size_t)t * Ckv, (size_t)Ckv * sizeof(float));
    memcpy(row + Ckv, a->v + (size_t)t * Ckv, (size_t)Ckv * sizeof(float));
    memset(row + 2 * Ckv, 0, (size_t)2 * Ckv * sizeof(float));
  }
  if (!rc) memset(m->dq, 0, (size_t)Tl * C * sizeof(float));
  for (int i = 0; i < N && !rc; i++) {
    const int src = (r + N - i) % N;
    if (src <= r) {
      ts_attn_shape as = block_shape(m, l, m->cfg.dropout, step, src, (int)w);
      if (attention_backward(&m->ws, dqb, part + 2 * Ckv, part + 3 * Ckv, dsum, m->datt, a->q,
                             cur, cur + Ckv, a->att, a->lse, &as) != 0) {
        rc = ts_fail(TS_ERUNTIME, "out of memory in attention backward");
        break;
      }
#pragma omp parallel for schedule(static)
      for (int64_t t = 0; t < Tl; t++) {
        float *dq = m->dq + (size_t)t * C;
        const float *d = dqb + (size_t)t * C;
        for (int c = 0; c < C; c++) dq[c] = dq[c] + d[c];
        float *acc = cur + (size_t)t * w + 2 * Ckv;
        const float *pp = part + (size_t)t * w + 2 * Ckv;
        for (int c = 0; c < 2 * Ckv; c++) acc[c] = acc[c] + pp[c];
      }
    }
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
