// Newton–Schulz, Polar Express, Muon and SPEL (src/backend/orthogonal.h,
// docs/ALGORITHMS.md §8).
//
//  - Polar Express with 10 steps is a retraction: ‖XᵀX − I‖_F ≤ 1e-5 for a
//    tall random X (r ≤ 128); Muon's 5 quintic Newton–Schulz steps are not
//    (its singular values stay in a band around 1): checked to be far from it.
//  - SPEL keeps A on St(d, r) to 1e-5 after every one of 300 steps with random
//    gradients, for r = 8, 32, 128 (the bound).
//  - The tangent projection makes Aᵀ·g_R skew-symmetric (to fp32 round-off,
//    1e-5 of ‖g‖) and leaves a tangent vector unchanged (1e-5 relative).
//  - Muon's update against a double-precision reference written here: the
//    same formulas in double, within 1e-4 of the update's size (fp32 through
//    five cubic iterations of a normalised matrix; a wrong coefficient, scale
//    or sign moves it by 1e-2 or more).
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>


#include "backend/orthogonal.h"
#include "testdata.h"

static void fill_gauss(float *x, size_t n, uint64_t seed) {
  uint64_t s = seed;
  for (size_t i = 0; i < n; i += 2) { // Box-Muller
    double u1 = ((double)(mix64(&s) >> 11) + 0.5) / 9007199254740992.0;
    double u2 = ((double)(mix64(&s) >> 11) + 0.5) / 9007199254740992.0;
    double r = sqrt(-2.0 * log(u1));
    x[i] = (float)(r * cos(6.283185307179586 * u2));
    if (i + 1 < n) x[i + 1] = (float)(r * sin(6.283185307179586 * u2));
  }
}

static void test_polar_express_is_a_retraction(void **state) {
  (void)state;
  const int d = 256, rs[] = {8, 32, 128};
  for (int t = 0; t < 3; t++) {
    const int r = rs[t];
    float *X = malloc((size_t)d * r * sizeof(float)), *Y = malloc((size_t)d * r * sizeof(float));
    float *scratch = malloc(ts_ortho_scratch(d, r) * sizeof(float));
    fill_gauss(X, (size_t)d * r, 100 + (uint64_t)r);
    memcpy(Y, X, (size_t)d * r * sizeof(float));
    ts_polar_express(X, d, r, 10, scratch);
    double e = ts_orthogonality_error(X, d, r);
    if (getenv("TESSERA_TEST_VERBOSE")) print_message("  PE r=%d: %.3e\n", r, e);
    assert_true(e <= 1e-5);
    ts_newton_schulz(Y, d, r, 5, scratch); // Muon's NS: near-orthogonal, not a retraction
    assert_true(ts_orthogonality_error(Y, d, r) > 1e-3);
    free(X); free(Y); free(scratch);
  }
}

static void test_spel_stays_on_the_manifold(void **state) {
  (void)state;
  const int d = 256, rs[] = {8, 32, 128};
  for (int t = 0; t < 3; t++) {
    const int r = rs[t];
    const size_t n = (size_t)d * r;
    float *A = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float)),
          *m = calloc(n, sizeof(float)), *scratch = malloc(ts_ortho_scratch(d, r) * sizeof(float));
    fill_gauss(A, n, 7 + (uint64_t)r);
    ts_polar_express(A, d, r, 10, scratch);
    double worst = 0.0;
    for (int step = 0; step < 300; step++) {
      fill_gauss(g, n, 1000 + (uint64_t)step * 7 + (uint64_t)r);
      ts_spel_step(A, g, m, d, r, 0.01f, 0.9f, 10, scratch);
      double e = ts_orthogonality_error(A, d, r);
      if (e > worst) worst = e;
      if (!(e <= 1e-5)) fail_msg("r=%d: ‖AᵀA − I‖ = %.3e after step %d", r, e, step + 1);
    }
    if (getenv("TESSERA_TEST_VERBOSE")) print_message("  SPEL r=%d: worst %.3e\n", r, worst);
    free(A); free(g); free(m); free(scratch);
  }
}

static void test_tangent_projection(void **state) {
  (void)state;
  const int d = 64, r = 16;
  const size_t n = (size_t)d * r;
  float *A = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float)),
        *t = malloc(n * sizeof(float)), *t2 = malloc(n * sizeof(float)),
        *S = malloc((size_t)r * r * sizeof(float)), *scratch = malloc(ts_ortho_scratch(d, r) * sizeof(float));
  fill_gauss(A, n, 3);
  ts_polar_express(A, d, r, 10, scratch);
  fill_gauss(g, n, 4);
  ts_stiefel_tangent(t, A, g, d, r, S);
  // Aᵀt skew-symmetric
  for (int i = 0; i < r; i++)
    for (int j = 0; j < r; j++) {
      double s = 0.0;
      for (int k = 0; k < d; k++) s += (double)A[k * r + i] * t[k * r + j];
      S[i * r + j] = (float)s;
    }
  double gn = 0.0, asym = 0.0;
  for (size_t i = 0; i < n; i++) gn += (double)g[i] * g[i];
  for (int i = 0; i < r; i++)
    for (int j = 0; j < r; j++) asym = fmax(asym, fabs((double)S[i * r + j] + S[j * r + i]));
  assert_true(asym <= 1e-5 * sqrt(gn));
  // projecting again changes nothing (up to round-off)
  ts_stiefel_tangent(t2, A, t, d, r, S);
  double diff = 0.0, tn = 0.0;
  for (size_t i = 0; i < n; i++) {
    diff = fmax(diff, fabs((double)t2[i] - t[i]));
    tn = fmax(tn, fabs((double)t[i]));
  }
  assert_true(diff <= 1e-5 * tn);
  // and the projection is not the identity: g itself is not tangent
  double off = 0.0;
  for (size_t i = 0; i < n; i++) off = fmax(off, fabs((double)t[i] - g[i]));
  assert_true(off > 1e-2);
  free(A); free(g); free(t); free(t2); free(S); free(scratch);
}

