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
//
// With --vq-backward on, dZ crosses back quantised too (vq.h), the mirror
// image of the forward: the gradient's sender (stage p + 1) codes each row's
// dZ/s with the gradient's shared codebook (`gvq.recv`), gathers the
// statistics into its gradient codebooks' slots and learns its working
// codebook (`gvq.codes`) from them, and streams that into the shared copy
// after each step, which the gradient's receiver (stage p) holds as a copy
// and decodes with.
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
  // --vq-backward on (else NULL)
  float *gdz;      // (rows × r): dZ, before its quantisation and after it
  float *gu;       // (rows × r): dZ's rows scaled to RMS 1, as coded
  uint8_t *gwire;  // (rows × (R·r/G + 4) bytes): dZ's codes, then its scales
  // the shared copies of a unit inside a step (--vq-stream-unit microbatch,
  // vq.h ts_vq_shared_at), of the forward's codebook and the gradient's
  float *view, *gview;
} vq_state;

// Boundary p's codebook tensor of a role (TS_ROLE_VQ_*), or its gradient slot.
static float *book(const ts_boundary_io *io, ts_role role, int p, int grad) {
  return ts_boundary_param(io, role, p, grad);
}

// Boundary p's gradient codebook tensor of a role (TS_ROLE_GVQ_*), or its slot.
static float *gbook(const ts_boundary_io *io, ts_role role, int p, int grad) {
  return ts_boundary_param(io, role, p, grad);
}

static const char *vq_own_setting(const ts_config *cfg) {
  return cfg->vq_groups ? "--vq-group" : cfg->vq_rounds ? "--vq-rounds"
         : cfg->vq_codes ? "--vq-codes" : cfg->vq_sync_codes ? "--vq-sync-codes"
         : cfg->vq_gamma != 0.0f ? "--vq-gamma" : cfg->vq_commit != 0.0f ? "--vq-commit"
         : cfg->vq_backward ? "--vq-backward on"
         : cfg->vq_backward_gamma != 0.0f ? "--vq-backward-gamma"
         : cfg->vq_stream_microbatches ? "--vq-stream-unit microbatch"
         : cfg->vq_stream_every ? "--vq-stream-every"
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
  if (cfg->vq_backward != 0 && cfg->vq_backward != 1)
    return ts_fail(TS_EUSAGE, "--vq-backward %d: must be on (1) or off (0)", cfg->vq_backward);
  if (!cfg->vq_backward && cfg->vq_backward_gamma != 0.0f)
    return ts_fail(TS_EUSAGE, "--vq-backward-gamma %g: only with --vq-backward on",
                   (double)cfg->vq_backward_gamma);
  if (cfg->vq_backward && cfg->vq_backward_gamma == 0.0f) cfg->vq_backward_gamma = cfg->vq_gamma;
  if (cfg->vq_stream_every < 0)
    return ts_fail(TS_EUSAGE, "--vq-stream-every %d: must be >= 1", cfg->vq_stream_every);
  if (cfg->vq_stream_microbatches < -1)
    return ts_fail(TS_EUSAGE, "--vq-stream-unit: %d microbatches a step recorded, must be >= 1",
                   cfg->vq_stream_microbatches);
  if (cfg->vq_backward && !(cfg->vq_backward_gamma > 0.0f && cfg->vq_backward_gamma < 1.0f))
    return ts_fail(TS_EUSAGE, "--vq-backward-gamma %g: must be in (0, 1)",
                   (double)cfg->vq_backward_gamma);
  return TS_OK;
}

// Forward R·r/G codes a row; dZ back, r floats, or its codes and scale.
static size_t vq_wire_bytes(const ts_config *cfg, int backward) {
  ts_vq_shape q;
  ts_vq_shape_of(cfg, &q);
  if (!backward) return ts_vq_row_bytes(&q);
  return cfg->vq_backward ? ts_vq_grad_row_bytes(&q) : ts_boundary_float_wire(cfg, backward);
}

