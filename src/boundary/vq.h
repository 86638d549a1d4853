// Residual multi-codebook vector quantisation of a boundary's Z (mapl-vq,
// docs/ALGORITHMS.md §7).
//
// Z (rows × r) splits into r/G groups of G coordinates. Each group is
// quantised in R rounds, round j on what the rounds before left: code =
// argmin_k ‖res − e_jgk‖² (ties to the lowest k), res −= e_jgk. A row crosses
// the boundary as R·r/G one-byte codes instead of r floats. Both sides code
// with the shared copy e' of the codebooks, the receiver's: the sender picks
// the codes against it and the receiver rebuilds Ẑ = Σ_j e'_j·code from it.
//
// Codebooks: boundary p holds four tensors of (R·r/G·K) codes, in this order
// (the first three's gradient slots carry the step's statistics, which the
// gradient machinery sums over leaves, microbatches and data ranks in the
// same tree on every layout):
//   cmp.p.vq.count  (R·r/G·K)     EMA of the assignment counts N; slot: counts n
//   cmp.p.vq.sum    (R·r/G·K, G)  EMA of the assigned residuals S; slot: their sums s
//   cmp.p.vq.codes  (R·r/G·K, G)  the sender's working codes e; slot: each code's
//                                 replacement candidate, the residual of one
//                                 seeded row of the global batch
//   cmp.p.vq.recv   (R·r/G·K, G)  the shared copy e' (the receiver's); slot unused (0)
// After each step (vq_update): N ← γN + (1−γ)n, S ← γS + (1−γ)s, e = S/Ñ with
// Laplace smoothing Ñ_k = (N_k + ε)/(ΣN + Kε)·ΣN, ε = 1e-5; a code with N < 2
// is dead and becomes its candidate; then the sender streams
// --vq-sync-codes codes of each round's codebook (all groups) into the shared
// copy, a seeded partition of the K codes taken in turn (ts_vq_streamed_code).
// The statistics are of the codes as sent: assignments in e'; e learns from
// them, and reaches e' only through the stream.
//
// Gradients: straight through (dZ = dẐ) plus the commitment loss
// w·Σ‖z − sg(ẑ)‖²/(tokens·r) against the quantisation ẑ both sides decode.
//
// The gradient (--vq-backward on): dZ's rows crossing back are quantised the
// same way with codebooks of their own, `cmp.p.gvq.*` (their keys: book
// p | TS_VQ_GRAD_BOOK), held by the gradient's sender, stage p + 1, whose copy
// of the shared codebook stage p holds. A gradient row is tiny and its size
// changes over training, so it is sent as its scale s = RMS of its r floats
// (one float) and codes of dZ/s, whose rows all have RMS 1 (s = 0: a row of
// zeros); the receiver rebuilds s·Σ_j e'_j·code. No commitment term: nothing
// is trained through the gradient's quantisation.
#ifndef TS_VQ_H
#define TS_VQ_H
#include <stddef.h>
#include <stdint.h>

#include "tessera.h"

typedef struct {
  int r, G, R, K, ng; // ng = r/G groups
  float gamma, commit;
  int sync;           // codes streamed per codebook per stream event
  // The stream's unit and interval (0 read as 1): `units` of a step (1: the
  // step; M: its microbatches, --vq-stream-unit microbatch), an event every
  // `every` units. Event n ≥ 1 comes before unit n·every (units counted from
  // 0 over the run) and streams what step n's stream did before the option
  // existed, so units 1 and every 1 are that stream bit for bit.
  int units, every;
} ts_vq_shape;

void ts_vq_shape_of(const ts_config *cfg, ts_vq_shape *q);
// Codes per boundary: R·ng·K. Floats of the statistics (count, sum, candidate).
static inline size_t ts_vq_ncodes(const ts_vq_shape *q) { return (size_t)q->R * q->ng * q->K; }
static inline size_t ts_vq_stat_floats(const ts_vq_shape *q) {
  return ts_vq_ncodes(q) * (size_t)(1 + 2 * q->G);
}
// Bytes of one row on the wire: R·ng codes.
static inline size_t ts_vq_row_bytes(const ts_vq_shape *q) { return (size_t)q->R * q->ng; }
// A gradient row's: its codes and its scale. The wire of n rows is the n
// rows' codes, then their n scales.
static inline size_t ts_vq_grad_row_bytes(const ts_vq_shape *q) {
  return ts_vq_row_bytes(q) + sizeof(float);
}
// The key of boundary p's gradient codebooks (p's own: p).
#define TS_VQ_GRAD_BOOK (1u << 20)

// The rows of z (n × r) quantised with codebook e: codes (n × R·ng bytes)
// and, when zq is not NULL, the quantisation ẑ (n × r).
void ts_vq_encode(const ts_vq_shape *q, const float *e, const float *z, int64_t n,
                  uint8_t *codes, float *zq);
