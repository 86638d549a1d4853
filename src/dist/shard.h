// What one rank holds of the global batch, and how its loss and gradients
// join those of its groups (docs/ALGORITHMS.md §2, §6; docs/EXACTNESS.md R3).
//
// A rank holds nb = batch/dp sequences [b0, b0 + nb) and, under --sp N,
// positions [t0, t0 + T/N) of each (ring-zigzag: two chunks). With N > 1 the
// model holds one sequence at a time and the rank runs its sequences one
// after the other: then every (sequence, segment) is an aligned subtree of
// the serial gradient tree, and the sums go sequence group first, then
// sequences, then the data group, which is the serial tree. (Several
// sequences at once would not be contiguous leaves.) Under --pp P the rank is
// a pipeline stage and runs microbatches of its sequences (pipeline.h).
#ifndef TS_SHARD_H
#define TS_SHARD_H
#include <stddef.h>

#include "comm/comm.h"
#include "exact/tree.h"
#include "grid.h"
#include "owners.h"
#include "pipeline.h"
#include "tessera.h"

typedef struct {
  ts_model *m;
  ts_comm *seq;        // the sequence group; NULL when sp = 1
  ts_pipeline *pl;     // the pipeline stage; NULL when pp = 1
  // Who owns which parts of the model state (owners.h): the pipeline group's
  // stages, or under --zero every rank its shard of its stage's.
  ts_owners owners;
  // --zero 1: the stage's owned elements [0, np) cut into the replica
  // group's shards (cut[q], cut[q+1]); this rank updates [own_lo, own_hi)
  // with moments for that alone, upd_p, upd_g its views (whole tensors, or
  // parts of them as flat runs), and after the step the shards' owners
  // broadcast them (ts_shard_gather_params). zero 0: one shard of all.
  // Under --sp the positional table's rows are not shared: every rank
  // updates its own (after its shard, in upd_*), nupd_floats in all.
  int zero;
  ts_comm *replica;
  size_t *cut, own_lo, own_hi;
  int nupd;
  size_t nupd_floats;
  ts_tensor *upd_p, *upd_g;
  // --zero 2 and 3 (zero.c): layer l0 + k is the run [lay_lo[k],
  // lay_lo[k + 1]) of the owned elements, the layers [lay_lo[0],
  // lay_lo[nlay]) in all. A layer's gradient is summed over the sequence and
  // data groups as soon as its backward ends and all but the rank's shard of
  // it let go; under 3 its parameters too, gathered just before each use.
  // The ends (embeddings, final norm, head) too when `ends` (not under a
  // pipeline, whose tied embedding moves between the stages whole, nor a
  // tensor split, whose blocks follow the head): [0, lay_lo[0]) and [lay_lo[nlay], ends_hi), gathered
  // around the embeddings' and the head's forward and backward (the head's
  // with a tied embedding's [wte_lo, wte_hi)), and under 2 and 3 their
  // gradients let go but the rank's shard once summed over the groups.
  int nlay, lay_l0, ends;
  size_t *lay_lo, ends_hi, wte_lo, wte_hi;
  ts_comm *data;
  ts_layer_hooks hooks;
  // Stages 2 and 3 over several passes (the microbatches of accumulation,
  // the sequences of a rank under --sp, and a pipeline stage's microbatches,
  // even one: pipeline.h): the passes go in rounds, pass j of
  // data rank r taking the sequences from (j·D + r)·s (s per pass), so that
  // a round is one aligned run of D·s sequences of the serial tree. Each
  // pass's gradient is summed over the groups (its layers' by the hooks, the
  // ends after it), and the rank's shard of the sum pushed into the tree
  // over the rounds part by part as the sums end (rounds: shard-sized
  // buffers; the last of the `passes` writes the step's sum in place).
  int strided, D, r, s, passes;
  ts_tree rounds;
  const ts_backend *be; // allocates slots, pack and the wpe buffers (the model's backend)
  int fast;            // --fast: MPI's own sums
  int nb, b0;          // sequences
  int T, t0, Tl;       // positions
  int nrun, run_len, run_pos[2]; // as runs (ring-zigzag: two chunks; ts_model_runs)
  const struct ts_cp *cp;        // the sequence group's strategy (its positions; strategy.h)
  int *rows_in, *rows_tg; // (Tl) this rank's tokens of one sequence, gathered from its runs
                          // (nb·Tl under --pp: every sequence's, for the pipeline)
  size_t np;           // parameters
  size_t wpe_off, wpe_len; // the positional embedding inside the gradient (under --sp
                           // the rank's rows: owned, not replicated; the last owned)
  size_t split_len;    // a tensor split's blocks (strategy.h `split`): the owned elements just
                       // before the rows, each rank's alone, outside the sequence group's sum
  float *lsums;        // (nb) segment loss sums
  // Each sequence's gradient is summed over the sequence group as soon as its
  // backward is done, then pushed into the tree over the sequences (a
  // binary-counter stack: O(log nb) gradient buffers, not nb). seq_skip:
  // leading elements the groups do not sum with the rest (a pipeline's tied
  // embedding, which the pipeline sums apart, per microbatch).
  ts_tree seq_tree;
  int has_tree;
  size_t seq_skip;
  // Gradient accumulation (--microbatches M without --pp): the model holds mb
  // sequences and the rank runs its M microbatches one after another, their
  // gradients into the same tree (seq_tree) and their loss sums into lsums.
  int M, mb;
} ts_shard;

