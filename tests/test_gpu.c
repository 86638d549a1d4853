// The CUDA backend against the CPU reference, op by op and on the whole
// model (ggml's backend tests): the same inputs go through both tables of
// backend.h, and the outputs are compared; every operation of
// src/backend/backend_ops.def has its test (op_test, at the end). Two programs:
//  - tests/test_gpu (--enable-cuda): the kernels on the GPU; exits 77
//    (skipped) with the reason when the machine has no usable GPU;
//  - tests/test_gpu_emu (every build): the same sources of src/gpu/ compiled
//    by g++ against tests/gpu_emu (TS_CUDA_EMULATE), which runs each CUDA
//    thread as a fiber with real barriers and warp shuffles. It checks the
//    kernels' indexing, synchronisation and arithmetic wherever make check
//    runs; what only a GPU shows (timing, the real cuBLAS, the device's expf,
//    FMA contraction) is left to tests/test_gpu.
//
// Two tiers (docs/GPU.md), and every test runs in both:
//  - the exact tier (fp32 without --fast): every kernel computes the CPU's
//    canonical definition (docs/EXACTNESS.md), so check() demands the CPU's
//    bits, element for element (a NaN matches any NaN: its payload is not
//    part of the definition);
//  - the fast tier (--fast, and bf16 always): cuBLAS's products, compared
//    within the bounds each check states, as the normalised maximum error
//    max|gpu − cpu| / max|cpu|:
//      fp32  element-wise 1e-6 (one or two roundings apart), sums over rows
//            or features 1e-5 (a few hundred fp32 terms: ~1e-5 worst case),
//            the whole model's gradients 1e-4 and its loss 1e-5 relative;
//      bf16  products 2e-2: each operand is rounded to 8 bits (2^-9
//            relative), so a K-term product's error is ~2^-9·sqrt(K) of its
//            scale at worst, ~1e-2 for these sizes.
// A second GPU run of every op must give the same bits (no atomics). The
// emulator runs that second run with its blocks and threads in reverse order,
// so there it also checks that no result depends on the order they run in.
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/kernels.h"
#include "train/optim.h"
#include "exact/rng.h"
#include "tessera.h"

static const ts_backend *gpu;
static int fast_tier; // the group running: 0 the exact tier, 1 the fast one (--fast)
static int exact_now; // whether the GPU backend last set up is in the exact tier
static ts_ws ws; // the CPU kernels' scratch (the GPU ignores it)

#ifdef TS_CUDA_EMULATE
// The emulated backend is linked into this test alone: libtessera.a of a
// build without CUDA refuses --device cuda, so the table comes from
// backend_cuda.cu's own setup.
int ts_backend_cuda_init(int local_rank, int local_size, ts_precision precision, int fast,
                         const ts_backend **out);
int ts_cuda_emu_schedule(int reversed);
static int get_cuda(ts_precision p, const ts_backend **out) {
  exact_now = p == TS_PRECISION_FP32 && !fast_tier;
  return ts_backend_cuda_init(0, 1, p, fast_tier, out);
}
// Run r of an op: 0 the CPU, 1 the GPU, 2 the GPU again (reversed order).
static void gpu_run(int r) { ts_cuda_emu_schedule(r == 2); }
#else
static int get_cuda(ts_precision p, const ts_backend **out) {
  exact_now = p == TS_PRECISION_FP32 && !fast_tier;
  return ts_backend_get("cuda", p, fast_tier, out);
}
static void gpu_run(int r) { (void)r; }
#endif

static void fill(float *x, size_t n, uint64_t seed, float scale) {
  for (size_t i = 0; i < n; i++) x[i] = scale * ts_rng_normal(seed, 99, 0, i);
}

// A buffer of n floats from backend b holding a copy of src (or zeros).
static float *take(const ts_backend *b, const float *src, size_t n) {
  float *p = b->alloc((n ? n : 1) * sizeof(float));
  assert_non_null(p);
  if (src) memcpy(p, src, n * sizeof(float));
  else memset(p, 0, n * sizeof(float));
  return p;
}

// NaN where the other side has none (or the other way round), or an infinity
// that differs, is an infinite error: fmax alone would skip a NaN, and a
// kernel that wrote NaN everywhere would pass. Both NaN is agreement (rows
// that see no key, where the CPU gives 0/0 too).
static double nmax_error(const float *ref, const float *got, size_t n) {
  double scale = 0.0, err = 0.0;
  for (size_t i = 0; i < n; i++) {
    if (isnan(ref[i]) || isnan(got[i]) || isinf(ref[i]) || isinf(got[i])) {
      if (isnan(ref[i]) && isnan(got[i])) continue;
      if (ref[i] != got[i]) return INFINITY;
      continue;
    }
    scale = fmax(scale, fabs((double)ref[i]));
    err = fmax(err, fabs((double)got[i] - (double)ref[i]));
  }
  return scale > 0 ? err / scale : err;
}

// The first element whose bits differ (any NaN matching any NaN), or -1.
static int64_t first_difference(const float *ref, const float *got, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (isnan(ref[i]) && isnan(got[i])) continue;
    if (memcmp(&ref[i], &got[i], sizeof(float)) != 0) return (int64_t)i;
  }
  return -1;
}

// The GPU's `got` against the CPU's `ref`: the same bits in the exact tier,
// within `bound` (the normalised maximum error) in the fast one.
static void check(const char *what, const float *ref, const float *got, size_t n, double bound) {
  if (exact_now) {
    int64_t i = first_difference(ref, got, n);
    if (getenv("TESSERA_TEST_VERBOSE")) printf("  %-28s %s\n", what, i < 0 ? "same bits" : "DIFFERS");
    if (i >= 0)
      fail_msg("%s: element %lld of %zu differs from the CPU's: %a, not %a (exact tier)", what,
               (long long)i, n, (double)got[i], (double)ref[i]);
    return;
  }
  double e = nmax_error(ref, got, n);
  if (getenv("TESSERA_TEST_VERBOSE")) printf("  %-28s %.3g (bound %.0e)\n", what, e, bound);
  if (!(e <= bound)) fail_msg("%s: normalised error %.3g over the bound %.0e", what, e, bound);
}

static void check_same_bits(const char *what, const float *a, const float *b, size_t n) {
  if (memcmp(a, b, n * sizeof(float)) != 0) fail_msg("%s: two GPU runs differ", what);
}

// ---- op by op -----------------------------------------------------------------------------
enum { B = 2, T = 128, C = 96, OC = 160, H = 4, HKV = 2, DH = 32, V = 256 };
#define NTOK ((int64_t)B * T)

