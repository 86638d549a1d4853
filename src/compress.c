// Stage-boundary compression: encode, decode and their backwards (compress.h).
#include "compress.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "rng.h"
#include "util.h"
#include "vq.h"

struct compress {
  int mode, S, per, r;
  float *basis;   // ssn: Uᵀ (r × d), frozen
  float *table;   // ssn: T (V × d), frozen
  float **fixed;  // mapl*: P_s (r × d) per stage, frozen
  float **y;      // per boundary (rows × d): X minus the sender's anchor, for A's gradient
  float **arow;   // per stage (rows × r): gradient rows of its anchor
  unsigned char **wire; // per boundary: what crosses it forward (Z, or mapl-vq's codes)
  float *dz;      // (rows × r): dZ back
  ts_vq_shape vq; // mapl-vq
  float **zkeep;  // mapl-vq, per boundary (rows × r): Z before quantisation
  float *dzq;     // mapl-vq (rows × r): dZ with the commitment term
  int64_t *cand;  // mapl-vq: each code's candidate row (vq.h)
  float *gath;    // (rows × r): gathered anchor rows
  float *anc;     // (rows × d): anchor rows
  float *wt, *dwt; // (r × d): A_pᵀ of the boundary being run, and its gradient
  double *qr;     // (d × r): compress_init's orthonormalisation
};

static const uint64_t BASIS_SSN = 0, BASIS_TABLE = 1, BASIS_FIXED = 2, BASIS_PROJ = 1u << 20;

// Bytes of one row forward: r floats, or mapl-vq's R·r/G codes.
static size_t row_bytes(const ts_config *c) {
  if (c->compress != TS_COMPRESS_MAPL_VQ) return (size_t)c->compress_rank * sizeof(float);
  ts_vq_shape q;
  ts_vq_shape_of(c, &q);
  return ts_vq_row_bytes(&q);
}

size_t compress_activation_floats(const ts_model *m) {
  const ts_config *c = &m->cfg;
  if (!c->compress) return 0;
  const size_t N = (size_t)m->ntok, d = (size_t)m->C, r = (size_t)c->compress_rank;
  const size_t S = (size_t)c->compress_stages, vq = c->compress == TS_COMPRESS_MAPL_VQ;
  return (S - 1) * (N * d + N * (row_bytes(c) + 3) / 4 + vq * N * r) + S * N * r + 3 * N * r +
         N * d + 2 * r * d;
}

size_t compress_leaf_floats(const ts_config *cfg) {
  if (cfg->compress != TS_COMPRESS_MAPL_VQ) return 0;
  ts_vq_shape q;
  ts_vq_shape_of(cfg, &q);
  return ts_vq_stat_floats(&q);
}

int compress_create(ts_model *m) {
  const ts_config *c = &m->cfg;
  struct compress *k = calloc(1, sizeof *k);
  if (!k) return ts_fail(TS_ERUNTIME, "out of memory");
  m->cmp = k;
  k->mode = c->compress;
  k->S = c->compress_stages;
  k->per = m->L / k->S;
  k->r = c->compress_rank;
  const size_t N = (size_t)m->ntok, d = (size_t)m->C, r = (size_t)k->r, V = (size_t)m->V;
  k->y = calloc((size_t)k->S, sizeof(float *));
  k->arow = calloc((size_t)k->S, sizeof(float *));
  k->fixed = calloc((size_t)k->S, sizeof(float *));
  k->wire = calloc((size_t)k->S, sizeof(unsigned char *));
  k->zkeep = calloc((size_t)k->S, sizeof(float *));
  if (!k->y || !k->arow || !k->fixed || !k->wire || !k->zkeep)
    return ts_fail(TS_ERUNTIME, "out of memory");
  const int vq = k->mode == TS_COMPRESS_MAPL_VQ;
  ts_vq_shape_of(c, &k->vq);
  int bad = 0;
#define GET(PTR, COUNT) bad |= !((PTR) = m->be->alloc((COUNT) * sizeof(float)))
  for (int p = 0; p + 1 < k->S; p++) {
    GET(k->y[p], N * d);
    bad |= !(k->wire[p] = m->be->alloc(N * row_bytes(c)));
    if (vq) GET(k->zkeep[p], N * r);
  }
  if (vq) {
    GET(k->dzq, N * r);
    bad |= !(k->cand = ts_alloc(ts_vq_ncodes(&k->vq) * sizeof(int64_t))); // host scratch
  }
  GET(k->dz, N * r);
  GET(k->anc, N * d);
  GET(k->wt, r * d);
  bad |= !(k->qr = ts_alloc(r * d * sizeof(double))); // host scratch
  if (k->mode == TS_COMPRESS_SSN) {
    GET(k->basis, r * d);
    GET(k->table, V * d);
  } else {
    for (int s = 0; s < k->S; s++) {
      GET(k->fixed[s], r * d);
      GET(k->arow[s], N * r);
    }
    GET(k->gath, N * r);
    GET(k->dwt, r * d);
  }
#undef GET
  if (bad) return ts_fail(TS_ERUNTIME, "out of memory allocating the boundary buffers");
  return TS_OK;
}

