// The transformer family (GPT variant): parameters, forward, backward.
// Parameters and gradients are each one allocation with named views in the
// canonical order of docs/MODEL.md; activations likewise.
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "boundary/boundary.h"
#include "comm.h"
#include "index.h"
#include "kernels.h"
#include "mem.h"
#include "model_impl.h"
#include "parallel/cp.h"
#include "rng.h"
#include "tessera.h"
#include "util.h"

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
} pspec;

// Stage s's codec tensors (boundary.h) when layer l ends it: std 0, value 0.
static int boundary_specs(const ts_model *m, int l, pspec *out) {
  const int S = m->cfg.compress_stages;
  if (!m->bd->tensors || S < 1 || (l + 1) % (m->L / S) != 0) return 0;
  ts_tensor t[TS_BOUNDARY_TENSORS];
  const int n = m->bd->tensors(&m->cfg, (l + 1) / (m->L / S) - 1, t);
  for (int k = 0; out && k < n; k++) {
    out[k] = (pspec){.ndim = t[k].ndim, .shape = {t[k].shape[0], t[k].shape[1]},
                     .role = t[k].role, .index = t[k].index};
    memcpy(out[k].name, t[k].name, sizeof out[k].name);
  }
  return n;
}

static int param_table(ts_model *m, pspec *out) {
  int n = 0, C = m->C, F = m->F, V = m->V;
  float s = 0.02f, sres = 0.02f / sqrtf(2.0f * m->L);
#define ADD(NAME, ND, S0, S1, STD, VAL, FIELD, ROLE, INDEX)                             \
  do {                                                                                  \
    if (out) {                                                                          \
      pspec *ps = &out[n];                                                              \
      snprintf(ps->name, sizeof ps->name, "%s", NAME);                                  \
      ps->ndim = ND; ps->shape[0] = S0; ps->shape[1] = S1;                              \
      ps->std = STD; ps->value = VAL; ps->view = &m->p.FIELD; ps->gview = &m->g.FIELD;  \
      ps->role = ROLE; ps->index = INDEX;                                               \
    }                                                                                   \
    n++;                                                                                \
  } while (0)
  ADD("wte", 2, V, C, s, 0, wte, TS_ROLE_EMBEDDING, 0);
  char nm[64];
#define LADD(SUFFIX, ND, S0, S1, STD, VAL, FIELD)                                       \
  snprintf(nm, sizeof nm, "h.%d.%s", l, SUFFIX);                                         \
  ADD(nm, ND, S0, S1, STD, VAL, layer[l].FIELD, TS_ROLE_LAYER, l)
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
      LADD("rms2.w", 1, C, 0, 0, 1, ln2w);
      LADD("mlp.w1", 2, F, C, s, 0, w1);
      LADD("mlp.w3", 2, F, C, s, 0, w3);
      LADD("mlp.w2", 2, C, F, sres, 0, w2);
      BOUNDARY_ADD(l);
    }
    ADD("rmsf.w", 1, C, 0, 0, 1, lnfw, TS_ROLE_FINAL_NORM, 0);
    if (!m->cfg.tied) ADD("lm_head", 2, V, C, s, 0, lm_head, TS_ROLE_HEAD, 0);
    return n;
  }
  ADD("wpe", 2, m->T, C, s, 0, wpe, TS_ROLE_POSITIONAL, 0);
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
    LADD("attn.bo", 1, C, 0, 0, 0, bo);
    LADD("ln2.w", 1, C, 0, 0, 1, ln2w);
    LADD("ln2.b", 1, C, 0, 0, 0, ln2b);
    LADD("mlp.w1", 2, F, C, s, 0, w1);
    LADD("mlp.b1", 1, F, 0, 0, 0, b1);
    LADD("mlp.w2", 2, C, F, sres, 0, w2);
    LADD("mlp.b2", 1, C, 0, 0, 0, b2);
    BOUNDARY_ADD(l);
  }
#undef LADD
#undef BOUNDARY_ADD
  ADD("lnf.w", 1, C, 0, 0, 1, lnfw, TS_ROLE_FINAL_NORM, 0);
  ADD("lnf.b", 1, C, 0, 0, 0, lnfb, TS_ROLE_FINAL_NORM, 0);
  if (!m->cfg.tied) ADD("lm_head", 2, V, C, s, 0, lm_head, TS_ROLE_HEAD, 0);
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
static size_t fused_ce_floats(const ts_model *m, int nthreads) {
  return leaf_slots(m, nthreads) * m->cfg.leaf * m->V;
}

// --tiled-mlp's scratch: a leaf's four (leaf, d_ff) buffers per slot.
static size_t tiled_mlp_floats(const ts_model *m, int nthreads) {
  return leaf_slots(m, nthreads) * 4 * m->cfg.leaf * m->F;
}

// Processes that share this machine's memory (ts_model_set_memory_share).
static int memory_share = 1;

void ts_model_set_memory_share(int processes) { memory_share = processes > 1 ? processes : 1; }

int ts_model_create(const ts_config *cfg, ts_model **out) {
  return ts_model_create_seq(cfg, 0, cfg->batch, NULL, out);
}

int ts_model_create_shard(const ts_config *cfg, int b_begin, int b_count, ts_model **out) {
  return ts_model_create_seq(cfg, b_begin, b_count, NULL, out);
}

