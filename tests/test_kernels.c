// Every CPU kernel against a plain double-precision reference written here.
//
// For each op: a reference forward in double (straightforward loops), a
// scalar objective L = Σ r ∘ out with a fixed random r, and central finite
// differences of L in double w.r.t. every input and parameter. The fp32
// kernel backward, run with dout = r, must match the finite differences, and
// the fp32 forward must match the reference forward.
//
// The bound, used everywhere:  max |fp32 − ref64| ≤ rel · (max |ref64| + floor).
// fp32 results carry rounding of about 6e-8 per operation; the sums here have
// at most a few hundred terms, so their worst-case relative error is ~1e-5
// and the typical one far less. The finite differences themselves are good to
// ~1e-8 (h = 1e-6·max(1, |x|): truncation ~h², cancellation ~1e-16·|L|/h).
// So rel = 1e-4 for gradients and 1e-5 for forwards (1e-6 for dropout: one
// multiplication) leave margin for rounding (measured: under 1e-6 relative,
// print with TESSERA_TEST_VERBOSE=1) yet reject real mistakes: check_close()
// asserts that the same bound rejects 2·got, got/2, −got and 0, so a missing
// factor of 2 or a sign error fails; dropped terms (tried: LayerNorm's n·mean
// term, attention's scale or dropout rescale, a bias row) fail by far.
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "testdata.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/attention_tile.h"
#include "cpu/isa.h"
#include "cpu/mm.h"
#include "exact/fastexp.h"
#include "backend/kernels.h"
#include "cp/ring.h"
#include "exact/rng.h"

#include <omp.h>

// ---- data and checks --------------------------------------------------------------

static double unif(uint64_t *s) { return ((double)(mix64(s) >> 11) + 0.5) / 9007199254740992.0; }

// x[i] = scale · N(0, 1), deterministic in seed.
static void fill_normal(float *x, size_t n, uint64_t seed, double scale) {
  uint64_t s = seed;
  for (size_t i = 0; i < n; i++)
    x[i] = (float)(scale * sqrt(-2.0 * log(unif(&s))) * cos(6.283185307179586 * unif(&s)));
}

static double *to_double(const float *x, size_t n) {
  double *d = malloc((n ? n : 1) * sizeof(double));
  assert_non_null(d);
  for (size_t i = 0; i < n; i++) d[i] = x[i];
  return d;
}

static float *falloc(size_t n) {
  float *p = calloc(n ? n : 1, sizeof(float));
  assert_non_null(p);
  return p;
}

static double *dalloc(size_t n) {
  double *p = calloc(n ? n : 1, sizeof(double));
  assert_non_null(p);
  return p;
}

static double maxerr(const float *got, double mul, const double *want, size_t n) {
  double e = 0.0;
  for (size_t i = 0; i < n; i++) e = fmax(e, fabs(mul * (double)got[i] - want[i]));
  return e;
}

// The bound of the header comment, plus its teeth: wrong results of the
// usual kinds (factor 2 either way, sign, all zero) must be rejected by it.
static void check_close(const char *what, const float *got, const double *want, size_t n,
                        double rel, double floor) {
  double scale = 0.0;
  for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
  double bound = rel * (scale + floor);
  double err = maxerr(got, 1.0, want, n);
  if (getenv("TESSERA_TEST_VERBOSE"))
    print_message("  %-28s max|err| %.3e  max|ref| %.3e  err/bound %.3f\n", what, err, scale,
                  err / bound);
  if (!(err <= bound))
    fail_msg("%s: max|fp32 - ref64| = %.6g > bound %.6g (max|ref64| = %.6g)", what, err, bound,
             scale);
  if (!(maxerr(got, 2.0, want, n) > bound && maxerr(got, 0.5, want, n) > bound &&
        maxerr(got, -1.0, want, n) > bound && maxerr(got, 0.0, want, n) > bound))
    fail_msg("%s: the check has no teeth (max|ref64| = %.6g, bound %.6g)", what, scale, bound);
}

// Central differences of f w.r.t. x[0..n) (x lives inside ctx).
typedef double (*objective_fn)(const void *ctx);
static void fd_grad(double *g, double *x, size_t n, objective_fn f, const void *ctx) {
  for (size_t i = 0; i < n; i++) {
    double xi = x[i], h = 1e-6 * fmax(1.0, fabs(xi));
    double xp = xi + h, xm = xi - h;
    x[i] = xp;
    double fp = f(ctx);
    x[i] = xm;
    double fm = f(ctx);
    x[i] = xi;
    g[i] = (fp - fm) / (xp - xm);
  }
}

static double dot_r(const double *r, const double *y, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; i++) s += r[i] * y[i];
  return s;
}

static int setup(void **state) {
  return 0;
}

// ---- layernorm ------------------------------------------------------------------------

typedef struct {
  int ntok, C;
  double *x, *w, *b, *r;
} ln_ref;

static void ln_ref_forward(const ln_ref *a, double *y, double *mean, double *rstd) {
  for (int t = 0; t < a->ntok; t++) {
    const double *x = a->x + (size_t)t * a->C;
    double m = 0.0, v = 0.0;
    for (int i = 0; i < a->C; i++) m += x[i];
    m /= a->C;
    for (int i = 0; i < a->C; i++) v += (x[i] - m) * (x[i] - m);
    v /= a->C;
    double rs = 1.0 / sqrt(v + 1e-5);
    for (int i = 0; i < a->C; i++) y[(size_t)t * a->C + i] = (x[i] - m) * rs * a->w[i] + a->b[i];
    if (mean) mean[t] = m;
    if (rstd) rstd[t] = rs;
  }
}

static double ln_objective(const void *vctx) {
  const ln_ref *a = vctx;
  size_t n = (size_t)a->ntok * a->C;
  double *y = dalloc(n);
  ln_ref_forward(a, y, NULL, NULL);
  double L = dot_r(a->r, y, n);
  free(y);
  return L;
}

static void test_layernorm(void **state) {
  const int ntok = 16, C = 24, leaf = 4;
  const size_t n = (size_t)ntok * C;
  float *x = falloc(n), *w = falloc(C), *b = falloc(C), *r = falloc(n);
  fill_normal(x, n, 1, 1.0);
  for (int t = 0; t < ntok; t++) // rows with their own offset and spread
    for (int i = 0; i < C; i++) x[(size_t)t * C + i] = x[(size_t)t * C + i] * (0.5f + 0.2f * t) + 0.3f * (t - 8);
  fill_normal(w, C, 2, 0.5);
  for (int i = 0; i < C; i++) w[i] += 1.0f;
  fill_normal(b, C, 3, 0.3);
  fill_normal(r, n, 4, 1.0);

  float *y = falloc(n), *mean = falloc(ntok), *rstd = falloc(ntok);
  layernorm_forward(y, mean, rstd, x, w, b, ntok, C);
  ln_ref a = {ntok, C, to_double(x, n), to_double(w, C), to_double(b, C), to_double(r, n)};
  double *yref = dalloc(n), *mref = dalloc(ntok), *rref = dalloc(ntok);
  ln_ref_forward(&a, yref, mref, rref);
  check_close("layernorm out", y, yref, n, 1e-5, 1e-3);
  check_close("layernorm mean", mean, mref, ntok, 1e-5, 1e-3);
  check_close("layernorm rstd", rstd, rref, ntok, 1e-5, 1e-3);

  ts_ws ws;
  assert_int_equal(ts_ws_init(&ws, 4, leaf, 4096, 8), 0);
  float *dx = falloc(n), *dw = falloc(C), *db = falloc(C);
  assert_int_equal(layernorm_backward(&ws, dx, dw, db, r, x, w, mean, rstd, ntok, C), 0);
  double *gx = dalloc(n), *gw = dalloc(C), *gb = dalloc(C);
  fd_grad(gx, a.x, n, ln_objective, &a);
  fd_grad(gw, a.w, C, ln_objective, &a);
  fd_grad(gb, a.b, C, ln_objective, &a);
  check_close("layernorm dinp", dx, gx, n, 1e-4, 1e-3);
  check_close("layernorm dw", dw, gw, C, 1e-4, 1e-3);
  check_close("layernorm db", db, gb, C, 1e-4, 1e-3);
  ts_ws_free(&ws);
  free(x); free(w); free(b); free(r); free(y); free(mean); free(rstd);
  free(a.x); free(a.w); free(a.b); free(a.r); free(yref); free(mref); free(rref);
  free(dx); free(dw); free(db); free(gx); free(gw); free(gb);
}

