// The arithmetic fingerprint (fingerprint.h). The computation is small but
// goes through the real kernels with shapes that reach their vector bodies
// and their remainders (odd sizes), and through every element-wise function
// of the exact path, so a rank that would train to other bits is caught
// before it trains. Inputs come from Philox (integers, so the same everywhere).
#include "fingerprint.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/kernels.h"
#include "backend/orthogonal.h"
#include "boundary/boundary.h"
#include "cpu/attention_tile.h"
#include "cpu/mm.h"
#include "exact/exactmath.h"
#include "exact/fastexp.h"
#include "exact/rng.h"
#include "tessera.h"
#include "train/optim.h"

#define FP_SEED 0x7e55e7aull
#define FP_PURPOSE 0x7f // a purpose of its own: no run draws these

static const char *const part_names[TS_ARITH_NPARTS] = {
    "elementary functions", "matrix products", "norms", "activations", "attention",
    "loss", "optimizer", "random numbers", "subnormal numbers"};

const char *ts_arith_part_name(int i) {
  return i >= 0 && i < TS_ARITH_NPARTS ? part_names[i] : "?";
}

static void fnv(uint64_t *h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) {
    *h ^= b[i];
    *h *= 0x100000001b3ull;
  }
}

static void put_f(uint64_t *h, const float *x, size_t n) { fnv(h, x, n * sizeof *x); }
static void put_d(uint64_t *h, const double *x, size_t n) { fnv(h, x, n * sizeof *x); }

// n values in [-scale, scale), stream s.
static void fill(float *x, size_t n, float scale, uint64_t s) {
  for (size_t i = 0; i < n; i++)
    x[i] = scale * (2.0f * ts_rng_uniform(FP_SEED, FP_PURPOSE, s, i) - 1.0f);
}

// Every argument range the functions see in training, and their edges.
static void elementary(uint64_t *h) {
  for (int i = 0; i < 512; i++) {
    const double u = ((double)ts_rng_u32(FP_SEED, FP_PURPOSE, 100, (uint64_t)i) + 0.5) * 0x1p-32;
    const double x = (u - 0.5) * 1400.0, a = u * (i < 256 ? 8.0 : 1e6);
    double s, c;
    ts_sincos(a, &s, &c);
    const double d[7] = {ts_log(u * 0x1p40), ts_log(u * 0x1p-1060), ts_exp(x), ts_pow(u * 1e5, -u),
                         ts_powi(u, (uint64_t)i * 977u + 1u), s, c};
    const float xf = (float)(x / 8.0);
    const float f[3] = {ts_expf(xf), ts_logf((float)u * 300.0f), ts_expf(-(float)u * 90.0f)};
    put_d(h, d, 7);
    put_f(h, f, 3);
  }
}

static int products(uint64_t *h) {
  enum { M = 13, N = 37, K = 29, R = 7, Cc = 10 };
  float *A = malloc(sizeof(float) * (M * K + 2 * K * N + 2 * M * N + 2 * 16 * 16 + R * Cc +
                                     ts_ortho_scratch(R, Cc)));
  if (!A) return -1;
  float *B = A + M * K, *E = B + K * N, *C = E + K * N, *D = C + M * N, *S = D + M * N;
  float *T = S + 16 * 16, *X = T + 16 * 16, *scratch = X + R * Cc;
  fill(A, M * K, 1.0f, 200);
  fill(B, K * N, 1.0f, 201);
  fill(E, K * N, 1.0f, 205);
  fill(D, M * N, 1.0f, 202);
  ts_mm(0, 0, M, N, K, 0.7f, A, K, B, N, 0, C, N);
  // both transposed: op(A) = the first 13 columns of B (K × N), op(B) = Eᵀ (E: N × K)
  ts_mm(1, 1, M, N, K, 1.0f, B, N, E, K, 1, D, N);
  put_f(h, C, M * N);
  put_f(h, D, M * N);
  // attention's tile products: Sᵀ = scale·K·Qᵀ, then an accumulating one
  fill(S, 16 * 16, 1.0f, 203);
  memset(T, 0, sizeof(float) * 16 * 16); // (rows 12-15 are not written)
  ts_tile_mm(T, 16, A, K, 1, B, N, 12, 16, K, 0.125f, 0);
  ts_tile_mm(S, 16, A, 1, K, B, N, 10, 16, 9, 1.0f, 1); // A read transposed
  put_f(h, T, 16 * 16);
  put_f(h, S, 16 * 16);
  fill(X, R * Cc, 1.0f, 204);
  ts_newton_schulz(X, R, Cc, 3, scratch);
  put_f(h, X, R * Cc);
  free(A);
  return 0;
}