// Muon in double, straight from docs/ALGORITHMS.md §8.
static void muon_ref(double *p, const double *g, double *buf, int rows, int cols, double lr,
                     double wd, double beta) {
  const int tall = rows > cols, m = tall ? cols : rows, n = tall ? rows : cols;
  const size_t N = (size_t)rows * cols;
  double *u = malloc(N * sizeof(double)), *W = malloc(N * sizeof(double)),
         *A = malloc((size_t)m * m * sizeof(double)), *B = malloc((size_t)m * m * sizeof(double)),
         *Wn = malloc(N * sizeof(double));
  for (size_t i = 0; i < N; i++) {
    buf[i] = beta * buf[i] + (1 - beta) * g[i];
    u[i] = (1 - beta) * g[i] + beta * buf[i];
  }
  for (int i = 0; i < rows; i++)
    for (int j = 0; j < cols; j++)
      W[tall ? (size_t)j * rows + i : (size_t)i * cols + j] = u[(size_t)i * cols + j];
  double nrm = 0.0;
  for (size_t i = 0; i < N; i++) nrm += W[i] * W[i];
  nrm = sqrt(nrm) + 1e-7;
  for (size_t i = 0; i < N; i++) W[i] /= nrm;
  for (int k = 0; k < 5; k++) {
    for (int i = 0; i < m; i++)
      for (int j = 0; j < m; j++) {
        double s = 0.0;
        for (int t = 0; t < n; t++) s += W[(size_t)i * n + t] * W[(size_t)j * n + t];
        A[i * m + j] = s;
      }
    for (int i = 0; i < m; i++)
      for (int j = 0; j < m; j++) {
        double s = 0.0;
        for (int t = 0; t < m; t++) s += A[i * m + t] * A[t * m + j];
        B[i * m + j] = -4.7750 * A[i * m + j] + 2.0315 * s;
      }
    for (int i = 0; i < m; i++)
      for (int j = 0; j < n; j++) {
        double s = 3.4445 * W[(size_t)i * n + j];
        for (int t = 0; t < m; t++) s += B[i * m + t] * W[(size_t)t * n + j];
        Wn[(size_t)i * n + j] = s;
      }
    memcpy(W, Wn, N * sizeof(double));
  }
  const double shape = sqrt(rows > cols ? (double)rows / cols : 1.0);
  for (int i = 0; i < rows; i++)
    for (int j = 0; j < cols; j++) {
      double o = W[tall ? (size_t)j * rows + i : (size_t)i * cols + j];
      size_t k = (size_t)i * cols + j;
      p[k] = p[k] * (1 - lr * wd) - lr * o * shape;
    }
  free(u); free(W); free(A); free(B); free(Wn);
}

static void test_muon_against_double(void **state) {
  (void)state;
  const int shapes[][2] = {{48, 32}, {32, 48}, {40, 40}};
  for (int t = 0; t < 3; t++) {
    const int rows = shapes[t][0], cols = shapes[t][1];
    const size_t n = (size_t)rows * cols;
    float *p = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float)),
          *buf = calloc(n, sizeof(float)), *scratch = malloc(ts_ortho_scratch(rows, cols) * sizeof(float));
    double *pd = malloc(n * sizeof(double)), *gd = malloc(n * sizeof(double)),
           *bd = calloc(n, sizeof(double)), *p0 = malloc(n * sizeof(double));
    fill_gauss(p, n, 50 + (uint64_t)t);
    for (size_t i = 0; i < n; i++) pd[i] = p0[i] = p[i];
    for (int step = 0; step < 3; step++) {
      fill_gauss(g, n, 60 + (uint64_t)(t * 10 + step));
      for (size_t i = 0; i < n; i++) gd[i] = g[i];
      ts_muon_update(p, g, buf, rows, cols, 0.02f, 0.1f, 0.95f, TS_ORTHO_NS, 5, scratch);
      muon_ref(pd, gd, bd, rows, cols, 0.02, 0.1, 0.95);
    }
    double err = 0.0, moved = 0.0;
    for (size_t i = 0; i < n; i++) {
      err = fmax(err, fabs((double)p[i] - pd[i]));
      moved = fmax(moved, fabs(pd[i] - p0[i]));
    }
    if (getenv("TESSERA_TEST_VERBOSE"))
      print_message("  muon %dx%d: err %.3e of an update of %.3e\n", rows, cols, err, moved);
    assert_true(err <= 1e-4 * moved);
    free(p); free(g); free(buf); free(scratch); free(pd); free(gd); free(bd); free(p0);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_polar_express_is_a_retraction),
      cmocka_unit_test(test_spel_stays_on_the_manifold),
      cmocka_unit_test(test_tangent_projection),
      cmocka_unit_test(test_muon_against_double),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
