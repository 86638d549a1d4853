// mapl-vq (--compress mapl-vq): MAPL's Z quantised to one-byte codes by
// greedy residual multi-codebook VQ (the algorithms: src/boundary/vq.h), so a token
// crosses as R·r/G bytes. Sender and receiver code with the one codebook
// both hold, the receiver's copy (`recv`): the sender learns its working
// codebook (`codes`) by the EMA and streams it into that copy after each
// step, a few codes at a time, so a code means the same on both sides
// whatever the stream has not yet carried. (Encoding with the working
// codebook while the receiver decodes with a stale copy made the next stage
// learn from noise: docs/COMPRESSION.md.) Everything else is MAPL's (mapl.h).
//
// Backward: straight through, plus the commitment term against the
// quantisation both sides decode; the step's codebook statistics go into the gradient
// slots of the codebook tensors, so that the gradient machinery sums them
// over leaves, microbatches and data ranks in the same tree on every layout,
// and the optimizer's step hands them to ts_vq_update.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/kernels.h"
#include "base/util.h"
#include "mapl.h"
#include "vq.h"

typedef struct {
  ts_mapl mapl;  // first: MAPL's functions take this state as theirs
  ts_vq_shape vq;
  float **zkeep; // per boundary (rows × r): Z before quantisation
  float *dzq;    // (rows × r): Ẑ decoded, then dZ with the commitment term
  int64_t *cand; // each code's candidate row (vq.h), host
} vq_state;

// Boundary p's codebook tensor of a role (TS_ROLE_VQ_*), or its gradient slot.
static float *book(const ts_boundary_io *io, ts_role role, int p, int grad) {
  return ts_boundary_param(io, role, p, grad);
}

static const char *vq_own_setting(const ts_config *cfg) {
  return cfg->vq_groups ? "--vq-group" : cfg->vq_rounds ? "--vq-rounds"
         : cfg->vq_codes ? "--vq-codes" : cfg->vq_sync_codes ? "--vq-sync-codes"
         : cfg->vq_gamma != 0.0f ? "--vq-gamma" : cfg->vq_commit != 0.0f ? "--vq-commit"
         : NULL;
}

static int vq_check(ts_config *cfg) {
  int rc = ts_mapl_check(cfg);
  if (rc) return rc;
  const int r = cfg->compress_rank;
  if (cfg->vq_groups == 0) cfg->vq_groups = 2;
  if (cfg->vq_rounds == 0) cfg->vq_rounds = 2;
  if (cfg->vq_codes == 0) cfg->vq_codes = 256;
  if (cfg->vq_gamma == 0.0f) cfg->vq_gamma = 0.99f;
  if (cfg->vq_commit == 0.0f) cfg->vq_commit = 1.0f;
  if (cfg->vq_sync_codes == 0) cfg->vq_sync_codes = 1;
  if (cfg->vq_groups < 1 || cfg->vq_groups > 64 || r % cfg->vq_groups != 0)
    return ts_fail(TS_EUSAGE, "--vq-group %d: must divide --rank %d and be at most 64 (Z splits "
                   "into groups of that many coordinates)", cfg->vq_groups, r);
  if (cfg->vq_rounds < 1 || cfg->vq_rounds > 8)
    return ts_fail(TS_EUSAGE, "--vq-rounds %d: must be in [1, 8]", cfg->vq_rounds);
  if (cfg->vq_codes < 2 || cfg->vq_codes > 256)
    return ts_fail(TS_EUSAGE, "--vq-codes %d: must be in [2, 256] (a code is one byte)",
                   cfg->vq_codes);
  if (!(cfg->vq_gamma > 0.0f && cfg->vq_gamma < 1.0f))
    return ts_fail(TS_EUSAGE, "--vq-gamma %g: must be in (0, 1)", (double)cfg->vq_gamma);
  if (!(cfg->vq_commit > 0.0f && isfinite(cfg->vq_commit)))
    return ts_fail(TS_EUSAGE, "--vq-commit %g: must be > 0", (double)cfg->vq_commit);
  if (cfg->vq_sync_codes < 1 || cfg->vq_sync_codes > cfg->vq_codes)
    return ts_fail(TS_EUSAGE, "--vq-sync-codes %d: must be in [1, --vq-codes %d]",
                   cfg->vq_sync_codes, cfg->vq_codes);
  return TS_OK;
}

// Forward R·r/G codes a row; dZ back, r floats.
static size_t vq_wire_bytes(const ts_config *cfg, int backward) {
  if (backward) return ts_boundary_float_wire(cfg, backward);
  ts_vq_shape q;
  ts_vq_shape_of(cfg, &q);
  return ts_vq_row_bytes(&q);
}

