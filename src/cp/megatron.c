// The Megatron-style sequence-parallel baseline (docs/ALGORITHMS.md §3; Korthikanti
// et al. 2022): a tensor-parallel layer whose norms, dropout and residuals run
// on the rank's sequence segment. Rank s of the N-rank group holds heads
// [s·H/N, (s+1)·H/N) and MLP columns [s·F/N, (s+1)·F/N) of every layer:
//   forward   all-gather ln1(x) · Q/K/V and attention of its heads on the
//             whole sequence · partial output projection, reduce-scattered ·
//             all-gather ln2 · its W1 columns, GeLU · partial W2, reduce-scattered
//   backward  the mirror image: 4 all-gathers and 4 reduce-scatters.
// 8 collectives per layer. The partial projections are summed across ranks,
// so the result is not the serial bits: this mode is in the tolerance tier.
// The LSS paper's baseline, megatron-2022 (megatron_2022.c), is this layer
// with the options of ts_megatron_opts (cp.h): its own attention core and
// full recomputation (one slot of kept activations; the backward replays the
// forward into it first).
//
// A rank owns its slices (strategy.h `split`): it allocates, initialises, updates
// and checkpoints only the blocks of the split tensors its heads and columns
// use, with their gradients and AdamW moments, each block kept contiguous:
//   Q, K, V weights (C, C)   rows [h0·dh, h0·dh + Kl)   one run   (Kl, C)
//   Q, K, V biases (C)       the same entries           one run   (Kl)
//   output projection (C, C) columns of its heads       C runs    (C, Kl)
//   W1 (F, C), b1 (F)        rows, entries [f0, f0+Fl)  one run   (Fl, C), (Fl)
//   W2 (C, F)                columns [f0, f0 + Fl)      C runs    (C, Fl)
// The rest (embeddings, norms, the biases of the output projection and W2,
// the head) is replicated. A block's gradient is complete on its rank, so the
// trainer's sequence-group all-reduce covers the replicated gradients alone
// (the norms' partial sums); the owners' folds (owners.h) take the blocks in
// canonical order, so the gradient norm, the parameter hash and the
// checkpoint are the serial layout's, and a checkpoint resumes under any
// layout. Not with --zero (the blocks are shards already) nor Muon, which
// orthogonalises whole matrices.
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "backend/mem.h"
#include "cp.h"
#include "exact/rng.h"

struct megatron {
  const ts_megatron_opts *o; // plain megatron's, or a variant's (megatron_2022.c)
  int N, s;              // group size, this rank
  int slots;             // layers whose activations are kept: L, or 1 (o->recompute)
  int Hl, h0, Kl;        // local heads, first head, Kl = Hl·dh columns of Q/K/V
  int Fl;                // local MLP columns
  // kept for backward, per layer (o->recompute: one slot, the layer being run)
  float **X, **X2;       // (T, C) gathered ln1 and ln2 outputs
  float **q, **k, **v;   // (T, Kl) this rank's heads
  float **att;           // (T, Kl)
  float **lse;           // (Hl, T)
  float **fch;           // (T, Fl) pre-GeLU
  // scratch
  float *full;           // (T, C) partial sums before a reduce-scatter, gathered gradients
  float *gelu, *dfch;    // (T, Fl)
  float *dq, *dk, *dv, *datt; // (T, Kl)
  float *dsum;           // (Hl, T)
  float *probs;          // o->attn_forward's kept probabilities, from the replay to the backward
  float *mem;
  size_t nfloats;
};

const ts_megatron_opts ts_megatron_plain = {0};

static void free_state(const ts_backend *be, struct megatron *mt);

// The floats of a rank's state (create's one allocation), from the geometry:
// per kept layer (all of them; one under full recomputation) the gathered ln1
// and ln2 outputs (T, C), its heads' Q, K, V and output (T, Kl), their lse
// and its MLP columns' pre-activation; then the scratch.
static size_t state_floats(const ts_attn_io *io) {
  const ts_megatron_opts *o = io->cp->opts;
  const size_t N = (size_t)io->seq->size, T = (size_t)io->T, C = (size_t)io->C;
  const size_t Kl = (size_t)(io->H / N) * io->dh, Fl = (size_t)io->F / N, HT = (io->H / N) * T;
  const size_t per_layer = 2 * T * C + 4 * T * Kl + HT + T * Fl, slots = o->recompute ? 1 : (size_t)io->L;
  return slots * per_layer + T * C + 2 * T * Fl + 4 * T * Kl + HT;
}

