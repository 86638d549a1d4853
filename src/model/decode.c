// Incremental decoding (tessera sample, docs/SAMPLING.md): the forward of one
// sequence fed a few tokens at a time, each layer's keys and values of the
// positions already fed kept in a cache, so a new token costs one block of
// rows and one query tile of attention against the cache, not a forward over
// the whole context.
//
// The bits are the training forward's. Its row-wise work (linear layers) is
// the canonical product, each element its own chain whatever the call's shape
// or the other rows' values (docs/EXACTNESS.md R1); its attention
// walks a query tile's key tiles from the diagonal down (R2). So the decoder
// makes the same calls on the leaf that holds the new rows (rows it has not
// fed yet are zeros, rows fed before keep what they last held: they only
// fill the call's shape) and runs the canonical attention kernel on the query
// tiles that hold them, against the cached keys. A cached key row beyond the
// fed positions is masked in the diagonal tile and contributes an exact zero,
// as a later token does in the full forward. Every position's logits are then
// the training forward's bit for bit, on any backend whose kernels give a row
// bits independent of the other rows (the CPU's; tests/test_sample.c).
//
// Everything runs through the model's backend (backend.h); the decoder's
// buffers are the backend's, like the model's.
#include <stdlib.h>
#include <string.h>

#include "model_impl.h"

struct ts_decoder {
  ts_model *m;
  int pos;         // positions fed so far
  float **kc, **vc; // per layer: (T, Ckv) keys (rotated) and values of the positions fed
  // One leaf of rows (leaf, width), the block the current rows sit in.
  float *x, *ln, *q, *k, *v, *att, *mid, *fch, *fup, *hid, *lse, *mean, *rstd, *logits;
  int *tokens;
  float *mem; // the one allocation the float buffers are views of
};

// Floats of the decoder's buffers: the caches, then the block's.
static size_t decoder_floats(const ts_model *m, size_t *cache) {
  const size_t T = (size_t)m->T, R = (size_t)m->cfg.leaf, C = (size_t)m->C;
  const size_t Ckv = (size_t)m->Ckv, F = (size_t)m->F, V = (size_t)m->V, H = (size_t)m->H;
  *cache = 2 * (size_t)m->L * T * Ckv;
  // x, ln, q, att, mid | k, v | fch, fup, hid | lse (H rows) | mean, rstd | logits
  return *cache + R * (5 * C + 2 * Ckv + 3 * F + H + 2 + V);
}

int ts_decoder_create(ts_model *m, ts_decoder **out) {
  *out = NULL;
  if (m->l0 != 0 || m->l1 != m->L || m->seq || m->B != 1)
    return ts_fail(TS_ERUNTIME, "decoding needs the whole model of one sequence");
  if (m->cfg.compress != TS_COMPRESS_NONE)
    return ts_fail(TS_ERUNTIME, "decoding a model with stage-boundary compression (--compress "
                                "%s) is not supported",
                   ts_compress_names[m->cfg.compress]);
  ts_decoder *d = calloc(1, sizeof *d);
  if (!d) return ts_fail(TS_ERUNTIME, "out of memory");
  d->m = m;
  size_t cache, n = decoder_floats(m, &cache);
  d->kc = calloc((size_t)m->L, sizeof *d->kc);
  d->vc = calloc((size_t)m->L, sizeof *d->vc);
  d->mem = m->be->alloc(n * sizeof(float));
  d->tokens = m->be->alloc((size_t)m->cfg.leaf * sizeof(int));
  if (!d->kc || !d->vc || !d->mem || !d->tokens) {
    ts_decoder_free(d);
    return ts_fail(TS_ERUNTIME, "out of memory allocating the decoder's %.1f MB",
                   (double)n * sizeof(float) / 1e6);
  }
  // Host writes: the backend's buffers are host memory or managed (backend.h).
  memset(d->mem, 0, n * sizeof(float));
  memset(d->tokens, 0, (size_t)m->cfg.leaf * sizeof(int));
  const size_t T = (size_t)m->T, R = (size_t)m->cfg.leaf, C = (size_t)m->C;
  const size_t Ckv = (size_t)m->Ckv, F = (size_t)m->F;
  float *p = d->mem;
  for (int l = 0; l < m->L; l++) {
    d->kc[l] = p, p += T * Ckv;
    d->vc[l] = p, p += T * Ckv;
  }
  float **views[] = {&d->x, &d->ln, &d->q, &d->att, &d->mid};
  for (int i = 0; i < 5; i++) *views[i] = p, p += R * C;
  d->k = p, p += R * Ckv;
  d->v = p, p += R * Ckv;
  d->fch = p, p += R * F;
  d->fup = p, p += R * F;
  d->hid = p, p += R * F;
  d->lse = p, p += R * (size_t)m->H;
  d->mean = p, p += R;
  d->rstd = p, p += R;
  d->logits = p;
  *out = d;
  return TS_OK;
}

void ts_decoder_free(ts_decoder *d) {
  if (!d) return;
  if (d->mem) d->m->be->free(d->mem);
  if (d->tokens) d->m->be->free(d->tokens);
  free(d->kc);
  free(d->vc);
  free(d);
}

int ts_decoder_pos(const ts_decoder *d) { return d->pos; }

// The variant's norm of the block's rows.
static void norm_rows(const ts_decoder *d, float *out, const float *x, const float *w,
                      const float *b) {
  const ts_model *m = d->m;
  const int R = m->cfg.leaf;
  if (m->llama) m->be->rmsnorm_forward(out, d->rstd, x, w, R, m->C);
  else m->be->layernorm_forward(out, d->mean, d->rstd, x, w, b, R, m->C);
}

