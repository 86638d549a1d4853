// Ring attention over a sequence group (docs/ALGORITHMS.md §4; Liu et al. 2023).
//
// Rank r holds positions [r·T/N, (r+1)·T/N) and its own rows of Q, K and V.
// The key/value block travels around the ring (send to r+1, receive from
// r−1); at step i rank r holds the block of rank r−i and, when those keys are
// not in its future, attends its queries to them. Each block's output and
// log-sum-exp are merged into the running ones in fp32 (the backend's
// ring_merge, kernels.h):
//   out ← out − σ(lse_b − lse)·(out − out_b),  lse ← lse − log σ(lse − lse_b).
// The backward sends [K | V | dK | dV] around once more: every rank adds its
// queries' dK, dV terms to the travelling block, which comes home after N
// hops, and sums its dQ over the blocks.
//
// ring-zigzag: rank r holds chunks r and 2N-1-r of 2N (two runs of rows,
// model_impl.h), so that causal work is even; every local query chunk attends
// to every visible key chunk of the block.
//
// The merge and the sums over ranks associate differently from the serial
// online softmax and tree, so ring attention is in the tolerance tier.
#ifndef TS_RING_H
#define TS_RING_H
#include <stdint.h>

#include "model/model_impl.h"

// Layer l: from the layer's q, k, v (the rank's rows) into its att and lse.
int ring_forward(ts_model *m, int l, uint64_t step, float p);
// From m->datt into m->dq, m->dk, m->dv (the rank's rows).
int ring_backward(ts_model *m, int l, uint64_t step);
#endif
