// The model's parameters and buffers: the parameter table (names, shapes,
// initialisation, roles, in the canonical order of docs/MODEL.md), one
// allocation each for parameters, gradients and activations with named
// views, the fit check, initialisation and the accessors of tessera.h.
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "boundary/boundary.h"
#include "comm/comm.h"
#include "cp/strategy.h"
#include "exact/rng.h"
#include "model_impl.h"
#include "run_partials.h"

// ---- parameter table ---------------------------------------------------------------
typedef struct {
  char name[64];
  int ndim;
  int64_t shape[2];
  float std;   // normal init; 0 = constant
  float value; // constant init value
  float **view;  // the model's own view (param_views), or NULL: a codec's, found by role
  float **gview;
  ts_role role;
  int index;
  int layer; // the layer whose stage holds it: −1 the embeddings, L the head
  int codec; // a boundary codec's (it follows its stage's last layer)
  int writes_stream; // ts_tensor's: 1 + the axis of length d of its outputs, 0: none
} pspec;

// Stage s's codec tensors (boundary.h) when layer l ends it: std 0, value 0.
static int boundary_specs(const ts_model *m, int l, pspec *out) {
  const int S = m->cfg.compress_stages;
  if (!m->bd->tensors || S < 1 || (l + 1) % (m->L / S) != 0) return 0;
  ts_tensor t[TS_BOUNDARY_TENSORS];
  const int n = m->bd->tensors(&m->cfg, (l + 1) / (m->L / S) - 1, t);
  for (int k = 0; out && k < n; k++) {
    out[k] = (pspec){.ndim = t[k].ndim, .shape = {t[k].shape[0], t[k].shape[1]},
                     .role = t[k].role, .index = t[k].index, .layer = l, .codec = 1};
    memcpy(out[k].name, t[k].name, sizeof out[k].name);
  }
  return n;
}

static int param_table(ts_model *m, pspec *out) {
  int n = 0, C = m->C, F = m->F, V = m->V;
  float s = 0.02f, sres = 0.02f / sqrtf(2.0f * m->L);
#define ADD(NAME, ND, S0, S1, STD, VAL, FIELD, ROLE, INDEX, LAYER)                      \
  do {                                                                                  \
    if (out) {                                                                          \
      pspec *ps = &out[n];                                                              \
      snprintf(ps->name, sizeof ps->name, "%s", NAME);                                  \
      ps->ndim = ND; ps->shape[0] = S0; ps->shape[1] = S1;                              \
      ps->std = STD; ps->value = VAL; ps->view = &m->p.FIELD; ps->gview = &m->g.FIELD;  \
      ps->role = ROLE; ps->index = INDEX; ps->layer = LAYER; ps->codec = 0;             \
      ps->writes_stream = 0;                                                            \
    }                                                                                   \
    n++;                                                                                \
  } while (0)
  // The entry just added adds to the residual stream, its outputs along
  // axis AXIS (ts_tensor's writes_stream): the embeddings' rows, a layer's
  // output projections (d × in) and their biases. What writes the stream is
  // the model's to say; a codec that confines it (boundary.h) asks this.
#define WRITES(AXIS)                                                                    \
  do {                                                                                  \
    if (out) out[n - 1].writes_stream = 1 + (AXIS);                                     \
  } while (0)
  ADD("wte", 2, V, C, s, 0, wte, TS_ROLE_EMBEDDING, 0, -1);
  WRITES(1);
  char nm[64];
#define LADD(SUFFIX, ND, S0, S1, STD, VAL, FIELD)                                       \
  snprintf(nm, sizeof nm, "h.%d.%s", l, SUFFIX);                                         \
  ADD(nm, ND, S0, S1, STD, VAL, layer[l].FIELD, TS_ROLE_LAYER, l, l)
  // a codec's tensors follow the last layer of their stage, so that a
  // pipeline stage's tensors stay one slice (e.g. MAPL's: stage s's anchor
  // E_s and the projector A_s of its output boundary)
#define BOUNDARY_ADD(l) n += boundary_specs(m, l, out ? out + n : NULL)
  if (m->llama) {
    const int Ckv = m->Ckv;
    for (int l = 0; l < m->L; l++) {
      LADD("rms1.w", 1, C, 0, 0, 1, ln1w);
      LADD("attn.wq", 2, C, C, s, 0, wq);
      LADD("attn.wk", 2, Ckv, C, s, 0, wk);
      LADD("attn.wv", 2, Ckv, C, s, 0, wv);
      LADD("attn.wo", 2, C, C, sres, 0, wo);
      WRITES(0);
      LADD("rms2.w", 1, C, 0, 0, 1, ln2w);
      LADD("mlp.w1", 2, F, C, s, 0, w1);
      LADD("mlp.w3", 2, F, C, s, 0, w3);
      LADD("mlp.w2", 2, C, F, sres, 0, w2);
      WRITES(0);
      BOUNDARY_ADD(l);
    }
    ADD("rmsf.w", 1, C, 0, 0, 1, lnfw, TS_ROLE_FINAL_NORM, 0, m->L);
    if (!m->cfg.tied) ADD("lm_head", 2, V, C, s, 0, lm_head, TS_ROLE_HEAD, 0, m->L);
    return n;
  }
  ADD("wpe", 2, m->T, C, s, 0, wpe, TS_ROLE_POSITIONAL, 0, -1);
  WRITES(1);
  for (int l = 0; l < m->L; l++) {
    LADD("ln1.w", 1, C, 0, 0, 1, ln1w);
    LADD("ln1.b", 1, C, 0, 0, 0, ln1b);
    LADD("attn.wq", 2, C, C, s, 0, wq);
    LADD("attn.bq", 1, C, 0, 0, 0, bq);
    LADD("attn.wk", 2, C, C, s, 0, wk);
    LADD("attn.bk", 1, C, 0, 0, 0, bk);
    LADD("attn.wv", 2, C, C, s, 0, wv);
    LADD("attn.bv", 1, C, 0, 0, 0, bv);
    LADD("attn.wo", 2, C, C, sres, 0, wo);
    WRITES(0);
    LADD("attn.bo", 1, C, 0, 0, 0, bo);
    WRITES(0);
    LADD("ln2.w", 1, C, 0, 0, 1, ln2w);
    LADD("ln2.b", 1, C, 0, 0, 0, ln2b);
    LADD("mlp.w1", 2, F, C, s, 0, w1);
    LADD("mlp.b1", 1, F, 0, 0, 0, b1);
    LADD("mlp.w2", 2, C, F, sres, 0, w2);
    WRITES(0);
    LADD("mlp.b2", 1, C, 0, 0, 0, b2);
    WRITES(0);
    BOUNDARY_ADD(l);
  }
#undef LADD
#undef BOUNDARY_ADD
#undef WRITES
  ADD("lnf.w", 1, C, 0, 0, 1, lnfw, TS_ROLE_FINAL_NORM, 0, m->L);
  ADD("lnf.b", 1, C, 0, 0, 0, lnfb, TS_ROLE_FINAL_NORM, 0, m->L);
  if (!m->cfg.tied) ADD("lm_head", 2, V, C, s, 0, lm_head, TS_ROLE_HEAD, 0, m->L);
#undef ADD
  return n;
}

