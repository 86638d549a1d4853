// MAPL (--compress mapl) and its two ablations, which differ only in how the
// projectors move after a step (mapl.h):
//   mapl                SPEL: on St(d, r), by the Riemannian gradient's momentum
//                       and a Polar Express retraction (docs/ALGORITHMS.md §8)
//   mapl-unconstrained  the same momentum and direction without the tangent
//                       projection and the retraction: A_p leaves the manifold
//   mapl-frozen         not at all: A_p stays at its seeded start, the anchors learn
// and, for mapl and mapl-vq, four anchors (--mapl-anchor, mapl.h): the
// factorised one, none, a static seeded table and a full learned table.
#include "mapl.h"

#include <stdlib.h>
#include <string.h>

#include "backend/kernels.h"
#include "backend/orthogonal.h"
#include "exact/rng.h"

// Polar Express steps of the projectors' direction and retraction
// (docs/ALGORITHMS.md §8: fewer than 8 leave AᵀA − I at 1e-2 or worse).
#define SPEL_STEPS 10

// Stage s's anchor E_s (V × r) and boundary p's projector A_p (d × r), or
// their gradients (grad 1).
static float *anchor_table(const ts_boundary_io *io, int s, int grad) {
  return ts_boundary_param(io, TS_ROLE_ANCHOR, s, grad);
}
static float *projector(const ts_boundary_io *io, int p, int grad) {
  return ts_boundary_param(io, TS_ROLE_PROJECTOR, p, grad);
}

int ts_mapl_anchor_width(const ts_config *cfg) {
  switch (cfg->mapl_anchor) {
  case TS_ANCHOR_FACTORISED: return cfg->compress_rank;
  case TS_ANCHOR_FULL: return cfg->d;
  default: return 0;
  }
}

int ts_mapl_create(const ts_boundary_io *io, ts_mapl *k) {
  int rc = ts_boundary_buffers_create(io, &k->b);
  if (rc) return rc;
  const int S = k->b.S;
  k->kind = io->cfg->mapl_anchor;
  k->aw = ts_mapl_anchor_width(io->cfg);
  k->fixed = calloc((size_t)S, sizeof(float *));
  k->arow = calloc((size_t)S, sizeof(float *));
  if (!k->fixed || !k->arow) return ts_fail(TS_ERUNTIME, "out of memory");
  const size_t N = (size_t)io->ntok, d = (size_t)io->C, r = (size_t)k->b.r, w = (size_t)k->aw;
  int bad = 0;
  for (int s = 0; s < S; s++) {
    bad |= !(k->fixed[s] = io->be->alloc(r * d * sizeof(float)));
    if (w) bad |= !(k->arow[s] = io->be->alloc(N * w * sizeof(float)));
  }
  bad |= !(k->gath = io->be->alloc(N * r * sizeof(float)));
  bad |= !(k->dwt = io->be->alloc(r * d * sizeof(float)));
  if (k->kind == TS_ANCHOR_STATIC)
    bad |= !(k->table = io->be->alloc((size_t)io->V * d * sizeof(float)));
  if (bad) return ts_fail(TS_ERUNTIME, "out of memory allocating the boundary buffers");
  return TS_OK;
}

void ts_mapl_free(const ts_boundary_io *io, ts_mapl *k) {
  for (int s = 0; s < k->b.S; s++) {
    if (k->fixed) io->be->free(k->fixed[s]);
    if (k->arow) io->be->free(k->arow[s]);
  }
  free(k->fixed);
  free(k->arow);
  io->be->free(k->gath);
  io->be->free(k->dwt);
  io->be->free(k->table);
  ts_boundary_buffers_free(io, &k->b);
}

size_t ts_mapl_activation_floats(const ts_boundary_io *io) {
  const ts_config *c = io->cfg;
  const size_t S = (size_t)c->compress_stages, N = (size_t)io->ntok;
  // the shared estimate counts anchor rows r wide at every stage
  size_t n = ts_boundary_buffer_floats(io) + S * N * (size_t)ts_mapl_anchor_width(c);
  n -= S * N * (size_t)c->compress_rank;
  if (c->mapl_anchor == TS_ANCHOR_STATIC) n += (size_t)io->V * io->C;
  return n;
}