int ts_megatron_create(const ts_attn_io *io, const ts_seq_shard *sp, void **state) {
  (void)sp;
  struct megatron *mt = calloc(1, sizeof *mt);
  if (!mt) return ts_fail(TS_ERUNTIME, "out of memory");
  mt->N = io->seq->size;
  mt->s = io->seq->rank;
  mt->Hl = io->H / mt->N;
  mt->h0 = mt->s * mt->Hl;
  mt->Kl = mt->Hl * io->dh;
  mt->Fl = io->F / mt->N;
  mt->o = io->cp->opts;
  mt->slots = mt->o->recompute ? 1 : io->L;
  const size_t T = (size_t)io->T, C = (size_t)io->C, L = (size_t)mt->slots;
  const size_t Kl = (size_t)mt->Kl, Fl = (size_t)mt->Fl, HT = (size_t)mt->Hl * T;
  mt->nfloats = state_floats(io);
  float ***lists[] = {&mt->X, &mt->X2, &mt->q, &mt->k, &mt->v, &mt->att, &mt->lse, &mt->fch};
  for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++)
    if (!(*lists[i] = calloc(L, sizeof(float *)))) { free_state(io->be, mt); return ts_fail(TS_ERUNTIME, "out of memory"); }
  mt->mem = io->be->alloc(mt->nfloats * sizeof(float));
  if (!mt->mem) {
    free_state(io->be, mt);
    return ts_fail(TS_ERUNTIME, "out of memory allocating %.1f MB of tensor-split activations",
                   (double)mt->nfloats * 4.0 / 1e6);
  }
  *state = mt;
  float *a = mt->mem;
#define TAKE(PTR, COUNT) do { PTR = a; a += (COUNT); } while (0)
  for (size_t l = 0; l < L; l++) {
    TAKE(mt->X[l], T * C); TAKE(mt->X2[l], T * C);
    TAKE(mt->q[l], T * Kl); TAKE(mt->k[l], T * Kl); TAKE(mt->v[l], T * Kl); TAKE(mt->att[l], T * Kl);
    TAKE(mt->lse[l], HT); TAKE(mt->fch[l], T * Fl);
  }
  TAKE(mt->full, T * C); TAKE(mt->gelu, T * Fl); TAKE(mt->dfch, T * Fl);
  TAKE(mt->dq, T * Kl); TAKE(mt->dk, T * Kl); TAKE(mt->dv, T * Kl); TAKE(mt->datt, T * Kl);
  TAKE(mt->dsum, HT);
#undef TAKE
  return TS_OK;
}

static void free_state(const ts_backend *be, struct megatron *mt) {
  if (!mt) return;
  be->free(mt->mem);
  ts_mem_free(mt->probs);
  free(mt->X); free(mt->X2); free(mt->q); free(mt->k); free(mt->v); free(mt->att);
  free(mt->lse); free(mt->fch);
  free(mt);
}

void ts_megatron_destroy(const ts_attn_io *io) { free_state(io->be, io->state); }

size_t ts_megatron_bytes(const ts_attn_io *io) { return state_floats(io) * sizeof(float); }

// The sequence group's packing (strategy.h `incall`): the reduce-scatters
// of the whole sequence's (T, C); the attention's own buffers are the
// variant's (megatron-2022 adds its T x T ones).
void ts_megatron_incall(const ts_attn_io *io, const ts_seq_shard *sp, ts_cp_incall *out) {
  (void)sp;
  *out = (ts_cp_incall){.pack = ts_comm_pack_tree((size_t)io->T * io->C, io->seq->size)};
}

// What a layer's forward and backward move (strategy.h `traffic`): each
// norm output's all-gather of the rank's rows and each partial projection's
// reduce-scatter of the whole sequence's (T, C), forward and (mirrored)
// backward; under full recomputation the backward replays the forward's too.
void ts_megatron_traffic(const ts_attn_io *io, const ts_seq_shard *sp, ts_comm_count *fwd,
                         ts_comm_count *bwd) {
  const ts_megatron_opts *o = io->cp->opts;
  const int N = io->seq->size, r = io->seq->rank;
  const size_t own = (size_t)io->Tl * io->C, whole = (size_t)io->T * io->C;
  for (int k = 0; k < (o->recompute ? 6 : 4); k++) {
    ts_comm_count *at = k < 2 ? fwd : bwd;
    ts_comm_tally(at, TS_COMM_ALLGATHER, ts_comm_gather_bytes(own * sizeof(float), N));
    ts_comm_tally(at, TS_COMM_REDUCE_SCATTER, ts_comm_tree_bytes(whole, N, r));
  }
}

