// No compression (--compress none): the wire is the residual stream X
// itself, d floats a token each way, and the model has no boundaries of its
// own; a pipeline's stages still meet through it, so that the model treats
// every stage end alike.
#include <string.h>

#include "boundary/boundary.h"
#include "model/model_impl.h"

static int identity_check(ts_config *cfg) {
  if (cfg->compress_rank != 0)
    return ts_fail(TS_EUSAGE, "--rank %d: only with --compress", cfg->compress_rank);
  cfg->compress_stages = 0;
  return TS_OK;
}

static size_t identity_wire_bytes(const ts_config *cfg, int backward) {
  (void)backward;
  return (size_t)cfg->d * sizeof(float);
}

// The stage's output is its wire already.
static void identity_encode(ts_model *m, int p, const float *x) {
  (void)m, (void)p, (void)x;
}

static void *identity_wire(const ts_model *m, int p) {
  (void)p;
  return m->res[m->l1];
}

// dst ← src, a row block of the model's tokens (rows × d); nothing when they are one.
static void copy_rows(const ts_model *m, float *dst, const float *src) {
  if (dst != src) memcpy(dst, src, (size_t)m->ntok * m->C * sizeof(float));
}

static void identity_decode(ts_model *m, int p, const void *wire, float *x) {
  (void)p;
  copy_rows(m, x, wire);
}

// dz is dx (identity_dz): the gradient of the stage's input goes back as it is.
static int identity_decode_backward(ts_model *m, int p, const float *dx, float *dz) {
  (void)p;
  copy_rows(m, dz, dx);
  return TS_OK;
}

static int identity_encode_backward(ts_model *m, int p, const float *dz, float *dx,
                                    uint64_t step) {
  (void)p, (void)step;
  copy_rows(m, dx, dz);
  return TS_OK;
}

static float *identity_dz(const ts_model *m) { return m->dres; }

const ts_boundary ts_boundary_identity = {
    .name = "none",
    .check = identity_check,
    .wire_bytes = identity_wire_bytes,
    .encode = identity_encode,
    .wire = identity_wire,
    .decode = identity_decode,
    .decode_backward = identity_decode_backward,
    .encode_backward = identity_encode_backward,
    .dz = identity_dz,
};
