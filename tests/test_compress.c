// Stage-boundary compression in the serial model (src/boundary/): the
// backward is the gradient of the compressed model where the model is
// differentiable through it, SPEL keeps every projector on St(d, r) over a
// long run while the unconstrained ablation leaves it; mapl-vq's
// quantiser (src/boundary/vq.h): greedy residual codes, its statistics, the EMA update
// and the shared copy both sides code with, which the stream walks in turn;
// ssn-confined's stream, which its boundary carries without loss, and the
// gradient's quantisation (--vq-backward on): scale-free codes and the scale
// beside them, decoded with the gradient's own shared copy.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/optim.h"
#include "backend/orthogonal.h"
#include "exact/rng.h"
#include "tessera.h"
#include "boundary/boundary.h"
#include "boundary/vq.h"

enum { B = 2, T = 64, R = 16, S = 4 };

static ts_config compressed(int mode) {
  ts_config c;
  memset(&c, 0, sizeof c);
  assert_int_equal(ts_config_preset(&c, "llama-tiny"), TS_OK);
  ts_config_defaults(&c);
  c.n_layer = 4;
  c.batch = B;
  c.seq = T;
  c.steps = 300;
  c.warmup = 10;
  c.compress = mode;
  c.compress_rank = R;
  c.compress_stages = S;
  assert_int_equal(ts_config_finalize(&c), TS_OK);
  return c;
}

static void random_tokens(int *x, size_t n, uint64_t key) {
  for (size_t i = 0; i < n; i++) x[i] = (int)ts_rng_below(99, 7, key, i, 256);
}

static ts_tensor *find(ts_tensor *t, int nt, const char *name) {
  for (int i = 0; i < nt; i++)
    if (strcmp(t[i].name, name) == 0) return &t[i];
  fail_msg("no tensor %s", name);
  return NULL;
}

// The directional derivative of the loss along the gradient of one tensor,
// by central differences, against the gradient's squared norm. Holds where
// the compressed model is differentiable as written: the anchors (each
// enters one encode or decode linearly) and the token embedding upstream of
// every boundary (its gradient crosses all three). Bound: 2e-3 relative plus
// the quotient's rounding — the loss is fp32 (an ulp is 4.8e-7 at 5.5), so
// with a step of 1e-2 along a unit direction the quotient carries up to
// about 5e-5 of rounding, absolute, whatever the derivative (8e-3 .. 0.35
// here; measured: 3e-5 .. 4.2e-4 relative, and 2.7e-5 absolute on the
// smallest). A wrong sign or a missing term is an error of order 1.
//
// richardson 1: the estimate (4·D(h) − D(2h))/3 of the central differences
// D at h and 2h, whose h² error cancels. Without an anchor the loss bends
// more along the embedding's gradient: measured for --mapl-anchor none, the
// plain quotient's error falls as h² (5.0e-2, 1.3e-2, 3.4e-3, 8.9e-4 at h
// 4e-2 .. 5e-3), so at h 1e-2 it measures the curvature, not the gradient.
// Same bound; the extrapolation's rounding is (4·5e-5 + 2.5e-5)/3 at worst.
static double central(ts_model *m, ts_tensor *p, const float *p0, const float *g0, double gn,
                      double eps, int64_t n, const int *inp, const int *tgt) {
  double f[2];
  for (int k = 0; k < 2; k++) {
    const double sgn = k ? -1.0 : 1.0;
    for (int64_t i = 0; i < n; i++) p->data[i] = (float)(p0[i] + sgn * eps * g0[i] / gn);
    f[k] = ts_model_forward(m, inp, tgt, 1, 1);
  }
  return (f[0] - f[1]) / (2.0 * eps);
}

static void check_directional_by(ts_model *m, ts_tensor *p, ts_tensor *g, const int *inp,
                                 const int *tgt, int richardson) {
  const int64_t n = ts_tensor_numel(p);
  float *g0 = malloc((size_t)n * sizeof(float)), *p0 = malloc((size_t)n * sizeof(float));
  memcpy(g0, g->data, (size_t)n * sizeof(float));
  memcpy(p0, p->data, (size_t)n * sizeof(float));
  double g2 = 0.0;
  for (int64_t i = 0; i < n; i++) g2 += (double)g0[i] * g0[i];
  const double gn = sqrt(g2), eps = 1e-2;
  assert_true(gn > 0.0);
  double fd = central(m, p, p0, g0, gn, eps, n, inp, tgt);
  if (richardson) fd = (4.0 * fd - central(m, p, p0, g0, gn, 2.0 * eps, n, inp, tgt)) / 3.0;
  memcpy(p->data, p0, (size_t)n * sizeof(float));
  const double an = gn; // d/dt loss(p + t·g/|g|) = |g|
  printf("# %-14s |g| %.6e, %s %.6e, relative error %.2e\n", p->name, an,
         richardson ? "extrapolated difference" : "central difference", fd, fabs(fd - an) / an);
  assert_true(fabs(fd - an) <= 2e-3 * an + 5e-5);
  free(g0);
  free(p0);
}

static void check_directional(ts_model *m, ts_tensor *p, ts_tensor *g, const int *inp,
                              const int *tgt) {
  check_directional_by(m, p, g, inp, tgt, 0);
}

static void test_backward_is_the_gradient(void **state) {
  (void)state;
  const int modes[] = {TS_COMPRESS_SSN, TS_COMPRESS_MAPL};
  int inp[B * T], tgt[B * T];
  random_tokens(inp, B * T, 1);
  random_tokens(tgt, B * T, 2);
  for (int k = 0; k < 2; k++) {
    ts_config c = compressed(modes[k]);
    ts_model *m;
    assert_int_equal(ts_model_create(&c, &m), TS_OK);
    ts_model_init(m, c.seed);
    const int nt = ts_model_num_tensors(m);
    ts_tensor *pt = calloc((size_t)nt, sizeof *pt), *gt = calloc((size_t)nt, sizeof *gt);
    ts_model_tensors(m, pt, gt);
    if (modes[k] == TS_COMPRESS_MAPL) { // anchors away from zero, as after some training
      for (int s = 0; s < S; s++) {
        char name[32];
        snprintf(name, sizeof name, "cmp.%d.anchor", s);
        ts_tensor *a = find(pt, nt, name);
        for (int64_t i = 0; i < ts_tensor_numel(a); i++)
          a->data[i] = 0.05f * ts_rng_normal(5, 9, (uint64_t)s, (uint64_t)i);
      }
    }
    ts_model_forward(m, inp, tgt, 1, 1);
    assert_int_equal(ts_model_backward(m, 1), TS_OK);
    // copies of the gradients: the checks' forwards do not touch them, but be plain
    const size_t np = ts_model_num_params(m);
    float *grads = malloc(np * sizeof(float));
    memcpy(grads, ts_model_grads(m), np * sizeof(float));
    for (int i = 0; i < nt; i++) gt[i].data = grads + (gt[i].data - ts_model_grads(m));
    const char *names[] = {"wte", "cmp.0.anchor", "cmp.1.anchor", "cmp.3.anchor"};
    for (int j = 0; j < (modes[k] == TS_COMPRESS_MAPL ? 4 : 1); j++) {
      int i = (int)(find(pt, nt, names[j]) - pt);
      check_directional(m, &pt[i], &gt[i], inp, tgt);
    }
    free(grads);
    free(pt);
    free(gt);
    ts_model_free(m);
  }
}

