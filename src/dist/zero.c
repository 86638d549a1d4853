// ZeRO stages 2 and 3 (shard.h; docs/ALGORITHMS.md §12): a layer's gradient
// leaves the rank as soon as its backward ends, and under stage 3 its
// parameters are on the rank only while the layer runs.
//
// Stage 1 (shard.c) cuts the stage's owned elements into the replica group's
// shards; each rank updates its own. Stages 2 and 3 keep that cut and hold
// less of the rest, layer by layer, through the model's layer hooks:
//   - when layer l's backward has written its gradient, the gradient is
//     summed over the sequence group and then the data group (the same
//     canonical trees, element by element, as the whole-buffer sums of
//     stages 0 and 1, so the same bits) and every page of it outside the
//     rank's shard is given back (ts_pages_discard);
//   - under stage 3, before layer l's forward and its backward each shard's
//     owner broadcasts its part of the layer's parameters, and after them the
//     pages outside the rank's shard are given back.
// The buffers keep the model's layout, so no kernel changes: a given-back
// page reads as zeros and costs no memory until written again. The ends
// (embeddings, final norm, head) are summed at the end of the pass
// (ts_zero_sum: a tied embedding's gradient is complete only after the
// embeddings' backward). Outside a pipeline they are sharded as the layers
// are (`ends`): under 3 the embeddings' parameters come whole just for the
// embeddings' forward and backward, the final norm's and the head's (with a
// tied embedding's) just for the head's, and under 2 and 3 their summed
// gradients are let go but the rank's shard. With a learned position table
// as long as the context they are no longer small (at T = 8192 the table is
// a fifth of the `small` model). In a pipeline they stay whole: a stage's
// tied embedding goes whole between the first and the last stage.
//
// A layer's gradient must be complete when its backward ends: with one pass
// a step (the rank's share of the batch at once; one sequence per rank
// under --sp) it is. With several (accumulation's microbatches, a rank's
// sequences under --sp) the passes go in rounds instead (shard.h): pass j
// of data rank r takes the sequences from (j·D + r)·s, so the D ranks' j-th
// passes are one aligned run of the serial tree, their sum over the data
// group (the hooks' and ts_zero_pass_done's) is that run's subtree, and the
// rank pushes its shard of it into a tree over the rounds: shard-sized
// buffers, O(log passes) of them. A pipeline stage's microbatches are its
// passes (pipeline.h: the stage pushes each microbatch's shard into the tree
// over the rounds, never a whole gradient; a tied embedding's gradient, an
// end, is summed whole per microbatch and written after). On the host only
// (pages are host memory).
#include "model/run_partials.h"
#include "shard.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "exact/tree.h"

// Gives back [lo, hi) of buf but the rank's shard [own_lo, own_hi).
static void let_go(const ts_shard *sh, float *buf, size_t lo, size_t hi) {
  const size_t a = sh->own_lo < lo ? lo : sh->own_lo, b = sh->own_hi > hi ? hi : sh->own_hi;
  if (a >= b) {
    ts_pages_discard(buf + lo, (hi - lo) * sizeof(float));
    return;
  }
  if (lo < a) ts_pages_discard(buf + lo, (a - lo) * sizeof(float));
  if (b < hi) ts_pages_discard(buf + b, (hi - b) * sizeof(float));
}

static int group_sum(const ts_shard *sh, ts_comm *group, float *g, size_t lo, size_t hi) {
  if (!group || group->size < 2 || lo >= hi) return TS_OK;
  return sh->fast ? ts_comm_allreduce_fast(group, g + lo, hi - lo, -1)
                  : ts_comm_allreduce_tree(group, g + lo, hi - lo, -1);
}

int ts_zero_sum(ts_shard *sh, ts_comm *group, float *g, size_t lo, size_t hi) {
  if (sh->nlay == 0) return group_sum(sh, group, g, lo, hi);
  const size_t L0 = sh->lay_lo[0], L1 = sh->lay_lo[sh->nlay];
  int rc = group_sum(sh, group, g, lo, hi < L0 ? hi : L0);
  if (!rc) rc = group_sum(sh, group, g, lo > L1 ? lo : L1, hi);
  return rc;
}

// The sequence group's sum of g[lo, hi), the model's gradient. A rank of two
// runs (lss-zigzag, run_partials.c) sums its second run's partials too and
// adds them, the serial tree's root; they are then -0.0 again, the identity
// (give_back: their pages given back instead, reading +0.0 until the next
// backward writes every one of them again).
static int seq_sum(ts_shard *sh, float *g, size_t lo, size_t hi, int give_back) {
  int rc = group_sum(sh, sh->seq, g, lo, hi);
  float *g2 = ts_model_second_run_grads(sh->m);
  if (rc || !g2 || g != ts_model_grads(sh->m) || lo >= hi) return rc;
  if ((rc = group_sum(sh, sh->seq, g2, lo, hi))) return rc;
  sh->be->add(g + lo, g + lo, g2 + lo, (int64_t)(hi - lo));
  if (give_back) ts_pages_discard(g2 + lo, (hi - lo) * sizeof(float));
  else ts_run_partials_clear(sh->m, lo, hi);
  return TS_OK;
}

