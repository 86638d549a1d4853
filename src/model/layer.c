// One transformer layer, forward and backward: the norms, the strategy's
// attention (src/cp/strategy.h) and the output projection, the MLP (mlp.c),
// dropout and the residuals; and the per-run pieces every layer uses (the
// dropout indices and rotations of the rank's rows).
#include "cp/strategy.h"
#include "exact/index.h"
#include "exact/rng.h"
#include "model_impl.h"

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
static int64_t run_rows(const ts_model *m) { return m->runs.n == 1 ? m->ntok : m->runs.len; }

// Dropout of the rank's rows (width C), by the global index of each run.
static void dropout_rows(const ts_model *m, float *x, float p, uint32_t purpose, uint64_t step,
                         int l) {
  for (int k = 0; k < m->runs.n; k++)
    m->be->dropout_apply(x + (size_t)k * m->runs.len * m->C, run_rows(m) * m->C, p, m->cfg.seed,
                         purpose, step, row_base_at(m, l, m->runs.pos[k]));
}

void ts_model_rope_rows(const ts_model *m, float *x, int nh, int ld, int backward) {
  ts_rope_runs(m->be, &m->runs, m->ntok, m->dh, m->llama ? m->rope : NULL, x, nh, ld, backward);
}

uint64_t ts_model_attn_base(const ts_model *m, int l) {
  return ts_index_attn_layer((uint64_t)l, (uint64_t)m->Bg, (uint64_t)m->b0, (uint64_t)m->H,
                             (uint64_t)m->T);
}

// ---- the variant's norms ---------------------------------------------------------
// Norms: LayerNorm (GPT) or RMSNorm (LLaMA: no mean, no bias).
void ts_model_norm_forward(const ts_model *m, float *out, float *mean, float *rstd, const float *x,
                           const float *w, const float *b) {
  if (m->llama) m->be->rmsnorm_forward(out, rstd, x, w, m->ntok, m->C);
  else m->be->layernorm_forward(out, mean, rstd, x, w, b, m->ntok, m->C);
}

int ts_model_norm_backward(ts_model *m, float *dinp, float *dw, float *db, const float *dout,
                           const float *x, const float *w, const float *mean,
                           const float *rstd) {
  if (m->llama) return m->be->rmsnorm_backward(&m->ws, dinp, dw, dout, x, w, rstd, m->ntok, m->C);
  return m->be->layernorm_backward(&m->ws, dinp, dw, db, dout, x, w, mean, rstd, m->ntok, m->C);
}

// ---- the layer ------------------------------------------------------------------
// A tensor split runs the whole layer at the layer seam (strategy.h).
static int split_layer(ts_model *m, int l, uint64_t step, float p, int backward) {
  ts_layer_io io;
  ts_layer_io_fill(m, l, step, p, &io);
  return backward ? m->cp->layer_backward(&io) : m->cp->layer_forward(&io);
}

// res[l] -> res[l + 1].
int ts_layer_forward(ts_model *m, int l, uint64_t step, float p) {
  const int C = m->C, rows = m->cfg.leaf;
  const int64_t N = m->ntok;
  int rc;
  if (m->cp->layer_forward) return split_layer(m, l, step, p, 0); // tensor-split layers
  layer_params *w = &m->p.layer[l];
  layer_acts *a = ts_layer_acts(m, l);
  const float *x = m->res[l];
  float *y = m->res[l + 1];
  ts_model_norm_forward(m, m->ln_out, a->ln1_mean, a->ln1_rstd, x, w->ln1w, w->ln1b);
  // the strategy: Q, K, V and attention, m->ln_out -> a->att (strategy.h)
  ts_attn_io io;
  ts_attn_io_layer(m, l, step, p, &io);
  if ((rc = m->cp->attn_forward(&io))) return rc;
  // res_mid = x + dropout(att · Woᵀ + bo)
  m->be->linear_forward(a->res_mid, a->att, w->wo, w->bo, N, C, C, rows);
  dropout_rows(m, a->res_mid, p, TS_RNG_DROPOUT_PROJ, step, l);
  m->be->add(a->res_mid, x, a->res_mid, N * C);
  ts_model_norm_forward(m, m->ln_out, a->ln2_mean, a->ln2_rstd, a->res_mid, w->ln2w, w->ln2b);
  ts_mlp_forward(m, w, a, y);
  dropout_rows(m, y, p, TS_RNG_DROPOUT_MLP, step, l);
  m->be->add(y, a->res_mid, y, N * C);
  return TS_OK;
}