// ---- MAPL's anchors (--mapl-anchor) --------------------------------------------------------
// A model of one compression mode and anchor, its tensors' views.
typedef struct {
  ts_config c;
  ts_model *m;
  int nt;
  ts_tensor *pt, *gt;
} built;

static int build_vq_backward; // --vq-backward on for the next build

static void build(built *b, int mode, int anchor) {
  memset(&b->c, 0, sizeof b->c);
  assert_int_equal(ts_config_preset(&b->c, "llama-tiny"), TS_OK);
  ts_config_defaults(&b->c);
  b->c.n_layer = 4, b->c.batch = B, b->c.seq = T, b->c.steps = 300, b->c.warmup = 10;
  b->c.compress = mode, b->c.compress_rank = R, b->c.compress_stages = S;
  b->c.mapl_anchor = anchor;
  b->c.vq_backward = build_vq_backward;
  assert_int_equal(ts_config_finalize(&b->c), TS_OK);
  assert_int_equal(ts_model_create(&b->c, &b->m), TS_OK);
  ts_model_init(b->m, b->c.seed);
  b->nt = ts_model_num_tensors(b->m);
  b->pt = calloc((size_t)b->nt, sizeof *b->pt);
  b->gt = calloc((size_t)b->nt, sizeof *b->gt);
  ts_model_tensors(b->m, b->pt, b->gt);
}

static void unbuild(built *b) {
  free(b->pt);
  free(b->gt);
  ts_model_free(b->m);
}

static ts_tensor *lookup(built *b, const char *name) {
  for (int i = 0; i < b->nt; i++)
    if (strcmp(b->pt[i].name, name) == 0) return &b->pt[i];
  return NULL;
}

// dst's tensors that src has by name and shape take src's values (the
// generic initialisation is keyed by a tensor's place in the model, which
// the anchor tables move).
static void copy_shared(built *dst, built *src) {
  for (int i = 0; i < dst->nt; i++) {
    ts_tensor *t = lookup(src, dst->pt[i].name);
    if (t && ts_tensor_numel(t) == ts_tensor_numel(&dst->pt[i]) && t->shape[1] == dst->pt[i].shape[1])
      memcpy(dst->pt[i].data, t->data, (size_t)ts_tensor_numel(t) * sizeof(float));
  }
}

// The tensors each anchor declares: a table per stage, r wide (factorised)
// or d wide (full), or none at all (none, static); the projectors either way.
static void test_anchor_tensors(void **state) {
  (void)state;
  const int width[TS_ANCHOR_NKINDS] = {[TS_ANCHOR_FACTORISED] = R, [TS_ANCHOR_FULL] = 64};
  for (int k = 0; k < TS_ANCHOR_NKINDS; k++) {
    built b;
    build(&b, TS_COMPRESS_MAPL, k);
    for (int s = 0; s < S; s++) {
      char name[32];
      snprintf(name, sizeof name, "cmp.%d.anchor", s);
      ts_tensor *a = lookup(&b, name);
      if (!width[k]) {
        assert_null(a);
        continue;
      }
      assert_non_null(a);
      assert_int_equal(a->shape[0], b.c.vocab);
      assert_int_equal(a->shape[1], width[k]);
      assert_int_equal(a->role, TS_ROLE_ANCHOR);
    }
    assert_non_null(lookup(&b, "cmp.2.proj"));
    unbuild(&b);
  }
}

