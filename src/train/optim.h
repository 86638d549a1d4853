// AdamW with global-norm clipping and the learning-rate schedules (warm-up,
// then cosine, linear, constant or warmup-stable-decay)
// (docs/MODEL.md). Element-wise, so exact on any layout.
#ifndef TS_OPTIM_H
#define TS_OPTIM_H
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "dist/owners.h"
#include "tessera.h"

typedef struct {
  const ts_backend *be; // the backend of the parameters (backend.h), which updates them
  size_t n;
  float *m, *v;   // moments, same layout as the parameters (Muon's momentum in m)
  uint64_t step;  // optimizer steps taken
  float *scratch; // Muon's orthogonalisation scratch (allocated on first use)
  size_t scratch_n;
} ts_adamw;

int ts_adamw_init(ts_adamw *opt, size_t n);
void ts_adamw_free(ts_adamw *opt);
// One update of every tensor but those with skip[t] set (skip may be NULL);
// decay applies to tensors with ndim >= 2.
void ts_adamw_update(ts_adamw *opt, ts_tensor *params, ts_tensor *grads, int ntens,
                     float lr, float wd, float beta1, float beta2, float eps,
                     const unsigned char *skip);

// The scalars of AdamW's update number step (1-based) at rate lr: step_size =
// lr/(1 − β1^step), bc2_sqrt = √(1 − β2^step), the powers tessera's own
// (src/exact/exactmath.h), so they are the same bits on every machine.
void ts_adamw_scalars(float lr, float beta1, float beta2, uint64_t step, float *step_size,
                      float *bc2_sqrt);

// AdamW on one stream-writing tensor t (its data p, gradient g, moments m,
// v) with the adaptive scale constant along its output axis (ts_tensor's
// writes_stream; src/train/adamw_rowwise.c): the update of a codec that
// confines the stream (boundary.h confines_stream). On the host.
void ts_adamw_rowwise(const ts_tensor *t, float *p, const float *g, float *m, float *v,
                      float decay, float beta1, float beta2, float step_size, float bc2_sqrt,
                      float eps);

// The run's optimizer step s (0-based) on every tensor: AdamW, or the hybrid
// of the Muon papers (--optimizer muon, muon-pe): Muon, with Newton–Schulz or
// Polar Express, for the layers' 2-D weights (tensors of role TS_ROLE_LAYER
// of two dimensions), AdamW for the rest (embeddings, head, norms, biases)
// but the tensors the boundary codec updates itself (boundary.h: owns,
// update). Muon's learning rate is --muon-lr on AdamW's schedule; its
// momentum, and SPEL's, lives in the AdamW first moment of its tensors.
int ts_optimizer_step(ts_adamw *opt, ts_tensor *params, ts_tensor *grads, int ntens,
                      const ts_config *cfg, int64_t s);

// √(Σ g²) with a fixed association (fixed chunks in double, chunk sums in order).
// These four work on buffers of the current backend (backend.h): on the GPU
// the chunk sums and the clip run there, with the same bits.
float ts_grad_norm(const float *g, size_t n);
// Scales g by clip / (norm + 1e-6) when norm > clip > 0.
void ts_clip(float *g, size_t n, float norm, float clip);
// The same over the model's gradient buffer (grads[0].data, n floats) but for
// the slots of mapl-vq's codebooks, which hold statistics (vq.h): the norm
// counts them as zeros (same bits as ts_grad_norm without codebooks).
float ts_grad_norm_trained(const ts_tensor *grads, int nt, size_t n);
// The same norm of a partitioned model (dist/owners.h): the trained
// tensors among this rank's owned grads[0, nt) (canonical offsets in `at`)
// and the other owners', folded in canonical order: the serial bits, on every
// rank of the group. A non-finite norm is returned, not an error.
int ts_grad_norm_owned(const ts_owners *o, const ts_tensor *grads, int nt, float *out);
// The clip of each tensor (or part) of grads[0, nt) but the statistics
// slots, which it leaves alone, wherever they lie (a whole model's, or a
// partitioned one's: dist/owners.h).
void ts_clip_tensors(const ts_tensor *grads, int nt, float norm, float clip);
// Learning rate for 0-based step s: the warmup, then cfg->lr_schedule.
float ts_lr_at(const ts_config *cfg, int64_t s);
#endif