// dres: the gradient of res[l + 1] in, of res[l] out; layer l's gradients.
// Returns a collective's error at once; allocation failures of the gradient
// trees are or-ed into *oom and reported when the backward has ended, so that
// every rank still joins every collective.
int ts_layer_backward(ts_model *m, int l, uint64_t step, int *oom) {
  const int C = m->C, Ckv = m->Ckv, rows = m->cfg.leaf;
  const int64_t N = m->ntok;
  const float p = m->cfg.dropout;
  ts_ws *ws = &m->ws;
  int rc = 0, crc;
  if (m->cp->layer_backward) return split_layer(m, l, step, p, 1); // tensor-split layers
  layer_params *w = &m->p.layer[l], *g = &m->g.layer[l];
  layer_acts *a = ts_layer_acts(m, l);
  // checkpointing: the layer's activations again, from its input (same bits;
  // the output it rewrites into res[l + 1] is the same too)
  if (m->cfg.checkpoint && (crc = ts_layer_forward(m, l, step, p))) return crc;
  // MLP branch: y = res_mid + dropout(mlp(norm2(res_mid)))
  m->be->copy(m->dtmp, m->dres, (size_t)N * C * sizeof(float));
  dropout_rows(m, m->dtmp, p, TS_RNG_DROPOUT_MLP, step, l);
  ts_model_norm_forward(m, m->ln_out, a->ln2_mean, a->ln2_rstd, a->res_mid, w->ln2w, w->ln2b);
  rc |= ts_mlp_backward(m, w, g, a);
  rc |= ts_model_norm_backward(m, m->dtmp2, g->ln2w, g->ln2b, m->dtmp, a->res_mid, w->ln2w, a->ln2_mean,
                      a->ln2_rstd);
  m->be->add(m->dres, m->dres, m->dtmp2, N * C);
  // attention branch: res_mid = x + dropout(attn(norm1(x)) · Woᵀ + bo)
  m->be->copy(m->dtmp, m->dres, (size_t)N * C * sizeof(float));
  dropout_rows(m, m->dtmp, p, TS_RNG_DROPOUT_PROJ, step, l);
  rc |= m->be->linear_backward_weights(ws, g->wo, g->bo, m->dtmp, a->att, N, C, C);
  m->be->linear_backward_input(m->datt, m->dtmp, w->wo, N, C, C, rows, 0);
  ts_model_norm_forward(m, m->ln_out, a->ln1_mean, a->ln1_rstd, m->res[l], w->ln1w, w->ln1b);
  // the strategy: m->datt -> m->dq, m->dk, m->dv, the rank's rows (strategy.h)
  ts_attn_io io;
  ts_attn_io_layer(m, l, step, p, &io);
  if ((crc = m->cp->attn_backward(&io))) return crc;
  if (!m->cp->forms_dx) { // (a forms_dx strategy has formed all of this: io.dx = m->dtmp)
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
  }
  rc |= ts_model_norm_backward(m, m->dtmp2, g->ln1w, g->ln1b, m->dtmp, m->res[l], w->ln1w, a->ln1_mean,
                      a->ln1_rstd);
  m->be->add(m->dres, m->dres, m->dtmp2, N * C);
  *oom |= rc;
  return TS_OK;
}