// The first sequence of the rank's pass j (a microbatch, or under --sp a
// sequence): b0 + j·s, or in rounds (j·D + r)·s.
int ts_shard_pass_first(const ts_shard *sh, int j);

// The shard must stay at *out (its pipeline keeps a pointer to it).
int ts_shard_create(const ts_config *cfg, const ts_grid *grid, const ts_layout *lay,
                    ts_shard *out);
void ts_shard_free(ts_shard *sh);
// Bytes of the shard's own buffers (the sequence group's packing and
// gradient slots, the pipeline's stage buffers; not the gradient trees,
// which grow with the pass).
size_t ts_shard_buffer_bytes(const ts_shard *sh);

// Forward, and backward when `train`, over the shard's sequences of one
// batch: inputs, targets (nb, T) whole windows, pass after pass
// (ts_shard_pass_first). *loss_sum is the shard's sum of token losses: an
// aligned subtree of the global loss tree, already combined over the
// sequence group (one all-gather), for the trainer to combine over the data
// group; in rounds (strided) already the global sum, combined over the data
// group too.
int ts_shard_pass(ts_shard *sh, const int *inputs, const int *targets, uint64_t step, int train,
                  float *loss_sum);

// Under --sp, after the backward of one of the rank's sequences (in the
// model's gradient buffer; ts_shard_pass calls it): its sum over the
// sequence group, every gradient but the positional rows the rank owns, and
// its push into the tree over the rank's sequences.
int ts_shard_sequence_done(ts_shard *sh);

// After a training pass, the global batch's gradient into the model's
// gradient buffer on every rank (double gradient averaging, docs/ALGORITHMS.md §2):
//   1. one all-reduce over the sequence group of every gradient but the
//      positional embedding's, whose rows are owned, not replicated (per
//      sequence, as its backward ends: ts_shard_sequence_done);
//   2. the tree over the rank's sequences (when it holds several);
//   3. one all-reduce over the data group (NULL or size 1: none), positional
//      embedding included (its rows are each rank's own: docs/ALGORITHMS.md §12).
// Exact mode sums by the canonical trees; --fast lets MPI sum (1 and 3).
int ts_shard_sync_grads(ts_shard *sh, ts_comm *data_group);

// After the optimizer step under --zero: each shard's owner broadcasts its
// updated parameters to the replica group (one broadcast per shard), so that
// every replica holds them all again; under --zero 3 the ends alone, or
// nothing when they are sharded too (`ends`: each part comes when used,
// zero.c). Nothing without --zero.
int ts_shard_gather_params(ts_shard *sh);

// zero.c. ts_zero_plan: the layers' runs and the model's hooks under --zero
// 2 and 3 (nothing below). ts_zero_release: under 3, every layer's
// parameters (and the ends', `ends`) but the rank's shard let go (after the
// initialisation, a load and each step). ts_zero_ends_summed: once the
// ends' gradients are summed over the groups, all but the rank's shard of
// them let go (`ends`; else nothing). ts_zero_sum: the sum over `group` of g[lo, hi) without the
// layers', which their hooks summed already (without --zero 2: all of it).
// ts_zero_gather: each shard's part of p[lo, hi) from its owner to the
// replica group (one broadcast per shard it meets).
// ts_zero_held: the parameters (grads 0) or gradients (1) the rank holds
// between a layer's uses: its shard of the layers', and the ends (whole, or
// its shard of them too: `ends`).
// ts_zero_pass_done: in rounds, after a pass's backward, its ends summed
// over the groups and the rest of the rank's shard of the pass's sum pushed
// into the tree over the rounds (the layers' went in from the hooks); after
// the last pass the tree's sum is the rank's shard of the gradient, in
// place.
int ts_zero_plan(ts_shard *sh);
size_t ts_zero_held(const ts_shard *sh, int grads);
int ts_zero_pass_done(ts_shard *sh);
int ts_zero_gather(ts_shard *sh, float *p, size_t lo, size_t hi);
void ts_zero_release(ts_shard *sh);
void ts_zero_ends_summed(ts_shard *sh);
int ts_zero_sum(ts_shard *sh, ts_comm *group, float *g, size_t lo, size_t hi);
// The same over the sequence group, with a rank's second run's partials
// (lss-zigzag: ts_model_second_run_grads) summed and added too.
int ts_zero_seq_sum(ts_shard *sh, float *g, size_t lo, size_t hi);

#endif