// The four anchors are one family: the full anchor at zero is no anchor, at
// SSN's table T on every stage the static one (both bit for bit: the same
// rows are subtracted and added back), and at E_s·P_s the factorised one
// (to rounding: the factorised rows are a product formed per row).
static void test_anchor_kinds_are_one_family(void **state) {
  (void)state;
  int inp[B * T], tgt[B * T];
  random_tokens(inp, B * T, 3);
  random_tokens(tgt, B * T, 4);
  built full, other;
  build(&full, TS_COMPRESS_MAPL, TS_ANCHOR_FULL);
  const int V = full.c.vocab, d = full.c.d;
  ts_tensor *F[S];
  for (int s = 0; s < S; s++) {
    char name[32];
    snprintf(name, sizeof name, "cmp.%d.anchor", s);
    F[s] = lookup(&full, name);
    assert_non_null(F[s]);
  }
  // none: F = 0
  build(&other, TS_COMPRESS_MAPL, TS_ANCHOR_NONE);
  copy_shared(&full, &other);
  for (int s = 0; s < S; s++) memset(F[s]->data, 0, (size_t)V * d * sizeof(float));
  float lf = ts_model_forward(full.m, inp, tgt, 1, 1), lo = ts_model_forward(other.m, inp, tgt, 1, 1);
  printf("# full anchor at 0: %.9g, none: %.9g\n", (double)lf, (double)lo);
  assert_memory_equal(&lf, &lo, sizeof lf);
  const float lnone = lo;
  unbuild(&other);
  // static: F_s = T, the same table at every stage
  build(&other, TS_COMPRESS_MAPL, TS_ANCHOR_STATIC);
  copy_shared(&full, &other);
  for (int s = 0; s < S; s++)
    for (size_t i = 0; i < (size_t)V * d; i++)
      F[s]->data[i] = 0.02f * ts_rng_normal(full.c.seed, TS_RNG_COMPRESS, TS_BASIS_TABLE, i);
  lf = ts_model_forward(full.m, inp, tgt, 1, 1), lo = ts_model_forward(other.m, inp, tgt, 1, 1);
  printf("# full anchor at T: %.9g, static: %.9g\n", (double)lf, (double)lo);
  assert_memory_equal(&lf, &lo, sizeof lf);
  assert_true(fabsf(lo - lnone) > 1e-4f * fabsf(lnone)); // the table matters
  unbuild(&other);
  // factorised: F_s = E_s·P_s, E_s random, P_s regenerated from the seed
  build(&other, TS_COMPRESS_MAPL, TS_ANCHOR_FACTORISED);
  copy_shared(&full, &other);
  float *P = malloc((size_t)d * R * sizeof(float));
  double *qr = malloc((size_t)d * R * sizeof(double));
  for (int s = 0; s < S; s++) {
    char name[32];
    snprintf(name, sizeof name, "cmp.%d.anchor", s);
    ts_tensor *E = lookup(&other, name);
    for (int64_t i = 0; i < ts_tensor_numel(E); i++)
      E->data[i] = 0.5f * ts_rng_normal(5, 9, (uint64_t)s, (uint64_t)i);
    ts_boundary_orthonormal(P, qr, d, R, other.c.seed, TS_BASIS_FIXED + (uint64_t)s); // (d × r)
    for (int v = 0; v < V; v++)
      for (int j = 0; j < d; j++) {
        double acc = 0.0;
        for (int k = 0; k < R; k++) acc += (double)E->data[(size_t)v * R + k] * P[(size_t)j * R + k];
        F[s]->data[(size_t)v * d + j] = (float)acc;
      }
  }
  lf = ts_model_forward(full.m, inp, tgt, 1, 1), lo = ts_model_forward(other.m, inp, tgt, 1, 1);
  printf("# full anchor at E.P: %.9g, factorised: %.9g (relative %.2e; none %.9g)\n", (double)lf,
         (double)lo, fabs((double)lf - lo) / lo, (double)lnone);
  assert_true(fabs((double)lf - lo) <= 1e-5 * fabs((double)lo));
  assert_true(fabs((double)lo - lnone) > 1e-3 * fabs((double)lnone)); // the anchors matter
  free(P);
  free(qr);
  unbuild(&other);
  unbuild(&full);
}

// The backward is the gradient for every anchor: the token embedding's
// (upstream of every boundary) and, for the learned full tables, theirs.
static void test_anchor_backward_is_the_gradient(void **state) {
  (void)state;
  int inp[B * T], tgt[B * T];
  random_tokens(inp, B * T, 1);
  random_tokens(tgt, B * T, 2);
  const int kinds[] = {TS_ANCHOR_NONE, TS_ANCHOR_STATIC, TS_ANCHOR_FULL};
  for (int j = 0; j < 3; j++) {
    built b;
    build(&b, TS_COMPRESS_MAPL, kinds[j]);
    if (kinds[j] == TS_ANCHOR_FULL) // away from zero, as after some training
      for (int s = 0; s < S; s++) {
        char name[32];
        snprintf(name, sizeof name, "cmp.%d.anchor", s);
        ts_tensor *a = lookup(&b, name);
        for (int64_t i = 0; i < ts_tensor_numel(a); i++)
          a->data[i] = 0.05f * ts_rng_normal(5, 9, (uint64_t)s, (uint64_t)i);
      }
    ts_model_forward(b.m, inp, tgt, 1, 1);
    assert_int_equal(ts_model_backward(b.m, 1), TS_OK);
    const size_t np = ts_model_num_params(b.m);
    float *grads = malloc(np * sizeof(float));
    memcpy(grads, ts_model_grads(b.m), np * sizeof(float));
    for (int i = 0; i < b.nt; i++) b.gt[i].data = grads + (b.gt[i].data - ts_model_grads(b.m));
    const char *names[] = {"wte", "cmp.0.anchor", "cmp.1.anchor", "cmp.3.anchor"};
    printf("# --mapl-anchor %s\n", ts_mapl_anchor_names[kinds[j]]);
    for (int n = 0; n < (kinds[j] == TS_ANCHOR_FULL ? 4 : 1); n++) {
      int i = (int)(find(b.pt, b.nt, names[n]) - b.pt);
      check_directional_by(b.m, &b.pt[i], &b.gt[i], inp, tgt, 1);
    }
    free(grads);
    unbuild(&b);
  }
}

// A compressed model being trained: its tensors and optimizer.
typedef struct {
  ts_config c;
  ts_model *m;
  int nt;
  size_t np;
  ts_tensor *pt, *gt;
  ts_adamw opt;
} trainer;

static void trainer_open(trainer *t);

static void trainer_start(trainer *t, int mode) {
  t->c = compressed(mode);
  trainer_open(t);
}

static void trainer_open(trainer *t) {
  assert_int_equal(ts_model_create(&t->c, &t->m), TS_OK);
  ts_model_init(t->m, t->c.seed);
  t->nt = ts_model_num_tensors(t->m);
  t->np = ts_model_num_params(t->m);
  t->pt = calloc((size_t)t->nt, sizeof *t->pt);
  t->gt = calloc((size_t)t->nt, sizeof *t->gt);
  ts_model_tensors(t->m, t->pt, t->gt);
  assert_int_equal(ts_adamw_init(&t->opt, t->np), TS_OK);
}

// Optimizer step s (0-based) on its own random batch, clipped as the trainer does.
static void trainer_step(trainer *t, int s) {
  int inp[B * T], tgt[B * T];
  random_tokens(inp, B * T, 10 + (uint64_t)s);
  random_tokens(tgt, B * T, 1000 + (uint64_t)s);
  ts_model_forward(t->m, inp, tgt, (uint64_t)s + 1, 1);
  assert_int_equal(ts_model_backward(t->m, (uint64_t)s + 1), TS_OK);
  float n = ts_grad_norm(ts_model_grads(t->m), t->np);
  ts_clip(ts_model_grads(t->m), t->np, n, t->c.grad_clip);
  assert_int_equal(ts_optimizer_step(&t->opt, t->pt, t->gt, t->nt, &t->c, s), TS_OK);
  assert_int_equal(ts_model_boundary_after_step(t->m, NULL, (uint64_t)s + 1), TS_OK);
}