// ---- helpers ---------------------------------------------------------------------------
// The products go through the backend's matmul: out (M, N; ldc) = op(A) · op(B)
// + beta·out, op(A) (M, K) being A (M, K) or, with transA, A (K, M)ᵀ; the CPU
// takes them in blocks of 64 rows of out (docs/EXACTNESS.md R1). The bias
// gradients are its column_sum onto zeroed slices: 0 + the rows in order.
static ts_attn_shape heads_shape(const ts_attn_io *at) {
  const struct megatron *mt = at->state;
  ts_attn_shape as = {.B = 1, .T = at->T, .H = mt->Hl, .dh = at->dh, .tile = at->cfg->tile,
                      .dropout = at->p, .seed = at->cfg->seed, .step = at->step,
                      .index_base = at->shape.index_base, .h0 = mt->h0, .Hg = at->H,
                      .Hkv = mt->Hl}; // GPT: as many key/value heads as heads
  return as;
}

// own (Tl, C) = this rank's rows of the group's sum of `full` (T, C) + bias.
static int reduce_scatter_rows(const ts_attn_io *at, float *own, const float *bias) {
  struct megatron *mt = at->state;
  const size_t C = (size_t)at->C, n = (size_t)at->T * C;
  int rc = ts_comm_reduce_scatter_tree(at->seq, mt->full, n, at->l);
  if (rc) return rc;
  at->be->add_rows(own, (int)C, mt->full + (size_t)at->t0 * C, (int)C, bias, 0, at->Tl, (int)C);
  return TS_OK;
}

// The slot of layer l's kept activations.
static int slot(const struct megatron *mt, int l) { return mt->o->recompute ? 0 : l; }

// The attention of this rank's heads on the gathered sequence, slot s: the
// backend's tiled kernel, or the variant's own (probs: megatron_2022.c).
static int heads_attention_forward(const ts_attn_io *at, int s, float **probs) {
  struct megatron *mt = at->state;
  ts_attn_shape as = heads_shape(at);
  if (mt->o->attn_forward)
    return mt->o->attn_forward(at, &as, mt->att[s], mt->q[s], mt->k[s], mt->v[s], probs);
  at->be->attention_forward(at->ws, mt->att[s], mt->lse[s], mt->q[s], mt->k[s], mt->v[s], &as);
  return TS_OK;
}

// Nonzero when out of memory (reported once the backward's collectives are done).
static int heads_attention_backward(const ts_attn_io *at, int s) {
  struct megatron *mt = at->state;
  ts_attn_shape as = heads_shape(at);
  if (mt->o->attn_backward) {
    float *probs = mt->probs;
    mt->probs = NULL; // the variant's backward frees them
    return mt->o->attn_backward(at, &as, mt->dq, mt->dk, mt->dv, mt->datt, mt->q[s], mt->k[s],
                                mt->v[s], probs);
  }
  return at->be->attention_backward(at->ws, mt->dq, mt->dk, mt->dv, mt->dsum, mt->datt, mt->q[s],
                                    mt->k[s], mt->v[s], mt->att[s], mt->lse[s], &as);
}