int ts_mapl_tensors(const ts_config *cfg, int s, ts_tensor *out) {
  const int r = cfg->compress_rank, w = ts_mapl_anchor_width(cfg);
  int n = 0; // a learned anchor: E_s (V × r) or F_s (V × d)
  if (w) n += ts_boundary_declare(&out[0], "cmp.%d.anchor", s, cfg->vocab, w, TS_ROLE_ANCHOR);
  if (s + 1 < cfg->compress_stages)
    n += ts_boundary_declare(&out[n], "cmp.%d.proj", s, cfg->d, r, TS_ROLE_PROJECTOR);
  return n;
}

void ts_mapl_init(const ts_boundary_io *io, uint64_t seed) {
  ts_mapl *k = io->state;
  const int d = io->C, r = k->b.r;
  float *q = k->b.wt; // (d × r) scratch, transposed into place
  for (int s = 0; s < k->b.S; s++) {
    ts_boundary_orthonormal(q, k->b.qr, d, r, seed, TS_BASIS_FIXED + (uint64_t)s);
    ts_boundary_transpose(k->fixed[s], q, d, r);
  }
  // the static anchor is SSN's token table T (ssn.c), under its own name
  if (k->table)
    for (size_t i = 0; i < (size_t)io->V * d; i++)
      k->table[i] = 0.02f * ts_rng_normal(seed, TS_RNG_COMPRESS, TS_BASIS_TABLE, i);
  // the projectors start on St(d, r), each its own random point (a
  // pipeline stage's: those it holds)
  for (int p = 0; p + 1 < k->b.S; p++)
    if (projector(io, p, 0))
      ts_boundary_orthonormal(projector(io, p, 0), k->b.qr, d, r, seed, TS_BASIS_PROJ + (uint64_t)p);
}

// anc (rows × d) ← rows of a (V × d) table by token.
static void gather_rows(const ts_boundary_io *io, float *anc, const float *table) {
  const int64_t N = io->ntok;
  const size_t d = (size_t)io->C;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; i++)
    memcpy(anc + i * d, table + (size_t)io->inputs[i] * d, d * sizeof(float));
}

// anc (rows × d) ← stage s's anchor rows: E_s[tok]·P_s (factorised), 0
// (none), T[tok] (static) or F_s[tok] (full).
static void mapl_anchor(const ts_boundary_io *io, int s) {
  ts_mapl *k = io->state;
  const int64_t N = io->ntok;
  const int d = io->C, r = k->b.r;
  switch (k->kind) {
  case TS_ANCHOR_NONE: memset(k->b.anc, 0, (size_t)N * d * sizeof(float)); return;
  case TS_ANCHOR_STATIC: gather_rows(io, k->b.anc, k->table); return;
  case TS_ANCHOR_FULL: gather_rows(io, k->b.anc, anchor_table(io, s, 0)); return;
  default: break;
  }
  const float *E = anchor_table(io, s, 0);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; i++)
    memcpy(k->gath + i * r, E + (size_t)io->inputs[i] * r, (size_t)r * sizeof(float));
  // E_s[tok]·P_s: (rows × r)(r × d)
  io->be->linear_backward_input(k->b.anc, k->gath, k->fixed[s], N, d, r, io->cfg->leaf, 0);
}

// wt ← A_pᵀ (r × d).
static const float *mapl_basis(const ts_boundary_io *io, int p) {
  ts_mapl *k = io->state;
  ts_boundary_transpose(k->b.wt, projector(io, p, 0), io->C, k->b.r);
  return k->b.wt;
}

const ts_boundary_affine ts_mapl_affine = {mapl_basis, mapl_anchor};

static void mapl_encode(const ts_boundary_io *io, int p, const float *x) {
  ts_mapl *k = io->state;
  ts_boundary_affine_encode(io, &ts_mapl_affine, p, x, (float *)k->b.wire[p]); // Z is the wire
}

static void mapl_decode(const ts_boundary_io *io, int p, const void *wire, float *x) {
  ts_boundary_affine_decode(io, &ts_mapl_affine, p, wire, x);
}

typedef struct {
  const ts_boundary_io *io;
  const float *rows;
} anchor_leaf_ctx;