int ts_model_create_seq(const ts_config *cfg, int b_begin, int b_count, const ts_seq_shard *sp,
                        ts_model **out) {
  if (b_begin < 0 || b_count < 1 || b_begin > cfg->batch - b_count)
    return ts_fail(TS_EUSAGE, "batch shard [%d, %d) outside the batch of %d sequences", b_begin,
                   b_begin + b_count, cfg->batch);
  const int nsp = sp && sp->comm ? sp->comm->size : 1;
  if (nsp > 1) {
    const int Tl = cfg->seq / nsp;
    if (b_count != 1)
      return ts_fail(TS_EUSAGE, "a sequence-parallel model holds one sequence, not %d", b_count);
    if (cfg->seq % nsp != 0 || Tl % cfg->leaf != 0 || Tl % cfg->tile != 0)
      return ts_fail(TS_EUSAGE, "--seq %d: not %d segments of whole leaves (%d) and tiles (%d)",
                     cfg->seq, nsp, cfg->leaf, cfg->tile);
  }
  const ts_cp *cp = nsp > 1 ? ts_cp_get(sp->mode) : &ts_cp_local;
  if (!cp) return ts_fail(TS_EUSAGE, "--sp-mode: no strategy %d", (int)sp->mode);
  if (nsp > 1 && cp->check) { // the strategy's rules (ts_layout_check applies them too)
    ts_layout lay = {.dp = 1, .sp = nsp, .pp = 1, .sp_mode = sp->mode, .upipe_u = sp->upipe_u,
                     .upipe_sched = sp->upipe_sched, .microbatches = 1,
                     .ulysses_degree = sp->ulysses_degree};
    int rc = cp->check(cfg, &lay);
    if (rc) return rc;
  }
  const ts_boundary *bd = ts_boundary_get(cfg->compress);
  if (!bd) return ts_fail(TS_EUSAGE, "--compress: no codec %d", cfg->compress);
  ts_model *m = calloc(1, sizeof *m);
  if (!m) return ts_fail(TS_ERUNTIME, "out of memory");
  m->cfg = *cfg;
  m->be = ts_backend_current();
  m->bd = bd;
  m->B = b_count; m->b0 = b_begin; m->Bg = cfg->batch;
  m->T = cfg->seq; m->C = cfg->d; m->L = cfg->n_layer;
  m->H = cfg->n_head; m->dh = cfg->d / cfg->n_head; m->F = cfg->d_ff; m->V = cfg->vocab;
  m->llama = cfg->variant == TS_LLAMA;
  m->Hkv = cfg->n_kv_head > 0 ? cfg->n_kv_head : cfg->n_head;
  m->Ckv = m->Hkv * m->dh;
  m->Tl = m->T / nsp;
  m->t0 = nsp > 1 ? sp->comm->rank * m->Tl : 0;
  m->seq = nsp > 1 ? sp->comm : NULL;
  m->cp = cp;
  m->ntok = (int64_t)m->B * m->Tl;
  m->l0 = 0;
  m->l1 = m->L;
  ts_cp_runs runs;
  ts_cp_positions(cp, nsp, m->seq ? m->seq->rank : 0, m->T, &runs);
  m->nrun = runs.n;
  m->run_len = runs.len;
  m->run_pos[0] = runs.pos[0];
  m->run_pos[1] = runs.pos[1];
  m->ntok_global = (int64_t)m->Bg * m->T;
  m->p.layer = calloc((size_t)m->L, sizeof(layer_params));
  m->g.layer = calloc((size_t)m->L, sizeof(layer_params));
  m->la = calloc((size_t)m->L, sizeof(layer_acts));
  m->res = calloc((size_t)m->L + 1, sizeof(float *));
  m->ntens = param_table(m, NULL);
  pspec *spec = calloc((size_t)m->ntens, sizeof(pspec));
  m->ptens = calloc((size_t)m->ntens, sizeof(ts_tensor));
  m->gtens = calloc((size_t)m->ntens, sizeof(ts_tensor));
  m->stds = calloc((size_t)m->ntens, sizeof(float));
  m->consts = calloc((size_t)m->ntens, sizeof(float));
  if (!m->p.layer || !m->g.layer || !m->la || !m->res || !spec || !m->ptens || !m->gtens ||
      !m->stds || !m->consts) {
    free(spec);
    ts_model_free(m);
    return ts_fail(TS_ERUNTIME, "out of memory");
  }
  param_table(m, spec);
  size_t total = 0;
  for (int i = 0; i < m->ntens; i++)
    total += (size_t)spec[i].shape[0] * (spec[i].ndim == 2 ? (size_t)spec[i].shape[1] : 1);
  m->nparams = total;
  m->params = m->be->alloc(total * sizeof(float));
  m->grads = m->be->alloc(total * sizeof(float));
  if (!m->params || !m->grads) {
    free(spec);
    ts_model_free(m);
    return ts_fail(TS_ERUNTIME, "out of memory allocating %zu parameters", total);
  }
  size_t off = 0;
  for (int i = 0; i < m->ntens; i++) {
    pspec *ps = &spec[i];
    size_t n = (size_t)ps->shape[0] * (ps->ndim == 2 ? (size_t)ps->shape[1] : 1);
    if (ps->view) {
      *ps->view = m->params + off;
      *ps->gview = m->grads + off;
    }
    for (int k = 0; k < 2; k++) {
      ts_tensor *t = k ? &m->gtens[i] : &m->ptens[i];
      snprintf(t->name, sizeof t->name, "%s", ps->name);
      t->ndim = ps->ndim;
      t->shape[0] = ps->shape[0];
      t->shape[1] = ps->shape[1];
      t->data = (k ? m->grads : m->params) + off;
      t->role = ps->role;
      t->index = ps->index;
    }
    m->stds[i] = ps->std;
    m->consts[i] = ps->value;
    off += n;
  }
  free(spec);

  // activations: the rows of the attention buffers the strategy asks for
  // (cp.h): Na of the attention output and MLP, Nq of Q and lse, Nk of K and
  // V kept per layer, Nkd of the dK, dV scratch.
  ts_cp_sizes cs;
  cp->sizes(m, &cs);
  const int64_t N = m->ntok, Na = cs.layer_rows, Nq = cs.q_rows, Nk = cs.kv_rows;
  const int64_t Nkd = cs.dkv_rows;
  size_t C = (size_t)m->C, F = (size_t)m->F, V = (size_t)m->V, Ckv = (size_t)m->Ckv;
  size_t BHT = (size_t)Nq * m->H, Fup = m->llama ? F : 0;
  if (cfg->tiled_mlp) F = Fup = 0; // no (rows, d_ff) buffers: one leaf per thread instead
  size_t per_layer = N * (C + 4) + Na * (C + F + Fup) + Nq * C + Nk * Ckv * 2 + BHT;
  const size_t NV = cfg->fused_ce ? 0 : (size_t)N * V; // logits and their gradient
  size_t top = N * (C + 2 + 1) + NV;
  size_t scratch = N * C * 4 + NV + Na * (C * 2 + F * 2) + Nkd * Ckv * 2 + BHT + cs.scratch;
  size_t rope = m->llama ? (size_t)m->T * m->dh : 0;
  const int kept = cfg->checkpoint ? 1 : m->L; // layers whose activations are kept at once
  size_t nacts = (size_t)(m->L + 1) * N * C + (size_t)kept * per_layer + top + scratch + rope;
  m->nacts = nacts;
  const size_t boundary = m->bd->activation_floats ? m->bd->activation_floats(m) : 0; // the codec's
  // Refuse up front what cannot fit, rather than be killed mid-run by the
  // kernel's OOM killer (allocations succeed lazily under overcommit):
  // parameters, gradients and AdamW state, and these activations.
  double need = 16.0 * (double)total + 4.0 * (double)(nacts + boundary);
  if (cfg->fused_ce) need += 4.0 * (double)fused_ce_floats(m, omp_get_max_threads());
  if (cfg->tiled_mlp) need += 4.0 * (double)tiled_mlp_floats(m, omp_get_max_threads());
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
    ts_model_free(m);
    return ts_fail(TS_ERUNTIME,
                   "this model needs about %.1f GiB (parameters, gradients, AdamW state, "
                   "activations) but %s %.1f GiB%s; use a smaller --model, --seq or "
                   "--batch, the memory options (--checkpoint, --fused-ce, --tiled-mlp), or "
                   "fewer ranks on this %s",
                   need / 1073741824.0, on_gpu ? "this rank's share of its GPU is" : "the machine has",
                   have / 1073741824.0, share, on_gpu ? "GPU" : "machine");
  }
  m->acts = m->be->alloc(nacts * sizeof(float));
  m->inputs = m->be->alloc((size_t)N * sizeof(int));
  m->targets = m->be->alloc((size_t)N * sizeof(int));
  if (!m->acts || !m->inputs || !m->targets) {
    ts_model_free(m);
    return ts_fail(TS_ERUNTIME, "out of memory allocating %.1f MB of activations",
                   nacts * 4.0 / 1e6);
  }
  float *a = m->acts;
