// The stage-boundary interface: how the residual stream of a model cut into
// S stages (--compress MODE --rank r --compress-stages S) crosses from one
// stage to the next (docs/COMPRESSION.md, docs/ALGORITHMS.md §7). One table of
// operations per codec, like the context-parallel strategies (cp/strategy.h);
// the model calls its codec at the boundaries and never asks which one it
// runs. Without --compress it runs the identity, whose wire is X itself and
// whose only boundaries are a pipeline's.
//
// The seam. Boundary p (0 ≤ p < S − 1) follows layer l − 1, l = (p + 1)·L/S:
//   forward   x (rows × d)  —encode→  wire  —decode→  x̂ (rows × d)
//   backward  G = dx̂ (rows × d)  —decode_backward→  dZ  —encode_backward→  dx
// The serial model runs each pair back to back (x̂ and dx replace x and G); a
// pipeline stage runs encode and encode_backward at its output boundary,
// decode and decode_backward at its input boundary, and the wire and dZ
// cross between them. Both run the same code on the same rows, so a
// pipelined compressed model is its serial run bit for bit.
//
// Tensors. What a codec learns is model parameters (initialised, trained and
// checkpointed with the rest): `tensors` declares them per stage, with their
// role (tessera.h), and the model places them after the stage's last layer,
// so that a pipeline stage's tensors stay one slice. The codec finds its own
// by role (ts_boundary_param); the optimizer, the gradient norm and the
// pipeline do likewise, never by name.
//
// Adding a codec: one file in src/boundary/ defining a `const ts_boundary`,
// and one line in src/codecs.def (docs/COMPRESSION.md).
#ifndef TS_BOUNDARY_H
#define TS_BOUNDARY_H
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "comm/comm.h"
#include "tessera.h"

// What a codec sees of the model, filled by the model (src/model/boundary_io.c)
// for each call: its geometry and services, the rows' tokens, the two
// residual buffers the identity's wire and dz are, and the model's tensors
// (ts_boundary_param finds a codec's own among them by role).
typedef struct ts_boundary_io {
  const ts_config *cfg;
  const ts_backend *be;
  ts_ws *ws;
  int C, V, T, L;              // width, vocabulary, positions, layers
  int64_t ntok;                // the model's rows (B·Tl)
  int64_t ntok_global;         // the global batch's tokens (Bg·T)
  int b0;                      // the shard's first sequence of the global batch
  const int *inputs;           // the rows' token ids (ntok)
  float *out;                  // the stage's output rows (ntok × d)
  float *dres;                 // the residual stream's gradient (ntok × d)
  int l0, l1;                  // the layers the model holds (a pipeline stage's; serial 0, L)
  int ntens, nown;             // the model's tensors and their gradients: the nown it
  const ts_tensor *ptens, *gtens; // owns first, then copies of another stage's (no gradient)
  const struct ts_boundary *bd; // its own table
  void *state;                  // its create's state (NULL before)
  // Decode as if the basis were the identity: X̂ = X less the sender's anchor
  // plus the receiver's (tessera eval --identity-boundaries; every codec but
  // the identity decodes through ts_boundary_affine_decode, which does it). A
  // probe of what the trained stream holds outside the subspace, never a
  // training mode.
  int identity;
  // The pass: its 1-based step, and whether it trains (mapl-vq's stream by
  // microbatch keys the shared codebook by the step and the rows' b0).
  uint64_t step;
  int training;
} ts_boundary_io;

// The most tensors a codec declares for one stage.
#define TS_BOUNDARY_TENSORS 12