// ---- creation ----------------------------------------------------------------------
// Leaves the backend's leaf_sum computes at once (of nthreads on the CPU),
// each in its own slot of the leaf-at-a-time options' scratch (backend.h).
static size_t leaf_slots(const ts_model *m, int nthreads) {
  return (size_t)(m->be->leaf_slots ? m->be->leaf_slots : nthreads);
}

// --fused-ce's scratch: a leaf of logits per slot.
size_t ts_model_fused_ce_floats(const ts_model *m, int nthreads) {
  return leaf_slots(m, nthreads) * m->cfg.leaf * m->V;
}

// --tiled-mlp's scratch: a leaf's four (leaf, d_ff) buffers per slot.
size_t ts_model_tiled_mlp_floats(const ts_model *m, int nthreads) {
  return leaf_slots(m, nthreads) * 4 * m->cfg.leaf * m->F;
}

// The CPU attention kernel's per-thread copy of one head's rows, made
// contiguous while a call runs (src/cpu/attention.c, kv_pack): the forward's
// K and V of its keys, 2·Tk·dh floats, the backward's Q and dO of a group of
// G query heads, 2·G·Tq·dh. Counted at its most, with the whole sequence for
// Tk and Tq (a strategy's calls take at most that many rows: LSS and Ulysses
// the forward's keys exactly, ring a block of them); none on a GPU.
size_t ts_model_attn_pack_floats(const ts_model *m, int nthreads) {
  if (strcmp(m->be->name, "cpu") != 0) return 0;
  const size_t G = (size_t)(m->H / m->Hkv), T = (size_t)m->T, dh = (size_t)m->dh;
  return (size_t)nthreads * 2 * T * dh * (G > 1 ? G : 1);
}

// The largest leaf partial a sum of the model takes, which sizes the kernels'
// workspace: its leaf vector and every partial of its tree.
static size_t workspace_leaf_floats(const ts_model *m) {
  const ts_config *cfg = &m->cfg;
  const size_t C = (size_t)m->C, F = (size_t)m->F, V = (size_t)m->V;
  size_t leaf_cap = F * C + F;
  if (cfg->tiled_mlp) // one vector [dW2 | db2 | dW1 | db1 | dW3] per leaf
    leaf_cap = 2 * F * C + F + C + (m->llama ? F * C : 0);
  if (V * C > leaf_cap) leaf_cap = V * C;
  if ((size_t)cfg->leaf * C > leaf_cap) leaf_cap = (size_t)cfg->leaf * C;
  const size_t bd_leaf = m->bd->leaf_floats ? m->bd->leaf_floats(cfg) : 0;
  return bd_leaf > leaf_cap ? bd_leaf : leaf_cap;
}

// The CPU kernels' workspace at its most (ts_ws_bytes): its leaf vector, the
// canonical trees' pool of partials for a sum over the rank's leaves of rows
// (log2 of them, each the largest leaf partial: with --tiled-mlp the MLP's
// whole gradient, so it grows by one such partial at every doubling of T),
// and the attention kernel's per-thread scratch with its tree over the query
// tiles (of the whole sequence at most, as ts_model_attn_pack_floats); none
// on a GPU.
static size_t workspace_bytes(const ts_model *m, int nthreads) {
  if (strcmp(m->be->name, "cpu") != 0) return 0;
  return ts_ws_bytes(nthreads, m->cfg.tile, m->dh, workspace_leaf_floats(m),
                     m->ntok / m->cfg.leaf, (m->T + m->cfg.tile - 1) / m->cfg.tile);
}

size_t ts_model_workspace_bytes(const ts_model *m) { return workspace_bytes(m, m->ws.nthreads); }

// Processes that share this machine's memory (ts_model_set_memory_share).
static int memory_share = 1;

void ts_model_set_memory_share(int processes) { memory_share = processes > 1 ? processes : 1; }

// The ranks the model state is sharded over and the ZeRO stage
// (ts_model_set_state_shards).
static int state_shards = 1, state_zero = 0, data_ranks = 1;

void ts_model_set_state_shards(int shards, int zero, int dp) {
  state_shards = shards > 1 ? shards : 1;
  state_zero = zero;
  data_ranks = dp > 1 ? dp : 1;
}

// Bytes per parameter of the model state a rank holds: values, gradients
// (allocated for evaluation too), the AdamW moments when training, each
// whole or its 1/shards (--zero 1, 2, 3).
double ts_state_bytes_per_param(int training, int shards, int zero) {
  const double S = shards > 1 ? shards : 1;
  return (zero >= 3 ? 4.0 / S : 4.0) + (zero >= 2 ? 4.0 / S : 4.0) +
         (training ? (zero >= 1 ? 8.0 / S : 8.0) : 0.0);
}

int ts_model_create(const ts_config *cfg, ts_model **out) {
  return ts_model_create_seq(cfg, 0, cfg->batch, NULL, out);
}

int ts_model_create_shard(const ts_config *cfg, int b_begin, int b_count, ts_model **out) {
  return ts_model_create_seq(cfg, b_begin, b_count, NULL, out);
}

// ---- creation, step by step ------------------------------------------------------------
// The shard and the strategy's rules, before anything is allocated.
static int check_shard(const ts_config *cfg, int b_begin, int b_count, const ts_seq_shard *sp,
                       int nsp, const ts_cp *cp) {
  if (b_begin < 0 || b_count < 1 || b_begin > cfg->batch - b_count)
    return ts_fail(TS_EUSAGE, "batch shard [%d, %d) outside the batch of %d sequences", b_begin,
                   b_begin + b_count, cfg->batch);
  if (nsp > 1) {
    const int Tl = cfg->seq / nsp;
    if (b_count != 1)
      return ts_fail(TS_EUSAGE, "a sequence-parallel model holds one sequence, not %d", b_count);
    if (cfg->seq % nsp != 0 || Tl % cfg->leaf != 0 || Tl % cfg->tile != 0)
      return ts_fail(TS_EUSAGE, "--seq %d: not %d segments of whole leaves (%d) and tiles (%d)",
                     cfg->seq, nsp, cfg->leaf, cfg->tile);
  }
  if (!cp) return ts_fail(TS_EUSAGE, "--sp-mode: no strategy %d", (int)sp->mode);
  if (nsp > 1 && cp->check) { // the strategy's rules (ts_layout_check applies them too)
    ts_layout lay = {.dp = 1, .sp = nsp, .pp = 1, .sp_mode = sp->mode, .upipe_u = sp->upipe_u,
                     .upipe_sched = sp->upipe_sched, .microbatches = 1,
                     .ulysses_degree = sp->ulysses_degree};
    return cp->check(cfg, &lay);
  }
  return TS_OK;
}