#define TAKE(PTR, COUNT) do { PTR = a; a += (COUNT); } while (0)
  for (int l = 0; l <= m->L; l++) TAKE(m->res[l], N * C);
  for (int l = 0; l < kept; l++) {
    layer_acts *la = &m->la[l];
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
  if (cs.scratch) TAKE(m->spbuf, cs.scratch);
  TAKE(m->rope, rope);
#undef TAKE
  if (m->llama) rope_table(m->rope, m->T, m->dh, (double)cfg->rope_theta);

  F = (size_t)m->F;
  size_t leaf_cap = F * C + F;
  if (cfg->tiled_mlp) // one vector [dW2 | db2 | dW1 | db1 | dW3] per leaf
    leaf_cap = 2 * F * C + F + C + (m->llama ? F * C : 0);
  if (V * C > leaf_cap) leaf_cap = V * C;
  if ((size_t)cfg->leaf * C > leaf_cap) leaf_cap = (size_t)cfg->leaf * C;
  const size_t bd_leaf = m->bd->leaf_floats ? m->bd->leaf_floats(cfg) : 0;
  if (bd_leaf > leaf_cap) leaf_cap = bd_leaf;
  if (ts_ws_init(&m->ws, cfg->tile, cfg->leaf, leaf_cap, m->dh) != 0) {
    ts_model_free(m);
    return ts_fail(TS_ERUNTIME, "out of memory allocating kernel workspace");
  }
  if (cfg->tiled_mlp) {
    m->mlp_scratch = m->be->alloc(tiled_mlp_floats(m, m->ws.nthreads) * sizeof(float));
    if (!m->mlp_scratch) {
      ts_model_free(m);
      return ts_fail(TS_ERUNTIME, "out of memory allocating the tiled MLP's scratch");
    }
  }
  if (cfg->fused_ce) {
    m->ce_scratch = m->be->alloc(fused_ce_floats(m, m->ws.nthreads) * sizeof(float));
    if (!m->ce_scratch) {
      ts_model_free(m);
      return ts_fail(TS_ERUNTIME, "out of memory allocating the fused cross-entropy's scratch");
    }
  }
  int rc;
  if (cp->create && (rc = cp->create(m, sp))) {
    ts_model_free(m);
    return rc;
  }
  if (m->bd->create && (rc = m->bd->create(m))) {
    ts_model_free(m);
    return rc;
  }
  *out = m;
  return TS_OK;
}

void ts_model_free(ts_model *m) {
  if (!m) return;
  if (m->cp && m->cp->destroy) m->cp->destroy(m);
  if (m->bd && m->bd->destroy) m->bd->destroy(m);
  m->be->free(m->ce_scratch);
  m->be->free(m->mlp_scratch);
  ts_ws_free(&m->ws);
  m->be->free(m->params); m->be->free(m->grads); m->be->free(m->acts);
  m->be->free(m->inputs); m->be->free(m->targets);
  free(m->p.layer); free(m->g.layer); free(m->la); free(m->res);
  free(m->ptens); free(m->gtens); free(m->stds); free(m->consts);
  free(m);
}

void ts_model_init(ts_model *m, uint64_t seed) {
  for (int i = 0; i < m->ntens; i++) {
    ts_tensor *t = &m->ptens[i];
    int64_t n = ts_tensor_numel(t);
    float std = m->stds[i], c = m->consts[i];
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < n; j++)
      t->data[j] = std > 0 ? std * ts_rng_normal(seed, TS_RNG_INIT, (uint64_t)i, (uint64_t)j) : c;
  }
  if (m->bd->init) m->bd->init(m, seed);
}

// ---- forward -----------------------------------------------------------------------
// Global dropout indices (index.h) of this shard's first element in layer l:
// projection and MLP rows from position t0 (a sequence shard holds one
// sequence, so its rows are contiguous), attention from head 0, query 0,
// key 0; the kernels add the local offsets.
static uint64_t row_base_at(const ts_model *m, int l, int pos) {
  return ts_index_row((uint64_t)l, (uint64_t)m->Bg, (uint64_t)m->b0, (uint64_t)m->T,
                      (uint64_t)pos, (uint64_t)m->C);
}

uint64_t ts_model_row_base(const ts_model *m, int l) { return row_base_at(m, l, m->t0); }

// Rows of run k: how many, at which row; the B sequences are one run.
static int64_t run_rows(const ts_model *m) { return m->nrun == 1 ? m->ntok : m->run_len; }

// Dropout of the rank's rows (width C), by the global index of each run.
static void dropout_rows(const ts_model *m, float *x, float p, uint32_t purpose, uint64_t step,
                         int l) {
  for (int k = 0; k < m->nrun; k++)
    m->be->dropout_apply(x + (size_t)k * m->run_len * m->C, run_rows(m) * m->C, p, m->cfg.seed,
                         purpose, step, row_base_at(m, l, m->run_pos[k]));
}