static void trainer_end(trainer *t) {
  ts_adamw_free(&t->opt);
  free(t->pt);
  free(t->gt);
  ts_model_free(t->m);
}

// Trains `steps` steps and returns the largest ‖AᵀA − I‖_F seen over every
// projector after every step (and checks each one moved from its start).
static double worst_orthogonality(int mode, int steps) {
  trainer t;
  trainer_start(&t, mode);
  const int d = t.c.d;
  ts_tensor *A[S - 1];
  float *A0[S - 1];
  for (int p = 0; p < S - 1; p++) {
    char name[32];
    snprintf(name, sizeof name, "cmp.%d.proj", p);
    A[p] = find(t.pt, t.nt, name);
    assert_true(ts_orthogonality_error(A[p]->data, d, R) <= 1e-5); // starts on St(d, r)
    A0[p] = malloc((size_t)d * R * sizeof(float));
    memcpy(A0[p], A[p]->data, (size_t)d * R * sizeof(float));
  }
  double worst = 0.0;
  for (int s = 0; s < steps; s++) {
    trainer_step(&t, s);
    for (int p = 0; p < S - 1; p++) {
      double e = ts_orthogonality_error(A[p]->data, d, R);
      if (e > worst) worst = e;
    }
  }
  for (int p = 0; p < S - 1; p++) {
    double moved = 0.0;
    for (int i = 0; i < d * R; i++) moved += fabs((double)A[p]->data[i] - A0[p][i]);
    assert_true(moved > 1e-2);
    free(A0[p]);
  }
  trainer_end(&t);
  return worst;
}

static void test_spel_keeps_projectors_orthonormal(void **state) {
  (void)state;
  double e = worst_orthogonality(TS_COMPRESS_MAPL, 300);
  printf("# mapl: worst ||A^T A - I||_F over 300 steps and 3 boundaries: %.3e\n", e);
  assert_true(e <= 1e-5);
}

// The baseline keeps every projector at its seeded orthonormal start, bit
// for bit, while the anchors learn.
static void test_frozen_projectors_stay(void **state) {
  (void)state;
  trainer t;
  trainer_start(&t, TS_COMPRESS_MAPL_FROZEN);
  assert_true(t.c.proj_lr == 0.0f);
  ts_tensor *A = find(t.pt, t.nt, "cmp.1.proj"), *E = find(t.pt, t.nt, "cmp.1.anchor");
  const size_t na = (size_t)ts_tensor_numel(A);
  float *A0 = malloc(na * sizeof(float));
  memcpy(A0, A->data, na * sizeof(float));
  for (int s = 0; s < 5; s++) trainer_step(&t, s);
  assert_memory_equal(A0, A->data, na * sizeof(float));
  assert_true(ts_orthogonality_error(A->data, t.c.d, R) <= 1e-5);
  double moved = 0.0; // the anchors start at zero and learn
  for (int64_t i = 0; i < ts_tensor_numel(E); i++) moved += fabs((double)E->data[i]);
  assert_true(moved > 0.0);
  free(A0);
  trainer_end(&t);
}

static void test_unconstrained_projectors_leave_the_manifold(void **state) {
  (void)state;
  double e = worst_orthogonality(TS_COMPRESS_MAPL_UNC, 100);
  printf("# mapl-unconstrained: worst ||A^T A - I||_F over 100 steps: %.3e\n", e);
  assert_true(e > 1e-2);
}

// A small quantiser: r 4 in groups of 2, 2 rounds of 4 codes.
static const ts_vq_shape small_vq = {.r = 4, .G = 2, .R = 2, .K = 4, .ng = 2, .gamma = 0.9f,
                                     .commit = 1.0f, .sync = 1};

// Residual VQ is greedy: each round takes the code nearest (in double) to
// what the rounds before left, and ẑ is the sum of the chosen codes.
static void test_vq_takes_the_nearest_code_each_round(void **state) {
  (void)state;
  const ts_vq_shape *q = &small_vq;
  const size_t nc = ts_vq_ncodes(q);
  float e[64], z[8 * 4], zq[8 * 4], zd[8 * 4];
  for (size_t i = 0; i < nc * q->G; i++) e[i] = ts_rng_normal(3, 1, 0, i);
  for (int i = 0; i < 8 * 4; i++) z[i] = 1.5f * ts_rng_normal(3, 1, 1, (uint64_t)i);
  uint8_t codes[8 * 4];
  ts_vq_encode(q, e, z, 8, codes, zq);
  for (int i = 0; i < 8; i++)
    for (int g = 0; g < q->ng; g++) {
      double res[2] = {z[i * 4 + g * 2], z[i * 4 + g * 2 + 1]}, acc[2] = {0, 0};
      for (int j = 0; j < q->R; j++) {
        int best = 0;
        double bd = 1e300;
        for (int k = 0; k < q->K; k++) {
          const float *c = e + ((j * q->ng + g) * q->K + k) * q->G;
          double d = (res[0] - c[0]) * (res[0] - c[0]) + (res[1] - c[1]) * (res[1] - c[1]);
          if (d < bd) bd = d, best = k;
        }
        assert_int_equal(codes[i * 4 + j * q->ng + g], best);
        const float *c = e + ((j * q->ng + g) * q->K + best) * q->G;
        res[0] -= c[0], res[1] -= c[1], acc[0] += c[0], acc[1] += c[1];
      }
      assert_true(fabs(zq[i * 4 + g * 2] - acc[0]) < 1e-6);
    }
  ts_vq_decode(q, e, codes, 8, zd);
  assert_memory_equal(zq, zd, sizeof zq); // the receiver's decode with the same book: same bits
}

