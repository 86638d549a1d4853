// The invariances the exactness contract (docs/EXACTNESS.md R1–R3) rests on, each
// checked bit for bit with memcmp:
//   - a kernel's result does not depend on the OpenMP thread count;
//   - a tile's result does not depend on which other tiles share the call;
//   - per-head projection equals the concatenation of single-head calls, so
//     any subset of heads can be projected alone;
//   - tree sums over aligned power-of-two sub-ranges combine to the whole
//     (and naive left-to-right summation does not: the check can fail);
//   - attention over a batch equals attention per sequence;
//   - attention walked block by block (exact ring attention) equals one walk.
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "testdata.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/kernels.h"
#include "exact/tree.h"

// ---- data -------------------------------------------------------------------------------

// Uniform in [-scale, scale).
static void fill(float *x, size_t n, uint64_t seed, float scale) {
  uint64_t s = seed;
  for (size_t i = 0; i < n; i++)
    x[i] = scale * (float)((double)(mix64(&s) >> 11) / 4503599627370496.0 - 1.0);
}

static float *falloc(size_t n) {
  float *p = calloc(n ? n : 1, sizeof(float));
  assert_non_null(p);
  return p;
}

static int setup(void **state) {
  return 0;
}

static int teardown(void **state) {
  omp_set_num_threads(2);
  return 0;
}

// ---- thread count -------------------------------------------------------------------------
// Shapes: 2 sequences of 128 tokens, C = 64, tile 16, leaf 32 (8 leaves);
// attention with 8 key tiles of 8, 2 heads of dh 16, with and without dropout.
enum { TB = 2, TT = 128, TC = 64, TOC = 96, THD = 16, TTILE = 16, TLEAF = 32, TV = 50 };
enum { AB = 2, AT = 64, AH = 2, ADH = 16, ATILE = 8 };
#define TNTOK ((int64_t)TB * TT)

typedef struct {
  float *lin, *heads, *dinp, *dW, *db;      // linear
  float *lndx, *lndw, *lndb;                // layernorm backward
  float *out[2], *lse[2], *dq[2], *dk[2], *dv[2]; // attention, p = 0 and p = 0.2
  float *dwpe, *dwte;                       // encoder
} results;

typedef struct {
  const float *x, *W, *b, *dy, *lnx, *lnw, *q, *k, *v, *da, *demb;
  const int *tok;
} inputs;

typedef struct {
  const float *dout;
  const int *tok;
  int leaf, C, V;
} wte_ctx;

static void wte_leaf(const void *vctx, int64_t li, float *out) {
  const wte_ctx *c = vctx;
  memset(out, 0, (size_t)c->V * c->C * sizeof(float));
  encoder_wte_leaf_scatter(out, c->dout, c->tok, li, c->leaf, c->C);
}

static void alloc_results(results *r) {
  r->lin = falloc(TNTOK * TOC);
  r->heads = falloc(TNTOK * TOC);
  r->dinp = falloc(TNTOK * TC);
  r->dW = falloc((size_t)TOC * TC);
  r->db = falloc(TOC);
  r->lndx = falloc(TNTOK * TC);
  r->lndw = falloc(TC);
  r->lndb = falloc(TC);
  size_t na = (size_t)AB * AT * AH * ADH, nl = (size_t)AB * AH * AT;
  for (int d = 0; d < 2; d++) {
    r->out[d] = falloc(na); r->lse[d] = falloc(nl);
    r->dq[d] = falloc(na); r->dk[d] = falloc(na); r->dv[d] = falloc(na);
  }
  r->dwpe = falloc((size_t)TT * TC);
  r->dwte = falloc((size_t)TV * TC);
}

static void free_results(results *r) {
  free(r->lin); free(r->heads); free(r->dinp); free(r->dW); free(r->db);
  free(r->lndx); free(r->lndw); free(r->lndb);
  for (int d = 0; d < 2; d++) { free(r->out[d]); free(r->lse[d]); free(r->dq[d]); free(r->dk[d]); free(r->dv[d]); }
  free(r->dwpe); free(r->dwte);
}

