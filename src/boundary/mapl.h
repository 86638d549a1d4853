// MAPL's pieces (mapl.c), which mapl-vq (mapl_vq.c) builds on: its state
// comes first in mapl-vq's, and mapl-vq quantises the Z that MAPL's encode
// makes and decodes what the codes give back, with the rest unchanged.
//
//   Z = (X − E_p[tok]·P_p)·A_p,   X̂ = Z·A_pᵀ + E_{p+1}[tok]·P_{p+1}
// A_p (d × r) ∈ St(d, r) is boundary p's projector, E_s (V × r, zero at
// first) stage s's anchor table, both model tensors; P_s (r × d, orthonormal
// rows, seeded) is frozen. Backward, dZ = G·A_p, dX = dZ·A_pᵀ; A_p's gradient
// is the sender's part Yᵀ·dZ (Y = X minus the anchor: the receiver holds
// only Z and a copy of A_p, and the wire back carries dZ, not G), and E_s
// gets −dX·P_sᵀ from its output boundary and G·P_sᵀ from its input boundary,
// summed per row (the output's first) and scattered by token in one leaf
// tree, like the token embedding.
//
// That anchor is the factorised one (--mapl-anchor factorised, the default).
// The ablations replace E_s[tok]·P_s at every stage by 0 (none), by one
// seeded frozen table T[tok] (V × d, SSN's; static), or by a learned full
// table F_s[tok] (V × d per stage, zero at first; full), whose gradient rows
// are −dX and G without the projection (docs/COMPRESSION.md).
#ifndef TS_BOUNDARY_MAPL_H
#define TS_BOUNDARY_MAPL_H
#include "boundary.h"

typedef struct {
  ts_boundary_buffers b;
  float **fixed; // per stage: P_s (r × d), frozen
  float **arow;  // per stage (rows × r): the gradient rows of its anchor
  float *gath;   // (rows × r): gathered anchor rows
  float *dwt;    // (r × d): the gradient of A_pᵀ
  float *table;  // static: T (V × d), frozen; NULL otherwise
  int kind, aw;  // ts_mapl_anchor, and its learned table's width (r, d, or 0: none learned)
} ts_mapl;

// The width of a stage's learned anchor table: r (factorised), d (full), 0
// (none, static: no anchor tensor).
int ts_mapl_anchor_width(const ts_config *cfg);
// The memory estimate: the shared buffers with anchor rows of that width,
// and the static table.
size_t ts_mapl_activation_floats(const ts_boundary_io *io);

// Its part of a state io->state already points to; frees it (not k).
int ts_mapl_create(const ts_boundary_io *io, ts_mapl *k);
void ts_mapl_free(const ts_boundary_io *io, ts_mapl *k);
// Stage s's anchor (if learned) and, but for the last stage, its output boundary's projector.
int ts_mapl_tensors(const ts_config *cfg, int s, ts_tensor *out);
// The P_s, and each projector at its own seeded point of St(d, r).
void ts_mapl_init(const ts_boundary_io *io, uint64_t seed);
// B_p = A_pᵀ, anchor_s = E_s[tok]·P_s.
extern const ts_boundary_affine ts_mapl_affine;
// dZ = G·A_p as floats into dz (rows × r), and dZ → dx.
int ts_mapl_decode_backward(const ts_boundary_io *io, int p, const float *dx, void *dz,
                            uint64_t step);
int ts_mapl_encode_backward(const ts_boundary_io *io, int p, const void *dz, float *dx,
                            uint64_t step);
// The rank and stages, and --proj-lr's default (0.1 × the Muon rate) and range.
int ts_mapl_check(ts_config *cfg);
// It updates its projectors itself, by SPEL (ts_mapl_update); the anchors
// are AdamW's.
int ts_mapl_owns(ts_role role);
void ts_mapl_update(const ts_config *cfg, ts_tensor *params, const ts_tensor *grads, int nt, int t,
                    float *moment, float sched, uint64_t step, float *scratch);
// The pipeline's sync: boundary p's projector, from its sender to its receiver.
int ts_mapl_sync(const ts_boundary_io *io, ts_comm *pipe, int p, int peer, int send, uint64_t step);
// Its bytes: the projector, d × r floats.
size_t ts_mapl_sync_bytes(const ts_config *cfg);
#endif