// ---- forward -----------------------------------------------------------------------
// io->x -> y (io->y; a replay in the backward writes scratch), keeping the
// activations in layer l's slot; probs: where the variant's attention leaves
// the probabilities it keeps (a replay), NULL in the forward.
static int layer_forward_into(const ts_layer_io *io, float *y, float **probs) {
  const ts_attn_io *at = &io->attn;
  const uint64_t step = at->step;
  const float p = at->p;
  struct megatron *mt = at->state;
  const int l = slot(mt, at->l);
  const int T = at->T, C = at->C, Tl = at->Tl, dh = at->dh, rows = at->cfg->leaf;
  const int Kl = mt->Kl, Fl = mt->Fl;
  const size_t own = (size_t)Tl * C;
  const uint64_t seed = at->cfg->seed;
  const ts_layer_tensors *w = io->w;
  const float *x = io->x;
  const int tag = at->l; // the layer the collectives are counted under
  int rc;
  // attention: gather ln1(x), this rank's heads on the whole sequence
  at->be->layernorm_forward(io->ln_out, io->ln1_mean, io->ln1_rstd, x, w->ln1w, w->ln1b, Tl, C);
  if ((rc = ts_comm_allgather(at->seq, io->ln_out, mt->X[l], own * sizeof(float), tag))) return rc;
  at->be->linear_forward_heads(mt->q[l], mt->X[l], w->wq, w->bq, T, C, Kl, dh, rows);
  at->be->linear_forward_heads(mt->k[l], mt->X[l], w->wk, w->bk, T, C, Kl, dh, rows);
  at->be->linear_forward_heads(mt->v[l], mt->X[l], w->wv, w->bv, T, C, Kl, dh, rows);
  if ((rc = heads_attention_forward(at, l, probs))) return rc;
  // partial output projection over this rank's heads: att (T, Kl) · Wo[:, heads]ᵀ
  at->be->matmul(0, 1, T, C, Kl, mt->att[l], Kl, w->wo, Kl, 0.0f, mt->full, C);
  if ((rc = reduce_scatter_rows(at, io->res_mid, w->bo))) return rc;
  at->be->dropout_apply(io->res_mid, (int64_t)own, p, seed, TS_RNG_DROPOUT_PROJ, step, io->row_base);
  at->be->add(io->res_mid, x, io->res_mid, (int64_t)own);
  // MLP: gather ln2, this rank's columns of W1, partial W2
  at->be->layernorm_forward(io->ln_out, io->ln2_mean, io->ln2_rstd, io->res_mid, w->ln2w, w->ln2b, Tl, C);
  if ((rc = ts_comm_allgather(at->seq, io->ln_out, mt->X2[l], own * sizeof(float), tag))) return rc;
  at->be->linear_forward(mt->fch[l], mt->X2[l], w->w1, w->b1, T, C, Fl, rows);
  at->be->gelu_forward(mt->gelu, mt->fch[l], (int64_t)T * Fl);
  at->be->matmul(0, 1, T, C, Fl, mt->gelu, Fl, w->w2, Fl, 0.0f, mt->full, C);
  if ((rc = reduce_scatter_rows(at, y, w->b2))) return rc;
  at->be->dropout_apply(y, (int64_t)own, p, seed, TS_RNG_DROPOUT_MLP, step, io->row_base);
  at->be->add(y, io->res_mid, y, (int64_t)own);
  return TS_OK;
}

int ts_megatron_layer_forward(const ts_layer_io *io) {
  return layer_forward_into(io, io->y, NULL);
}