// Everything under `nthreads` threads, with a workspace made for that count
// (the trainer makes its workspace after choosing the thread count).
static void run_all(int nthreads, const inputs *in, results *r) {
  omp_set_num_threads(nthreads);
  ts_ws ws;
  size_t cap = (size_t)TOC * TC + TOC;
  if ((size_t)TV * TC > cap) cap = (size_t)TV * TC;
  if ((size_t)TLEAF * TC > cap) cap = (size_t)TLEAF * TC;
  assert_int_equal(ts_ws_init(&ws, TTILE, TLEAF, cap, ADH), 0);
  assert_int_equal(ws.nthreads, nthreads);
  linear_forward(r->lin, in->x, in->W, in->b, TNTOK, TC, TOC, TTILE);
  linear_forward_heads(r->heads, in->x, in->W, in->b, TNTOK, TC, TOC, THD, TTILE);
  linear_backward_input(r->dinp, in->dy, in->W, TNTOK, TC, TOC, TTILE, 0);
  assert_int_equal(linear_backward_weights(&ws, r->dW, r->db, in->dy, in->x, TNTOK, TC, TOC), 0);

  float *ln = falloc(TNTOK * TC), *mean = falloc(TNTOK), *rstd = falloc(TNTOK);
  float *lnb = falloc(TC);
  layernorm_forward(ln, mean, rstd, in->lnx, in->lnw, lnb, TNTOK, TC);
  assert_int_equal(layernorm_backward(&ws, r->lndx, r->lndw, r->lndb, in->x, in->lnx, in->lnw,
                                      mean, rstd, TNTOK, TC), 0);
  free(ln); free(mean); free(rstd); free(lnb);

  ts_ws aws;
  assert_int_equal(ts_ws_init(&aws, ATILE, ATILE, 64, ADH), 0);
  float *dsum = falloc((size_t)AB * AH * AT);
  for (int d = 0; d < 2; d++) {
    ts_attn_shape s = {.B = AB, .T = AT, .H = AH, .dh = ADH, .tile = ATILE,
                       .dropout = d ? 0.2f : 0.0f, .seed = 11, .step = 4, .index_base = 777};
    attention_forward(&aws, r->out[d], r->lse[d], in->q, in->k, in->v, &s);
    assert_int_equal(attention_backward(&aws, r->dq[d], r->dk[d], r->dv[d], dsum, in->da, in->q,
                                        in->k, in->v, r->out[d], r->lse[d], &s), 0);
  }
  free(dsum);
  ts_ws_free(&aws);

  assert_int_equal(encoder_backward_wpe(&ws, r->dwpe, in->demb, TB, TT, TC), 0);
  wte_ctx wc = {in->demb, in->tok, TLEAF, TC, TV};
  assert_int_equal(ts_leaf_tree_sum(&ws, r->dwte, (size_t)TV * TC, TNTOK / TLEAF, wte_leaf, &wc), 0);
  ts_ws_free(&ws);
}

#define SAME(a, b, n, what)                                                                  \
  do {                                                                                       \
    if (memcmp((a), (b), (n) * sizeof(float)) != 0)                                          \
      fail_msg("%s differs between 1 and %d threads", what, nt);                             \
  } while (0)

static void test_thread_count(void **state) {
  float *x = falloc(TNTOK * TC), *W = falloc((size_t)TOC * TC), *b = falloc(TOC);
  float *dy = falloc(TNTOK * TOC), *lnx = falloc(TNTOK * TC), *lnw = falloc(TC);
  size_t na = (size_t)AB * AT * AH * ADH;
  float *q = falloc(na), *k = falloc(na), *v = falloc(na), *da = falloc(na);
  float *demb = falloc(TNTOK * TC);
  int *tok = malloc(TNTOK * sizeof(int));
  assert_non_null(tok);
  fill(x, TNTOK * TC, 1, 1.0f); fill(W, (size_t)TOC * TC, 2, 0.2f); fill(b, TOC, 3, 1.0f);
  fill(dy, TNTOK * TOC, 4, 1.0f); fill(lnx, TNTOK * TC, 5, 3.0f); fill(lnw, TC, 6, 1.0f);
  fill(q, na, 7, 2.0f); fill(k, na, 8, 2.0f); fill(v, na, 9, 1.0f); fill(da, na, 10, 1.0f);
  fill(demb, TNTOK * TC, 12, 1.0f);
  uint64_t s = 13;
  for (int64_t t = 0; t < TNTOK; t++) tok[t] = (int)(mix64(&s) % TV);
  inputs in = {x, W, b, dy, lnx, lnw, q, k, v, da, demb, tok};

  results ref, got;
  alloc_results(&ref);
  alloc_results(&got);
  run_all(1, &in, &ref);
  for (int nt = 2; nt <= 4; nt++) {
    run_all(nt, &in, &got);
    SAME(got.lin, ref.lin, TNTOK * TOC, "linear_forward");
    SAME(got.heads, ref.heads, TNTOK * TOC, "linear_forward_heads");
    SAME(got.dinp, ref.dinp, TNTOK * TC, "linear_backward_input");
    SAME(got.dW, ref.dW, (size_t)TOC * TC, "linear_backward_weights dW");
    SAME(got.db, ref.db, TOC, "linear_backward_weights db");
    SAME(got.lndx, ref.lndx, TNTOK * TC, "layernorm_backward dinp");
    SAME(got.lndw, ref.lndw, TC, "layernorm_backward dw");
    SAME(got.lndb, ref.lndb, TC, "layernorm_backward db");
    for (int d = 0; d < 2; d++) {
      SAME(got.out[d], ref.out[d], na, d ? "attention_forward out (dropout)" : "attention_forward out");
      SAME(got.lse[d], ref.lse[d], (size_t)AB * AH * AT, "attention_forward lse");
      SAME(got.dq[d], ref.dq[d], na, d ? "attention_backward dq (dropout)" : "attention_backward dq");
      SAME(got.dk[d], ref.dk[d], na, d ? "attention_backward dk (dropout)" : "attention_backward dk");
      SAME(got.dv[d], ref.dv[d], na, d ? "attention_backward dv (dropout)" : "attention_backward dv");
    }
    SAME(got.dwpe, ref.dwpe, (size_t)TT * TC, "encoder_backward_wpe");
    SAME(got.dwte, ref.dwte, (size_t)TV * TC, "wte leaf tree");
  }
  free_results(&ref);
  free_results(&got);
  free(x); free(W); free(b); free(dy); free(lnx); free(lnw);
  free(q); free(k); free(v); free(da); free(demb); free(tok);
}

