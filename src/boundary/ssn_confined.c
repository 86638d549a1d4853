// Subspace Networks as their paper defines them (--compress ssn-confined):
// the residual stream itself is confined to span(U), so the boundary's
// Z = (X − T[tok])·U loses nothing. `ssn` (ssn.c) is the boundary transform
// alone, on unconstrained weights.
//
// - Confinement. Every tensor that writes the stream (ts_tensor's
//   writes_stream: a layer's output projections and their biases, the
//   embeddings) has its outputs in span(U): projected at init and after
//   every step (W ← U·Uᵀ·W on the output axis; the token embedding
//   wte ← T + (wte − T)·U·Uᵀ, its trainable part decoupled from the frozen
//   table T). Their optimizer is AdamW with one adaptive scale per output
//   vector (confines_stream, train/adamw_rowwise.c), so the projection after
//   the step takes away only what the gradient had outside the subspace.
//   With every writer confined, X − T[tok] lies in span(U) at every
//   boundary, up to rounding.
// - The basis. U (Uᵀ, r × d) is a model tensor, one copy per stage
//   (cmp.s.subspace, rows [0, r)), equal on every stage; the encode of
//   boundary p reads the sender's copy, the decode the receiver's, both owned.
//   Rows [r, 2r) gather the refresh's gradient since the last refresh.
// - The refresh (every --ssn-refresh steps, 500 by default): the gradient of
//   the loss with respect to the decode's Uᵀ, Zᵀ·G at every boundary (G the
//   gradient of X̂), summed over the steps since the last refresh and over
//   the boundaries (the pipeline's stages in their canonical tree), is made
//   tangent to the Grassmann manifold (its rows less their part in span(U)),
//   and U moves against it by a step of Frobenius length --ssn-refresh-step
//   (0.1), retracted by orthonormalising the rows (modified Gram–Schmidt).
//   Then every writer is confined to the new subspace. The paper refreshes
//   about every 500 steps and says no more; the rest is our choice
//   (docs/COMPRESSION.md).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "boundary.h"
#include "exact/rng.h"

typedef struct {
  ts_boundary_buffers b;
  float *table;   // T (V × d), frozen, the seed's (ssn's)
  float *scratch; // the projections' (host): the largest writer, and its coordinates
  size_t scratch_n;
  double *sum;    // the refresh's gradient (r × d)
} confined_state;

static int confined_tensors(const ts_config *cfg, int s, ts_tensor *out) {
  return ts_boundary_declare(out, "cmp.%d.subspace", s, 2 * (int64_t)cfg->compress_rank,
                             cfg->d, TS_ROLE_SUBSPACE);
}

static const char *confined_setting(const ts_config *cfg) {
  return cfg->ssn_refresh ? "--ssn-refresh"
         : cfg->ssn_refresh_step != 0.0f ? "--ssn-refresh-step" : NULL;
}

static int confined_check(ts_config *cfg) {
  int rc = ts_boundary_check_stages(cfg);
  if (rc) return rc;
  if (cfg->ssn_refresh == 0) cfg->ssn_refresh = 500;
  if (cfg->ssn_refresh_step == 0.0f) cfg->ssn_refresh_step = 0.1f;
  if (cfg->ssn_refresh < -1)
    return ts_fail(TS_EUSAGE, "--ssn-refresh %d: steps between refreshes >= 1, or -1: never",
                   cfg->ssn_refresh);
  if (!(cfg->ssn_refresh_step > 0.0f && cfg->ssn_refresh_step <= 1.0f))
    return ts_fail(TS_EUSAGE, "--ssn-refresh-step %g: must be in (0, 1]",
                   (double)cfg->ssn_refresh_step);
  // a dropout mask scales each coordinate of a writer's output on its own
  if (cfg->dropout != 0.0f)
    return ts_fail(TS_EUSAGE, "--dropout %g: not with --compress ssn-confined (a mask takes the "
                   "stream out of the subspace)", (double)cfg->dropout);
  return TS_OK;
}