// MAPL's tensors, then its output boundary's four codebooks in vq.h's order,
// then (--vq-backward on) its input boundary's four gradient codebooks.
static int vq_tensors(const ts_config *cfg, int s, ts_tensor *out) {
  int n = ts_mapl_tensors(cfg, s, out);
  ts_vq_shape q;
  ts_vq_shape_of(cfg, &q);
  const int64_t nc = (int64_t)ts_vq_ncodes(&q);
  if (s + 1 < cfg->compress_stages) {
    n += ts_boundary_declare(&out[n], "cmp.%d.vq.count", s, nc, 0, TS_ROLE_VQ_COUNT);
    n += ts_boundary_declare(&out[n], "cmp.%d.vq.sum", s, nc, q.G, TS_ROLE_VQ_SUM);
    n += ts_boundary_declare(&out[n], "cmp.%d.vq.codes", s, nc, q.G, TS_ROLE_VQ_CODES);
    n += ts_boundary_declare(&out[n], "cmp.%d.vq.recv", s, nc, q.G, TS_ROLE_VQ_RECV);
  }
  if (cfg->vq_backward && s > 0) {
    n += ts_boundary_declare(&out[n], "cmp.%d.gvq.count", s - 1, nc, 0, TS_ROLE_GVQ_COUNT);
    n += ts_boundary_declare(&out[n], "cmp.%d.gvq.sum", s - 1, nc, q.G, TS_ROLE_GVQ_SUM);
    n += ts_boundary_declare(&out[n], "cmp.%d.gvq.codes", s - 1, nc, q.G, TS_ROLE_GVQ_CODES);
    n += ts_boundary_declare(&out[n], "cmp.%d.gvq.recv", s - 1, nc, q.G, TS_ROLE_GVQ_RECV);
  }
  return n;
}

static size_t vq_activation_floats(const ts_boundary_io *io) {
  const size_t S = (size_t)io->cfg->compress_stages, N = (size_t)io->ntok;
  const size_t r = (size_t)io->cfg->compress_rank;
  size_t n = ts_mapl_activation_floats(io) + (S - 1) * N * r;
  if (io->cfg->vq_backward) n += 2 * N * r + (N * io->bd->wire_bytes(io->cfg, 1) + 3) / 4;
  return n;
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
  const size_t book_bytes = ts_vq_ncodes(&k->vq) * (size_t)k->vq.G * sizeof(float);
  if (k->vq.units > 1) {
    bad |= !(k->view = io->be->alloc(book_bytes));
    if (io->cfg->vq_backward) bad |= !(k->gview = io->be->alloc(book_bytes));
  }
  if (io->cfg->vq_backward) {
    bad |= !(k->gdz = io->be->alloc(N * r * sizeof(float)));
    bad |= !(k->gu = io->be->alloc(N * r * sizeof(float)));
    bad |= !(k->gwire = io->be->alloc(N * io->bd->wire_bytes(io->cfg, 1)));
  }
  if (bad) return ts_fail(TS_ERUNTIME, "out of memory allocating the boundary buffers");
  return TS_OK;
}

static void vq_destroy(const ts_boundary_io *io) {
  vq_state *k = io->state;
  if (!k) return;
  for (int p = 0; k->zkeep && p < k->mapl.b.S; p++) io->be->free(k->zkeep[p]);
  free(k->zkeep);
  io->be->free(k->dzq);
  io->be->free(k->gdz);
  io->be->free(k->gu);
  io->be->free(k->gwire);
  io->be->free(k->view);
  io->be->free(k->gview);
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
  // the gradient's: its rows are coded at RMS 1, so its codes start at std 1
  for (int p = 0; p + 1 < k->mapl.b.S; p++)
    if (gbook(io, TS_ROLE_GVQ_CODES, p, 0))
      ts_vq_init_scaled(&k->vq, seed, (int)(p | TS_VQ_GRAD_BOOK), 1.0f,
                        gbook(io, TS_ROLE_GVQ_COUNT, p, 0), gbook(io, TS_ROLE_GVQ_SUM, p, 0),
                        gbook(io, TS_ROLE_GVQ_CODES, p, 0), gbook(io, TS_ROLE_GVQ_RECV, p, 0));
}