static void anchor_leaf(const void *vctx, int64_t li, float *out) {
  const anchor_leaf_ctx *c = vctx;
  const int w = ts_mapl_anchor_width(c->io->cfg);
  memset(out, 0, (size_t)c->io->V * w * sizeof(float));
  c->io->be->embedding_leaf_scatter(out, c->rows, c->io->inputs, li, c->io->cfg->leaf, w);
}

// Stage s's anchor gradient from its rows: the sum over leaves of their
// scatter by token (the backend's leaf_sum: on the CPU the canonical tree).
static int anchor_grad(const ts_boundary_io *io, int s) {
  const ts_mapl *k = io->state;
  anchor_leaf_ctx c = {io, k->arow[s]};
  float *dst[1] = {anchor_table(io, s, 1)};
  const size_t len[1] = {(size_t)io->V * k->aw};
  if (io->be->leaf_sum(io->ws, dst, len, 1, io->ntok / io->cfg->leaf, anchor_leaf, &c))
    return ts_fail(TS_ERUNTIME, "out of memory (anchor gradient tree)");
  return TS_OK;
}

int ts_mapl_decode_backward(const ts_boundary_io *io, int p, const float *dx, void *dz,
                            uint64_t step) {
  (void)step;
  ts_mapl *k = io->state;
  const int64_t N = io->ntok;
  const int d = io->C, r = k->b.r, s = p + 1;
  io->be->linear_forward(dz, dx, mapl_basis(io, p), NULL, N, d, r, io->cfg->leaf); // G·A
  if (!k->aw) return TS_OK; // an anchor that does not learn
  float *a = k->arow[s];
  if (k->kind == TS_ANCHOR_FULL) { // G: the receiving stage's anchor rows, after its output's
    if (s == k->b.S - 1) {
      memcpy(a, dx, (size_t)N * d * sizeof(float));
    } else {
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < N * d; i++) a[i] = a[i] + dx[i];
    }
    return anchor_grad(io, s);
  }
  // G·P_sᵀ: the receiving stage's anchor rows, after its output boundary's
  if (s == k->b.S - 1) {
    io->be->linear_forward(a, dx, k->fixed[s], NULL, N, d, r, io->cfg->leaf);
  } else {
    io->be->linear_forward(k->gath, dx, k->fixed[s], NULL, N, d, r, io->cfg->leaf);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N * r; i++) a[i] = a[i] + k->gath[i];
  }
  return anchor_grad(io, s);
}

int ts_mapl_encode_backward(const ts_boundary_io *io, int p, const void *dz, float *dx,
                            uint64_t step) {
  (void)step;
  ts_mapl *k = io->state;
  const int64_t N = io->ntok;
  const int d = io->C, r = k->b.r;
  io->be->linear_backward_input(dx, dz, mapl_basis(io, p), N, d, r, io->cfg->leaf, 0); // dZ·Aᵀ
  // A_p's gradient Yᵀ·dZ, computed as (dZᵀ·Y)ᵀ by the weight-gradient tree
  if (io->be->linear_backward_weights(io->ws, k->dwt, NULL, dz, k->b.y[p], N, d, r))
    return ts_fail(TS_ERUNTIME, "out of memory (projector gradient tree)");
  ts_boundary_transpose(projector(io, p, 1), k->dwt, r, d);
  if (!k->aw) return TS_OK; // an anchor that does not learn
  // the sender subtracted its anchor: −dX·P_pᵀ (factorised), −dX (full)
  float *a = k->arow[p];
  if (k->kind == TS_ANCHOR_FULL) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N * d; i++) a[i] = -dx[i];
  } else {
    io->be->linear_forward(a, dx, k->fixed[p], NULL, N, d, r, io->cfg->leaf);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N * r; i++) a[i] = -a[i];
  }
  return p == 0 ? anchor_grad(io, 0) : TS_OK;
}

int ts_mapl_check(ts_config *cfg) {
  int rc = ts_boundary_check_stages(cfg);
  if (rc) return rc;
  if (cfg->proj_lr == 0.0f) cfg->proj_lr = 0.1f * (cfg->muon_lr > 0.0f ? cfg->muon_lr : 0.02f);
  if (!(cfg->proj_lr > 0.0f && cfg->proj_lr < 10.0f))
    return ts_fail(TS_EUSAGE, "--proj-lr %g: must be in (0, 10)", (double)cfg->proj_lr);
  return TS_OK;
}

