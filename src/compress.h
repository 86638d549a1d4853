// Stage-boundary compression (docs/ALGORITHMS.md §7, docs/COMPRESSION.md).
//
// With --compress the model is cut into S stages of L/S layers. At the
// boundary p between stages p and p+1 the residual stream X (rows × d)
// leaves as Z (rows × r) and comes back as X̂ (rows × d):
//   ssn   Z = (X − T[tok])·U,               X̂ = Z·Uᵀ + T[tok]
//         U (d × r) and T (V × d) frozen, seeded, shared by every boundary;
//   mapl  Z = (X − E_p[tok]·P_p)·A_p,       X̂ = Z·A_pᵀ + E_{p+1}[tok]·P_{p+1}
//         A_p ∈ St(d, r) learned by SPEL, E_s (V × r) learned anchors, P_s
//         (r × d) frozen orthonormal rows; mapl-unconstrained learns A_p off
//         the manifold. mapl-vq also quantises Z (vq.h).
// Backward, the gradient G of X̂ leaves as dZ = G·A_p and comes back as
// dX = dZ·A_pᵀ: only r floats per token cross a boundary either way.
//
// A compressed model is a model: the serial run encodes and decodes at every
// boundary back to back, a pipeline stage encodes its output and decodes its
// input, with the same code on the same rows, so the two are the same bits.
//
// Gradients. A_p's gradient is its sender's part, Yᵀ·dZ (Y = X minus the
// anchor): the receiver holds only Z and a copy of A_p, synchronised after
// each step, and the wire back carries dZ, not G. A stage's anchor E_s gets
// −dX·P_sᵀ from its output boundary and G·P_sᵀ from its input boundary,
// summed per row (the output's first) and scattered by token in one leaf
// tree, like the token embedding.
#ifndef TS_COMPRESS_H
#define TS_COMPRESS_H
#include <stddef.h>
#include <stdint.h>

#include "model_impl.h"

// The boundary state of a model whose cfg.compress is set (m->cmp).
int compress_create(ts_model *m);
void compress_free(ts_model *m);
// Frozen bases from the seed (and the projectors' orthonormal start): after
// the parameters' generic initialisation, on every rank alike.
void compress_init(ts_model *m, uint64_t seed);
// Floats of activations the boundaries keep (for the memory estimate).
size_t compress_activation_floats(const ts_model *m);

// The boundary after layer l − 1 (l a multiple of L/S, 0 < l < L): its
// index p, or −1 when l is not a boundary.
int compress_boundary_at(const ts_model *m, int l);
// Floats a thread's leaf partial needs (mapl-vq's codebook statistics).
size_t compress_leaf_floats(const ts_config *cfg);
// Bytes of a row on the wire forward (r floats, or mapl-vq's codes) or
// backward (r floats); d floats without compression.
size_t compress_wire_bytes(const ts_model *m, int backward);
// Boundary p's forward wire (what compress_encode wrote), and the buffer of
// dZ going back (rows × r).
void *compress_wire(const ts_model *m, int p);
float *compress_dz(const ts_model *m);

// Forward: x (rows × d) of boundary p → its wire (compress_wire); keeps
// what the backward needs.
void compress_encode(ts_model *m, int p, const float *x);
// Boundary p's wire (Z, or codes) → x (rows × d).
void compress_decode(ts_model *m, int p, const void *wire, float *x);
// Backward of the decode: G = dx (rows × d) → dz (rows × r); the receiving
// stage's anchor gradient is complete after it.
int compress_decode_backward(ts_model *m, int p, const float *dx, float *dz);
// Backward of the encode: dz → dx (rows × d); A_p's gradient, stage 0's
// anchor gradient when p = 0, and mapl-vq's codebook statistics (step keys
// the candidate rows).
int compress_encode_backward(ts_model *m, int p, const float *dz, float *dx, uint64_t step);

// Whether a tensor's gradient slot holds statistics, not a gradient
// (mapl-vq's codebooks, vq.h: ts_vq_update reads them; the gradient norm
// and the clip leave them out).
static inline int compress_is_statistics(ts_role role) {
  return role >= TS_ROLE_VQ_COUNT && role <= TS_ROLE_VQ_RECV;
}
#endif