// MAPL's tensors, then a boundary's four codebooks in vq.h's order.
static int vq_tensors(const ts_config *cfg, int s, ts_tensor *out) {
  int n = ts_mapl_tensors(cfg, s, out);
  if (s + 1 == cfg->compress_stages) return n;
  ts_vq_shape q;
  ts_vq_shape_of(cfg, &q);
  const int64_t nc = (int64_t)ts_vq_ncodes(&q);
  n += ts_boundary_declare(&out[n], "cmp.%d.vq.count", s, nc, 0, TS_ROLE_VQ_COUNT);
  n += ts_boundary_declare(&out[n], "cmp.%d.vq.sum", s, nc, q.G, TS_ROLE_VQ_SUM);
  n += ts_boundary_declare(&out[n], "cmp.%d.vq.codes", s, nc, q.G, TS_ROLE_VQ_CODES);
  n += ts_boundary_declare(&out[n], "cmp.%d.vq.recv", s, nc, q.G, TS_ROLE_VQ_RECV);
  return n;
}

static size_t vq_activation_floats(const ts_boundary_io *io) {
  const size_t S = (size_t)io->cfg->compress_stages;
  return ts_mapl_activation_floats(io) + (S - 1) * (size_t)io->ntok * io->cfg->compress_rank;
}

// A thread's leaf partial of the codebook statistics.
static size_t vq_leaf_floats(const ts_config *cfg) {
  ts_vq_shape q;
  ts_vq_shape_of(cfg, &q);
  return ts_vq_stat_floats(&q);
}

static int vq_create(const ts_boundary_io *io, void **state) {
  vq_state *k = calloc(1, sizeof *k);
  if (!k) return ts_fail(TS_ERUNTIME, "out of memory");
  *state = k;
  ts_vq_shape_of(io->cfg, &k->vq);
  int rc = ts_mapl_create(io, &k->mapl);
  if (rc) return rc;
  const int S = k->mapl.b.S;
  k->zkeep = calloc((size_t)S, sizeof(float *));
  if (!k->zkeep) return ts_fail(TS_ERUNTIME, "out of memory");
  const size_t N = (size_t)io->ntok, r = (size_t)k->vq.r;
  int bad = 0;
  for (int p = 0; p + 1 < S; p++) bad |= !(k->zkeep[p] = io->be->alloc(N * r * sizeof(float)));
  bad |= !(k->dzq = io->be->alloc(N * r * sizeof(float)));
  bad |= !(k->cand = ts_alloc(ts_vq_ncodes(&k->vq) * sizeof(int64_t))); // host scratch
  if (bad) return ts_fail(TS_ERUNTIME, "out of memory allocating the boundary buffers");
  return TS_OK;
}

static void vq_destroy(const ts_boundary_io *io) {
  vq_state *k = io->state;
  if (!k) return;
  for (int p = 0; k->zkeep && p < k->mapl.b.S; p++) io->be->free(k->zkeep[p]);
  free(k->zkeep);
  io->be->free(k->dzq);
  ts_free(k->cand);
  ts_mapl_free(io, &k->mapl);
  free(k);
}

static void vq_init(const ts_boundary_io *io, uint64_t seed) {
  vq_state *k = io->state;
  ts_mapl_init(io, seed);
  for (int p = 0; p + 1 < k->mapl.b.S; p++) // (a pipeline stage's: those it holds)
    if (book(io, TS_ROLE_VQ_CODES, p, 0))
      ts_vq_init(&k->vq, seed, p, book(io, TS_ROLE_VQ_COUNT, p, 0), book(io, TS_ROLE_VQ_SUM, p, 0),
               book(io, TS_ROLE_VQ_CODES, p, 0), book(io, TS_ROLE_VQ_RECV, p, 0));
}

// Z's codes in the shared codebook (the receiver's copy).
static void vq_encode(const ts_boundary_io *io, int p, const float *x) {
  vq_state *k = io->state;
  ts_boundary_affine_encode(io, &ts_mapl_affine, p, x, k->zkeep[p]);
  ts_vq_encode(&k->vq, book(io, TS_ROLE_VQ_RECV, p, 0), k->zkeep[p], io->ntok, k->mapl.b.wire[p],
               NULL);
}

// Ẑ by the shared codebook, then MAPL's decode.
static void vq_decode(const ts_boundary_io *io, int p, const void *wire, float *x) {
  vq_state *k = io->state;
  ts_vq_decode(&k->vq, book(io, TS_ROLE_VQ_RECV, p, 0), wire, io->ntok, k->dzq);
  ts_boundary_affine_decode(io, &ts_mapl_affine, p, k->dzq, x);
}

typedef struct {
  const vq_state *k;
  const float *codes;
  int p, leaf;
} stats_leaf_ctx;

static void stats_leaf(const void *vctx, int64_t li, float *out) {
  const stats_leaf_ctx *c = vctx;
  const vq_state *k = c->k;
  ts_vq_stats_leaf(&k->vq, c->codes, k->zkeep[c->p], k->mapl.b.wire[c->p], k->cand, li, c->leaf,
                   out);
}