int ts_mapl_owns(ts_role role) { return role == TS_ROLE_PROJECTOR; }

// One step of a projector A (d × r) at the projectors' rate on the run's
// schedule; the momentum lives in AdamW's first-moment slot. The step is the
// backend's (spel_step or spel_step_unconstrained): A, g and the moment are
// in its memory, and the update hook has no model, so the table is the
// current one (the optimizer's too: ts_adamw_init takes ts_backend_current()).
typedef void projector_step_fn(float *A, const float *g, float *m, int d, int r, float alpha,
                               float beta, int steps, float *scratch);

static void step_projector(projector_step_fn *step_fn, const ts_config *cfg, ts_tensor *A,
                           const ts_tensor *g, float *moment, float sched, float *scratch) {
  step_fn(A->data, g->data, moment, (int)A->shape[0], (int)A->shape[1], cfg->proj_lr * sched,
          0.95f, SPEL_STEPS, scratch);
}

void ts_mapl_update(const ts_config *cfg, ts_tensor *params, const ts_tensor *grads, int nt, int t,
                    float *moment, float sched, uint64_t step, float *scratch) {
  (void)nt, (void)step;
  step_projector(ts_backend_current()->spel_step, cfg, &params[t], &grads[t], moment, sched,
                 scratch);
}

static void unconstrained_update(const ts_config *cfg, ts_tensor *params, const ts_tensor *grads,
                                 int nt, int t, float *moment, float sched, uint64_t step,
                                 float *scratch) {
  (void)nt, (void)step;
  step_projector(ts_backend_current()->spel_step_unconstrained, cfg, &params[t], &grads[t],
                 moment, sched, scratch);
}

int ts_mapl_sync(const ts_boundary_io *io, ts_comm *pipe, int p, int peer, int send, uint64_t step) {
  (void)step;
  float *A = projector(io, p, 0);
  const size_t bytes = (size_t)io->C * io->cfg->compress_rank * sizeof(float);
  return send ? ts_comm_send(pipe, A, bytes, peer, -1) : ts_comm_recv(pipe, A, bytes, peer, -1);
}

size_t ts_mapl_sync_bytes(const ts_config *cfg) {
  return (size_t)cfg->d * cfg->compress_rank * sizeof(float);
}

static int mapl_create(const ts_boundary_io *io, void **state) {
  ts_mapl *k = calloc(1, sizeof *k);
  if (!k) return ts_fail(TS_ERUNTIME, "out of memory");
  *state = k;
  return ts_mapl_create(io, k);
}

static void mapl_destroy(const ts_boundary_io *io) {
  ts_mapl *k = io->state;
  if (!k) return;
  ts_mapl_free(io, k);
  free(k);
}

// What the three share: all but the projectors' step.
#define MAPL_FAMILY                                                                        \
  .wire_bytes = ts_boundary_float_wire, .tensors = ts_mapl_tensors,                        \
  .activation_floats = ts_mapl_activation_floats, .create = mapl_create,                   \
  .destroy = mapl_destroy, .init = ts_mapl_init, .encode = mapl_encode,                    \
  .wire = ts_boundary_buffers_wire, .decode = mapl_decode,                                 \
  .decode_backward = ts_mapl_decode_backward, .encode_backward = ts_mapl_encode_backward,  \
  .dz = ts_boundary_buffers_dz, .owns = ts_mapl_owns

const ts_boundary ts_boundary_mapl = {
    .name = "mapl",
    .learns_projector = 1,
    .anchor_kinds = 1,
    .check = ts_mapl_check,
    .update = ts_mapl_update,
    .sync = ts_mapl_sync,
    .sync_bytes = ts_mapl_sync_bytes,
    MAPL_FAMILY,
};

const ts_boundary ts_boundary_mapl_unc = {
    .name = "mapl-unconstrained",
    .learns_projector = 1,
    .check = ts_mapl_check,
    .update = unconstrained_update,
    .sync = ts_mapl_sync,
    .sync_bytes = ts_mapl_sync_bytes,
    MAPL_FAMILY,
};

// The projector never changes: AdamW skips it (owns), nothing updates it,
// and the receiver's copy needs no sync.
const ts_boundary ts_boundary_mapl_frozen = {
    .name = "mapl-frozen",
    .check = ts_boundary_check_stages,
    MAPL_FAMILY,
};
