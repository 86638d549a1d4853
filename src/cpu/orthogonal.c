// Newton–Schulz, Polar Express, Muon and SPEL (orthogonal.h): the CPU backend's
// muon_update, spel_step and spel_step_unconstrained, with the canonical product.
#include "backend/orthogonal.h"

#include "mm.h"

#include <math.h>
#include <string.h>

size_t ts_ortho_scratch(int rows, int cols) {
  size_t m = (size_t)(rows < cols ? rows : cols), n = (size_t)(rows < cols ? cols : rows);
  return 2 * m * n + 2 * m * m + m * n; // W, W', A, A², and a copy for SPEL
}

static double frobenius(const float *X, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; i++) s += (double)X[i] * X[i];
  return sqrt(s);
}

static void transpose(float *dst, const float *src, int rows, int cols) {
  for (int i = 0; i < rows; i++)
    for (int j = 0; j < cols; j++) dst[(size_t)j * rows + i] = src[(size_t)i * cols + j];
}

static const double pe_table[8][3] = {
    {8.28721201814563, -23.595886519098837, 17.300387312530933},
    {4.107059111542203, -2.9478499167379106, 0.5448431082926601},
    {3.9486908534822946, -2.908902115962949, 0.5518191394370137},
    {3.3184196573706015, -2.488488024314874, 0.51004894012372},
    {2.300652019954817, -1.6689039845747493, 0.4188073119525673},
    {1.891301407787398, -1.2679958271945868, 0.37680408948524835},
    {1.8750014808534479, -1.2500016453999487, 0.3750001645474248},
    {1.875, -1.25, 0.375},
};

void ts_ortho_coefficients(ts_ortho how, int k, float *a, float *b, float *c) {
  if (how == TS_ORTHO_NS) {
    *a = 3.4445f;
    *b = -4.7750f;
    *c = 2.0315f;
  } else if (k >= 7) {
    *a = (float)pe_table[7][0];
    *b = (float)pe_table[7][1];
    *c = (float)pe_table[7][2];
  } else {
    *a = (float)(pe_table[k][0] / 1.01);
    *b = (float)(pe_table[k][1] / (1.01 * 1.01 * 1.01));
    *c = (float)(pe_table[k][2] / (1.01 * 1.01 * 1.01 * 1.01 * 1.01));
  }
}

// The iteration X ← aX + (bA + cA²)X, A = XXᵀ, on the wide orientation, with
// the coefficients of step k; X first divided by its norm·scale + 1e-7.
static void iterate(float *X, int rows, int cols, int steps, float scale, ts_ortho how,
                    float *scratch) {
  const int tall = rows > cols, m = tall ? cols : rows, n = tall ? rows : cols;
  const size_t mn = (size_t)m * n;
  float *W = scratch, *Wn = W + mn, *A = Wn + mn, *A2 = A + (size_t)m * m;
  if (tall) transpose(W, X, rows, cols);
  else memcpy(W, X, mn * sizeof(float));
  const float inv = (float)(1.0 / (frobenius(W, mn) * scale + 1e-7));
  for (size_t i = 0; i < mn; i++) W[i] *= inv;
  for (int k = 0; k < steps; k++) {
    float a, b, c;
    ts_ortho_coefficients(how, k, &a, &b, &c);
    // A = W Wᵀ (m × m); A2 = b·A + c·A·A
    ts_mm(0, 1, m, m, n, 1.0f, W, n, W, n, 0, A, m);
    for (size_t i = 0; i < (size_t)m * m; i++) A2[i] = b * A[i];
    ts_mm(0, 0, m, m, m, c, A, m, A, m, 1, A2, m); // A2 = fma(c, A·A, b·A)
    // W ← a·W + A2·W
    for (size_t i = 0; i < mn; i++) Wn[i] = a * W[i];
    ts_mm(0, 0, m, n, m, 1.0f, A2, m, W, n, 1, Wn, n);
    memcpy(W, Wn, mn * sizeof(float));
  }
  if (tall) transpose(X, W, m, n);
  else memcpy(X, W, mn * sizeof(float));
}