void compress_free(ts_model *m) {
  struct compress *k = m->cmp;
  if (!k) return;
  for (int s = 0; s < k->S; s++) {
    if (k->wire) m->be->free(k->wire[s]);
    if (k->zkeep) m->be->free(k->zkeep[s]);
    if (k->y) m->be->free(k->y[s]);
    if (k->arow) m->be->free(k->arow[s]);
    if (k->fixed) m->be->free(k->fixed[s]);
  }
  free(k->wire);
  free(k->zkeep);
  m->be->free(k->dzq);
  ts_free(k->cand);
  free(k->y);
  free(k->arow);
  free(k->fixed);
  m->be->free(k->basis);
  m->be->free(k->table);
  m->be->free(k->dz);
  m->be->free(k->gath);
  m->be->free(k->anc);
  m->be->free(k->wt);
  m->be->free(k->dwt);
  ts_free(k->qr);
  free(k);
  m->cmp = NULL;
}

// q (n × k, row-major) ← the Q of the QR factorisation of a seeded Gaussian
// n × k matrix: modified Gram–Schmidt in double (a, n × k, scratch), so its
// columns are orthonormal to double rounding before the final cast.
static void seeded_orthonormal(float *q, double *a, int n, int k, uint64_t seed, uint64_t which) {
  for (size_t i = 0; i < (size_t)n * k; i++)
    a[i] = ts_rng_normal(seed, TS_RNG_COMPRESS, which, i);
  for (int j = 0; j < k; j++) {
    for (int i = 0; i < j; i++) {
      double dot = 0.0;
      for (int t = 0; t < n; t++) dot += a[(size_t)t * k + i] * a[(size_t)t * k + j];
      for (int t = 0; t < n; t++) a[(size_t)t * k + j] -= dot * a[(size_t)t * k + i];
    }
    double nrm = 0.0;
    for (int t = 0; t < n; t++) nrm += a[(size_t)t * k + j] * a[(size_t)t * k + j];
    nrm = sqrt(nrm);
    for (int t = 0; t < n; t++) a[(size_t)t * k + j] /= nrm;
  }
  for (size_t i = 0; i < (size_t)n * k; i++) q[i] = (float)a[i];
}

static void transpose(float *out, const float *in, int rows, int cols) {
  for (int i = 0; i < rows; i++)
    for (int j = 0; j < cols; j++) out[(size_t)j * rows + i] = in[(size_t)i * cols + j];
}

void compress_init(ts_model *m, uint64_t seed) {
  struct compress *k = m->cmp;
  if (!k) return;
  const int d = m->C, r = k->r;
  float *q = k->wt; // (d × r) scratch, transposed into place
  if (k->mode == TS_COMPRESS_SSN) {
    seeded_orthonormal(q, k->qr, d, r, seed, BASIS_SSN);
    transpose(k->basis, q, d, r);
    const size_t n = (size_t)m->V * d;
    for (size_t i = 0; i < n; i++)
      k->table[i] = 0.02f * ts_rng_normal(seed, TS_RNG_COMPRESS, BASIS_TABLE, i);
    return;
  }
  for (int s = 0; s < k->S; s++) {
    seeded_orthonormal(q, k->qr, d, r, seed, BASIS_FIXED + (uint64_t)s);
    transpose(k->fixed[s], q, d, r);
  }
  // the projectors start on St(d, r), each its own random point
  for (int p = 0; p + 1 < k->S; p++) {
    seeded_orthonormal(m->p.proj[p], k->qr, d, r, seed, BASIS_PROJ + (uint64_t)p);
    if (k->mode == TS_COMPRESS_MAPL_VQ)
      ts_vq_init(&k->vq, seed, p, m->p.vq_count[p], m->p.vq_sum[p], m->p.vq_codes[p],
                 m->p.vq_recv[p]);
  }
}