// ---- backward ----------------------------------------------------------------------
int ts_megatron_layer_backward(const ts_layer_io *io) {
  const ts_attn_io *at = &io->attn;
  const uint64_t step = at->step;
  struct megatron *mt = at->state;
  const int l = slot(mt, at->l), tag = at->l;
  const int T = at->T, C = at->C, Tl = at->Tl;
  const int Kl = mt->Kl, Fl = mt->Fl;
  const size_t own = (size_t)Tl * C;
  const float p = at->p;
  const uint64_t seed = at->cfg->seed;
  const ts_layer_tensors *w = io->w, *g = io->g;
  ts_ws *ws = at->ws;
  int rc, trc = 0;
  // full recomputation: the layer's forward again from its input (its output to scratch)
  if (mt->o->recompute && (rc = layer_forward_into(io, at->tmp2, &mt->probs))) return rc;
  // the bias gradients are sums onto zeros (the weights' products overwrite)
  memset(g->bq, 0, (size_t)Kl * sizeof(float)); memset(g->bk, 0, (size_t)Kl * sizeof(float));
  memset(g->bv, 0, (size_t)Kl * sizeof(float)); memset(g->bo, 0, (size_t)C * sizeof(float));
  memset(g->b1, 0, (size_t)Fl * sizeof(float)); memset(g->b2, 0, (size_t)C * sizeof(float));

  // MLP: y = res_mid + dropout(RS(gelu · W2[:, cols]ᵀ) + b2)
  at->be->copy(at->tmp, io->dres, own * sizeof(float));
  at->be->dropout_apply(at->tmp, (int64_t)own, p, seed, TS_RNG_DROPOUT_MLP, step, io->row_base);
  at->be->column_sum(g->b2, at->tmp, Tl, C, 1);
  if ((rc = ts_comm_allgather(at->seq, at->tmp, mt->full, own * sizeof(float), tag))) return rc;
  at->be->gelu_forward(mt->gelu, mt->fch[l], (int64_t)T * Fl); // recomputed
  at->be->matmul(1, 0, C, Fl, T, mt->full, C, mt->gelu, Fl, 0.0f, g->w2, Fl);
  at->be->matmul(0, 0, T, Fl, C, mt->full, C, w->w2, Fl, 0.0f, mt->dfch, Fl);
  at->be->gelu_backward(mt->dfch, mt->fch[l], mt->dfch, (int64_t)T * Fl);
  at->be->matmul(1, 0, Fl, C, T, mt->dfch, Fl, mt->X2[l], C, 0.0f, g->w1, C);
  at->be->column_sum(g->b1, mt->dfch, T, Fl, 1);
  at->be->matmul(0, 0, T, C, Fl, mt->dfch, Fl, w->w1, C, 0.0f, mt->full, C);
  if ((rc = ts_comm_reduce_scatter_tree(at->seq, mt->full, (size_t)T * C, tag))) return rc;
  at->be->copy(at->tmp, mt->full + (size_t)at->t0 * C, own * sizeof(float));
  trc |= at->be->layernorm_backward(ws, at->tmp2, g->ln2w, g->ln2b, at->tmp, io->res_mid, w->ln2w,
                            io->ln2_mean, io->ln2_rstd, Tl, C);
  at->be->add(io->dres, io->dres, at->tmp2, (int64_t)own);

  // attention: res_mid = x + dropout(RS(att · Wo[:, heads]ᵀ) + bo)
  at->be->copy(at->tmp, io->dres, own * sizeof(float));
  at->be->dropout_apply(at->tmp, (int64_t)own, p, seed, TS_RNG_DROPOUT_PROJ, step, io->row_base);
  at->be->column_sum(g->bo, at->tmp, Tl, C, 1);
  if ((rc = ts_comm_allgather(at->seq, at->tmp, mt->full, own * sizeof(float), tag))) return rc;
  at->be->matmul(1, 0, C, Kl, T, mt->full, C, mt->att[l], Kl, 0.0f, g->wo, Kl);
  at->be->matmul(0, 0, T, Kl, C, mt->full, C, w->wo, Kl, 0.0f, mt->datt, Kl);
  trc |= heads_attention_backward(at, l);
  at->be->matmul(1, 0, Kl, C, T, mt->dq, Kl, mt->X[l], C, 0.0f, g->wq, C);
  at->be->matmul(1, 0, Kl, C, T, mt->dk, Kl, mt->X[l], C, 0.0f, g->wk, C);
  at->be->matmul(1, 0, Kl, C, T, mt->dv, Kl, mt->X[l], C, 0.0f, g->wv, C);
  at->be->column_sum(g->bq, mt->dq, T, Kl, 1);
  at->be->column_sum(g->bk, mt->dk, T, Kl, 1);
  at->be->column_sum(g->bv, mt->dv, T, Kl, 1);
  at->be->matmul(0, 0, T, C, Kl, mt->dq, Kl, w->wq, C, 0.0f, mt->full, C);
  at->be->matmul(0, 0, T, C, Kl, mt->dk, Kl, w->wk, C, 1.0f, mt->full, C);
  at->be->matmul(0, 0, T, C, Kl, mt->dv, Kl, w->wv, C, 1.0f, mt->full, C);
  if ((rc = ts_comm_reduce_scatter_tree(at->seq, mt->full, (size_t)T * C, tag))) return rc;
  at->be->copy(at->tmp, mt->full + (size_t)at->t0 * C, own * sizeof(float));
  trc |= at->be->layernorm_backward(ws, at->tmp2, g->ln1w, g->ln1b, at->tmp, io->x, w->ln1w,
                            io->ln1_mean, io->ln1_rstd, Tl, C);
  at->be->add(io->dres, io->dres, at->tmp2, (int64_t)own);
  if (trc) return ts_fail(TS_ERUNTIME, "out of memory in backward (gradient trees)");
  return TS_OK;
}

