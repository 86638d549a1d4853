// Causal multi-head attention in canonical order (docs/EXACTNESS.md R2, R3).
//
// Forward: for each query tile, key tiles are visited from the diagonal down
// to tile 0 with online softmax; nothing of size T x T is stored, only the
// output and the per-row log-sum-exp. The walk may be cut into blocks of
// keys, one call each, carrying the softmax state between them (exact ring
// attention) with the same bits.
// Backward: one pass per (sequence, head) that recomputes the probabilities
// from lse, sums dQ over key tiles in the forward's order, and dK, dV over
// query tiles as a canonical tree (query tiles before the key tile are empty
// leaves), so a rank that holds only some query tiles computes an aligned
// subtree. dQ too may be summed block by block (dq_acc): each call adds its
// key tiles' terms to what the calls for later keys left, in the same order.
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "attention_tile.h"
#include "backend/kernels.h"
#include "exact/exactmath.h"
#include "exact/fastexp.h"
#include "exact/index.h"
#include "exact/rng.h"


// Global dropout index of probability (b, local head h, global positions i, j).
static inline uint64_t attn_index(const ts_attn_shape *s, int b, int h, int64_t i,
                                  int64_t j) {
  return ts_index_attn(s->index_base, (uint64_t)b, (uint64_t)s->Hg, (uint64_t)(s->h0 + h),
                       (uint64_t)s->T, (uint64_t)i, (uint64_t)j);
}

// The causal mask of a diagonal score tile, in place: -inf where the key is
// after the query. transposed: S is (key, query), else (query, key).
static void mask_diagonal(float *S, int tile, int transposed) {
  for (int r = 0; r < tile; r++)
    for (int c = 0; c < tile; c++)
      if (transposed ? r > c : c > r) S[r * tile + c] = -INFINITY;
}

// Probabilities of a tile from the final lse: P = exp(S - lse_i).
TS_VECTOR_CLONES
static void probs(float *P, const float *lse_rows, int tile) {
  for (int i = 0; i < tile; i++) {
    float l = lse_rows[i];
    for (int j = 0; j < tile; j++) P[i * tile + j] = ts_expf(P[i * tile + j] - l);
  }
}

// One key tile of the online softmax on the transposed scores Pt (key j,
// query i): in place P = exp(S - m_new), with the running max m, running sum
// l and accumulator acc rescaled to the new max. Each query row gets the
// operations of a row-by-row walk (max, then exp, then the sum over keys in
// order); only the loops run across rows, so that they vectorise. mx, corr,
// sum: tile floats of scratch.
TS_VECTOR_CLONES
static void online_softmax_t(float *Pt, float *m, float *l, float *acc, float *mx, float *corr,
                             float *sum, int tile, int dh) {
  for (int i = 0; i < tile; i++) mx[i] = m[i];
  for (int j = 0; j < tile; j++) {
    const float *row = Pt + (size_t)j * tile;
    for (int i = 0; i < tile; i++) mx[i] = row[i] > mx[i] ? row[i] : mx[i];
  }
  for (int i = 0; i < tile; i++) {
    corr[i] = ts_expf(m[i] - mx[i]); // m[i] = -inf on the first tile: corr = 0
    sum[i] = 0.0f;
  }
  for (int j = 0; j < tile; j++) {
    float *row = Pt + (size_t)j * tile;
    for (int i = 0; i < tile; i++) {
      row[i] = ts_expf(row[i] - mx[i]);
      sum[i] += row[i]; // over keys in order
    }
  }
  for (int i = 0; i < tile; i++) {
    l[i] = l[i] * corr[i] + sum[i];
    m[i] = mx[i];
    float *a = acc + (size_t)i * dh;
    for (int c = 0; c < dh; c++) a[c] *= corr[i];
  }
}

// Multiplies the transposed tile Pt (key j, query i) in place by the dropout
// mask (kept / (1-p), dropped 0).
static void drop_tile_t(float *Pt, const ts_attn_shape *s, int b, int h, int qt, int kt) {
  if (s->dropout <= 0.0f) return;
  int tile = s->tile;
  float scale = 1.0f / (1.0f - s->dropout);
  for (int j = 0; j < tile; j++)
    for (int i = 0; i < tile; i++) {
      float u = ts_rng_uniform(s->seed, TS_RNG_DROPOUT_ATTN, s->step,
                               attn_index(s, b, h, (int64_t)qt * tile + i, (int64_t)kt * tile + j));
      Pt[j * tile + i] = u >= s->dropout ? Pt[j * tile + i] * scale : 0.0f;
    }
}