typedef struct ts_boundary {
  const char *name;     // the --compress name
  int learns_projector; // its projectors change after a step (--proj-lr applies)
  int anchor_kinds;     // it takes --mapl-anchor (MAPL's anchor, mapl.h)
  // It confines the residual stream to a subspace: every tensor that writes
  // the stream (ts_tensor's writes_stream) is updated by AdamW with its
  // adaptive scale constant along its output axis, whatever the optimizer
  // (train/optim.c), so that projecting the update commutes with the scale;
  // stays whole in one shard under --zero; and `after_step` projects it.
  int confines_stream;
  // ---- configuration (ts_config_finalize) -------------------------------------------
  // The first of the codec's own settings that cfg gives (its flag), for the
  // other codecs to refuse ("--vq-codes: only with --compress mapl-vq").
  // NULL: it has none.
  const char *(*own_setting)(const ts_config *cfg);
  // Its rules and defaults once the common ones hold (ts_boundary_finalize),
  // each refusal one line naming the flag (TS_EUSAGE).
  int (*check)(ts_config *cfg);
  // ---- shape --------------------------------------------------------------------------
  // Bytes of a row on the wire forward (backward 0) and of its gradient back (1).
  size_t (*wire_bytes)(const ts_config *cfg, int backward);
  // Its tensors of stage s: their number, and in out[] their name, shape,
  // role and index (data NULL; the model zeroes them before `init`). NULL: none.
  int (*tensors)(const ts_config *cfg, int s, ts_tensor *out);
  // Floats of the buffers it keeps (the model's memory estimate), and of a
  // thread's leaf partial (the model's workspace). Each NULL: none.
  size_t (*activation_floats)(const ts_boundary_io *io);
  size_t (*leaf_floats)(const ts_config *cfg);
  // ---- lifetime -----------------------------------------------------------------------
  // Its state (*state, io->state in every later call; set it before
  // anything that can fail) once the model's parameters exist; free (also of
  // a half-made state). Each NULL: none.
  int (*create)(const ts_boundary_io *io, void **state);
  void (*destroy)(const ts_boundary_io *io);
  // Frozen bases from the seed and its tensors' starting values, after the
  // parameters' generic initialisation, on every rank alike. NULL: nothing.
  void (*init)(const ts_boundary_io *io, uint64_t seed);
  // ---- the seam (p: the boundary; −1 at a pipeline stage's end that is no
  // boundary of the model's, which only the identity has) -------------------------------
  // x (rows × d) → boundary p's wire, kept with what the backward needs.
  void (*encode)(const ts_boundary_io *io, int p, const float *x);
  // What encode wrote (a stage's output on the wire).
  void *(*wire)(const ts_boundary_io *io, int p);
  // Boundary p's wire → x (rows × d).
  void (*decode)(const ts_boundary_io *io, int p, const void *wire, float *x);
  // G = dx (rows × d) → dz, the backward's wire (wire_bytes(cfg, 1) a row:
  // dZ's floats, or mapl-vq's codes and scales), the receiving stage's
  // gradients after it (step keys anything seeded per step).
  int (*decode_backward)(const ts_boundary_io *io, int p, const float *dx, void *dz, uint64_t step);
  // dz → dx (rows × d), the sending stage's gradients after it.
  int (*encode_backward)(const ts_boundary_io *io, int p, const void *dz, float *dx, uint64_t step);
  // The buffer of dz going back (a stage's input gradient on the wire).
  void *(*dz)(const ts_boundary_io *io);
  // ---- after a step -------------------------------------------------------------------
  // Whether it updates its tensors of a role itself, instead of AdamW (the
  // optimizer skips them). NULL: AdamW updates all of them.
  int (*owns)(ts_role role);
  // That update of params[t] (one of nt, the model's table) after AdamW's
  // step: grads[t] its gradient (or statistics), moment its AdamW first-moment
  // slot, sched the schedule's factor (lr / --lr), step the 1-based step,
  // scratch the optimizer's (ts_ortho_scratch of the tensor's shape). NULL:
  // its own tensors stay as they are.
  void (*update)(const ts_config *cfg, ts_tensor *params, const ts_tensor *grads, int nt, int t,
                 float *moment, float sched, uint64_t step, float *scratch);
  // A pipeline's sync after the step (pipeline.c): boundary p's sender
  // brings its receiver's copies up to date (send 1: to the next stage
  // `peer`; 0: from the previous one). Pipeline stages replicate every
  // tensor, so the transfer is the one a stage holding only its own would
  // need, performed and counted as such. NULL: nothing changes.
  int (*sync)(const ts_boundary_io *io, ts_comm *pipe, int p, int peer, int send, uint64_t step);
  // The bytes that sync sends for one boundary, from the configuration
  // (`tessera plan`'s traffic; tests/plan.sh holds it to a run's). NULL: none.
  size_t (*sync_bytes)(const ts_config *cfg);
  // After the optimizer's step and the --zero broadcast, before the
  // pipeline's sync, on every rank alike: what it does to the model's
  // tensors every rank holds whole (confinement: the stream writers'
  // projection, boundary.h confines_stream). pipe: the pipeline's stages, in
  // stage order (NULL: the serial model, which holds them all). NULL: nothing.
  int (*after_step)(const ts_boundary_io *io, ts_comm *pipe, uint64_t step);
} ts_boundary;

// The codec of a --compress mode (NULL: none such).
const ts_boundary *ts_boundary_get(int mode);
// A pipeline's sync of the model's codec (its `sync`; src/model/boundary_io.c).
int ts_model_boundary_sync(ts_model *m, ts_comm *pipe, int p, int peer, int send, uint64_t step);
// The codec's after_step (src/model/boundary_io.c; pipe NULL: serial).
int ts_model_boundary_after_step(ts_model *m, ts_comm *pipe, uint64_t step);