// ---- the strategy (strategy.h) ------------------------------------------------------------
int ts_megatron_check(const ts_config *cfg, ts_layout *lay) {
  const int N = lay->sp;
  const char *mode = ts_sp_mode_names[lay->sp_mode]; // megatron or a variant
  if (lay->pp > 1)
    return ts_fail(TS_EUSAGE, "--pp %d with --sp-mode %s: the tensor-split baseline "
                   "does not run in pipeline stages", lay->pp, mode);
  if (cfg->checkpoint || cfg->tiled_mlp)
    return ts_fail(TS_EUSAGE, "--%s: not available with --sp-mode %s (its layers keep "
                   "their own buffers)", cfg->checkpoint ? "checkpoint" : "tiled-mlp", mode);
  if (cfg->variant != TS_GPT)
    return ts_fail(TS_EUSAGE, "--sp-mode %s: the baseline is built for the GPT variant "
                              "(use lss, lss-fused or lss-basic with --model %s)",
                   mode, cfg->preset);
  if (lay->zero)
    return ts_fail(TS_EUSAGE, "--zero %d with --sp-mode %s: not built (a tensor-split "
                   "rank holds only its heads' and columns' blocks already)", lay->zero, mode);
  if (cfg->optimizer != TS_OPT_ADAMW)
    return ts_fail(TS_EUSAGE, "--optimizer %s with --sp-mode %s: not built (a rank "
                   "holds blocks of the matrices Muon orthogonalises whole)",
                   cfg->optimizer == TS_OPT_MUON ? "muon" : "muon-pe", mode);
  if (cfg->n_head % N != 0 || cfg->d_ff % N != 0)
    return ts_fail(TS_EUSAGE,
                   "--sp-mode %s with --sp %d: the %d heads and the MLP width %d must "
                   "divide by %d (each rank holds a slice of both)",
                   mode, N, cfg->n_head, cfg->d_ff, N);
  return TS_OK;
}

// The block of a layer's tensor this rank holds (the table in the header),
// or 0: the whole tensor. Named "h.<layer>.<field>" (src/model/params.c).
int ts_megatron_split(const ts_attn_io *io, const ts_tensor *t, ts_cp_block *out) {
  const char *dot = t->role == TS_ROLE_LAYER ? strchr(t->name + 2, '.') : NULL;
  if (!dot) return 0;
  const char *f = dot + 1;
  const int64_t N = io->seq->size, s = io->seq->rank, C = io->C;
  const int64_t Kl = (int64_t)(io->H / N) * io->dh, k0 = s * Kl, Fl = io->F / N, f0 = s * Fl;
  static const char *const rows_of_heads[] = {"attn.wq", "attn.wk", "attn.wv"};
  static const char *const heads[] = {"attn.bq", "attn.bk", "attn.bv"};
  for (int i = 0; i < 3; i++) {
    if (!strcmp(f, rows_of_heads[i])) return *out = (ts_cp_block){k0, Kl, 0, C}, 1;
    if (!strcmp(f, heads[i])) return *out = (ts_cp_block){0, 1, k0, Kl}, 1;
  }
  if (!strcmp(f, "attn.wo")) return *out = (ts_cp_block){0, C, k0, Kl}, 1;
  if (!strcmp(f, "mlp.w1")) return *out = (ts_cp_block){f0, Fl, 0, C}, 1;
  if (!strcmp(f, "mlp.b1")) return *out = (ts_cp_block){0, 1, f0, Fl}, 1;
  if (!strcmp(f, "mlp.w2")) return *out = (ts_cp_block){0, C, f0, Fl}, 1;
  return 0;
}

// The layers keep their own buffers: none of the model's attention or MLP rows.
void ts_megatron_sizes(const ts_attn_io *io, ts_cp_sizes *out) {
  (void)io;
  *out = (ts_cp_sizes){0};
}

const ts_cp ts_cp_megatron = {
    .name = "megatron",
    .summary = "tensor-split heads and MLP, sequence-split norms: 8 collectives per layer",
    .exact = 0,
    .opts = &ts_megatron_plain,
    .check = ts_megatron_check,
    .sizes = ts_megatron_sizes,
    .split = ts_megatron_split,
    .create = ts_megatron_create,
    .bytes = ts_megatron_bytes,
    .traffic = ts_megatron_traffic,
    .incall = ts_megatron_incall,
    .destroy = ts_megatron_destroy,
    .layer_forward = ts_megatron_layer_forward,
    .layer_backward = ts_megatron_layer_backward,
};