// ---- tiles and heads ----------------------------------------------------------------------

// Row-wise kernels on a subset of tiles (a separate call on a sub-range, as a
// rank holding those tokens makes it) give the rows of the whole call. Small
// tiles are included on purpose: OpenBLAS rounds differently for very few
// rows (measured with 0.3.21: M <= 8 vs M >= 16 at K = 48 on a Cooper Lake
// core), so a kernel that merged tiles into one call would fail here.
static void tile_subsets(int64_t tile) {
  const int64_t ntiles = 12, ntok = ntiles * tile;
  const int C = 48, OC = 80, hd = 16;
  float *x = falloc(ntok * C), *W = falloc((size_t)OC * C), *b = falloc(OC), *dy = falloc(ntok * OC);
  fill(x, ntok * C, 20, 1.0f); fill(W, (size_t)OC * C, 21, 0.3f); fill(b, OC, 22, 1.0f);
  fill(dy, ntok * OC, 23, 1.0f);
  float *whole = falloc(ntok * OC), *wheads = falloc(ntok * OC), *wdx = falloc(ntok * C);
  float *part = falloc(ntok * OC);
  linear_forward(whole, x, W, b, ntok, C, OC, (int)tile);
  linear_forward_heads(wheads, x, W, b, ntok, C, OC, hd, (int)tile);
  linear_backward_input(wdx, dy, W, ntok, C, OC, (int)tile, 0);
  const int64_t ranges[][2] = {{0, 1}, {5, 6}, {3, 7}, {1, 12}, {8, 12}, {0, 6}};
  for (size_t r = 0; r < sizeof ranges / sizeof ranges[0]; r++) {
    int64_t t0 = ranges[r][0], nt = ranges[r][1] - t0, row0 = t0 * tile, rows = nt * tile;
    linear_forward(part, x + row0 * C, W, b, rows, C, OC, (int)tile);
    assert_memory_equal(part, whole + row0 * OC, (size_t)rows * OC * sizeof(float));
    linear_forward_heads(part, x + row0 * C, W, b, rows, C, OC, hd, (int)tile);
    assert_memory_equal(part, wheads + row0 * OC, (size_t)rows * OC * sizeof(float));
    linear_backward_input(part, dy + row0 * OC, W, rows, C, OC, (int)tile, 0);
    assert_memory_equal(part, wdx + row0 * C, (size_t)rows * C * sizeof(float));
  }
  // layernorm, GeLU: row- or element-wise on any sub-range
  float *lnw = falloc(C), *lnb = falloc(C), *ln = falloc(ntok * C), *m = falloc(ntok),
        *rs = falloc(ntok), *lnp = falloc(ntok * C), *mp = falloc(ntok), *rsp = falloc(ntok);
  fill(lnw, C, 24, 1.0f); fill(lnb, C, 25, 1.0f);
  layernorm_forward(ln, m, rs, x, lnw, lnb, ntok, C);
  layernorm_forward(lnp, mp, rsp, x + 3 * tile * C, lnw, lnb, 5 * tile, C);
  assert_memory_equal(lnp, ln + 3 * tile * C, (size_t)5 * tile * C * sizeof(float));
  assert_memory_equal(rsp, rs + 3 * tile, (size_t)5 * tile * sizeof(float));
  gelu_forward(ln, x, ntok * C);
  gelu_forward(lnp, x + 100, 1000);
  assert_memory_equal(lnp, ln + 100, 1000 * sizeof(float));
  free(x); free(W); free(b); free(dy); free(whole); free(wheads); free(wdx); free(part);
  free(lnw); free(lnb); free(ln); free(m); free(rs); free(lnp); free(mp); free(rsp);
}

static void test_tile_subsets(void **state) {
  omp_set_num_threads(2);
  tile_subsets(4);
  tile_subsets(16);
  tile_subsets(64);
}