// The stream is a seeded order of each round's K codes taken sync at a time:
// over K/sync steps every code reaches the receiver exactly once, and with
// sync = K every step carries the whole codebook (drawing codes at random
// would leave about a third of them out at sync = K).
static void test_vq_stream_covers_the_codebook(void **state) {
  (void)state;
  ts_vq_shape q = {.r = 8, .G = 2, .R = 2, .K = 16, .ng = 4, .gamma = 0.9f, .commit = 1.0f};
  for (int sync = 1; sync <= q.K; sync *= 4) {
    q.sync = sync;
    for (int j = 0; j < q.R; j++) {
      int seen[16] = {0};
      for (uint64_t st = 5; st < 5 + (uint64_t)(q.K / sync); st++)
        for (int i = 0; i < sync; i++) seen[ts_vq_streamed_code(&q, 7, 1, st, j, i)]++;
      for (int k = 0; k < q.K; k++) assert_int_equal(seen[k], 1);
    }
  }
  // the order is seeded, not the identity, and differs between rounds
  q.sync = 1;
  int ident = 1, same = 1;
  for (uint64_t st = 0; st < (uint64_t)q.K; st++) {
    ident &= ts_vq_streamed_code(&q, 7, 1, st, 0, 0) == (int)st;
    same &= ts_vq_streamed_code(&q, 7, 1, st, 0, 0) == ts_vq_streamed_code(&q, 7, 1, st, 1, 0);
  }
  assert_false(ident);
  assert_false(same);
  // sync = K: the receiver's copy equals the sender's codebook after a step
  q.sync = q.K;
  const size_t nf = ts_vq_ncodes(&q) * q.G;
  float *from = malloc(nf * sizeof(float)), *to = calloc(nf, sizeof(float));
  for (size_t i = 0; i < nf; i++) from[i] = ts_rng_normal(3, 3, 0, i);
  ts_vq_stream(&q, 7, 1, 9, from, to);
  assert_memory_equal(from, to, nf * sizeof(float));
  free(from);
  free(to);
}

// The stream by microbatch (--vq-stream-unit microbatch, vq.h): against a
// timeline that copies event n's codes into a reference copy just before
// unit n·every, from the working codebook of that unit's step, the copy of
// every unit (ts_vq_shared_at) is the reference's on both sides, and a
// receiver that catches up and unpacks each step's message holds the
// sender's shared copy after every step. 8 microbatches, every 5 (the MAPL
// paper's interval), so a step holds one or two events, some inside it.
static void test_vq_stream_by_microbatch(void **state) {
  (void)state;
  ts_vq_shape q = {.r = 4, .G = 2, .R = 2, .K = 16, .ng = 2, .gamma = 0.9f, .commit = 1.0f,
                   .sync = 1, .units = 8, .every = 5};
  enum { NC = 2 * 2 * 16, NF = NC * 2, U = 8, E = 5 };
  float count[NC], sum[NF], codes[NF], recv[NF], rcodes[NF], rrecv[NF], ref[NF], view[NF],
      rview[NF], stats[NC * 5], msg[U * 2 * 4];
  ts_vq_init(&q, 7, 0, count, sum, codes, recv);
  memcpy(rcodes, codes, sizeof codes), memcpy(rrecv, recv, sizeof recv);
  memcpy(ref, recv, sizeof recv);
  int inside = 0, moved = 0;
  for (uint64_t t = 1; t <= 12; t++) {
    for (int m = 0; m < U; m++) {
      const uint64_t u = (t - 1) * U + (uint64_t)m;
      if (u > 0 && u % E == 0) { // event u/E, from this step's working codebook
        ts_vq_shape one = q;
        one.units = one.every = 1;
        ts_vq_stream(&one, 7, 0, u / E, codes, ref);
        inside += m > 0;
      }
      const float *a = ts_vq_shared_at(&q, 7, 0, t, m, recv, codes, view);
      const float *b = ts_vq_shared_at(&q, 7, 0, t, m, rrecv, rcodes, rview);
      assert_memory_equal(a, ref, sizeof ref);
      assert_memory_equal(b, ref, sizeof ref);
    }
    for (int i = 0; i < NC * 5; i++) // statistics that move every code
      stats[i] = i < NC ? 3.0f + (float)(i % 5) : 0.1f * ts_rng_normal(5, 1, t, (uint64_t)i);
    float before[NF];
    memcpy(before, codes, sizeof codes);
    ts_vq_update(&q, 7, 0, t, count, sum, codes, recv, stats);
    moved += memcmp(before, codes, sizeof codes) != 0;
    if (t * U % E == 0) { // the event of the next step's first unit, from the new book
      ts_vq_shape one = q;
      one.units = one.every = 1;
      ts_vq_stream(&one, 7, 0, t * U / E, codes, ref);
    }
    assert_memory_equal(recv, ref, sizeof ref);
    // the pipeline's receiver
    const size_t n = ts_vq_stream_events(&q, t);
    assert_true(n == (size_t)(((t + 1) * U - 1) / E - (t * U - 1) / E)); // events of [tU, (t+1)U)
    ts_vq_stream_catch_up(&q, 7, 0, t, rcodes, rrecv);
    ts_vq_stream_pack(&q, 7, 0, t, codes, msg);
    ts_vq_stream_unpack(&q, 7, 0, t, msg, rrecv, rcodes);
    assert_memory_equal(rrecv, recv, sizeof recv);
  }
  assert_true(inside > 0 && moved == 12); // events inside steps, and books that change
}

// Both sides code with the shared copy of the codebooks: the forward (what
// crosses the boundary and what the receiver rebuilds) depends on the
// receiver's copy alone, not on the sender's working codebook, which reaches
// it only through the stream. (Coding with the working codebook while the
// receiver decodes with a stale copy made mapl-vq with a streamed codebook
// learn from noise: docs/COMPRESSION.md.)
static void test_vq_codes_index_the_shared_copy(void **state) {
  (void)state;
  int inp[B * T], tgt[B * T];
  random_tokens(inp, B * T, 3);
  random_tokens(tgt, B * T, 4);
  built b;
  build(&b, TS_COMPRESS_MAPL_VQ, TS_ANCHOR_FACTORISED);
  const float l0 = ts_model_forward(b.m, inp, tgt, 1, 1);
  ts_tensor *work = lookup(&b, "cmp.0.vq.codes"), *shared = lookup(&b, "cmp.0.vq.recv");
  assert_non_null(work);
  assert_non_null(shared);
  const int64_t n = ts_tensor_numel(work);
  for (int64_t i = 0; i < n; i++) work->data[i] = 3.0f * ts_rng_normal(11, 1, 0, (uint64_t)i);
  const float l1 = ts_model_forward(b.m, inp, tgt, 1, 1);
  printf("# working codebook replaced: loss %.9g, before %.9g\n", (double)l1, (double)l0);
  assert_memory_equal(&l0, &l1, sizeof l0);
  memcpy(shared->data, work->data, (size_t)n * sizeof(float)); // the shared copy does matter
  const float l2 = ts_model_forward(b.m, inp, tgt, 1, 1);
  printf("# shared copy replaced: loss %.9g\n", (double)l2);
  assert_true(l2 != l0);
  unbuild(&b);
}

