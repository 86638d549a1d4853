// The SSN baseline (--compress ssn): Z = (X − T[tok])·U, X̂ = Z·Uᵀ + T[tok],
// with U (d × r, the Q of a seeded Gaussian's QR) and the token table T
// (V × d, seeded, std 0.02) frozen and shared by every boundary. It learns
// nothing, so it has no tensors and nothing to send after a step. (Its
// boundary transform only: the paper's SSN also confines the weights to
// span(U), tessera's does not; docs/COMPRESSION.md.)
#include <stdlib.h>
#include <string.h>

#include "boundary.h"
#include "exact/rng.h"

typedef struct {
  ts_boundary_buffers b;
  float *basis; // Uᵀ (r × d), frozen
  float *table; // T (V × d), frozen
} ssn_state;

static int ssn_create(const ts_boundary_io *io, void **state) {
  ssn_state *k = calloc(1, sizeof *k);
  if (!k) return ts_fail(TS_ERUNTIME, "out of memory");
  *state = k;
  int rc = ts_boundary_buffers_create(io, &k->b);
  if (rc) return rc;
  const size_t d = (size_t)io->C, r = (size_t)k->b.r, V = (size_t)io->V;
  k->basis = io->be->alloc(r * d * sizeof(float));
  k->table = io->be->alloc(V * d * sizeof(float));
  if (!k->basis || !k->table)
    return ts_fail(TS_ERUNTIME, "out of memory allocating the boundary buffers");
  return TS_OK;
}

static void ssn_destroy(const ts_boundary_io *io) {
  ssn_state *k = io->state;
  if (!k) return;
  ts_boundary_buffers_free(io, &k->b);
  io->be->free(k->basis);
  io->be->free(k->table);
  free(k);
}

static void ssn_init(const ts_boundary_io *io, uint64_t seed) {
  ssn_state *k = io->state;
  const int d = io->C, r = k->b.r;
  float *q = k->b.wt; // (d × r) scratch, transposed into place
  ts_boundary_orthonormal(q, k->b.qr, d, r, seed, TS_BASIS_SSN);
  ts_boundary_transpose(k->basis, q, d, r);
  const size_t n = (size_t)io->V * d;
  for (size_t i = 0; i < n; i++)
    k->table[i] = 0.02f * ts_rng_normal(seed, TS_RNG_COMPRESS, TS_BASIS_TABLE, i);
}

// anc ← T[tok], the same table at every boundary.
static void ssn_anchor(const ts_boundary_io *io, int s) {
  (void)s;
  ssn_state *k = io->state;
  const int64_t N = io->ntok;
  const int d = io->C;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; i++)
    memcpy(k->b.anc + i * d, k->table + (size_t)io->inputs[i] * d, (size_t)d * sizeof(float));
}

static const float *ssn_basis(const ts_boundary_io *io, int p) {
  (void)p;
  return ((ssn_state *)io->state)->basis;
}

static const ts_boundary_affine ssn_affine = {ssn_basis, ssn_anchor};

static void ssn_encode(const ts_boundary_io *io, int p, const float *x) {
  ssn_state *k = io->state;
  ts_boundary_affine_encode(io, &ssn_affine, p, x, (float *)k->b.wire[p]); // Z is the wire
}

static void ssn_decode(const ts_boundary_io *io, int p, const void *wire, float *x) {
  ts_boundary_affine_decode(io, &ssn_affine, p, wire, x);
}

static int ssn_decode_backward(const ts_boundary_io *io, int p, const float *dx, void *dz,
                               uint64_t step) {
  (void)p, (void)step;
  ssn_state *k = io->state;
  io->be->linear_forward(dz, dx, k->basis, NULL, io->ntok, io->C, k->b.r, io->cfg->leaf); // G·U
  return TS_OK;
}

static int ssn_encode_backward(const ts_boundary_io *io, int p, const void *dz, float *dx,
                               uint64_t step) {
  (void)p, (void)step;
  ssn_state *k = io->state;
  io->be->linear_backward_input(dx, dz, k->basis, io->ntok, io->C, k->b.r, io->cfg->leaf, 0); // dZ·Uᵀ
  return TS_OK;
}

const ts_boundary ts_boundary_ssn = {
    .name = "ssn",
    .check = ts_boundary_check_stages,
    .wire_bytes = ts_boundary_float_wire,
    .activation_floats = ts_boundary_buffer_floats,
    .create = ssn_create,
    .destroy = ssn_destroy,
    .init = ssn_init,
    .encode = ssn_encode,
    .wire = ts_boundary_buffers_wire,
    .decode = ssn_decode,
    .decode_backward = ssn_decode_backward,
    .encode_backward = ssn_encode_backward,
    .dz = ts_boundary_buffers_dz,
};