// The model's shape, its shard of the batch and of the sequence (the runs of
// positions its strategy gives it) and its stage.
static void set_geometry(ts_model *m, const ts_config *cfg, int b_begin, int b_count,
                         const ts_seq_shard *sp, int nsp, int l0, int l1) {
  m->cfg = *cfg;
  m->be = ts_backend_current();
  m->B = b_count; m->b0 = b_begin; m->Bg = cfg->batch;
  m->T = cfg->seq; m->C = cfg->d; m->L = cfg->n_layer;
  m->H = cfg->n_head; m->dh = cfg->d / cfg->n_head; m->F = cfg->d_ff; m->V = cfg->vocab;
  m->llama = cfg->variant == TS_LLAMA;
  m->Hkv = cfg->n_kv_head > 0 ? cfg->n_kv_head : cfg->n_head;
  m->Ckv = m->Hkv * m->dh;
  m->Tl = m->T / nsp;
  m->t0 = nsp > 1 ? sp->comm->rank * m->Tl : 0;
  m->seq = nsp > 1 ? sp->comm : NULL;
  m->ntok = (int64_t)m->B * m->Tl;
  m->l0 = l0;
  m->l1 = l1;
  ts_cp_positions(m->cp, nsp, m->seq ? m->seq->rank : 0, m->T, &m->runs);
  m->ntok_global = (int64_t)m->Bg * m->T;
}

// Whether this model holds a tensor of the table, and how: a stage owns its
// layers' tensors, the first the embeddings, the last the final norm and the
// head; a tied embedding is the last stage's (it sums the embedding's
// gradient with the head's), the first holding a copy; a codec's tensors
// follow their stage's last layer, and the next stage holds copies of those
// it reads (all but the anchors, which are each stage's own, and mapl-vq's
// gradient codebooks, which the stage before reads: boundary.h).
// Under sequence parallelism the positional table is owned by rows: each
// rank holds the rows of its positions alone (its runs: docs/ALGORITHMS.md
// §2), one piece per run, after the other owned tensors. Under a tensor
// split (strategy.h `split`) a rank holds a block of each split tensor, after the
// whole tensors and before the positional rows: the replicated tensors stay
// one run for the sequence group's gradient sum (shard.c).
enum { HELD_NONE = 0, HELD_OWNED, HELD_SLICE, HELD_ROWS, HELD_COPY };

static int holding(const ts_model *m, const pspec *ps) {
  const int first = m->l0 == 0, last = m->l1 == m->L;
  if (ps->role == TS_ROLE_EMBEDDING && m->cfg.tied)
    return last ? HELD_OWNED : first ? HELD_COPY : HELD_NONE;
  if (ps->layer >= m->l0 && ps->layer < m->l1) return HELD_OWNED;
  if (ps->role == TS_ROLE_POSITIONAL && m->seq) return first ? HELD_ROWS : HELD_NONE;
  if (ps->layer < 0) return first ? HELD_OWNED : HELD_NONE;
  if (ps->layer >= m->L) return last ? HELD_OWNED : HELD_NONE;
  if (ps->codec && ts_boundary_read_upstream(ps->role))
    return m->l1 < m->L && ps->index == ts_boundary_at(&m->cfg, m->l1) ? HELD_COPY : HELD_NONE;
  if (ps->codec && ps->role != TS_ROLE_ANCHOR && ps->layer + 1 == m->l0) return HELD_COPY;
  return HELD_NONE;
}

static size_t spec_numel(const pspec *ps) {
  return (size_t)ps->shape[0] * (ps->ndim == 2 ? (size_t)ps->shape[1] : 1);
}

// The block this rank holds of canonical tensor i under a tensor split (1),
// or 0: the whole tensor. Only an owned tensor of a sequence group's model.
static int split_block(const ts_model *m, int i, ts_cp_block *b) {
  if (!m->seq || !m->cp->split) return 0;
  ts_attn_io io;
  ts_attn_io_geometry(m, &io);
  return m->cp->split(&io, &m->all[i], b);
}

// A block's pieces: one when it spans whole rows (one canonical run), else
// one per row.
static int block_pieces(const ts_tensor *t, const ts_cp_block *b) {
  const int64_t cols = t->ndim == 2 ? t->shape[1] : t->shape[0];
  return b->nc == cols ? 1 : (int)b->nr;
}

// The parameter table into *spec (nall entries), the canonical table m->all,
// what this model holds of it (m->ntens, m->nown, m->nparams, m->ncopy), and
// the small per-tensor arrays; no parameter memory yet.
static int make_table(ts_model *m, pspec **spec, unsigned char **held) {
  m->p.layer = calloc((size_t)m->L, sizeof(layer_params));
  m->g.layer = calloc((size_t)m->L, sizeof(layer_params));
  m->la = calloc((size_t)m->L, sizeof(layer_acts));
  m->res = calloc((size_t)m->L + 1, sizeof(float *));
  const int n = m->nall = param_table(m, NULL);
  *spec = calloc((size_t)n, sizeof(pspec));
  *held = calloc((size_t)n, 1);
  m->all = calloc((size_t)n, sizeof(ts_tensor));
  if (!m->p.layer || !m->g.layer || !m->la || !m->res || !*spec || !*held || !m->all)
    return ts_fail(TS_ERUNTIME, "out of memory");
  param_table(m, *spec);
  size_t at = 0;
  for (int i = 0; i < n; i++) {
    const pspec *ps = &(*spec)[i];
    ts_tensor *t = &m->all[i];
    snprintf(t->name, sizeof t->name, "%s", ps->name);
    t->ndim = ps->ndim;
    t->shape[0] = ps->shape[0];
    t->shape[1] = ps->shape[1];
    t->role = ps->role;
    t->index = ps->index;
    t->writes_stream = ps->writes_stream;
    t->at = (int64_t)at;
    at += spec_numel(ps);
    (*held)[i] = (unsigned char)holding(m, ps);
    ts_cp_block b;
    if ((*held)[i] == HELD_OWNED && split_block(m, i, &b)) {
      const int pieces = block_pieces(t, &b);
      (*held)[i] = HELD_SLICE;
      m->nown += pieces, m->ntens += pieces;
      m->nparams += (size_t)(b.nr * b.nc);
      m->nsplit += (size_t)(b.nr * b.nc);
    }
    if ((*held)[i] == HELD_OWNED) m->nown++, m->ntens++, m->nparams += spec_numel(ps);
    if ((*held)[i] == HELD_COPY) m->ntens++, m->ncopy += spec_numel(ps);
    if ((*held)[i] == HELD_ROWS) {
      m->nown += m->runs.n, m->ntens += m->runs.n;
      m->nparams += (size_t)m->runs.n * m->runs.len * (size_t)ps->shape[1];
      m->wpe_rows = 1;
    }
  }
  m->nall_params = at;
  // the held tensors' views and their keys, one entry per piece
  const size_t nh = (size_t)m->ntens + 1;
  m->ptens = calloc(nh, sizeof(ts_tensor));
  m->gtens = calloc(nh, sizeof(ts_tensor));
  m->key = calloc(nh, sizeof(int));
  m->elem0 = calloc(nh, sizeof(size_t));
  m->stds = calloc(nh, sizeof(float));
  m->consts = calloc(nh, sizeof(float));
  if (!m->ptens || !m->gtens || !m->key || !m->elem0 || !m->stds || !m->consts)
    return ts_fail(TS_ERUNTIME, "out of memory");
  return TS_OK;
}