// Per-thread copies of one head's rows, made contiguous, for the tasks of
// that head: rows a head apart (q, k, v, dout) fall into few cache sets, and
// the products re-read a tile for every block of their result. A thread
// repacks when its task moves to another head, so each head is copied about
// once per thread. buf NULL (no memory for it): callers copy tile by tile.
typedef struct {
  float *buf;    // nthreads slots of 2 * n * rows * dh floats
  int64_t *key;  // the head each slot holds, -1: none
  size_t slot;   // floats per slot
  int n, rows, dh;
} kv_pack;

static kv_pack kv_pack_new(int nthreads, int n, int rows, int dh) {
  kv_pack p = {.slot = (size_t)2 * n * rows * dh, .n = n, .rows = rows, .dh = dh};
  p.buf = malloc((size_t)nthreads * (p.slot * sizeof(float) + sizeof(int64_t)));
  if (p.buf) {
    p.key = (int64_t *)(p.buf + (size_t)nthreads * p.slot);
    for (int t = 0; t < nthreads; t++) p.key[t] = -1;
  }
  return p;
}

// Thread th's packed rows for `key`: n heads of (rows, dh) from a (rows lda
// apart, head g at column g*dh), then n from b likewise; NULL without a buffer.
static float *kv_pack_head(kv_pack *p, int th, int64_t key, const float *a, int lda,
                           const float *b, int ldb) {
  if (!p->buf) return NULL;
  float *dst = p->buf + (size_t)th * p->slot;
  const size_t one = (size_t)p->rows * p->dh;
  if (p->key[th] != key) {
    for (int g = 0; g < p->n; g++) {
      ts_tile_copy(dst + g * one, a + (size_t)g * p->dh, lda, p->rows, p->dh);
      ts_tile_copy(dst + (p->n + g) * one, b + (size_t)g * p->dh, ldb, p->rows, p->dh);
    }
    p->key[th] = key;
  }
  return dst;
}