// ---- linear ---------------------------------------------------------------------------

typedef struct {
  int ntok, C, OC;
  double *x, *W, *b, *r; // b may be NULL
} lin_ref;

static void lin_ref_forward(const lin_ref *a, double *y) {
  for (int t = 0; t < a->ntok; t++)
    for (int o = 0; o < a->OC; o++) {
      double s = a->b ? a->b[o] : 0.0;
      for (int c = 0; c < a->C; c++) s += a->x[(size_t)t * a->C + c] * a->W[(size_t)o * a->C + c];
      y[(size_t)t * a->OC + o] = s;
    }
}

static double lin_objective(const void *vctx) {
  const lin_ref *a = vctx;
  size_t n = (size_t)a->ntok * a->OC;
  double *y = dalloc(n);
  lin_ref_forward(a, y);
  double L = dot_r(a->r, y, n);
  free(y);
  return L;
}

// OC = 3 heads of hd = 4 so linear_forward_heads is checked on the same data;
// 16 rows = 4 tiles = 4 leaves, so the weight gradient is a two-level tree.
static void run_linear(int with_bias) {
  const int ntok = 16, C = 12, OC = 12, hd = 4, tile = 4, leaf = 4;
  const size_t nx = (size_t)ntok * C, nW = (size_t)OC * C, ny = (size_t)ntok * OC;
  float *x = falloc(nx), *W = falloc(nW), *b = falloc(OC), *r = falloc(ny);
  fill_normal(x, nx, 10, 1.0);
  fill_normal(W, nW, 11, 0.5);
  fill_normal(b, OC, 12, 1.0);
  fill_normal(r, ny, 13, 1.0);
  const float *bp = with_bias ? b : NULL;

  lin_ref a = {ntok, C, OC, to_double(x, nx), to_double(W, nW), with_bias ? to_double(b, OC) : NULL,
               to_double(r, ny)};
  double *yref = dalloc(ny);
  lin_ref_forward(&a, yref);
  float *y = falloc(ny), *yh = falloc(ny);
  linear_forward(y, x, W, bp, ntok, C, OC, tile);
  linear_forward_heads(yh, x, W, bp, ntok, C, OC, hd, tile);
  check_close("linear out", y, yref, ny, 1e-5, 1e-3);
  check_close("linear_forward_heads out", yh, yref, ny, 1e-5, 1e-3);

  ts_ws ws;
  assert_int_equal(ts_ws_init(&ws, tile, leaf, 4096, 8), 0);
  float *dx = falloc(nx), *dW = falloc(nW), *db = falloc(OC);
  linear_backward_input(dx, r, W, ntok, C, OC, tile, 0);
  assert_int_equal(linear_backward_weights(&ws, dW, with_bias ? db : NULL, r, x, ntok, C, OC), 0);
  double *gx = dalloc(nx), *gW = dalloc(nW), *gb = dalloc(OC);
  fd_grad(gx, a.x, nx, lin_objective, &a);
  fd_grad(gW, a.W, nW, lin_objective, &a);
  check_close("linear dinp", dx, gx, nx, 1e-4, 1e-3);
  check_close("linear dW", dW, gW, nW, 1e-4, 1e-3);
  if (with_bias) {
    fd_grad(gb, a.b, OC, lin_objective, &a);
    check_close("linear db", db, gb, OC, 1e-4, 1e-3);
  }
  // accumulate = 1 adds onto what dinp held
  float *acc = falloc(nx);
  fill_normal(acc, nx, 14, 1.0);
  double *want = dalloc(nx);
  for (size_t i = 0; i < nx; i++) want[i] = acc[i] + gx[i];
  linear_backward_input(acc, r, W, ntok, C, OC, tile, 1);
  check_close("linear dinp (accumulate)", acc, want, nx, 1e-4, 1e-3);

  ts_ws_free(&ws);
  free(x); free(W); free(b); free(r); free(a.x); free(a.W); free(a.b); free(a.r);
  free(yref); free(y); free(yh); free(dx); free(dW); free(db); free(gx); free(gW); free(gb);
  free(acc); free(want);
}

static void test_linear(void **state) { run_linear(1); }
static void test_linear_no_bias(void **state) { run_linear(0); }

// ---- GeLU ----------------------------------------------------------------------------

typedef struct {
  size_t n;
  double *x, *r;
} gelu_ref;

static double gelu64(double x) {
  return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

static double gelu_objective(const void *vctx) {
  const gelu_ref *a = vctx;
  double L = 0.0;
  for (size_t i = 0; i < a->n; i++) L += a->r[i] * gelu64(a->x[i]);
  return L;
}

static void test_gelu(void **state) {
  const size_t n = 200;
  float *x = falloc(n), *r = falloc(n), *y = falloc(n), *dx = falloc(n);
  for (size_t i = 0; i < n; i++) x[i] = -6.0f + 12.0f * (float)i / (float)(n - 1); // through 0
  fill_normal(r, n, 20, 1.0);
  gelu_ref a = {n, to_double(x, n), to_double(r, n)};
  double *yref = dalloc(n), *g = dalloc(n);
  for (size_t i = 0; i < n; i++) yref[i] = gelu64(a.x[i]);
  gelu_forward(y, x, (int64_t)n);
  check_close("gelu out", y, yref, n, 1e-5, 1e-3);
  gelu_backward(dx, x, r, (int64_t)n);
  fd_grad(g, a.x, n, gelu_objective, &a);
  check_close("gelu dinp", dx, g, n, 1e-4, 1e-3);
  // in place (dinp == dout), as the model calls it: same bits
  float *inplace = falloc(n);
  memcpy(inplace, r, n * sizeof(float));
  gelu_backward(inplace, x, inplace, (int64_t)n);
  assert_memory_equal(inplace, dx, n * sizeof(float));
  free(x); free(r); free(y); free(dx); free(a.x); free(a.r); free(yref); free(g); free(inplace);
}

// ---- exp ---------------------------------------------------------------------------
// ts_expf on what a diverged run feeds it: NaN stays NaN (no undefined
// conversion or shift on the way: the sanitizer build of CI traps on those),
// -inf and anything below the range give 0, and the range itself is within
// 2 ulp of libm.
static void test_fastexp(void **state) {
  const uint32_t nans[] = {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFFFFFFFFu, 0x7FC12345u};
  for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
    float x;
    memcpy(&x, &nans[i], sizeof x);
    if (!isnan(ts_expf(x))) fail_msg("ts_expf(NaN 0x%08x) = %g, not NaN", nans[i], ts_expf(x));
  }
  assert_true(ts_expf(-INFINITY) == 0.0f);
  assert_true(ts_expf(-100.0f) == 0.0f);
  for (int i = 0; i <= 4000; i++) {
    float x = -87.0f + 175.0f * (float)i / 4000.0f, y = ts_expf(x), want = expf(x);
    if (!(fabsf(y - want) <= 2.4e-7f * want))
      fail_msg("ts_expf(%a) = %a, libm %a", (double)x, (double)y, (double)want);
  }
  // and through a kernel that uses it: NaN in, NaN out
  float in[16], out[16];
  for (int i = 0; i < 16; i++) in[i] = i == 5 ? NAN : 0.25f * (float)i;
  gelu_forward(out, in, 16);
  assert_true(isnan(out[5]));
  for (int i = 0; i < 16; i++) assert_true(i == 5 || isfinite(out[i]));
}