static int confined_create(const ts_boundary_io *io, void **state) {
  confined_state *k = calloc(1, sizeof *k);
  if (!k) return ts_fail(TS_ERUNTIME, "out of memory");
  *state = k;
  int rc = ts_boundary_buffers_create(io, &k->b);
  if (rc) return rc;
  const size_t d = (size_t)io->C, r = (size_t)k->b.r;
  k->table = io->be->alloc((size_t)io->V * d * sizeof(float));
  k->sum = ts_alloc(r * d * sizeof(double));
  size_t most = 0;
  for (int t = 0; t < io->ntens; t++)
    if (io->ptens[t].writes_stream) {
      const size_t n = (size_t)ts_tensor_numel(&io->ptens[t]);
      if (n > most) most = n;
    }
  // a writer transposed, then its coordinates (its output vectors × r)
  k->scratch_n = most + most / d * r;
  k->scratch = ts_alloc((k->scratch_n ? k->scratch_n : 1) * sizeof(float));
  if (!k->table || !k->sum || !k->scratch)
    return ts_fail(TS_ERUNTIME, "out of memory allocating the boundary buffers");
  return TS_OK;
}

static void confined_destroy(const ts_boundary_io *io) {
  confined_state *k = io->state;
  if (!k) return;
  ts_boundary_buffers_free(io, &k->b);
  io->be->free(k->table);
  ts_free(k->scratch);
  ts_free(k->sum);
  free(k);
}

// Stage s's copy of Uᵀ (r × d) and its gradient slot, among the tensors
// the model holds; NULL: not held.
static float *basis_of(const ts_boundary_io *io, int s, int grad) {
  return ts_boundary_param(io, TS_ROLE_SUBSPACE, s, grad);
}

// The Uᵀ the model's own confinement reads: that of a stage it owns (every
// copy is the same, but a copy of another stage's is not read back on resume).
static const float *own_basis(const ts_boundary_io *io) {
  for (int t = 0; t < io->nown; t++)
    if (io->ptens[t].role == TS_ROLE_SUBSPACE) return io->ptens[t].data;
  return NULL;
}

// rows (n × d) ← rows·U·Uᵀ (less and plus `offset`'s rows when given).
static void project_rows(const ts_boundary_io *io, float *rows, int64_t n, const float *ut,
                         const float *offset, float *coord) {
  confined_state *k = io->state;
  const int d = io->C, r = k->b.r;
  if (offset)
    for (int64_t i = 0; i < n * d; i++) rows[i] -= offset[i];
  io->be->linear_forward(coord, rows, ut, NULL, n, d, r, (int)n);          // X·U
  io->be->linear_backward_input(rows, coord, ut, n, d, r, (int)n, 0);       // ·Uᵀ
  if (offset)
    for (int64_t i = 0; i < n * d; i++) rows[i] += offset[i];
}

// One writer's outputs into span(Uᵀ's rows): along its output axis.
static void confine(const ts_boundary_io *io, const ts_tensor *t, const float *ut) {
  confined_state *k = io->state;
  const int d = io->C;
  const int64_t n = ts_tensor_numel(t) / d; // its output vectors
  float *tr = k->scratch, *coord = k->scratch + ts_tensor_numel(t);
  if (t->writes_stream == 2) { // n × d: rows are outputs (the token embedding: less T)
    project_rows(io, t->data, n, ut, t->role == TS_ROLE_EMBEDDING ? k->table : NULL, coord);
    return;
  }
  if (t->ndim < 2) { // a bias: one output vector
    project_rows(io, t->data, 1, ut, NULL, coord);
    return;
  }
  ts_boundary_transpose(tr, t->data, d, (int)n); // d × in → in × d
  project_rows(io, tr, n, ut, NULL, coord);
  ts_boundary_transpose(t->data, tr, (int)n, d);
}

// Every writer among the model's first nt tensors.
static void confine_all(const ts_boundary_io *io, int nt) {
  const float *ut = own_basis(io);
  if (!ut) return;
  for (int t = 0; t < nt; t++)
    if (io->ptens[t].writes_stream) confine(io, &io->ptens[t], ut);
}

