// One layer's causal attention, forward then backward, timed on its own: the
// kernel that sets a step's speed at long T (docs/PERFORMANCE.md, "Attention
// at long T"). Usage:
//   bench/attention [--seq T[,T...]] [--heads H] [--dh D] [--threads N] [--reps R]
//                   [--layout serial|lss|lss-zigzag|ulysses|ring] [--ranks N] [--check]
// Defaults: the `small` model's attention (8 heads of 64), T = 1024, 4096,
// 16384, 32768, one thread, 3 repetitions. Prints one line per T: the median
// forward and backward times, the throughput by the MFU convention (6·T²·H·dh
// FLOPs for forward plus backward under the causal mask) and that throughput
// as a fraction of the sgemm roof measured the same way. Times are the
// process's CPU time divided by the threads (on a machine shared with other
// work, wall time counts the time others held the cores), so run it on an
// otherwise idle machine for wall-clock figures with more than one thread.
//
// --layout L --ranks N (default serial, 1): the local attention of a
// distributed layout. For each rank r of N, one after another in this one
// process, it makes the kernel calls rank r's strategy makes for one layer's
// attention forward and backward (the helpers src/cp/lss.c, ulysses.c
// and ring.c call themselves), on the rank's share of the same inputs;
// communication is left out: what a rank would receive is laid out for it
// untimed. Per T it prints the serial kernel's line ("serial ..."), one line
// per rank ("rank ...": its times, the FLOPs its share represents, the
// causal 6·T²·H·dh split by the (query, key) pairs its calls cover, GFLOP/s,
// fraction of the roof) and, last, the layout's line ("layout ...": the
// busiest rank's seconds, the mean, busiest/mean, and the layout's
// throughput, total FLOPs / (N · busiest), against the serial kernel's).
// ulysses's backward recomputes its forward, as the strategy does: timed,
// not counted. ring is the exact ring (not --fast's merge); lss's ablations
// (lss-fused, lss-basic) make the same attention calls as lss. --check: also compares, for every rank, what its calls
// computed (outputs, lse, dQ; ulysses dK, dV too; ring dK, dV once the
// last rank has added its terms) with the serial kernel's bit for bit, and
// the pairs the ranks' calls cover with the serial layer's; one "check"
// line before the layout line, or exit 1 naming what differs.
#include "config.h"

#ifdef TS_HAVE_BLAS
#include <cblas.h>
#endif
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "cpu/mm.h"
#include "backend/kernels.h"
#include "cp/cp.h"
#include "cp/ring.h"
#include "cp/ulysses.h"
#include "tessera.h"

static int nthreads = 1;