static void test_linear(void **state) {
  (void)state;
  float x[NTOK * C], w[OC * C], bias[OC], dy[NTOK * OC];
  fill(x, NTOK * C, 1, 1.0f);
  fill(w, OC * C, 2, 0.1f);
  fill(bias, OC, 3, 0.1f);
  fill(dy, NTOK * OC, 4, 1.0f);
  const ts_backend *be[2] = {&ts_backend_cpu, gpu};
  float *y[3], *yh[3], *dx[3], *dw[3], *db[3], *dwl[3];
  for (int r = 0; r < 3; r++) { // CPU, GPU, GPU again
    gpu_run(r);
    const ts_backend *b = be[r ? 1 : 0];
    float *X = take(b, x, NTOK * C), *W = take(b, w, OC * C), *Bb = take(b, bias, OC);
    float *DY = take(b, dy, NTOK * OC);
    y[r] = take(b, NULL, NTOK * OC);
    yh[r] = take(b, NULL, NTOK * OC);
    dx[r] = take(b, NULL, NTOK * C);
    dw[r] = take(b, NULL, OC * C);
    db[r] = take(b, NULL, OC);
    dwl[r] = take(b, NULL, OC * C);
    b->linear_forward(y[r], X, W, Bb, NTOK, C, OC, 64);
    b->linear_forward_heads(yh[r], X, W, Bb, NTOK, C, OC, DH, 64); // OC / DH = 5 heads
    b->linear_backward_input(dx[r], DY, W, NTOK, C, OC, 64, 0);
    assert_int_equal(b->linear_backward_weights(&ws, dw[r], db[r], DY, X, NTOK, C, OC), 0);
    b->linear_weight_leaf(dwl[r], DY, X, 2, 64, C, OC); // the third leaf of 64 rows
    b->free(X); b->free(W); b->free(Bb); b->free(DY);
  }
  check("linear forward", y[0], y[1], NTOK * OC, 1e-5);
  check("linear forward heads", yh[0], yh[1], NTOK * OC, 1e-5);
  check("linear dinp", dx[0], dx[1], NTOK * C, 1e-5);
  check("linear dW", dw[0], dw[1], OC * C, 1e-5);
  check("linear db", db[0], db[1], OC, 1e-5);
  check("linear weight leaf", dwl[0], dwl[1], OC * C, 1e-5);
  check_same_bits("linear weight leaf", dwl[1], dwl[2], OC * C);
  check_same_bits("linear forward", y[1], y[2], NTOK * OC);
  check_same_bits("linear forward heads", yh[1], yh[2], NTOK * OC);
  check_same_bits("linear dW", dw[1], dw[2], OC * C);
  check_same_bits("linear db", db[1], db[2], OC);
  for (int r = 0; r < 3; r++) {
    const ts_backend *b = be[r ? 1 : 0];
    b->free(y[r]); b->free(yh[r]); b->free(dx[r]); b->free(dw[r]); b->free(db[r]);
    b->free(dwl[r]);
  }
  // The weight gradients' trees over a count of leaves that is no power of
  // two (25 leaves of 8 rows: leaves shorter than the GPU's slices of k, and
  // subtrees left over at the end), over the first 200 rows.
  ts_ws ws8;
  assert_int_equal(ts_ws_init(&ws8, 8, 8, OC, DH), 0);
  for (int r = 0; r < 3; r++) {
    gpu_run(r);
    const ts_backend *b = be[r ? 1 : 0];
    float *X = take(b, x, NTOK * C), *DY = take(b, dy, NTOK * OC);
    dw[r] = take(b, NULL, OC * C);
    db[r] = take(b, NULL, OC);
    assert_int_equal(b->linear_backward_weights(&ws8, dw[r], db[r], DY, X, 200, C, OC), 0);
    b->free(X); b->free(DY);
  }
  check("linear dW (25 leaves of 8)", dw[0], dw[1], OC * C, 1e-5);
  check("linear db (25 leaves of 8)", db[0], db[1], OC, 1e-5);
  check_same_bits("linear dW (25 leaves of 8)", dw[1], dw[2], OC * C);
  check_same_bits("linear db (25 leaves of 8)", db[1], db[2], OC);
  for (int r = 0; r < 3; r++) {
    const ts_backend *b = be[r ? 1 : 0];
    b->free(dw[r]); b->free(db[r]);
  }
  ts_ws_free(&ws8);
}

// A head subset into a strided buffer (the head-parallel layers' call).
static void test_linear_head_list(void **state) {
  (void)state;
  const int heads[2] = {3, 1}, ld = 3 * DH;
  float x[NTOK * C], w[H * DH * C], bias[H * DH];
  fill(x, NTOK * C, 5, 1.0f);
  fill(w, H * DH * C, 6, 0.1f);
  fill(bias, H * DH, 7, 0.1f);
  float *y[2];
  const ts_backend *be[2] = {&ts_backend_cpu, gpu};
  for (int r = 0; r < 2; r++) {
    gpu_run(r);
    const ts_backend *b = be[r];
    float *X = take(b, x, NTOK * C), *W = take(b, w, H * DH * C), *Bb = take(b, bias, H * DH);
    y[r] = take(b, NULL, NTOK * ld);
    b->linear_forward_head_list(y[r], ld, X, W, Bb, heads, 2, NTOK, C, DH, 64);
    b->free(X); b->free(W); b->free(Bb);
  }
  check("linear head list", y[0], y[1], NTOK * ld, 1e-5);
  be[0]->free(y[0]);
  be[1]->free(y[1]);
}

// The general product in its four transpositions, with rows that are not a
// whole number of the CPU's blocks of 64, slices of wider matrices (leading
// dimensions past the columns used) and beta 1 onto what out holds (sums over
// K = 96 features: 1e-5), and again with K = 37, no whole number of the GPU's
// slices of k.
static void test_matmul(void **state) {
  (void)state;
  enum { M = 100, N = 72, LD = 112 };
  float a[LD * LD], b_[LD * LD], o0[M * LD];
  fill(a, LD * LD, 120, 1.0f);
  fill(b_, LD * LD, 121, 0.1f);
  fill(o0, M * LD, 122, 1.0f);
  const ts_backend *be[2] = {&ts_backend_cpu, gpu};
  for (int t = 0; t < 16; t++) {
    const int ta = t & 1, tb = (t >> 1) & 1, K = t & 8 ? 37 : 96;
    const float beta = t & 4 ? 1.0f : 0.0f;
    float *out[3];
    for (int r = 0; r < 3; r++) {
      gpu_run(r);
      const ts_backend *b = be[r ? 1 : 0];
      float *A = take(b, a, LD * LD), *Bm = take(b, b_, LD * LD);
      out[r] = take(b, o0, M * LD);
      b->matmul(ta, tb, M, N, K, A + 3, LD, Bm + 5, LD, beta, out[r] + 2, LD);
      b->free(A);
      b->free(Bm);
    }
    char what[64];
    snprintf(what, sizeof what, "matmul %c%c beta %g K %d", ta ? 'T' : 'N', tb ? 'T' : 'N',
             (double)beta, K);
    check(what, out[0], out[1], M * LD, 1e-5);
    check_same_bits(what, out[1], out[2], M * LD);
    for (int r = 0; r < 3; r++) be[r ? 1 : 0]->free(out[r]);
  }
}

// Column sums over more rows than one of the GPU's chunks (256), onto zeros
// and onto what out holds (sums over rows: 1e-5).
static void test_column_sum(void **state) {
  (void)state;
  enum { R = 300, W = 70 };
  float x[R * W], o0[W];
  fill(x, R * W, 123, 1.0f);
  fill(o0, W, 124, 1.0f);
  const ts_backend *be[2] = {&ts_backend_cpu, gpu};
  for (int acc = 0; acc < 2; acc++) {
    float *out[3];
    for (int r = 0; r < 3; r++) {
      gpu_run(r);
      const ts_backend *b = be[r ? 1 : 0];
      float *X = take(b, x, R * W);
      out[r] = take(b, o0, W);
      b->column_sum(out[r], X, R, W, acc);
      b->free(X);
    }
    check(acc ? "column_sum (+=)" : "column_sum", out[0], out[1], W, 1e-5);
    check_same_bits("column_sum", out[1], out[2], W);
    for (int r = 0; r < 3; r++) be[r ? 1 : 0]->free(out[r]);
  }
}

static void test_norms(void **state) {
  (void)state;
  float x[NTOK * C], w[C], bias[C], dy[NTOK * C];
  fill(x, NTOK * C, 8, 2.0f);
  fill(w, C, 9, 1.0f);
  fill(bias, C, 10, 0.5f);
  fill(dy, NTOK * C, 11, 1.0f);
  const ts_backend *be[2] = {&ts_backend_cpu, gpu};
  for (int rms = 0; rms < 2; rms++) {
    float *out[3], *dx[3], *dw[3], *db[3];
    for (int r = 0; r < 3; r++) {
      gpu_run(r);
      const ts_backend *b = be[r ? 1 : 0];
      float *X = take(b, x, NTOK * C), *W = take(b, w, C), *Bb = take(b, bias, C);
      float *DY = take(b, dy, NTOK * C), *mean = take(b, NULL, NTOK), *rstd = take(b, NULL, NTOK);
      out[r] = take(b, NULL, NTOK * C);
      dx[r] = take(b, NULL, NTOK * C);
      dw[r] = take(b, NULL, C);
      db[r] = take(b, NULL, C);
      if (rms) {
        b->rmsnorm_forward(out[r], rstd, X, W, NTOK, C);
        assert_int_equal(b->rmsnorm_backward(&ws, dx[r], dw[r], DY, X, W, rstd, NTOK, C), 0);
      } else {
        b->layernorm_forward(out[r], mean, rstd, X, W, Bb, NTOK, C);
        assert_int_equal(
            b->layernorm_backward(&ws, dx[r], dw[r], db[r], DY, X, W, mean, rstd, NTOK, C), 0);
      }
      b->free(X); b->free(W); b->free(Bb); b->free(DY); b->free(mean); b->free(rstd);
    }
    check(rms ? "rmsnorm forward" : "layernorm forward", out[0], out[1], NTOK * C, 1e-5);
    check(rms ? "rmsnorm dinp" : "layernorm dinp", dx[0], dx[1], NTOK * C, 1e-5);
    check(rms ? "rmsnorm dw" : "layernorm dw", dw[0], dw[1], C, 1e-5);
    if (!rms) check("layernorm db", db[0], db[1], C, 1e-5);
    check_same_bits("norm dw", dw[1], dw[2], C);
    for (int r = 0; r < 3; r++) {
      const ts_backend *b = be[r ? 1 : 0];
      b->free(out[r]); b->free(dx[r]); b->free(dw[r]); b->free(db[r]);
    }
  }
}