// The shared codebook (role: VQ_RECV or GVQ_RECV; key: the books' seeds)
// that the model's rows code with: under --vq-stream-unit microbatch the
// copy of their microbatch, a function of the step and of the rows' first
// sequence only, so that the sender and receiver, and a backward or a
// recomputed forward, agree in any schedule; else (and outside training) the
// tensor itself.
static const float *shared(const ts_boundary_io *io, ts_role role_recv, int p, uint64_t key) {
  const vq_state *k = io->state;
  const float *recv = ts_boundary_param(io, role_recv, p, 0);
  if (k->vq.units <= 1 || !io->training) return recv;
  // the model's microbatch: Bg/U sequences of the global batch (a layout's
  // microbatch lies inside one: U = --dp x --microbatches)
  const int64_t Bg = io->ntok_global / io->T, per = Bg / k->vq.units;
  const int64_t m = per > 0 ? io->b0 / per : 0;
  const float *codes = ts_boundary_param(io, role_recv - (TS_ROLE_VQ_RECV - TS_ROLE_VQ_CODES), p, 0);
  return ts_vq_shared_at(&k->vq, io->cfg->seed, (int)key, io->step, m, recv, codes,
                         role_recv == TS_ROLE_GVQ_RECV ? k->gview : k->view);
}

// Z's codes in the shared codebook (the receiver's copy).
static void vq_encode(const ts_boundary_io *io, int p, const float *x) {
  vq_state *k = io->state;
  ts_boundary_affine_encode(io, &ts_mapl_affine, p, x, k->zkeep[p]);
  ts_vq_encode(&k->vq, shared(io, TS_ROLE_VQ_RECV, p, (uint64_t)p), k->zkeep[p], io->ntok,
               k->mapl.b.wire[p], NULL);
}

// Ẑ by the shared codebook, then MAPL's decode.
static void vq_decode(const ts_boundary_io *io, int p, const void *wire, float *x) {
  vq_state *k = io->state;
  ts_vq_decode(&k->vq, shared(io, TS_ROLE_VQ_RECV, p, (uint64_t)p), wire, io->ntok, k->dzq);
  ts_boundary_affine_decode(io, &ts_mapl_affine, p, k->dzq, x);
}

typedef struct {
  const vq_state *k;
  const float *book, *z; // the codebook the codes index; what was coded (rows × r)
  const uint8_t *codes;
  int leaf;
} stats_leaf_ctx;

static void stats_leaf(const void *vctx, int64_t li, float *out) {
  const stats_leaf_ctx *c = vctx;
  ts_vq_stats_leaf(&c->k->vq, c->book, c->z, c->codes, c->k->cand, li, c->leaf, out);
}

// The step's statistics of rows z coded as codes in the shared codebook
// (role_count's tensor is its count; key: the books' seeds) into the
// gradient slots of its count, sum and codes (contiguous, vq.h), its
// shared copy's slot zeroed.
static int book_statistics(const ts_boundary_io *io, ts_role role_count, int p, uint64_t key,
                           const float *z, const uint8_t *codes, uint64_t step) {
  vq_state *k = io->state;
  const int64_t N = io->ntok;
  const ts_role role_recv = role_count + (TS_ROLE_VQ_RECV - TS_ROLE_VQ_COUNT);
  ts_vq_candidates(&k->vq, io->cfg->seed, (int)key, step, io->ntok_global,
                   (int64_t)io->b0 * io->T, N, k->cand);
  stats_leaf_ctx c = {k, shared(io, role_recv, p, key), z, codes, io->cfg->leaf};
  // the statistics are host code (vq.c) on every backend, summed by the CPU's
  // canonical tree, so that the counts and sums are the same bits everywhere
  if (ts_leaf_tree_sum(io->ws, ts_boundary_param(io, role_count, p, 1),
                       ts_vq_stat_floats(&k->vq), N / io->cfg->leaf, stats_leaf, &c))
    return ts_fail(TS_ERUNTIME, "out of memory (codebook statistics tree)");
  memset(ts_boundary_param(io, role_recv, p, 1), 0,
         ts_vq_ncodes(&k->vq) * (size_t)k->vq.G * sizeof(float));
  return TS_OK;
}

