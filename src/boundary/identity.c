// No compression (--compress none): the wire is the residual stream X
// itself, d floats a token each way, and the model has no boundaries of its
// own; a pipeline's stages still meet through it, so that the model treats
// every stage end alike.
#include <string.h>

#include "boundary.h"

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
static void identity_encode(const ts_boundary_io *io, int p, const float *x) {
  (void)io, (void)p, (void)x;
}

static void *identity_wire(const ts_boundary_io *io, int p) {
  (void)p;
  return io->out;
}

// dst ← src, a row block of the model's tokens (rows × d); nothing when they are one.
static void copy_rows(const ts_boundary_io *io, float *dst, const float *src) {
  if (dst != src) memcpy(dst, src, (size_t)io->ntok * io->C * sizeof(float));
}

static void identity_decode(const ts_boundary_io *io, int p, const void *wire, float *x) {
  (void)p;
  copy_rows(io, x, wire);
}

// dz is dx (identity_dz): the gradient of the stage's input goes back as it is.
static int identity_decode_backward(const ts_boundary_io *io, int p, const float *dx, void *dz,
                                    uint64_t step) {
  (void)p, (void)step;
  copy_rows(io, dz, dx);
  return TS_OK;
}

static int identity_encode_backward(const ts_boundary_io *io, int p, const void *dz, float *dx,
                                    uint64_t step) {
  (void)p, (void)step;
  copy_rows(io, dx, dz);
  return TS_OK;
}

static void *identity_dz(const ts_boundary_io *io) { return io->dres; }

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
