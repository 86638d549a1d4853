// The schedule of the exact reductions over ranks (comm.h's *_tree; docs/EXACTNESS.md
// R3, R6), written once: which rounds a rank goes through and, in each, the
// partners it swaps with and the chunks (ts_comm_chunk) it sends and receives.
// The communicators only move those bytes and add with their own addition in
// this order: src/comm/comm_mpi.c (MPI, ts_tree_add on the host) and
// src/comm/comm_nccl.cu (NCCL, its add_kernel on the device), so their bits
// are equal; ts_comm_tree_bytes (comm.c) counts the same swaps.
//
//   buf (n,) floats on every rank, cut into P chunks in rank order
//   (ts_comm_chunk); L = ceil(log2 P) levels of the tree over ranks, whose
//   2^L positions are the ranks 0 .. P-1 and, past them, empty ones (the
//   canonical tree's padding: an empty subtree adds nothing, docs/EXACTNESS.md).
//
//   reduce-scatter, recursive halving, rounds k = 0 .. L-1, pair distance
//   d = 2^k: before round k position v stands for, in the chunks c = v
//   (mod d), the sum over its aligned run of d positions (v with its low k
//   bits cleared, and the d - 1 after it): a subtree. Its partner w = v xor d
//   stands for the adjacent run; the two combine into their parent, one
//   level of the canonical tree: v keeps the chunks c = v (mod 2d) and adds
//   w's copies of them, w the chunks c = w (mod 2d). After L rounds position
//   r holds chunk r summed over positions 0..2^L-1, i.e. ranks 0..P-1.
//
//   Who plays a position (ts_comm_tree_holder): a rank plays its own; an
//   empty position whose partner's run holds a rank is taken over by the
//   partner's player when they meet (the parent is that run's sum, which the
//   player already has, for the chunks of both), so nothing is sent; two
//   empty runs stay empty. A rank may so play several positions of its run
//   and swap with several partners in a round (the last ranks of a group
//   that is not a power of two: at P = 5 rank 4 plays 4 to 7, at P = 6 ranks
//   4 and 5 play 6 and 7; the partners are then ranks of a full run, each
//   with one swap: no waiting cycle). With P a power of two every rank plays
//   itself alone: one swap a round, with r xor d.
//
//   all-gather, rounds k = L .. 2L-1, the mirror image (d = 2^(2L-1-k) =
//   2^(L-1) ... 1): a position sends the chunks c = v (mod 2d) it holds summed
//   and stores its partner's c = w (mod 2d) in their places; a position
//   taken over needs nothing (its player holds both). An all-reduce is all
//   2L rounds.
//
//   e.g. P = 4, rank 1:  round 0  d 1  partner 0  sends {0,2}  adds   {1,3}
//                        round 1  d 2  partner 3  sends {3}    adds   {1}
//                        round 2  d 2  partner 3  sends {1}    stores {3}
//                        round 3  d 1  partner 0  sends {1,3}  stores {0,2}
//        P = 3 (positions 0 1 2 and an empty 3):
//                        round 0  rank 0 and 1 swap; rank 2 takes position 3
//                        round 1  rank 0 (position 0) swaps with rank 2
//                                 (position 2): chunks {2} for {0}; rank 1
//                                 (position 1) with rank 2 (position 3):
//                                 sends nothing (no chunk 3), adds {1}
//                        each chunk is (R0 + R1) + R2, the serial tree's order
//
// A swap: both sides send and receive (one may be empty), the chunks of a
// swap travel in chunk order: packed one after another (MPI) or one message
// each (NCCL); a rank makes its swaps of a round in the order of its
// positions. The addition is ours + theirs whichever is the lower position:
// IEEE addition is commutative, so this is the tree's lower-on-the-left sum
// to the bit; the association, which subtrees combine at each level, is what
// the rounds fix. The chunks a rank sends in a round are never those it
// receives in it (its positions and its partners' differ in bit k), so the
// swaps of a round may go in any order or at once.
//
// Plain C, static inline: included by C (comm.c, comm_mpi.c, the tests) and
// C++ (comm_nccl.cu under nvcc, and under g++ in tests/gpu_emu).
#ifndef TS_COMM_TREE_H
#define TS_COMM_TREE_H
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "comm.h"