void ts_newton_schulz(float *X, int rows, int cols, int steps, float *scratch) {
  iterate(X, rows, cols, steps, 1.0f, TS_ORTHO_NS, scratch);
}

void ts_polar_express(float *X, int rows, int cols, int steps, float *scratch) {
  iterate(X, rows, cols, steps, 1.01f, TS_ORTHO_PE, scratch);
}

void ts_muon_update(float *p, const float *g, float *buf, int rows, int cols, float lr, float wd,
                    float beta, ts_ortho how, int steps, float *scratch) {
  const size_t n = (size_t)rows * cols;
  float *u = scratch + ts_ortho_scratch(rows, cols) - n; // the copy slot
  for (size_t i = 0; i < n; i++) {
    buf[i] = beta * buf[i] + (1.0f - beta) * g[i];
    u[i] = (1.0f - beta) * g[i] + beta * buf[i];
  }
  if (how == TS_ORTHO_PE) ts_polar_express(u, rows, cols, steps, scratch);
  else ts_newton_schulz(u, rows, cols, steps, scratch);
  const float shape = sqrtf(rows > cols ? (float)rows / (float)cols : 1.0f);
  const float decay = 1.0f - lr * wd;
  for (size_t i = 0; i < n; i++) p[i] = p[i] * decay - lr * (u[i] * shape);
}

void ts_stiefel_tangent(float *out, const float *A, const float *g, int d, int r, float *S) {
  ts_mm(1, 0, r, r, d, 1.0f, A, r, g, r, 0, S, r); // S = Aᵀ g
  for (int i = 0; i < r; i++)
    for (int j = 0; j < i; j++) {
      float s = 0.5f * (S[(size_t)i * r + j] + S[(size_t)j * r + i]);
      S[(size_t)i * r + j] = S[(size_t)j * r + i] = s;
    }
  memcpy(out, g, (size_t)d * r * sizeof(float));
  ts_mm(0, 0, d, r, r, -1.0f, A, r, S, r, 1, out, r); // out = g − A S
}

void ts_spel_step(float *A, const float *g, float *m, int d, int r, float alpha, float beta,
                  int steps, float *scratch) {
  const size_t n = (size_t)d * r;
  float *D = scratch + ts_ortho_scratch(d, r) - n; // the copy slot
  ts_stiefel_tangent(D, A, g, d, r, scratch);      // the Riemannian gradient
  for (size_t i = 0; i < n; i++) {
    m[i] = beta * m[i] + (1.0f - beta) * D[i];
    D[i] = m[i];
  }
  ts_polar_express(D, d, r, steps, scratch); // the direction
  for (size_t i = 0; i < n; i++) A[i] = A[i] - alpha * D[i];
  ts_polar_express(A, d, r, steps, scratch); // the retraction
}

void ts_spel_step_unconstrained(float *A, const float *g, float *m, int d, int r, float alpha,
                                float beta, int steps, float *scratch) {
  const size_t n = (size_t)d * r;
  float *D = scratch + ts_ortho_scratch(d, r) - n; // the copy slot
  for (size_t i = 0; i < n; i++) {
    m[i] = beta * m[i] + (1.0f - beta) * g[i];
    D[i] = m[i];
  }
  ts_polar_express(D, d, r, steps, scratch);
  for (size_t i = 0; i < n; i++) A[i] = A[i] - alpha * D[i];
}

double ts_orthogonality_error(const float *A, int d, int r) {
  double e = 0.0;
  for (int i = 0; i < r; i++)
    for (int j = 0; j < r; j++) {
      double s = 0.0;
      for (int k = 0; k < d; k++) s += (double)A[(size_t)k * r + i] * A[(size_t)k * r + j];
      s -= i == j ? 1.0 : 0.0;
      e += s * s;
    }
  return sqrt(e);
}