// The gradient's sender (stage p + 1): dZ = G·A_p by MAPL, then without
// --vq-backward the floats are the wire; with it, dZ's codes and scales in
// the shared gradient codebook, and their statistics.
static int vq_decode_backward(const ts_boundary_io *io, int p, const float *dx, void *dz,
                              uint64_t step) {
  vq_state *k = io->state;
  if (!k->gwire) return ts_mapl_decode_backward(io, p, dx, dz, step);
  int rc = ts_mapl_decode_backward(io, p, dx, k->gdz, step);
  if (rc) return rc;
  ts_vq_grad_encode(&k->vq, shared(io, TS_ROLE_GVQ_RECV, p, p | TS_VQ_GRAD_BOOK), k->gdz,
                    io->ntok, dz, k->gu);
  return book_statistics(io, TS_ROLE_GVQ_COUNT, p, p | TS_VQ_GRAD_BOOK, k->gu, dz, step);
}

// Boundary p's step statistics into the gradient slots of its count, sum and
// codes (contiguous, vq.h), and dZ (decoded by the gradient's shared
// codebook under --vq-backward on) plus the commitment term into k->dzq,
// then MAPL's encode backward from it.
static int vq_encode_backward(const ts_boundary_io *io, int p, const void *wire_back, float *dx,
                              uint64_t step) {
  vq_state *k = io->state;
  const int64_t N = io->ntok;
  const int r = k->vq.r;
  const float *dz = wire_back;
  if (k->gwire) {
    ts_vq_grad_decode(&k->vq, shared(io, TS_ROLE_GVQ_RECV, p, p | TS_VQ_GRAD_BOOK), wire_back, N,
                      k->gdz);
    dz = k->gdz;
  }
  const float *codes = shared(io, TS_ROLE_VQ_RECV, p, (uint64_t)p); // what the codes index
  int rc = book_statistics(io, TS_ROLE_VQ_COUNT, p, (uint64_t)p, k->zkeep[p], k->mapl.b.wire[p],
                           step);
  if (rc) return rc;
  // ẑ (what the receiver decoded), and d/dz of w·Σ‖z − sg(ẑ)‖²/(tokens·r)
  ts_vq_decode(&k->vq, codes, k->mapl.b.wire[p], N, k->dzq);
  const float scale = 2.0f * k->vq.commit / ((float)io->ntok_global * (float)r);
  const float *z = k->zkeep[p];
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N * r; i++) k->dzq[i] = dz[i] + scale * (z[i] - k->dzq[i]);
  return ts_mapl_encode_backward(io, p, k->dzq, dx, step);
}

// The backward's wire: dZ's floats, or its codes and scales.
static void *vq_dz(const ts_boundary_io *io) {
  const vq_state *k = io->state;
  return k->gwire ? (void *)k->gwire : ts_boundary_buffers_dz(io);
}

static int vq_owns(ts_role role) { return ts_mapl_owns(role) || ts_boundary_statistics(role); }

// The projector by SPEL; a boundary's codebooks all at once, at its count
// (the forward's, and the gradient's under --vq-backward on): the EMA update,
// dead-code replacement and streamed sync from the statistics in the
// count's, sum's and codes' gradient slots.
static void vq_update(const ts_config *cfg, ts_tensor *params, const ts_tensor *grads, int nt,
                      int t, float *moment, float sched, uint64_t step, float *scratch) {
  if (params[t].role == TS_ROLE_PROJECTOR)
    ts_mapl_update(cfg, params, grads, nt, t, moment, sched, step, scratch);
  const ts_role role = params[t].role;
  if (role != TS_ROLE_VQ_COUNT && role != TS_ROLE_GVQ_COUNT) return;
  const int p = params[t].index, grad = role == TS_ROLE_GVQ_COUNT;
  ts_vq_shape q;
  ts_vq_shape_of(cfg, &q);
  if (grad) q.gamma = cfg->vq_backward_gamma;
#define BOOK(ROLE) params[ts_tensor_find(params, nt, (ROLE) + (role - TS_ROLE_VQ_COUNT), p)].data
  ts_vq_update(&q, cfg->seed, (int)(grad ? p | TS_VQ_GRAD_BOOK : (unsigned)p), step,
               params[t].data, BOOK(TS_ROLE_VQ_SUM), BOOK(TS_ROLE_VQ_CODES), BOOK(TS_ROLE_VQ_RECV),
               grads[t].data);
#undef BOOK
}

