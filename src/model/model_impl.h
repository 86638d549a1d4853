// The model's insides, shared by the files of src/model/ and by the
// context-parallel strategies (src/cp/strategy.h) and stage-boundary codecs
// (src/boundary/), which run a layer's attention (or, tensor-split, the whole
// layer) and a stage's edges on them. Everything else goes through tessera.h.
#ifndef TS_MODEL_IMPL_H
#define TS_MODEL_IMPL_H
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/kernels.h"
#include "backend/mem.h"
#include "comm/comm.h"
#include "cp/strategy.h"
#include "tessera.h"

// A layer's tensors (cp/strategy.h: the seams pass them to strategies).
typedef ts_layer_tensors layer_params;

typedef struct {
  float *wte, *wpe, *lnfw, *lnfb, *lm_head; // lm_head NULL when tied
  layer_params *layer;
} param_views;

// What a layer keeps for its backward. Norm outputs and the GeLU output are
// not kept: backward recomputes them (same code, same bits) into shared
// scratch, which saves 2d + d_ff floats per token per layer.
// (LLaMA: the means are unused, fch is the gate's output and fup the up
// projection's.)
typedef struct {
  float *ln1_mean, *ln1_rstd, *q, *k, *v, *att, *lse, *res_mid;
  float *ln2_mean, *ln2_rstd, *fch, *fup;
} layer_acts;

struct ts_model {
  ts_config cfg;
  const ts_backend *be;         // where the kernels run (backend.h)
  int B, T, C, L, H, dh, F, V; // B: the sequences this model holds (its shard)
  int Hkv, Ckv;                // key/value heads and their width Hkv·dh
  int llama;                   // the LLaMA variant (RMSNorm, RoPE, GQA, SwiGLU)
  float *rope;                 // (T, dh/2, 2) cos, sin of the rotary angles (LLaMA)
  int64_t ntok;                // B*T local tokens
  // The shard of the global batch: sequences [b0, b0 + B) of Bg. Dropout
  // indices and the loss scale use the global batch (docs/MODEL.md).
  int b0, Bg;
  int64_t ntok_global;         // Bg*T
  // The sequence shard: positions [t0, t0 + Tl) of each sequence (serial:
  // 0, T). Token-wise buffers hold B*Tl rows; K and V hold whole sequences.
  int t0, Tl;
  ts_comm *seq;                // the sequence group (NULL: serial)
  const struct ts_cp *cp;      // how the group shares a sequence (strategy.h; serial: ts_cp_local)
  void *cp_state;              // the strategy's own (its create / destroy)
  // How the stream crosses stage boundaries (boundary/boundary.h; without
  // --compress the identity), and the codec's own state (its create / destroy).
  const struct ts_boundary *bd;
  void *bd_state;
  uint64_t bd_step; // the pass's step, and whether it trains (boundary.h's io)
  int bd_training;
  int bd_identity; // decode as if the basis were the identity (ts_model_set_identity_boundaries)
  ts_residual_tap tap;         // an observer of the stream between layers (NULL: none)
  void *tap_ctx;
  // The rank's rows as runs of consecutive positions (the strategy's
  // `positions`): one run [t0, t0 + Tl) (of each of the B sequences when not
  // sharded), or e.g. ring-zigzag's two chunks. Run k is rows
  // [k·runs.len, (k+1)·runs.len).
  ts_cp_runs runs;
  // Pipeline stage: layers [l0, l1) (the whole model: 0, L). Stages after the
  // first take their input from x_in, stages before the last their output's
  // gradient from dy_in (ts_model_set_stage_*).
  int l0, l1;
  const void *x_in;  // X (rows × d), or the compressed boundary's wire
  const void *dy_in; // dX (rows × d), or the compressed boundary's backward wire
  ts_layer_hooks hooks;         // --zero 2, 3 (ts_model_set_layer_hooks); zeros: none
  float *spbuf;                // the strategy's scratch (ts_cp_sizes.scratch floats)
  int rc;                      // error of the last forward
  // The tensors this model holds (tessera.h): ptens[0, ntens), the nown it
  // owns first, then the copies it reads of tensors another stage owns
  // (ts_model_create_stage), whose gtens have no data. Parameters: one
  // allocation, the owned ones' nparams floats then the copies' ncopy;
  // gradients: one allocation of nparams, the owned ones' layout. The views
  // carry each tensor's role and canonical offset.
  int ntens, nown;
  ts_tensor *ptens, *gtens;
  int *key;      // per held tensor: its canonical index (the initialisation's key)
  size_t *elem0; // its first element within that tensor (a positional table's rows)
  int wpe_rows;  // wpe holds the rank's rows alone, run after run (sequence parallel)
  float *stds; // init std per tensor (0 = constant)
  float *consts;
  size_t nparams, ncopy;
  size_t nsplit; // of the owned: the floats of a tensor split's blocks (strategy.h `split`)
  float *params, *grads;
  // A rank that holds two runs whose gradient sums stay the serial tree
  // (lss-zigzag; src/model/run_partials.c): the second run's partials, in
  // the gradients' layout, and the backend wrapper that writes them. NULL
  // otherwise.
  float *grads2;
  void *rp;
  // the canonical (serial) model's table: nall tensors, nall_params floats
  int nall;
  ts_tensor *all; // data NULL
  size_t nall_params;
  param_views p, g;
  // activations
  float *acts;
  size_t nacts;     // floats of activations + backward scratch
  float **res;      // L+1 residual streams (ntok, C)
  layer_acts *la;
  float *lnf, *lnf_mean, *lnf_rstd, *logits, *losses;
  float *ln_out, *gelu_out; // shared scratch: a norm's output (ntok, C), GeLU's (ntok, F)
  // backward scratch
  float *dres, *dtmp, *dtmp2, *datt, *dq, *dk, *dv, *dfch, *dlogits, *dsum;
  int *inputs, *targets;
  ts_ws ws;
  float loss, loss_sum; // loss_sum: canonical-tree sum of the local token losses
  float *ce_scratch;    // --fused-ce: one leaf of logits per slot of leaf_sum (backend.h)
  float *mlp_scratch;   // --tiled-mlp: four leaves of d_ff floats per slot
};

