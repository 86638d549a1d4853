// Pipeline parallelism (docs/ALGORITHMS.md §6): stage s of P holds layers
// [s·L/P, (s+1)·L/P) (the first also the embeddings, the last the final norm,
// the head and the loss) and runs M microbatches of a data rank's sequences
// through them, GPipe (all forwards, then all backwards) or 1F1B (after
// min(P−s−1, M) warm-up forwards, one forward then one backward). Activations
// go forward and their gradients backward by send/recv on the pipeline group.
//
// Exactness: a microbatch is an aligned run of the data rank's gradient leaves
// (a subtree: layout.c checks it), its stage computation is the serial
// model's code on the same rows, and the stage pushes each microbatch's
// gradient into a tree in microbatch order, so the sum is the serial tree. A
// stage keeps only the input of each microbatch in flight and recomputes its
// activations before the microbatch's backward (the same bits).
//
// A stage holds, updates and checkpoints only its own tensors (its model is
// a stage's: ts_model_create_stage), so its gradients stay where they are;
// after the step the stages bring each other's copies up to date
// (ts_pipeline_sync_copies).
#ifndef TS_PIPELINE_H
#define TS_PIPELINE_H
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "comm/comm.h"
#include "exact/tree.h"
#include "tessera.h"

typedef struct {
  ts_comm *pipe;        // the pipeline group, ordered by stage
  const ts_backend *be; // allocates the buffers the model's kernels use (its backend)
  int P, s;             // stages, this stage
  int M, mb;            // microbatches, sequences per microbatch
  int schedule;         // 0 GPipe, 1 1F1B
  size_t fwd_bytes;     // one microbatch's boundary activation (X, or Z or codes: boundary/boundary.h)
  size_t bwd_bytes;     // its gradient coming back (of X, or Z)
  unsigned char *store; // in-flight stage inputs: slots of fwd_bytes
  int slots;            // M (GPipe) or min(P − s, M) (1F1B)
  void *dy;             // the next stage's gradient of our output (the backward's wire)
  size_t rows;          // a microbatch's rows on this rank (mb·T, or mb·T/N under --sp)
  size_t d;             // the model's width
  ts_tree tree;         // the stage's gradients over microbatches
  // Without rounds and a sequence group (on the CPU), each microbatch's
  // gradient goes into `tree` in parts (ts_tree_push_part): each layer's as
  // its backward ends (the model's grads_done hook), the rest (embeddings,
  // head, codec tensors) after the backward, the model's buffer let go behind
  // them and the last microbatch's sum written into it part by part. A stage
  // then holds two gradient-sized buffers besides the model's at no point
  // where it would have held three (M ≥ 3: the tree's two subtrees and the
  // microbatch being computed, now one of them going as the other comes).
  // lay_l0, nlay, lay_lo: the stage's layers' runs (ts_model_layer_runs;
  // lay_lo NULL: not one run each, no parts).
  int lay_l0, nlay;
  size_t *lay_lo;
  ts_layer_hooks hooks;
  ts_model *parts_of;   // the model whose gradient goes in parts this pass, else NULL
  // Under --sp N (one sequence per microbatch): the sequence group, whose
  // segment loss sums the last stage combines, and the shard's sums of a
  // sequence over it (shard.h), run on each microbatch's gradient before it
  // enters the tree (seq_grads: the model's gradient layout; seq_flat: n
  // floats, the tied embedding's, with buf2 the second run's partials of a
  // rank of two runs, summed apart and added into buf, else NULL): the
  // sequence group first, then the sequences. NULL otherwise.
  ts_comm *seq;
  int (*seq_grads)(void *ctx, float *g);
  int (*seq_flat)(void *ctx, float *buf, float *buf2, size_t n);
  void *seq_ctx;
  // 2 on a rank of two runs whose partials stay apart (lss-zigzag:
  // ts_model_second_run_grads), else 1: the last stage keeps each run's loss
  // sum (lsums: run k's of the M microbatches from k·M) and the tied
  // embedding's second run's partial (wte_grad2)
  int runs;
  // Under --zero 2 and 3 the microbatches go in the shard's rounds (shard.h,
  // docs/ALGORITHMS.md §12): microbatch mu holds the sequences from
  // b0 + mu·stride (stride mb, or D·mb in rounds), and each one's gradient,
  // as its backward ends, goes to round_done (summed over the groups, the
  // rank's shard of it into the tree over the rounds) in place of seq_grads
  // and `tree`, which then holds nothing; the last writes the rank's shard
  // of the step's gradient in place. seq_flat then sums the
  // tied embedding's part over the data group too, and the last stage's
  // loss_sum (ctx seq_ctx) combines the microbatches' loss sums over the
  // groups by their places in the serial tree. NULL: none of this.
  int stride;
  int (*round_done)(void *ctx);
  int (*loss_sum)(void *ctx, const float *lsums, int M, float *out);
  // A tied head (--tied): the first stage keeps each microbatch's gradient of
  // the embedding output, the last its last residual (M × rows × d each);
  // after the pass the first sends them to the last, which computes the tied
  // embedding's gradient per microbatch (ts_model_tied_embedding_grad) into
  // its own tree: the embedding is the last stage's, the first holds a copy.
  int tied;
  float *tied_store;
  float *wte_grad;      // (V × d) one microbatch's, on the last stage
  float *wte_grad2;     // (V × d) its second run's partial (runs 2), else NULL
  size_t wte_off, wte_len; // the embedding inside the last stage's parameters and gradient
  ts_tree wte_tree;
  float *lsums;         // (runs × M) the last stage's microbatch loss sums
  int inflight, peak_inflight; // microbatches whose input is stored
} ts_pipeline;

