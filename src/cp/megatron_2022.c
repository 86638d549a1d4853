// megatron-2022: the baseline the LSS Transformer paper measures itself
// against (its "Nvidia sequence parallelism": Korthikanti et al. 2022,
// "Reducing activation recomputation in large transformer models", run as
// that paper ran it). The layer is megatron.c's tensor split with sequence-
// split norms (heads and MLP columns across the group, an all-gather before
// attention and the MLP, a reduce-scatter after), with the two things that
// set its memory and time apart from our megatron:
//   - attention materialises each local head's T×T score matrix and takes
//     the softmax over the whole of it (full QKᵀ, causal mask, softmax, dropout
//     on the probabilities, P·V), not the tiled online softmax (R2); the
//     probabilities of all the rank's heads live at once, Hl·T² floats, and
//     their gradient as many again in the backward;
//   - full activation recomputation: nothing of a layer is kept but its input
//     (megatron.c keeps one slot of activations for all layers); the backward
//     runs the layer's forward again, its collectives included, then its own.
// So per layer: forward 2 all-gathers + 2 reduce-scatters, the replay as
// many again, the backward 2 + 2: 12 collectives, 6 of each kind.
// The score buffers come from the tracked allocator (mem.h): the step
// record's mem_peak_bytes shows them under attn_fwd and attn_bwd.
// Partial projections are summed across ranks and the softmax is a plain
// row softmax, so this mode is in the tolerance tier (docs/EXACTNESS.md).
// Host memory only (the loops below read the buffers directly).
#include <math.h>
#include <stdlib.h>

#include "backend/mem.h"
#include "base/util.h"
#include "cp.h"
#include "exact/index.h"
#include "exact/rng.h"

// S (T, T) = scale · Q_h K_hᵀ (all T×T products, as the baseline computes
// them), then per row: the causal mask, the softmax over the visible keys;
// masked entries 0.
static void scores_softmax(const ts_backend *be, float *S, const float *q, const float *k, int T,
                           int dh, int ld) {
  const float scale = 1.0f / sqrtf((float)dh);
  be->matmul(0, 1, T, T, dh, q, ld, k, ld, 0.0f, S, T);
#pragma omp parallel for schedule(static)
  for (int i = 0; i < T; i++) {
    float *r = S + (size_t)i * T, mx = -INFINITY, sum = 0.0f;
    for (int j = 0; j <= i; j++) {
      r[j] *= scale;
      mx = fmaxf(mx, r[j]);
    }
    for (int j = 0; j <= i; j++) sum += (r[j] = expf(r[j] - mx));
    const float inv = 1.0f / sum;
    for (int j = 0; j <= i; j++) r[j] *= inv;
    for (int j = i + 1; j < T; j++) r[j] = 0.0f;
  }
}

// Whether probability (local head h, query i, key j) survives dropout: the
// serial kernel's draw for the same global index (the model's head h0 + h).
static inline int kept(const ts_attn_shape *as, int h, int i, int j) {
  uint64_t at = ts_index_attn(as->index_base, 0, (uint64_t)as->Hg, (uint64_t)(as->h0 + h),
                              (uint64_t)as->T, (uint64_t)i, (uint64_t)j);
  return ts_rng_uniform(as->seed, TS_RNG_DROPOUT_ATTN, as->step, at) >= as->dropout;
}

// The probabilities after dropout: P itself without it, else W (T, T) = the
// kept entries of P scaled by 1/(1-p).
static const float *dropped(const ts_attn_shape *as, int h, const float *P, float *W) {
  if (as->dropout <= 0.0f) return P;
  const int T = as->T;
  const float s = 1.0f / (1.0f - as->dropout);
#pragma omp parallel for schedule(static)
  for (int i = 0; i < T; i++)
    for (int j = 0; j < T; j++)
      W[(size_t)i * T + j] = j <= i && kept(as, h, i, j) ? P[(size_t)i * T + j] * s : 0.0f;
  return W;
}

// dP (T, T): the gradient of the dropped probabilities in, of the scores out:
// dP ← mask/(1-p) ∘ dP, then dS = P ∘ (dP − rowsum(P ∘ dP)) · scale.
static void softmax_backward(const ts_attn_shape *as, int h, float *dP, const float *P) {
  const int T = as->T;
  const float scale = 1.0f / sqrtf((float)as->dh), s = 1.0f / (1.0f - as->dropout);
#pragma omp parallel for schedule(static)
  for (int i = 0; i < T; i++) {
    float *d = dP + (size_t)i * T, D = 0.0f;
    const float *p = P + (size_t)i * T;
    if (as->dropout > 0.0f)
      for (int j = 0; j <= i; j++) d[j] = kept(as, h, i, j) ? d[j] * s : 0.0f;
    for (int j = 0; j <= i; j++) D += p[j] * d[j];
    for (int j = 0; j <= i; j++) d[j] = p[j] * (d[j] - D) * scale;
    for (int j = i + 1; j < T; j++) d[j] = 0.0f;
  }
}

static void free_all(float *a, float *b, size_t held) {
  ts_mem_free(a);
  ts_mem_free(b);
  ts_mem_release(held);
  ts_mem_phase(TS_PHASE_NONE);
}