void ts_model_rope_rows(const ts_model *m, float *x, int nh, int ld, int backward) {
  if (!m->llama) return;
  for (int k = 0; k < m->nrun; k++) {
    float *xk = x + (size_t)k * m->run_len * ld;
    if (backward)
      m->be->rope_backward(xk, run_rows(m), m->run_len, m->run_pos[k], nh, m->dh, ld, m->rope);
    else
      m->be->rope_forward(xk, run_rows(m), m->run_len, m->run_pos[k], nh, m->dh, ld, m->rope);
  }
}

uint64_t ts_model_attn_base(const ts_model *m, int l) {
  return ts_index_attn_layer((uint64_t)l, (uint64_t)m->Bg, (uint64_t)m->b0, (uint64_t)m->H,
                             (uint64_t)m->T);
}

// ---- the LM head and the loss, one leaf at a time (--fused-ce) --------------------------
// The same per-leaf calls as the unfused code (a product of `leaf` rows for
// the logits, the row-wise cross-entropy, a product per leaf for dx and for
// the weight partial), so the same bits; only one leaf of logits per slot of
// the scratch exists. The backend runs the leaves (leaf_sum): the CPU on its
// threads, the head's weight partials summed by its canonical tree; a device
// one leaf after another, summed in leaf order (its tolerance tier).

// Logits of leaf li into this slot's scratch.
static float *leaf_logits(const ts_model *m, int64_t li) {
  const int C = m->C, V = m->V, leaf = m->cfg.leaf;
  float *lg = m->ce_scratch + (size_t)omp_get_thread_num() * leaf * V;
  const float *head = m->cfg.tied ? m->p.wte : m->p.lm_head;
  m->be->linear_forward(lg, m->lnf + li * leaf * C, head, NULL, leaf, C, V, leaf);
  return lg;
}

// The losses of leaf li (a leaf_sum with nothing to sum).
static void loss_leaf(const void *vctx, int64_t li, float *out) {
  const ts_model *m = vctx;
  const int leaf = m->cfg.leaf;
  (void)out;
  m->be->crossentropy_forward(m->losses + li * leaf, leaf_logits(m, li), m->targets + li * leaf,
                              leaf, m->V);
}

static void fused_ce_forward(ts_model *m) {
  m->be->leaf_sum(&m->ws, NULL, NULL, 0, m->ntok / m->cfg.leaf, loss_leaf, m);
}

// The head's weight-gradient partial of leaf li into out (V, C); with
// with_dx, also the leaf's rows of dx = dlogits · head into m->dtmp.
static void head_leaf_partial(const ts_model *m, int64_t li, float *out, int with_dx) {
  const int C = m->C, V = m->V, leaf = m->cfg.leaf;
  float *dl = leaf_logits(m, li);
  m->be->crossentropy_backward(dl, dl, m->targets + li * leaf, 1.0f / (float)m->ntok_global, leaf,
                               V);
  // (V, C) = dlogitsᵀ (leaf, V) · lnf (leaf, C)
  if (out) m->be->linear_weight_leaf(out, dl, m->lnf + li * leaf * C, 0, leaf, C, V);
  if (with_dx) { // dx (leaf, C) = dlogits · head (V, C)
    const float *head = m->cfg.tied ? m->p.wte : m->p.lm_head;
    m->be->linear_backward_input(m->dtmp + li * leaf * C, dl, head, leaf, C, V, leaf, 0);
  }
}

static void head_leaf(const void *vctx, int64_t li, float *out) {
  head_leaf_partial((const ts_model *)vctx, li, out, 1);
}

// dx of the head into m->dtmp; the untied head's gradient by the leaves' sum
// now, the tied one's later with the embedding's (wte_leaf).
static int fused_ce_backward(ts_model *m) {
  const int64_t nleaves = m->ntok / m->cfg.leaf;
  float *dst[1] = {m->cfg.tied ? NULL : m->g.lm_head};
  const size_t len[1] = {(size_t)m->V * m->C};
  return m->be->leaf_sum(&m->ws, dst, len, m->cfg.tied ? 0 : 1, nleaves, head_leaf, m);
}

// ---- the variant's pieces -----------------------------------------------------------
// Norms: LayerNorm (GPT) or RMSNorm (LLaMA: no mean, no bias).
static void norm_forward(const ts_model *m, float *out, float *mean, float *rstd, const float *x,
                         const float *w, const float *b) {
  if (m->llama) m->be->rmsnorm_forward(out, rstd, x, w, m->ntok, m->C);
  else m->be->layernorm_forward(out, mean, rstd, x, w, b, m->ntok, m->C);
}

static int norm_backward(ts_model *m, float *dinp, float *dw, float *db, const float *dout,
                         const float *x, const float *w, const float *mean, const float *rstd) {
  if (m->llama) return m->be->rmsnorm_backward(&m->ws, dinp, dw, dout, x, w, rstd, m->ntok, m->C);
  return m->be->layernorm_backward(&m->ws, dinp, dw, db, dout, x, w, mean, rstd, m->ntok, m->C);
}

// The MLP's hidden activation into m->gelu_out: GeLU(W1·a + b1) (GPT) or
// silu(W1·a) ⊙ W3·a (LLaMA), a = m->ln_out.
static void mlp_hidden(ts_model *m, const layer_params *w, layer_acts *a, int project) {
  const int64_t N = m->ntok;
  const int C = m->C, F = m->F, rows = m->cfg.leaf;
  if (project) m->be->linear_forward(a->fch, m->ln_out, w->w1, w->b1, N, C, F, rows);
  if (m->llama) {
    if (project) m->be->linear_forward(a->fup, m->ln_out, w->w3, NULL, N, C, F, rows);
    m->be->swiglu_forward(m->gelu_out, a->fch, a->fup, N * F);
  } else {
    m->be->gelu_forward(m->gelu_out, a->fch, N * F);
  }
}