// Seconds of CPU time the process has used, per thread.
static double cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return ((double)t.tv_sec + 1e-9 * (double)t.tv_nsec) / nthreads;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *x, int n) {
  qsort(x, (size_t)n, sizeof *x, cmp_double);
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

// Deterministic inputs of a typical magnitude (unit-variance-ish rows).
static float *filled(size_t n, unsigned seed) {
  float *x = malloc(n * sizeof(float));
  if (!x) return NULL;
  uint32_t s = seed * 2654435761u + 1u;
  for (size_t i = 0; i < n; i++) {
    s = s * 1664525u + 1013904223u;
    x[i] = (float)((int32_t)(s >> 8) - (1 << 23)) / (float)(1 << 23);
  }
  return x;
}

// One layer at sequence length T: the inputs, and the serial kernel's results.
typedef struct {
  int T, H, dh, tile;
  float *q, *k, *v, *dout;                 // (T, H·dh)
  float *out, *dq, *dk, *dv, *lse, *dsum; // (T, H·dh); lse, dsum (H, T)
} layer;

static void layer_free(layer *L) {
  free(L->q); free(L->k); free(L->v); free(L->dout); free(L->out); free(L->dq); free(L->dk);
  free(L->dv); free(L->lse); free(L->dsum);
}

static int layer_init(layer *L, int T, int H, int dh) {
  const size_t n = (size_t)T * H * dh;
  *L = (layer){.T = T, .H = H, .dh = dh, .tile = ts_default_tile(T)};
  L->q = filled(n, 1); L->k = filled(n, 2); L->v = filled(n, 3); L->dout = filled(n, 4);
  L->out = malloc(n * sizeof(float)); L->dq = malloc(n * sizeof(float));
  L->dk = malloc(n * sizeof(float)); L->dv = malloc(n * sizeof(float));
  L->lse = malloc((size_t)H * T * sizeof(float)); L->dsum = malloc((size_t)H * T * sizeof(float));
  if (L->q && L->k && L->v && L->dout && L->out && L->dq && L->dk && L->dv && L->lse && L->dsum)
    return 0;
  layer_free(L);
  return -1;
}

// Times reps forward and backward passes of the serial kernel: the medians
// in *mf, *mb, its results in L. Returns 0 or -1.
static int serial_run(ts_ws *ws, layer *L, int reps, double *mf, double *mb) {
  ts_attn_shape s = {.B = 1, .T = L->T, .H = L->H, .dh = L->dh, .tile = L->tile};
  double *tf = malloc((size_t)reps * sizeof(double)), *tb = malloc((size_t)reps * sizeof(double));
  int rc = tf && tb ? 0 : -1;
  for (int r = 0; r < reps && !rc; r++) {
    double t0 = cpu_now();
    attention_forward(ws, L->out, L->lse, L->q, L->k, L->v, &s);
    double t1 = cpu_now();
    if (attention_backward(ws, L->dq, L->dk, L->dv, L->dsum, L->dout, L->q, L->k, L->v, L->out,
                           L->lse, &s) != 0)
      rc = -1;
    tf[r] = t1 - t0;
    tb[r] = cpu_now() - t1;
  }
  if (!rc) {
    *mf = median(tf, reps);
    *mb = median(tb, reps);
  }
  free(tf); free(tb);
  return rc;
}

// The layer's buffers and one thread's workspace for its tiles; 0 or -1
// (nothing left allocated).
static int layer_open(layer *L, ts_ws *ws, int T, int H, int dh) {
  if (layer_init(L, T, H, dh) != 0) return -1;
  if (ts_ws_init(ws, L->tile, L->tile, 1, dh) != 0) {
    layer_free(L);
    return -1;
  }
  return 0;
}

// Times reps forward and backward passes at sequence length T; returns 0 or -1.
static int bench_one(int T, int H, int dh, int reps, double roof) {
  layer L;
  ts_ws ws;
  if (layer_open(&L, &ws, T, H, dh) != 0) return -1;
  double mf, mb;
  int rc = serial_run(&ws, &L, reps, &mf, &mb);
  if (!rc) {
    double flops = 6.0 * (double)T * T * H * dh;
    double gf = flops / (mf + mb) / 1e9;
    printf("%6d  %5d  %9.3f  %9.3f  %8.1f  %7.1f  %5.1f%%\n", T, L.tile, mf, mb, gf, roof,
           100.0 * gf / roof);
    fflush(stdout);
  }
  ts_ws_free(&ws);
  layer_free(&L);
  return rc;
}

// ---- the layouts' local attention --------------------------------------------------------
enum { L_SERIAL, L_LSS, L_LSS_ZIGZAG, L_ULYSSES, L_RING, L_NLAYOUTS };
static const char *const layout_names[L_NLAYOUTS] = {"serial", "lss", "lss-zigzag", "ulysses",
                                                     "ring"};

// The (query, key) pairs of the causal mask that the ranks' kernel calls
// cover, counted by a backend that is the CPU's with its attention entry
// points counted: forward calls while `phase` is 1 (a rank's forward; not
// ulysses's recomputation in its backward), backward calls while it is 2.
static ts_backend counted;
static int phase;
static int64_t pairs_fwd, pairs_bwd;

static int64_t call_pairs(const ts_attn_shape *in) {
  const ts_attn_shape s = ts_attn_resolved(in);
  int64_t n = 0;
  for (int64_t i = s.q0; i < (int64_t)s.q0 + s.Tq; i++) {
    int64_t keys = i - s.k0 + 1; // keys k0 … i, of the Tk held
    n += keys < 0 ? 0 : keys > s.Tk ? s.Tk : keys;
  }
  return n * s.B * s.H;
}

static void count_forward(ts_ws *ws, float *out, float *lse, const float *q, const float *k,
                          const float *v, const ts_attn_shape *s) {
  if (phase == 1) pairs_fwd += call_pairs(s);
  ts_backend_cpu.attention_forward(ws, out, lse, q, k, v, s);
}

static void count_forward_block(ts_ws *ws, float *acc, float *m, float *l, const float *q,
                                const float *k, const float *v, const ts_attn_shape *s,
                                int first, int last) {
  if (phase == 1) pairs_fwd += call_pairs(s);
  ts_backend_cpu.attention_forward_block(ws, acc, m, l, q, k, v, s, first, last);
}

static int count_backward(ts_ws *ws, float *dq, float *dk, float *dv, float *dsum,
                          const float *dout, const float *q, const float *k, const float *v,
                          const float *out, const float *lse, const ts_attn_shape *s) {
  if (phase == 2) pairs_bwd += call_pairs(s);
  return ts_backend_cpu.attention_backward(ws, dq, dk, dv, dsum, dout, q, k, v, out, lse, s);
}

// rows rows of cols floats of a (rows lda apart) against b's (ldb apart): 0
// when every bit is the same, else 1 with a line naming `what`.
static int differs(const char *what, int rank, const float *a, size_t lda, const float *b,
                   size_t ldb, int64_t rows, int cols) {
  for (int64_t i = 0; i < rows; i++)
    if (memcmp(a + (size_t)i * lda, b + (size_t)i * ldb, (size_t)cols * sizeof(float)) != 0) {
      fprintf(stderr, "check: rank %d: %s differs from the serial kernel's in row %lld\n", rank,
              what, (long long)i);
      return 1;
    }
  return 0;
}

// n floats, written once (calloc may hand out pages not yet touched).
static float *zeroed(size_t n) {
  float *x = malloc(n * sizeof(float));
  if (x) memset(x, 0, n * sizeof(float));
  return x;
}

// What one rank did.
typedef struct {
  double *tf, *tb; // reps times of its forward, backward
  int64_t pf, pb;  // pairs its forward and backward calls cover
} rank_stats;

// Every layout below runs, per repetition, rank 0, 1, …, N−1 in turn: the
// rank's inputs laid out as its strategy holds them (untimed), its forward
// calls (timed), its backward calls (timed), and on the first repetition
// with `check` the comparison of its results with the serial kernel's. Its
// buffers are written when allocated (zeroed), so that no rank's time pays
// for their first touch.
typedef struct {
  const layer *L;
  ts_ws *ws;
  int N, reps, check;
  rank_stats *st;
} job;

// lss (one segment a rank) and lss-zigzag (chunks r and 2N−1−r of 2N): the
// rank's queries against the whole sequence's keys (ts_lss_attention_*).
static int run_lss(job *J, int zigzag) {
  const layer *L = J->L;
  const int T = L->T, H = L->H, dh = L->dh, C = H * dh, N = J->N;
  const ts_cp *cp = ts_cp_get(zigzag ? TS_SP_LSS_ZIGZAG : TS_SP_LSS);
  ts_cp_runs runs;
  ts_cp_positions(cp, N, 0, T, &runs);
  const int nrun = runs.n, len = runs.len, rows = nrun * len;
  const size_t nr = (size_t)rows * C, nkv = (size_t)nrun * T * C;
  float *q = zeroed(nr), *datt = zeroed(nr);
  float *att = zeroed(nr), *dq = zeroed(nr);
  float *lse = zeroed((size_t)H * rows), *dsum = zeroed((size_t)H * len);
  float *dk = zeroed(nkv), *dv = zeroed(nkv);
  int rc = q && datt && att && dq && lse && dsum && dk && dv ? 0 : -1;
  // the rank's shape as ts_cp_attn_shape gives it (B 1, no dropout)
  const ts_attn_shape rank = {.B = 1, .T = T, .H = H, .dh = dh, .tile = L->tile, .Tk = T,
                              .Hkv = H};
  for (int rep = 0; rep < J->reps && !rc; rep++)
    for (int r = 0; r < N && !rc; r++) {
      ts_cp_positions(cp, N, r, T, &runs);
      for (int k = 0; k < nrun; k++) { // the rank's rows: run after run
        memcpy(q + (size_t)k * len * C, L->q + (size_t)runs.pos[k] * C, (size_t)len * C * sizeof(float));
        memcpy(datt + (size_t)k * len * C, L->dout + (size_t)runs.pos[k] * C,
               (size_t)len * C * sizeof(float));
      }
      rank_stats *st = &J->st[r];
      pairs_fwd = pairs_bwd = 0;
      phase = 1;
      double t0 = cpu_now();
      ts_lss_attention_forward(&counted, J->ws, &rank, &runs, att, lse, q, L->k, L->v);
      st->tf[rep] = cpu_now() - t0;
      phase = 2;
      t0 = cpu_now();
      rc = ts_lss_attention_backward(&counted, J->ws, &rank, &runs, dq, dk, dv, (size_t)T * C,
                                     dsum, datt, q, L->k, L->v, att, lse);
      st->tb[rep] = cpu_now() - t0;
      phase = 0;
      st->pf = pairs_fwd;
      st->pb = pairs_bwd;
      for (int k = 0; k < nrun && J->check && rep == 0 && !rc; k++) {
        const size_t at = (size_t)k * len * C, from = (size_t)runs.pos[k] * C;
        rc |= differs("the output", r, att + at, C, L->out + from, C, len, C);
        rc |= differs("dQ", r, dq + at, C, L->dq + from, C, len, C);
        // lse (H, len) of run k against the serial (H, T) at its position
        rc |= differs("the lse", r, lse + (size_t)k * H * len, len, L->lse + runs.pos[k], T, H, len);
      }
    }
  free(q); free(datt); free(att); free(dq); free(lse); free(dsum); free(dk); free(dv);
  return rc;
}

// Columns of heads `heads[0..n)` (dh each) of x (rows of ldx) into dst (rows of n·dh).
static void take_heads(float *dst, const float *x, int ldx, int64_t rows, const int *heads, int n,
                       int dh) {
  for (int64_t t = 0; t < rows; t++)
    for (int k = 0; k < n; k++)
      memcpy(dst + (size_t)t * n * dh + (size_t)k * dh, x + (size_t)t * ldx + (size_t)heads[k] * dh,
             (size_t)dh * sizeof(float));
}

// Whether dst (rows of n·dh) holds heads `heads` of x (rows of ldx), bit for bit.
static int heads_differ(const char *what, int rank, const float *got, const float *x, int ldx,
                        int64_t rows, const int *heads, int n, int dh) {
  for (int k = 0; k < n; k++)
    if (differs(what, rank, got + (size_t)k * dh, (size_t)n * dh, x + (size_t)heads[k] * dh, ldx,
                rows, dh))
      return 1;
  return 0;
}

// ulysses: the rank's H/N heads over the whole sequence. Forward: its
// heads' queries of every rank's segment as the all-to-all leaves them in
// the output's rows (N blocks side by side), one call per segment
// (headpar_stage_attention); backward: the output and lse recomputed, then
// the backward, on the heads' whole-sequence rows (headpar_stage_backward).
static int run_ulysses(job *J) {
  const layer *L = J->L;
  const int T = L->T, H = L->H, dh = L->dh, C = H * dh, N = J->N, Tl = T / N, G = 1;
  const int per = H / N, Ub = headpar_backward_stage(H, N, G), nst = H / Ub;
  const size_t w = (size_t)per * dh;
  float *slot = zeroed((size_t)Tl * C), *kc = zeroed((size_t)T * w);
  float *vc = zeroed((size_t)T * w), *o = zeroed((size_t)T * w);
  float *lse = zeroed((size_t)per * T), *dsum = zeroed((size_t)per * T);
  const size_t wb = (size_t)(Ub / N) * dh; // a backward stage's heads of the rank
  float *Q = zeroed((size_t)T * wb), *K = zeroed((size_t)T * wb);
  float *V = zeroed((size_t)T * wb), *dO = zeroed((size_t)T * wb);
  float *O = zeroed((size_t)T * wb), *dQ = zeroed((size_t)T * wb);
  float *dK = zeroed((size_t)T * wb), *dV = zeroed((size_t)T * wb);
  int rc = slot && kc && vc && o && lse && dsum && Q && K && V && dO && O && dQ && dK && dV ? 0 : -1;
  const ts_attn_shape layer_shape = {.B = 1, .T = T, .dh = dh, .tile = L->tile, .Hg = H};
  for (int rep = 0; rep < J->reps && !rc; rep++)
    for (int r = 0; r < N && !rc; r++) {
      headpar_heads mine;
      headpar_forward_heads(N, H, G, TS_UPIPE_NATURAL, 0, r, &mine);
      for (int src = 0; src < N; src++) // segment src's queries of my heads: block src of the slot
        for (int t = 0; t < Tl; t++)
          for (int k = 0; k < per; k++)
            memcpy(slot + (size_t)t * C + (size_t)src * w + (size_t)k * dh,
                   L->q + ((size_t)src * Tl + t) * C + (size_t)mine.q[k] * dh, (size_t)dh * sizeof(float));
      take_heads(kc, L->k, C, T, mine.kv, mine.nkv, dh);
      take_heads(vc, L->v, C, T, mine.kv, mine.nkv, dh);
      rank_stats *st = &J->st[r];
      pairs_fwd = pairs_bwd = 0;
      phase = 1;
      double t0 = cpu_now();
      headpar_stage_attention(&counted, J->ws, &layer_shape, &mine, TS_UPIPE_NATURAL, N, Tl, C, G,
                              slot, w, kc, vc, mine.nkv, o, lse);
      st->tf[rep] = cpu_now() - t0;
      if (J->check && rep == 0) rc |= heads_differ("the output", r, o, L->out, C, T, mine.q, per, dh);
      st->tb[rep] = 0.0;
      for (int s = 0; s < nst && !rc; s++) {
        headpar_heads bh;
        headpar_backward_heads(N, Ub, G, s, r, &bh);
        take_heads(Q, L->q, C, T, bh.q, bh.nq, dh);
        take_heads(dO, L->dout, C, T, bh.q, bh.nq, dh);
        take_heads(K, L->k, C, T, bh.kv, bh.nkv, dh);
        take_heads(V, L->v, C, T, bh.kv, bh.nkv, dh);
        phase = 2;
        t0 = cpu_now();
        rc = headpar_stage_backward(&counted, J->ws, &layer_shape, bh.nq, bh.nkv, bh.q[0], Q, K, V,
                                    dO, O, lse, dQ, dK, dV, dsum);
        st->tb[rep] += cpu_now() - t0;
        phase = 0;
        if (J->check && rep == 0 && !rc) {
          rc |= heads_differ("the recomputed output", r, O, L->out, C, T, bh.q, bh.nq, dh);
          rc |= heads_differ("dQ", r, dQ, L->dq, C, T, bh.q, bh.nq, dh);
          rc |= heads_differ("dK", r, dK, L->dk, C, T, bh.kv, bh.nkv, dh);
          rc |= heads_differ("dV", r, dV, L->dv, C, T, bh.kv, bh.nkv, dh);
          for (int k = 0; k < bh.nq && !rc; k++) // lse (per, T): the heads' rows of the serial's
            rc |= differs("the lse", r, lse + (size_t)k * T, T, L->lse + (size_t)bh.q[k] * T, T, 1, T);
        }
      }
      st->pf = pairs_fwd;
      st->pb = pairs_bwd;
    }
  free(slot); free(kc); free(vc); free(o); free(lse); free(dsum);
  free(Q); free(K); free(V); free(dO); free(O); free(dQ); free(dK); free(dV);
  return rc;
}

// ring (exact): rank r's queries against blocks r, r−1, …, 0 in turn
// (ring_exact_forward_block), then the backward over the same blocks
// (ring_exact_backward_block), each block carrying the tree of [dK | dV]
// partials the ranks before have pushed onto it, as its message would.
// The ranks run in order, so a block's tree is complete after rank N−1.
static int run_ring(job *J) {
  const layer *L = J->L;
  const int T = L->T, H = L->H, dh = L->dh, C = H * dh, N = J->N, Tl = T / N;
  ring_geom g = {.n = N, .rows = Tl, .wk = C,
                 .as = {.B = 1, .T = T, .H = H, .dh = dh, .tile = L->tile, .Tq = Tl, .Tk = Tl,
                        .Hkv = H}};
  const size_t P = (size_t)Tl * 2 * C; // floats of a plane: rows of [K | V]
  const int nb = ring_exact_planes(&g);
  float *planes = zeroed((size_t)N * nb * P); // block c: planes c·nb on
  const size_t nr = (size_t)Tl * C;
  float *out = zeroed(nr), *dq = zeroed(nr);
  float *lse = zeroed((size_t)H * Tl), *lsum = zeroed((size_t)H * Tl);
  float *dsum = zeroed((size_t)H * Tl);
  int rc = planes && out && dq && lse && lsum && dsum ? 0 : -1;
  for (int c = 0; c < N && !rc; c++) // block c's [K | V]
    for (int t = 0; t < Tl; t++) {
      float *row = planes + (size_t)c * nb * P + (size_t)t * 2 * C;
      memcpy(row, L->k + ((size_t)c * Tl + t) * C, (size_t)C * sizeof(float));
      memcpy(row + C, L->v + ((size_t)c * Tl + t) * C, (size_t)C * sizeof(float));
    }
  for (int rep = 0; rep < J->reps && !rc; rep++) {
    for (int r = 0; r < N && !rc; r++) {
      g.at = r;
      g.next = (r + 1) % N;
      g.prev = (r + N - 1) % N;
      g.as.q0 = r * Tl;
      const float *q = L->q + (size_t)r * nr, *dout = L->dout + (size_t)r * nr;
      rank_stats *st = &J->st[r];
      pairs_fwd = pairs_bwd = 0;
      phase = 1;
      double t0 = cpu_now();
      for (int i = 0; i <= r; i++) // at step i the rank holds block r − i
        ring_exact_forward_block(&counted, J->ws, &g, i, r - i, q, planes + (size_t)(r - i) * nb * P,
                                 out, lse, lsum);
      st->tf[rep] = cpu_now() - t0;
      phase = 2;
      t0 = cpu_now();
      for (int i = 0; i <= r && !rc; i++)
        rc = ring_exact_backward_block(&counted, J->ws, &g, i, r - i,
                                       planes + (size_t)(r - i) * nb * P, dout, q, out, lse, dq, dsum);
      st->tb[rep] = cpu_now() - t0;
      phase = 0;
      st->pf = pairs_fwd;
      st->pb = pairs_bwd;
      if (J->check && rep == 0 && !rc) {
        rc |= differs("the output", r, out, C, L->out + (size_t)r * nr, C, Tl, C);
        rc |= differs("dQ", r, dq, C, L->dq + (size_t)r * nr, C, Tl, C);
        rc |= differs("the lse", r, lse, Tl, L->lse + (size_t)r * Tl, T, H, Tl);
      }
    }
    for (int c = 0; c < N && J->check && rep == 0 && !rc; c++) { // the finished trees
      const float *dkv = planes + (size_t)c * nb * P + P; // the stack's one plane
      rc |= differs("dK (its block's finished tree)", c, dkv, 2 * C, L->dk + (size_t)c * nr, C, Tl, C);
      rc |= differs("dV (its block's finished tree)", c, dkv + C, 2 * C, L->dv + (size_t)c * nr, C, Tl, C);
    }
  }
  free(planes); free(out); free(dq); free(lse); free(lsum); free(dsum);
  return rc;
}

// The refusal for T under the layout, or NULL (the trainer's rules for the
// strategy: src/config/layout.c, lss.c, ulysses.c). buf: room for the message.
static const char *layout_refusal(int layout, int N, int T, int H, char *buf, size_t cap) {
  const int tile = ts_default_tile(T);
  if (layout == L_SERIAL) return NULL;
  if (T % N != 0 || (T / N) % tile != 0 || ((T / N / tile) & (T / N / tile - 1)) != 0) {
    snprintf(buf, cap, "--seq %d with --ranks %d: each segment must hold a power of two of "
             "tiles (%d)", T, N, tile);
    return buf;
  }
  if (layout == L_LSS_ZIGZAG) {
    const int len = T / (2 * N);
    if (T % (2 * N) != 0 || len % tile != 0 || ((len / tile) & (len / tile - 1)) != 0) {
      snprintf(buf, cap, "--seq %d with --ranks %d: lss-zigzag's %d chunks must each hold a "
               "power of two of tiles (%d)", T, N, 2 * N, tile);
      return buf;
    }
  }
  if (layout == L_ULYSSES && (H % N != 0 || H / N > 64)) {
    snprintf(buf, cap, "--heads %d with --ranks %d: ulysses gives each rank whole heads, at "
             "most 64", H, N);
    return buf;
  }
  return NULL;
}

// The layout at T: the serial kernel's line, the ranks' lines, the layout's.
static int bench_layout(int layout, int N, int T, int H, int dh, int reps, int check, double roof) {
  layer L;
  ts_ws ws;
  if (layer_open(&L, &ws, T, H, dh) != 0) return -1;
  rank_stats *st = calloc((size_t)N, sizeof *st);
  double *times = malloc((size_t)2 * N * reps * sizeof(double));
  double mf = 0.0, mb = 0.0;
  int rc = st && times ? serial_run(&ws, &L, reps, &mf, &mb) : -1;
  for (int r = 0; st && times && r < N; r++) {
    st[r].tf = times + (size_t)2 * r * reps;
    st[r].tb = st[r].tf + reps;
  }
  const double flops = 6.0 * (double)T * T * H * dh;
  const int64_t serial_pairs = (int64_t)H * T * (T + 1) / 2; // causal: key j ≤ query i
  const double serial_gf = rc ? 0.0 : flops / (mf + mb) / 1e9;
  if (!rc) printf("serial  %6d  %5d  %9.3f  %9.3f  %8.1f  %7.1f  %5.1f%%\n", T, L.tile, mf, mb,
                  serial_gf, roof, 100.0 * serial_gf / roof);
  job J = {.L = &L, .ws = &ws, .N = N, .reps = reps, .check = check, .st = st};
  if (!rc) {
    switch (layout) {
    case L_LSS: rc = run_lss(&J, 0); break;
    case L_LSS_ZIGZAG: rc = run_lss(&J, 1); break;
    case L_ULYSSES: rc = run_ulysses(&J); break;
    case L_RING: rc = run_ring(&J); break;
    default: rc = -1;
    }
    if (rc && check) fprintf(stderr, "check: %s at T %d over %d ranks: failed\n",
                             layout_names[layout], T, N);
  }
  double busiest = 0.0, mean = 0.0;
  int64_t sum_f = 0, sum_b = 0;
  for (int r = 0; r < N && !rc; r++) {
    const double f = median(st[r].tf, reps), b = median(st[r].tb, reps), sec = f + b;
    const double share = flops * (double)st[r].pf / (double)serial_pairs;
    const double gf = share / sec / 1e9;
    printf("rank    %6d  %5d  %-10s  %3d  %3d  %9.3f  %9.3f  %9.4f  %8.1f  %5.1f%%\n", T, L.tile,
           layout_names[layout], N, r, f, b, share / 1e9, gf, 100.0 * gf / roof);
    busiest = sec > busiest ? sec : busiest;
    mean += sec / N;
    sum_f += st[r].pf;
    sum_b += st[r].pb;
  }
  if (!rc && check) {
    if (sum_f != serial_pairs || sum_b != serial_pairs) {
      fprintf(stderr, "check: %s at T %d over %d ranks: the ranks' calls cover %lld forward and "
              "%lld backward (query, key) pairs, the serial layer %lld\n", layout_names[layout],
              T, N, (long long)sum_f, (long long)sum_b, (long long)serial_pairs);
      rc = -1;
    } else {
      printf("check   %6d  %5d  %-10s  %3d  pairs %lld = serial, FLOPs %.6g = serial %.6g, "
             "results identical\n", T, L.tile, layout_names[layout], N, (long long)sum_f,
             flops * (double)sum_f / (double)serial_pairs, flops);
    }
  }
  if (!rc) {
    const double gf = flops / (N * busiest) / 1e9;
    printf("layout  %6d  %5d  %-10s  %3d  %9.3f  %9.3f  %6.3f  %8.1f  %8.1f  %5.1f%%\n", T, L.tile,
           layout_names[layout], N, busiest, mean, busiest / mean, gf, serial_gf,
           100.0 * gf / serial_gf);
  }
  fflush(stdout);
  free(st); free(times);
  ts_ws_free(&ws);
  layer_free(&L);
  return rc;
}

// The roof as tessera's trainer measures it (src/run/common.c): a 1024^3
// product, the faster of ts_mm and (when built with it) OpenBLAS's sgemm,
// here on the benchmark's threads and timed like the attention.
static double sgemm_roof(void) {
  const int n = 1024;
  float *a = filled((size_t)n * n, 5), *b = filled((size_t)n * n, 6), *c = filled((size_t)n * n, 7);
  double best = 0.0;
#ifdef TS_HAVE_BLAS
  const int kinds = 2;
  openblas_set_num_threads(nthreads);
#else
  const int kinds = 1;
#endif
  for (int blas = 0; blas < kinds; blas++)
    for (int r = 0; a && b && c && r < 5; r++) {
      double t0 = cpu_now();
#ifdef TS_HAVE_BLAS
      if (blas)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
      else
#endif
        ts_mm(0, 0, n, n, n, 1.0f, a, n, b, n, 0, c, n);
      double gf = 2.0 * n * n * (double)n / (cpu_now() - t0) / 1e9;
      if (r > 0 && gf > best) best = gf; // the first pays for page faults
    }
#ifdef TS_HAVE_BLAS
  openblas_set_num_threads(1); // attention's own threads are OpenMP's
#endif
  free(a); free(b); free(c);
  return best;
}

static const char usage[] =
    "usage: %s [--seq T[,T...]] [--heads H] [--dh D] [--threads N] [--reps R] "
    "[--layout serial|lss|lss-zigzag|ulysses|ring] [--ranks N] [--check]\n";

int main(int argc, char **argv) {
  const char *seqs = "1024,4096,16384,32768";
  int H = 8, dh = 64, reps = 3, layout = L_SERIAL, N = 1, check = 0, bad = 0;
  for (int i = 1; i < argc; i += 2) {
    if (!strcmp(argv[i], "--check")) { // the one flag without a value
      check = 1;
      i--;
      continue;
    }
    if (i + 1 >= argc) {
      bad = 1;
      break;
    }
    if (!strcmp(argv[i], "--seq")) seqs = argv[i + 1];
    else if (!strcmp(argv[i], "--heads")) H = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--dh")) dh = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--threads")) nthreads = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--ranks")) N = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--layout")) {
      for (layout = 0; layout < L_NLAYOUTS && strcmp(argv[i + 1], layout_names[layout]); layout++) {}
      if (layout == L_NLAYOUTS) {
        fprintf(stderr, "--layout %s: must be serial, lss, lss-zigzag, ulysses or ring\n", argv[i + 1]);
        return 2;
      }
    } else {
      fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (bad || H < 1 || dh < 1 || nthreads < 1 || reps < 1) {
    fprintf(stderr, usage, argv[0]);
    return 2;
  }
  if (N < 1 || N > 64 || (N & (N - 1)) != 0) {
    fprintf(stderr, "--ranks %d: must be a power of two from 1 to 64 (the exact layouts combine "
            "ranks as a binary tree)\n", N);
    return 2;
  }
  if (layout == L_SERIAL && (N != 1 || check)) {
    fprintf(stderr, "%s: the serial layout has one rank and nothing to check against; give "
            "--layout\n", N != 1 ? "--ranks" : "--check");
    return 2;
  }
  for (const char *p = seqs; *p;) { // every T refused up front, before any work
    char why[200];
    int T = atoi(p);
    const char *no = T < 8 ? "must be at least 8" : layout_refusal(layout, N, T, H, why, sizeof why);
    if (no) {
      if (T < 8) fprintf(stderr, "--seq %d: %s\n", T, no);
      else fprintf(stderr, "%s\n", no);
      return 2;
    }
    p = strchr(p, ',');
    if (!p) break;
    p++;
  }
  omp_set_num_threads(nthreads);
  counted = ts_backend_cpu;
  counted.attention_forward = count_forward;
  counted.attention_forward_block = count_forward_block;
  counted.attention_backward = count_backward;
  double roof = sgemm_roof();
  if (layout == L_SERIAL) {
    printf("# attention forward + backward, B 1, %d heads of %d, %d thread%s, median of %d, CPU time\n",
           H, dh, nthreads, nthreads == 1 ? "" : "s", reps);
    printf("%6s  %5s  %9s  %9s  %8s  %7s  %6s\n", "T", "tile", "fwd_s", "bwd_s", "GFLOP/s", "roof",
           "of_roof");
  } else {
    printf("# attention forward + backward of each of %d ranks of %s (its strategy's kernel calls, "
           "ranks one after another), B 1, %d heads of %d, %d thread%s, median of %d, CPU time; "
           "communication excluded\n",
           N, layout_names[layout], H, dh, nthreads, nthreads == 1 ? "" : "s", reps);
    printf("# serial  T tile fwd_s bwd_s GFLOP/s roof of_roof\n"
           "# rank    T tile layout ranks rank fwd_s bwd_s GFLOP(share) GFLOP/s of_roof\n"
           "# layout  T tile layout ranks busiest_s mean_s busiest/mean GFLOP/s serial_GFLOP/s "
           "of_serial   (GFLOP/s: total FLOPs / (ranks x busiest_s))\n");
  }
  for (const char *p = seqs; *p;) {
    int T = atoi(p);
    int rc = layout == L_SERIAL ? bench_one(T, H, dh, reps, roof)
                                : bench_layout(layout, N, T, H, dh, reps, check, roof);
    if (rc != 0) {
      fprintf(stderr, "T %d: failed\n", T);
      return 1;
    }
    p = strchr(p, ',');
    if (!p) break;
    p++;
  }
  return 0;
}