// ---- attention's tile products ------------------------------------------------------------
// ts_tile_mm's contract (src/cpu/attention_tile.h): every element is one fma
// chain over k in ascending order from +0, then alpha·t or fma(alpha, t, C).
// Every instruction set this CPU has must give exactly the bits of that
// definition, written out here, for the shapes attention uses and for odd
// ones that take the remainder paths (rows not a multiple of 4, columns not
// a multiple of the vector), with A read directly and transposed; entries of
// C past N (the row padding) must stay untouched. The definition itself is
// checked against double precision within the chain's error bound
// (K + 2)·2⁻²⁴·(|alpha|·Σ|a·b| + |C|), and the bitwise check is shown to
// have teeth: the same chain summed in the other order differs.
static void tile_ref(float *C, int ldc, const float *A, ptrdiff_t ai, ptrdiff_t ak,
                     const float *B, int ldb, int M, int N, int K, float alpha, int accumulate,
                     int reversed) {
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      float t = 0.0f;
      for (int kk = 0; kk < K; kk++) {
        int k = reversed ? K - 1 - kk : kk;
        t = fmaf(A[i * ai + k * ak], B[(size_t)k * ldb + j], t);
      }
      float *c = C + (size_t)i * ldc + j;
      *c = accumulate ? fmaf(alpha, t, *c) : alpha * t;
    }
}

static void run_tile_mm(int M, int N, int K, int transposed, float alpha, int accumulate,
                        uint64_t seed) {
  const int lda = (transposed ? M : K) + 3, ldb = N + 5, ldc = N + 7;
  const ptrdiff_t ai = transposed ? 1 : lda, ak = transposed ? lda : 1;
  const int arows = transposed ? K : M;
  float *A = falloc((size_t)arows * lda), *B = falloc((size_t)K * ldb);
  float *C0 = falloc((size_t)M * ldc), *want = falloc((size_t)M * ldc);
  float *got = falloc((size_t)M * ldc), *rev = falloc((size_t)M * ldc);
  fill_normal(A, (size_t)arows * lda, seed, 1.0);
  fill_normal(B, (size_t)K * ldb, seed + 1, 3.0);
  fill_normal(C0, (size_t)M * ldc, seed + 2, 10.0);
  // exact zeros of both signs and a spread of magnitudes
  for (size_t i = 0; i < (size_t)arows * lda; i += 7) A[i] = (i / 7) % 2 ? -0.0f : 0.0f;
  for (size_t i = 3; i < (size_t)K * ldb; i += 11) B[i] = ldexpf(B[i], (int)(i % 29) - 14);
  memcpy(want, C0, (size_t)M * ldc * sizeof(float));
  tile_ref(want, ldc, A, ai, ak, B, ldb, M, N, K, alpha, accumulate, 0);
  int ran = 0;
  for (int isa = 0; isa < TS_ISA_COUNT; isa++) {
    memcpy(got, C0, (size_t)M * ldc * sizeof(float));
    if (ts_tile_mm_isa(isa, got, ldc, A, ai, ak, B, ldb, M, N, K, alpha, accumulate) != 0)
      continue; // this CPU lacks it
    ran++;
    if (memcmp(got, want, (size_t)M * ldc * sizeof(float)) != 0)
      fail_msg("ts_tile_mm isa %d, %dx%dx%d%s alpha %g acc %d: not the bits of the definition",
               isa, M, N, K, transposed ? " (A transposed)" : "", (double)alpha, accumulate);
  }
  assert_true(ran >= 1);
  // the definition against double precision
  const double u = ldexp(1.0, -24);
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double exact = 0.0, mag = 0.0;
      for (int k = 0; k < K; k++) {
        double p = (double)A[i * ai + k * ak] * (double)B[(size_t)k * ldb + j];
        exact += p;
        mag += fabs(p);
      }
      double c0 = accumulate ? (double)C0[(size_t)i * ldc + j] : 0.0;
      exact = alpha * exact + c0;
      double bound = (K + 2) * u * (fabs(alpha) * mag + fabs(c0));
      double err = fabs((double)want[(size_t)i * ldc + j] - exact);
      if (!(err <= bound)) fail_msg("tile_ref (%d,%d): error %g > bound %g", i, j, err, bound);
    }
  // teeth: another order gives other bits somewhere (when K allows any)
  if (K >= 16) {
    memcpy(rev, C0, (size_t)M * ldc * sizeof(float));
    tile_ref(rev, ldc, A, ai, ak, B, ldb, M, N, K, alpha, accumulate, 1);
    assert_true(memcmp(rev, want, (size_t)M * ldc * sizeof(float)) != 0);
  }
  free(A); free(B); free(C0); free(want); free(got); free(rev);
}

static void test_tile_mm(void **state) {
  // (M, N, K): attention's shapes (tile x tile x dh, tile x dh x tile) and remainders
  static const int shapes[][3] = {{64, 64, 64}, {64, 64, 16}, {8, 8, 16},  {32, 16, 32},
                                  {64, 128, 64}, {16, 80, 16}, {5, 13, 7}, {3, 100, 9},
                                  {64, 17, 64},  {7, 33, 40},  {1, 1, 1}};
  uint64_t seed = 1000;
  for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++)
    for (int tr = 0; tr < 2; tr++)
      for (int acc = 0; acc < 2; acc++) {
        run_tile_mm(shapes[c][0], shapes[c][1], shapes[c][2], tr, 1.0f, acc, seed++);
        run_tile_mm(shapes[c][0], shapes[c][1], shapes[c][2], tr, 0.17677669f, acc, seed++);
      }
}

// ---- the canonical product (ts_mm) ---------------------------------------------
// The definition (src/cpu/mm.h) written out here once more, for every
// transpose: op(A)(i,k) and op(B)(k,j) read where the flags say, one fma
// chain over k ascending from +0, then alpha·t or fma(alpha, t, C).
static void mm_ref(int tA, int tB, int M, int N, int K, float alpha, const float *A, int lda,
                   const float *B, int ldb, int accumulate, float *C, int ldc) {
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      float t = 0.0f;
      for (int k = 0; k < K; k++)
        t = fmaf(tA ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k],
                 tB ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j], t);
      float *c = C + (size_t)i * ldc + j;
      *c = accumulate ? fmaf(alpha, t, *c) : alpha * t;
    }
}

// Equal bits, except that any NaN equals any NaN: which NaN payload an fma
// returns is the instruction set's choice (not part of the definition).
static int same_bits(const float *a, const float *b, size_t n, size_t *where) {
  for (size_t i = 0; i < n; i++) {
    if (isnan(a[i]) && isnan(b[i])) continue;
    if (memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      *where = i;
      return 0;
    }
  }
  return 1;
}