// ---- what the model and the rest of tessera use (boundary.c) ----------------------------
// cfg's compression settings: the common rules (an unknown mode, another
// codec's settings, --proj-lr without a learned projector, --mapl-anchor
// outside mapl and mapl-vq), then the codec's.
int ts_boundary_finalize(ts_config *cfg);
// The boundary after layer l − 1 (l a multiple of L/S, 0 < l < L): its index
// p, or −1 when l is not one.
int ts_boundary_at(const ts_config *cfg, int l);
// Whether a tensor's gradient slot holds statistics, not a gradient
// (mapl-vq's codebooks, vq.h): the gradient norm and the clip leave it out.
// (ssn-confined's basis, whose slot gathers the refresh's gradient, too.)
static inline int ts_boundary_statistics(ts_role role) {
  return (role >= TS_ROLE_VQ_COUNT && role <= TS_ROLE_GVQ_RECV) || role == TS_ROLE_SUBSPACE;
}
// Whether a codec tensor of a role is read by the stage before the one that
// holds it (mapl-vq's gradient codebooks: the gradient's receiver decodes
// with its copy), instead of by the stage after it (every other codec
// tensor but the anchors, which no other stage reads).
static inline int ts_boundary_read_upstream(ts_role role) {
  return role >= TS_ROLE_GVQ_COUNT && role <= TS_ROLE_GVQ_RECV;
}

// ---- pieces several codecs share (boundary.c) -------------------------------------------
// Refusals every compressing codec makes: the rank and the stages.
int ts_boundary_check_stages(ts_config *cfg);
// out ← a tensor declaration for `tensors`: its name (fmt of the stage or
// boundary index), shape (s1 0 for one dimension) and role; returns 1.
int ts_boundary_declare(ts_tensor *out, const char *fmt, int index, int64_t s0, int64_t s1,
                        ts_role role);
// r floats a row, each way (every codec but the identity and mapl-vq's codes).
size_t ts_boundary_float_wire(const ts_config *cfg, int backward);
// The model's parameter (grad 0) or gradient (1) of a role and index.
float *ts_boundary_param(const ts_boundary_io *io, ts_role role, int index, int grad);
// The rows of boundary p's subspace (r × d), and stage s's anchor rows of the
// model's tokens into the buffers' anc: what makes a codec an affine map
// X̂ = (X − anchor_p)·Bᵀ·B + anchor_{p+1}.
typedef struct {
  const float *(*basis)(const ts_boundary_io *io, int p);
  void (*anchor)(const ts_boundary_io *io, int s);
} ts_boundary_affine;

// The buffers every compressing codec keeps: the first member of its state.
typedef struct {
  int S, r;              // stages, floats a token on the wire
  unsigned char **wire;  // per boundary: what crosses it forward (Z, or codes)
  float **y;             // per boundary (rows × d): X minus the sender's anchor
  float *dz;             // (rows × r): dZ back
  float *anc;            // (rows × d): anchor rows
  float *wt;             // (r × d): the basis rows of the boundary being run
  double *qr;            // (d × r): ts_boundary_orthonormal's scratch (host)
} ts_boundary_buffers;

// Allocates *b (rows of the model's tokens, the codec's wire_bytes) or
// fails naming what; frees them (of a half-made set too).
int ts_boundary_buffers_create(const ts_boundary_io *io, ts_boundary_buffers *b);
void ts_boundary_buffers_free(const ts_boundary_io *io, ts_boundary_buffers *b);
// The memory estimate of ssn and mapl: the buffers, and of their own a row
// block (rows × r) per stage, three more, and two (r × d). mapl-vq adds its own.
size_t ts_boundary_buffer_floats(const ts_boundary_io *io);
// Of the buffers at the start of io->state: boundary p's wire, and dz.
void *ts_boundary_buffers_wire(const ts_boundary_io *io, int p);
void *ts_boundary_buffers_dz(const ts_boundary_io *io);
// The affine encode: y_p = x − anchor_p, z = y_p·Bᵀ (rows × r).
void ts_boundary_affine_encode(const ts_boundary_io *io, const ts_boundary_affine *f, int p, const float *x,
                               float *z);
// The affine decode: x = z·B + anchor_{p+1}.
void ts_boundary_affine_decode(const ts_boundary_io *io, const ts_boundary_affine *f, int p, const float *z,
                               float *x);
// q (n × k, row-major) ← the Q of the QR factorisation of a seeded Gaussian
// n × k matrix (key `which`): modified Gram–Schmidt in double (a, n × k,
// scratch: the buffers' qr), so its columns are orthonormal to double
// rounding before the final cast.
void ts_boundary_orthonormal(float *q, double *a, int n, int k, uint64_t seed, uint64_t which);
// out (cols × rows) ← inᵀ.
void ts_boundary_transpose(float *out, const float *in, int rows, int cols);
// The seeds' keys (TS_RNG_COMPRESS purpose, docs/ALGORITHMS.md §11).
// SSN's U and T, MAPL's P_s (FIXED + s) and A_p's start (PROJ + p).
enum { TS_BASIS_SSN = 0, TS_BASIS_TABLE = 1, TS_BASIS_FIXED = 2, TS_BASIS_PROJ = 1 << 20 };
// rows (k × n, row-major) ← its rows orthonormalised in order (modified
// Gram–Schmidt in double, scratch a: k × n): the retraction of a refresh.
void ts_boundary_orthonormalise_rows(float *rows, double *a, int k, int n);
#endif