// Boundary p's step statistics into the gradient slots of its count, sum and
// codes (contiguous, vq.h), and dZ plus the commitment term into k->dzq,
// then MAPL's encode backward from it.
static int vq_encode_backward(const ts_boundary_io *io, int p, const float *dz, float *dx, uint64_t step) {
  vq_state *k = io->state;
  const int64_t N = io->ntok;
  const int r = k->vq.r;
  const float *codes = book(io, TS_ROLE_VQ_RECV, p, 0); // the codebook the codes index
  ts_vq_candidates(&k->vq, io->cfg->seed, p, step, io->ntok_global, (int64_t)io->b0 * io->T, N,
                   k->cand);
  stats_leaf_ctx c = {k, codes, p, io->cfg->leaf};
  // the statistics are host code (vq.c) on every backend, summed by the CPU's
  // canonical tree, so that the counts and sums are the same bits everywhere
  if (ts_leaf_tree_sum(io->ws, book(io, TS_ROLE_VQ_COUNT, p, 1), ts_vq_stat_floats(&k->vq),
                       N / io->cfg->leaf, stats_leaf, &c))
    return ts_fail(TS_ERUNTIME, "out of memory (codebook statistics tree)");
  memset(book(io, TS_ROLE_VQ_RECV, p, 1), 0, ts_vq_ncodes(&k->vq) * (size_t)k->vq.G * sizeof(float));
  // ẑ (what the receiver decoded), and d/dz of w·Σ‖z − sg(ẑ)‖²/(tokens·r)
  ts_vq_decode(&k->vq, codes, k->mapl.b.wire[p], N, k->dzq);
  const float scale = 2.0f * k->vq.commit / ((float)io->ntok_global * (float)r);
  const float *z = k->zkeep[p];
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N * r; i++) k->dzq[i] = dz[i] + scale * (z[i] - k->dzq[i]);
  return ts_mapl_encode_backward(io, p, k->dzq, dx, step);
}

static int vq_owns(ts_role role) { return ts_mapl_owns(role) || ts_boundary_statistics(role); }

// The projector by SPEL; a boundary's codebooks all at once, at its count:
// the EMA update, dead-code replacement and streamed sync from the
// statistics in the count's, sum's and codes' gradient slots.
static void vq_update(const ts_config *cfg, ts_tensor *params, const ts_tensor *grads, int nt,
                      int t, float *moment, float sched, uint64_t step, float *scratch) {
  if (params[t].role == TS_ROLE_PROJECTOR)
    ts_mapl_update(cfg, params, grads, nt, t, moment, sched, step, scratch);
  if (params[t].role != TS_ROLE_VQ_COUNT) return;
  const int p = params[t].index;
  ts_vq_shape q;
  ts_vq_shape_of(cfg, &q);
#define BOOK(ROLE) params[ts_tensor_find(params, nt, ROLE, p)].data
  ts_vq_update(&q, cfg->seed, p, step, params[t].data, BOOK(TS_ROLE_VQ_SUM),
               BOOK(TS_ROLE_VQ_CODES), BOOK(TS_ROLE_VQ_RECV), grads[t].data);
#undef BOOK
}

// MAPL's projector, then the step's streamed codes: packed from the
// sender's codebook, unpacked into the receiver's copy.
static int vq_sync(const ts_boundary_io *io, ts_comm *pipe, int p, int peer, int send, uint64_t step) {
  int rc = ts_mapl_sync(io, pipe, p, peer, send, step);
  if (rc) return rc;
  vq_state *k = io->state;
  const size_t bytes = ts_vq_stream_floats(&k->vq) * sizeof(float);
  float *msg = malloc(bytes);
  if (!msg) return ts_fail(TS_ERUNTIME, "out of memory");
  if (send) {
    ts_vq_stream_pack(&k->vq, io->cfg->seed, p, step, book(io, TS_ROLE_VQ_CODES, p, 0), msg, 0);
    rc = ts_comm_send(pipe, msg, bytes, peer, -1);
  } else if (!(rc = ts_comm_recv(pipe, msg, bytes, peer, -1))) {
    ts_vq_stream_pack(&k->vq, io->cfg->seed, p, step, book(io, TS_ROLE_VQ_RECV, p, 0), msg, 1);
  }
  free(msg);
  return rc;
}

// What vq_sync sends: the projector and the step's streamed codes.
static size_t vq_sync_bytes(const ts_config *cfg) {
  ts_vq_shape q;
  ts_vq_shape_of(cfg, &q);
  return ts_mapl_sync_bytes(cfg) + ts_vq_stream_floats(&q) * sizeof(float);
}

const ts_boundary ts_boundary_mapl_vq = {
    .name = "mapl-vq",
    .learns_projector = 1,
    .anchor_kinds = 1,
    .own_setting = vq_own_setting,
    .check = vq_check,
    .wire_bytes = vq_wire_bytes,
    .tensors = vq_tensors,
    .activation_floats = vq_activation_floats,
    .leaf_floats = vq_leaf_floats,
    .create = vq_create,
    .destroy = vq_destroy,
    .init = vq_init,
    .encode = vq_encode,
    .wire = ts_boundary_buffers_wire,
    .decode = vq_decode,
    .decode_backward = ts_mapl_decode_backward,
    .encode_backward = vq_encode_backward,
    .dz = ts_boundary_buffers_dz,
    .owns = vq_owns,
    .update = vq_update,
    .sync = vq_sync,
    .sync_bytes = vq_sync_bytes,
};