// For a model already created with one microbatch (mb sequences).
int ts_pipeline_create(ts_pipeline *pl, ts_model *m, ts_comm *pipe, int M, int schedule, int mb);
void ts_pipeline_free(ts_pipeline *pl);
// The shard's sums that the pipeline runs (shard.c), ctx the shard they are
// given. Under --sp: the sequence group, and seq_grads and seq_flat (the
// fields' comment above).
void ts_pipeline_set_sequence_hooks(ts_pipeline *pl, ts_comm *seq,
                                    int (*seq_grads)(void *ctx, float *g),
                                    int (*seq_flat)(void *ctx, float *buf, float *buf2, size_t n),
                                    void *ctx);
// Under --zero 2 and 3: the microbatches in the shard's rounds, microbatch
// mu's sequences from b0 + mu·stride, with round_done, loss_sum and
// seq_flat (the fields' comment above).
void ts_pipeline_set_round_hooks(ts_pipeline *pl, int stride, int (*round_done)(void *ctx),
                                 int (*loss_sum)(void *ctx, const float *lsums, int M, float *out),
                                 int (*seq_flat)(void *ctx, float *buf, float *buf2, size_t n),
                                 void *ctx);
// Bytes of the stage's buffers (inputs in flight, the gradient back, the
// tied head's stores; not the gradient trees).
size_t ts_pipeline_buffer_bytes(const ts_pipeline *pl);
// Forward (and backward when `train`) of the M microbatches of one batch:
// inputs, targets (M·mb, T) of this data rank (under --sp: each sequence's
// T/N rows of this rank), microbatch mu's sequences from b0 + mu·stride.
// *loss_sum is the tree over microbatches of their loss sums (in rounds: the
// global batch's), on every stage. With `train` the model's gradients are
// this stage's, summed over microbatches (in rounds: over the global batch,
// the rank's shard of them and the ends).
// The forward passes stage s of P runs in a training pass of M microbatches
// under `schedule` (0 GPipe, 1 1F1B): each microbatch's, and again before
// each backward whose activations the model no longer holds (it holds one
// microbatch's: those of the last forward). For tessera plan; it follows
// gpipe() and one_f_one_b() in pipeline.c.
int ts_pipeline_forwards(int P, int s, int M, int schedule);
int ts_pipeline_pass(ts_pipeline *pl, ts_model *m, int b0, const int *inputs, const int *targets,
                     uint64_t step, int train, float *loss_sum);
// After optimizer step `step`, the copies a stage holds of another stage's
// tensors made equal to them again: the boundary codec's sync (boundary.h)
// — under the mapl modes that learn it each stage sends its output
// boundary's projector A_s to the next stage, which decodes with it, and
// under mapl-vq the step's streamed codes for the receiver's codebook copy
// (docs/ALGORITHMS.md §7): d·r floats, plus R·sync·r floats, per boundary
// per step — and a tied embedding from the last stage to the first (V·d floats).
int ts_pipeline_sync_copies(ts_pipeline *pl, ts_model *m, uint64_t step);
#endif