static void test_elementwise(void **state) {
  (void)state;
  enum { N = 4096 };
  float g[N], u[N], dh[N], cs[T * DH];
  fill(g, N, 12, 2.0f);
  fill(u, N, 13, 1.0f);
  fill(dh, N, 14, 1.0f);
  rope_table(cs, T, DH, 10000.0);
  const ts_backend *be[2] = {&ts_backend_cpu, gpu};
  float *o[2][7];
  for (int r = 0; r < 2; r++) {
    gpu_run(r);
    const ts_backend *b = be[r];
    float *G = take(b, g, N), *U = take(b, u, N), *D = take(b, dh, N), *CS = take(b, cs, T * DH);
    for (int k = 0; k < 7; k++) o[r][k] = take(b, NULL, N);
    b->gelu_forward(o[r][0], G, N);
    b->gelu_backward(o[r][1], G, D, N);
    b->swiglu_forward(o[r][2], G, U, N);
    b->swiglu_backward(o[r][3], o[r][4], G, U, D, N);
    memcpy(o[r][5], g, sizeof g); // rows of 2 heads × DH, positions from 3
    b->rope_forward(o[r][5], N / (2 * DH), T, 3, 2, DH, 2 * DH, CS);
    // the first of every row's two heads alone (the other one stays as it
    // is), sequences of 16 rows from position 5
    memcpy(o[r][6], dh, sizeof dh);
    b->rope_backward(o[r][6], N / (2 * DH), 16, 5, 1, DH, 2 * DH, CS);
    b->dropout_apply(o[r][0], N, 0.25f, 17, TS_RNG_DROPOUT_MLP, 5, 1000);
    b->free(G); b->free(U); b->free(D); b->free(CS);
  }
  const char *names[7] = {"gelu+dropout", "gelu backward", "swiglu", "swiglu dgate", "swiglu dup",
                          "rope",         "rope backward"};
  for (int k = 0; k < 7; k++) check(names[k], o[0][k], o[1][k], N, 1e-6);
  for (int r = 0; r < 2; r++)
    for (int k = 0; k < 7; k++) be[r]->free(o[r][k]);
}

// The residual add, with dst aliasing either operand as the model calls it
// (element-wise: 1e-6), and the copy, which must give the bytes it was given.
static void test_add_copy(void **state) {
  (void)state;
  enum { N = 5000 };
  float a[N], b_[N];
  fill(a, N, 15, 1.0f);
  fill(b_, N, 16, 1.0f);
  const ts_backend *be[2] = {&ts_backend_cpu, gpu};
  float *o[2][3];
  for (int r = 0; r < 2; r++) {
    gpu_run(r);
    const ts_backend *b = be[r];
    float *A = take(b, a, N), *Bb = take(b, b_, N);
    o[r][0] = take(b, a, N);
    o[r][1] = take(b, b_, N);
    o[r][2] = take(b, NULL, N);
    b->add(o[r][0], o[r][0], Bb, N);
    b->add(o[r][1], A, o[r][1], N);
    b->copy(o[r][2], o[r][0], N * sizeof(float));
    b->free(A); b->free(Bb);
  }
  check("add (dst = a)", o[0][0], o[1][0], N, 1e-6);
  check("add (dst = b)", o[0][1], o[1][1], N, 1e-6);
  if (memcmp(o[1][2], o[1][0], N * sizeof(float)) != 0) fail_msg("copy: not the bytes copied");
  for (int r = 0; r < 2; r++)
    for (int k = 0; k < 3; k++) be[r]->free(o[r][k]);
}

// The strided add the strategies accumulate partials with: rows of a wider
// buffer, a bias row added to every row (ldb 0), and dst aliasing a as they
// call it (element-wise: 1e-6).
static void test_add_rows(void **state) {
  (void)state;
  enum { R = 70, W = 48, LD = 64 };
  float a[R * LD], b_[R * LD];
  fill(a, R * LD, 24, 1.0f);
  fill(b_, R * LD, 25, 1.0f);
  const ts_backend *be[2] = {&ts_backend_cpu, gpu};
  float *o[2][2];
  for (int r = 0; r < 2; r++) {
    gpu_run(r);
    const ts_backend *b = be[r];
    float *Bb = take(b, b_, R * LD);
    o[r][0] = take(b, a, R * LD);
    o[r][1] = take(b, NULL, R * W);
    b->add_rows(o[r][0] + 8, LD, o[r][0] + 8, LD, Bb + 4, LD, R, W);
    b->add_rows(o[r][1], W, o[r][0], LD, Bb, 0, R, W);
    b->free(Bb);
  }
  check("add_rows (strided, dst = a)", o[0][0], o[1][0], R * LD, 1e-6);
  check("add_rows (one row of b)", o[0][1], o[1][1], R * W, 1e-6);
  for (int r = 0; r < 2; r++)
    for (int k = 0; k < 2; k++) be[r]->free(o[r][k]);
}

// Ring attention's merge of a second block's output and log-sum-exp, rows
// ldo apart with padding, the second block ahead in some rows and behind in
// others (a few roundings of expf, log1pf and the blend: element-wise 1e-6).
static void test_ring_merge(void **state) {
  (void)state;
  enum { R = 100, LDO = H * DH + 8 };
  float out[R * LDO], ob[R * LDO], lse[H * R], lb[H * R];
  fill(out, R * LDO, 26, 1.0f);
  fill(ob, R * LDO, 27, 1.0f);
  fill(lse, H * R, 28, 2.0f);
  fill(lb, H * R, 29, 2.0f);
  const ts_backend *be[2] = {&ts_backend_cpu, gpu};
  float *o[3], *l[3];
  for (int r = 0; r < 3; r++) {
    gpu_run(r);
    const ts_backend *b = be[r ? 1 : 0];
    float *OB = take(b, ob, R * LDO), *LB = take(b, lb, H * R);
    o[r] = take(b, out, R * LDO);
    l[r] = take(b, lse, H * R);
    b->ring_merge(o[r], l[r], OB, LB, R, H, DH, LDO);
    b->free(OB); b->free(LB);
  }
  check("ring_merge out", o[0], o[1], R * LDO, 1e-6);
  check("ring_merge lse", l[0], l[1], H * R, 1e-6);
  check_same_bits("ring_merge out", o[1], o[2], R * LDO);
  check_same_bits("ring_merge lse", l[1], l[2], H * R);
  for (int r = 0; r < 3; r++) {
    const ts_backend *b = be[r ? 1 : 0];
    b->free(o[r]); b->free(l[r]);
  }
}