// Parameters and gradients: one allocation each, the owned tensors first
// (the whole ones, then the blocks of a tensor split, then a positional
// table by rows), then the copies (parameters only); the table's views into
// them. A piece's view is its part of the canonical tensor: `at` its first
// canonical element, elem0 that element's index within the tensor.
static int alloc_params(ts_model *m, const pspec *spec, const unsigned char *held) {
  m->params = m->be->alloc((m->nparams + m->ncopy) * sizeof(float));
  m->grads = m->be->alloc((m->nparams ? m->nparams : 1) * sizeof(float));
  if (!m->params || !m->grads)
    return ts_fail(TS_ERUNTIME, "out of memory allocating %zu parameters",
                   m->nparams + m->ncopy);
  size_t off = 0;
  int k = 0;
  for (int pass = HELD_OWNED; pass <= HELD_COPY; pass++)
    for (int i = 0; i < m->nall; i++) {
      if (held[i] != pass) continue;
      const pspec *ps = &spec[i];
      float *p = m->params + off, *g = pass != HELD_COPY ? m->grads + off : NULL;
      if (ps->view) {
        *ps->view = p;
        *ps->gview = g;
      }
      ts_cp_block b = {0};
      if (pass == HELD_SLICE) split_block(m, i, &b);
      const int pieces = pass == HELD_ROWS    ? m->runs.n
                         : pass == HELD_SLICE ? block_pieces(&m->all[i], &b)
                                              : 1;
      for (int r = 0; r < pieces; r++, k++) {
        m->ptens[k] = m->gtens[k] = m->all[i];
        m->key[k] = i;
        m->stds[k] = ps->std;
        m->consts[k] = ps->value;
        size_t n = spec_numel(ps);
        if (pass == HELD_ROWS) { // rows [run_pos[r], run_pos[r] + run_len)
          const size_t C = (size_t)ps->shape[1];
          n = (size_t)m->runs.len * C;
          m->elem0[k] = (size_t)m->runs.pos[r] * C;
          m->ptens[k].shape[0] = m->gtens[k].shape[0] = m->runs.len;
        }
        if (pass == HELD_SLICE) { // the block whole (whole rows), or its row r0 + r
          ts_tensor *v = &m->ptens[k];
          const size_t cols = (size_t)(v->ndim == 2 ? v->shape[1] : v->shape[0]);
          n = pieces == 1 ? (size_t)(b.nr * b.nc) : (size_t)b.nc;
          m->elem0[k] = (size_t)(b.r0 + r) * cols + (size_t)b.c0;
          if (v->ndim == 1) v->shape[0] = (int64_t)n;
          else v->shape[0] = pieces == 1 ? b.nr : 1, v->shape[1] = b.nc;
          m->gtens[k].ndim = v->ndim;
          m->gtens[k].shape[0] = v->shape[0];
          m->gtens[k].shape[1] = v->shape[1];
        }
        if (pass == HELD_ROWS || pass == HELD_SLICE)
          m->ptens[k].at = m->gtens[k].at = m->all[i].at + (int64_t)m->elem0[k];
        m->ptens[k].data = m->params + off;
        m->gtens[k].data = g ? m->grads + off : NULL;
        off += n;
      }
    }
  return TS_OK;
}

// The rows of the activation buffers, from the strategy's sizes (strategy.h): Na of
// the attention output and MLP, Nq of Q and lse, Nk of K and V kept per
// layer, Nkd of the dK, dV scratch; and the floats of each part.
typedef struct {
  int64_t N, Na, Nq, Nk, Nkd;
  size_t F, Fup, BHT, NV, per_layer, top, scratch, strategy, rope;
  int kept; // layers whose activations are kept at once
} act_layout;

static void activation_layout(ts_model *m, act_layout *al) {
  const ts_config *cfg = &m->cfg;
  ts_cp_sizes cs;
  ts_attn_io io;
  ts_attn_io_geometry(m, &io);
  m->cp->sizes(&io, &cs);
  const int64_t N = m->ntok, Na = cs.layer_rows, Nq = cs.q_rows, Nk = cs.kv_rows;
  const int64_t Nkd = cs.dkv_rows;
  size_t C = (size_t)m->C, F = (size_t)m->F, V = (size_t)m->V, Ckv = (size_t)m->Ckv;
  size_t BHT = (size_t)Nq * m->H, Fup = m->llama ? F : 0;
  if (cfg->tiled_mlp) F = Fup = 0; // no (rows, d_ff) buffers: one leaf per thread instead
  // logits and their gradient: the last stage's
  const size_t NV = cfg->fused_ce || m->l1 < m->L ? 0 : (size_t)N * V;
  const int layers = m->l1 - m->l0; // the stage's: their inputs and outputs, and kept sets
  *al = (act_layout){.N = N, .Na = Na, .Nq = Nq, .Nk = Nk, .Nkd = Nkd, .F = F, .Fup = Fup,
                     .BHT = BHT, .NV = NV, .strategy = cs.scratch,
                     .kept = cfg->checkpoint ? 1 : layers};
  al->per_layer = N * (C + 4) + Na * (C + F + Fup) + Nq * C + Nk * Ckv * 2 + BHT;
  al->top = N * (C + 2 + 1) + NV;
  al->scratch = N * C * 4 + NV + Na * (C * 2 + F * 2) + Nkd * Ckv * 2 + BHT + cs.scratch;
  al->rope = m->llama ? (size_t)m->T * m->dh : 0;
  m->nacts = (size_t)(layers + 1) * N * C + (size_t)al->kept * al->per_layer + al->top +
             al->scratch + al->rope;
}