int ts_zero_seq_sum(ts_shard *sh, float *g, size_t lo, size_t hi) {
  if (sh->nlay == 0) return seq_sum(sh, g, lo, hi, 0);
  const size_t L0 = sh->lay_lo[0], L1 = sh->lay_lo[sh->nlay];
  int rc = seq_sum(sh, g, lo, hi < L0 ? hi : L0, 0);
  if (!rc) rc = seq_sum(sh, g, lo > L1 ? lo : L1, hi, 0);
  return rc;
}

int ts_zero_gather(ts_shard *sh, float *p, size_t lo, size_t hi) {
  for (int q = 0; q < sh->replica->size; q++) {
    const size_t a = sh->cut[q] < lo ? lo : sh->cut[q];
    const size_t b = sh->cut[q + 1] > hi ? hi : sh->cut[q + 1];
    int rc = a < b ? ts_comm_bcast(sh->replica, p + a, (b - a) * sizeof(float), q, -1) : TS_OK;
    if (rc) return rc;
  }
  return TS_OK;
}

// p[lo, hi) whole (each shard's part from its owner) or let go.
static int whole_or_go(ts_shard *sh, float *p, size_t lo, size_t hi, int whole) {
  if (lo >= hi) return TS_OK;
  if (whole) return ts_zero_gather(sh, p, lo, hi);
  let_go(sh, p, lo, hi);
  return TS_OK;
}

// Layer l's parameters whole or let go; l before the stage's layers: the
// embeddings', after them: the final norm's and the head's (`ends`).
static int layer_params_in(void *ctx, int l, int whole) {
  ts_shard *sh = ctx;
  if (sh->zero < 3) return TS_OK;
  float *p = ts_model_params(sh->m);
  const int i = l - sh->lay_l0;
  if (i >= 0 && i < sh->nlay) return whole_or_go(sh, p, sh->lay_lo[i], sh->lay_lo[i + 1], whole);
  if (!sh->ends) return TS_OK;
  if (i < 0) return whole_or_go(sh, p, 0, sh->lay_lo[0], whole);
  const int rc = whole_or_go(sh, p, sh->lay_lo[sh->nlay], sh->ends_hi, whole);
  return rc ? rc : whole_or_go(sh, p, sh->wte_lo, sh->wte_hi, whole); // a tied head's
}

// In rounds the tree's leaf is the rank's shard of a pass's summed gradient,
// then its positional rows (own + rows floats); it goes in by parts
// (ts_tree_push_part), each layer's as its sums end and the rest after the
// pass, read where the model's gradient holds them: x[k] for k in [lo, hi)
// (x: the gradient at the shard, or at the rows less own). The last pass's
// sum is written back there; an earlier pass's part is let go once in the
// tree, so that no shard-sized copy of a pass is kept beside the tree.
static int last_round(const ts_shard *sh) { return sh->rounds.count + 1 == (uint64_t)sh->passes; }

static int round_part(ts_shard *sh, float *x, size_t lo, size_t hi) {
  if (ts_tree_push_part(&sh->rounds, x, lo, hi, last_round(sh)) != 0)
    return ts_fail(TS_ERUNTIME, "out of memory (gradient tree over the rounds)");
  return TS_OK;
}

// Layer l's gradient summed over the sequence group, then the data group,
// and all but the rank's shard of it let go.
static int layer_grads_done(void *ctx, int l) {
  ts_shard *sh = ctx;
  float *g = ts_model_grads(sh->m);
  const int i = l - sh->lay_l0;
  const size_t lo = sh->lay_lo[i], hi = sh->lay_lo[i + 1];
  int rc = seq_sum(sh, g, lo, hi, 1);
  if (!rc) rc = group_sum(sh, sh->data, g, lo, hi);
  if (rc) return rc;
  if (sh->strided) { // the rank's part of this pass's sum, into the tree over the rounds
    const size_t a = sh->own_lo < lo ? lo : sh->own_lo, b = sh->own_hi > hi ? hi : sh->own_hi;
    if (a < b && (rc = round_part(sh, g + sh->own_lo, a - sh->own_lo, b - sh->own_lo))) return rc;
  }
  let_go(sh, g, lo, hi);
  return TS_OK;
}

// The positional rows a rank owns apart from the shards (under --sp, the
// last owned elements; shard.h), 0 without.
static size_t own_rows(const ts_shard *sh) { return sh->nupd_floats - (sh->own_hi - sh->own_lo); }