// The embeddings: a row gather and one add per element (1e-6), with the
// positional table and without (LLaMA), and the positional gradient, a sum
// over the batch's four sequences (sums over rows: 1e-5).
static void test_encoder(void **state) {
  (void)state;
  enum { BE = 4 };
  const size_t ntok = (size_t)BE * T;
  float *wte = malloc((size_t)V * C * 4), *wpe = malloc((size_t)T * C * 4);
  float *dout = malloc(ntok * C * 4);
  int *tok = malloc(ntok * sizeof(int));
  fill(wte, (size_t)V * C, 17, 1.0f);
  fill(wpe, (size_t)T * C, 18, 0.1f);
  fill(dout, ntok * C, 19, 1.0f);
  for (size_t i = 0; i < ntok; i++) tok[i] = (int)ts_rng_below(3, 4, 5, (uint64_t)i, V);
  const ts_backend *be[2] = {&ts_backend_cpu, gpu};
  float *out[3], *bare[3], *dwpe[3];
  for (int r = 0; r < 3; r++) {
    gpu_run(r);
    const ts_backend *b = be[r ? 1 : 0];
    float *E = take(b, wte, (size_t)V * C), *P = take(b, wpe, (size_t)T * C);
    float *D = take(b, dout, ntok * C);
    int *Tk = b->alloc(ntok * sizeof(int));
    assert_non_null(Tk);
    memcpy(Tk, tok, ntok * sizeof(int));
    out[r] = take(b, NULL, ntok * C);
    bare[r] = take(b, NULL, ntok * C);
    dwpe[r] = take(b, NULL, (size_t)T * C);
    b->encoder_forward(out[r], Tk, E, P, BE, T, C);
    b->encoder_forward(bare[r], Tk, E, NULL, BE, T, C);
    assert_int_equal(b->encoder_backward_wpe(&ws, dwpe[r], D, BE, T, C), 0);
    b->free(E); b->free(P); b->free(D); b->free(Tk);
  }
  check("encoder forward", out[0], out[1], ntok * C, 1e-6);
  check("encoder forward (no wpe)", bare[0], bare[1], ntok * C, 1e-6);
  check("encoder backward wpe", dwpe[0], dwpe[1], (size_t)T * C, 1e-5);
  check_same_bits("encoder backward wpe", dwpe[1], dwpe[2], (size_t)T * C);
  for (int r = 0; r < 3; r++) {
    const ts_backend *b = be[r ? 1 : 0];
    b->free(out[r]); b->free(bare[r]); b->free(dwpe[r]);
  }
  free(wte); free(wpe); free(dout); free(tok);
}

// Attention on the CPU and twice on the GPU for shape s: every field of
// ts_attn_shape the strategies use (GQA, dropout, a segment of queries, a
// block of keys, a head range of the model's, strided rows), with q and k
// scaled by amp. Buffers are sized as the kernels resolve the zero fields.
// Returns the largest of the normalised errors.
static double attention_shape(const char *name, ts_attn_shape s, float amp, const ts_backend *g,
                              double bound) {
  const int Tq = s.Tq ? s.Tq : s.T, Tk = s.Tk ? s.Tk : s.T, Hkv = s.Hkv ? s.Hkv : s.H;
  const int ldq = s.ldq ? s.ldq : s.H * s.dh, ldkv = s.ldkv ? s.ldkv : Hkv * s.dh;
  const int ldo = s.ldo ? s.ldo : ldq;
  const size_t nq = (size_t)s.B * Tq * ldq, nkv = (size_t)s.B * Tk * ldkv;
  const size_t no = (size_t)s.B * Tq * ldo, ns = (size_t)s.B * s.H * Tq;
  float *q = malloc(nq * 4), *k = malloc(nkv * 4), *v = malloc(nkv * 4), *dout = malloc(no * 4);
  fill(q, nq, 20, amp);
  fill(k, nkv, 21, amp);
  fill(v, nkv, 22, 1.0f);
  fill(dout, no, 23, 1.0f);
  ts_ws aws; // the CPU's attention scratch for this tile and head size
  assert_int_equal(ts_ws_init(&aws, s.tile, 64, 1, s.dh), 0);
  const ts_backend *be[2] = {&ts_backend_cpu, g};
  float *out[3], *lse[3], *dq[3], *dk[3], *dv[3];
  for (int r = 0; r < 3; r++) {
    gpu_run(r);
    const ts_backend *b = be[r ? 1 : 0];
    float *Q = take(b, q, nq), *K = take(b, k, nkv), *Vv = take(b, v, nkv);
    float *D = take(b, dout, no), *dsum = take(b, NULL, ns);
    out[r] = take(b, NULL, no);
    lse[r] = take(b, NULL, ns);
    dq[r] = take(b, NULL, nq);
    dk[r] = take(b, NULL, nkv);
    dv[r] = take(b, NULL, nkv);
    b->attention_forward(&aws, out[r], lse[r], Q, K, Vv, &s);
    assert_int_equal(
        b->attention_backward(&aws, dq[r], dk[r], dv[r], dsum, D, Q, K, Vv, out[r], lse[r], &s),
        0);
    b->free(Q); b->free(K); b->free(Vv); b->free(D); b->free(dsum);
  }
  char what[64];
  const char *parts[5] = {"out", "lse", "dq", "dk", "dv"};
  float **got[5] = {out, lse, dq, dk, dv};
  const size_t len[5] = {no, ns, nq, nkv, nkv};
  double worst = 0.0;
  for (int i = 0; i < 5; i++) {
    snprintf(what, sizeof what, "attention %s %s", name, parts[i]);
    check(what, got[i][0], got[i][1], len[i], bound);
    check_same_bits(what, got[i][1], got[i][2], len[i]);
    worst = fmax(worst, nmax_error(got[i][0], got[i][1], len[i]));
  }
  for (int r = 0; r < 3; r++) {
    const ts_backend *b = be[r ? 1 : 0];
    b->free(out[r]); b->free(lse[r]); b->free(dq[r]); b->free(dk[r]); b->free(dv[r]);
  }
  ts_ws_free(&aws);
  free(q); free(k); free(v); free(dout);
  return worst;
}

// The serial shape and a sequence-parallel one (a segment of queries against
// all keys), with GQA and dropout.
static void attention_case(const char *name, int Tq, int q0, float p, double bound) {
  ts_attn_shape s = {.B = B, .T = T, .H = H, .dh = DH, .tile = 16, .dropout = p, .seed = 3,
                     .step = 2, .Tq = Tq, .q0 = q0, .Tk = T, .Hkv = HKV};
  attention_shape(name, s, 1.0f, gpu, bound);
}

static void test_attention(void **state) {
  (void)state;
  attention_case("serial", T, 0, 0.0f, 1e-5);
  attention_case("segment", T / 2, T / 2, 0.0f, 1e-5);
  attention_case("dropout", T, 0, 0.1f, 1e-5);
}

// The kernels' other row splits (dh <= 64: two lanes per row, <= 128: four,
// with warp shuffles inside every dot product), rows past the last full block
// of 64, and the layouts of the parallel strategies.
static void test_attention_layouts(void **state) {
  (void)state;
  // two lanes per row, GQA, dropout keyed by a layer's index base
  ts_attn_shape s = {.B = 2, .T = 96, .H = 4, .dh = 64, .tile = 32, .dropout = 0.1f, .seed = 5,
                     .step = 7, .index_base = 12345, .Hkv = 2};
  attention_shape("dh64", s, 1.0f, gpu, 1e-5);
  // four lanes per row, dh not a multiple of 32, sharper scores
  s = (ts_attn_shape){.B = 1, .T = 80, .H = 2, .dh = 100, .tile = 16, .Hkv = 1};
  attention_shape("dh100", s, 2.0f, gpu, 1e-5);
  // ring attention's block of keys [k0, k0 + Tk) for a segment of queries, k
  // and v rows interleaved (2·Hkv·dh apart); the diagonal block, and a block
  // past some of the queries (they see no key: NaN rows on both sides)
  s = (ts_attn_shape){.B = 1, .T = 256, .H = 4, .dh = 32, .tile = 32, .dropout = 0.1f,
                      .seed = 8, .Tq = 64, .q0 = 128, .Tk = 64, .k0 = 128, .Hkv = 2,
                      .ldkv = 2 * 2 * 32};
  attention_shape("ring diagonal", s, 1.0f, gpu, 1e-5);
  s.k0 = 160;
  attention_shape("ring partial", s, 1.0f, gpu, 1e-5);
  // the tensor-split baseline: heads [2, 4) of 6, padded row strides
  s = (ts_attn_shape){.B = 2, .T = 64, .H = 2, .dh = 48, .tile = 16, .dropout = 0.25f,
                      .seed = 77, .step = 3, .index_base = 99, .h0 = 2, .Hg = 6,
                      .ldq = 6 * 48, .ldo = 2 * 48 + 8, .ldkv = 6 * 48};
  attention_shape("tensor split", s, 1.0f, gpu, 1e-5);
  // tiles over 64 (the exact tier keeps their score tiles in device scratch,
  // not shared memory), GQA, dropout, query tiles that are no power of two
  s = (ts_attn_shape){.B = 2, .T = 384, .H = 2, .dh = 24, .tile = 128, .dropout = 0.1f,
                      .seed = 9, .step = 1, .index_base = 5, .Hkv = 1};
  attention_shape("tile 128", s, 1.0f, gpu, 1e-5);
}