// The strategy's state (its create) and its gradient plan: a rank of two runs
// summed apart (strategy.h run_partials) gets the second run's partials.
static int create_strategy(ts_model *m, const ts_seq_shard *sp) {
  int rc = m->cp->run_partials ? ts_run_partials_create(m) : TS_OK;
  if (rc || !m->cp->create) return rc;
  ts_attn_io io;
  ts_attn_io_geometry(m, &io);
  return m->cp->create(&io, sp, &m->cp_state);
}

// The codec's state (boundary.h), once the parameters exist.
static int create_codec(ts_model *m) {
  if (!m->bd->create) return TS_OK;
  const ts_boundary_io bio = ts_model_codec_io(m);
  return m->bd->create(&bio, &m->bd_state);
}

static void destroy_strategy(ts_model *m) {
  if (!m->cp) return;
  if (m->cp->destroy) {
    ts_attn_io io;
    ts_attn_io_geometry(m, &io);
    m->cp->destroy(&io);
    m->cp_state = NULL;
  }
  if (m->rp) ts_run_partials_destroy(m);
}

// Parameters of one of the stage's layers (all alike).
static size_t layer_numel(const ts_model *m) {
  size_t n = 0;
  for (int i = 0; i < m->nall; i++)
    if (m->all[i].role == TS_ROLE_LAYER && m->all[i].index == m->l0)
      n += (size_t)ts_tensor_numel(&m->all[i]);
  return n;
}

// The packing a group of P ranks keeps for the exact gradient sums of the
// stage's n parameters (shard.c, zero.c): the whole vector in pieces
// (comm.c), or under --zero 2 and 3 a layer's or the ends' at a time; none
// under --fast (MPI's own reduction).
static size_t grad_sum_pack(const ts_model *m, size_t n, int P, int zero) {
  if (P < 2 || m->cfg.fast) return 0;
  // (the ends' sums are smaller for the presets, and past 2^21 floats the
  // packing is at its cap either way)
  if (zero >= 2 && m->l1 > m->l0) n = layer_numel(m);
  return ts_comm_pack_tree(n < ts_comm_allreduce_piece ? n : ts_comm_allreduce_piece, P);
}

// A rank's memory by kind (ts_mem_estimate, tessera.h), from the sizes its
// model has set before anything big is allocated: the one count the fit
// check below and `tessera plan` share. sp: the layout's sequence group (or
// NULL); shards, zero, dp: the model state's (ts_model_set_state_shards);
// threads: those the memory options' per-thread leaves are sized for.
static void estimate(const ts_model *m, const ts_seq_shard *sp, int shards, int zero, int dp,
                     int threads, ts_mem_estimate *e) {
  const ts_config *cfg = &m->cfg;
  const ts_boundary_io bio = ts_model_codec_io(m);
  const size_t boundary = m->bd->activation_floats ? m->bd->activation_floats(&bio) : 0;
  const double S = shards > 1 ? shards : 1, np = (double)m->nparams;
  // the positional table's rows a sequence rank holds: its own, outside the
  // replicas' shards (shard.c plan_state: every rank updates its own rows)
  const size_t rows = m->wpe_rows ? (size_t)m->runs.n * m->runs.len * (size_t)m->C : 0;
  const double shared = np - (double)rows, own = (double)rows;
  memset(e, 0, sizeof *e);
  e->nparams = m->nparams;
  e->ncopy = m->ncopy;
  e->nreplicated = m->nparams - m->nsplit - rows;
  // parameters and gradients, the AdamW moments (under --zero the shard of
  // the shared part, and the rank's positional rows whole)
  e->params = 4.0 * (zero >= 3 ? shared / S + own : np);
  e->grads = 4.0 * (zero >= 2 ? shared / S + own : np);
  e->optimizer = 8.0 * (zero >= 1 ? shared / S + own : np);
  e->copies = 4.0 * (double)m->ncopy;
  e->activations = 4.0 * (double)m->nacts;
  e->codec = 4.0 * (double)boundary;
  // --zero 2, 3: one layer's gradient (and parameters) whole while it runs
  if (zero >= 2 && m->l1 > m->l0) e->transient = (zero >= 3 ? 8.0 : 4.0) * np / (m->l1 - m->l0);
  if (cfg->fused_ce) e->scratch += 4.0 * (double)ts_model_fused_ce_floats(m, threads);
  if (cfg->tiled_mlp) e->scratch += 4.0 * (double)ts_model_tiled_mlp_floats(m, threads);
  e->scratch += 4.0 * (double)ts_model_attn_pack_floats(m, threads);
  e->scratch += (double)workspace_bytes(m, threads);
  // a rank of two runs kept apart (lss-zigzag): the second run's gradient partials
  if (m->cp->run_partials) e->strategy = 4.0 * np;
  // the strategy's own state (its `bytes`, from the geometry: lss-dx's
  // gathered inputs, megatron's blocks) and what its calls take (`incall`:
  // the buffers that live only inside an attention call, the packing of its
  // collectives)
  ts_attn_io io;
  ts_attn_io_geometry(m, &io);
  if (m->cp->bytes) e->strategy_state = (double)m->cp->bytes(&io);
  ts_cp_incall in = {0, 0, 0};
  if (m->cp->incall && sp && m->seq) m->cp->incall(&io, sp, &in);
  e->incall = (double)(in.fwd > in.bwd ? in.fwd : in.bwd);
  // the packing buffers (two of the largest call's floats a group): the
  // sequence group's, for the strategy's collectives and the gradient sum of
  // the replicated parameters; the data group's, for the stage's gradients
  const int nsp = m->seq ? m->seq->size : 1;
  size_t seq_pack = grad_sum_pack(m, e->nreplicated, nsp, zero);
  if (in.pack > seq_pack) seq_pack = in.pack;
  e->comm_buffers = 8.0 * (double)seq_pack + 8.0 * (double)grad_sum_pack(m, m->nparams, dp, zero);
  // the fit check's sum, in its order
  e->fit = e->params + e->grads + e->optimizer +
           4.0 * (double)(m->ncopy + m->nacts + boundary) + e->transient;
  if (cfg->fused_ce) e->fit += 4.0 * (double)ts_model_fused_ce_floats(m, threads);
  if (cfg->tiled_mlp) e->fit += 4.0 * (double)ts_model_tiled_mlp_floats(m, threads);
  e->fit += 4.0 * (double)ts_model_attn_pack_floats(m, threads);
  e->fit += (double)workspace_bytes(m, threads);
  e->fit += e->strategy + e->strategy_state + e->incall + e->comm_buffers;
  e->total = e->fit;
}