enum { NT = 8, CN = 67 }; // rows (two leaves of 4) and features of the norms

static int norms(uint64_t *h, ts_ws *ws) {
  float *x = malloc(sizeof(float) * (6 * NT * CN + 2 * CN + 2 * NT));
  if (!x) return -1;
  float *w = x + NT * CN, *b = w + CN, *y = b + CN, *dy = y + NT * CN, *dx = dy + NT * CN;
  float *dw = dx + NT * CN, *db = dw + NT * CN, *mean = db + NT * CN, *rstd = mean + NT;
  fill(x, NT * CN, 3.0f, 300);
  fill(w, CN, 1.0f, 301);
  fill(b, CN, 0.5f, 302);
  fill(dy, NT * CN, 1.0f, 303);
  int rc = 0;
  layernorm_forward(y, mean, rstd, x, w, b, NT, CN);
  put_f(h, y, NT * CN);
  put_f(h, rstd, NT);
  rc |= layernorm_backward(ws, dx, dw, db, dy, x, w, mean, rstd, NT, CN);
  put_f(h, dx, NT * CN);
  put_f(h, dw, CN);
  put_f(h, db, CN);
  rmsnorm_forward(y, rstd, x, w, NT, CN);
  put_f(h, y, NT * CN);
  rc |= rmsnorm_backward(ws, dx, dw, dy, x, w, rstd, NT, CN);
  put_f(h, dx, NT * CN);
  put_f(h, dw, CN);
  free(x);
  return rc ? -1 : 0;
}

static int activations(uint64_t *h) {
  enum { n = 1003 }; // the clones' vector bodies and a remainder
  float *x = malloc(sizeof(float) * 5 * n);
  if (!x) return -1;
  float *u = x + n, *d = u + n, *y = d + n, *z = y + n;
  fill(x, n, 9.0f, 400);
  fill(u, n, 2.0f, 401);
  fill(d, n, 1.0f, 402);
  gelu_forward(y, x, n);
  put_f(h, y, n);
  gelu_backward(y, x, d, n);
  put_f(h, y, n);
  swiglu_forward(y, x, u, n);
  put_f(h, y, n);
  swiglu_backward(y, z, x, u, d, n);
  put_f(h, y, n);
  put_f(h, z, n);
  free(x);
  return 0;
}

// Two heads of a 16-token sequence in tiles of 4, with dropout; RoPE on the
// queries first, as the LLaMA variant does.
static int attention(uint64_t *h, ts_ws *ws) {
  enum { T = 16, H = 2, DH = 8, n = T * H * DH };
  float *q = malloc(sizeof(float) * (9 * n + 2 * H * T + T * DH));
  if (!q) return -1;
  float *k = q + n, *v = k + n, *o = v + n, *dout = o + n, *dq = dout + n, *dk = dq + n;
  float *dv = dk + n, *lse = dv + n, *dsum = lse + H * T, *cs = dsum + H * T;
  fill(q, n, 2.0f, 500);
  fill(k, n, 2.0f, 501);
  fill(v, n, 1.0f, 502);
  fill(dout, n, 1.0f, 503);
  rope_table(cs, T, DH, 10000.0);
  put_f(h, cs, T * DH);
  rope_forward(q, T, T, 0, H, DH, H * DH, cs);
  const ts_attn_shape s = {.B = 1, .T = T, .H = H, .dh = DH, .tile = 4, .dropout = 0.25f,
                           .seed = FP_SEED, .step = 3};
  attention_forward(ws, o, lse, q, k, v, &s);
  put_f(h, o, n);
  put_f(h, lse, H * T);
  int rc = attention_backward(ws, dq, dk, dv, dsum, dout, q, k, v, o, lse, &s);
  put_f(h, dq, n);
  put_f(h, dk, n);
  put_f(h, dv, n);
  free(q);
  return rc ? -1 : 0;
}

static int loss(uint64_t *h) {
  enum { V = 301 };
  float *z = malloc(sizeof(float) * (2 * NT * V + NT));
  if (!z) return -1;
  float *dz = z + NT * V, *l = dz + NT * V;
  int tgt[NT];
  fill(z, NT * V, 12.0f, 600);
  for (int t = 0; t < NT; t++) tgt[t] = (int)ts_rng_below(FP_SEED, FP_PURPOSE, 601, (uint64_t)t, V);
  crossentropy_forward(l, z, tgt, NT, V);
  crossentropy_backward(dz, z, tgt, 1.0f / NT, NT, V);
  const float sum = token_tree_sum(l, NT, 4);
  put_f(h, l, NT);
  put_f(h, dz, NT * V);
  put_f(h, &sum, 1);
  free(z);
  return 0;
}

