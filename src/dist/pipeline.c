// Pipeline parallelism: the GPipe and 1F1B schedules (pipeline.h).
#include "pipeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/util.h"
#include "boundary/boundary.h"
#include "segment_sum.h"

int ts_pipeline_create(ts_pipeline *pl, ts_model *m, ts_comm *pipe, int M, int schedule, int mb) {
  memset(pl, 0, sizeof *pl);
  const ts_config *cfg = ts_model_config(m);
  pl->pipe = pipe;
  pl->P = pipe->size;
  pl->s = pipe->rank;
  pl->M = M;
  pl->mb = mb;
  pl->schedule = schedule;
  pl->stride = mb;
  pl->be = ts_backend_current();
  // what crosses a boundary: X (d floats a token), or under --compress Z
  // (r floats, or mapl-vq's codes) forward and dZ (r floats, or under
  // --vq-backward on its codes and a scale) back
  int t0, Tl; // a sequence-parallel stage holds T/N positions of its sequence
  ts_model_positions(m, &t0, &Tl);
  pl->rows = (size_t)mb * Tl;
  pl->fwd_bytes = pl->rows * ts_model_boundary_bytes(m, 0);
  pl->bwd_bytes = pl->rows * ts_model_boundary_bytes(m, 1);
  if (pl->P > 1 && ts_model_num_params(m) == ts_model_canonical_params(m))
    return ts_fail(TS_EUSAGE, "pipeline: the model must be a stage's (ts_model_create_stage)");
  pl->slots = schedule == 0 ? M : (pl->P - pl->s < M ? pl->P - pl->s : M);
  pl->store = pl->be->alloc((size_t)pl->slots * pl->fwd_bytes);
  pl->dy = pl->be->alloc(pl->bwd_bytes);
  pl->runs = ts_model_second_run_grads(m) ? 2 : 1;
  pl->lsums = calloc((size_t)pl->runs * M, sizeof(float));
  if (!pl->store || !pl->dy || !pl->lsums) return ts_fail(TS_ERUNTIME, "out of memory (pipeline buffers)");
  ts_tree_init(&pl->tree, ts_model_num_params(m));
  int bad;
  if (!(pl->lay_lo = calloc((size_t)cfg->n_layer + 1, sizeof *pl->lay_lo)))
    return ts_fail(TS_ERUNTIME, "out of memory");
  if (ts_model_layer_runs(m, &pl->lay_l0, &pl->nlay, pl->lay_lo, &bad) != 0 || pl->nlay == 0) {
    free(pl->lay_lo); // (pushed whole, as a stage without layers would be)
    pl->lay_lo = NULL;
  }
  pl->tied = cfg->tied;
  pl->wte_len = pl->tied ? (size_t)cfg->vocab * cfg->d : 0;
  pl->d = (size_t)cfg->d;
  if (pl->tied && pl->s == pl->P - 1) { // the embedding among the last stage's tensors
    int nt = ts_model_num_tensors(m);
    ts_tensor *t = calloc((size_t)nt, sizeof *t);
    if (!t) return ts_fail(TS_ERUNTIME, "out of memory");
    ts_model_tensors(m, t, NULL);
    const int w = ts_tensor_find(t, nt, TS_ROLE_EMBEDDING, 0);
    pl->wte_off = w >= 0 ? (size_t)(t[w].data - ts_model_params(m)) : 0;
    free(t);
  }
  if (pl->tied && (pl->s == 0 || pl->s == pl->P - 1)) {
    const size_t d = (size_t)cfg->d, V = (size_t)cfg->vocab;
    pl->tied_store = pl->be->alloc((size_t)M * pl->rows * d * sizeof(float));
    if (pl->s == pl->P - 1) pl->wte_grad = pl->be->alloc(V * d * sizeof(float));
    if (pl->s == pl->P - 1 && pl->runs == 2) pl->wte_grad2 = pl->be->alloc(V * d * sizeof(float));
    const int last = pl->s == pl->P - 1;
    if (!pl->tied_store || (last && (!pl->wte_grad || (pl->runs == 2 && !pl->wte_grad2))))
      return ts_fail(TS_ERUNTIME, "out of memory (tied head buffers)");
    ts_tree_init(&pl->wte_tree, V * d);
  }
  return TS_OK;
}