// The statistics count every row once per round and group and sum its
// residuals; the update is the EMA with Laplace smoothing, a dead code takes
// its candidate, and only the streamed codes reach the receiver's copy.
static void test_vq_statistics_update_and_stream(void **state) {
  (void)state;
  const ts_vq_shape *q = &small_vq;
  const size_t nc = ts_vq_ncodes(q), nf = nc * q->G;
  enum { ROWS = 16 };
  float count[16], sum[32], codes[32], recv[32], z[ROWS * 4];
  ts_vq_init(q, 7, 0, count, sum, codes, recv);
  assert_memory_equal(codes, recv, sizeof codes); // in sync at first
  for (int i = 0; i < ROWS * 4; i++) z[i] = 0.05f * ts_rng_normal(3, 2, 0, (uint64_t)i);
  uint8_t wire[ROWS * 4];
  ts_vq_encode(q, codes, z, ROWS, wire, NULL);
  int64_t cand[16];
  ts_vq_candidates(q, 7, 0, 1, ROWS, 0, ROWS, cand);
  float stats[16 * 5];
  ts_vq_stats_leaf(q, codes, z, wire, cand, 0, ROWS, stats);
  for (int j = 0; j < q->R; j++)
    for (int g = 0; g < q->ng; g++) {
      float n = 0.0f;
      for (int k = 0; k < q->K; k++) n += stats[(j * q->ng + g) * q->K + k];
      assert_true(n == (float)ROWS);
    }
  // round 0's sums are sums of z itself
  for (int g = 0; g < q->ng; g++) {
    double want = 0.0, got = 0.0;
    for (int i = 0; i < ROWS; i++) want += z[i * 4 + g * 2];
    for (int k = 0; k < q->K; k++) got += stats[nc + ((size_t)g * q->K + k) * q->G];
    assert_true(fabs(want - got) < 1e-6);
  }
  ts_vq_update(q, 7, 0, 1, count, sum, codes, recv, stats);
  for (size_t c = 0; c < nc; c++) {
    assert_true(count[c] == (1.0f - q->gamma) * stats[c]); // N = γ·0 + (1 − γ)·n
    if (count[c] < 2.0f) // dead (all of them after one step): the candidate
      assert_memory_equal(codes + c * q->G, stats + nc + nf + c * q->G, q->G * sizeof(float));
  }
  int streamed[16] = {0};
  for (int j = 0; j < q->R; j++)
    for (int g = 0; g < q->ng; g++)
      streamed[(j * q->ng + g) * q->K + ts_vq_streamed_code(q, 7, 0, 1, j, 0)] = 1;
  int stale = 0;
  for (size_t c = 0; c < nc; c++) {
    int same = memcmp(codes + c * q->G, recv + c * q->G, q->G * sizeof(float)) == 0;
    if (streamed[c]) assert_true(same);
    stale += !same;
  }
  assert_true(stale > 0); // the rest of the receiver's copy is stale, by design
  // a live code is S / Ñ: feed the same statistics until N >= 2
  for (uint64_t st = 2; st < 60; st++) ts_vq_update(q, 7, 0, st, count, sum, codes, recv, stats);
  for (size_t c = 0; c < nc; c++)
    if (count[c] >= 2.0f) {
      size_t b = c / q->K * q->K;
      float tot = 0.0f;
      for (int k = 0; k < q->K; k++) tot = tot + count[b + k];
      float sm = (count[c] + 1e-5f) / (tot + q->K * 1e-5f) * tot;
      assert_true(codes[c * q->G] == sum[c * q->G] / sm);
    }
}

// ---- ssn-confined: the stream confined to span(U) -------------------------------------
// The output of stage 0 (layer 0 of the trained model t, batch inp) under
// configuration c: the stream X (rows × d) without compression, the wire Z
// (rows × r) with it. The stage's tensors are t's, by name.
static float *stage0_output(trainer *t, const ts_config *c, const int *inp, const int *tgt) {
  ts_model *m;
  assert_int_equal(ts_model_create_stage(c, 0, B, NULL, 0, t->c.n_layer / S, &m), TS_OK);
  ts_model_init(m, c->seed); // (a codec's frozen table from the seed)
  const int nt = ts_model_num_tensors(m);
  ts_tensor *pt = calloc((size_t)nt, sizeof *pt);
  ts_model_tensors(m, pt, NULL);
  for (int i = 0; i < nt; i++) {
    ts_tensor *src = find(t->pt, t->nt, pt[i].name);
    memcpy(pt[i].data, src->data, (size_t)ts_tensor_numel(src) * sizeof(float));
  }
  ts_model_forward(m, inp, tgt, 1, 0);
  const size_t n = (size_t)B * T * (c->compress ? (size_t)c->compress_rank : (size_t)c->d);
  float *out = malloc(n * sizeof(float));
  memcpy(out, ts_model_stage_output(m), n * sizeof(float));
  free(pt);
  ts_model_free(m);
  return out;
}

// ‖Z·Uᵀ + T[tok] − X‖_F / ‖X − T[tok]‖_F at the first boundary of the trained
// model t: what the boundary loses of the stream (ut: Uᵀ, r × d).
static double round_trip_error(trainer *t, const float *ut) {
  const int d = t->c.d, r = R;
  int inp[B * T], tgt[B * T];
  random_tokens(inp, B * T, 77);
  random_tokens(tgt, B * T, 78);
  ts_config plain = t->c;
  plain.compress = TS_COMPRESS_NONE, plain.compress_rank = 0, plain.compress_stages = 0;
  plain.ssn_refresh = 0, plain.ssn_refresh_step = 0.0f;
  assert_int_equal(ts_config_finalize(&plain), TS_OK);
  float *x = stage0_output(t, &plain, inp, tgt), *z = stage0_output(t, &t->c, inp, tgt);
  double err = 0.0, ref = 0.0;
  for (int i = 0; i < B * T; i++)
    for (int j = 0; j < d; j++) {
      double xhat = 0.02 * ts_rng_normal(t->c.seed, TS_RNG_COMPRESS, TS_BASIS_TABLE,
                                         (uint64_t)inp[i] * d + j), y = x[(size_t)i * d + j] - xhat;
      for (int k = 0; k < r; k++) xhat += (double)z[(size_t)i * r + k] * ut[(size_t)k * d + j];
      err += (xhat - x[(size_t)i * d + j]) * (xhat - x[(size_t)i * d + j]);
      ref += y * y;
    }
  free(x);
  free(z);
  return sqrt(err / ref);
}