// One step's stream of a codebook (key: its seeds) over the pipe (vq.h):
// the events of the next step's units packed from the sender's working
// codebook `from` and sent (send 1); or, received, the events inside this
// step applied to the shared copy `to` from the receiver's copy of the
// working codebook, then the message unpacked into the two. Nothing goes
// when no event falls in the next step (--vq-stream-every).
static int stream(const ts_boundary_io *io, ts_comm *pipe, uint64_t key, int peer, int send,
                  uint64_t step, float *from, float *to) {
  vq_state *k = io->state;
  if (!send) ts_vq_stream_catch_up(&k->vq, io->cfg->seed, (int)key, step, from, to);
  const size_t bytes =
      ts_vq_stream_events(&k->vq, step) * ts_vq_stream_floats(&k->vq) * sizeof(float);
  if (!bytes) return TS_OK;
  float *msg = malloc(bytes);
  if (!msg) return ts_fail(TS_ERUNTIME, "out of memory");
  int rc;
  if (send) {
    ts_vq_stream_pack(&k->vq, io->cfg->seed, (int)key, step, from, msg);
    rc = ts_comm_send(pipe, msg, bytes, peer, -1);
  } else if (!(rc = ts_comm_recv(pipe, msg, bytes, peer, -1))) {
    ts_vq_stream_unpack(&k->vq, io->cfg->seed, (int)key, step, msg, to, from);
  }
  free(msg);
  return rc;
}

// MAPL's projector, then the step's streamed codes down the pipe, from the
// sender's codebook into the receiver's copy; under --vq-backward on then
// the gradient codebook's, up the pipe (send 1 receives them: its stage is
// the gradient's receiver).
static int vq_sync(const ts_boundary_io *io, ts_comm *pipe, int p, int peer, int send, uint64_t step) {
  int rc = ts_mapl_sync(io, pipe, p, peer, send, step);
  if (!rc)
    rc = stream(io, pipe, (uint64_t)p, peer, send, step, book(io, TS_ROLE_VQ_CODES, p, 0),
                book(io, TS_ROLE_VQ_RECV, p, 0));
  if (!rc && io->cfg->vq_backward)
    rc = stream(io, pipe, p | TS_VQ_GRAD_BOOK, peer, !send, step,
                gbook(io, TS_ROLE_GVQ_CODES, p, 0), gbook(io, TS_ROLE_GVQ_RECV, p, 0));
  return rc;
}

// What vq_sync sends for one boundary: the projector and the step's streamed
// codes, and under --vq-backward on the gradient codebook's, up the pipe. A
// step's stream carries the events of the next step's units, U/every a step
// on average (each step ⌊⌋ or ⌈⌉ of it when every does not divide U): this
// is that mean, rounded to the byte, exact when every divides U or U·steps.
// (Under --vq-stream-unit microbatch with no layout yet, U counts as 1.)
static size_t vq_sync_bytes(const ts_config *cfg) {
  ts_vq_shape q;
  ts_vq_shape_of(cfg, &q);
  const size_t event = ts_vq_stream_floats(&q) * sizeof(float);
  const size_t stream = (event * (size_t)q.units + (size_t)q.every / 2) / (size_t)q.every;
  return ts_mapl_sync_bytes(cfg) + stream * (cfg->vq_backward ? 2 : 1);
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
    .decode_backward = vq_decode_backward,
    .encode_backward = vq_encode_backward,
    .dz = vq_dz,
    .owns = vq_owns,
    .update = vq_update,
    .sync = vq_sync,
    .sync_bytes = vq_sync_bytes,
};