// Backward of the MLP from dy (m->dtmp, after the dropout mask) to d(a) in
// m->dtmp; the norm output a is recomputed into m->ln_out by the caller's
// norm_forward before the call.
static int mlp_backward(ts_model *m, const layer_params *w, layer_params *g, layer_acts *a) {
  const int64_t N = m->ntok;
  const int C = m->C, F = m->F, rows = m->cfg.leaf;
  ts_ws *ws = &m->ws;
  int rc = 0;
  mlp_hidden(m, w, a, 0); // recomputed, as in the forward
  rc |= m->be->linear_backward_weights(ws, g->w2, g->b2, m->dtmp, m->gelu_out, N, F, C);
  m->be->linear_backward_input(m->dfch, m->dtmp, w->w2, N, F, C, rows, 0);
  if (m->llama) {
    // d(gate) into dfch, d(up) into gelu_out (the hidden activation is used up)
    m->be->swiglu_backward(m->dfch, m->gelu_out, a->fch, a->fup, m->dfch, N * F);
    rc |= m->be->linear_backward_weights(ws, g->w1, NULL, m->dfch, m->ln_out, N, C, F);
    rc |= m->be->linear_backward_weights(ws, g->w3, NULL, m->gelu_out, m->ln_out, N, C, F);
    m->be->linear_backward_input(m->dtmp, m->dfch, w->w1, N, C, F, rows, 0);
    m->be->linear_backward_input(m->dtmp, m->gelu_out, w->w3, N, C, F, rows, 1);
  } else {
    m->be->gelu_backward(m->dfch, a->fch, m->dfch, N * F);
    rc |= m->be->linear_backward_weights(ws, g->w1, g->b1, m->dfch, m->ln_out, N, C, F);
    m->be->linear_backward_input(m->dtmp, m->dfch, w->w1, N, C, F, rows, 0);
  }
  return rc;
}

// ---- the MLP one leaf at a time (--tiled-mlp) --------------------------------------------
// Per leaf of rows, the calls of the untiled MLP on that leaf (products of
// `leaf` rows, element-wise activations, bias rows added after), so the same
// bits; a leaf's hidden activations live in its slot of the scratch only and
// the backward recomputes them. The weight-gradient partials of a leaf are one
// vector [dW2 | db2 | dW1 | db1 | dW3] summed by the backend's leaf_sum: on
// the CPU element by element the same trees as the untiled code's; on a
// device the leaves in order (its tolerance tier).
typedef struct {
  ts_model *m;
  const layer_params *w;
  float *y; // the forward's output
} mlp_leaf_ctx;

static float *mlp_scratch(const ts_model *m) {
  return m->mlp_scratch + (size_t)omp_get_thread_num() * 4 * m->cfg.leaf * m->F;
}

// The leaf's hidden activation (leaf, F) from m->ln_out: returns it; g, u are
// the gate (or pre-GeLU) and up projections in the scratch.
static float *mlp_leaf_hidden(const ts_model *m, const layer_params *w, int64_t li, float **g_out,
                              float **u_out) {
  const int C = m->C, F = m->F, leaf = m->cfg.leaf;
  float *g = mlp_scratch(m), *u = g + (size_t)leaf * F, *h = u + (size_t)leaf * F;
  const float *x = m->ln_out + li * leaf * C;
  m->be->linear_forward(g, x, w->w1, w->b1, leaf, C, F, leaf);
  if (m->llama) {
    m->be->linear_forward(u, x, w->w3, NULL, leaf, C, F, leaf);
    m->be->swiglu_forward(h, g, u, (int64_t)leaf * F);
  } else {
    m->be->gelu_forward(h, g, (int64_t)leaf * F);
  }
  *g_out = g;
  *u_out = u;
  return h;
}

// The leaf's rows of the output (a leaf_sum with nothing to sum).
static void mlp_forward_leaf(const void *vctx, int64_t li, float *out) {
  const mlp_leaf_ctx *c = vctx;
  const ts_model *m = c->m;
  const int C = m->C, F = m->F, leaf = m->cfg.leaf;
  (void)out;
  float *g, *u, *h = mlp_leaf_hidden(m, c->w, li, &g, &u);
  m->be->linear_forward(c->y + li * leaf * C, h, c->w->w2, c->w->b2, leaf, F, C, leaf);
}

static void mlp_forward_tiled(ts_model *m, const layer_params *w, float *y) {
  mlp_leaf_ctx c = {m, w, y};
  m->be->leaf_sum(&m->ws, NULL, NULL, 0, m->ntok / m->cfg.leaf, mlp_forward_leaf, &c);
}

static void mlp_leaf(const void *vctx, int64_t li, float *out) {
  const mlp_leaf_ctx *c = vctx;
  const ts_model *m = c->m;
  const layer_params *w = c->w;
  const int C = m->C, F = m->F, leaf = m->cfg.leaf;
  float *g, *u, *h = mlp_leaf_hidden(m, w, li, &g, &u);
  float *dh = h + (size_t)leaf * F;
  const float *dy = m->dtmp + li * leaf * C, *x = m->ln_out + li * leaf * C;
  float *dW2 = out, *db2 = dW2 + (size_t)C * F, *dW1 = db2 + C, *db1 = dW1 + (size_t)F * C;
  float *dW3 = db1 + F;
  m->be->linear_weight_leaf(dW2, dy, h, 0, leaf, F, C);
  m->be->column_sum(db2, dy, leaf, C, 0);
  m->be->linear_backward_input(dh, dy, w->w2, leaf, F, C, leaf, 0);
  if (m->llama) {
    m->be->swiglu_backward(dh, h, g, u, dh, (int64_t)leaf * F); // d(gate) into dh, d(up) into h
    m->be->linear_weight_leaf(dW1, dh, x, 0, leaf, C, F);
    m->be->linear_weight_leaf(dW3, h, x, 0, leaf, C, F);
  } else {
    m->be->gelu_backward(dh, g, dh, (int64_t)leaf * F);
    m->be->linear_weight_leaf(dW1, dh, x, 0, leaf, C, F);
  }
  m->be->column_sum(db1, dh, leaf, F, 0);
  // dx over the leaf's own rows of m->dtmp: its dy was read above
  float *dx = m->dtmp + li * leaf * C;
  m->be->linear_backward_input(dx, dh, w->w1, leaf, C, F, leaf, 0);
  if (m->llama) m->be->linear_backward_input(dx, h, w->w3, leaf, C, F, leaf, 1);
}

// Backward of the MLP from dy (m->dtmp) to d(norm output) in m->dtmp, with
// m->ln_out the recomputed norm output.
static int mlp_backward_tiled(ts_model *m, const layer_params *w, layer_params *g) {
  const size_t C = (size_t)m->C, F = (size_t)m->F;
  float *dst[5] = {g->w2, g->b2, g->w1, g->b1, g->w3}; // the biases and w3 may be NULL
  const size_t len[5] = {C * F, C, F * C, F, m->llama ? F * C : 0};
  mlp_leaf_ctx c = {m, w, NULL};
  return m->be->leaf_sum(&m->ws, dst, len, 5, m->ntok / m->cfg.leaf, mlp_leaf, &c);
}