static int optimizer(uint64_t *h) {
  enum { n = 301 };
  float *p = malloc(sizeof(float) * 4 * n);
  if (!p) return -1;
  float *g = p + n, *m = g + n, *v = m + n;
  fill(p, n, 1.0f, 700);
  fill(g, n, 0.01f, 701);
  fill(m, n, 0.001f, 702);
  for (int i = 0; i < n; i++) v[i] = m[i] * m[i];
  ts_config cfg;
  ts_config_defaults(&cfg);
  cfg.steps = 1000;
  cfg.warmup = 10;
  cfg.lr_schedule = TS_LR_COSINE;
  for (int64_t s = 0; s < cfg.steps; s += 37) {
    const float lr = ts_lr_at(&cfg, s);
    float step_size, bc2_sqrt;
    ts_adamw_scalars(lr, 0.9f, 0.95f, (uint64_t)s + 1, &step_size, &bc2_sqrt);
    const float sc[3] = {lr, step_size, bc2_sqrt};
    put_f(h, sc, 3);
  }
  float step_size, bc2_sqrt;
  ts_adamw_scalars(3e-4f, 0.9f, 0.999f, 7, &step_size, &bc2_sqrt);
  ts_adamw_elements(p, g, m, v, n, 1.0f - 3e-4f * 0.1f, 0.9f, 0.999f, step_size, bc2_sqrt, 1e-8f);
  const float norm = ts_grad_norm(g, n);
  put_f(h, p, n);
  put_f(h, m, n);
  put_f(h, v, n);
  put_f(h, &norm, 1);
  free(p);
  return 0;
}

static int random_numbers(uint64_t *h) {
  enum { n = 257, D = 12, R = 4 };
  double *a = malloc(sizeof(double) * D * R + sizeof(float) * (n + D * R));
  if (!a) return -1;
  float *z = (float *)(a + D * R), *q = z + n;
  for (int i = 0; i < n; i++) z[i] = ts_rng_normal(FP_SEED, TS_RNG_INIT, 3, (uint64_t)i);
  put_f(h, z, n);
  for (int i = 0; i < n; i++) z[i] = 1.0f + (float)i / n;
  dropout_apply(z, n, 0.3f, FP_SEED, TS_RNG_DROPOUT_MLP, 2, 1000);
  put_f(h, z, n);
  ts_boundary_orthonormal(q, a, D, R, FP_SEED, 1);
  put_f(h, q, D * R);
  free(a);
  return 0;
}

// A CPU told to flush results below FLT_MIN to zero, or to read such
// operands as zero, gives other bits for them.
static void subnormals(uint64_t *h) {
  float x[64];
  fill(x, 64, 1.0f, 800);
  for (int i = 0; i < 64; i++) {
    const float tiny = x[i] * 0x1p-130f;   // a subnormal result
    const float back = tiny * 0x1p20f + x[i] * 0x1p-110f; // subnormal operands
    const float r[2] = {tiny, back};
    put_f(h, r, 2);
  }
}

int ts_arith_fingerprint(ts_arith *out) {
  for (int i = 0; i < TS_ARITH_NPARTS; i++) out->part[i] = 0xcbf29ce484222325ull;
  ts_ws ws;
  int rc = ts_ws_init(&ws, 4, 4, 2 * CN, 8);
  if (!rc) {
    elementary(&out->part[TS_ARITH_ELEMENTARY]);
    rc |= products(&out->part[TS_ARITH_PRODUCTS]);
    rc |= norms(&out->part[TS_ARITH_NORMS], &ws);
    rc |= activations(&out->part[TS_ARITH_ACTIVATIONS]);
    rc |= attention(&out->part[TS_ARITH_ATTENTION], &ws);
    rc |= loss(&out->part[TS_ARITH_LOSS]);
    rc |= optimizer(&out->part[TS_ARITH_OPTIMIZER]);
    rc |= random_numbers(&out->part[TS_ARITH_RANDOM]);
    subnormals(&out->part[TS_ARITH_SUBNORMALS]);
  }
  ts_ws_free(&ws);
  if (rc) {
    memset(out, 0xff, sizeof *out);
    return -1;
  }
  out->all = 0xcbf29ce484222325ull;
  fnv(&out->all, out->part, sizeof out->part);
  return 0;
}

void ts_arith_describe(char *buf, size_t cap) {
  ts_arith a;
  if (ts_arith_fingerprint(&a)) snprintf(buf, cap, "unknown (out of memory)");
  else snprintf(buf, cap, "fingerprint 0x%016" PRIx64, a.all);
}
