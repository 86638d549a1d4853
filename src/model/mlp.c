// The MLP of a layer, y = W2·act(W1·a + b1) + b2 (GPT: GeLU; LLaMA: SwiGLU
// with W3), whole or one leaf of rows at a time (--tiled-mlp, same bits).
#include <omp.h>

#include "model_impl.h"

// The bytes of the MLP's own buffers the phase works in, declared to the
// tracker (mem.h) for its span: the pre-activations, the hidden activation
// and (backward) its gradient, or one leaf per slot with --tiled-mlp.
static size_t mlp_phase_bytes(const ts_model *m, int backward) {
  const size_t nF = (size_t)m->ntok * m->F;
  if (m->cfg.tiled_mlp) return ts_model_tiled_mlp_floats(m, m->ws.nthreads) * sizeof(float);
  // fch (+ fup) and the hidden activation; backward also its gradient
  return ((m->llama ? 3 : 2) + (backward ? 1 : 0)) * nF * sizeof(float);
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

// ---- the layer's calls ------------------------------------------------------------
void ts_mlp_forward(ts_model *m, const layer_params *w, layer_acts *a, float *y) {
  const int C = m->C, F = m->F, rows = m->cfg.leaf;
  const size_t bytes = mlp_phase_bytes(m, 0);
  ts_phase_begin(TS_PHASE_MLP_FWD, bytes);
  if (m->cfg.tiled_mlp) {
    mlp_forward_tiled(m, w, y);
  } else {
    mlp_hidden(m, w, a, 1);
    m->be->linear_forward(y, m->gelu_out, w->w2, w->b2, m->ntok, F, C, rows);
  }
  ts_phase_end(bytes);
}

int ts_mlp_backward(ts_model *m, const layer_params *w, layer_params *g, layer_acts *a) {
  const size_t bytes = mlp_phase_bytes(m, 1);
  ts_phase_begin(TS_PHASE_MLP_BWD, bytes);
  int rc = m->cfg.tiled_mlp ? mlp_backward_tiled(m, w, g) : mlp_backward(m, w, g, a);
  ts_phase_end(bytes);
  return rc;
}
