// The codec registry, the common configuration rules, and the pieces several
// codecs share (boundary.h).
#include "boundary.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "exact/rng.h"

#define TS_BOUNDARY(ID, NAME, TABLE) extern const ts_boundary TABLE;
#include "codecs.def"
#undef TS_BOUNDARY

static const ts_boundary *const registry[TS_COMPRESS_NMODES] = {
#define TS_BOUNDARY(ID, NAME, TABLE) [TS_COMPRESS_##ID] = &TABLE,
#include "codecs.def"
#undef TS_BOUNDARY
};

const char *const ts_compress_names[TS_COMPRESS_NMODES] = {
#define TS_BOUNDARY(ID, NAME, TABLE) [TS_COMPRESS_##ID] = NAME,
#include "codecs.def"
#undef TS_BOUNDARY
};

const char *const ts_mapl_anchor_names[TS_ANCHOR_NKINDS] = {
    [TS_ANCHOR_FACTORISED] = "factorised", [TS_ANCHOR_NONE] = "none",
    [TS_ANCHOR_STATIC] = "static", [TS_ANCHOR_FULL] = "full"};

const ts_boundary *ts_boundary_get(int mode) {
  return mode >= 0 && mode < TS_COMPRESS_NMODES ? registry[mode] : NULL;
}

int ts_boundary_finalize(ts_config *cfg) {
  const ts_boundary *bd = ts_boundary_get(cfg->compress);
  if (!bd) return ts_fail(TS_EUSAGE, "compress %d: unknown", cfg->compress);
  // a setting the codec does not use is refused, not silently dropped
  for (int k = 0; k < TS_COMPRESS_NMODES; k++) {
    const ts_boundary *other = registry[k];
    const char *flag = other != bd && other->own_setting ? other->own_setting(cfg) : NULL;
    if (flag) return ts_fail(TS_EUSAGE, "%s: only with --compress %s", flag, other->name);
  }
  if (!bd->learns_projector && cfg->proj_lr != 0.0f)
    return ts_fail(TS_EUSAGE, "--proj-lr %g: only with a learned projector (--compress mapl, "
                   "mapl-unconstrained or mapl-vq)", (double)cfg->proj_lr);
  if (cfg->mapl_anchor < 0 || cfg->mapl_anchor >= TS_ANCHOR_NKINDS)
    return ts_fail(TS_EUSAGE, "mapl_anchor %d: unknown", cfg->mapl_anchor);
  if (!bd->anchor_kinds && cfg->mapl_anchor != TS_ANCHOR_FACTORISED)
    return ts_fail(TS_EUSAGE, "--mapl-anchor %s: only with --compress mapl or mapl-vq",
                   ts_mapl_anchor_names[cfg->mapl_anchor]);
  return bd->check(cfg);
}

int ts_boundary_check_stages(ts_config *cfg) {
  const char *name = ts_compress_names[cfg->compress];
  const int r = cfg->compress_rank, S = cfg->compress_stages;
  if (r < 1) return ts_fail(TS_EUSAGE, "--compress %s: needs --rank R, 1 <= R <= d (%d)", name, cfg->d);
  if (r > cfg->d)
    return ts_fail(TS_EUSAGE, "--rank %d: larger than the model width d = %d (nothing to compress)",
                   r, cfg->d);
  if (S < 2)
    return ts_fail(TS_EUSAGE, "--compress %s: needs stage boundaries: --pp P or --compress-stages "
                   "S >= 2 (got %d)", name, S);
  if (cfg->n_layer % S != 0)
    return ts_fail(TS_EUSAGE, "--compress-stages %d: the %d layers must divide into %d stages", S,
                   cfg->n_layer, S);
  return TS_OK;
}

int ts_boundary_at(const ts_config *cfg, int l) {
  const int S = cfg->compress_stages, L = cfg->n_layer; // S 0 for the identity: no boundaries
  if (S < 2 || l <= 0 || l >= L || l % (L / S) != 0) return -1;
  return l / (L / S) - 1;
}

int ts_boundary_declare(ts_tensor *out, const char *fmt, int index, int64_t s0, int64_t s1,
                        ts_role role) {
  *out = (ts_tensor){.ndim = s1 ? 2 : 1, .shape = {s0, s1}, .role = role, .index = index};
  snprintf(out->name, sizeof out->name, fmt, index);
  return 1;
}

size_t ts_boundary_float_wire(const ts_config *cfg, int backward) {
  (void)backward;
  return (size_t)cfg->compress_rank * sizeof(float);
}

float *ts_boundary_param(const ts_boundary_io *io, ts_role role, int index, int grad) {
  const int i = ts_tensor_find(io->ptens, io->ntens, role, index);
  if (i < 0) return NULL;
  return (grad ? io->gtens : io->ptens)[i].data;
}