// kind 0: normal values; 1: with zeros of both signs, denormals and huge
// magnitudes; 2: with an Inf and a NaN in A, and an Inf in B.
static void run_mm(int M, int N, int K, int tA, int tB, float alpha, int accumulate, int kind,
                   uint64_t seed) {
  const int lda = (tA ? M : K) + 3, ldb = (tB ? K : N) + 5, ldc = N + 7;
  const size_t na = (size_t)(tA ? K : M) * lda, nb = (size_t)(tB ? N : K) * ldb,
               nc = (size_t)M * ldc;
  float *A = falloc(na), *B = falloc(nb), *C0 = falloc(nc), *want = falloc(nc), *got = falloc(nc);
  fill_normal(A, na, seed, 1.0);
  fill_normal(B, nb, seed + 1, 3.0);
  fill_normal(C0, nc, seed + 2, 10.0);
  if (kind == 1) {
    for (size_t i = 0; i < na; i += 7) A[i] = (i / 7) % 2 ? -0.0f : 0.0f;
    for (size_t i = 3; i < na; i += 13) A[i] = ldexpf(A[i], -130); // denormal
    for (size_t i = 3; i < nb; i += 11) B[i] = ldexpf(B[i], (int)(i % 61) - 30);
    for (size_t i = 1; i < nc; i += 5) C0[i] = (i / 5) % 2 ? -0.0f : 0.0f;
  } else if (kind == 2 && na && nb) {
    A[na / 2] = INFINITY;
    A[na / 3] = NAN;
    B[nb / 2] = -INFINITY;
  }
  memcpy(want, C0, nc * sizeof(float));
  mm_ref(tA, tB, M, N, K, alpha, A, lda, B, ldb, accumulate, want, ldc);
  int ran = 0;
  for (int isa = 0; isa < TS_ISA_COUNT; isa++)
    for (int threads = 0; threads < 2; threads++) {
      memcpy(got, C0, nc * sizeof(float));
      if (ts_mm_isa(isa, threads, tA, tB, M, N, K, alpha, A, lda, B, ldb, accumulate, got, ldc))
        continue; // this CPU lacks it
      ran++;
      size_t at = 0;
      if (!same_bits(got, want, nc, &at))
        fail_msg("ts_mm %s%s, %dx%dx%d tA %d tB %d alpha %a acc %d kind %d: element (%zu, %zu) "
                 "%a, the definition %a", ts_isa_name(isa), threads ? " (1 thread)" : "", M, N, K,
                 tA, tB, (double)alpha, accumulate, kind, at / ldc, at % ldc, (double)got[at],
                 (double)want[at]);
    }
  assert_true(ran >= 2);
  free(A); free(B); free(C0); free(want); free(got);
}

static void test_mm(void **state) {
  // (M, N, K): 1x1x1, primes, k = 0, the register block's remainders (rows
  // not a multiple of 6, columns of 16 and 64), the linear layers' shapes
  // (a leaf of rows, heads of 16 columns, the tiny model's widths)
  static const int shapes[][3] = {{1, 1, 1},    {1, 1, 0},    {3, 5, 0},    {7, 13, 5},
                                  {13, 67, 17}, {6, 64, 64},  {5, 1, 300},  {37, 131, 257},
                                  {64, 16, 64}, {64, 192, 64}, {64, 64, 256}, {2, 97, 3},
                                  {100, 65, 33}};
  static const float alphas[] = {1.0f, -1.0f, 0.17677669f};
  uint64_t seed = 9000;
  for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++)
    for (int tA = 0; tA < 2; tA++)
      for (int tB = 0; tB < 2; tB++)
        for (int acc = 0; acc < 2; acc++)
          for (int kind = 0; kind < 3; kind++)
            run_mm(shapes[c][0], shapes[c][1], shapes[c][2], tA, tB,
                   alphas[(c + (size_t)kind) % 3], acc, kind, seed++);
}

// ts_mm_leaves against its definition written out here: each leaf's chain
// (mm_ref over the leaf's k), then the canonical tree of the leaves' values
// (ts_tree_sum, tree.c's own code), on every path, odd shapes, leaf counts
// that are and are not powers of two, none, and the special values.
static void run_mm_leaves(int M, int N, int nl, int leaf, int kind, uint64_t seed) {
  const int K = nl * leaf, lda = M + 3, ldb = N + 5, ldc = N + 7;
  const size_t na = (size_t)(K ? K : 1) * lda, nb = (size_t)(K ? K : 1) * ldb, nc = (size_t)M * ldc;
  float *A = falloc(na), *B = falloc(nb), *want = falloc(nc), *got = falloc(nc);
  float *t = falloc((size_t)M * N * (nl ? nl : 1)), *vals = falloc(nl ? nl : 1);
  fill_normal(A, na, seed, 1.0);
  fill_normal(B, nb, seed + 1, 3.0);
  if (kind == 1) {
    for (size_t i = 0; i < na; i += 7) A[i] = (i / 7) % 2 ? -0.0f : 0.0f;
    for (size_t i = 3; i < na; i += 13) A[i] = ldexpf(A[i], -130);
    for (size_t i = 3; i < nb; i += 11) B[i] = ldexpf(B[i], (int)(i % 61) - 30);
  } else if (kind == 2 && K) {
    A[na / 2] = INFINITY;
    A[na / 3] = NAN;
    B[nb / 2] = -INFINITY;
  }
  for (int l = 0; l < nl; l++) // leaf l's chains
    mm_ref(1, 0, M, N, leaf, 1.0f, A + (size_t)l * leaf * lda, lda, B + (size_t)l * leaf * ldb, ldb,
           0, t + (size_t)l * M * N, N);
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      for (int l = 0; l < nl; l++) vals[l] = t[(size_t)l * M * N + (size_t)i * N + j];
      want[(size_t)i * ldc + j] = ts_tree_sum(vals, (size_t)nl);
    }
  int ran = 0;
  for (int isa = 0; isa < TS_ISA_COUNT; isa++)
    for (int threads = 0; threads < 2; threads++) {
      memset(got, 0x7f, nc * sizeof(float)); // what lies between rows stays
      if (ts_mm_leaves_isa(isa, threads, M, N, nl, leaf, A, lda, B, ldb, got, ldc)) continue;
      ran++;
      for (int i = 0; i < M; i++) {
        size_t at = 0;
        if (!same_bits(got + (size_t)i * ldc, want + (size_t)i * ldc, (size_t)N, &at))
          fail_msg("ts_mm_leaves %s%s, %dx%d, %d leaves of %d, kind %d: element (%d, %zu) %a, the "
                   "definition %a", ts_isa_name(isa), threads ? " (1 thread)" : "", M, N, nl, leaf,
                   kind, i, at, (double)got[(size_t)i * ldc + at], (double)want[(size_t)i * ldc + at]);
        for (int j = N; j < ldc && i + 1 < M; j++) assert_true(got[(size_t)i * ldc + j] != 0.0f);
      }
    }
  assert_true(ran >= 2);
  free(A); free(B); free(want); free(got); free(t); free(vals);
}

static void test_mm_leaves(void **state) {
  // (M, N, leaves, leaf)
  static const int shapes[][4] = {{1, 1, 1, 1},   {1, 1, 0, 4},    {3, 5, 2, 1},   {7, 13, 3, 5},
                                  {13, 67, 5, 8},  {6, 64, 8, 8},   {37, 131, 13, 3}, {64, 16, 1, 64},
                                  {100, 65, 32, 8}, {5, 200, 7, 2}};
  uint64_t seed = 9500;
  for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++)
    for (int kind = 0; kind < 3; kind++)
      run_mm_leaves(shapes[c][0], shapes[c][1], shapes[c][2], shapes[c][3], kind, seed++);
}

// A product's bits do not depend on its call's shape: rows, columns or heads
// computed by separate calls are the bits of one call (what lets a layer be
// one product on all threads and a rank project a subset of heads alone).
static void test_mm_cuts(void **state) {
  const int M = 50, N = 70, K = 90;
  float *A = falloc((size_t)M * K), *B = falloc((size_t)N * K), *one = falloc((size_t)M * N),
        *cut = falloc((size_t)M * N);
  fill_normal(A, (size_t)M * K, 31, 1.0);
  fill_normal(B, (size_t)N * K, 32, 1.0);
  ts_mm(0, 1, M, N, K, 1.0f, A, K, B, K, 0, one, N);
  // rows 0..16 and 17..49; within the second, columns 0..29 and 30..69
  ts_mm(0, 1, 17, N, K, 1.0f, A, K, B, K, 0, cut, N);
  ts_mm(0, 1, M - 17, 30, K, 1.0f, A + 17 * K, K, B, K, 0, cut + 17 * N, N);
  ts_mm(0, 1, M - 17, N - 30, K, 1.0f, A + 17 * K, K, B + 30 * K, K, 0, cut + 17 * N + 30, N);
  assert_memory_equal(one, cut, (size_t)M * N * sizeof(float));
  // teeth: the chain cut in two halves added together is another computation
  ts_mm(0, 1, M, N, K / 2, 1.0f, A, K, B, K, 0, cut, N);
  ts_mm(0, 1, M, N, K - K / 2, 1.0f, A + K / 2, K, B + K / 2, K, 1, cut, N);
  assert_true(memcmp(one, cut, (size_t)M * N * sizeof(float)) != 0);
  free(A); free(B); free(one); free(cut);
}