// ---- memory per phase (mem.h) -----------------------------------------------------------
// The bytes of the model's own buffers each phase works in, declared to the
// tracker for the phase's span: the MLP's pre-activations, hidden activation
// and their gradients (one leaf per thread with --tiled-mlp); the logits and
// their gradient (one leaf per thread with --fused-ce).
static size_t mlp_phase_bytes(const ts_model *m, int backward) {
  const size_t nF = (size_t)m->ntok * m->F;
  if (m->cfg.tiled_mlp) return tiled_mlp_floats(m, m->ws.nthreads) * sizeof(float);
  // fch (+ fup) and the hidden activation; backward also its gradient
  return ((m->llama ? 3 : 2) + (backward ? 1 : 0)) * nF * sizeof(float);
}

static size_t loss_phase_bytes(const ts_model *m) {
  if (m->cfg.fused_ce) return fused_ce_floats(m, m->ws.nthreads) * sizeof(float);
  return 2 * (size_t)m->ntok * m->V * sizeof(float);
}

static void phase_begin(ts_phase ph, size_t bytes) {
  ts_mem_phase(ph);
  ts_mem_hold(bytes);
}

static void phase_end(size_t bytes) {
  ts_mem_release(bytes);
  ts_mem_phase(TS_PHASE_NONE);
}

// res[l] -> res[l + 1].
static int layer_forward(ts_model *m, int l, uint64_t step, float p) {
  const int C = m->C, F = m->F, rows = m->cfg.leaf;
  const int64_t N = m->ntok;
  int rc;
  if (m->cp->layer_forward) return m->cp->layer_forward(m, l, step, p); // tensor-split layers
  layer_params *w = &m->p.layer[l];
  layer_acts *a = ts_layer_acts(m, l);
  const float *x = m->res[l];
  float *y = m->res[l + 1];
  norm_forward(m, m->ln_out, a->ln1_mean, a->ln1_rstd, x, w->ln1w, w->ln1b);
  // the strategy: Q, K, V and attention, m->ln_out -> a->att (cp.h)
  if ((rc = m->cp->attn_forward(m, l, step, p))) return rc;
  // res_mid = x + dropout(att · Woᵀ + bo)
  m->be->linear_forward(a->res_mid, a->att, w->wo, w->bo, N, C, C, rows);
  dropout_rows(m, a->res_mid, p, TS_RNG_DROPOUT_PROJ, step, l);
  m->be->add(a->res_mid, x, a->res_mid, N * C);
  norm_forward(m, m->ln_out, a->ln2_mean, a->ln2_rstd, a->res_mid, w->ln2w, w->ln2b);
  const size_t mlp_bytes = mlp_phase_bytes(m, 0);
  phase_begin(TS_PHASE_MLP_FWD, mlp_bytes);
  if (m->cfg.tiled_mlp) {
    mlp_forward_tiled(m, w, y);
  } else {
    mlp_hidden(m, w, a, 1);
    m->be->linear_forward(y, m->gelu_out, w->w2, w->b2, N, F, C, rows);
  }
  phase_end(mlp_bytes);
  dropout_rows(m, y, p, TS_RNG_DROPOUT_MLP, step, l);
  m->be->add(y, a->res_mid, y, N * C);
  return TS_OK;
}

float ts_model_forward(ts_model *m, const int *inputs, const int *targets, uint64_t step,
                       int training) {
  const int B = m->B, C = m->C, V = m->V;
  // Linear layers run on leaf-sized row blocks: larger BLAS calls than a tile,
  // and still whole-leaf on every exact layout, so shapes never depend on it.
  const int rows = m->cfg.leaf;
  const int64_t N = m->ntok;
  const float p = training ? m->cfg.dropout : 0.0f;
  memcpy(m->inputs, inputs, (size_t)N * sizeof(int));
  memcpy(m->targets, targets, (size_t)N * sizeof(int));
  m->rc = TS_OK;
  if (m->l0 == 0) {
    for (int k = 0; k < m->nrun; k++) {
      const size_t row = (size_t)k * m->run_len;
      m->be->encoder_forward(m->res[0] + row * C, m->inputs + row, m->p.wte,
                      m->p.wpe ? m->p.wpe + (size_t)m->run_pos[k] * C : NULL,
                      m->nrun == 1 ? B : 1, m->run_len, C);
    }
  } else { // a later pipeline stage: the previous stage's output, decoded (boundary.h)
    m->bd->decode(m, ts_boundary_at(m, m->l0), m->x_in, m->res[m->l0]);
  }
  for (int l = m->l0; l < m->l1; l++) {
    if ((m->rc = layer_forward(m, l, step, p))) return NAN;
    const int b = ts_boundary_at(m, l + 1);
    if (b >= 0 && l + 1 < m->l1) { // a boundary inside: encode and decode back to back
      m->bd->encode(m, b, m->res[l + 1]);
      m->bd->decode(m, b, m->bd->wire(m, b), m->res[l + 1]);
    }
  }
  if (m->l1 < m->L) { // an earlier pipeline stage: no loss here
    m->bd->encode(m, ts_boundary_at(m, m->l1), m->res[m->l1]);
    m->loss_sum = m->loss = 0.0f;
    return 0.0f;
  }
  norm_forward(m, m->lnf, m->lnf_mean, m->lnf_rstd, m->res[m->L], m->p.lnfw, m->p.lnfb);
  const float *head = m->cfg.tied ? m->p.wte : m->p.lm_head;
  phase_begin(TS_PHASE_LOSS, loss_phase_bytes(m));
  if (m->cfg.fused_ce) {
    fused_ce_forward(m);
  } else {
    m->be->linear_forward(m->logits, m->lnf, head, NULL, N, C, V, rows);
    m->be->crossentropy_forward(m->losses, m->logits, m->targets, N, V);
  }
  phase_end(loss_phase_bytes(m));
  // The shard's sum is an aligned subtree of the global loss tree; the
  // trainer combines the shards' sums in tree order (docs/EXACTNESS.md R3).
  m->loss_sum = m->be->token_tree_sum(m->losses, N, m->cfg.leaf);
  m->loss = m->loss_sum / (float)m->ntok_global;
  return m->loss;
}