// The activations layer l keeps for its backward: its own, or with per-layer
// checkpointing (--checkpoint) the one set all layers share, refilled by
// recomputing the layer's forward from its input just before its backward.
static inline layer_acts *ts_layer_acts(ts_model *m, int l) {
  return &m->la[m->cfg.checkpoint ? 0 : l];
}

// Global dropout indices of this shard's first element in layer l
// (docs/MODEL.md): rows of the projection and MLP outputs, and attention
// probabilities of head 0.
uint64_t ts_model_row_base(const ts_model *m, int l);
uint64_t ts_model_attn_base(const ts_model *m, int l);
// RoPE (backward: its inverse) on the rank's rows of nh heads, row stride ld,
// run by run at the runs' positions; nothing for GPT.
void ts_model_rope_rows(const ts_model *m, float *x, int nh, int ld, int backward);

// ---- the pieces of src/model/ ---------------------------------------------------------
// attn_io.c: the attention seam's io (cp/strategy.h) of the model's
// geometry and services alone (l = -1, no tensors), or of layer l's call.
struct ts_attn_io;
void ts_attn_io_geometry(const ts_model *m, struct ts_attn_io *io);
void ts_attn_io_layer(ts_model *m, int l, uint64_t step, float p, struct ts_attn_io *io);
void ts_layer_io_fill(ts_model *m, int l, uint64_t step, float p, ts_layer_io *io);
// boundary_io.c: the stage-boundary seam's io (boundary/boundary.h).
struct ts_boundary_io ts_model_codec_io(const ts_model *m);
// layer.c: res[l] -> res[l + 1]; and back (ts_layer_backward: a collective's
// error at once, gradient-tree allocation failures or-ed into *oom).
int ts_layer_forward(ts_model *m, int l, uint64_t step, float p);
int ts_layer_backward(ts_model *m, int l, uint64_t step, int *oom);
// layer.c: the variant's norm of the rank's rows: LayerNorm (GPT) or RMSNorm
// (LLaMA: no mean, no bias); backward: dw, db by the canonical tree.
void ts_model_norm_forward(const ts_model *m, float *out, float *mean, float *rstd, const float *x,
                           const float *w, const float *b);
int ts_model_norm_backward(ts_model *m, float *dinp, float *dw, float *db, const float *dout,
                           const float *x, const float *w, const float *mean,
                           const float *rstd);
// mlp.c: y = the MLP of the norm output m->ln_out; back from dy in m->dtmp to
// d(norm output) in m->dtmp, with layer l's weight gradients.
void ts_mlp_forward(ts_model *m, const layer_params *w, layer_acts *a, float *y);
int ts_mlp_backward(ts_model *m, const layer_params *w, layer_params *g, layer_acts *a);
// head.c: the final norm, head and loss; the loss's backward into m->dres;
// the embeddings' gradients from m->dres (non-zero: a tree's allocation failed).
void ts_head_forward(ts_model *m);
int ts_head_backward(ts_model *m);
int ts_embedding_backward(ts_model *m);
// params.c: the floats of the leaf-at-a-time options' scratch (one leaf per
// slot of the backend's leaf_sum, of nthreads on the CPU).
size_t ts_model_fused_ce_floats(const ts_model *m, int nthreads);
size_t ts_model_tiled_mlp_floats(const ts_model *m, int nthreads);
// The CPU attention kernel's per-thread copies of a head's rows, at their
// most (0 on a GPU): counted with the scratch above.
size_t ts_model_attn_pack_floats(const ts_model *m, int nthreads);

// A phase of the step for the memory tracker (mem.h), with the bytes of the
// model's own buffers it works in held for its span.
static inline void ts_phase_begin(ts_phase ph, size_t bytes) {
  ts_mem_phase(ph);
  ts_mem_hold(bytes);
}
static inline void ts_phase_end(size_t bytes) {
  ts_mem_release(bytes);
  ts_mem_phase(TS_PHASE_NONE);
}
#endif
