// The context-parallel strategy interface: how the N ranks of a sequence
// group share one sequence. One table of operations per strategy, like the
// communicator (comm.h) and backend (backend.h) tables; the model calls a
// strategy at one seam, the attention core of a layer (or the whole layer,
// for a tensor-split strategy), and never asks which strategy it runs.
//
// The seam. A layer's attention branch is
//     a = norm1(x) · [strategy: Q, K, V projections and attention] · Wo
// The model computes the norm (io->x, the rank's rows) and the output
// projection; the strategy turns io->x into the layer's attention output
// io->att (the rank's rows, all heads), keeping what its backward needs in
// io->q, k, v, lse (sized by `sizes`). Its backward turns io->datt (the
// gradient of that output, the rank's rows) into io->dq, dk, dv: the
// gradients of the rank's rows of Q, K and V with the rotations (RoPE) still
// applied; the model then undoes the rotations and forms the projections'
// weight gradients and dX exactly as the serial model does. So every
// strategy's results enter the serial code at the same point, and whatever
// the strategy moves, it moves rows or heads, not partial sums, wherever it
// is in the exact tier. A strategy sees the model only through the io struct
// below (ts_attn_io), which the model fills at each call.
//
// Gradients. Every strategy leaves each rank with the replicated parameters
// and its own partial gradients of them (its rows' share), so one
// synchronisation serves them all (shard.h): the canonical-tree all-reduce
// over the sequence group of every replicated gradient, then the data
// group's. Two kinds of tensor are not replicated and stay out of the
// sequence group's sum: the positional embedding, whose rows each rank owns
// at the positions its `positions` gives it, and under a tensor split
// (`split`) the blocks of the split tensors each rank holds alone, whose
// gradients are complete on their holder. A strategy whose rank holds two
// runs declares `run_partials`, and the model keeps the second run's
// partials apart for it (the gradient plan, run_partials.c).
//
// Adding a strategy: one file in src/cp/ defining a `const ts_cp`, and
// one line in src/strategies.def (docs/ARCHITECTURE.md).
#ifndef TS_STRATEGY_H
#define TS_STRATEGY_H
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/kernels.h"
#include "comm/comm.h"
#include "tessera.h"

// The positions a rank holds: runs of consecutive positions of its
// sequence, in row order (run k is rows [k·len, (k+1)·len)).
typedef struct {
  int n, len, pos[2];
} ts_cp_runs;

// Rows of the model's buffers that the strategy needs, for the allocation,
// the fit check and the memory report. N = the rank's rows (B·Tl).
typedef struct {
  int64_t layer_rows; // rows of the model's attention-output and MLP buffers (N; 0 when
                      // the strategy runs the whole layer with buffers of its own)
  int64_t q_rows;     // rows of Q and of the lse kept per layer (lse: × heads)
  int64_t kv_rows;    // rows of K and V kept per layer
  int64_t dkv_rows;   // rows of the dK, dV scratch
  size_t scratch;     // floats of the strategy's own scratch in the model (io->scratch)
} ts_cp_sizes;

// What a layer's attention calls take beyond the model's buffers and the
// strategy's own state (`bytes`), for the fit check and `tessera plan`: the
// most bytes its forward and its backward allocate at once (mem.h
// ts_mem_alloc: buffers that live only inside the call; a step record's
// state_bytes.incall measures the largest), and the floats of the largest
// packing buffer its collectives make the sequence group's communicator keep
// (comm.h ts_comm_pack_tree, ts_comm_pack_2d; state_bytes.comm_buffers).
typedef struct {
  size_t fwd, bwd;
  size_t pack;
} ts_cp_incall;

// The block of a tensor a rank holds under a tensor split: rows [r0, r0 +
// nr) and columns [c0, c0 + nc) of the tensor as a row-major (rows, cols)
// matrix (a vector: one row of its length). The rank keeps the block
// row-major and contiguous, (nr, nc): a column block of a matrix is nr
// strided runs of the canonical vector, a row block one run.
typedef struct {
  int64_t r0, nr, c0, nc;
} ts_cp_block;