// Layer l on the block starting at position blk, whose rows [r0, r1) are new:
// d->x in, d->x out (layer.c's ts_layer_forward without dropout, on a leaf).
static void layer_block(ts_decoder *d, int l, int blk, int r0, int r1) {
  ts_model *m = d->m;
  const ts_backend *be = m->be;
  const layer_params *w = &m->p.layer[l];
  const int R = m->cfg.leaf, C = m->C, Ckv = m->Ckv, dh = m->dh, F = m->F, tile = m->cfg.tile;
  norm_rows(d, d->ln, d->x, w->ln1w, w->ln1b);
  // Q, K, V one call per head on the leaf (cp.c's projections), rotated at their positions
  be->linear_forward_heads(d->q, d->ln, w->wq, w->bq, R, C, C, dh, R);
  be->linear_forward_heads(d->k, d->ln, w->wk, w->bk, R, C, Ckv, dh, R);
  be->linear_forward_heads(d->v, d->ln, w->wv, w->bv, R, C, Ckv, dh, R);
  if (m->llama) {
    be->rope_forward(d->q, R, R, blk, m->H, dh, C, m->rope);
    be->rope_forward(d->k, R, R, blk, m->Hkv, dh, Ckv, m->rope);
  }
  // the new rows' keys and values into the cache
  const size_t nkv = (size_t)(r1 - r0) * Ckv * sizeof(float);
  be->copy(d->kc[l] + (size_t)(blk + r0) * Ckv, d->k + (size_t)r0 * Ckv, nkv);
  be->copy(d->vc[l] + (size_t)(blk + r0) * Ckv, d->v + (size_t)r0 * Ckv, nkv);
  // the query tiles that hold the new rows, against the cache's keys up to their last
  const int ta = r0 / tile * tile, tb = (r1 + tile - 1) / tile * tile; // block rows [ta, tb)
  ts_attn_shape as = {.B = 1, .T = m->T, .H = m->H, .dh = dh, .tile = tile, .Tq = tb - ta,
                      .q0 = blk + ta, .Tk = blk + tb, .Hkv = m->Hkv};
  be->attention_forward(&m->ws, d->att + (size_t)ta * C, d->lse,
                        d->q + (size_t)ta * C, d->kc[l], d->vc[l], &as);
  // mid = x + att · Woᵀ + bo; x = mid + MLP(norm2(mid)) (mlp.c)
  be->linear_forward(d->mid, d->att, w->wo, w->bo, R, C, C, R);
  be->add(d->mid, d->x, d->mid, (int64_t)R * C);
  norm_rows(d, d->ln, d->mid, w->ln2w, w->ln2b);
  be->linear_forward(d->fch, d->ln, w->w1, w->b1, R, C, F, R);
  if (m->llama) {
    be->linear_forward(d->fup, d->ln, w->w3, NULL, R, C, F, R);
    be->swiglu_forward(d->hid, d->fch, d->fup, (int64_t)R * F);
  } else {
    be->gelu_forward(d->hid, d->fch, (int64_t)R * F);
  }
  be->linear_forward(d->x, d->hid, w->w2, w->b2, R, F, C, R);
  be->add(d->x, d->mid, d->x, (int64_t)R * C);
}

// Feeds rows [r0, r1) of the block at position blk; their logits into d->logits.
static void feed_block(ts_decoder *d, const int *tokens, int blk, int r0, int r1) {
  const ts_model *m = d->m;
  const int R = m->cfg.leaf, C = m->C;
  memcpy(d->tokens + r0, tokens, (size_t)(r1 - r0) * sizeof(int));
  // the block's residual stream starts again from the embeddings of its rows
  // (rows before r0 hold what the last layer left: any values, see above)
  m->be->encoder_forward(d->x + (size_t)r0 * C, d->tokens + r0, m->p.wte,
                         m->p.wpe ? m->p.wpe + (size_t)(blk + r0) * C : NULL, 1, r1 - r0, C);
  for (int l = 0; l < m->L; l++) layer_block(d, l, blk, r0, r1);
  norm_rows(d, d->ln, d->x, m->p.lnfw, m->p.lnfb);
  const float *head = m->cfg.tied ? m->p.wte : m->p.lm_head;
  m->be->linear_forward(d->logits, d->ln, head, NULL, R, C, m->V, R);
}

int ts_decoder_feed(ts_decoder *d, const int *tokens, int n, float *logits, int all) {
  const ts_model *m = d->m;
  const int R = m->cfg.leaf, V = m->V;
  if (n < 1 || n > m->T - d->pos)
    return ts_fail(TS_EUSAGE, "%d tokens after %d: beyond the model's context of %d positions",
                   n, d->pos, m->T);
  for (int i = 0; i < n; i++)
    if (tokens[i] < 0 || tokens[i] >= V)
      return ts_fail(TS_EUSAGE, "token %d is outside the model's vocabulary of %d", tokens[i], V);
  int done = 0;
  while (done < n) {
    const int pos = d->pos, blk = pos / R * R, r0 = pos - blk;
    const int r1 = n - done < R - r0 ? r0 + n - done : R;
    if (r0 == 0) // a new block: no row of it has been fed (the zeros of above)
      memset(d->x, 0, (size_t)R * m->C * sizeof(float));
    feed_block(d, tokens + done, blk, r0, r1);
    // Host reads of the backend's buffers: every operation has finished (backend.h).
    if (all)
      memcpy(logits + (size_t)done * V, d->logits + (size_t)r0 * V,
             (size_t)(r1 - r0) * V * sizeof(float));
    else if (done + (r1 - r0) == n)
      memcpy(logits, d->logits + (size_t)(r1 - 1) * V, (size_t)V * sizeof(float));
    done += r1 - r0;
    d->pos = pos + (r1 - r0);
  }
  return TS_OK;
}