// Per-head projection is what makes head subsets exact (R1): the Q/K/V
// projection of all heads is, bit for bit, the concatenation of calls that
// each project one head (OC = dh on that head's weight rows), and a call on
// any run of heads gives those heads' columns. A rank that owns some heads
// (UPipe, Ulysses) therefore computes exactly the serial columns.
static void test_heads_are_independent(void **state) {
  omp_set_num_threads(2);
  const int64_t tile = 16, ntok = 4 * tile;
  const int C = 64, H = 8, hd = 16, OC = H * hd;
  float *x = falloc(ntok * C), *W = falloc((size_t)OC * C), *b = falloc(OC);
  fill(x, ntok * C, 30, 1.0f); fill(W, (size_t)OC * C, 31, 0.3f); fill(b, OC, 32, 1.0f);
  float *all = falloc(ntok * OC), *one = falloc(ntok * hd), *one_h = falloc(ntok * hd),
        *some = falloc(ntok * 3 * hd);
  linear_forward_heads(all, x, W, b, ntok, C, OC, hd, (int)tile);
  for (int h = 0; h < H; h++) {
    const float *Wh = W + (size_t)h * hd * C, *bh = b + (size_t)h * hd;
    linear_forward(one, x, Wh, bh, ntok, C, hd, (int)tile);
    linear_forward_heads(one_h, x, Wh, bh, ntok, C, hd, hd, (int)tile);
    for (int64_t t = 0; t < ntok; t++) {
      assert_memory_equal(one + t * hd, all + t * OC + (size_t)h * hd, hd * sizeof(float));
      assert_memory_equal(one_h + t * hd, all + t * OC + (size_t)h * hd, hd * sizeof(float));
    }
  }
  // heads 2, 3, 4 in one call
  linear_forward_heads(some, x, W + (size_t)2 * hd * C, b + 2 * hd, ntok, C, 3 * hd, hd, (int)tile);
  for (int64_t t = 0; t < ntok; t++)
    assert_memory_equal(some + t * 3 * hd, all + t * OC + 2 * hd, 3 * hd * sizeof(float));
  // without bias too
  linear_forward_heads(all, x, W, NULL, ntok, C, OC, hd, (int)tile);
  linear_forward(one, x, W + (size_t)5 * hd * C, NULL, ntok, C, hd, (int)tile);
  for (int64_t t = 0; t < ntok; t++)
    assert_memory_equal(one + t * hd, all + t * OC + 5 * hd, hd * sizeof(float));
  free(x); free(W); free(b); free(all); free(one); free(one_h); free(some);
}

// ---- trees over sub-ranges -------------------------------------------------------------------


static size_t pow2_at_least(size_t n) {
  size_t p = 1;
  while (p < n) p *= 2;
  return p;
}

// ts_tree over leaves [lo, hi), starting at position `start`.
static void tree_range(ts_tree *t, float *out, const float *x, size_t m, size_t lo, size_t hi,
                       uint64_t start) {
  ts_tree_reset(t, start);
  for (size_t i = lo; i < hi; i++) assert_int_equal(ts_tree_push(t, x + i * m), 0);
  ts_tree_finish(t, out);
}

static void test_tree_subranges(void **state) {
  const size_t m = 33;
  const size_t ns[] = {64, 48, 37, 100, 2};
  for (size_t c = 0; c < sizeof ns / sizeof ns[0]; c++) {
    const size_t n = ns[c], size = pow2_at_least(n);
    float *x = falloc(n * m), *whole = falloc(m), *want = falloc(m), *naive = falloc(m);
    fill_wide(x, n * m, 40 + c);
    ts_tree t, outer;
    ts_tree_init(&t, m);
    ts_tree_init(&outer, m);
    tree_range(&t, whole, x, m, 0, n, 0);
    // (b) the plain recursive tree
    ref_tree(want, x, NULL, n, m, 0, size);
    assert_memory_equal(whole, want, m * sizeof(float));
    // (a) aligned chunks of 2^k leaves, each summed alone (as a rank would,
    // from a fresh tree and from its own start position), then combined in
    // tree order: by hand for halves and quarters, and by a tree over chunks.
    size_t nch_max = size;
    float *chunk = falloc(nch_max * m), *chunk2 = falloc(m), *comb = falloc(m);
    for (size_t len = 1; len <= size; len *= 2) {
      size_t nch = (n + len - 1) / len;
      for (size_t ch = 0; ch < nch; ch++) {
        size_t lo = ch * len, hi = lo + len < n ? lo + len : n;
        tree_range(&t, chunk + ch * m, x, m, lo, hi, 0);
        tree_range(&t, chunk2, x, m, lo, hi, lo); // a rank's tree starts at its offset
        assert_memory_equal(chunk2, chunk + ch * m, m * sizeof(float));
      }
      tree_range(&outer, comb, chunk, m, 0, nch, 0);
      if (memcmp(comb, whole, m * sizeof(float)) != 0)
        fail_msg("n = %zu: chunks of %zu leaves combined != whole tree", n, len);
      if (len == size / 2 && nch == 2) { // halves: whole = h0 + h1
        memcpy(comb, chunk, m * sizeof(float));
        ts_tree_add(comb, chunk + m, m);
        assert_memory_equal(comb, whole, m * sizeof(float));
      }
      if (len == size / 4 && nch >= 3) { // quarters: (q0 + q1) + (q2 + q3)
        float *l = falloc(m);
        memcpy(l, chunk, m * sizeof(float));
        ts_tree_add(l, chunk + m, m);
        memcpy(comb, chunk + 2 * m, m * sizeof(float));
        if (nch == 4) ts_tree_add(comb, chunk + 3 * m, m); // else q3 is empty: identity
        ts_tree_add(l, comb, m);
        assert_memory_equal(l, whole, m * sizeof(float));
        free(l);
      }
    }
    // (c) naive left-to-right summation gives other bits on this data, so a
    // regression to it would be caught
    if (n >= 4) {
      memcpy(naive, x, m * sizeof(float));
      for (size_t i = 1; i < n; i++)
        for (size_t j = 0; j < m; j++) naive[j] = naive[j] + x[i * m + j];
      assert_memory_not_equal(naive, whole, m * sizeof(float));
    }
    ts_tree_free(&t);
    ts_tree_free(&outer);
    free(x); free(whole); free(want); free(naive); free(chunk); free(chunk2); free(comb);
  }
}