// What a strategy sees of the model at the attention seam, filled by the
// model (src/model/attn_io.c) for each call. For `sizes`, `split`,
// `create`, `bytes` and `destroy` only the geometry and services are set
// (l = -1, no tensors; `sizes` and `split` come before any allocation); for
// the seam's two calls, layer l's.
typedef struct ts_attn_io {
  // geometry: the shard's B sequences of T positions, width C, H query heads
  // of dh, Hkv key/value heads (width Ckv), d_ff F, L layers; the rank's
  // segment [t0, t0 + Tl) of each sequence, ntok = B·Tl rows, as runs
  int B, T, C, H, dh, Hkv, Ckv, F, L;
  int Tl, t0;
  int64_t ntok;
  ts_cp_runs runs;
  const float *rope; // (T, dh/2, 2) cos, sin of the rotary angles; NULL: no RoPE (GPT)
  const ts_config *cfg;
  // services: the kernels, their workspace, the sequence group, the
  // strategy's table and its own state (its create's)
  const ts_backend *be;
  ts_ws *ws;
  ts_comm *seq;
  const struct ts_cp *cp;
  void *state;
  // this call: layer l at optimizer step `step`, dropout probability p, and
  // the attention shape of the rank's query rows against the whole
  // sequence's keys (B sequences, Tq = Tl at q0 = t0, Tk = T)
  int l;
  uint64_t step;
  float p;
  ts_attn_shape shape;
  // the input: the norm output, (ntok, C); the layer's projections
  const float *x;
  const float *wq, *bq, *wk, *bk, *wv, *bv;
  // kept for the backward (rows from `sizes`): Q (q_rows, C), K and V
  // (kv_rows, Ckv), the output (ntok, C) and lse (q_rows × H)
  float *q, *k, *v, *att, *lse;
  // backward: datt (ntok, C) in; dq (ntok, C), dk and dv (dkv_rows, Ckv)
  // out. dK and dV are one buffer: dv = dk + dkv_stride floats (a strategy
  // may move both in one collective).
  float *datt, *dq, *dk, *dv;
  size_t dkv_stride;
  // scratch: dsum (q_rows × H), tmp and tmp2 (ntok, C) each, and the
  // strategy's own (`sizes`' scratch floats; NULL when it asked for none)
  float *dsum, *tmp, *tmp2, *scratch;
  // backward of a strategy that forms the projections' backward itself
  // (`forms_dx`): the gradient of x (ntok, C) out, and the layer's Q, K, V
  // weight and bias gradients (biases NULL for LLaMA) out, each formed with
  // the serial kernels on the rank's rows. Unused by the others. dx is the
  // buffer tmp points to (so such a strategy takes no scratch from tmp).
  float *dx;
  float *dwq, *dbq, *dwk, *dbk, *dwv, *dbv;
} ts_attn_io;

// A layer's tensors (parameters, or their gradients). LLaMA: ln1w, ln2w are
// the RMSNorm weights, w1 the gate, w3 the up projection; its biases (and
// ln*b) are NULL. GPT: w3 is NULL.
typedef struct {
  float *ln1w, *ln1b, *wq, *bq, *wk, *bk, *wv, *bv, *wo, *bo;
  float *ln2w, *ln2b, *w1, *b1, *w3, *w2, *b2;
} ts_layer_tensors;

// What a strategy that runs whole layers (a tensor split) sees of the model
// at the layer seam: the attention io of layer l (geometry, services, state,
// the call; attn.tmp and tmp2 are (ntok, C) scratch), and the layer's own:
// its input and output rows, the residual gradient, the norm output's
// buffer, its tensors, the norm statistics and mid-layer residual it keeps,
// and the dropout index of its first row (index.h).
typedef struct {
  ts_attn_io attn;
  const float *x; // the layer's input rows (ntok, C)
  float *y;       // its output rows (ntok, C)
  float *dres;    // backward: d(output) in, d(input) out (ntok, C)
  float *ln_out;  // the norm output's buffer (ntok, C)
  const ts_layer_tensors *w;
  ts_layer_tensors *g;
  float *ln1_mean, *ln1_rstd, *res_mid, *ln2_mean, *ln2_rstd;
  uint64_t row_base;
} ts_layer_io;