// ts_tile_transpose and ts_tile_copy move values without touching them.
static void test_tile_pack(void **state) {
  const int rows = 6, cols = 5, lds = 9;
  float src[6 * 9], t[5 * 6], c[6 * 5];
  fill_normal(src, sizeof src / sizeof src[0], 77, 1.0);
  ts_tile_transpose(t, src, lds, rows, cols);
  ts_tile_copy(c, src, lds, rows, cols);
  for (int r = 0; r < rows; r++)
    for (int k = 0; k < cols; k++) {
      assert_memory_equal(&t[k * rows + r], &src[r * lds + k], sizeof(float));
      assert_memory_equal(&c[r * cols + k], &src[r * lds + k], sizeof(float));
    }
}

// ---- dropout ---------------------------------------------------------------------------
// The mask is a function of the key, so for a fixed key dropout is linear and
// its backward is the same masking applied to dout.

typedef struct {
  size_t n;
  double *x, *r, p;
  const unsigned char *keep;
} drop_ref;

static double drop_objective(const void *vctx) {
  const drop_ref *a = vctx;
  double L = 0.0;
  for (size_t i = 0; i < a->n; i++) L += a->r[i] * (a->keep[i] ? a->x[i] / (1.0 - a->p) : 0.0);
  return L;
}

static void test_dropout(void **state) {
  const size_t n = 4096;
  const float p = 0.25f;
  const uint64_t seed = 77, step = 3, base = 123456;
  float *x = falloc(n), *r = falloc(n), *y = falloc(n), *dx = falloc(n);
  fill_normal(x, n, 30, 1.0);
  fill_normal(r, n, 31, 1.0);
  unsigned char *keep = malloc(n);
  assert_non_null(keep);
  size_t kept = 0;
  for (size_t i = 0; i < n; i++) {
    keep[i] = ts_rng_uniform(seed, TS_RNG_DROPOUT_MLP, step, base + i) >= p;
    kept += keep[i];
  }
  // ~p dropped: 5 sd of a Binomial(n, p) count
  assert_true(fabs((double)(n - kept) - p * n) <= 5.0 * sqrt(n * p * (1 - p)));
  drop_ref a = {n, to_double(x, n), to_double(r, n), p, keep};
  double *yref = dalloc(n), *g = dalloc(n);
  for (size_t i = 0; i < n; i++) yref[i] = keep[i] ? a.x[i] / (1.0 - p) : 0.0;
  memcpy(y, x, n * sizeof(float));
  dropout_apply(y, (int64_t)n, p, seed, TS_RNG_DROPOUT_MLP, step, base);
  check_close("dropout out", y, yref, n, 1e-6, 1e-3);
  for (size_t i = 0; i < n; i++) // dropped means exactly zero
    if (!keep[i]) assert_true(y[i] == 0.0f);
  memcpy(dx, r, n * sizeof(float));
  dropout_apply(dx, (int64_t)n, p, seed, TS_RNG_DROPOUT_MLP, step, base);
  fd_grad(g, a.x, n, drop_objective, &a);
  check_close("dropout dinp", dx, g, n, 1e-6, 1e-3);
  // p = 0 is the identity, bit for bit
  memcpy(y, x, n * sizeof(float));
  dropout_apply(y, (int64_t)n, 0.0f, seed, TS_RNG_DROPOUT_MLP, step, base);
  assert_memory_equal(y, x, n * sizeof(float));
  // a sub-range with its global base gives the same elements as the whole
  memcpy(y, x, n * sizeof(float));
  dropout_apply(y, (int64_t)n, p, seed, TS_RNG_DROPOUT_MLP, step, base);
  float *part = falloc(1000);
  memcpy(part, x + 1500, 1000 * sizeof(float));
  dropout_apply(part, 1000, p, seed, TS_RNG_DROPOUT_MLP, step, base + 1500);
  assert_memory_equal(part, y + 1500, 1000 * sizeof(float));
  free(x); free(r); free(y); free(dx); free(keep); free(a.x); free(a.r); free(yref); free(g);
  free(part);
}

// ---- attention ------------------------------------------------------------------------

typedef struct {
  int B, T, H, dh;
  double p;
  const unsigned char *keep; // (B, H, T, T) dropout mask, or NULL
  double *q, *k, *v, *r;
} attn_ref;

// Causal softmax attention per (b, h, i) in double, straight from the
// definition: P = softmax(q·kᵀ/√dh) over j <= i, P~ = dropout(P), o = P~·v.
static void attn_ref_forward(const attn_ref *a, double *out, double *lse) {
  const int T = a->T, H = a->H, dh = a->dh, C = H * dh;
  const double scale = 1.0 / sqrt((double)dh);
  double *s = dalloc(T);
  for (int b = 0; b < a->B; b++)
    for (int h = 0; h < H; h++)
      for (int i = 0; i < T; i++) {
        const double *qi = a->q + ((size_t)b * T + i) * C + (size_t)h * dh;
        double mx = -INFINITY;
        for (int j = 0; j <= i; j++) {
          const double *kj = a->k + ((size_t)b * T + j) * C + (size_t)h * dh;
          double d = 0.0;
          for (int c = 0; c < dh; c++) d += qi[c] * kj[c];
          s[j] = d * scale;
          mx = fmax(mx, s[j]);
        }
        double sum = 0.0;
        for (int j = 0; j <= i; j++) sum += exp(s[j] - mx);
        if (lse) lse[((size_t)b * H + h) * T + i] = mx + log(sum);
        double *o = out + ((size_t)b * T + i) * C + (size_t)h * dh;
        for (int c = 0; c < dh; c++) o[c] = 0.0;
        for (int j = 0; j <= i; j++) {
          double pj = exp(s[j] - mx) / sum;
          if (a->keep) pj = a->keep[(((size_t)b * H + h) * T + i) * T + j] ? pj / (1.0 - a->p) : 0.0;
          const double *vj = a->v + ((size_t)b * T + j) * C + (size_t)h * dh;
          for (int c = 0; c < dh; c++) o[c] += pj * vj[c];
        }
      }
  free(s);
}

static double attn_objective(const void *vctx) {
  const attn_ref *a = vctx;
  size_t n = (size_t)a->B * a->T * a->H * a->dh;
  double *o = dalloc(n);
  attn_ref_forward(a, o, NULL);
  double L = dot_r(a->r, o, n);
  free(o);
  return L;
}

typedef struct {
  int B, T, H, dh, tile;
  float p;
} attn_case;