// Weight and norm gradients of aligned leaf ranges (what a data- or
// sequence-parallel rank computes) combine in tree order to the serial
// gradient: halves a + b, quarters (q0 + q1) + (q2 + q3).
static void test_weight_gradients_split(void **state) {
  omp_set_num_threads(2);
  const int leaf = 16, C = 24, OC = 40;
  const int64_t nleaves = 8, ntok = nleaves * leaf;
  float *x = falloc(ntok * C), *dy = falloc(ntok * OC), *lnw = falloc(C), *lnb = falloc(C);
  fill_wide(x, ntok * C, 50);
  fill_wide(dy, ntok * OC, 51);
  fill(lnw, C, 52, 1.0f);
  float *mean = falloc(ntok), *rstd = falloc(ntok), *ln = falloc(ntok * C), *dx = falloc(ntok * C);
  float *lnx = falloc(ntok * C), *lndy = falloc(ntok * C);
  fill(lnx, ntok * C, 53, 2.0f);
  fill(lndy, ntok * C, 54, 1.0f);
  layernorm_forward(ln, mean, rstd, lnx, lnw, lnb, ntok, C);
  ts_ws ws;
  assert_int_equal(ts_ws_init(&ws, leaf, leaf, (size_t)OC * C + OC, 8), 0);
  const size_t nw = (size_t)OC * C + OC; // [dW | db]
  float *whole = falloc(nw), *part = falloc(4 * nw), *comb = falloc(nw);
  float *lnwhole = falloc(2 * C), *lnpart = falloc(8 * C), *lncomb = falloc(2 * C);
  assert_int_equal(linear_backward_weights(&ws, whole, whole + (size_t)OC * C, dy, x, ntok, C, OC), 0);
  assert_int_equal(layernorm_backward(&ws, dx, lnwhole, lnwhole + C, lndy, lnx, lnw, mean, rstd, ntok, C), 0);
  for (int parts = 2; parts <= 4; parts *= 2) {
    int64_t rows = ntok / parts;
    for (int p = 0; p < parts; p++) {
      float *pw = part + (size_t)p * nw, *pl = lnpart + (size_t)p * 2 * C;
      int64_t r0 = p * rows;
      assert_int_equal(linear_backward_weights(&ws, pw, pw + (size_t)OC * C, dy + r0 * OC,
                                               x + r0 * C, rows, C, OC), 0);
      assert_int_equal(layernorm_backward(&ws, dx, pl, pl + C, lndy + r0 * C, lnx + r0 * C, lnw,
                                          mean + r0, rstd + r0, rows, C), 0);
    }
    // tree order over the parts: pair distance 1, then 2
    for (int d = 1; d < parts; d *= 2)
      for (int p = 0; p + d < parts; p += 2 * d) {
        ts_tree_add(part + (size_t)p * nw, part + (size_t)(p + d) * nw, nw);
        ts_tree_add(lnpart + (size_t)p * 2 * C, lnpart + (size_t)(p + d) * 2 * C, 2 * (size_t)C);
      }
    memcpy(comb, part, nw * sizeof(float));
    memcpy(lncomb, lnpart, 2 * C * sizeof(float));
    if (memcmp(comb, whole, nw * sizeof(float)) != 0)
      fail_msg("linear weight gradient: %d parts combined != whole", parts);
    if (memcmp(lncomb, lnwhole, 2 * C * sizeof(float)) != 0)
      fail_msg("layernorm gradient: %d parts combined != whole", parts);
  }
  // and the sum is not the naive one: combining the parts left to right
  // (((q0 + q1) + q2) + q3) differs on this data
  int64_t rows = ntok / 4;
  for (int p = 0; p < 4; p++) {
    float *pw = part + (size_t)p * nw;
    assert_int_equal(linear_backward_weights(&ws, pw, pw + (size_t)OC * C, dy + p * rows * OC,
                                             x + p * rows * C, rows, C, OC), 0);
  }
  for (int p = 1; p < 4; p++) ts_tree_add(part, part + (size_t)p * nw, nw);
  assert_memory_not_equal(part, whole, nw * sizeof(float));
  ts_ws_free(&ws);
  free(x); free(dy); free(lnw); free(lnb); free(mean); free(rstd); free(ln); free(dx);
  free(lnx); free(lndy); free(whole); free(part); free(comb); free(lnwhole); free(lnpart); free(lncomb);
}