// The largest part of an estimate, named for the fit check's refusal.
static const char *largest_part(const ts_model *m, const ts_mem_estimate *e, double *bytes) {
  static char name[96];
  const struct {
    const char *what;
    double b;
  } parts[] = {{"parameters", e->params + e->copies},
               {"gradients", e->grads + e->strategy + e->transient},
               {"AdamW state", e->optimizer},
               {"activations", e->activations + e->scratch + e->codec},
               {"the strategy's state", e->strategy_state},
               {"attention buffers", e->incall},
               {"communication packing buffers", e->comm_buffers}};
  int k = 0;
  for (int i = 1; i < (int)(sizeof parts / sizeof parts[0]); i++)
    if (parts[i].b > parts[k].b) k = i;
  *bytes = parts[k].b;
  if (parts[k].b == e->incall || parts[k].b == e->strategy_state)
    snprintf(name, sizeof name, "--sp-mode %s's %s", m->cp->name, parts[k].what);
  else
    snprintf(name, sizeof name, "%s", parts[k].what);
  return name;
}

// Refuse up front what cannot fit, rather than be killed mid-run by the
// kernel's OOM killer (allocations succeed lazily under overcommit):
// parameters, gradients and AdamW state, the activations, the codec's and
// the memory options' buffers, the strategy's state and its calls' buffers,
// the communicators' packing, estimated before any of them is allocated.
static int fit_check(const ts_model *m, const ts_seq_shard *sp) {
  ts_mem_estimate e;
  estimate(m, sp, state_shards, state_zero, data_ranks, omp_get_max_threads(), &e);
  const double need = e.fit;
  // Every process makes this check for its own share of the memory its
  // buffers live in: the node's, which its ranks divide between them, or on
  // a GPU the device's, which the ranks sharing it divide (the backend
  // knows). GPU buffers are managed memory, which would not fail but page
  // to and from the host at every kernel.
  const int on_gpu = m->be->memory_bytes != NULL;
  double have = on_gpu ? (double)m->be->memory_bytes()
                       : (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE) /
                             memory_share;
  if (have > 0 && need > 0.9 * have) {
    char share[64] = "";
    if (!on_gpu && memory_share > 1)
      snprintf(share, sizeof share, " (its share: 1 of %d ranks)", memory_share);
    double most;
    const char *what = largest_part(m, &e, &most);
    return ts_fail(TS_ERUNTIME,
                   "this model needs about %.1f GiB (%s: %.1f GiB of it) but %s %.1f GiB%s; "
                   "use a smaller --model, --seq or --batch, the memory options (--checkpoint, "
                   "--fused-ce, --tiled-mlp), more pipeline stages (--pp), sharded model state "
                   "(--zero 1, 2, 3), or fewer ranks on this %s",
                   need / 1073741824.0, what, most / 1073741824.0,
                   on_gpu ? "this rank's share of its GPU is" : "the machine has",
                   have / 1073741824.0, share, on_gpu ? "GPU" : "machine");
  }
  return TS_OK;
}

// The activations: one allocation, its named views in a fixed order.
static int alloc_activations(ts_model *m, const act_layout *al) {
  const int64_t N = al->N, Na = al->Na, Nq = al->Nq, Nk = al->Nk, Nkd = al->Nkd;
  const size_t C = (size_t)m->C, Ckv = (size_t)m->Ckv, F = al->F, Fup = al->Fup;
  const size_t BHT = al->BHT, NV = al->NV;
  m->acts = m->be->alloc(m->nacts * sizeof(float));
  m->inputs = m->be->alloc((size_t)N * sizeof(int));
  m->targets = m->be->alloc((size_t)N * sizeof(int));
  if (!m->acts || !m->inputs || !m->targets)
    return ts_fail(TS_ERUNTIME, "out of memory allocating %.1f MB of activations",
                   m->nacts * 4.0 / 1e6);
  float *a = m->acts;
#define TAKE(PTR, COUNT) do { PTR = a; a += (COUNT); } while (0)
  for (int l = m->l0; l <= m->l1; l++) TAKE(m->res[l], N * C);
  for (int i = 0; i < al->kept; i++) { // ts_layer_acts: the first set, or layer l's
    layer_acts *la = &m->la[m->cfg.checkpoint ? 0 : m->l0 + i];
    TAKE(la->ln1_mean, N); TAKE(la->ln1_rstd, N);
    TAKE(la->q, Nq * C); TAKE(la->k, Nk * Ckv); TAKE(la->v, Nk * Ckv); TAKE(la->att, Na * C);
    TAKE(la->lse, BHT); TAKE(la->res_mid, N * C);
    TAKE(la->ln2_mean, N); TAKE(la->ln2_rstd, N);
    TAKE(la->fch, Na * F); TAKE(la->fup, Na * Fup);
  }
  TAKE(m->lnf, N * C); TAKE(m->lnf_mean, N); TAKE(m->lnf_rstd, N);
  TAKE(m->logits, NV); TAKE(m->losses, N);
  TAKE(m->ln_out, N * C); TAKE(m->gelu_out, Na * F);
  TAKE(m->dres, N * C); TAKE(m->dtmp, N * C); TAKE(m->dtmp2, N * C); TAKE(m->datt, Na * C);
  TAKE(m->dq, Na * C); TAKE(m->dk, Nkd * Ckv); TAKE(m->dv, Nkd * Ckv);
  TAKE(m->dfch, Na * F); TAKE(m->dlogits, NV); TAKE(m->dsum, BHT);
  if (al->strategy) TAKE(m->spbuf, al->strategy);
  TAKE(m->rope, al->rope);
#undef TAKE
  if (m->llama) rope_table(m->rope, m->T, m->dh, (double)m->cfg.rope_theta);
  return TS_OK;
}

// The kernels' workspace (its leaf buffer as large as the largest leaf
// partial) and the memory options' scratch.
static int alloc_scratch(ts_model *m) {
  const ts_config *cfg = &m->cfg;
  if (ts_ws_init(&m->ws, cfg->tile, cfg->leaf, workspace_leaf_floats(m), m->dh) != 0)
    return ts_fail(TS_ERUNTIME, "out of memory allocating kernel workspace");
  if (cfg->tiled_mlp) {
    m->mlp_scratch = m->be->alloc(ts_model_tiled_mlp_floats(m, m->ws.nthreads) * sizeof(float));
    if (!m->mlp_scratch)
      return ts_fail(TS_ERUNTIME, "out of memory allocating the tiled MLP's scratch");
  }
  if (cfg->fused_ce) {
    m->ce_scratch = m->be->alloc(ts_model_fused_ce_floats(m, m->ws.nthreads) * sizeof(float));
    if (!m->ce_scratch)
      return ts_fail(TS_ERUNTIME, "out of memory allocating the fused cross-entropy's scratch");
  }
  return TS_OK;
}