int compress_boundary_at(const ts_model *m, int l) {
  const struct compress *k = m->cmp;
  if (!k || l <= 0 || l >= m->L || l % k->per != 0) return -1;
  return l / k->per - 1;
}

size_t compress_wire_bytes(const ts_model *m, int backward) {
  if (!m->cmp) return (size_t)m->C * sizeof(float);
  return backward ? (size_t)m->cmp->r * sizeof(float) : row_bytes(&m->cfg);
}
void *compress_wire(const ts_model *m, int p) { return m->cmp->wire[p]; }
float *compress_dz(const ts_model *m) { return m->cmp->dz; }

// anc (rows × d) ← stage s's anchor rows of the model's tokens.
static void anchor_rows(ts_model *m, int s) {
  struct compress *k = m->cmp;
  const int64_t N = m->ntok;
  const int d = m->C, r = k->r;
  if (k->mode == TS_COMPRESS_SSN) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++)
      memcpy(k->anc + i * d, k->table + (size_t)m->inputs[i] * d, (size_t)d * sizeof(float));
    return;
  }
  const float *E = m->p.anchor[s];
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; i++)
    memcpy(k->gath + i * r, E + (size_t)m->inputs[i] * r, (size_t)r * sizeof(float));
  // E_s[tok]·P_s: (rows × r)(r × d)
  m->be->linear_backward_input(k->anc, k->gath, k->fixed[s], N, d, r, m->cfg.leaf, 0);
}

// wt ← the matrix whose rows span boundary p's subspace: Uᵀ or A_pᵀ.
static const float *basis_rows(ts_model *m, int p) {
  struct compress *k = m->cmp;
  if (k->mode == TS_COMPRESS_SSN) return k->basis;
  transpose(k->wt, m->p.proj[p], m->C, k->r);
  return k->wt;
}

void compress_encode(ts_model *m, int p, const float *x) {
  struct compress *k = m->cmp;
  const int64_t N = m->ntok;
  const int d = m->C;
  const int vq = k->mode == TS_COMPRESS_MAPL_VQ;
  float *y = k->y[p], *z = vq ? k->zkeep[p] : (float *)k->wire[p];
  anchor_rows(m, p);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N * d; i++) y[i] = x[i] - k->anc[i];
  m->be->linear_forward(z, y, basis_rows(m, p), NULL, N, d, k->r, m->cfg.leaf); // Y·A
  if (vq) ts_vq_encode(&k->vq, m->p.vq_codes[p], z, N, k->wire[p], NULL);
}

void compress_decode(ts_model *m, int p, const void *wire, float *x) {
  struct compress *k = m->cmp;
  const int64_t N = m->ntok;
  const int d = m->C;
  const float *z = wire;
  if (k->mode == TS_COMPRESS_MAPL_VQ) { // the receiver's copy of the codebooks
    ts_vq_decode(&k->vq, m->p.vq_recv[p], wire, N, k->dzq);
    z = k->dzq;
  }
  m->be->linear_backward_input(x, z, basis_rows(m, p), N, d, k->r, m->cfg.leaf, 0); // Z·Aᵀ
  anchor_rows(m, p + 1);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N * d; i++) x[i] = x[i] + k->anc[i];
}

typedef struct {
  const ts_model *m;
  const float *rows;
} anchor_leaf_ctx;

static void anchor_leaf(const void *vctx, int64_t li, float *out) {
  const anchor_leaf_ctx *c = vctx;
  const int r = c->m->cmp->r;
  memset(out, 0, (size_t)c->m->V * r * sizeof(float));
  encoder_wte_leaf_scatter(out, c->rows, c->m->inputs, li, c->m->cfg.leaf, r);
}

// Stage s's anchor gradient from its rows: the tree over leaves of their
// scatter by token.
static int anchor_grad(ts_model *m, int s) {
  anchor_leaf_ctx c = {m, m->cmp->arow[s]};
  return ts_leaf_tree_sum(&m->ws, m->g.anchor[s], (size_t)m->V * m->cmp->r,
                          m->ntok / m->cfg.leaf, anchor_leaf, &c);
}

