// The context-parallel strategy interface: how the N ranks of a sequence
// group share one sequence. One table of operations per strategy, like the
// communicator (comm.h) and backend (backend.h) tables; the model calls a
// strategy at one seam, the attention core of a layer (or the whole layer,
// for a tensor-split strategy), and never asks which strategy it runs.
//
// The seam. A layer's attention branch is
//     a = norm1(x) · [strategy: Q, K, V projections and attention] · Wo
// The model computes the norm into m->ln_out (the rank's rows) and the
// output projection; the strategy turns m->ln_out into the layer's attention
// output a->att (the rank's rows, all heads), keeping what its backward needs
// in the layer's q, k, v, lse buffers (sized by `sizes`). Its backward turns
// m->datt (the gradient of that output, the rank's rows) into m->dq, m->dk,
// m->dv: the gradients of the rank's rows of Q, K and V with the rotations
// (RoPE) still applied; the model then undoes the rotations and forms the
// projections' weight gradients and dX exactly as the serial model does.
// So every strategy's results enter the serial code at the same point, and
// whatever the strategy moves, it moves rows or heads, not partial sums,
// wherever it is in the exact tier.
//
// Gradients. Every strategy leaves each rank with the replicated parameters
// and its own partial gradients of them (its rows' share), so one
// synchronisation serves them all (shard.h): the canonical-tree all-reduce
// over the sequence group of every replicated gradient, then the data
// group's. Two kinds of tensor are not replicated and stay out of the
// sequence group's sum: the positional embedding, whose rows each rank owns
// at the positions its `positions` gives it, and under a tensor split
// (`split`) the blocks of the split tensors each rank holds alone, whose
// gradients are complete on their holder.
//
// Adding a strategy: one file in src/parallel/ defining a `const ts_cp`, and
// one line in src/parallel/strategies.def (docs/ARCHITECTURE.md).
#ifndef TS_STRATEGY_H
#define TS_STRATEGY_H
#include <stddef.h>
#include <stdint.h>

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
  size_t scratch;     // floats of the strategy's own scratch in the model (m->spbuf)
} ts_cp_sizes;

// The block of a tensor a rank holds under a tensor split: rows [r0, r0 +
// nr) and columns [c0, c0 + nc) of the tensor as a row-major (rows, cols)
// matrix (a vector: one row of its length). The rank keeps the block
// row-major and contiguous, (nr, nc): a column block of a matrix is nr
// strided runs of the canonical vector, a row block one run.
typedef struct {
  int64_t r0, nr, c0, nc;
} ts_cp_block;

typedef struct ts_cp {
  const char *name;    // the --sp-mode name
  const char *summary; // one line for --help and docs
  int exact;           // 1: exact tier (bit for bit equal to serial); 0: tolerance tier
  int host_only;       // 1: not built for --device cuda (refused with one line)
  int run_partials;    // 1: a rank keeps its second run's gradient partials (run_partials.c)
  // Its layout rules for a group of lay->sp > 1 ranks, each refusal one line
  // naming the flag (TS_EUSAGE); resolves the strategy's defaults in *lay.
  // NULL: only the common rules of ts_layout_check.
  int (*check)(const ts_config *cfg, ts_layout *lay);
  // The runs rank r of n holds of a sequence of T positions. NULL: one run,
  // [r·T/n, (r+1)·T/n).
  void (*positions)(int n, int r, int T, ts_cp_runs *out);
  // Its rows of the model's buffers (m: geometry set, nothing allocated).
  void (*sizes)(const ts_model *m, ts_cp_sizes *out);
  // Its own state (m->cp_state) after the model's buffers exist; its bytes
  // for the memory report; free. Each NULL: none.
  int (*create)(ts_model *m, const ts_seq_shard *sp);
  size_t (*bytes)(const ts_model *m);
  void (*destroy)(ts_model *m);
  // The seam above, for layer l; p is the dropout probability.
  int (*attn_forward)(ts_model *m, int l, uint64_t step, float p);
  int (*attn_backward)(ts_model *m, int l, uint64_t step);
  // A strategy that runs whole layers (a tensor split): res[l] -> res[l + 1],
  // and back (m->dres in and out, the layer's gradients). NULL: the model's
  // layer around attn_forward / attn_backward.
  int (*layer_forward)(ts_model *m, int l, uint64_t step, float p);
  int (*layer_backward)(ts_model *m, int l, uint64_t step);
  // A tensor split: whether this rank holds only a block of the canonical
  // tensor t (1, the block in *out) or all of it (0), from the model's
  // geometry and its sequence group alone (called before anything is
  // allocated). The model allocates, initialises and updates the block alone,
  // with its gradient and moments. NULL: every tensor whole on every rank.
  int (*split)(const ts_model *m, const ts_tensor *t, ts_cp_block *out);
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
#endif
