// Orthogonalising iterations and the optimizers built on them
// (docs/ALGORITHMS.md §8): Muon's quintic Newton–Schulz, Polar Express, the Muon
// update of a 2-D weight, and SPEL on the Stiefel manifold St(d, r).
//
// Every matrix product is the canonical one (src/cpu/mm.h), so the results
// are the same bits on any layout and any machine: every rank runs the same
// update on the same replica.
#ifndef TS_ORTHOGONAL_H
#define TS_ORTHOGONAL_H
#include <stddef.h>

// Floats of scratch the iterations below need for a rows × cols matrix.
size_t ts_ortho_scratch(int rows, int cols);

// X (rows × cols, row-major) in place ← its approximate orthogonal polar
// factor U·Vᵀ, by `steps` quintic Newton–Schulz steps on X/(‖X‖_F + 1e-7):
// X ← aX + (bA + cA²)X, A = XXᵀ (on the wide orientation), (a, b, c) =
// (3.4445, −4.7750, 2.0315). Muon's default is 5 steps.
void ts_newton_schulz(float *X, int rows, int cols, int steps, float *scratch);

// The same by Polar Express (Amsel et al. 2025): per-step coefficients, X
// normalised by ‖X‖_F·1.01 + 1e-7. Eight or more steps make it a retraction
// (‖XᵀX − I‖ at fp32 rounding level for a tall X).
void ts_polar_express(float *X, int rows, int cols, int steps, float *scratch);

typedef enum { TS_ORTHO_NS = 0, TS_ORTHO_PE = 1 } ts_ortho;

// The coefficients (a, b, c) of step k of either iteration. Polar Express:
// the published per-step triples, every one but the last divided by (1.01,
// 1.01³, 1.01⁵) for safety against round-off; the last repeated for every
// later step. Shared by the CPU and the GPU (src/gpu/orthogonal.cu).
void ts_ortho_coefficients(ts_ortho how, int k, float *a, float *b, float *c);

// One Muon update of the weight p (rows × cols) with gradient g and
// momentum buffer buf (same shape):
//   buf = β·buf + (1−β)·g; u = (1−β)·g + β·buf (Nesterov); u ← ortho(u);
//   u ×= max(1, rows/cols)^½; p ×= 1 − lr·wd; p −= lr·u.
void ts_muon_update(float *p, const float *g, float *buf, int rows, int cols, float lr, float wd,
                    float beta, ts_ortho how, int steps, float *scratch);

// The projection of g (d × r) onto the tangent space of St(d, r) at A:
// out = g − A·sym(Aᵀg), sym(M) = (M + Mᵀ)/2; then Aᵀ·out is skew-symmetric.
// scratch: r·r floats.
void ts_stiefel_tangent(float *out, const float *A, const float *g, int d, int r, float *scratch);

// One SPEL step of A ∈ St(d, r) (d × r, AᵀA = I) with Euclidean gradient g
// and momentum m (d × r): the Riemannian gradient g_R = g − A·sym(Aᵀg),
// m = β·m + (1−β)·g_R, D = PolarExpress(m), A ← PolarExpress(A − α·D).
void ts_spel_step(float *A, const float *g, float *m, int d, int r, float alpha, float beta,
                  int steps, float *scratch);

// The same step without the manifold (the mapl-unconstrained ablation): the
// Euclidean gradient's momentum, its Polar Express direction, no tangent
// projection and no retraction, so A drifts off St(d, r).
void ts_spel_step_unconstrained(float *A, const float *g, float *m, int d, int r, float alpha,
                                float beta, int steps, float *scratch);

// ‖AᵀA − I‖_F of a d × r matrix, in double.
double ts_orthogonality_error(const float *A, int d, int r);
#endif