// ts_megatron_opts' attn_forward: att (T, Hl·dh) of the rank's heads; the
// probabilities (Hl, T, T) freed, or left in *probs (the backward's replay).
static int dense_forward(const ts_attn_io *at, const ts_attn_shape *as, float *att, const float *q,
                         const float *k, const float *v, float **probs) {
  const int T = as->T, H = as->H, dh = as->dh, ld = H * dh;
  const size_t TT = (size_t)T * T, held = 4 * (size_t)T * ld * sizeof(float); // q, k, v, att
  ts_mem_phase(probs ? TS_PHASE_ATTN_BWD : TS_PHASE_ATTN_FWD);
  ts_mem_hold(held);
  float *P = ts_mem_alloc((size_t)H * TT * sizeof(float));
  float *W = as->dropout > 0.0f ? ts_mem_alloc(TT * sizeof(float)) : NULL;
  if (!P || (as->dropout > 0.0f && !W)) {
    free_all(P, W, held);
    return ts_fail(TS_ERUNTIME, "out of memory allocating %.1f MB of attention scores "
                   "(--sp-mode megatron-2022 keeps %d heads' T x T at --seq %d)",
                   (double)(H + (as->dropout > 0.0f)) * (double)TT * 4.0 / 1e6, H, T);
  }
  for (int h = 0; h < H; h++) {
    float *Ph = P + (size_t)h * TT;
    scores_softmax(at->be, Ph, q + h * dh, k + h * dh, T, dh, ld);
    at->be->matmul(0, 0, T, dh, T, dropped(as, h, Ph, W), T, v + h * dh, ld, 0.0f, att + h * dh, ld);
  }
  if (probs) {
    *probs = P;
    P = NULL;
  }
  free_all(P, W, held);
  return TS_OK;
}

// ts_megatron_opts' attn_backward: dq, dk, dv (T, Hl·dh) from datt and the
// replay's probabilities P (Hl, T, T), which it frees; their gradient is
// another Hl·T² floats. Nonzero when out of memory.
static int dense_backward(const ts_attn_io *at, const ts_attn_shape *as, float *dq, float *dk,
                          float *dv, const float *datt, const float *q, const float *k,
                          const float *v, float *P) {
  const int T = as->T, H = as->H, dh = as->dh, ld = H * dh;
  const size_t TT = (size_t)T * T, held = 8 * (size_t)T * ld * sizeof(float); // in and out
  ts_mem_phase(TS_PHASE_ATTN_BWD);
  ts_mem_hold(held);
  float *dP = ts_mem_alloc((size_t)H * TT * sizeof(float));
  float *W = as->dropout > 0.0f ? ts_mem_alloc(TT * sizeof(float)) : NULL;
  int oom = !P || !dP || (as->dropout > 0.0f && !W);
  for (int h = 0; h < H && !oom; h++) {
    const float *Ph = P + (size_t)h * TT, *dO = datt + h * dh;
    float *dPh = dP + (size_t)h * TT;
    at->be->matmul(1, 0, T, dh, T, dropped(as, h, Ph, W), T, dO, ld, 0.0f, dv + h * dh, ld);
    at->be->matmul(0, 1, T, T, dh, dO, ld, v + h * dh, ld, 0.0f, dPh, T);
    softmax_backward(as, h, dPh, Ph);
    at->be->matmul(0, 0, T, dh, T, dPh, T, k + h * dh, ld, 0.0f, dq + h * dh, ld);
    at->be->matmul(1, 0, T, dh, T, dPh, T, q + h * dh, ld, 0.0f, dk + h * dh, ld);
  }
  ts_mem_free(P);
  free_all(dP, W, held);
  return oom;
}

// What its calls take (strategy.h `incall`): the forward the probabilities
// of the rank's Hl heads (and one head's dropped copy), Hl·T² (+ T²) floats;
// the backward the replay's probabilities kept and their gradient, 2·Hl·T²
// (+ T²); and megatron's packing. At T = 16384 each head's probabilities are
// 1 GiB: with 4 heads a rank, 4 GiB forward and 8 GiB backward, which the fit
// check counts before any work rather than die mid-step.
static void dense_incall(const ts_attn_io *io, const ts_seq_shard *sp, ts_cp_incall *out) {
  ts_megatron_incall(io, sp, out);
  const size_t TT = (size_t)io->T * io->T, Hl = (size_t)(io->H / io->seq->size);
  const size_t drop = io->cfg->dropout > 0.0f ? TT : 0;
  out->fwd = (Hl * TT + drop) * sizeof(float);
  out->bwd = (2 * Hl * TT + drop) * sizeof(float);
}

// The layout rules are megatron's (GPT, heads and MLP width divisible by N, no
// pipeline, --zero, Muon, --checkpoint: it recomputes everything already).
static const ts_megatron_opts korthikanti = {
    .recompute = 1, .attn_forward = dense_forward, .attn_backward = dense_backward};

const ts_cp ts_cp_megatron_2022 = {
    .name = "megatron-2022",
    .summary = "the LSS paper's baseline: megatron with T x T attention scores and full "
               "recomputation: 12 collectives per layer",
    .exact = 0,
    .host_only = 1,
    .opts = &korthikanti,
    .check = ts_megatron_check,
    .sizes = ts_megatron_sizes,
    .split = ts_megatron_split,
    .create = ts_megatron_create,
    .bytes = ts_megatron_bytes,
    .traffic = ts_megatron_traffic,
    .incall = dense_incall,
    .destroy = ts_megatron_destroy,
    .layer_forward = ts_megatron_layer_forward,
    .layer_backward = ts_megatron_layer_backward,
};