size_t ts_pipeline_buffer_bytes(const ts_pipeline *pl) {
  size_t b = (size_t)pl->slots * pl->fwd_bytes + pl->bwd_bytes +
             (size_t)pl->runs * pl->M * sizeof(float);
  if (pl->tied_store) b += (size_t)pl->M * pl->rows * pl->d * sizeof(float);
  if (pl->wte_grad) b += pl->wte_len * sizeof(float);
  if (pl->wte_grad2) b += pl->wte_len * sizeof(float);
  return b;
}

void ts_pipeline_free(ts_pipeline *pl) {
  if (pl->be) { // NULL: never created, nothing allocated
    pl->be->free(pl->store);
    pl->be->free(pl->dy);
    pl->be->free(pl->tied_store);
    pl->be->free(pl->wte_grad);
    pl->be->free(pl->wte_grad2);
  }
  free(pl->lsums);
  free(pl->lay_lo);
  if (pl->tied_store) ts_tree_free(&pl->wte_tree);
  ts_tree_free(&pl->tree);
  memset(pl, 0, sizeof *pl);
}

void ts_pipeline_set_sequence_hooks(ts_pipeline *pl, ts_comm *seq,
                                    int (*seq_grads)(void *ctx, float *g),
                                    int (*seq_flat)(void *ctx, float *buf, float *buf2, size_t n),
                                    void *ctx) {
  pl->seq = seq;
  pl->seq_grads = seq_grads;
  pl->seq_flat = seq_flat;
  pl->seq_ctx = ctx;
}

void ts_pipeline_set_round_hooks(ts_pipeline *pl, int stride, int (*round_done)(void *ctx),
                                 int (*loss_sum)(void *ctx, const float *lsums, int M, float *out),
                                 int (*seq_flat)(void *ctx, float *buf, float *buf2, size_t n),
                                 void *ctx) {
  pl->stride = stride;
  pl->round_done = round_done;
  pl->loss_sum = loss_sum;
  pl->seq_flat = seq_flat;
  pl->seq_ctx = ctx;
}

// One pass's state: which microbatch the model's activations hold.
typedef struct {
  ts_pipeline *pl;
  ts_model *m;
  int b0;
  const int *inputs, *targets;
  uint64_t step;
  int train, holding;
  size_t seq_tokens; // tokens of one microbatch
} pass;

static unsigned char *slot(const pass *ps, int mu) {
  return ps->pl->store + (size_t)(mu % ps->pl->slots) * ps->pl->fwd_bytes;
}

static int forward(pass *ps, int mu) {
  ts_pipeline *pl = ps->pl;
  ts_model_select_sequence(ps->m, ps->b0 + mu * pl->stride);
  ts_model_set_stage_input(ps->m, slot(ps, mu));
  ts_model_forward(ps->m, ps->inputs + (size_t)mu * ps->seq_tokens,
                   ps->targets + (size_t)mu * ps->seq_tokens, ps->step, ps->train);
  int rc = ts_model_status(ps->m);
  if (rc) return rc;
  if (pl->s == pl->P - 1) // (two runs: each run's, summed apart over the group)
    for (int k = 0; k < pl->runs; k++)
      pl->lsums[k * pl->M + mu] = pl->runs == 2 ? ts_model_run_loss_sum(ps->m, k)
                                                : ts_model_loss_sum(ps->m);
  ps->holding = mu;
  return TS_OK;
}

// [lo, hi) of the model's gradient, g, into the tree over the microbatches
// (pipeline.h: parts_of): the last microbatch's sum written over it, an
// earlier one's let go once in the tree (its next backward writes it again).
static int last_microbatch(const ts_pipeline *pl) { return pl->tree.count + 1 == (uint64_t)pl->M; }

static int push_part(ts_pipeline *pl, float *g, size_t lo, size_t hi) {
  if (ts_tree_push_part(&pl->tree, g, lo, hi, last_microbatch(pl)) != 0)
    return ts_fail(TS_ERUNTIME, "out of memory (gradient tree over microbatches)");
  return TS_OK;
}

// The model's hook: layer l's gradient is complete.
static int layer_grads_in_parts(void *ctx, int l) {
  ts_pipeline *pl = ctx;
  const int k = l - pl->lay_l0;
  return push_part(pl, ts_model_grads(pl->parts_of), pl->lay_lo[k], pl->lay_lo[k + 1]);
}