static void run_attention(const attn_case *ac) {
  const int B = ac->B, T = ac->T, H = ac->H, dh = ac->dh, C = H * dh;
  const size_t n = (size_t)B * T * C, nl = (size_t)B * H * T;
  char what[96];
  float *q = falloc(n), *k = falloc(n), *v = falloc(n), *r = falloc(n);
  fill_normal(q, n, 40 + (uint64_t)T, 1.5); // some peaked rows
  fill_normal(k, n, 41 + (uint64_t)T, 1.0);
  fill_normal(v, n, 42 + (uint64_t)T, 1.0);
  fill_normal(r, n, 43 + (uint64_t)T, 1.0);
  ts_attn_shape s = {.B = B, .T = T, .H = H, .dh = dh, .tile = ac->tile, .dropout = ac->p,
                     .seed = 5, .step = 9, .index_base = 1000};
  // the mask, from the global index of docs/MODEL.md (index_base = l·B·H·T·T)
  unsigned char *keep = NULL;
  if (ac->p > 0.0f) {
    keep = malloc(nl * T);
    assert_non_null(keep);
    for (size_t e = 0; e < nl * T; e++)
      keep[e] = ts_rng_uniform(s.seed, TS_RNG_DROPOUT_ATTN, s.step, s.index_base + e) >= ac->p;
  }
  attn_ref a = {B, T, H, dh, ac->p, keep, to_double(q, n), to_double(k, n), to_double(v, n),
                to_double(r, n)};
  double *oref = dalloc(n), *lref = dalloc(nl);
  attn_ref_forward(&a, oref, lref);

  ts_ws ws;
  assert_int_equal(ts_ws_init(&ws, ac->tile, ac->tile, 64, dh), 0);
  float *out = falloc(n), *lse = falloc(nl);
  attention_forward(&ws, out, lse, q, k, v, &s);
  snprintf(what, sizeof what, "attn B%d T%d tile%d dh%d p%.1f out", B, T, ac->tile, dh, ac->p);
  check_close(what, out, oref, n, 1e-5, 1e-3);
  snprintf(what, sizeof what, "attn B%d T%d tile%d dh%d p%.1f lse", B, T, ac->tile, dh, ac->p);
  check_close(what, lse, lref, nl, 1e-5, 1e-3);

  float *dq = falloc(n), *dk = falloc(n), *dv = falloc(n), *dsum = falloc(nl);
  assert_int_equal(attention_backward(&ws, dq, dk, dv, dsum, r, q, k, v, out, lse, &s), 0);
  double *g = dalloc(n);
  const char *names[3] = {"dq", "dk", "dv"};
  float *got[3] = {dq, dk, dv};
  double *inp[3] = {a.q, a.k, a.v};
  for (int w = 0; w < 3; w++) {
    fd_grad(g, inp[w], n, attn_objective, &a);
    snprintf(what, sizeof what, "attn B%d T%d tile%d dh%d p%.1f %s", B, T, ac->tile, dh, ac->p,
             names[w]);
    check_close(what, got[w], g, n, 1e-4, 1e-3);
  }
  ts_ws_free(&ws);
  free(q); free(k); free(v); free(r); free(keep); free(a.q); free(a.k); free(a.v); free(a.r);
  free(oref); free(lref); free(out); free(lse); free(dq); free(dk); free(dv); free(dsum); free(g);
}

// Ring attention (src/cp/ring.h) is in the tolerance tier: each query
// segment attends to the key blocks of its own and earlier segments one block
// at a time, and the blocks' outputs are merged by their log-sum-exp; the
// backward sums dQ over blocks and dK, dV over query segments. The bound is
// the flash-attention criterion against the double reference: the ring's
// error at most twice the serial kernel's error plus 2^-21 of the largest
// reference value.
static void check_ring(const char *what, const float *ring, const float *serial,
                       const double *ref, size_t n) {
  double scale = 0.0;
  for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(ref[i]));
  double es = maxerr(serial, 1.0, ref, n), er = maxerr(ring, 1.0, ref, n);
  double bound = 2.0 * es + ldexp(scale, -21);
  if (getenv("TESSERA_TEST_VERBOSE"))
    print_message("  %-28s ring err %.3e  serial err %.3e  bound %.3e\n", what, er, es, bound);
  if (!(er <= bound)) fail_msg("%s: ring error %.6g > 2 x serial error %.6g + 2^-21 x %.6g", what, er, es, scale);
  if (!(maxerr(ring, 1.0 + 1e-3, ref, n) > bound))
    fail_msg("%s: the ring bound has no teeth (a 1e-3 relative error passes)", what);
}

static void run_ring(int T, int tile, int N, float p) {
  const int B = 1, H = 2, dh = 8, C = H * dh, Tq = T / N;
  const size_t n = (size_t)T * C, nl = (size_t)H * T;
  char what[96];
  float *q = falloc(n), *k = falloc(n), *v = falloc(n), *r = falloc(n);
  fill_normal(q, n, 80 + (uint64_t)T, 1.5);
  fill_normal(k, n, 81 + (uint64_t)T, 1.0);
  fill_normal(v, n, 82 + (uint64_t)T, 1.0);
  fill_normal(r, n, 83 + (uint64_t)T, 1.0);
  ts_attn_shape s = {.B = B, .T = T, .H = H, .dh = dh, .tile = tile, .dropout = p, .seed = 5,
                     .step = 9, .index_base = 1000};
  unsigned char *keep = NULL;
  if (p > 0.0f) {
    keep = malloc(nl * T);
    assert_non_null(keep);
    for (size_t e = 0; e < nl * T; e++)
      keep[e] = ts_rng_uniform(s.seed, TS_RNG_DROPOUT_ATTN, s.step, s.index_base + e) >= p;
  }
  attn_ref a = {B, T, H, dh, p, keep, to_double(q, n), to_double(k, n), to_double(v, n),
                to_double(r, n)};
  double *oref = dalloc(n);
  attn_ref_forward(&a, oref, NULL);
  ts_ws ws;
  assert_int_equal(ts_ws_init(&ws, tile, tile, 64, dh), 0);
  // serial
  float *out = falloc(n), *lse = falloc(nl), *dq = falloc(n), *dk = falloc(n), *dv = falloc(n),
        *dsum = falloc(nl);
  attention_forward(&ws, out, lse, q, k, v, &s);
  assert_int_equal(attention_backward(&ws, dq, dk, dv, dsum, r, q, k, v, out, lse, &s), 0);
  // the ring, segment by segment (outputs in place in rout, rlse per segment)
  float *rout = falloc(n), *rlse = falloc(nl), *ob = falloc((size_t)Tq * C), *lb = falloc((size_t)H * Tq);
  float *rdq = calloc(n, sizeof(float)), *rdk = calloc(n, sizeof(float)), *rdv = calloc(n, sizeof(float));
  float *pq = falloc((size_t)Tq * C), *pk = falloc((size_t)Tq * C), *pv = falloc((size_t)Tq * C);
  for (int seg = 0; seg < N; seg++) {
    const size_t off = (size_t)seg * Tq * C;
    float *ls = rlse + (size_t)seg * H * Tq; // (H, Tq) of this segment
    for (int src = seg; src >= 0; src--) {
      ts_attn_shape b = s;
      b.Tq = Tq, b.q0 = seg * Tq, b.Tk = Tq, b.k0 = src * Tq;
      const size_t ko = (size_t)src * Tq * C;
      if (src == seg) {
        attention_forward(&ws, rout + off, ls, q + off, k + ko, v + ko, &b);
      } else {
        attention_forward(&ws, ob, lb, q + off, k + ko, v + ko, &b);
        ring_merge(rout + off, ls, ob, lb, Tq, H, dh, C);
      }
    }
  }
  for (int seg = 0; seg < N; seg++) {
    const size_t off = (size_t)seg * Tq * C;
    for (int src = seg; src >= 0; src--) {
      ts_attn_shape b = s;
      b.Tq = Tq, b.q0 = seg * Tq, b.Tk = Tq, b.k0 = src * Tq;
      const size_t ko = (size_t)src * Tq * C;
      assert_int_equal(attention_backward(&ws, pq, pk, pv, dsum, r + off, q + off, k + ko,
                                          v + ko, rout + off, rlse + (size_t)seg * H * Tq, &b), 0);
      for (size_t i = 0; i < (size_t)Tq * C; i++) {
        rdq[off + i] += pq[i];
        rdk[ko + i] += pk[i];
        rdv[ko + i] += pv[i];
      }
    }
  }
  snprintf(what, sizeof what, "ring T%d N%d p%.1f out", T, N, p);
  check_ring(what, rout, out, oref, n);
  double *g = dalloc(n);
  const char *names[3] = {"dq", "dk", "dv"};
  float *ring_g[3] = {rdq, rdk, rdv}, *ser_g[3] = {dq, dk, dv};
  double *inp[3] = {a.q, a.k, a.v};
  for (int w = 0; w < 3; w++) {
    fd_grad(g, inp[w], n, attn_objective, &a);
    snprintf(what, sizeof what, "ring T%d N%d p%.1f %s", T, N, p, names[w]);
    check_ring(what, ring_g[w], ser_g[w], g, n);
  }
  ts_ws_free(&ws);
  free(q); free(k); free(v); free(r); free(keep); free(a.q); free(a.k); free(a.v); free(a.r);
  free(oref); free(out); free(lse); free(dq); free(dk); free(dv); free(dsum); free(rout);
  free(rlse); free(ob); free(lb); free(rdq); free(rdk); free(rdv); free(pq); free(pk); free(pv);
  free(g);
}

