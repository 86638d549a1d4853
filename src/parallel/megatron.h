// The Megatron-style sequence-parallel baseline (ALGORITHMS.md §3; Korthikanti
// et al. 2022): a tensor-parallel layer whose norms, dropout and residuals run
// on the rank's sequence segment. Rank s of the N-rank group holds heads
// [s·H/N, (s+1)·H/N) and MLP columns [s·F/N, (s+1)·F/N) of every layer:
//   forward   all-gather ln1(x) · Q/K/V and attention of its heads on the
//             whole sequence · partial output projection, reduce-scattered ·
//             all-gather ln2 · its W1 columns, GeLU · partial W2, reduce-scattered
//   backward  the mirror image: 4 all-gathers and 4 reduce-scatters.
// 8 collectives per layer. The partial projections are summed across ranks,
// so the result is not the serial bits: this mode is in the tolerance tier.
//
// Parameters stay replicated; a rank's weight gradients are complete for its
// heads and columns and zero elsewhere, so the trainer's one sequence-group
// all-reduce (shard.h) assembles them with the norms' partial sums.
#ifndef TS_MEGATRON_H
#define TS_MEGATRON_H
#include <stddef.h>
#include <stdint.h>

#include "model_impl.h"

// Allocates the layer buffers of m (a sequence-parallel model in megatron mode).
int megatron_create(ts_model *m);
void megatron_free(ts_model *m);
size_t megatron_bytes(const ts_model *m);
// res[l] -> res[l + 1] on the rank's rows; p: dropout probability.
int megatron_layer_forward(ts_model *m, int l, uint64_t step, float p);
// dres: the gradient of res[l + 1] in, of res[l] out; layer l's gradients.
int megatron_layer_backward(ts_model *m, int l, uint64_t step);
#endif