int ts_zero_pass_done(ts_shard *sh) {
  float *g = ts_model_grads(sh->m);
  const size_t np = ts_model_num_params(sh->m), rows = own_rows(sh), nz = np - rows;
  // the ends over the sequence group (not the positional rows, each rank's
  // own), then the data group (rows too); a pipeline's tied embedding apart
  // (seq_skip: its own sums, pipeline.h)
  int rc = ts_zero_seq_sum(sh, g, sh->seq_skip, nz);
  if (!rc) rc = ts_zero_sum(sh, sh->data, g, sh->seq_skip, np);
  if (rc) return rc;
  // the rank's shard of the ends (its layers' came from the hooks), then its
  // rows: the rest of the pass's leaf
  const size_t L0 = sh->lay_lo[0], L1 = sh->lay_lo[sh->nlay], own = sh->own_hi - sh->own_lo;
  const size_t ends[2][2] = {{sh->own_lo, sh->own_hi < L0 ? sh->own_hi : L0},
                             {sh->own_lo > L1 ? sh->own_lo : L1, sh->own_hi}};
  const int last = last_round(sh);
  for (int k = 0; k < 2 && !rc; k++)
    if (ends[k][0] < ends[k][1])
      rc = round_part(sh, g + sh->own_lo, ends[k][0] - sh->own_lo, ends[k][1] - sh->own_lo);
  if (!rc) rc = round_part(sh, g + nz - own, own, own + rows);
  if (rc) return rc;
  ts_tree_push_parts_end(&sh->rounds, last); // (the last: the sum in its place already)
  ts_zero_ends_summed(sh); // (the next pass's backward writes them whole again)
  return TS_OK;
}

void ts_zero_ends_summed(ts_shard *sh) {
  if (!sh->ends) return;
  float *g = ts_model_grads(sh->m);
  let_go(sh, g, 0, sh->lay_lo[0]);
  let_go(sh, g, sh->lay_lo[sh->nlay], sh->ends_hi);
}


int ts_zero_plan(ts_shard *sh) {
  if (sh->zero < 2) return TS_OK;
  ts_model *m = sh->m;
  const int nt = ts_model_num_tensors(m);
  ts_tensor *t = calloc((size_t)nt + 1, sizeof *t);
  sh->lay_lo = calloc((size_t)ts_model_config(m)->n_layer + 1, sizeof *sh->lay_lo);
  if (!t || !sh->lay_lo) {
    free(t);
    return ts_fail(TS_ERUNTIME, "out of memory");
  }
  ts_model_tensors(m, t, NULL);
  const float *base = ts_model_params(m);
  int rc = TS_OK, bad;
  switch (ts_model_layer_runs(m, &sh->lay_l0, &sh->nlay, sh->lay_lo, &bad)) {
  case 1: rc = ts_fail(TS_ERUNTIME, "--zero %d: a tensor between the layers' (%s)", sh->zero,
                       t[bad].name); break;
  case 2: rc = ts_fail(TS_ERUNTIME, "--zero %d: layer %d is not one run", sh->zero, bad); break;
  }
  // the ends sharded too, outside a pipeline and a tensor split (shard.h):
  // up to the positional rows under --sp (each rank's own), and a tied
  // head's embedding
  sh->ends = !sh->pl && sh->split_len == 0;
  sh->ends_hi = ts_model_num_params(m) - (sh->seq ? sh->wpe_len : 0);
  for (int i = 0; i < nt && !rc; i++)
    if (t[i].role == TS_ROLE_EMBEDDING && ts_model_config(m)->tied) {
      sh->wte_lo = (size_t)(t[i].data - base);
      sh->wte_hi = sh->wte_lo + (size_t)ts_tensor_numel(&t[i]);
    }
  free(t);
  if (rc) return rc;
  if (sh->nlay == 0) return ts_fail(TS_ERUNTIME, "--zero %d: the stage holds no layers", sh->zero);
  // several passes a step: in rounds (shard.h); a pipeline's microbatches
  // always (even one: its stage then holds no gradient tree of its own)
  const int passes = sh->pl ? sh->pl->M : sh->seq ? sh->nb : sh->M;
  if (passes > 1 || sh->pl) {
    sh->s = sh->seq ? 1 : sh->mb;
    sh->passes = passes;
    ts_tree_init(&sh->rounds, sh->nupd_floats);
    sh->strided = 1;
  }
  sh->hooks = (ts_layer_hooks){.params = layer_params_in, .grads_done = layer_grads_done, .ctx = sh};
  ts_model_set_layer_hooks(m, &sh->hooks);
  return TS_OK;
}

size_t ts_zero_held(const ts_shard *sh, int grads) {
  const size_t np = ts_model_num_params(sh->m);
  if (sh->zero < (grads ? 2 : 3) || sh->nlay == 0) return np;
  if (sh->ends) return sh->own_hi - sh->own_lo + (np - sh->ends_hi); // (and the rank's rows)
  const size_t L0 = sh->lay_lo[0], L1 = sh->lay_lo[sh->nlay];
  const size_t a = sh->own_lo < L0 ? L0 : sh->own_lo, b = sh->own_hi > L1 ? L1 : sh->own_hi;
  return np - (L1 - L0) + (b > a ? b - a : 0);
}

void ts_zero_release(ts_shard *sh) {
  if (sh->zero < 3 || sh->nlay == 0) return;
  float *p = ts_model_params(sh->m);
  if (sh->ends) let_go(sh, p, 0, sh->ends_hi);
  else let_go(sh, p, sh->lay_lo[0], sh->lay_lo[sh->nlay]);
}