static void test_ring_attention(void **state) {
  run_ring(16, 4, 2, 0.0f);
  run_ring(16, 4, 4, 0.0f);
  run_ring(16, 2, 4, 0.2f);
}

static void test_attention(void **state) {
  const attn_case cases[] = {
      {1, 16, 2, 8, 4, 0.0f},  // 4 tiles
      {1, 16, 2, 8, 4, 0.2f},  // 4 tiles, dropout
      {2, 8, 2, 16, 4, 0.0f},  // 2 sequences, 2 tiles, dh 16
      {2, 8, 2, 16, 4, 0.3f},
      {1, 8, 2, 8, 8, 0.0f},   // one tile: only the diagonal
      {1, 12, 2, 8, 4, 0.0f},  // 3 query tiles: the dK/dV tree is padded
      {2, 16, 2, 8, 2, 0.1f},  // 8 tiles of 2
      {1, 16, 2, 16, 4, 0.5f}, // 4 tiles, dh 16, heavy dropout
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_attention(&cases[i]);
}

// ---- cross-entropy -------------------------------------------------------------------------

typedef struct {
  int ntok, V;
  const int *y;
  double *z, *r;
} ce_ref;

static void ce_ref_forward(const ce_ref *a, double *loss) {
  for (int t = 0; t < a->ntok; t++) {
    const double *z = a->z + (size_t)t * a->V;
    double mx = z[0], s = 0.0;
    for (int i = 1; i < a->V; i++) mx = fmax(mx, z[i]);
    for (int i = 0; i < a->V; i++) s += exp(z[i] - mx);
    loss[t] = mx + log(s) - z[a->y[t]];
  }
}

static double ce_objective(const void *vctx) {
  const ce_ref *a = vctx;
  double *loss = dalloc(a->ntok);
  ce_ref_forward(a, loss);
  double L = dot_r(a->r, loss, a->ntok);
  free(loss);
  return L;
}

static void test_crossentropy(void **state) {
  const int ntok = 8, V = 16;
  const size_t n = (size_t)ntok * V;
  float *z = falloc(n), *r = falloc(ntok), *loss = falloc(ntok), *dz = falloc(n);
  int y[8];
  fill_normal(z, n, 50, 2.0);
  for (int i = 0; i < V; i++) z[3 * V + i] += 100.0f; // exp would overflow without the max
  for (int i = 0; i < V; i++) z[5 * V + i] *= 10.0f;  // nearly one-hot softmax
  fill_normal(r, ntok, 51, 1.0);
  uint64_t s = 52;
  for (int t = 0; t < ntok; t++) y[t] = (int)(mix64(&s) % V);
  ce_ref a = {ntok, V, y, to_double(z, n), to_double(r, ntok)};
  double *lref = dalloc(ntok), *g = dalloc(n);
  ce_ref_forward(&a, lref);
  crossentropy_forward(loss, z, y, ntok, V);
  check_close("crossentropy loss", loss, lref, ntok, 1e-5, 1e-2);
  // dout = r per token: one call per row with scale r[t]
  for (int t = 0; t < ntok; t++)
    crossentropy_backward(dz + (size_t)t * V, z + (size_t)t * V, y + t, r[t], 1, V);
  fd_grad(g, a.z, n, ce_objective, &a);
  check_close("crossentropy dlogits", dz, g, n, 1e-4, 1e-3);

  // The model's call: one scale for all rows, in place over the logits. Row-wise,
  // so it equals the per-row calls bit for bit; in place equals out of place.
  const float sc = 1.0f / ntok;
  float *whole = falloc(n), *rows = falloc(n), *inplace = falloc(n);
  crossentropy_backward(whole, z, y, sc, ntok, V);
  for (int t = 0; t < ntok; t++)
    crossentropy_backward(rows + (size_t)t * V, z + (size_t)t * V, y + t, sc, 1, V);
  memcpy(inplace, z, n * sizeof(float));
  crossentropy_backward(inplace, inplace, y, sc, ntok, V);
  assert_memory_equal(whole, rows, n * sizeof(float));
  assert_memory_equal(whole, inplace, n * sizeof(float));
  free(z); free(r); free(loss); free(dz); free(a.z); free(a.r); free(lref); free(g);
  free(whole); free(rows); free(inplace);
}

// token_tree_sum: leaf partial = the leaf's rows left to right, then the
// canonical tree over leaves; checked bit for bit, also past 4096 leaves
// (where it works in chunks), and against the double sum.
static void test_token_tree_sum(void **state) {
  const int leaf = 4;
  const size_t cases[] = {4, 12, 64, 4 * 4096, 4 * 5000 + 4 * 3};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    size_t ntok = cases[c], nl = ntok / leaf;
    float *v = falloc(ntok), *part = falloc(nl);
    fill_normal(v, ntok, 60 + c, 1.0);
    for (size_t i = 0; i < ntok; i++) v[i] = fabsf(v[i]) * (i % 7 == 0 ? 1000.0f : 1.0f);
    for (size_t l = 0; l < nl; l++) {
      float s = v[l * leaf];
      for (int rr = 1; rr < leaf; rr++) s += v[l * leaf + rr];
      part[l] = s;
    }
    size_t size = 1;
    while (size < nl) size *= 2;
    float want = 0.0f;
    ref_tree(&want, part, NULL, nl, 1, 0, size);
    float got = token_tree_sum(v, (int64_t)ntok, leaf);
    assert_memory_equal(&got, &want, sizeof got);
    double d = 0.0;
    for (size_t i = 0; i < ntok; i++) d += v[i];
    assert_true(fabs(got - d) <= 1e-5 * d);
    free(v);
    free(part);
  }
}

// ---- encoder -----------------------------------------------------------------------------

typedef struct {
  int B, T, C, V;
  const int *tok;
  double *wte, *wpe, *r;
} enc_ref;

static double enc_objective(const void *vctx) {
  const enc_ref *a = vctx;
  double L = 0.0;
  for (int t = 0; t < a->B * a->T; t++)
    for (int i = 0; i < a->C; i++)
      L += a->r[(size_t)t * a->C + i] *
           (a->wte[(size_t)a->tok[t] * a->C + i] + a->wpe[(size_t)(t % a->T) * a->C + i]);
  return L;
}

typedef struct {
  const float *dout;
  const int *tok;
  int leaf, C, V;
} wte_ctx;

// dwte leaf partial, as the model forms it when the head is untied.
static void wte_leaf(const void *vctx, int64_t li, float *out) {
  const wte_ctx *c = vctx;
  memset(out, 0, (size_t)c->V * c->C * sizeof(float));
  encoder_wte_leaf_scatter(out, c->dout, c->tok, li, c->leaf, c->C);
}