static void confined_init(const ts_boundary_io *io, uint64_t seed) {
  confined_state *k = io->state;
  const int d = io->C, r = k->b.r;
  float *q = k->b.wt; // (d × r) scratch, transposed into place: ssn's U
  ts_boundary_orthonormal(q, k->b.qr, d, r, seed, TS_BASIS_SSN);
  for (int t = 0; t < io->ntens; t++)
    if (io->ptens[t].role == TS_ROLE_SUBSPACE) ts_boundary_transpose(io->ptens[t].data, q, d, r);
  const size_t n = (size_t)io->V * d;
  for (size_t i = 0; i < n; i++)
    k->table[i] = 0.02f * ts_rng_normal(seed, TS_RNG_COMPRESS, TS_BASIS_TABLE, i);
  confine_all(io, io->ntens); // copies too: they must start as their owners
}

// anc ← T[tok], the same table at every boundary.
static void confined_anchor(const ts_boundary_io *io, int s) {
  (void)s;
  confined_state *k = io->state;
  const int64_t N = io->ntok;
  const int d = io->C;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; i++)
    memcpy(k->b.anc + i * d, k->table + (size_t)io->inputs[i] * d, (size_t)d * sizeof(float));
}

// Boundary p's basis: the sender's copy (encode), the receiver's (decode).
static const float *sender_basis(const ts_boundary_io *io, int p) { return basis_of(io, p, 0); }
static const float *receiver_basis(const ts_boundary_io *io, int p) {
  return basis_of(io, p + 1, 0);
}

static const ts_boundary_affine sent = {sender_basis, confined_anchor};
static const ts_boundary_affine received = {receiver_basis, confined_anchor};

static void confined_encode(const ts_boundary_io *io, int p, const float *x) {
  confined_state *k = io->state;
  ts_boundary_affine_encode(io, &sent, p, x, (float *)k->b.wire[p]); // Z is the wire
}

static void confined_decode(const ts_boundary_io *io, int p, const void *wire, float *x) {
  confined_state *k = io->state;
  // the refresh's gradient reads Z after the stage's backward: keep it
  if (wire != k->b.wire[p])
    memcpy(k->b.wire[p], wire, (size_t)io->ntok * k->b.r * sizeof(float));
  ts_boundary_affine_decode(io, &received, p, wire, x);
}

// dZ = G·U; and Uᵀ's gradient through the decode, Zᵀ·G (r × d), into the
// receiver's copy's slot: the refresh's direction.
static int confined_decode_backward(const ts_boundary_io *io, int p, const float *dx, void *dz,
                                    uint64_t step) {
  (void)step;
  confined_state *k = io->state;
  const int64_t N = io->ntok;
  const int d = io->C, r = k->b.r;
  io->be->linear_forward(dz, dx, receiver_basis(io, p), NULL, N, d, r, io->cfg->leaf);
  float *g = basis_of(io, p + 1, 1);
  if (!g) return TS_OK;
  // the slot is in the step's sums: its second half (the sum's) holds zeros,
  // and the first too when nothing is gathered
  memset(g + (size_t)r * d, 0, (size_t)r * d * sizeof(float));
  if (io->cfg->ssn_refresh < 1) {
    memset(g, 0, (size_t)r * d * sizeof(float));
    return TS_OK;
  }
  if (io->be->linear_backward_weights(io->ws, g, NULL, (const float *)k->b.wire[p], dx, N, d, r))
    return ts_fail(TS_ERUNTIME, "out of memory (subspace gradient tree)");
  return TS_OK;
}

static int confined_encode_backward(const ts_boundary_io *io, int p, const void *dz, float *dx,
                                    uint64_t step) {
  (void)step;
  confined_state *k = io->state;
  io->be->linear_backward_input(dx, dz, sender_basis(io, p), io->ntok, io->C, k->b.r,
                                io->cfg->leaf, 0); // dZ·Uᵀ
  // the first stage's copy decodes nothing: its slot gathers zeros
  float *g = p == 0 ? basis_of(io, 0, 1) : NULL;
  if (g) memset(g, 0, 2 * (size_t)k->b.r * io->C * sizeof(float));
  return TS_OK;
}

static int confined_owns(ts_role role) { return role == TS_ROLE_SUBSPACE; }

// The basis stays; its second half gathers this step's gradient of the first.
static void confined_update(const ts_config *cfg, ts_tensor *params, const ts_tensor *grads,
                            int nt, int t, float *moment, float sched, uint64_t step,
                            float *scratch) {
  (void)nt, (void)moment, (void)sched, (void)step, (void)scratch;
  if (cfg->ssn_refresh < 1) return;
  const size_t n = (size_t)cfg->compress_rank * cfg->d;
  float *sum = params[t].data + n;
  const float *g = grads[t].data;
  for (size_t i = 0; i < n; i++) sum[i] += g[i];
}