// ---- attention per sequence --------------------------------------------------------------------

// A batch of 2 sequences equals each sequence alone (B = 1 calls with the
// sequence's own dropout index base): forward, and the dK/dV trees of backward.
static void test_attention_batch_vs_sequences(void **state) {
  omp_set_num_threads(2);
  const int B = 2, T = 64, H = 2, dh = 16, tile = 8, C = H * dh;
  const size_t per = (size_t)T * C, n = B * per, nl = (size_t)B * H * T, perl = (size_t)H * T;
  float *q = falloc(n), *k = falloc(n), *v = falloc(n), *dout = falloc(n);
  fill(q, n, 60, 2.0f); fill(k, n, 61, 2.0f); fill(v, n, 62, 1.0f); fill(dout, n, 63, 1.0f);
  ts_ws ws;
  assert_int_equal(ts_ws_init(&ws, tile, tile, 64, dh), 0);
  float *o = falloc(n), *l = falloc(nl), *dq = falloc(n), *dk = falloc(n), *dv = falloc(n),
        *ds = falloc(nl);
  float *o1 = falloc(per), *l1 = falloc(perl), *dq1 = falloc(per), *dk1 = falloc(per),
        *dv1 = falloc(per), *ds1 = falloc(perl);
  for (int d = 0; d < 2; d++) {
    const float p = d ? 0.15f : 0.0f;
    ts_attn_shape s = {.B = B, .T = T, .H = H, .dh = dh, .tile = tile, .dropout = p, .seed = 21,
                       .step = 6, .index_base = 5000};
    attention_forward(&ws, o, l, q, k, v, &s);
    assert_int_equal(attention_backward(&ws, dq, dk, dv, ds, dout, q, k, v, o, l, &s), 0);
    for (int b = 0; b < B; b++) {
      ts_attn_shape s1 = {.B = 1, .T = T, .H = H, .dh = dh, .tile = tile, .dropout = p, .seed = 21,
                          .step = 6, .index_base = 5000 + (uint64_t)b * H * T * T};
      const size_t off = b * per;
      attention_forward(&ws, o1, l1, q + off, k + off, v + off, &s1);
      assert_int_equal(attention_backward(&ws, dq1, dk1, dv1, ds1, dout + off, q + off, k + off,
                                          v + off, o1, l1, &s1), 0);
      assert_memory_equal(o1, o + off, per * sizeof(float));
      assert_memory_equal(l1, l + b * perl, perl * sizeof(float));
      assert_memory_equal(dq1, dq + off, per * sizeof(float));
      assert_memory_equal(dk1, dk + off, per * sizeof(float));
      assert_memory_equal(dv1, dv + off, per * sizeof(float));
    }
  }
  ts_ws_free(&ws);
  free(q); free(k); free(v); free(dout); free(o); free(l); free(dq); free(dk); free(dv); free(ds);
  free(o1); free(l1); free(dq1); free(dk1); free(dv1); free(ds1);
}