static void run_encoder(int B) {
  const int T = 8, C = 8, V = 6, leaf = 4;
  const size_t n = (size_t)B * T * C;
  float *wte = falloc((size_t)V * C), *wpe = falloc((size_t)T * C), *r = falloc(n), *out = falloc(n);
  int tok[32];
  fill_normal(wte, (size_t)V * C, 70, 1.0);
  fill_normal(wpe, (size_t)T * C, 71, 1.0);
  fill_normal(r, n, 72, 1.0);
  uint64_t s = 73;
  for (int t = 0; t < B * T; t++) tok[t] = (int)(mix64(&s) % (V - 1)); // token V-1 unused
  tok[1] = tok[2] = tok[3] = 0; // repeats within a leaf
  encoder_forward(out, tok, wte, wpe, B, T, C);
  for (int t = 0; t < B * T; t++) // one float addition per element
    for (int i = 0; i < C; i++) {
      float want = wte[(size_t)tok[t] * C + i] + wpe[(size_t)(t % T) * C + i];
      assert_memory_equal(&out[(size_t)t * C + i], &want, sizeof want);
    }

  ts_ws ws;
  assert_int_equal(ts_ws_init(&ws, 4, leaf, 4096, 8), 0);
  float *dwte = falloc((size_t)V * C), *dwpe = falloc((size_t)T * C);
  assert_int_equal(encoder_backward_wpe(&ws, dwpe, r, B, T, C), 0);
  wte_ctx wc = {r, tok, leaf, C, V};
  assert_int_equal(ts_leaf_tree_sum(&ws, dwte, (size_t)V * C, B * T / leaf, wte_leaf, &wc), 0);
  enc_ref a = {B, T, C, V, tok, to_double(wte, (size_t)V * C), to_double(wpe, (size_t)T * C),
               to_double(r, n)};
  double *gte = dalloc((size_t)V * C), *gpe = dalloc((size_t)T * C);
  fd_grad(gte, a.wte, (size_t)V * C, enc_objective, &a);
  fd_grad(gpe, a.wpe, (size_t)T * C, enc_objective, &a);
  check_close("encoder dwte", dwte, gte, (size_t)V * C, 1e-5, 1e-3);
  check_close("encoder dwpe", dwpe, gpe, (size_t)T * C, 1e-5, 1e-3);
  for (int i = 0; i < C; i++) assert_true(dwte[(size_t)(V - 1) * C + i] == 0.0f); // unused token

  // dwpe is the canonical tree over batch for each position, bit for bit:
  // B = 4 → (r0 + r1) + (r2 + r3);  B = 3 → (r0 + r1) + r2.
  for (int p = 0; p < T; p++)
    for (int i = 0; i < C; i++) {
      const float *rr = r + (size_t)p * C + i;
      const size_t st = (size_t)T * C;
      float want = B == 4 ? (rr[0] + rr[st]) + (rr[2 * st] + rr[3 * st])
                          : B == 3 ? (rr[0] + rr[st]) + rr[2 * st] : rr[0];
      assert_memory_equal(&dwpe[(size_t)p * C + i], &want, sizeof want);
    }
  ts_ws_free(&ws);
  free(wte); free(wpe); free(r); free(out); free(dwte); free(dwpe);
  free(a.wte); free(a.wpe); free(a.r); free(gte); free(gpe);
}

static void test_encoder(void **state) {
  run_encoder(1);
  run_encoder(3);
  run_encoder(4);
}

// ---- weight gradients: the tree inside the product ------------------------------------
// linear_backward_weights and encoder_backward_wte sum their leaves inside the
// product (ts_mm_leaves), the tied head's token rows apart; the result must be
// the bits of the tree over whole partials (ts_leaf_tree_sum of each leaf's
// (OC, C) partial, as the backward made it before), whatever the number of
// leaves (powers of two or not), the shapes and the threads.

typedef struct {
  const float *dout, *inp, *dlogits;
  const int *tok;
  int leaf, C, OC, bias;
} whole_leaf_ctx;

static void whole_weight_leaf(const void *vctx, int64_t li, float *out) {
  const whole_leaf_ctx *c = vctx;
  linear_weight_leaf(out, c->dout, c->inp, li, c->leaf, c->C, c->OC);
  if (c->bias)
    column_sum(out + (size_t)c->OC * c->C, c->dout + li * c->leaf * c->OC, c->leaf, c->OC, 0);
}

static void whole_wte_leaf(const void *vctx, int64_t li, float *out) {
  const whole_leaf_ctx *c = vctx;
  if (c->dlogits)
    linear_weight_leaf(out, c->dlogits, c->inp, li, c->leaf, c->C, c->OC);
  else
    memset(out, 0, (size_t)c->OC * c->C * sizeof(float));
  encoder_wte_leaf_scatter(out, c->dout, c->tok, li, c->leaf, c->C);
}

static void test_weight_grads(void **state) {
  static const int shapes[][4] = {// nleaves, leaf, C, OC
                                  {1, 4, 7, 5},    {3, 2, 70, 37},  {5, 4, 1, 1000}, {8, 4, 33, 13},
                                  {13, 2, 64, 101}, {6, 8, 70, 1000}, {0, 4, 9, 11}};
  const int max_threads = omp_get_max_threads();
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
    for (int threads = 1; threads <= 3; threads++) {
      const int nl = shapes[si][0], leaf = shapes[si][1], C = shapes[si][2], OC = shapes[si][3];
      const int64_t ntok = (int64_t)nl * leaf;
      const size_t nw = (size_t)OC * C, n = nw + (size_t)OC;
      float *dy = falloc((size_t)(ntok ? ntok : 1) * OC), *x = falloc((size_t)(ntok ? ntok : 1) * C);
      float *dout = falloc((size_t)(ntok ? ntok : 1) * C);
      fill_normal(dy, (size_t)ntok * OC, 80 + si, 1.0);
      fill_normal(x, (size_t)ntok * C, 90 + si, 1.0);
      fill_normal(dout, (size_t)ntok * C, 95 + si, 1.0);
      int *tok = calloc((size_t)(ntok ? ntok : 1), sizeof(int));
      uint64_t sd = 100 + si;
      for (int64_t t = 0; t < ntok; t++) tok[t] = (int)(mix64(&sd) % (uint64_t)OC);
      if (ntok > 2) tok[1] = tok[2] = tok[0]; // repeats within a leaf
      omp_set_num_threads(threads);
      ts_ws ws;
      assert_int_equal(ts_ws_init(&ws, leaf, leaf, n, 8), 0);
      float *want = falloc(n), *dW = falloc(nw), *db = falloc(OC);
      for (int bias = 0; bias <= 1; bias++) {
        whole_leaf_ctx c = {dy, x, NULL, tok, leaf, C, OC, bias};
        assert_int_equal(ts_leaf_tree_sum(&ws, want, bias ? n : nw, nl, whole_weight_leaf, &c), 0);
        assert_int_equal(linear_backward_weights(&ws, dW, bias ? db : NULL, dy, x, ntok, C, OC), 0);
        assert_memory_equal(dW, want, nw * sizeof(float));
        if (bias) assert_memory_equal(db, want + nw, (size_t)OC * sizeof(float));
      }
      for (int head = 0; head <= 1; head++) { // the tied head's gradient, or the scatter alone
        whole_leaf_ctx c = {dout, x, head ? dy : NULL, tok, leaf, C, OC, 0};
        assert_int_equal(ts_leaf_tree_sum(&ws, want, nw, nl, whole_wte_leaf, &c), 0);
        assert_int_equal(
            encoder_backward_wte(&ws, dW, dout, tok, head ? dy : NULL, x, ntok, OC, C), 0);
        assert_memory_equal(dW, want, nw * sizeof(float));
      }
      ts_ws_free(&ws);
      free(dy); free(x); free(dout); free(tok); free(want); free(dW); free(db);
    }
  omp_set_num_threads(max_threads);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_layernorm),
      cmocka_unit_test(test_linear),
      cmocka_unit_test(test_linear_no_bias),
      cmocka_unit_test(test_gelu),
      cmocka_unit_test(test_fastexp),
      cmocka_unit_test(test_dropout),
      cmocka_unit_test(test_tile_mm),
      cmocka_unit_test(test_mm),
      cmocka_unit_test(test_mm_cuts),
      cmocka_unit_test(test_mm_leaves),
      cmocka_unit_test(test_tile_pack),
      cmocka_unit_test(test_attention),
      cmocka_unit_test(test_ring_attention),
      cmocka_unit_test(test_crossentropy),
      cmocka_unit_test(test_token_tree_sum),
      cmocka_unit_test(test_encoder),
      cmocka_unit_test(test_weight_grads),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