// After the backward: the rest of the gradient (before and after the
// layers), and the leaf done.
static int rest_in_parts(ts_pipeline *pl, ts_model *m) {
  float *g = ts_model_grads(m);
  const int last = last_microbatch(pl);
  int rc = push_part(pl, g, 0, pl->lay_lo[0]);
  if (!rc) rc = push_part(pl, g, pl->lay_lo[pl->nlay], ts_model_num_params(m));
  if (!rc) ts_tree_push_parts_end(&pl->tree, last);
  return rc;
}

// The backward of microbatch mu, its stage input in its slot and the next
// stage's gradient in pl->dy; its activations recomputed unless held.
static int backward(pass *ps, int mu) {
  ts_pipeline *pl = ps->pl;
  int rc;
  if (ps->holding != mu && (rc = forward(ps, mu))) return rc;
  const size_t rd = pl->rows * (size_t)ts_model_config(ps->m)->d;
  if (pl->tied && pl->s == pl->P - 1) // the last residual of mu, for its tied gradient
    memcpy(pl->tied_store + (size_t)mu * rd, ts_model_last_residual(ps->m), rd * sizeof(float));
  ts_model_set_stage_grad(ps->m, pl->dy);
  if ((rc = ts_model_backward(ps->m, ps->step))) return rc;
  if (pl->tied && pl->s == 0) // the gradient of mu's embedding output
    memcpy(pl->tied_store + (size_t)mu * rd, ts_model_embedding_dgrad(ps->m), rd * sizeof(float));
  ps->holding = -1;
  pl->inflight--;
  // in rounds: summed over the groups, the rank's shard kept (shard.h)
  if (pl->round_done) return pl->round_done(pl->seq_ctx);
  if (pl->parts_of) return rest_in_parts(pl, ps->m); // (its layers' went in already)
  // a sequence's gradient: the sequence group's sum first
  if (pl->seq_grads && (rc = pl->seq_grads(pl->seq_ctx, ts_model_grads(ps->m)))) return rc;
  if (ts_tree_push(&pl->tree, ts_model_grads(ps->m)) != 0)
    return ts_fail(TS_ERUNTIME, "out of memory (gradient tree over microbatches)");
  return TS_OK;
}

static int recv_forward(pass *ps, int mu) {
  ts_pipeline *pl = ps->pl;
  pl->inflight++;
  if (pl->inflight > pl->peak_inflight) pl->peak_inflight = pl->inflight;
  if (pl->s == 0) return TS_OK;
  return ts_comm_recv(pl->pipe, slot(ps, mu), pl->fwd_bytes, pl->s - 1, -1);
}

static int send_forward(pass *ps) {
  ts_pipeline *pl = ps->pl;
  if (pl->s == pl->P - 1) return TS_OK;
  return ts_comm_send(pl->pipe, ts_model_stage_output(ps->m), pl->fwd_bytes,
                      pl->s + 1, -1);
}

static int recv_backward(pass *ps) {
  ts_pipeline *pl = ps->pl;
  if (pl->s == pl->P - 1) return TS_OK;
  return ts_comm_recv(pl->pipe, pl->dy, pl->bwd_bytes, pl->s + 1, -1);
}

static int send_backward(pass *ps) {
  ts_pipeline *pl = ps->pl;
  if (pl->s == 0) return TS_OK;
  return ts_comm_send(pl->pipe, ts_model_stage_dinput(ps->m), pl->bwd_bytes,
                      pl->s - 1, -1);
}

// 1F1B's paired exchanges: our output forward with the next stage's gradient
// back, and our input's gradient back with the next microbatch's input, each
// one sendrecv, so that neighbours never both wait in a send.
static int send_forward_recv_backward(pass *ps) {
  ts_pipeline *pl = ps->pl;
  if (pl->s == pl->P - 1) return TS_OK;
  return ts_comm_sendrecv(pl->pipe, ts_model_stage_output(ps->m), pl->fwd_bytes, pl->s + 1,
                          pl->dy, pl->bwd_bytes, pl->s + 1, -1);
}