// The forward's walk over key tiles for every query tile. Each task keeps
// its tile's online-softmax state (acc, m, l) in the thread's scratch: it
// starts it afresh (first) or loads what a previous call over later keys left
// (attention_forward_block), visits the key tiles it holds from the highest
// visible one down, then finishes it into out and lse (last) or stores it
// back. A whole walk in one call (attention_forward) and the same walk cut
// into blocks do the same operations on the same values in the same order.
// A task's tiles are held transposed (key, query): the query tile is packed
// once, as (dh, tile), for all its key tiles, and the softmax runs across
// query rows in vectors.
static void forward_walk(ts_ws *ws, float *out, float *lse, float *lsum, const float *q,
                         const float *k, const float *v, const ts_attn_shape *shape, int first,
                         int last) {
  const ts_attn_shape sh = ts_attn_resolved(shape), *s = &sh;
  const int Tq = s->Tq, Tk = s->Tk, H = s->H, dh = s->dh, tile = s->tile, C = s->ldq, Co = s->ldo;
  const int Ckv = s->ldkv, G = H / s->Hkv;      // row strides, heads per group
  const int nq = Tq / tile, qt0 = s->q0 / tile; // local query tiles, global index of the first
  const int ka = s->k0 / tile, kb = ka + Tk / tile; // key tiles held: [ka, kb)
  const float scale = 1.0f / sqrtf((float)dh);
  const int64_t ntasks = (int64_t)s->B * H * nq;
  kv_pack pk = kv_pack_new(ws->nthreads, 1, Tk, dh);
#pragma omp parallel for schedule(dynamic, 1) num_threads(ws->nthreads)
  for (int64_t task = 0; task < ntasks; task++) {
    // Heaviest tasks (last query tiles) first: dynamic scheduling balances them.
    int lq = nq - 1 - (int)(task % nq), qt = qt0 + lq;
    int h = (int)((task / nq) % H), b = (int)(task / ((int64_t)nq * H));
    const int th = omp_get_thread_num();
    float *St = ws->attnbuf[th]; // scores, then probabilities
    float *acc = St + (size_t)tile * tile;
    float *Qt = acc + (size_t)tile * dh;
    float *m = Qt + (size_t)tile * dh, *l = m + tile;
    float *mx = l + tile, *corr = mx + tile, *sum = corr + tile;
    float *Kb = sum + tile, *Vb = Kb + (size_t)tile * dh; // K_kt, V_kt as (tile, dh)
    const size_t rowq = ((size_t)b * Tq + (size_t)lq * tile) * C + (size_t)h * dh;
    const float *Q = q + rowq;
    float *O = out + ((size_t)b * Tq + (size_t)lq * tile) * Co + (size_t)h * dh;
    float *L = lse + ((size_t)b * H + h) * Tq + (size_t)lq * tile;
    float *Ls = lsum ? lsum + ((size_t)b * H + h) * Tq + (size_t)lq * tile : NULL;
    if (first) {
      for (int i = 0; i < tile; i++) { m[i] = -INFINITY; l[i] = 0.0f; }
      memset(acc, 0, (size_t)tile * dh * sizeof(float));
    } else { // the state the blocks of later keys left
      for (int i = 0; i < tile; i++) {
        memcpy(acc + (size_t)i * dh, O + (size_t)i * Co, (size_t)dh * sizeof(float));
        m[i] = L[i];
        l[i] = Ls[i];
      }
    }
    ts_tile_transpose(Qt, Q, C, tile, dh);
    const size_t khead = (size_t)b * Tk * Ckv + (size_t)(h / G) * dh;
    const float *kh =
        kv_pack_head(&pk, th, (int64_t)b * s->Hkv + h / G, k + khead, Ckv, v + khead, Ckv);
    for (int kt = qt < kb - 1 ? qt : kb - 1; kt >= ka; kt--) {
      const size_t rowk = (size_t)(kt - ka) * tile;
      const float *Kp = Kb, *Vp = Vb;
      if (kh) {
        Kp = kh + rowk * dh;
        Vp = kh + ((size_t)Tk + rowk) * dh;
      } else { // no room for the head's pack: this tile pair's alone
        ts_tile_copy(Kb, k + khead + rowk * Ckv, Ckv, tile, dh);
        ts_tile_copy(Vb, v + khead + rowk * Ckv, Ckv, tile, dh);
      }
      // Stᵀ (tile, tile) = scale · K_kt (tile, dh) · Q_qtᵀ, masked
      ts_tile_mm(St, tile, Kp, dh, 1, Qt, tile, tile, tile, dh, scale, 0);
      if (kt == qt) mask_diagonal(St, tile, 1);
      online_softmax_t(St, m, l, acc, mx, corr, sum, tile, dh);
      drop_tile_t(St, s, b, h, qt, kt);
      // acc (tile, dh) += P~ (tile, tile) · V_kt (tile, dh), P~ read from its transpose
      ts_tile_mm(acc, dh, St, 1, tile, Vp, dh, tile, dh, tile, 1.0f, 1);
    }
    if (last) {
      for (int i = 0; i < tile; i++) {
        for (int c = 0; c < dh; c++) O[(size_t)i * Co + c] = acc[(size_t)i * dh + c] / l[i];
        L[i] = m[i] + ts_logf(l[i]);
      }
    } else { // for the block of earlier keys
      for (int i = 0; i < tile; i++) {
        memcpy(O + (size_t)i * Co, acc + (size_t)i * dh, (size_t)dh * sizeof(float));
        L[i] = m[i];
        Ls[i] = l[i];
      }
    }
  }
  free(pk.buf);
}

void attention_forward(ts_ws *ws, float *out, float *lse, const float *q, const float *k,
                       const float *v, const ts_attn_shape *shape) {
  forward_walk(ws, out, lse, NULL, q, k, v, shape, 1, 1);
}

void attention_forward_block(ts_ws *ws, float *acc, float *m, float *l, const float *q,
                             const float *k, const float *v, const ts_attn_shape *shape, int first,
                             int last) {
  forward_walk(ws, acc, m, l, q, k, v, shape, first, last);
}

