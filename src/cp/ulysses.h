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

#include "backend/backend.h"
#include "backend/kernels.h"
#include "strategy.h"
#include "tessera.h"

typedef enum { TS_UPIPE_NATURAL = 0, TS_UPIPE_GQA = 1 } ts_upipe_schedule;

// The forward of layer io->l's attention: from io->x (the rank's rows of the
// norm output) into io->att (its rows, all heads).
int headpar_forward(const ts_attn_io *io);
// The backward: from io->datt (d of the attention output, the rank's rows)
// and io->x (the norm output, recomputed) into io->dq (rows × d) and io->dk,
// io->dv (rows × Hkv·dh), before the rotations are undone.
int headpar_backward(const ts_attn_io *io);
// The backward that adds dX stage by stage (upipe-dx, forms_dx): from
// io->datt and io->x into io->dx and the Q, K, V projections' gradients.
int headpar_backward_dx(const ts_attn_io *io);

// ---- the pieces without the model (bench/attention's --layout ulysses makes these calls) --
// The heads rank c works on in one stage: nq query heads (global indices)
// and the nkv key/value heads they read; kv_of[k] is query head k's index
// in kv.
typedef struct {
  int nq, nkv;
  int q[64], kv[64], kv_of[64];
} headpar_heads;
// Forward stage s of stages of U heads (schedule sched, G query heads per
// key/value head) for rank c of N; backward stage s of U_b heads.
void headpar_forward_heads(int N, int U, int G, int sched, int s, int c, headpar_heads *h);
void headpar_backward_heads(int N, int Ub, int G, int s, int c, headpar_heads *h);
// U_b: the backward's heads per stage, whole groups on every rank (lcm(U, N·G)).
int headpar_backward_stage(int U, int N, int G);
// A forward stage's attention on the rank with heads `mine`: its heads over
// the whole sequence (kc, vc: (T, nkv·dh), the nkv key/value heads sent), one
// query segment src of N at a time; segment src's queries are Tl rows (C
// apart) at slot + src·(per·dh) (gqa: slot + src·block, a head G·dh apart),
// its output goes to rows src·Tl of o (T, per·dh). lse (per, Tl) is scratch.
// `layer`: the layer's shape (B 1, T, dh, tile, dropout key, Hg).
void headpar_stage_attention(const ts_backend *be, ts_ws *ws, const ts_attn_shape *layer,
                             const headpar_heads *mine, int sched, int N, int Tl, int C, int G,
                             const float *slot, size_t block, const float *kc, const float *vc,
                             int nkv, float *o, float *lse);
// A backward stage's attention: per query heads from h0 (nkv key/value
// heads) over the whole sequence, Q, dO, O, dQ (T, per·dh), K, V, dK, dV
// (T, nkv·dh), lse and dsum (per, T): the output and lse recomputed, then
// the backward. TS_OK, or an error (out of memory).
int headpar_stage_backward(const ts_backend *be, ts_ws *ws, const ts_attn_shape *layer, int per,
                           int nkv, int h0, const float *Q, const float *K, const float *V,
                           const float *dO, float *O, float *lse, float *dQ, float *dK,
                           float *dV, float *dsum);
#endif