// ---- the buffers --------------------------------------------------------------------------
int ts_boundary_buffers_create(const ts_boundary_io *io, ts_boundary_buffers *b) {
  const ts_config *c = io->cfg;
  b->S = c->compress_stages;
  b->r = c->compress_rank;
  const size_t N = (size_t)io->ntok, d = (size_t)io->C, r = (size_t)b->r;
  b->y = calloc((size_t)b->S, sizeof(float *));
  b->wire = calloc((size_t)b->S, sizeof(unsigned char *));
  if (!b->y || !b->wire) return ts_fail(TS_ERUNTIME, "out of memory");
  int bad = 0;
  for (int p = 0; p + 1 < b->S; p++) {
    bad |= !(b->y[p] = io->be->alloc(N * d * sizeof(float)));
    bad |= !(b->wire[p] = io->be->alloc(N * io->bd->wire_bytes(c, 0)));
  }
  bad |= !(b->dz = io->be->alloc(N * r * sizeof(float)));
  bad |= !(b->anc = io->be->alloc(N * d * sizeof(float)));
  bad |= !(b->wt = io->be->alloc(r * d * sizeof(float)));
  bad |= !(b->qr = ts_alloc(r * d * sizeof(double))); // host scratch
  if (bad) return ts_fail(TS_ERUNTIME, "out of memory allocating the boundary buffers");
  return TS_OK;
}

void ts_boundary_buffers_free(const ts_boundary_io *io, ts_boundary_buffers *b) {
  for (int p = 0; p < b->S; p++) {
    if (b->wire) io->be->free(b->wire[p]);
    if (b->y) io->be->free(b->y[p]);
  }
  free(b->wire);
  free(b->y);
  io->be->free(b->dz);
  io->be->free(b->anc);
  io->be->free(b->wt);
  ts_free(b->qr);
}

size_t ts_boundary_buffer_floats(const ts_boundary_io *io) {
  const ts_config *c = io->cfg;
  const size_t N = (size_t)io->ntok, d = (size_t)io->C, r = (size_t)c->compress_rank;
  const size_t S = (size_t)c->compress_stages, row = io->bd->wire_bytes(c, 0);
  return (S - 1) * (N * d + N * (row + 3) / 4) + S * N * r + 3 * N * r + N * d + 2 * r * d;
}

void *ts_boundary_buffers_wire(const ts_boundary_io *io, int p) {
  return ((const ts_boundary_buffers *)io->state)->wire[p];
}

void *ts_boundary_buffers_dz(const ts_boundary_io *io) {
  return ((const ts_boundary_buffers *)io->state)->dz;
}

// ---- the affine map -----------------------------------------------------------------------
void ts_boundary_affine_encode(const ts_boundary_io *io, const ts_boundary_affine *f, int p, const float *x,
                               float *z) {
  ts_boundary_buffers *b = io->state;
  const int64_t N = io->ntok;
  const int d = io->C;
  float *y = b->y[p];
  f->anchor(io, p);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N * d; i++) y[i] = x[i] - b->anc[i];
  io->be->linear_forward(z, y, f->basis(io, p), NULL, N, d, b->r, io->cfg->leaf); // Y·Bᵀ
}

void ts_boundary_affine_decode(const ts_boundary_io *io, const ts_boundary_affine *f, int p, const float *z,
                               float *x) {
  ts_boundary_buffers *b = io->state;
  const int64_t N = io->ntok;
  const int d = io->C;
  if (io->identity) // the probe: B as the identity, so the stream less the sender's anchor
    io->be->copy(x, b->y[p], (size_t)N * d * sizeof(float));
  else
    io->be->linear_backward_input(x, z, f->basis(io, p), N, d, b->r, io->cfg->leaf, 0); // Z·B
  f->anchor(io, p + 1);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N * d; i++) x[i] = x[i] + b->anc[i];
}

// ---- seeded bases -------------------------------------------------------------------------
void ts_boundary_orthonormal(float *q, double *a, int n, int k, uint64_t seed, uint64_t which) {
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

void ts_boundary_orthonormalise_rows(float *rows, double *a, int k, int n) {
  for (size_t i = 0; i < (size_t)k * n; i++) a[i] = rows[i];
  for (int j = 0; j < k; j++) {
    double *aj = a + (size_t)j * n;
    for (int i = 0; i < j; i++) {
      const double *ai = a + (size_t)i * n;
      double dot = 0.0;
      for (int t = 0; t < n; t++) dot += ai[t] * aj[t];
      for (int t = 0; t < n; t++) aj[t] -= dot * ai[t];
    }
    double nrm = 0.0;
    for (int t = 0; t < n; t++) nrm += aj[t] * aj[t];
    nrm = sqrt(nrm);
    for (int t = 0; t < n; t++) aj[t] /= nrm;
  }
  for (size_t i = 0; i < (size_t)k * n; i++) rows[i] = (float)a[i];
}

void ts_boundary_transpose(float *out, const float *in, int rows, int cols) {
  for (int i = 0; i < rows; i++)
    for (int j = 0; j < cols; j++) out[(size_t)j * rows + i] = in[(size_t)i * cols + j];
}