// dS = P ∘ (dP − D) · scale, where dP = (dO · Vᵀ) masked like the forward.
// On entry S holds the scores; on exit S holds P~ (dropped probabilities)
// and dPbuf holds dS. dO: (tile, dh) packed; Vt: V_kt packed as (dh, tile).
TS_VECTOR_CLONES
static void tile_grads(float *S, float *dPbuf, const float *dO, const float *Vt,
                       const float *lse_rows, const float *D_rows, const ts_attn_shape *s,
                       int b, int h, int qt, int kt, float scale) {
  const int tile = s->tile, dh = s->dh;
  probs(S, lse_rows, tile);
  ts_tile_mm(dPbuf, tile, dO, dh, 1, Vt, tile, tile, tile, dh, 1.0f, 0);
  if (s->dropout <= 0.0f) {
    for (int i = 0; i < tile; i++) {
      const float *prow = S + i * tile;
      float *drow = dPbuf + i * tile;
      const float Di = D_rows[i];
      for (int j = 0; j < tile; j++) drow[j] = prow[j] * (drow[j] - Di) * scale; // vectorises
    }
    return;
  }
  // With dropout: dP is masked and scaled like the forward's P~, dS uses the
  // undropped P, and S becomes P~ (same product as the forward) for dV.
  const float inv_keep = 1.0f / (1.0f - s->dropout);
  for (int i = 0; i < tile; i++)
    for (int j = 0; j < tile; j++) {
      float p = S[i * tile + j];
      float u = ts_rng_uniform(s->seed, TS_RNG_DROPOUT_ATTN, s->step,
                               attn_index(s, b, h, (int64_t)qt * tile + i, (int64_t)kt * tile + j));
      int kept = u >= s->dropout;
      float dp = kept ? dPbuf[i * tile + j] * inv_keep : 0.0f;
      S[i * tile + j] = kept ? p * inv_keep : 0.0f;
      dPbuf[i * tile + j] = p * (dp - D_rows[i]) * scale;
    }
}

int attention_backward(ts_ws *ws, float *dq, float *dk, float *dv, float *dsum,
                       const float *dout, const float *q, const float *k, const float *v,
                       const float *out, const float *lse, const ts_attn_shape *shape) {
  const ts_attn_shape sh = ts_attn_resolved(shape), *s = &sh;
  const int B = s->B, Tq = s->Tq, Tk = s->Tk, H = s->H, dh = s->dh, tile = s->tile, C = s->ldq;
  const int Co = s->ldo;
  const int nq = Tq / tile, qa = s->q0 / tile, qb = qa + nq; // global query tiles [qa, qb)
  const int ka = s->k0 / tile, kb = ka + Tk / tile; // key tiles held: [ka, kb)
  const float scale = 1.0f / sqrtf((float)dh);
  // D_i = Σ_c dO_ic · O_ic, per head
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < (int64_t)B * Tq; r++) {
    int b = (int)(r / Tq), i = (int)(r % Tq);
    for (int h = 0; h < H; h++) {
      const float *o = out + r * Co + (size_t)h * dh, *g = dout + r * Co + (size_t)h * dh;
      float acc = 0.0f;
      for (int c = 0; c < dh; c++) acc += g[c] * o[c];
      dsum[((size_t)b * H + h) * Tq + i] = acc;
    }
  }
  // One pass per (sequence, key/value head). Key tiles go from the last
  // visible one down to 0 and, for each, query tiles from the diagonal (or
  // the first local one) up: so every query tile receives its dQ terms from
  // the diagonal down (the forward's order, R2), while each key tile's dK/dV
  // terms arrive in query-tile order for the tree (R3), whose positions are
  // counted from the first local query tile; a leaf sums the group's query
  // heads in order. Probabilities are recomputed once per tile pair.
  const int Hkv = s->Hkv, G = H / Hkv, Ckv = s->ldkv;
  const int64_t ntasks = (int64_t)B * Hkv;
  int fail = 0;
  kv_pack pk = kv_pack_new(ws->nthreads, G, Tq, dh); // the group's Q and dO rows