// The gathered gradients of the stages this model owns, summed over all
// stages in the canonical tree (serial: here, in the tree's order; a
// pipeline: each stage's one, over the stages); then Uᵀ − step·H/‖H‖,
// H the rows' part outside span(U), retracted.
static int refresh(const ts_boundary_io *io, ts_comm *pipe) {
  confined_state *k = io->state;
  const int d = io->C, r = k->b.r, S = k->b.S;
  const size_t n = (size_t)r * d;
  float *own[64] = {0};
  int lo = S, hi = 0;
  for (int t = 0; t < io->nown; t++)
    if (io->ptens[t].role == TS_ROLE_SUBSPACE && io->ptens[t].index < 64) {
      const int s = io->ptens[t].index;
      own[s] = io->ptens[t].data;
      lo = s < lo ? s : lo, hi = s + 1 > hi ? s + 1 : hi;
    }
  if (lo >= hi) return TS_OK;
  // the tree over the stages: distance 1, 2, 4 …, the lower on the left
  for (int h = 1; h < hi - lo; h *= 2)
    for (int s = lo; s + h < hi; s += 2 * h)
      for (size_t i = 0; i < n; i++) own[s][n + i] += own[s + h][n + i];
  float *total = own[lo] + n;
  int rc = pipe && pipe->size > 1 ? ts_comm_allreduce_tree(pipe, total, n, -1) : TS_OK;
  if (rc) return rc;
  const float *ut = own[lo];
  // H = M − (M·U)·Uᵀ, in double
  double *h = k->sum, norm = 0.0;
  for (int i = 0; i < r; i++) {
    const float *m = total + (size_t)i * d;
    for (int t = 0; t < d; t++) h[(size_t)i * d + t] = m[t];
    for (int j = 0; j < r; j++) {
      const float *u = ut + (size_t)j * d;
      double c = 0.0;
      for (int t = 0; t < d; t++) c += (double)m[t] * u[t];
      for (int t = 0; t < d; t++) h[(size_t)i * d + t] -= c * u[t];
    }
  }
  for (size_t i = 0; i < n; i++) norm += h[i] * h[i];
  norm = sqrt(norm);
  float *next = k->b.wt; // r × d
  for (size_t i = 0; i < n; i++)
    next[i] = norm > 0.0 ? (float)(ut[i] - io->cfg->ssn_refresh_step * h[i] / norm) : ut[i];
  ts_boundary_orthonormalise_rows(next, k->b.qr, r, d);
  for (int t = 0; t < io->ntens; t++) // every copy held, and a fresh sum
    if (io->ptens[t].role == TS_ROLE_SUBSPACE) {
      memcpy(io->ptens[t].data, next, n * sizeof(float));
      memset(io->ptens[t].data + n, 0, n * sizeof(float));
    }
  return TS_OK;
}

static int confined_after_step(const ts_boundary_io *io, ts_comm *pipe, uint64_t step) {
  const int every = io->cfg->ssn_refresh;
  if (every > 0 && step % (uint64_t)every == 0) {
    int rc = refresh(io, pipe);
    if (rc) return rc;
  }
  confine_all(io, io->nown); // a copy comes from its owner after this
  return TS_OK;
}

const ts_boundary ts_boundary_ssn_confined = {
    .name = "ssn-confined",
    .confines_stream = 1,
    .own_setting = confined_setting,
    .check = confined_check,
    .wire_bytes = ts_boundary_float_wire,
    .tensors = confined_tensors,
    .activation_floats = ts_boundary_buffer_floats,
    .create = confined_create,
    .destroy = confined_destroy,
    .init = confined_init,
    .encode = confined_encode,
    .wire = ts_boundary_buffers_wire,
    .decode = confined_decode,
    .decode_backward = confined_decode_backward,
    .encode_backward = confined_encode_backward,
    .dz = ts_boundary_buffers_dz,
    .owns = confined_owns,
    .update = confined_update,
    .after_step = confined_after_step,
};