int ts_model_create_seq(const ts_config *cfg, int b_begin, int b_count, const ts_seq_shard *sp,
                        ts_model **out) {
  return ts_model_create_stage(cfg, b_begin, b_count, sp, 0, cfg->n_layer, out);
}

// What creation decides before anything big is allocated: the shard's and
// the stage's rules, the geometry, the table and the activation layout
// (*out is set, to be freed, once allocated; *spec and *held too).
static int prepare(const ts_config *cfg, int b_begin, int b_count, const ts_seq_shard *sp, int l0,
                   int l1, ts_model **out, pspec **spec, unsigned char **held, act_layout *al) {
  const int nsp = sp && sp->comm ? sp->comm->size : 1;
  const ts_cp *cp = nsp > 1 ? ts_cp_get(sp->mode) : &ts_cp_local;
  int rc = check_shard(cfg, b_begin, b_count, sp, nsp, cp);
  if (rc) return rc;
  if (l0 < 0 || l1 > cfg->n_layer || l0 >= l1)
    return ts_fail(TS_EUSAGE, "pipeline stage of layers [%d, %d): not inside the %d layers", l0,
                   l1, cfg->n_layer);
  const ts_boundary *bd = ts_boundary_get(cfg->compress);
  if (!bd) return ts_fail(TS_EUSAGE, "--compress: no codec %d", cfg->compress);
  ts_model *m = *out = calloc(1, sizeof *m);
  if (!m) return ts_fail(TS_ERUNTIME, "out of memory");
  m->cp = cp;
  m->bd = bd;
  set_geometry(m, cfg, b_begin, b_count, sp, nsp, l0, l1);
  if ((rc = make_table(m, spec, held))) return rc;
  activation_layout(m, al);
  return TS_OK;
}

int ts_model_create_stage(const ts_config *cfg, int b_begin, int b_count, const ts_seq_shard *sp,
                          int l0, int l1, ts_model **out) {
  ts_model *m = NULL;
  pspec *spec = NULL;
  unsigned char *held = NULL;
  act_layout al;
  int rc = prepare(cfg, b_begin, b_count, sp, l0, l1, &m, &spec, &held, &al);
  if (!rc) rc = fit_check(m, sp);
  if (!rc) rc = alloc_params(m, spec, held);
  free(spec);
  free(held);
  if (!rc) rc = alloc_activations(m, &al);
  if (!rc) rc = alloc_scratch(m);
  if (!rc) rc = create_strategy(m, sp);
  if (!rc) rc = create_codec(m);
  if (rc) {
    ts_model_free(m);
    return rc;
  }
  *out = m;
  return TS_OK;
}

// Where the stage's layers and a tied embedding lie among its owned
// parameters, in the order alloc_params lays them out.
static void layer_span(const ts_model *m, const pspec *spec, const unsigned char *held,
                       ts_mem_estimate *e) {
  size_t off = 0;
  int seen = 0;
  for (int i = 0; i < m->nall; i++) {
    if (held[i] != HELD_OWNED) continue;
    const ts_tensor *t = &m->all[i];
    const size_t n = spec_numel(&spec[i]);
    if (t->role == TS_ROLE_LAYER && !seen) e->layers_lo = off, seen = 1;
    if (t->role == TS_ROLE_LAYER && t->index == m->l0) e->layer_floats += n;
    if (t->role == TS_ROLE_EMBEDDING && m->cfg.tied) e->wte_lo = off, e->wte_len = n;
    off += n;
  }
  e->nlayers = m->l1 - m->l0;
}

int ts_model_estimate_stage(const ts_config *cfg, int b_begin, int b_count, const ts_seq_shard *sp,
                            int l0, int l1, int shards, int zero, int dp, int threads,
                            ts_mem_estimate *out) {
  ts_model *m = NULL;
  pspec *spec = NULL;
  unsigned char *held = NULL;
  act_layout al;
  int rc = prepare(cfg, b_begin, b_count, sp, l0, l1, &m, &spec, &held, &al);
  if (!rc) estimate(m, sp, shards, zero, dp, threads, out);
  if (!rc) layer_span(m, spec, held, out);
  free(spec);
  free(held);
  if (m) m->cp = NULL; // no strategy state was made: nothing of it to destroy
  ts_model_free(m);
  return rc;
}

int ts_config_tensors(const ts_config *cfg, ts_tensor **out) {
  *out = NULL;
  // the table of a whole model whose geometry is set and nothing allocated
  // but the small per-tensor and per-layer arrays (the fit check has bounded
  // the layers)
  const ts_boundary *bd = ts_boundary_get(cfg->compress);
  if (!bd) return ts_fail(TS_EUSAGE, "--compress: no codec %d", cfg->compress), -1;
  ts_model *m = calloc(1, sizeof *m);
  if (!m) return ts_fail(TS_ERUNTIME, "out of memory"), -1;
  m->cp = &ts_cp_local;
  m->bd = bd;
  set_geometry(m, cfg, 0, cfg->batch, NULL, 1, 0, cfg->n_layer);
  pspec *spec = NULL;
  unsigned char *held = NULL;
  int n = make_table(m, &spec, &held) ? -1 : m->nall;
  ts_tensor *t = n >= 0 ? calloc((size_t)n + 1, sizeof *t) : NULL;
  if (n >= 0 && !t) {
    ts_fail(TS_ERUNTIME, "out of memory");
    n = -1;
  }
  if (t) memcpy(t, m->all, (size_t)n * sizeof *t);
  free(spec);
  free(held);
  ts_model_free(m);
  *out = t;
  return n;
}

void ts_model_free(ts_model *m) {
  if (!m) return;
  destroy_strategy(m);
  if (m->bd && m->bd->destroy) {
    const ts_boundary_io bio = ts_model_codec_io(m);
    m->bd->destroy(&bio);
    m->bd_state = NULL;
  }
  m->be->free(m->ce_scratch);
  m->be->free(m->mlp_scratch);
  ts_ws_free(&m->ws);
  m->be->free(m->params); m->be->free(m->grads); m->be->free(m->acts);
  m->be->free(m->inputs); m->be->free(m->targets);
  free(m->p.layer); free(m->g.layer); free(m->la); free(m->res);
  free(m->ptens); free(m->gtens); free(m->key); free(m->elem0); free(m->stds); free(m->consts);
  free(m->all);
  free(m);
}