// Exact ring attention's calls (src/cp/ring.h): the last segment of
// queries walks four blocks of keys in descending order, the online-softmax
// state carried from block to block (attention_forward_block), and the
// backward adds each block's dQ terms to the previous blocks' (dq_acc), with
// k and v rows interleaved as in the travelling block. The walk with one
// block in one call is attention_forward's, on either backend.
static void test_attention_block(void **state) {
  (void)state;
  enum { NB = 4, TB = T / NB, KV = 2 * HKV * DH }; // blocks of TB keys; rows of [K | V]
  const int ldq = H * DH;
  const size_t nq = (size_t)TB * ldq, nkv = (size_t)T * KV, ns = (size_t)H * TB;
  ts_attn_shape s = {.B = 1, .T = T, .H = H, .dh = DH, .tile = 16, .dropout = 0.1f, .seed = 4,
                     .step = 3, .index_base = 777, .Tq = TB, .q0 = T - TB, .Tk = TB,
                     .Hkv = HKV, .ldkv = KV};
  float *q = malloc(nq * 4), *kv = malloc(nkv * 4), *dout = malloc(nq * 4);
  fill(q, nq, 30, 1.0f);
  fill(kv, nkv, 31, 1.0f);
  fill(dout, nq, 32, 1.0f);
  ts_ws aws;
  assert_int_equal(ts_ws_init(&aws, s.tile, 64, 1, s.dh), 0);
  const ts_backend *be[2] = {&ts_backend_cpu, gpu};
  float *out[3], *lse[3], *dq[3], *dkv[3], *one[3], *onel[3];
  for (int r = 0; r < 3; r++) {
    gpu_run(r);
    const ts_backend *b = be[r ? 1 : 0];
    float *Q = take(b, q, nq), *KVb = take(b, kv, nkv), *D = take(b, dout, nq);
    float *lsum = take(b, NULL, ns), *dsum = take(b, NULL, ns);
    out[r] = take(b, NULL, nq);
    lse[r] = take(b, NULL, ns);
    dq[r] = take(b, NULL, nq);
    dkv[r] = take(b, NULL, nkv);
    one[r] = take(b, NULL, nq);
    onel[r] = take(b, NULL, ns);
    for (int c = NB - 1; c >= 0; c--) {
      ts_attn_shape bs = s;
      bs.k0 = c * TB;
      const float *k = KVb + (size_t)c * TB * KV;
      b->attention_forward_block(&aws, out[r], lse[r], lsum, Q, k, k + HKV * DH, &bs,
                                 c == NB - 1, c == 0);
    }
    for (int c = NB - 1; c >= 0; c--) {
      ts_attn_shape bs = s;
      bs.k0 = c * TB;
      bs.dq_acc = c < NB - 1;
      const float *k = KVb + (size_t)c * TB * KV;
      float *dk = dkv[r] + (size_t)c * TB * KV;
      assert_int_equal(b->attention_backward(&aws, dq[r], dk, dk + HKV * DH, dsum, D, Q, k,
                                             k + HKV * DH, out[r], lse[r], &bs),
                       0);
    }
    // the diagonal block alone: first and last at once is attention_forward
    ts_attn_shape ds = s;
    ds.k0 = T - TB;
    const float *k = KVb + (size_t)(NB - 1) * TB * KV;
    b->attention_forward_block(&aws, one[r], onel[r], NULL, Q, k, k + HKV * DH, &ds, 1, 1);
    float *o2 = take(b, NULL, nq), *l2 = take(b, NULL, ns);
    b->attention_forward(&aws, o2, l2, Q, k, k + HKV * DH, &ds);
    check_same_bits("attention_forward_block first+last out", one[r], o2, nq);
    check_same_bits("attention_forward_block first+last lse", onel[r], l2, ns);
    b->free(o2); b->free(l2);
    b->free(Q); b->free(KVb); b->free(D); b->free(lsum); b->free(dsum);
  }
  const char *parts[4] = {"out", "lse", "dq", "dkv"};
  float **got[4] = {out, lse, dq, dkv};
  const size_t len[4] = {nq, ns, nq, nkv};
  char what[64];
  for (int i = 0; i < 4; i++) {
    snprintf(what, sizeof what, "attention blocks %s", parts[i]);
    check(what, got[i][0], got[i][1], len[i], 1e-5);
    check_same_bits(what, got[i][1], got[i][2], len[i]);
  }
  for (int r = 0; r < 3; r++) {
    const ts_backend *b = be[r ? 1 : 0];
    b->free(out[r]); b->free(lse[r]); b->free(dq[r]); b->free(dkv[r]); b->free(one[r]);
    b->free(onel[r]);
  }
  ts_ws_free(&aws);
  free(q); free(kv); free(dout);
}

// bf16 attention: q, k, v and dO rounded to 8 bits as the kernels read them.
static void test_attention_bf16(void **state) {
  (void)state;
  const ts_backend *b16;
  assert_int_equal(get_cuda(TS_PRECISION_BF16, &b16), TS_OK);
  ts_attn_shape s = {.B = 1, .T = 64, .H = 2, .dh = 64, .tile = 32, .dropout = 0.1f, .seed = 1};
  // and not fp32: bf16 rounding must show (else the flag did nothing)
  assert_true(attention_shape("bf16", s, 1.0f, b16, 2e-2) > 1e-5);
  assert_int_equal(get_cuda(TS_PRECISION_FP32, &b16), TS_OK);
}

// AdamW rounds every operation on its own (optim.cu): the CPU's bits.
static void test_adamw(void **state) {
  (void)state;
  enum { N = 3000 };
  float p[N], g[N], m[N], v[N];
  fill(p, N, 50, 1.0f);
  fill(g, N, 51, 0.1f);
  fill(m, N, 52, 0.01f);
  fill(v, N, 53, 0.01f);
  for (int i = 0; i < N; i++) v[i] *= v[i]; // a second moment is >= 0
  const ts_backend *be[2] = {&ts_backend_cpu, gpu};
  float *P[3], *M[3], *Vv[3];
  for (int r = 0; r < 3; r++) {
    gpu_run(r);
    const ts_backend *b = be[r ? 1 : 0];
    float *G = take(b, g, N);
    P[r] = take(b, p, N);
    M[r] = take(b, m, N);
    Vv[r] = take(b, v, N);
    for (int step = 0; step < 2; step++)
      b->adamw(P[r], G, M[r], Vv[r], N, 0.999f, 0.9f, 0.95f, 1e-3f, 0.3f, 1e-8f);
    b->free(G);
  }
  float **got[3] = {P, M, Vv};
  const char *names[3] = {"adamw p", "adamw m", "adamw v"};
  for (int i = 0; i < 3; i++) {
    if (memcmp(got[i][0], got[i][1], N * sizeof(float)) != 0)
      fail_msg("%s: not the CPU's bits", names[i]);
    check_same_bits(names[i], got[i][1], got[i][2], N);
  }
  for (int r = 0; r < 3; r++) {
    const ts_backend *b = be[r ? 1 : 0];
    b->free(P[r]); b->free(M[r]); b->free(Vv[r]);
  }
}

// Muon: Newton–Schulz and Polar Express on a wide and a tall weight. The
// iteration multiplies rounding by its coefficients (up to 24 in Polar
// Express's first step), so the bound is a sum's 1e-5 times that: 2e-4 of
// the update's largest element. The momentum buffer is element-wise: 1e-6.
static void test_muon(void **state) {
  (void)state;
  static const int shapes[2][2] = {{48, 96}, {96, 48}};
  for (int k = 0; k < 4; k++) {
    const int rows = shapes[k % 2][0], cols = shapes[k % 2][1], n = rows * cols;
    const ts_ortho how = k < 2 ? TS_ORTHO_NS : TS_ORTHO_PE;
    float *g = malloc((size_t)n * 4), *buf = malloc((size_t)n * 4);
    fill(g, (size_t)n, 60 + k, 0.1f);
    fill(buf, (size_t)n, 70 + k, 0.01f);
    float *scratch = malloc(ts_ortho_scratch(rows, cols) * sizeof(float));
    const ts_backend *be[2] = {&ts_backend_cpu, gpu};
    float *P[3], *Bf[3];
    for (int r = 0; r < 3; r++) {
      gpu_run(r);
      const ts_backend *b = be[r ? 1 : 0];
      float *G = take(b, g, (size_t)n);
      P[r] = take(b, NULL, (size_t)n); // p = 0, lr 1, no decay: p = −the update
      Bf[r] = take(b, buf, (size_t)n);
      b->muon_update(P[r], G, Bf[r], rows, cols, 1.0f, 0.0f, 0.95f, how, 5, scratch);
      b->free(G);
    }
    check("muon update", P[0], P[1], (size_t)n, 2e-4);
    check("muon momentum", Bf[0], Bf[1], (size_t)n, 1e-6);
    check_same_bits("muon update", P[1], P[2], (size_t)n);
    for (int r = 0; r < 3; r++) {
      const ts_backend *b = be[r ? 1 : 0];
      b->free(P[r]);
      b->free(Bf[r]);
    }
    free(g);
    free(buf);
    free(scratch);
  }
}