static int send_backward_recv_forward(pass *ps, int mu_next) {
  ts_pipeline *pl = ps->pl;
  pl->inflight++;
  if (pl->inflight > pl->peak_inflight) pl->peak_inflight = pl->inflight;
  if (pl->s == 0) return TS_OK;
  return ts_comm_sendrecv(pl->pipe, ts_model_stage_dinput(ps->m), pl->bwd_bytes, pl->s - 1,
                          slot(ps, mu_next), pl->fwd_bytes, pl->s - 1, -1);
}

static int gpipe(pass *ps) {
  ts_pipeline *pl = ps->pl;
  int rc = TS_OK;
  for (int mu = 0; mu < pl->M && !rc; mu++)
    if (!(rc = recv_forward(ps, mu)) && !(rc = forward(ps, mu))) rc = send_forward(ps);
  if (!ps->train) {
    pl->inflight = 0;
    return rc;
  }
  // backwards in microbatch order, the order of the gradient tree
  for (int mu = 0; mu < pl->M && !rc; mu++)
    if (!(rc = recv_backward(ps)) && !(rc = backward(ps, mu))) rc = send_backward(ps);
  return rc;
}

int ts_pipeline_forwards(int P, int s, int M, int schedule) {
  // gpipe: every backward but a lone microbatch's finds another's activations held
  if (schedule == 0) return M + M - (M == 1);
  // one_f_one_b: a steady backward follows another microbatch's forward when
  // there was a warm-up; the cool-down's find none held, but a lone warm-up's
  const int warm = P - s - 1 < M ? P - s - 1 : M, steady = M - warm;
  return M + (warm > 0 ? steady : 0) + warm - (steady == 0 && warm == 1);
}

static int one_f_one_b(pass *ps) {
  ts_pipeline *pl = ps->pl;
  const int M = pl->M, warm = pl->P - pl->s - 1 < M ? pl->P - pl->s - 1 : M, steady = M - warm;
  int rc = TS_OK;
  for (int i = 0; i < warm && !rc; i++)
    if (!(rc = recv_forward(ps, i)) && !(rc = forward(ps, i))) rc = send_forward(ps);
  if (!rc && steady > 0) rc = recv_forward(ps, warm);
  for (int i = 0; i < steady && !rc; i++) {
    const int f = warm + i, b = i;
    if ((rc = forward(ps, f)) || (rc = send_forward_recv_backward(ps)) || (rc = backward(ps, b)))
      break;
    rc = i < steady - 1 ? send_backward_recv_forward(ps, f + 1) : send_backward(ps);
  }
  for (int i = 0; i < warm && !rc; i++)
    if (!(rc = recv_backward(ps)) && !(rc = backward(ps, steady + i))) rc = send_backward(ps);
  return rc;
}

// After a training pass with a tied head: the first stage sends each
// microbatch's embedding-output gradient to the last, which computes the
// tied embedding's gradient microbatch by microbatch (into its sequence slot,
// or its tree over microbatches, then the embedding's place in the gradient).
// A rank of two runs computes each run's partial apart (wte_grad2: the
// second's), and the sequence group sums each before adding them, as it
// does the model's own gradients (src/model/run_partials.c).
static int tied_embedding(pass *ps) {
  ts_pipeline *pl = ps->pl;
  ts_model *m = ps->m;
  const size_t rd = pl->rows * (size_t)ts_model_config(m)->d;
  int rc = TS_OK;
  if (pl->s == 0) {
    for (int mu = 0; mu < pl->M && !rc; mu++)
      rc = ts_comm_send(pl->pipe, pl->tied_store + (size_t)mu * rd, rd * sizeof(float), pl->P - 1,
                        -1);
    return rc;
  }
  if (pl->s != pl->P - 1) return TS_OK;
  float *demb = pl->be->alloc(rd * sizeof(float));
  if (!demb) return ts_fail(TS_ERUNTIME, "out of memory (tied head)");
  ts_tree_reset(&pl->wte_tree, 0);
  for (int mu = 0; mu < pl->M && !rc; mu++) {
    if ((rc = ts_comm_recv(pl->pipe, demb, rd * sizeof(float), 0, -1))) break;
    ts_model_select_sequence(m, ps->b0 + mu * pl->stride);
    float *out = pl->wte_grad;
    rc = ts_model_tied_embedding_grad(m, ps->inputs + (size_t)mu * ps->seq_tokens,
                                      ps->targets + (size_t)mu * ps->seq_tokens,
                                      pl->tied_store + (size_t)mu * rd, demb, out,
                                      pl->wte_grad2);
    // a sequence's part: the sequence group's sum first (in rounds the data
    // group's too: the round's subtree)
    if (!rc && pl->seq_flat) rc = pl->seq_flat(pl->seq_ctx, out, pl->wte_grad2, pl->wte_len);
    if (!rc && ts_tree_push(&pl->wte_tree, out) != 0)
      rc = ts_fail(TS_ERUNTIME, "out of memory (tied embedding tree)");
  }
  if (!rc) ts_tree_finish(&pl->wte_tree, ts_model_grads(m) + pl->wte_off);
  pl->be->free(demb);
  return rc;
}