// One swap of a round: the chunks sent are c = send, send + stride, ... < P,
// those received c = recv, recv + stride, ... < P (never the ones sent).
typedef struct {
  int partner; // the rank that plays the partner position
  int stride;  // 2d
  int send, recv;
  int add; // 1: received chunks are added into ours (ours + theirs); 0: they replace ours
} ts_comm_swap;

// L: the levels of the tree over P ranks, ceil(log2 P) (0 for P = 1).
static inline int ts_comm_tree_levels(int P) {
  int L = 0;
  while ((1 << L) < P) L++;
  return L;
}

// Rounds of a reduce-scatter (L) or, allreduce non-zero, of an all-reduce (2L).
static inline int ts_comm_tree_nrounds(int P, int allreduce) {
  return (allreduce ? 2 : 1) * ts_comm_tree_levels(P);
}

// The rank that plays position v before reduce round k (0 <= k <= L), or -1
// when nobody does (v's run of 2^k positions holds no rank). An empty
// position is taken over at the level where its run first meets one that
// holds a rank, by the player of its partner there.
static inline int ts_comm_tree_holder(int P, int v, int k) {
  while (v >= P) {
    int j = 0; // the first level at which v's run of 2^(j+1) positions holds a rank
    while ((v & ~((2 << j) - 1)) >= P) j++;
    if (j >= k) return -1;
    v ^= 1 << j;
  }
  return v;
}

// The swaps of rank r in round k (0 <= k < 2L), one call each, in the order
// r makes them: start with *at = 0; returns 1 and the next swap in *q, or 0
// when there is none left. *at walks the positions of r's run at the round's
// level, those r plays.
static inline int ts_comm_tree_next(int P, int r, int k, int *at, ts_comm_swap *q) {
  const int L = ts_comm_tree_levels(P), gather = k >= L;
  const int j = gather ? 2 * L - 1 - k : k, d = 1 << j, base = r & ~(d - 1);
  for (; *at < d; (*at)++) {
    const int v = base + *at, w = v ^ d;
    if (ts_comm_tree_holder(P, v, j) != r) continue;
    const int partner = ts_comm_tree_holder(P, w, j);
    if (partner < 0) continue; // w's run is empty: r takes it over, nothing moves
    q->partner = partner;
    q->stride = 2 * d;
    // reduce: send the partner's chunks, keep ours; gather: send ours, take theirs
    q->send = (gather ? v : w) % q->stride;
    q->recv = (gather ? w : v) % q->stride;
    q->add = !gather;
    (*at)++;
    return 1;
  }
  return 0;
}

// Floats in the chunks c = first, first + stride, ... < P of n: one round's
// message (a round's send or receive).
static inline size_t ts_comm_tree_floats(size_t n, int P, int first, int stride) {
  size_t k = 0;
  for (int c = first; c < P; c += stride) {
    size_t off, len;
    ts_comm_chunk(n, P, c, &off, &len);
    k += len;
  }
  return k;
}

// The largest message of any swap: at most the chunks of one parity (the
// chunks of a swap at distance d are a subset of the even or the odd ones).
// Floats a round swaps at a time (comm_mpi.c): the packing space stays this
// small whatever the vector (a gradient, or lss's [dK | dV] of a whole
// sequence). Each element is added exactly as in one swap, so the bits do
// not depend on it.
#define TS_COMM_TREE_PIECE ((size_t)1 << 20)

static inline size_t ts_comm_tree_max_floats(size_t n, int P) {
  size_t even = ts_comm_tree_floats(n, P, 0, 2), odd = ts_comm_tree_floats(n, P, 1, 2);
  return even > odd ? even : odd;
}

#ifdef __cplusplus
}
#endif
#endif
