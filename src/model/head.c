// The ends of the model: the LM head and the loss (whole, or one leaf of
// logits at a time with --fused-ce, same bits), and the embeddings'
// gradients, the tied head's included.
#include <omp.h>
#include <string.h>

#include "model_impl.h"
#include "run_partials.h"

// The bytes of the logits and their gradient (one leaf per slot with
// --fused-ce), declared to the tracker (mem.h) for the loss's span.
static size_t loss_phase_bytes(const ts_model *m) {
  if (m->cfg.fused_ce) return ts_model_fused_ce_floats(m, m->ws.nthreads) * sizeof(float);
  return 2 * (size_t)m->ntok * m->V * sizeof(float);
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

// The final norm, the head and the loss of the rank's rows: m->losses and
// their canonical-tree sum m->loss_sum.
void ts_head_forward(ts_model *m) {
  const int C = m->C, V = m->V, rows = m->cfg.leaf;
  const int64_t N = m->ntok;
  ts_model_norm_forward(m, m->lnf, m->lnf_mean, m->lnf_rstd, m->res[m->L], m->p.lnfw, m->p.lnfb);
  const float *head = m->cfg.tied ? m->p.wte : m->p.lm_head;
  ts_phase_begin(TS_PHASE_LOSS, loss_phase_bytes(m));
  if (m->cfg.fused_ce) {
    fused_ce_forward(m);
  } else {
    m->be->linear_forward(m->logits, m->lnf, head, NULL, N, C, V, rows);
    m->be->crossentropy_forward(m->losses, m->logits, m->targets, N, V);
  }
  ts_phase_end(loss_phase_bytes(m));
  // The shard's sum is an aligned subtree of the global loss tree; the
  // trainer combines the shards' sums in tree order (docs/EXACTNESS.md R3).
  m->loss_sum = m->be->token_tree_sum(m->losses, N, m->cfg.leaf);
}

// The loss's backward to the gradient of the last residual in m->dres: the
// logits' gradient, the head's weight gradient (untied), the final norm.
// Returns allocation failures of the gradient trees (non-zero).
int ts_head_backward(ts_model *m) {
  const int C = m->C, V = m->V, rows = m->cfg.leaf;
  const int64_t N = m->ntok;
  ts_ws *ws = &m->ws;
  int rc = 0;
  // d(mean over the global batch)/d(logit): the same scale on every shard
  ts_phase_begin(TS_PHASE_LOSS, loss_phase_bytes(m));
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
  ts_phase_end(loss_phase_bytes(m));
  rc |= ts_model_norm_backward(m, m->dres, m->g.lnfw, m->g.lnfb, m->dtmp, m->res[m->L], m->p.lnfw,
                      m->lnf_mean, m->lnf_rstd);
  return rc;
}

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

// The embeddings' gradients from m->dres, the gradient of the encoder
// output. Returns allocation failures of the gradient trees (non-zero).
int ts_embedding_backward(ts_model *m) {
  const int B = m->B, T = m->T, C = m->C;
  ts_ws *ws = &m->ws;
  int rc = 0;
  // embeddings: dres is now the gradient of the encoder output
  if (m->g.wpe) {
    // this shard's rows of wpe; the others get nothing from it (docs/ALGORITHMS.md
    // §2: rank s owns rows [t0, t0 + Tl))
    // (held by rows: the rank's rows alone, run after run)
    memset(m->g.wpe, 0, (size_t)(m->wpe_rows ? m->Tl : T) * C * sizeof(float));
    for (int k = 0; k < m->runs.n; k++)
      rc |= m->be->encoder_backward_wpe(ws, m->g.wpe + (m->wpe_rows ? (size_t)k * m->runs.len
                                                                      : (size_t)m->runs.pos[k]) * C,
                                 m->dres + (size_t)k * m->runs.len * C, m->runs.n == 1 ? B : 1,
                                 m->runs.len, C);
  }
  // (a pipeline's first stage holds a tied embedding as a copy, without a
  // gradient: the last stage computes all of it, ts_model_tied_embedding_grad)
  if (m->g.wte) rc |= wte_grad(m, m->cfg.tied, m->g.wte);
  return rc;
}

int ts_model_tied_embedding_grad(ts_model *m, const int *inputs, const int *targets,
                                 const float *res_last, const float *d_emb, float *out,
                                 float *out2) {
  const int C = m->C, V = m->V, rows = m->cfg.leaf;
  const int64_t N = m->ntok;
  memcpy(m->inputs, inputs, (size_t)N * sizeof(int));
  memcpy(m->targets, targets, (size_t)N * sizeof(int));
  // the loss's backward again, as ts_model_forward and ts_model_backward run
  // it: the final norm, and the logits' gradient unless --fused-ce makes them
  // leaf by leaf inside wte_leaf
  ts_model_norm_forward(m, m->lnf, m->lnf_mean, m->lnf_rstd, res_last, m->p.lnfw, m->p.lnfb);
  if (!m->cfg.fused_ce) {
    m->be->linear_forward(m->logits, m->lnf, m->p.wte, NULL, N, C, V, rows);
    m->be->crossentropy_backward(m->dlogits, m->logits, m->targets,
                                  1.0f / (float)m->ntok_global, N, V);
  }
  m->be->copy(m->dres, d_emb, (size_t)N * C * sizeof(float));
  // a rank of two runs: the second run's partial into out2 (run_partials.c)
  if (m->rp && !out2)
    return ts_fail(TS_ERUNTIME, "tied embedding: no buffer for the second run's partial");
  if (m->rp) ts_run_partials_outside(m, out, out2, (size_t)V * C);
  const int rc = wte_grad(m, 1, out);
  if (m->rp) ts_run_partials_outside(m, NULL, NULL, 0);
  if (rc) return ts_fail(TS_ERUNTIME, "out of memory (tied embedding gradient tree)");
  return TS_OK;
}

const float *ts_model_last_residual(const ts_model *m) { return m->res[m->L]; }
const float *ts_model_embedding_dgrad(const ts_model *m) { return m->dres; }