int compress_decode_backward(ts_model *m, int p, const float *dx, float *dz) {
  struct compress *k = m->cmp;
  const int64_t N = m->ntok;
  const int d = m->C, r = k->r, s = p + 1;
  m->be->linear_forward(dz, dx, basis_rows(m, p), NULL, N, d, r, m->cfg.leaf); // G·A
  if (k->mode == TS_COMPRESS_SSN) return TS_OK;
  // G·P_sᵀ: the receiving stage's anchor rows, after its output boundary's
  float *a = k->arow[s];
  if (s == k->S - 1) {
    m->be->linear_forward(a, dx, k->fixed[s], NULL, N, d, r, m->cfg.leaf);
  } else {
    m->be->linear_forward(k->gath, dx, k->fixed[s], NULL, N, d, r, m->cfg.leaf);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N * r; i++) a[i] = a[i] + k->gath[i];
  }
  if (anchor_grad(m, s)) return ts_fail(TS_ERUNTIME, "out of memory (anchor gradient tree)");
  return TS_OK;
}

typedef struct {
  const ts_model *m;
  int p;
} stats_leaf_ctx;

static void stats_leaf(const void *vctx, int64_t li, float *out) {
  const stats_leaf_ctx *c = vctx;
  const struct compress *k = c->m->cmp;
  ts_vq_stats_leaf(&k->vq, c->m->p.vq_codes[c->p], k->zkeep[c->p], k->wire[c->p], k->cand, li,
                   c->m->cfg.leaf, out);
}

// mapl-vq's part of boundary p's backward: the step's codebook statistics
// into the gradient slots of its count, sum and codes (vq.h), and dZ plus
// the commitment term into k->dzq, which it returns.
static const float *vq_backward(ts_model *m, int p, const float *dz, uint64_t step) {
  struct compress *k = m->cmp;
  const int64_t N = m->ntok;
  const int r = k->r;
  ts_vq_candidates(&k->vq, m->cfg.seed, p, step, m->ntok_global, (int64_t)m->b0 * m->T, N,
                   k->cand);
  stats_leaf_ctx c = {m, p};
  if (ts_leaf_tree_sum(&m->ws, m->g.vq_count[p], ts_vq_stat_floats(&k->vq), N / m->cfg.leaf,
                       stats_leaf, &c))
    return NULL;
  memset(m->g.vq_recv[p], 0, ts_vq_ncodes(&k->vq) * (size_t)k->vq.G * sizeof(float));
  // ẑ by the sender's own codebook, and d/dz of w·Σ‖z − sg(ẑ)‖²/(tokens·r)
  ts_vq_decode(&k->vq, m->p.vq_codes[p], k->wire[p], N, k->dzq);
  const float scale = 2.0f * k->vq.commit / ((float)m->ntok_global * (float)r);
  const float *z = k->zkeep[p];
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N * r; i++) k->dzq[i] = dz[i] + scale * (z[i] - k->dzq[i]);
  return k->dzq;
}

int compress_encode_backward(ts_model *m, int p, const float *dz, float *dx, uint64_t step) {
  struct compress *k = m->cmp;
  const int64_t N = m->ntok;
  const int d = m->C, r = k->r;
  if (k->mode == TS_COMPRESS_MAPL_VQ && !(dz = vq_backward(m, p, dz, step)))
    return ts_fail(TS_ERUNTIME, "out of memory (codebook statistics tree)");
  m->be->linear_backward_input(dx, dz, basis_rows(m, p), N, d, r, m->cfg.leaf, 0); // dZ·Aᵀ
  if (k->mode == TS_COMPRESS_SSN) return TS_OK;
  // A_p's gradient Yᵀ·dZ, computed as (dZᵀ·Y)ᵀ by the weight-gradient tree
  if (m->be->linear_backward_weights(&m->ws, k->dwt, NULL, dz, k->y[p], N, d, r))
    return ts_fail(TS_ERUNTIME, "out of memory (projector gradient tree)");
  transpose(m->g.proj[p], k->dwt, r, d);
  // the sender subtracted its anchor: −dX·P_pᵀ
  float *a = k->arow[p];
  m->be->linear_forward(a, dx, k->fixed[p], NULL, N, d, r, m->cfg.leaf);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N * r; i++) a[i] = -a[i];
  if (p == 0 && anchor_grad(m, 0)) return ts_fail(TS_ERUNTIME, "out of memory (anchor gradient tree)");
  return TS_OK;
}