// SPEL, the mapl codecs' projector step, on and off St(d, r) (the CPU's A on
// the manifold by ten steps of Polar Express), at mapl's ten steps. Its
// direction and its retraction are Muon's Polar Express, so the bound of the
// projector is Muon's 2e-4; the momentum holds the tangent projection, two
// products of d and r terms, a sum's 1e-5 (off the manifold: the gradient
// itself, element-wise 1e-6).
static void test_spel(void **state) {
  (void)state;
  static const int shapes[2][2] = {{96, 16}, {40, 24}};
  for (int k = 0; k < 4; k++) {
    const int d = shapes[k % 2][0], r = shapes[k % 2][1], n = d * r, on = k < 2;
    float *a = malloc((size_t)n * 4), *g = malloc((size_t)n * 4), *mom = malloc((size_t)n * 4);
    float *scratch = malloc(ts_ortho_scratch(d, r) * sizeof(float));
    fill(a, (size_t)n, 80 + k, 1.0f);
    ts_polar_express(a, d, r, 10, scratch);
    fill(g, (size_t)n, 90 + k, 0.1f);
    fill(mom, (size_t)n, 100 + k, 0.01f);
    const ts_backend *be[2] = {&ts_backend_cpu, gpu};
    float *A[3], *M[3];
    for (int run = 0; run < 3; run++) {
      gpu_run(run);
      const ts_backend *b = be[run ? 1 : 0];
      float *G = take(b, g, (size_t)n);
      A[run] = take(b, a, (size_t)n);
      M[run] = take(b, mom, (size_t)n);
      if (on) b->spel_step(A[run], G, M[run], d, r, 0.1f, 0.95f, 10, scratch);
      else b->spel_step_unconstrained(A[run], G, M[run], d, r, 0.1f, 0.95f, 10, scratch);
      b->free(G);
    }
    const char *name = on ? "spel step" : "spel step unconstrained";
    check(name, A[0], A[1], (size_t)n, 2e-4);
    check(on ? "spel momentum" : "spel momentum unconstrained", M[0], M[1], (size_t)n,
          on ? 1e-5 : 1e-6);
    check_same_bits(name, A[1], A[2], (size_t)n);
    check_same_bits(name, M[1], M[2], (size_t)n);
    for (int run = 0; run < 3; run++) {
      const ts_backend *b = be[run ? 1 : 0];
      b->free(A[run]);
      b->free(M[run]);
    }
    free(a);
    free(g);
    free(mom);
    free(scratch);
  }
}

// The token embedding's gradient: the GPU's product and ordered scatter
// against the CPU's per-leaf product and scatter summed by the canonical tree
// (sums over rows: 1e-5), without the tied head's product and with it; the
// CPU's without it is the tree of the scatter leaves, bit for bit. Then one
// leaf's scatter (--fused-ce's leaves) onto what out holds, likewise.
typedef struct {
  const float *dout;
  const int *tokens;
} scatter_ctx;

static void scatter_leaf(const void *vctx, int64_t li, float *out) {
  const scatter_ctx *c = vctx;
  memset(out, 0, (size_t)V * C * sizeof(float));
  encoder_wte_leaf_scatter(out, c->dout, c->tokens, li, 64, C);
}

static void test_embedding_backward(void **state) {
  (void)state;
  float *dout = malloc(NTOK * C * 4), *prior = malloc((size_t)V * C * 4);
  float *dlogits = malloc(NTOK * V * 4), *x = malloc(NTOK * C * 4);
  int tok[NTOK];
  fill(dout, NTOK * C, 80, 1.0f);
  fill(prior, (size_t)V * C, 81, 1.0f);
  fill(dlogits, NTOK * V, 82, 0.1f);
  fill(x, NTOK * C, 83, 1.0f);
  for (int i = 0; i < NTOK; i++) tok[i] = (int)ts_rng_below(2, 3, 4, (uint64_t)i, 7); // repeats
  float *want = malloc((size_t)V * C * 4);
  scatter_ctx c = {dout, tok};
  assert_int_equal(ts_leaf_tree_sum(&ws, want, (size_t)V * C, NTOK / 64, scatter_leaf, &c), 0);
  const ts_backend *be[2] = {&ts_backend_cpu, gpu};
  for (int k = 0; k < 3; k++) { // no head, the tied head, one leaf's scatter
    float *got[3];
    for (int r = 0; r < 3; r++) {
      gpu_run(r);
      const ts_backend *b = be[r ? 1 : 0];
      float *D = take(b, dout, NTOK * C), *DL = take(b, dlogits, NTOK * V);
      float *X = take(b, x, NTOK * C);
      int *T_ = b->alloc(sizeof tok);
      assert_non_null(T_);
      memcpy(T_, tok, sizeof tok);
      got[r] = take(b, prior, (size_t)V * C);
      if (k < 2)
        assert_int_equal(
            b->embedding_backward(&ws, got[r], D, T_, k ? DL : NULL, X, NTOK, V, C), 0);
      else
        b->embedding_leaf_scatter(got[r], D, T_, 2, 64, C);
      b->free(D); b->free(DL); b->free(X); b->free(T_);
    }
    if (k == 0 && memcmp(got[0], want, (size_t)V * C * sizeof(float)) != 0)
      fail_msg("embedding backward: the CPU's is not the canonical tree of its scatter leaves");
    const char *names[3] = {"embedding backward", "embedding backward (tied head)",
                            "embedding leaf scatter"};
    check(names[k], got[0], got[1], (size_t)V * C, 1e-5);
    check_same_bits(names[k], got[1], got[2], (size_t)V * C);
    for (int r = 0; r < 3; r++) be[r ? 1 : 0]->free(got[r]);
  }
  free(dout);
  free(prior);
  free(dlogits);
  free(x);
  free(want);
}

// The leaves' sums (--fused-ce, --tiled-mlp): a leaf function made of the
// backend's operations, whose partial is the leaf's weight product, a piece
// whose sum is dropped (the leaf's first row of dy) and the leaf's column
// sums; and with no pieces, the leaves' own rows of a product alone. The CPU
// sums the canonical tree (its weight sum is linear_backward_weights', bit
// for bit), the GPU the leaves in order (sums over rows: 1e-5).
typedef struct {
  const ts_backend *b;
  const float *x, *dy, *w;
  float *y;
} leaves_ctx;

static void sum_leaf(const void *vctx, int64_t li, float *out) {
  const leaves_ctx *c = vctx;
  const float *dy = c->dy + li * 64 * OC;
  if (!out) { // the leaf's rows of y = x · Wᵀ
    c->b->linear_forward(c->y + li * 64 * OC, c->x + li * 64 * C, c->w, NULL, 64, C, OC, 64);
    return;
  }
  c->b->linear_weight_leaf(out, c->dy, c->x, li, 64, C, OC);
  c->b->copy(out + OC * C, dy, OC * sizeof(float));
  c->b->column_sum(out + OC * C + OC, dy, 64, OC, 0);
}

