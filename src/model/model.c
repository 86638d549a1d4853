// The transformer family (GPT and LLaMA variants): forward and backward of
// the rank's rows through the layers of its stage, stage boundaries (codecs:
// src/boundary/) included. The pieces are params.c (parameters and buffers),
// layer.c (a layer around the strategy's attention, src/cp/strategy.h),
// mlp.c, head.c (the head, the loss and the embeddings' gradients).
#include <math.h>
#include <string.h>

#include "boundary/boundary.h"
#include "model_impl.h"

// Layer l's parameters whole (1) or free to go (0), for layouts that hold
// them in parts (ts_layer_hooks; l = -1: the embeddings, L: the head).
static int hold_layer(ts_model *m, int l, int whole) {
  return m->hooks.params ? m->hooks.params(m->hooks.ctx, l, whole) : TS_OK;
}

void ts_model_set_layer_hooks(ts_model *m, const ts_layer_hooks *hooks) {
  m->hooks = hooks ? *hooks : (ts_layer_hooks){0};
}

void ts_model_set_residual_tap(ts_model *m, ts_residual_tap tap, void *ctx) {
  m->tap = tap;
  m->tap_ctx = ctx;
}

float ts_model_forward(ts_model *m, const int *inputs, const int *targets, uint64_t step,
                       int training) {
  m->bd_step = step, m->bd_training = training; // (before the codec's view of the model)
  const ts_boundary_io bio = ts_model_codec_io(m); // the codec's view of the model (boundary.h)
  const int B = m->B, C = m->C;
  const int64_t N = m->ntok;
  const float p = training ? m->cfg.dropout : 0.0f;
  memcpy(m->inputs, inputs, (size_t)N * sizeof(int));
  memcpy(m->targets, targets, (size_t)N * sizeof(int));
  m->rc = TS_OK;
  if (m->l0 == 0) {
    if ((m->rc = hold_layer(m, -1, 1))) return NAN;
    for (int k = 0; k < m->runs.n; k++) {
      const size_t row = (size_t)k * m->runs.len;
      m->be->encoder_forward(m->res[0] + row * C, m->inputs + row, m->p.wte,
                      m->p.wpe ? m->p.wpe + (m->wpe_rows ? row : (size_t)m->runs.pos[k]) * C
                               : NULL,
                      m->runs.n == 1 ? B : 1, m->runs.len, C);
    }
    if ((m->rc = hold_layer(m, -1, 0))) return NAN;
  } else { // a later pipeline stage: the previous stage's output, decoded (boundary.h)
    m->bd->decode(&bio, ts_boundary_at(&m->cfg, m->l0), m->x_in, m->res[m->l0]);
  }
  for (int l = m->l0; l < m->l1; l++) {
    if ((m->rc = hold_layer(m, l, 1)) || (m->rc = ts_layer_forward(m, l, step, p)) ||
        (m->rc = hold_layer(m, l, 0)))
      return NAN;
    if (m->tap && l + 1 < m->L) m->tap(m->tap_ctx, l + 1, m->res[l + 1], m->inputs, N, C);
    const int b = ts_boundary_at(&m->cfg, l + 1);
    if (b >= 0 && l + 1 < m->l1) { // a boundary inside: encode and decode back to back
      m->bd->encode(&bio, b, m->res[l + 1]);
      m->bd->decode(&bio, b, m->bd->wire(&bio, b), m->res[l + 1]);
    }
  }
  if (m->l1 < m->L) { // an earlier pipeline stage: no loss here
    m->bd->encode(&bio, ts_boundary_at(&m->cfg, m->l1), m->res[m->l1]);
    m->loss_sum = m->loss = 0.0f;
    return 0.0f;
  }
  if ((m->rc = hold_layer(m, m->L, 1))) return NAN;
  ts_head_forward(m);
  if ((m->rc = hold_layer(m, m->L, 0))) return NAN;
  m->loss = m->loss_sum / (float)m->ntok_global;
  return m->loss;
}

// ---- backward ----------------------------------------------------------------------
int ts_model_backward(ts_model *m, uint64_t step) {
  m->bd_step = step, m->bd_training = 1;
  const ts_boundary_io bio = ts_model_codec_io(m); // the codec's view of the model (boundary.h)
  int rc = 0, crc; // rc: allocation failures in the trees; crc: a collective's error
  if (m->l1 == m->L) {
    if ((crc = hold_layer(m, m->L, 1))) return crc;
    rc |= ts_head_backward(m);
    if ((crc = hold_layer(m, m->L, 0))) return crc;
  } else { // an earlier pipeline stage: the next stage's gradient of our output, encoded
    if ((crc = m->bd->encode_backward(&bio, ts_boundary_at(&m->cfg, m->l1), m->dy_in, m->dres, step)))
      return crc;
  }
  for (int l = m->l1 - 1; l >= m->l0; l--) {
    if ((crc = hold_layer(m, l, 1)) || (crc = ts_layer_backward(m, l, step, &rc))) return crc;
    if (m->hooks.grads_done && (crc = m->hooks.grads_done(m->hooks.ctx, l))) return crc;
    if ((crc = hold_layer(m, l, 0))) return crc;
    const int b = ts_boundary_at(&m->cfg, l);
    if (b >= 0 && l > m->l0) { // a boundary inside: its two backwards back to back
      if ((crc = m->bd->decode_backward(&bio, b, m->dres, m->bd->dz(&bio), step)) ||
          (crc = m->bd->encode_backward(&bio, b, m->bd->dz(&bio), m->dres, step)))
        return crc;
    }
  }
  // a later pipeline stage ends here: dres is the gradient of its input,
  // which goes back as the codec's dz (boundary.h)
  if (m->l0 > 0) {
    if ((crc = m->bd->decode_backward(&bio, ts_boundary_at(&m->cfg, m->l0), m->dres,
                                      m->bd->dz(&bio), step)))
      return crc;
    if (rc) return ts_fail(TS_ERUNTIME, "out of memory in backward (gradient trees)");
    return TS_OK;
  }
  if ((crc = hold_layer(m, -1, 1))) return crc; // (a tied head's weight gradient reads them)
  rc |= ts_embedding_backward(m);
  if ((crc = hold_layer(m, -1, 0))) return crc;
  if (rc) return ts_fail(TS_ERUNTIME, "out of memory in backward (gradient trees)");
  return TS_OK;
}

// ---- pipeline stages ---------------------------------------------------------------
void ts_model_set_stage_input(ts_model *m, const void *x) { m->x_in = x; }
void ts_model_set_identity_boundaries(ts_model *m, int on) { m->bd_identity = on; }
void ts_model_set_stage_grad(ts_model *m, const void *dy) { m->dy_in = dy; }
const void *ts_model_stage_output(const ts_model *m) {
  const ts_boundary_io bio = ts_model_codec_io(m);
  return m->bd->wire(&bio, ts_boundary_at(&m->cfg, m->l1));
}
const void *ts_model_stage_dinput(const ts_model *m) {
  const ts_boundary_io bio = ts_model_codec_io(m);
  return m->bd->dz(&bio);
}
size_t ts_model_boundary_bytes(const ts_model *m, int backward) {
  return m->bd->wire_bytes(&m->cfg, backward);
}

