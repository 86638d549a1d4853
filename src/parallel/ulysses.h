// Head-parallel attention over a sequence group (docs/ALGORITHMS.md §4):
// DeepSpeed Ulysses and UPipe (Untied Ulysses).
//
// Rank r holds the positions [r·T/N, (r+1)·T/N) of one sequence, like LSS.
// All-to-alls turn sequence-sharded query, key and value heads into
// head-sharded ones over the whole sequence; each rank runs attention for its
// heads; another all-to-all brings the output back. Ulysses does it for all
// H heads at once; UPipe in ν = H/U stages of U heads, so that its
// intermediate buffers are ν times smaller: the stage's local Q, K, V, its
// head-sharded K', V' and output O'. The head-sharded Q' of stage i lives in
// slot i of the preallocated output (the stage's columns of the rank's rows),
// which the output's all-to-all overwrites when the stage ends.
//
// Stage schedules:
//   natural  stage i holds heads [i·U, (i+1)·U); rank c the c-th U/N of them,
//            with the key/value heads they use (one per group of G query
//            heads; sent again by every stage, and to every rank, that needs it).
//   gqa      (H/Hkv = G > 1) rounds of G stages; stage g of a round holds head
//            g of U groups, so rank c gets one query head of each of its U/N
//            groups. Key/value heads travel with the round's first stage only
//            and stay until its last: a round moves its U key and U value
//            heads once instead of one pair per query head, H + 2H/G
//            head-transfers per layer instead of 3H (UPipe paper §3.3).
//
// Exactness (docs/EXACTNESS.md): heads are projected one per call on the rank's
// leaf-row blocks, and each head's attention runs on the whole sequence as in
// the serial model, so the output is the serial bits. The backward runs in
// stages of whole groups per rank (U_b = lcm(U, N·G) heads) in natural order,
// recomputing the stage's projections and its attention output and lse, and
// brings dQ, dK, dV back into full sequence-sharded buffers (γ units): the
// model then forms the weight gradients and dX once, as the serial code does.
// dK, dV of a key/value head therefore sum its group's query heads in head
// order inside every query-tile leaf, the serial tree.
#ifndef TS_ULYSSES_H
#define TS_ULYSSES_H
#include <stddef.h>
#include <stdint.h>

#include "model/model_impl.h"

typedef enum { TS_UPIPE_NATURAL = 0, TS_UPIPE_GQA = 1 } ts_upipe_schedule;

// The forward of layer l's attention: from m->ln_out (the rank's rows of the
// norm output) into the layer's attention output (its rows, all heads).
int headpar_forward(ts_model *m, int l, uint64_t step, float p);
// The backward: from m->datt (d of the attention output, the rank's rows) and
// m->ln_out (the norm output, recomputed) into m->dq (rows × d) and m->dk,
// m->dv (rows × Hkv·dh), before the rotations are undone.
int headpar_backward(ts_model *m, int l, uint64_t step);
#endif