#pragma omp parallel for schedule(dynamic, 1) num_threads(ws->nthreads) reduction(| : fail)
  for (int64_t task = 0; task < ntasks; task++) {
    int j = (int)(task % Hkv), b = (int)(task / Hkv);
    int th = omp_get_thread_num();
    float *S = ws->attnbuf[th];
    float *dS = S + (size_t)tile * tile;
    float *part = dS + (size_t)tile * tile;          // [dK (tile, dh) | dV (tile, dh)]
    float *leaf = part + (size_t)2 * tile * dh;      // the group's sum (G > 1)
    // Operands packed contiguous: rows a head apart in q, k, v, dout fall
    // into few cache sets, and the products re-read them for every block of C.
    float *Kt = leaf + (size_t)2 * tile * dh;        // K_kt, V_kt as (dh, tile)
    float *Vt = Kt + (size_t)tile * dh;
    float *Kp = Vt + (size_t)tile * dh;              // K_kt, Q_qt, dO_qt as (tile, dh)
    float *Qb = Kp + (size_t)tile * dh, *dOb = Qb + (size_t)tile * dh;
    ts_tree *tree = &ws->attntree[th];
    const size_t khead = (size_t)b * Tk * Ckv + (size_t)j * dh;
    const float *qo = kv_pack_head(&pk, th, task, q + (size_t)b * Tq * C + (size_t)j * G * dh, C,
                                   dout + (size_t)b * Tq * Co + (size_t)j * G * dh, Co);
    for (int g = 0; g < G && !s->dq_acc; g++) {
      const size_t qhead = (size_t)b * Tq * C + (size_t)(j * G + g) * dh;
      for (int r = 0; r < Tq; r++) memset(dq + qhead + (size_t)r * C, 0, (size_t)dh * sizeof(float));
    }
    for (int kt = kb - 1; kt >= ka; kt--) {
      const size_t rowk = khead + (size_t)(kt - ka) * tile * Ckv;
      if (kt >= qb) { // no local query sees this key tile: empty
        for (int i = 0; i < tile; i++)
          for (int c = 0; c < dh; c++) {
            dk[rowk + (size_t)i * Ckv + c] = -0.0f;
            dv[rowk + (size_t)i * Ckv + c] = -0.0f;
          }
        continue;
      }
      int first = kt > qa ? kt : qa;
      ts_tree_reset(tree, (uint64_t)(first - qa));
      ts_tile_transpose(Kt, k + rowk, Ckv, tile, dh);
      ts_tile_transpose(Vt, v + rowk, Ckv, tile, dh);
      ts_tile_copy(Kp, k + rowk, Ckv, tile, dh);
      for (int qt = first; qt < qb; qt++) {
        for (int g = 0; g < G; g++) {
          const int h = j * G + g;
          const size_t rowq = (size_t)b * Tq * C + (size_t)h * dh + (size_t)(qt - qa) * tile * C;
          const size_t rowo = (size_t)b * Tq * Co + (size_t)h * dh + (size_t)(qt - qa) * tile * Co;
          const float *L = lse + ((size_t)b * H + h) * Tq + (size_t)(qt - qa) * tile;
          const float *D = dsum + ((size_t)b * H + h) * Tq + (size_t)(qt - qa) * tile;
          const float *Qp = Qb, *dOp = dOb;
          if (qo) {
            Qp = qo + ((size_t)g * Tq + (size_t)(qt - qa) * tile) * dh;
            dOp = qo + ((size_t)(G + g) * Tq + (size_t)(qt - qa) * tile) * dh;
          } else { // no room for the group's pack: this tile pair's alone
            ts_tile_copy(Qb, q + rowq, C, tile, dh);
            ts_tile_copy(dOb, dout + rowo, Co, tile, dh);
          }
          // S (tile, tile) = scale · Q_qt · K_ktᵀ, masked
          ts_tile_mm(S, tile, Qp, dh, 1, Kt, tile, tile, tile, dh, scale, 0);
          if (kt == qt) mask_diagonal(S, tile, 0);
          tile_grads(S, dS, dOp, Vt, L, D, s, b, h, qt, kt, scale);
          // dQ_qt (tile, dh) += dS (tile, tile) · K_kt (tile, dh)
          ts_tile_mm(dq + rowq, C, dS, tile, 1, Kp, dh, tile, dh, tile, 1.0f, 1);
          // dK part (tile, dh) = dSᵀ · Q_qt ; dV part = P~ᵀ · dO_qt (transposes
          // read as strides)
          ts_tile_mm(part, dh, dS, 1, tile, Qp, dh, tile, dh, tile, 1.0f, 0);
          ts_tile_mm(part + (size_t)tile * dh, dh, S, 1, tile, dOp, dh, tile, dh, tile, 1.0f, 0);
          if (G > 1) {
            if (g == 0) memcpy(leaf, part, (size_t)2 * tile * dh * sizeof(float));
            else ts_tree_add(leaf, part, (size_t)2 * tile * dh);
          }
        }
        if (ts_tree_push(tree, G > 1 ? leaf : part) != 0) fail = 1;
      }
      ts_tree_finish(tree, part);
      for (int i = 0; i < tile; i++) {
        memcpy(dk + rowk + (size_t)i * Ckv, part + (size_t)i * dh, (size_t)dh * sizeof(float));
        memcpy(dv + rowk + (size_t)i * Ckv, part + (size_t)(tile + i) * dh, (size_t)dh * sizeof(float));
      }
    }
  }
  free(pk.buf);
  return fail ? -1 : 0;
}