// ẑ (n × r) from codes and the codebook they index.
void ts_vq_decode(const ts_vq_shape *q, const float *e, const uint8_t *codes, int64_t n, float *zq);

// One leaf's statistics partial (stat floats: counts | sums | candidates) of
// rows [li·leaf, (li+1)·leaf): the counts and residual sums of every code,
// and the residual of each code's candidate row when it lies in the leaf
// (cand_row[c]: the local row, −1 when not this model's).
void ts_vq_stats_leaf(const ts_vq_shape *q, const float *e, const float *z, const uint8_t *codes,
                      const int64_t *cand_row, int64_t li, int leaf, float *out);

// The gradient's wire (n rows of dz, n × r) with codebook e: the rows'
// codes, then their scales; u (n × r) ← the scaled rows dz/s that were coded.
void ts_vq_grad_encode(const ts_vq_shape *q, const float *e, const float *dz, int64_t n,
                       uint8_t *wire, float *u);
// dz (n × r) ← s·ẑ from such a wire.
void ts_vq_grad_decode(const ts_vq_shape *q, const float *e, const uint8_t *wire, int64_t n,
                       float *dz);

// Initial codebooks (seeded normal, std 0.02, or std for the scaled
// variant; the receiver's copy equal; EMA state zero).
void ts_vq_init(const ts_vq_shape *q, uint64_t seed, int boundary, float *count, float *sum,
                float *codes, float *recv);
void ts_vq_init_scaled(const ts_vq_shape *q, uint64_t seed, int boundary, float std, float *count,
                       float *sum, float *codes, float *recv);
// The step's EMA update, dead-code replacement and streamed sync (step is
// the 1-based step whose statistics these are).
void ts_vq_update(const ts_vq_shape *q, uint64_t seed, int boundary, uint64_t step, float *count,
                  float *sum, float *codes, float *recv, const float *stats);
// The streamed sync of a step: --vq-sync-codes codes of each round's
// codebook (the i-th is ts_vq_streamed_code: a seeded order of the K codes,
// sync a step in turn, so each code every K/sync steps and all of them every
// step at sync = K), every group, copied from the sender's working codebook
// into the shared copy.
int ts_vq_streamed_code(const ts_vq_shape *q, uint64_t seed, int boundary, uint64_t step, int j,
                        int i);
void ts_vq_stream(const ts_vq_shape *q, uint64_t seed, int boundary, uint64_t step,
                  const float *from, float *to);
// Floats of one stream event (R·sync·r).
static inline size_t ts_vq_stream_floats(const ts_vq_shape *q) {
  return (size_t)q->R * q->sync * q->r;
}
// The stream by units. Step t (1-based) runs units [(t−1)·U, t·U). The
// shared copy a tensor holds between steps (`recv`) is the one unit t·U
// codes with: ts_vq_update applies the events inside step t from the
// working codebook it had during the step, then the EMA, then the event of
// unit t·U (if any) from the new one. Unit (t−1)·U + m of step t codes with
// recv plus the events of units ((t−1)·U, (t−1)·U + m], all copied from the
// working codebook `codes`, which changes only at the step.
//   ts_vq_shared_at: that copy for unit m of step t: recv itself when no
//   event falls there, else built in view (ncodes·G floats).
const float *ts_vq_shared_at(const ts_vq_shape *q, uint64_t seed, int boundary, uint64_t step,
                             int64_t m, const float *recv, const float *codes, float *view);
// A pipeline's message after step t: the codes of every event of units
// [t·U, (t+1)·U), from the sender's new working codebook, in event order
// (ts_vq_stream_events of them, each ts_vq_stream_floats). The receiver
// first applies the events inside step t from its copy of the working
// codebook (which the previous message filled at their codes:
// ts_vq_stream_catch_up), then unpacks: the event of unit t·U into its
// shared copy recv, the others into that copy of the working codebook.
size_t ts_vq_stream_events(const ts_vq_shape *q, uint64_t step);
void ts_vq_stream_pack(const ts_vq_shape *q, uint64_t seed, int boundary, uint64_t step,
                       const float *codes, float *msg);
void ts_vq_stream_catch_up(const ts_vq_shape *q, uint64_t seed, int boundary, uint64_t step,
                           const float *codes, float *recv);
void ts_vq_stream_unpack(const ts_vq_shape *q, uint64_t seed, int boundary, uint64_t step,
                         const float *msg, float *recv, float *codes);
// The local row (−1: none) holding each code's candidate at this step, for a
// model of rows [g0, g0 + n) of the global batch's ntok_global rows.
void ts_vq_candidates(const ts_vq_shape *q, uint64_t seed, int boundary, uint64_t step,
                      int64_t ntok_global, int64_t g0, int64_t n, int64_t *cand_row);
#endif