typedef struct ts_cp {
  const char *name;    // the --sp-mode name
  const char *summary; // one line for --help and docs
  int exact;           // 1: exact tier (bit for bit equal to serial); 0: tolerance tier
  int host_only;       // 1: not built for --device cuda (refused with one line)
  int run_partials;    // 1: its ranks hold two runs, whose gradient partials the model keeps
                       // apart (the gradient plan: src/model/run_partials.c)
  int forms_dx;        // 1: attn_backward also forms dX and the Q, K, V projections' weight
                       // gradients (io->dx, io->dwq...: it needs them stage by stage); io->dq,
                       // dk, dv are then its scratch, and the model's projection backward is
                       // skipped. 0: it returns dQ, dK, dV and the model forms them.
  // Its layout rules for a group of lay->sp > 1 ranks, each refusal one line
  // naming the flag (TS_EUSAGE); resolves the strategy's defaults in *lay.
  // NULL: only the common rules of ts_layout_check.
  int (*check)(const ts_config *cfg, ts_layout *lay);
  // The runs rank r of n holds of a sequence of T positions. NULL: one run,
  // [r·T/n, (r+1)·T/n).
  void (*positions)(int n, int r, int T, ts_cp_runs *out);
  // Its rows of the model's buffers (io: the geometry, nothing allocated).
  void (*sizes)(const ts_attn_io *io, ts_cp_sizes *out);
  // Its own state (*state; io->state in every later call) after the model's
  // buffers exist; its bytes for the memory report; free. Each NULL: none.
  int (*create)(const ts_attn_io *io, const ts_seq_shard *sp, void **state);
  size_t (*bytes)(const ts_attn_io *io);
  void (*destroy)(const ts_attn_io *io);
  // The seam above, for layer io->l.
  int (*attn_forward)(const ts_attn_io *io);
  int (*attn_backward)(const ts_attn_io *io);
  // A strategy that runs whole layers (a tensor split): io->x -> io->y, and
  // back (io->dres in and out, the layer's gradients into io->g). NULL: the
  // model's layer around attn_forward / attn_backward.
  int (*layer_forward)(const ts_layer_io *io);
  int (*layer_backward)(const ts_layer_io *io);
  // A tensor split: whether this rank holds only a block of the canonical
  // tensor t (1, the block in *out) or all of it (0), from the model's
  // geometry and its sequence group alone (called before anything is
  // allocated). The model allocates, initialises and updates the block alone,
  // with its gradient and moments. NULL: every tensor whole on every rank.
  int (*split)(const ts_attn_io *io, const ts_tensor *t, ts_cp_block *out);
  // Its collectives of one layer's forward (into fwd) and backward (bwd) on
  // the rank io->seq->rank of io->seq->size (io: the geometry only, as for
  // `sizes`; io->seq has no operations; sp: the settings create would
  // read), calls and bytes by kind, counted as
  // the communicator counts them (comm.h ts_comm_tally, ts_comm_gather_bytes,
  // ts_comm_tree_bytes). A checkpointed layer repeats its forward. `tessera
  // plan` reports them and tests/plan.sh holds them equal to a run's
  // counters. NULL: not stated (the plan says so).
  void (*traffic)(const ts_attn_io *io, const ts_seq_shard *sp, ts_comm_count *fwd,
                  ts_comm_count *bwd);
  // Its calls' memory (ts_cp_incall above) on rank io->seq->rank, from the
  // geometry and the settings alone, as for `traffic`: the same sizes its
  // forward and backward allocate, in the same order. NULL: none (the
  // strategy keeps everything in the model's buffers and moves no packed
  // blocks).
  void (*incall)(const ts_attn_io *io, const ts_seq_shard *sp, ts_cp_incall *out);
  // Appends the strategy's own settings to a layout's name ("-u4-gqa"). NULL: none.
  void (*describe)(const ts_layout *lay, char *buf, size_t cap);
  // The flags of settings only it reads, space-separated ("--ulysses-degree"):
  // ts_layout_check refuses them with any other strategy. NULL: none.
  const char *own_flags;
  // Its own options (a struct of its file's): variants of one strategy share
  // its functions and differ here, never by the table's address. NULL: none.
  const void *opts;
} ts_cp;

// The strategy of a --sp-mode; the serial model runs ts_cp_local.
const ts_cp *ts_cp_get(ts_sp_mode mode);
extern const ts_cp ts_cp_local;
// The runs rank r of n holds under cp (its `positions`, or one segment):
// the one place the model, the strategies and the gradient sums take them from.
void ts_cp_positions(const ts_cp *cp, int n, int r, int T, ts_cp_runs *out);
// RoPE (backward: its inverse) on `rows` rows of nh heads of dh, row stride
// ld, run by run at the runs' positions (one run: the rows are B sequences
// of runs->len from runs->pos[0]); nothing when rope is NULL (GPT).
void ts_rope_runs(const ts_backend *be, const ts_cp_runs *runs, int64_t rows, int dh,
                  const float *rope, float *x, int nh, int ld, int backward);
#endif