// ---- backward ----------------------------------------------------------------------
// Leaf partial of dwte under --fused-ce: the tied head's weight gradient, from
// the leaf's logits made again, plus the embedding scatter of the leaf.
static void wte_leaf(const void *vctx, int64_t li, float *out) {
  const ts_model *m = vctx;
  head_leaf_partial(m, li, out, 0);
  m->be->embedding_leaf_scatter(out, m->dres, m->inputs, li, m->cfg.leaf, m->C);
}

// The token embedding's gradient into out (V, C): the tied head's weight
// gradient (with_head) plus the scatter of dres by input token. The CPU sums
// both per leaf in one canonical tree; a device takes its own order (the
// backend's embedding_backward, or leaf_sum's leaves when --fused-ce makes
// the logits leaf by leaf).
static int wte_grad(ts_model *m, int with_head, float *out) {
  const int64_t N = m->ntok;
  if (with_head && m->cfg.fused_ce) {
    float *dst[1] = {out};
    const size_t len[1] = {(size_t)m->V * m->C};
    return m->be->leaf_sum(&m->ws, dst, len, 1, N / m->cfg.leaf, wte_leaf, m);
  }
  return m->be->embedding_backward(&m->ws, out, m->dres, m->inputs, with_head ? m->dlogits : NULL,
                                   m->lnf, N, m->V, m->C);
}

int ts_model_backward(ts_model *m, uint64_t step) {
  int rc = 0, crc; // rc: allocation failures in the trees; crc: a collective's error
  const int B = m->B, T = m->T, C = m->C, V = m->V, Ckv = m->Ckv;
  // Linear layers run on leaf-sized row blocks: larger BLAS calls than a tile,
  // and still whole-leaf on every exact layout, so shapes never depend on it.
  const int rows = m->cfg.leaf;
  const int64_t N = m->ntok;
  const float p = m->cfg.dropout;
  ts_ws *ws = &m->ws;
  if (m->l1 == m->L) {
    // d(mean over the global batch)/d(logit): the same scale on every shard
    phase_begin(TS_PHASE_LOSS, loss_phase_bytes(m));
    if (m->cfg.fused_ce) {
      rc |= fused_ce_backward(m);
    } else {
      m->be->crossentropy_backward(m->dlogits, m->logits, m->targets,
                                  1.0f / (float)m->ntok_global, N, V);
      const float *head = m->cfg.tied ? m->p.wte : m->p.lm_head;
      m->be->linear_backward_input(m->dtmp, m->dlogits, head, N, C, V, rows, 0);
      if (!m->cfg.tied)
        rc |= m->be->linear_backward_weights(ws, m->g.lm_head, NULL, m->dlogits, m->lnf, N, C, V);
    }
    phase_end(loss_phase_bytes(m));
    rc |= norm_backward(m, m->dres, m->g.lnfw, m->g.lnfb, m->dtmp, m->res[m->L], m->p.lnfw,
                        m->lnf_mean, m->lnf_rstd);
  } else { // an earlier pipeline stage: the next stage's gradient of our output, encoded
    if ((crc = m->bd->encode_backward(m, ts_boundary_at(m, m->l1), m->dy_in, m->dres, step)))
      return crc;
  }
  for (int l = m->l1 - 1; l >= m->l0; l--) {
    if (m->cp->layer_backward) { // tensor-split layers
      if ((crc = m->cp->layer_backward(m, l, step))) return crc;
      continue;
    }
    layer_params *w = &m->p.layer[l], *g = &m->g.layer[l];
    layer_acts *a = ts_layer_acts(m, l);
    // checkpointing: the layer's activations again, from its input (same bits;
    // the output it rewrites into res[l + 1] is the same too)
    if (m->cfg.checkpoint && (crc = layer_forward(m, l, step, p))) return crc;
    // MLP branch: y = res_mid + dropout(mlp(norm2(res_mid)))
    m->be->copy(m->dtmp, m->dres, (size_t)N * C * sizeof(float));
    dropout_rows(m, m->dtmp, p, TS_RNG_DROPOUT_MLP, step, l);
    norm_forward(m, m->ln_out, a->ln2_mean, a->ln2_rstd, a->res_mid, w->ln2w, w->ln2b);
    phase_begin(TS_PHASE_MLP_BWD, mlp_phase_bytes(m, 1));
    rc |= m->cfg.tiled_mlp ? mlp_backward_tiled(m, w, g) : mlp_backward(m, w, g, a);
    phase_end(mlp_phase_bytes(m, 1));
    rc |= norm_backward(m, m->dtmp2, g->ln2w, g->ln2b, m->dtmp, a->res_mid, w->ln2w, a->ln2_mean,
                        a->ln2_rstd);
    m->be->add(m->dres, m->dres, m->dtmp2, N * C);
    // attention branch: res_mid = x + dropout(attn(norm1(x)) · Woᵀ + bo)
    m->be->copy(m->dtmp, m->dres, (size_t)N * C * sizeof(float));
    dropout_rows(m, m->dtmp, p, TS_RNG_DROPOUT_PROJ, step, l);
    rc |= m->be->linear_backward_weights(ws, g->wo, g->bo, m->dtmp, a->att, N, C, C);
    m->be->linear_backward_input(m->datt, m->dtmp, w->wo, N, C, C, rows, 0);
    norm_forward(m, m->ln_out, a->ln1_mean, a->ln1_rstd, m->res[l], w->ln1w, w->ln1b);
    // the strategy: m->datt -> m->dq, m->dk, m->dv, the rank's rows (cp.h)
    if ((crc = m->cp->attn_backward(m, l, step))) return crc;
    if (m->llama) { // back through the rotations (row-wise: after the reduce-scatter)
      ts_model_rope_rows(m, m->dq, m->H, C, 1);
      ts_model_rope_rows(m, m->dk, m->Hkv, Ckv, 1);
    }
    rc |= m->be->linear_backward_weights(ws, g->wq, g->bq, m->dq, m->ln_out, N, C, C);
    rc |= m->be->linear_backward_weights(ws, g->wk, g->bk, m->dk, m->ln_out, N, C, Ckv);
    rc |= m->be->linear_backward_weights(ws, g->wv, g->bv, m->dv, m->ln_out, N, C, Ckv);
    m->be->linear_backward_input(m->dtmp, m->dq, w->wq, N, C, C, rows, 0);
    m->be->linear_backward_input(m->dtmp, m->dk, w->wk, N, C, Ckv, rows, 1);
    m->be->linear_backward_input(m->dtmp, m->dv, w->wv, N, C, Ckv, rows, 1);
    rc |= norm_backward(m, m->dtmp2, g->ln1w, g->ln1b, m->dtmp, m->res[l], w->ln1w, a->ln1_mean,
                        a->ln1_rstd);
    m->be->add(m->dres, m->dres, m->dtmp2, N * C);
    const int b = ts_boundary_at(m, l);
    if (b >= 0 && l > m->l0) { // a boundary inside: its two backwards back to back
      if ((crc = m->bd->decode_backward(m, b, m->dres, m->bd->dz(m))) ||
          (crc = m->bd->encode_backward(m, b, m->bd->dz(m), m->dres, step)))
        return crc;
    }
  }
  // a later pipeline stage ends here: dres is the gradient of its input,
  // which goes back as the codec's dz (boundary.h)
  if (m->l0 > 0) {
    if ((crc = m->bd->decode_backward(m, ts_boundary_at(m, m->l0), m->dres, m->bd->dz(m))))
      return crc;
    if (rc) return ts_fail(TS_ERUNTIME, "out of memory in backward (gradient trees)");
    return TS_OK;
  }
  // embeddings: dres is now the gradient of the encoder output
  if (m->g.wpe) {
    // this shard's rows of wpe; the others get nothing from it (docs/ALGORITHMS.md
    // §2: rank s owns rows [t0, t0 + Tl))
    memset(m->g.wpe, 0, (size_t)T * C * sizeof(float));
    for (int k = 0; k < m->nrun; k++)
      rc |= m->be->encoder_backward_wpe(ws, m->g.wpe + (size_t)m->run_pos[k] * C,
                                 m->dres + (size_t)k * m->run_len * C, m->nrun == 1 ? B : 1,
                                 m->run_len, C);
  }
  rc |= wte_grad(m, m->cfg.tied, m->g.wte);
  if (rc) return ts_fail(TS_ERUNTIME, "out of memory in backward (gradient trees)");
  return TS_OK;
}