// The largest ‖(W − U·Uᵀ·W)‖_F / ‖W‖_F over the model's stream writers, along
// their output axis (the token embedding less T).
static double worst_out_of_span(trainer *t, const float *ut) {
  const int d = t->c.d, r = R;
  double worst = 0.0;
  for (int i = 0; i < t->nt; i++) {
    const ts_tensor *w = &t->pt[i];
    if (!w->writes_stream) continue;
    const int64_t n = ts_tensor_numel(w) / d; // output vectors
    double out = 0.0, all = 0.0;
    for (int64_t v = 0; v < n; v++) {
      double y[512], c[64];
      for (int j = 0; j < d; j++) { // output vector v: a row (axis 1) or a column (axis 0)
        const int64_t at = w->writes_stream == 2 ? v * d + j : (int64_t)j * n + v;
        y[j] = w->data[at];
        if (w->role == TS_ROLE_EMBEDDING)
          y[j] -= 0.02 * ts_rng_normal(t->c.seed, TS_RNG_COMPRESS, TS_BASIS_TABLE, (uint64_t)at);
      }
      for (int k = 0; k < r; k++) {
        c[k] = 0.0;
        for (int j = 0; j < d; j++) c[k] += y[j] * ut[(size_t)k * d + j];
      }
      for (int j = 0; j < d; j++) {
        double p = y[j];
        for (int k = 0; k < r; k++) p -= c[k] * ut[(size_t)k * d + j];
        out += p * p, all += y[j] * y[j];
      }
    }
    const double rel = sqrt(out / all);
    if (rel > worst) worst = rel;
  }
  return worst;
}

// Trained 12 steps with the stream confined (two refreshes of U on the way),
// the first boundary's round trip is the stream itself to rounding: measured
// 1.6e-7 of X − T[tok] (bound 1e-5), every writer in span(U) to 8.6e-8
// (bound 1e-5), and the loss with the boundaries' basis the identity
// (tessera eval --identity-boundaries) is the loss (bound 1e-6 relative;
// equal in our run). `ssn`, the boundary alone on unconstrained weights,
// loses 0.86 of it (bound > 0.1) and its loss moves with the identity
// (+1.0e-3 relative; bound 1e-4). U stays orthonormal (‖UUᵀ − I‖_F 7.8e-8,
// bound 1e-5), equal on every stage, and has moved.
static void test_confined_stream_round_trip(void **state) {
  (void)state;
  trainer t;
  t.c = compressed(TS_COMPRESS_SSN_CONFINED);
  t.c.ssn_refresh = 5;
  assert_int_equal(ts_config_finalize(&t.c), TS_OK);
  trainer_open(&t);
  const int d = t.c.d, r = R;
  float u0[R * 512];
  memcpy(u0, find(t.pt, t.nt, "cmp.0.subspace")->data, (size_t)r * d * sizeof(float));
  for (int s = 0; s < 12; s++) trainer_step(&t, s);
  const float *ut = find(t.pt, t.nt, "cmp.0.subspace")->data;
  double moved = 0.0, orth = 0.0;
  for (int i = 0; i < r * d; i++) moved += fabs((double)ut[i] - u0[i]);
  for (int a = 0; a < r; a++)
    for (int b = 0; b < r; b++) {
      double dot = 0.0;
      for (int j = 0; j < d; j++) dot += (double)ut[a * d + j] * ut[b * d + j];
      orth += (dot - (a == b)) * (dot - (a == b));
    }
  for (int s = 1; s < S; s++) {
    char nm[32];
    snprintf(nm, sizeof nm, "cmp.%d.subspace", s);
    assert_memory_equal(find(t.pt, t.nt, nm)->data, ut, (size_t)r * d * sizeof(float));
  }
  const double err = round_trip_error(&t, ut), span = worst_out_of_span(&t, ut);
  int inp[B * T], tgt[B * T];
  random_tokens(inp, B * T, 91);
  random_tokens(tgt, B * T, 92);
  const float l = ts_model_forward(t.m, inp, tgt, 1, 0);
  ts_model_set_identity_boundaries(t.m, 1);
  const float li = ts_model_forward(t.m, inp, tgt, 1, 0);
  print_message("ssn-confined after 12 steps: round trip %.2e, out of span %.2e, ‖UUᵀ − I‖ %.2e, "
                "loss %.6f, identity %.6f\n", err, span, sqrt(orth), (double)l, (double)li);
  assert_true(moved > 0.0);
  assert_true(sqrt(orth) < 1e-5);
  assert_true(err < 1e-5);
  assert_true(span < 1e-5);
  assert_true(fabs((double)li - l) <= 1e-6 * l);
  trainer_end(&t);

  trainer_start(&t, TS_COMPRESS_SSN);
  for (int s = 0; s < 12; s++) trainer_step(&t, s);
  float q[512 * R], u[R * 512];
  double *a = malloc((size_t)d * r * sizeof(double));
  ts_boundary_orthonormal(q, a, d, r, t.c.seed, TS_BASIS_SSN);
  ts_boundary_transpose(u, q, d, r);
  free(a);
  const double lossy = round_trip_error(&t, u);
  const float m = ts_model_forward(t.m, inp, tgt, 1, 0);
  ts_model_set_identity_boundaries(t.m, 1);
  const float mi = ts_model_forward(t.m, inp, tgt, 1, 0);
  print_message("ssn after 12 steps: round trip %.2e, loss %.6f, identity %.6f\n", lossy,
                (double)m, (double)mi);
  assert_true(lossy > 0.1);
  assert_true(fabs((double)mi - m) > 1e-4 * m);
  trainer_end(&t);
}