// Sequence parallelism's attention (docs/ALGORITHMS.md §2): queries of a segment
// [q0, q0 + T/N) against the whole sequence's keys give the serial rows of
// the output, lse and dQ; the segments' dK/dV partials (keys no local query
// sees are -0.0), summed as the canonical tree over segments, are the serial
// dK/dV. And a subset of heads (tensor-split layers) gives those heads'
// columns. Dropout off and on: its indices are the global ones.
static void test_attention_segments_and_heads(void **state) {
  omp_set_num_threads(2);
  const int T = 64, H = 2, dh = 16, tile = 8, C = H * dh;
  const size_t n = (size_t)T * C, nl = (size_t)H * T;
  float *q = falloc(n), *k = falloc(n), *v = falloc(n), *dout = falloc(n);
  fill(q, n, 70, 2.0f); fill(k, n, 71, 2.0f); fill(v, n, 72, 1.0f); fill(dout, n, 73, 1.0f);
  ts_ws ws;
  assert_int_equal(ts_ws_init(&ws, tile, tile, 64, dh), 0);
  float *o = falloc(n), *l = falloc(nl), *dq = falloc(n), *dk = falloc(n), *dv = falloc(n),
        *ds = falloc(nl);
  float *os = falloc(n), *ls = falloc(nl), *dqs = falloc(n), *dss = falloc(nl);
  float *dks = falloc(8 * n), *dvs = falloc(8 * n), *sum = falloc(n);
  for (int d = 0; d < 2; d++) {
    const float p = d ? 0.15f : 0.0f;
    ts_attn_shape s = {.B = 1, .T = T, .H = H, .dh = dh, .tile = tile, .dropout = p, .seed = 21,
                       .step = 6, .index_base = 5000};
    attention_forward(&ws, o, l, q, k, v, &s);
    assert_int_equal(attention_backward(&ws, dq, dk, dv, ds, dout, q, k, v, o, l, &s), 0);
    for (int N = 2; N <= 8; N *= 2) {
      const int Tq = T / N;
      for (int r = 0; r < N; r++) {
        const size_t off = (size_t)r * Tq * C;
        ts_attn_shape sr = {.B = 1, .T = T, .H = H, .dh = dh, .tile = tile, .dropout = p,
                            .seed = 21, .step = 6, .index_base = 5000, .Tq = Tq, .q0 = r * Tq,
                            .Tk = T};
        attention_forward(&ws, os, ls, q + off, k, v, &sr);
        assert_int_equal(attention_backward(&ws, dqs, dks + r * n, dvs + r * n, dss, dout + off,
                                            q + off, k, v, os, ls, &sr), 0);
        assert_memory_equal(os, o + off, (size_t)Tq * C * sizeof(float));
        assert_memory_equal(dqs, dq + off, (size_t)Tq * C * sizeof(float));
        for (int h = 0; h < H; h++)
          assert_memory_equal(ls + (size_t)h * Tq, l + (size_t)h * T + (size_t)r * Tq,
                              (size_t)Tq * sizeof(float));
      }
      assert_int_equal(ref_tree(sum, dks, NULL, (size_t)N, n, 0, (size_t)N), 1);
      assert_memory_equal(sum, dk, n * sizeof(float));
      assert_int_equal(ref_tree(sum, dvs, NULL, (size_t)N, n, 0, (size_t)N), 1);
      assert_memory_equal(sum, dv, n * sizeof(float));
    }
    // head 1 alone, packed into its own (T, dh) buffers
    float *qh = falloc((size_t)T * dh), *kh = falloc((size_t)T * dh), *vh = falloc((size_t)T * dh),
          *gh = falloc((size_t)T * dh);
    for (int t = 0; t < T; t++) {
      memcpy(qh + (size_t)t * dh, q + (size_t)t * C + dh, dh * sizeof(float));
      memcpy(kh + (size_t)t * dh, k + (size_t)t * C + dh, dh * sizeof(float));
      memcpy(vh + (size_t)t * dh, v + (size_t)t * C + dh, dh * sizeof(float));
      memcpy(gh + (size_t)t * dh, dout + (size_t)t * C + dh, dh * sizeof(float));
    }
    ts_attn_shape sh = {.B = 1, .T = T, .H = 1, .dh = dh, .tile = tile, .dropout = p, .seed = 21,
                        .step = 6, .index_base = 5000, .h0 = 1, .Hg = H};
    attention_forward(&ws, os, ls, qh, kh, vh, &sh);
    assert_int_equal(attention_backward(&ws, dqs, dks, dvs, dss, gh, qh, kh, vh, os, ls, &sh), 0);
    for (int t = 0; t < T; t++) {
      assert_memory_equal(os + (size_t)t * dh, o + (size_t)t * C + dh, dh * sizeof(float));
      assert_memory_equal(dqs + (size_t)t * dh, dq + (size_t)t * C + dh, dh * sizeof(float));
      assert_memory_equal(dks + (size_t)t * dh, dk + (size_t)t * C + dh, dh * sizeof(float));
      assert_memory_equal(dvs + (size_t)t * dh, dv + (size_t)t * C + dh, dh * sizeof(float));
    }
    assert_memory_equal(ls, l + T, (size_t)T * sizeof(float));
    free(qh); free(kh); free(vh); free(gh);
  }
  ts_ws_free(&ws);
  free(q); free(k); free(v); free(dout); free(o); free(l); free(dq); free(dk); free(dv); free(ds);
  free(os); free(ls); free(dqs); free(dss); free(dks); free(dvs); free(sum);
}