static void test_leaf_sum(void **state) {
  (void)state;
  float *x = malloc(NTOK * C * 4), *dy = malloc(NTOK * OC * 4), *w = malloc(OC * C * 4);
  fill(x, NTOK * C, 84, 1.0f);
  fill(dy, NTOK * OC, 85, 1.0f);
  fill(w, OC * C, 86, 0.1f);
  const ts_backend *be[2] = {&ts_backend_cpu, gpu};
  float *dw[3], *db[3], *y[3], *lw = malloc(OC * C * 4), *lb = malloc(OC * 4);
  for (int r = 0; r < 3; r++) {
    gpu_run(r);
    const ts_backend *b = be[r ? 1 : 0];
    float *X = take(b, x, NTOK * C), *DY = take(b, dy, NTOK * OC), *W = take(b, w, OC * C);
    dw[r] = take(b, NULL, OC * C);
    db[r] = take(b, NULL, OC);
    y[r] = take(b, NULL, NTOK * OC);
    leaves_ctx c = {b, X, DY, W, y[r]};
    float *dst[3] = {dw[r], NULL, db[r]};
    const size_t len[3] = {OC * C, OC, OC};
    assert_int_equal(b->leaf_sum(&ws, dst, len, 3, NTOK / 64, sum_leaf, &c), 0);
    assert_int_equal(b->leaf_sum(&ws, NULL, NULL, 0, NTOK / 64, sum_leaf, &c), 0);
    if (r == 0) assert_int_equal(linear_backward_weights(&ws, lw, lb, DY, X, NTOK, C, OC), 0);
    b->free(X); b->free(DY); b->free(W);
  }
  if (memcmp(lw, dw[0], OC * C * sizeof(float)) || memcmp(lb, db[0], OC * sizeof(float)))
    fail_msg("leaf_sum: the CPU's is not linear_backward_weights' tree");
  check("leaf_sum weights", dw[0], dw[1], OC * C, 1e-5);
  check("leaf_sum column sums", db[0], db[1], OC, 1e-5);
  check("leaf_sum leaves alone", y[0], y[1], NTOK * OC, 1e-5);
  check_same_bits("leaf_sum weights", dw[1], dw[2], OC * C);
  check_same_bits("leaf_sum column sums", db[1], db[2], OC);
  for (int r = 0; r < 3; r++) {
    const ts_backend *b = be[r ? 1 : 0];
    b->free(dw[r]); b->free(db[r]); b->free(y[r]);
  }
  free(x); free(dy); free(w); free(lw); free(lb);
}

// The loss's sum: the GPU's leaf partials in row order under the CPU's tree:
// the CPU's bits, for a few leaves and for more than the 4096 the CPU's
// token_tree_sum takes at a time.
static void test_token_tree_sum(void **state) {
  (void)state;
  enum { N = 15000 };
  static const int cases[3][2] = {{NTOK, 64}, {N, 3}, {12288, 1}};
  float *v = malloc(N * sizeof(float));
  fill(v, N, 93, 1.0f);
  float *G = take(gpu, v, N);
  for (int k = 0; k < 3; k++) {
    const float want = token_tree_sum(v, cases[k][0], cases[k][1]);
    for (int r = 1; r <= 2; r++) {
      gpu_run(r);
      const float got = gpu->token_tree_sum(G, cases[k][0], cases[k][1]);
      if (memcmp(&got, &want, sizeof got) != 0)
        fail_msg("token_tree_sum (%d values, leaves of %d): GPU %a, CPU %a", cases[k][0],
                 cases[k][1], (double)got, (double)want);
    }
  }
  gpu->free(G);
  free(v);
}

// The gradient norm's chunk sums, op by op: each chunk's Σ g² in double in
// index order, which is the CPU's host loop (optim.c), so its bits. Chunks
// that divide n, a partial last one, and one chunk longer than n.
static void test_sumsq_chunks(void **state) {
  (void)state;
  assert_non_null(gpu->sumsq_chunks);
  enum { N = 30001 };
  static const size_t chunks[3] = {1000, 4096, 65536};
  float *g = malloc(N * sizeof(float));
  fill(g, N, 91, 0.5f);
  float *G = take(gpu, g, N);
  for (int k = 0; k < 3; k++) {
    const size_t chunk = chunks[k], n = k ? N : 30000, nchunks = (n + chunk - 1) / chunk;
    double *want = malloc(nchunks * sizeof(double)), *got = malloc(nchunks * sizeof(double));
    for (size_t c = 0; c < nchunks; c++) {
      double s = 0.0;
      for (size_t i = c * chunk; i < n && i < (c + 1) * chunk; i++)
        s += (double)g[i] * (double)g[i];
      want[c] = s;
    }
    for (int r = 1; r <= 2; r++) {
      gpu_run(r);
      gpu->sumsq_chunks(got, G, n, chunk);
      if (memcmp(got, want, nchunks * sizeof(double)) != 0)
        fail_msg("sumsq_chunks (chunk %zu): not the CPU's bits", chunk);
    }
    free(want);
    free(got);
  }
  gpu->free(G);
  free(g);
}

// The gradient norm and the clip where the gradients are: the CPU's bits
// (optim.c sums fixed chunks in double, in index order).
static void test_grad_norm(void **state) {
  (void)state;
  enum { N = 200000 }; // four chunks, the last one partial
  float *g = malloc(N * sizeof(float));
  fill(g, N, 90, 0.5f);
  float want = ts_grad_norm(g, N);
  float *G = take(gpu, g, N);
  ts_backend_set(gpu);
  for (int r = 1; r <= 2; r++) {
    gpu_run(r);
    float got = ts_grad_norm(G, N);
    if (memcmp(&got, &want, sizeof got) != 0)
      fail_msg("gradient norm: GPU %a, CPU %a", (double)got, (double)want);
  }
  ts_clip(G, N, want, 1.0f);
  ts_backend_set(NULL);
  ts_clip(g, N, want, 1.0f);
  if (memcmp(g, G, N * sizeof(float)) != 0) fail_msg("clip: not the CPU's bits");
  gpu->free(G);
  free(g);
}

static void test_crossentropy(void **state) {
  (void)state;
  float *z = malloc(NTOK * V * 4);
  int tgt[NTOK];
  fill(z, NTOK * V, 30, 3.0f);
  for (int i = 0; i < NTOK; i++) tgt[i] = (int)ts_rng_below(1, 2, 3, (uint64_t)i, V);
  const ts_backend *be[2] = {&ts_backend_cpu, gpu};
  float *loss[2], *dz[2];
  for (int r = 0; r < 2; r++) {
    gpu_run(r);
    const ts_backend *b = be[r];
    float *Z = take(b, z, NTOK * V);
    int *Tg = b->alloc(sizeof tgt);
    memcpy(Tg, tgt, sizeof tgt);
    loss[r] = take(b, NULL, NTOK);
    dz[r] = take(b, NULL, NTOK * V);
    b->crossentropy_forward(loss[r], Z, Tg, NTOK, V);
    b->crossentropy_backward(dz[r], Z, Tg, 1.0f / NTOK, NTOK, V);
    b->free(Z); b->free(Tg);
  }
  // sums over V = 256 classes: the 1e-5 class of the header (the CPU's own
  // in-order fp32 sum is 1.0e-6 from an fp64 reference here)
  check("crossentropy loss", loss[0], loss[1], NTOK, 1e-5);
  check("crossentropy dlogits", dz[0], dz[1], NTOK * V, 1e-5);
  for (int r = 0; r < 2; r++) {
    be[r]->free(loss[r]);
    be[r]->free(dz[r]);
  }
  free(z);
}

// bf16 products: the operands rounded to 8 bits, accumulation in fp32.
static void test_linear_bf16(void **state) {
  (void)state;
  const ts_backend *b16;
  assert_int_equal(get_cuda(TS_PRECISION_BF16, &b16), TS_OK);
  float x[NTOK * C], w[OC * C];
  fill(x, NTOK * C, 40, 1.0f);
  fill(w, OC * C, 41, 0.1f);
  float *y[2];
  const ts_backend *be[2] = {&ts_backend_cpu, b16};
  for (int r = 0; r < 2; r++) {
    gpu_run(r);
    float *X = take(be[r], x, NTOK * C), *W = take(be[r], w, OC * C);
    y[r] = take(be[r], NULL, NTOK * OC);
    be[r]->linear_forward(y[r], X, W, NULL, NTOK, C, OC, 64);
    be[r]->free(X);
    be[r]->free(W);
  }
  check("linear forward bf16", y[0], y[1], NTOK * OC, 2e-2);
  // and not fp32: bf16 rounding must show (else the flag did nothing)
  assert_true(nmax_error(y[0], y[1], NTOK * OC) > 1e-5);
  be[0]->free(y[0]);
  be[1]->free(y[1]);
  assert_int_equal(get_cuda(TS_PRECISION_FP32, &b16), TS_OK);
}