// A gradient row crosses as its RMS s and the codes of dZ/s: a row and any
// positive multiple of it get the same codes (so the codebook sees rows of
// RMS 1 whatever the gradient's size at this point of training), the scale
// is the row's RMS, a row of zeros stays zeros, and the receiver rebuilds
// s·ẑ from the codes and the scale.
static void test_vq_gradient_wire_is_scale_free(void **state) {
  (void)state;
  const ts_vq_shape *q = &small_vq;
  enum { N = 8 };
  const size_t nc = ts_vq_ncodes(q), rb = ts_vq_row_bytes(q);
  float e[64], dz[N * 4], dz2[N * 4], u[N * 4], u2[N * 4], back[N * 4], zq[N * 4];
  for (size_t i = 0; i < nc * q->G; i++) e[i] = ts_rng_normal(5, 1, 0, i);
  for (int i = 0; i < N * 4; i++) dz[i] = 3e-6f * ts_rng_normal(5, 1, 1, (uint64_t)i);
  for (int t = 0; t < 4; t++) dz[3 * 4 + t] = 0.0f; // a row with no gradient
  for (int i = 0; i < N * 4; i++) dz2[i] = 1024.0f * dz[i]; // exact: a power of two
  uint8_t w[N * (4 + sizeof(float))], w2[N * (4 + sizeof(float))];
  assert_int_equal(ts_vq_grad_row_bytes(q), rb + sizeof(float));
  ts_vq_grad_encode(q, e, dz, N, w, u);
  ts_vq_grad_encode(q, e, dz2, N, w2, u2);
  assert_memory_equal(w, w2, N * rb); // the same codes
  assert_memory_equal(u, u2, sizeof u);
  for (int i = 0; i < N; i++) {
    float s, s2;
    memcpy(&s, w + N * rb + i * sizeof(float), sizeof s);
    memcpy(&s2, w2 + N * rb + i * sizeof(float), sizeof s2);
    double ss = 0.0;
    for (int t = 0; t < 4; t++) ss += (double)dz[i * 4 + t] * dz[i * 4 + t];
    assert_true(fabs(s - sqrt(ss / 4)) <= 1e-6 * sqrt(ss / 4));
    assert_true(s2 == 1024.0f * s);
  }
  ts_vq_grad_decode(q, e, w, N, back);
  ts_vq_decode(q, e, w, N, zq);
  for (int i = 0; i < N; i++) {
    float s;
    memcpy(&s, w + N * rb + i * sizeof(float), sizeof s);
    for (int t = 0; t < 4; t++) assert_true(back[i * 4 + t] == s * zq[i * 4 + t]);
  }
  for (int t = 0; t < 4; t++) assert_true(back[3 * 4 + t] == 0.0f);
}

// Under --vq-backward on the gradient that reaches the sending stage depends
// on the gradient's shared copy (cmp.p.gvq.recv, the receiver's) alone, not
// on the working codebook of the gradient's sender, as for the forward.
static void test_vq_gradient_decodes_with_the_shared_copy(void **state) {
  (void)state;
  int inp[B * T], tgt[B * T];
  random_tokens(inp, B * T, 3);
  random_tokens(tgt, B * T, 4);
  built b;
  build_vq_backward = 1;
  build(&b, TS_COMPRESS_MAPL_VQ, TS_ANCHOR_FACTORISED);
  build_vq_backward = 0;
  // stage s + 1 holds boundary s's gradient codebooks: after its last layer
  assert_null(lookup(&b, "cmp.3.gvq.count"));
  ts_tensor *work = lookup(&b, "cmp.0.gvq.codes"), *shared = lookup(&b, "cmp.0.gvq.recv");
  ts_tensor *w0 = lookup(&b, "h.0.attn.wq"); // stage 0's: its gradient came through boundary 0
  assert_non_null(work);
  assert_non_null(shared);
  assert_non_null(w0);
  assert_true(lookup(&b, "cmp.1.anchor") < lookup(&b, "cmp.0.gvq.count"));
  const size_t np = ts_model_num_params(b.m), off = (size_t)(w0->data - ts_model_params(b.m));
  const size_t nw = (size_t)ts_tensor_numel(w0);
  float *g0 = malloc(nw * sizeof(float)), *g = malloc(nw * sizeof(float));
  assert_true(off + nw <= np);
  ts_model_forward(b.m, inp, tgt, 1, 1);
  assert_int_equal(ts_model_backward(b.m, 1), TS_OK);
  memcpy(g0, ts_model_grads(b.m) + off, nw * sizeof(float));
  const int64_t n = ts_tensor_numel(work);
  for (int64_t i = 0; i < n; i++) work->data[i] = 3.0f * ts_rng_normal(11, 2, 0, (uint64_t)i);
  ts_model_forward(b.m, inp, tgt, 1, 1);
  assert_int_equal(ts_model_backward(b.m, 1), TS_OK);
  memcpy(g, ts_model_grads(b.m) + off, nw * sizeof(float));
  assert_memory_equal(g0, g, nw * sizeof(float));
  memcpy(shared->data, work->data, (size_t)n * sizeof(float)); // the shared copy does matter
  ts_model_forward(b.m, inp, tgt, 1, 1);
  assert_int_equal(ts_model_backward(b.m, 1), TS_OK);
  memcpy(g, ts_model_grads(b.m) + off, nw * sizeof(float));
  assert_true(memcmp(g0, g, nw * sizeof(float)) != 0);
  free(g0);
  free(g);
  unbuild(&b);
}

int main(void) {
  const char *only = getenv("TEST_FILTER"); // one test by name (cmocka's pattern)
  if (only && *only) cmocka_set_test_filter(only);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_backward_is_the_gradient),
      cmocka_unit_test(test_anchor_tensors),
      cmocka_unit_test(test_anchor_kinds_are_one_family),
      cmocka_unit_test(test_anchor_backward_is_the_gradient),
      cmocka_unit_test(test_spel_keeps_projectors_orthonormal),
      cmocka_unit_test(test_unconstrained_projectors_leave_the_manifold),
      cmocka_unit_test(test_frozen_projectors_stay),
      cmocka_unit_test(test_vq_takes_the_nearest_code_each_round),
      cmocka_unit_test(test_vq_statistics_update_and_stream),
      cmocka_unit_test(test_vq_stream_covers_the_codebook),
      cmocka_unit_test(test_vq_stream_by_microbatch),
      cmocka_unit_test(test_vq_codes_index_the_shared_copy),
      cmocka_unit_test(test_confined_stream_round_trip),
      cmocka_unit_test(test_vq_gradient_wire_is_scale_free),
      cmocka_unit_test(test_vq_gradient_decodes_with_the_shared_copy),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