// Exact ring attention (src/cp/ring.h): rank r of N holds queries
// [r·T/N, (r+1)·T/N) and visits the key blocks r, r−1, …, 0 one call each,
// carrying the online-softmax state (attention_forward_block): its output and
// lse are the serial rows. Its backward adds dQ block by block (dq_acc): the
// serial dQ rows. Block c's dK/dV partials of the ranks c … N−1, pushed in
// rank order into a tree started at position c (the ranks before c see none
// of its keys), are the serial dK/dV rows. Keys and values interleaved as the
// travelling block holds them; GQA; dropout off and on.
static void test_attention_ring_blocks(void **state) {
  omp_set_num_threads(2);
  const int T = 64, H = 4, Hkv = 2, dh = 16, tile = 8, C = H * dh, Ckv = Hkv * dh, W = 2 * Ckv;
  const size_t n = (size_t)T * C, nkv = (size_t)T * Ckv, nl = (size_t)H * T;
  float *q = falloc(n), *k = falloc(nkv), *v = falloc(nkv), *dout = falloc(n);
  fill(q, n, 80, 2.0f); fill(k, nkv, 81, 2.0f); fill(v, nkv, 82, 1.0f); fill(dout, n, 83, 1.0f);
  float *kv = falloc((size_t)T * W); // rows of [K | V]
  for (int t = 0; t < T; t++) {
    memcpy(kv + (size_t)t * W, k + (size_t)t * Ckv, Ckv * sizeof(float));
    memcpy(kv + (size_t)t * W + Ckv, v + (size_t)t * Ckv, Ckv * sizeof(float));
  }
  ts_ws ws;
  assert_int_equal(ts_ws_init(&ws, tile, tile, 64, dh), 0);
  float *o = falloc(n), *l = falloc(nl), *dq = falloc(n), *dk = falloc(nkv), *dv = falloc(nkv),
        *ds = falloc(nl);
  float *os = falloc(n), *ls = falloc(nl), *lsum = falloc(nl), *dqs = falloc(n), *dss = falloc(nl);
  float *part = falloc(8 * (size_t)T * W), *sum = falloc((size_t)T * W);
  ts_tree tree;
  for (int d = 0; d < 2; d++) {
    const float p = d ? 0.15f : 0.0f;
    ts_attn_shape s = {.B = 1, .T = T, .H = H, .dh = dh, .tile = tile, .dropout = p, .seed = 21,
                       .step = 6, .index_base = 5000, .Hkv = Hkv};
    attention_forward(&ws, o, l, q, k, v, &s);
    assert_int_equal(attention_backward(&ws, dq, dk, dv, ds, dout, q, k, v, o, l, &s), 0);
    for (int N = 2; N <= 8; N *= 2) {
      const int Tq = T / N;
      const size_t blk = (size_t)Tq * W; // floats of a block, or of a partial
      for (int r = 0; r < N; r++) {
        const size_t off = (size_t)r * Tq * C;
        ts_attn_shape sr = s;
        sr.Tq = Tq, sr.q0 = r * Tq, sr.Tk = Tq, sr.ldkv = W;
        for (int c = r; c >= 0; c--) {
          sr.k0 = c * Tq;
          const float *kb = kv + (size_t)c * blk;
          attention_forward_block(&ws, os, ls, lsum, q + off, kb, kb + Ckv, &sr, c == r, c == 0);
        }
        assert_memory_equal(os, o + off, (size_t)Tq * C * sizeof(float));
        for (int h = 0; h < H; h++)
          assert_memory_equal(ls + (size_t)h * Tq, l + (size_t)h * T + (size_t)r * Tq,
                              (size_t)Tq * sizeof(float));
        for (int c = r; c >= 0; c--) {
          sr.k0 = c * Tq;
          sr.dq_acc = c < r;
          const float *kb = kv + (size_t)c * blk;
          float *pt = part + ((size_t)c * N + r) * blk; // block c's partial from rank r
          assert_int_equal(attention_backward(&ws, dqs, pt, pt + Ckv, dss, dout + off, q + off,
                                              kb, kb + Ckv, os, ls, &sr), 0);
        }
        sr.dq_acc = 0;
        assert_memory_equal(dqs, dq + off, (size_t)Tq * C * sizeof(float));
      }
      ts_tree_init(&tree, blk);
      for (int c = 0; c < N; c++) {
        ts_tree_reset(&tree, (uint64_t)c);
        for (int r = c; r < N; r++)
          assert_int_equal(ts_tree_push(&tree, part + ((size_t)c * N + r) * blk), 0);
        ts_tree_finish(&tree, sum);
        for (int t = 0; t < Tq; t++) {
          const size_t row = (size_t)c * Tq + t;
          assert_memory_equal(sum + (size_t)t * W, dk + row * Ckv, Ckv * sizeof(float));
          assert_memory_equal(sum + (size_t)t * W + Ckv, dv + row * Ckv, Ckv * sizeof(float));
        }
      }
      ts_tree_free(&tree);
    }
  }
  ts_ws_free(&ws);
  free(q); free(k); free(v); free(dout); free(kv); free(o); free(l); free(dq); free(dk); free(dv);
  free(ds); free(os); free(ls); free(lsum); free(dqs); free(dss); free(part); free(sum);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_thread_count),
      cmocka_unit_test(test_tile_subsets),
      cmocka_unit_test(test_heads_are_independent),
      cmocka_unit_test(test_tree_subranges),
      cmocka_unit_test(test_weight_gradients_split),
      cmocka_unit_test(test_attention_batch_vs_sequences),
      cmocka_unit_test(test_attention_segments_and_heads),
      cmocka_unit_test(test_attention_ring_blocks),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