int ts_model_tied_embedding_grad(ts_model *m, const int *inputs, const int *targets,
                                 const float *res_last, const float *d_emb, float *out) {
  const int C = m->C, V = m->V, rows = m->cfg.leaf;
  const int64_t N = m->ntok;
  memcpy(m->inputs, inputs, (size_t)N * sizeof(int));
  memcpy(m->targets, targets, (size_t)N * sizeof(int));
  // the loss's backward again, as ts_model_forward and ts_model_backward run
  // it: the final norm, and the logits' gradient unless --fused-ce makes them
  // leaf by leaf inside wte_leaf
  norm_forward(m, m->lnf, m->lnf_mean, m->lnf_rstd, res_last, m->p.lnfw, m->p.lnfb);
  if (!m->cfg.fused_ce) {
    m->be->linear_forward(m->logits, m->lnf, m->p.wte, NULL, N, C, V, rows);
    m->be->crossentropy_backward(m->dlogits, m->logits, m->targets,
                                  1.0f / (float)m->ntok_global, N, V);
  }
  m->be->copy(m->dres, d_emb, (size_t)N * C * sizeof(float));
  if (wte_grad(m, 1, out))
    return ts_fail(TS_ERUNTIME, "out of memory (tied embedding gradient tree)");
  return TS_OK;
}

const float *ts_model_last_residual(const ts_model *m) { return m->res[m->L]; }
const float *ts_model_embedding_dgrad(const ts_model *m) { return m->dres; }

// ---- accessors ---------------------------------------------------------------------
int ts_model_num_tensors(const ts_model *m) { return m->ntens; }

void ts_model_tensors(ts_model *m, ts_tensor *params, ts_tensor *grads) {
  if (params) memcpy(params, m->ptens, (size_t)m->ntens * sizeof(ts_tensor));
  if (grads) memcpy(grads, m->gtens, (size_t)m->ntens * sizeof(ts_tensor));
}

size_t ts_model_num_params(const ts_model *m) { return m->nparams; }
float *ts_model_params(ts_model *m) { return m->params; }
float *ts_model_grads(ts_model *m) { return m->grads; }
const float *ts_model_logits(const ts_model *m) { return m->cfg.fused_ce ? NULL : m->logits; }
float ts_model_loss_sum(const ts_model *m) { return m->loss_sum; }
int ts_model_status(const ts_model *m) { return m->rc; }
void ts_model_select_sequence(ts_model *m, int b_begin) { m->b0 = b_begin; }
void ts_model_positions(const ts_model *m, int *t_begin, int *t_count) {
  *t_begin = m->t0;
  *t_count = m->Tl;
}

void ts_model_set_stage(ts_model *m, int l0, int l1) {
  m->l0 = l0;
  m->l1 = l1;
}
void ts_model_set_stage_input(ts_model *m, const void *x) { m->x_in = x; }
void ts_model_set_stage_grad(ts_model *m, const float *dy) { m->dy_in = dy; }
const void *ts_model_stage_output(const ts_model *m) {
  return m->bd->wire(m, ts_boundary_at(m, m->l1));
}
const float *ts_model_stage_dinput(const ts_model *m) { return m->bd->dz(m); }
size_t ts_model_boundary_bytes(const ts_model *m, int backward) {
  return m->bd->wire_bytes(&m->cfg, backward);
}

int ts_model_runs(const ts_model *m, int *pos, int *len) {
  for (int k = 0; k < m->nrun; k++) pos[k] = m->run_pos[k];
  *len = m->run_len;
  return m->nrun;
}
const ts_config *ts_model_config(const ts_model *m) { return &m->cfg; }
size_t ts_model_activation_bytes(const ts_model *m) {
  size_t scratch = 0; // the memory options' per-thread leaves
  if (m->cfg.fused_ce) scratch += fused_ce_floats(m, m->ws.nthreads);
  if (m->cfg.tiled_mlp) scratch += tiled_mlp_floats(m, m->ws.nthreads);
  return (m->nacts + scratch) * sizeof(float) + (m->cp->bytes ? m->cp->bytes(m) : 0);
}

double ts_model_flops_per_token(const ts_model *m) {
  // non-embedding parameters: everything but wte and wpe (a tied head is the
  // embedding; an untied head counts)
  double nonemb = (double)m->nparams - (double)m->V * m->C - (m->llama ? 0.0 : (double)m->T * m->C);
  return 6.0 * nonemb + 6.0 * m->L * (double)m->T * m->C;
}