// ---- the whole model ----------------------------------------------------------------------------
// One training step's loss and gradients, on backend b.
static float model_step(const ts_backend *b, const char *preset, float dropout, float *grads,
                        size_t *np) {
  ts_config c;
  memset(&c, 0, sizeof c);
  assert_int_equal(ts_config_preset(&c, preset), TS_OK);
  ts_config_defaults(&c);
  c.batch = 2;
  c.seq = 64;
  c.dropout = dropout;
  c.tile = c.leaf = 0;
  assert_int_equal(ts_config_finalize(&c), TS_OK);
  ts_backend_set(b);
  ts_model *m;
  assert_int_equal(ts_model_create(&c, &m), TS_OK);
  ts_model_init(m, c.seed);
  int inp[2 * 64], tgt[2 * 64];
  for (int i = 0; i < 2 * 64; i++) {
    inp[i] = (int)ts_rng_below(5, 6, 0, (uint64_t)i, 256);
    tgt[i] = (int)ts_rng_below(5, 6, 1, (uint64_t)i, 256);
  }
  float loss = ts_model_forward(m, inp, tgt, 1, 1);
  assert_int_equal(ts_model_backward(m, 1), TS_OK);
  *np = ts_model_num_params(m);
  if (grads) memcpy(grads, ts_model_grads(m), *np * sizeof(float));
  ts_model_free(m);
  ts_backend_set(NULL);
  return loss;
}

static void test_model(void **state) {
  (void)state;
  const char *presets[2] = {"tiny", "llama-tiny"};
  for (int k = 0; k < 4; k++) {
    size_t np;
    model_step(&ts_backend_cpu, presets[k / 2], 0.0f, NULL, &np);
    float *g[3];
    float loss[3];
    for (int r = 0; r < 3; r++) {
      gpu_run(r);
      g[r] = malloc(np * sizeof(float));
      loss[r] = model_step(r ? gpu : &ts_backend_cpu, presets[k / 2], k % 2 ? 0.1f : 0.0f, g[r],
                           &np);
    }
    double rel = fabs((double)loss[1] - loss[0]) / fabs((double)loss[0]);
    if (exact_now ? memcmp(&loss[0], &loss[1], sizeof(float)) != 0 : !(rel <= 1e-5))
      fail_msg("%s loss: CPU %a GPU %a (%s tier)", presets[k / 2], loss[0], loss[1],
               exact_now ? "exact" : "fast");
    check("model gradients", g[0], g[1], np, 1e-4);
    assert_true(loss[1] == loss[2]);
    check_same_bits("model gradients", g[1], g[2], np);
    for (int r = 0; r < 3; r++) free(g[r]);
  }
}

// ---- every operation, by construction ------------------------------------------------------
// The operations of src/backend/backend_ops.def, by index.
enum {
#define TS_OP(op, cpu, ret, params) OP_##op,
#include "backend/backend_ops.def"
  NOPS
};

static const char *const op_names[NOPS] = {
#define TS_OP(op, cpu, ret, params) #op,
#include "backend/backend_ops.def"
};

// The test that compares each operation of the list, device against CPU (a
// test may cover several: a backward needs its forward's outputs). Indexed by
// the list, so an entry for an operation it does not have does not compile,
// and main refuses to run while an operation has no entry. The optional ones
// are compared against the host path their callers take without them.
static const struct CMUnitTest op_test[NOPS] = {
    [OP_add] = cmocka_unit_test(test_add_copy),
    [OP_copy] = cmocka_unit_test(test_add_copy),
    [OP_add_rows] = cmocka_unit_test(test_add_rows),
    [OP_encoder_forward] = cmocka_unit_test(test_encoder),
    [OP_encoder_backward_wpe] = cmocka_unit_test(test_encoder),
    [OP_embedding_backward] = cmocka_unit_test(test_embedding_backward),
    [OP_embedding_leaf_scatter] = cmocka_unit_test(test_embedding_backward),
    [OP_layernorm_forward] = cmocka_unit_test(test_norms),
    [OP_layernorm_backward] = cmocka_unit_test(test_norms),
    [OP_rmsnorm_forward] = cmocka_unit_test(test_norms),
    [OP_rmsnorm_backward] = cmocka_unit_test(test_norms),
    [OP_linear_forward] = cmocka_unit_test(test_linear),
    [OP_linear_forward_heads] = cmocka_unit_test(test_linear),
    [OP_linear_forward_head_list] = cmocka_unit_test(test_linear_head_list),
    [OP_linear_backward_input] = cmocka_unit_test(test_linear),
    [OP_linear_backward_weights] = cmocka_unit_test(test_linear),
    [OP_linear_weight_leaf] = cmocka_unit_test(test_linear),
    [OP_column_sum] = cmocka_unit_test(test_column_sum),
    [OP_matmul] = cmocka_unit_test(test_matmul),
    [OP_gelu_forward] = cmocka_unit_test(test_elementwise),
    [OP_gelu_backward] = cmocka_unit_test(test_elementwise),
    [OP_swiglu_forward] = cmocka_unit_test(test_elementwise),
    [OP_swiglu_backward] = cmocka_unit_test(test_elementwise),
    [OP_rope_forward] = cmocka_unit_test(test_elementwise),
    [OP_rope_backward] = cmocka_unit_test(test_elementwise),
    [OP_dropout_apply] = cmocka_unit_test(test_elementwise),
    [OP_attention_forward] = cmocka_unit_test(test_attention),
    [OP_attention_backward] = cmocka_unit_test(test_attention),
    [OP_attention_forward_block] = cmocka_unit_test(test_attention_block),
    [OP_ring_merge] = cmocka_unit_test(test_ring_merge),
    [OP_crossentropy_forward] = cmocka_unit_test(test_crossentropy),
    [OP_crossentropy_backward] = cmocka_unit_test(test_crossentropy),
    [OP_token_tree_sum] = cmocka_unit_test(test_token_tree_sum),
    [OP_leaf_sum] = cmocka_unit_test(test_leaf_sum),
    [OP_adamw] = cmocka_unit_test(test_adamw),
    [OP_muon_update] = cmocka_unit_test(test_muon),
    [OP_spel_step] = cmocka_unit_test(test_spel),
    [OP_spel_step_unconstrained] = cmocka_unit_test(test_spel),
    [OP_sumsq_chunks] = cmocka_unit_test(test_sumsq_chunks),
    [OP_scale] = cmocka_unit_test(test_grad_norm),
};

// Beyond one test per operation: more shapes and layouts, bf16, the model.
static const struct CMUnitTest more_tests[] = {
    cmocka_unit_test(test_attention_layouts), cmocka_unit_test(test_attention_bf16),
    cmocka_unit_test(test_linear_bf16),       cmocka_unit_test(test_model),
};

// The tier a group of tests runs in: the backend set up again in it.
static int set_tier(int fast) {
  fast_tier = fast;
  return get_cuda(TS_PRECISION_FP32, &gpu) == TS_OK ? 0 : -1;
}
static int exact_group(void **state) { (void)state; return set_tier(0); }
static int fast_group(void **state) { (void)state; return set_tier(1); }

int main(void) {
  // before the GPU is looked for: an operation without a test is a fault of
  // the sources, on any machine
  enum { NMORE = sizeof more_tests / sizeof more_tests[0] };
  struct CMUnitTest tests[NOPS + NMORE];
  size_t n = 0;
  int missing = 0;
  for (int op = 0; op < NOPS; op++) {
    if (!op_test[op].test_func) {
      fprintf(stderr, "test_gpu: no test compares the backend operation %s (src/backend/backend_ops.def): "
                      "add one to op_test in tests/test_gpu.c\n", op_names[op]);
      missing = 1;
      continue;
    }
    size_t k = 0; // each test once, where its first operation is
    while (k < n && tests[k].test_func != op_test[op].test_func) k++;
    if (k == n) tests[n++] = op_test[op];
  }
  if (missing) return 1;
  for (size_t k = 0; k < NMORE; k++) tests[n++] = more_tests[k];
  if (get_cuda(TS_PRECISION_FP32, &gpu) != TS_OK) {
    printf("# SKIP: %s\n", ts_errmsg());
    return 77;
  }
  // leaf partials up to the embedding scatter's (V, C)
  if (ts_ws_init(&ws, 16, 64, (size_t)V * C, DH) != 0) return 1;
  // the count is known at run time: cmocka_run_group_tests takes it from
  // the array's type
  int rc = _cmocka_run_group_tests("exact tier", tests, n, exact_group, NULL);
  rc |= _cmocka_run_group_tests("fast tier", tests, n, fast_group, NULL);
  ts_ws_free(&ws);
  return rc;
}