int ts_pipeline_pass(ts_pipeline *pl, ts_model *m, int b0, const int *inputs, const int *targets,
                     uint64_t step, int train, float *loss_sum) {
  pass ps = {pl, m, b0, inputs, targets, step, train, -1, pl->rows};
  pl->inflight = pl->peak_inflight = 0;
  ts_tree_reset(&pl->tree, 0);
  // the gradient in parts (pipeline.h), through the model's layer hooks
  // (without rounds: no other hooks)
  pl->parts_of = train && pl->lay_lo && !pl->round_done && !pl->seq_grads &&
                         pl->be == &ts_backend_cpu ? m : NULL;
  if (pl->parts_of) {
    pl->hooks = (ts_layer_hooks){.grads_done = layer_grads_in_parts, .ctx = pl};
    ts_model_set_layer_hooks(m, &pl->hooks);
  }
  int rc = train && pl->schedule == 1 ? one_f_one_b(&ps) : gpipe(&ps);
  if (pl->parts_of) ts_model_set_layer_hooks(m, NULL);
  if (rc) return rc;
  // (in rounds, and in parts, the last microbatch wrote the sum in place:
  // in rounds the rank's shard of the gradient, the tied embedding's after
  // it, whole, over whatever the rounds left there)
  if (train && !pl->round_done && !pl->parts_of) ts_tree_finish(&pl->tree, ts_model_grads(m));
  if (train && pl->tied && (rc = tied_embedding(&ps))) return rc;
  // the loss from the last stage to all: the tree over microbatches, or with
  // a sequence group first each sequence's tree over its segments; in rounds
  // the global batch's (loss_sum)
  float sum = 0.0f;
  if (pl->s == pl->P - 1 && pl->loss_sum)
    rc = pl->loss_sum(pl->seq_ctx, pl->lsums, pl->M, &sum);
  else if (pl->s == pl->P - 1 && pl->seq)
    rc = ts_segment_loss_sum(pl->seq, pl->lsums, pl->M, pl->runs, &sum);
  else if (pl->s == pl->P - 1)
    sum = ts_tree_sum(pl->lsums, (size_t)pl->M);
  if (rc) return rc;
  if ((rc = ts_comm_bcast(pl->pipe, &sum, sizeof sum, pl->P - 1, -1))) return rc;
  *loss_sum = sum;
  return TS_OK;
}

int ts_pipeline_sync_copies(ts_pipeline *pl, ts_model *m, uint64_t step) {
  int rc = TS_OK;
  // down the chain: stage s receives boundary s−1's, then sends boundary s's
  if (pl->s > 0) rc = ts_model_boundary_sync(m, pl->pipe, pl->s - 1, pl->s - 1, 0, step);
  if (!rc && pl->s < pl->P - 1) rc = ts_model_boundary_sync(m, pl->pipe, pl->s, pl->s + 1, 1, step);
  if (rc || !pl->tied) return rc;
  // the tied embedding, updated on the last stage, to the first stage's copy
  if (pl->s == pl->P - 1)
    return ts_comm_send(pl->pipe, ts_model_params(m) + pl->wte_off, pl->wte_len * sizeof(float),
                        0, -1);
  if (pl->s == 0) {
    // the first copy: the embedding precedes every codec tensor (the codecs'
    // copies follow it: --vq-backward on's gradient codebooks, for one)
    ts_tensor embedding;
    if (!ts_model_copy(m, 0, &embedding)) return ts_fail(TS_ERUNTIME, "pipeline: no embedding copy");
    return ts_comm_recv(pl->pipe, embedding.data, pl->wte_len * sizeof(float), pl->P - 1, -1);
  }
  return TS_OK;
}
