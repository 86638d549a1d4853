// Ring attention over a sequence group (docs/ALGORITHMS.md §4; Liu et al. 2023).
//
// Rank r holds positions [r·T/N, (r+1)·T/N) and its own rows of Q, K and V.
// The key/value block travels around the ring (send to r+1, receive from
// r−1), so at step i rank r holds the block of rank r−i: the blocks r, r−1,
// …, 0, which are the ones its queries see, arrive in descending order.
//
// Exact (the default; docs/DISTRIBUTED.md "Ring attention"). That order is
// the serial kernel's order of key tiles (R2), so the rank walks its queries
// down the blocks as the serial kernel walks them down the key tiles,
// carrying each row's online-softmax state (accumulator, running max and
// sum) from one block to the next (attention_forward_block): the last block
// leaves the serial output and lse. The backward sends the blocks round
// again; dQ adds each block's terms in the same order (dq_acc), and each
// block's dK/dV is the canonical tree over the query tiles of the ranks that
// see it (R3): every rank's query tiles are an aligned subtree, which its
// kernel call sums, and the ranks' subtrees are combined by a binary-counter
// stack that travels with the block, one partial pushed per rank in rank
// order. After rank N−1 the tree is complete and goes home alone.
//
// Tolerance (--fast, and ring-zigzag): each block's output and log-sum-exp
// are merged into the running ones in fp32 (the backend's ring_merge):
//   out ← out − σ(lse_b − lse)·(out − out_b),  lse ← lse − log σ(lse − lse_b),
// and the backward sends [K | V | dK | dV] around, every rank adding its
// queries' dK, dV terms to the travelling block and summing its dQ over the
// blocks. Those sums associate differently from the serial kernel's.
//
// ring-zigzag: rank r holds chunks r and 2N-1-r of 2N (two runs of rows,
// model_impl.h), so that causal work is even; every local query chunk attends
// to every visible key chunk of the block. Tolerance tier (docs/DISTRIBUTED.md
// says why it is not made exact).
#ifndef TS_RING_H
#define TS_RING_H
#include <stdint.h>

#include "backend/backend.h"
#include "backend/kernels.h"
#include "strategy.h"
#include "tessera.h"

// One ring of n places (USP runs one across its groups, usp.c): place p
// holds the p-th block of `rows` consecutive positions, and its queries see
// the blocks 0 … p. Exact needs n a power of two (the tree over places).
typedef struct {
  int n, at;        // places on the ring; this rank's
  int next, prev;   // sequence-group ranks of places at + 1 and at − 1 (mod n)
  int rows;         // positions of a block, its queries and its keys alike
  int wk;           // floats of a row of K (and of V) here
  ts_attn_shape as; // this place's queries against a block, every field but k0
                    // (the block's), ldkv (2·wk: rows of [K | V]) and dq_acc
} ring_geom;

// Exact ring attention of layer io->l (the messages on io->seq, the kernels
// io->be's). Forward: q (rows, as.ldq) against every
// visible block into out (rows, as.ldo) and lse (as.H, rows); blk[0] holds the
// place's own block as rows of [K | V] (rows, 2·wk), blk[1] is as large;
// both are overwritten.
int ring_exact_forward(const ts_attn_io *io, const ring_geom *g, const float *q, float *blk[2],
                       float *out, float *lse);
// Backward: from dout (as out) and the forward's q, out, lse and the place's
// own k, v (rows, wk), into dq (as q) and its own rows' dk, dv (row stride ldd).
int ring_exact_backward(const ts_attn_io *io, const ring_geom *g, const float *dout,
                        const float *q, const float *out, const float *lse, const float *k,
                        const float *v, float *dq, float *dk, float *dv, int ldd);

// What one place computes when it holds block c at step i, without the
// ring's messages (the two functions above make these calls, and so does
// bench/attention's --layout ring). Forward: its queries q against block c
// (blk: rows of [K | V]), carrying the online-softmax state out, lse and
// lsum (as.H, rows) from the blocks after c (i > 0) and finishing it at
// c = 0. Backward: planes as the message (plane 0 the block's [K | V], then
// the stack of its tree); adds block c's terms to dq (i > 0: after the later
// blocks' terms) and pushes the place's [dK | dV] partial onto the tree.
// dsum: (as.H, rows) scratch. TS_OK, or an error (out of memory).
void ring_exact_forward_block(const ts_backend *be, ts_ws *ws, const ring_geom *g, int i, int c,
                              const float *q, const float *blk, float *out, float *lse,
                              float *lsum);
int ring_exact_backward_block(const ts_backend *be, ts_ws *ws, const ring_geom *g, int i, int c,
                              float *planes, const float *dout, const float *q, const float *out,
                              const float *lse, float *dq, float *dsum);
// Planes (rows · 2·wk floats each) a backward message buffer holds.
int ring_exact_planes(const ring_geom *g);
// The messages of ring_exact_forward (into fwd) and ring_exact_backward
// (bwd) at place g->at, counted as the communicator counts them
// (strategy.h `traffic`); and the bytes each allocates at most at once
// (strategy.h `incall`), its travelling buffers and running sums.
void ring_exact_traffic(const ring_geom *g, ts_comm_count *fwd, ts_comm_count *bwd);
void ring_exact_incall(const ring_geom *g, size_t *fwd, size_t *bwd);

// The travelling tree (exposed for tests/test_cp.c). A block of place c
// collects one partial from each place p = c, c+1, …, n−1 in that order,
// streamed through a binary counter whose positions before c are empty: the
// canonical tree over places. ring_tree_levels: the counter's occupied levels
// (a bit mask) once positions c … p−1 are pushed; the stack holds one
// partial per occupied level, highest first. ring_tree_push: planes[0, d)
// hold that stack (d its popcount), planes[d] the partial of place p, each of
// n floats; pushes it (sums with be->add, the left operand first) and
// returns the new depth.
unsigned ring_tree_levels(int c, int p);
int ring_tree_push(const ts_backend *be, float *planes, size_t n, int c, int p);

// Tolerance ring attention of layer io->l (--fast, ring-zigzag): from io->q,
// k, v (the rank's rows) into io->att and lse; and from io->datt into
// io->dq, dk, dv (the rank's rows).
int ring_forward(const ts_attn_io *io);
int ring_backward(const ts_attn_io *io);
#endif
