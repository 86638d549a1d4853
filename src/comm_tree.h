// The schedule of the exact reductions over ranks (comm.h's *_tree; docs/EXACTNESS.md
// R3, R6), written once: which rounds a rank goes through and, in each, the
// partner it swaps with and the chunks (ts_comm_chunk) it sends and receives.
// The communicators only move those bytes and add with their own addition in
// this order: src/cpu/comm_mpi.c (MPI, ts_tree_add on the host) and
// src/gpu/comm_nccl.cu (NCCL, its add_kernel on the device), so their bits
// are equal; ts_comm_tree_bytes (comm.c) counts the same rounds.
//
//   buf (n,) floats on every rank, cut into P chunks in rank order
//   (ts_comm_chunk); L = log2 P levels of the tree over ranks.
//
//   reduce-scatter, recursive halving, rounds k = 0 .. L-1, pair distance
//   d = 2^k: before round k rank r holds, for the chunks c = r (mod d), the
//   sum over its aligned run of d ranks (r with its low k bits cleared, and
//   the d - 1 after it): a subtree. It sends its partner p = r xor d the
//   chunks c = p (mod 2d) and adds the partner's copies of the chunks
//   c = r (mod 2d) it keeps, whose run is the adjacent one: the two subtrees
//   combine into their parent, one level of the canonical tree. After L
//   rounds rank r holds chunk r summed over ranks 0..P-1.
//
//   all-gather, rounds k = L .. 2L-1, the mirror image (d = P/2 ... 1): rank
//   r sends the chunks c = r (mod 2d) it holds and stores its partner's
//   c = p (mod 2d) in their places. An all-reduce is all 2L rounds.
//
//   e.g. P = 4, rank 1:  round 0  d 1  partner 0  sends {0,2}  adds   {1,3}
//                        round 1  d 2  partner 3  sends {3}    adds   {1}
//                        round 2  d 2  partner 3  sends {1}    stores {3}
//                        round 3  d 1  partner 0  sends {1,3}  stores {0,2}
//
// Every rank sends and receives in every round (one swap with one partner),
// and a round's chunks travel in chunk order: packed one after another (MPI)
// or one message each (NCCL). The addition is ours + theirs whichever rank
// is the lower: IEEE addition is commutative, so this is the tree's
// lower-rank-on-the-left sum to the bit; the association, which subtrees
// combine at each level, is what the rounds fix.
//
// The reductions need P a power of two (comm.c refuses other groups); the
// reduce-scatter rounds are defined for any P (L = ceil(log2 P)) only so that
// ts_comm_tree_bytes can count the --fast all-reduce as this tree.
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

// One round of rank r: the chunks sent are c = send, send + stride, ... < P,
// those received c = recv, recv + stride, ... < P (never the ones sent).
typedef struct {
  int partner; // r xor d
  int stride;  // 2d
  int send, recv;
  int add; // 1: received chunks are added into ours (ours + theirs); 0: they replace ours
} ts_comm_round;

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

// Round k (0 <= k < 2L) of rank r of P.
static inline ts_comm_round ts_comm_tree_round(int P, int r, int k) {
  const int L = ts_comm_tree_levels(P), gather = k >= L;
  const int d = 1 << (gather ? 2 * L - 1 - k : k); // 1, 2, ... P/2, then P/2, ... 1
  ts_comm_round q;
  q.partner = r ^ d;
  q.stride = 2 * d;
  // reduce: send the partner's chunks, keep ours; gather: send ours, take theirs
  q.send = (gather ? r : q.partner) % q.stride;
  q.recv = (gather ? q.partner : r) % q.stride;
  q.add = !gather;
  return q;
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

// The largest message of any round: half the chunks, at distance 1 (the
// chunks of a round at distance d are a subset of the even or the odd ones).
static inline size_t ts_comm_tree_max_floats(size_t n, int P) {
  size_t even = ts_comm_tree_floats(n, P, 0, 2), odd = ts_comm_tree_floats(n, P, 1, 2);
  return even > odd ? even : odd;
}

#ifdef __cplusplus
}
#endif
#endif