void ts_model_init(ts_model *m, uint64_t seed) {
  for (int i = 0; i < m->ntens; i++) { // keyed by the canonical index: a stage's are the model's
    ts_tensor *t = &m->ptens[i];
    int64_t n = ts_tensor_numel(t);
    float std = m->stds[i], c = m->consts[i];
    const uint64_t key = (uint64_t)m->key[i], j0 = (uint64_t)m->elem0[i];
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < n; j++)
      t->data[j] = std > 0 ? std * ts_rng_normal(seed, TS_RNG_INIT, key, j0 + (uint64_t)j) : c;
  }
  if (m->bd->init) {
    const ts_boundary_io bio = ts_model_codec_io(m);
    m->bd->init(&bio, seed);
  }
}

// ---- accessors ---------------------------------------------------------------------
int ts_model_num_tensors(const ts_model *m) { return m->nown; }

void ts_model_tensors(ts_model *m, ts_tensor *params, ts_tensor *grads) {
  if (params) memcpy(params, m->ptens, (size_t)m->nown * sizeof(ts_tensor));
  if (grads) memcpy(grads, m->gtens, (size_t)m->nown * sizeof(ts_tensor));
}

// Each layer one run, the layers one after another (the canonical order),
// nothing else between them.
int ts_model_layer_runs(const ts_model *m, int *first, int *nlay, size_t *lo, int *bad) {
  const ts_tensor *t = m->ptens;
  const int nt = m->nown;
  int f = -1, last = -1;
  for (int i = 0; i < nt; i++)
    if (t[i].role == TS_ROLE_LAYER) {
      if (f < 0 || t[i].index < f) f = t[i].index;
      if (t[i].index > last) last = t[i].index;
    }
  *first = f;
  *nlay = f < 0 ? 0 : last - f + 1;
  size_t at = 0;
  int l = f;
  for (int i = 0; i < nt && *nlay; i++) {
    if (t[i].role != TS_ROLE_LAYER) {
      if (l > f && l <= last) return *bad = i, 1;
      continue;
    }
    const size_t a = (size_t)(t[i].data - m->params), n = (size_t)ts_tensor_numel(&t[i]);
    if (t[i].index == l) { // the first tensor of the next layer
      if (l > f && a != at) return *bad = l, 2;
      lo[l - f] = a;
      l++;
    } else if (t[i].index != l - 1 || a != at) {
      return *bad = t[i].index, 2;
    }
    at = a + n;
  }
  if (*nlay) lo[*nlay] = at;
  return 0;
}

int ts_model_num_copies(const ts_model *m) { return m->ntens - m->nown; }

void ts_model_copies(ts_model *m, ts_tensor *params) {
  memcpy(params, m->ptens + m->nown, (size_t)(m->ntens - m->nown) * sizeof(ts_tensor));
}

int ts_model_copy(ts_model *m, int k, ts_tensor *param) {
  if (k < 0 || k >= m->ntens - m->nown) return 0;
  *param = m->ptens[m->nown + k];
  return 1;
}

int ts_model_canonical_tensors(const ts_model *m) { return m->nall; }
size_t ts_model_canonical_params(const ts_model *m) { return m->nall_params; }
void ts_model_canonical_table(const ts_model *m, ts_tensor *out) {
  memcpy(out, m->all, (size_t)m->nall * sizeof(ts_tensor));
}

size_t ts_model_num_params(const ts_model *m) { return m->nparams; }
size_t ts_model_split_params(const ts_model *m) { return m->nsplit; }
float *ts_model_params(ts_model *m) { return m->params; }
float *ts_model_grads(ts_model *m) { return m->grads; }
const float *ts_model_logits(const ts_model *m) { return m->cfg.fused_ce ? NULL : m->logits; }
float ts_model_loss_sum(const ts_model *m) { return m->loss_sum; }
float *ts_model_second_run_grads(ts_model *m) { return m->grads2; }
float ts_model_run_loss_sum(const ts_model *m, int run) {
  if (!m->grads2) return m->loss_sum;
  return m->be->token_tree_sum(m->losses + (size_t)run * m->runs.len, m->runs.len, m->cfg.leaf);
}
int ts_model_status(const ts_model *m) { return m->rc; }
void ts_model_select_sequence(ts_model *m, int b_begin) { m->b0 = b_begin; }
void ts_model_positions(const ts_model *m, int *t_begin, int *t_count) {
  *t_begin = m->t0;
  *t_count = m->Tl;
}

int ts_model_runs(const ts_model *m, int *pos, int *len) {
  for (int k = 0; k < m->runs.n; k++) pos[k] = m->runs.pos[k];
  *len = m->runs.len;
  return m->runs.n;
}
const ts_config *ts_model_config(const ts_model *m) { return &m->cfg; }
size_t ts_model_activation_bytes(const ts_model *m) {
  size_t scratch = 0; // the memory options' per-thread leaves
  if (m->cfg.fused_ce) scratch += ts_model_fused_ce_floats(m, m->ws.nthreads);
  if (m->cfg.tiled_mlp) scratch += ts_model_tiled_mlp_floats(m, m->ws.nthreads);
  scratch += ts_model_attn_pack_floats(m, m->ws.nthreads); // the attention kernel's copies
  size_t own = m->rp ? ts_run_partials_bytes(m) : 0; // the gradient plan's, and the strategy's
  own += ts_model_workspace_bytes(m); // the kernels' sums and attention
  if (m->cp->bytes) {
    ts_attn_io io;
    ts_attn_io_geometry(m, &io);
    own += m->cp->bytes(&io);
  }
  return (m->nacts + scratch) * sizeof(float) + own;
}

// non-embedding parameters: everything but wte and wpe (a tied head is the
// embedding; an untied head counts)
static double flops_per_token(double nall, const ts_config *cfg) {
  const double V = cfg->vocab, C = cfg->d, T = cfg->seq, L = cfg->n_layer;
  const double nonemb = nall - V * C - (cfg->variant == TS_LLAMA ? 0.0 : T * C);
  return 6.0 * nonemb + 6.0 * L * T * C;
}

double ts_model_flops_per_token(const ts_model *m) {
  return flops_per_token((double)m->nall_params, &m->cfg);
}

double ts_config_flops_per_token(const ts_config *cfg) {
  ts_tensor *t;
  const int n = ts_config_tensors(cfg, &t);
  double nall = 0.0;
  for (int i = 0; i < n; i++) nall += (double)ts_tensor_numel(&t[i]);
  free(t);
  return flops_per_token(nall, cfg);
}
