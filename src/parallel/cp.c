// The strategy registry and the pieces several strategies share (strategy.h, cp.h).
#include "parallel/cp.h"

#include "kernels.h"

#define TS_CP(ID, NAME, TABLE) extern const ts_cp TABLE;
#include "parallel/strategies.def"
#undef TS_CP

static const ts_cp *const registry[TS_SP_NMODES] = {
#define TS_CP(ID, NAME, TABLE) [TS_SP_##ID] = &TABLE,
#include "parallel/strategies.def"
#undef TS_CP
};

const char *const ts_sp_mode_names[TS_SP_NMODES] = {
#define TS_CP(ID, NAME, TABLE) [TS_SP_##ID] = NAME,
#include "parallel/strategies.def"
#undef TS_CP
};

const ts_cp *ts_cp_get(ts_sp_mode mode) {
  return (int)mode >= 0 && mode < TS_SP_NMODES ? registry[mode] : NULL;
}

void ts_cp_positions(const ts_cp *cp, int n, int r, int T, ts_cp_runs *out) {
  if (cp->positions) {
    cp->positions(n, r, T, out);
    return;
  }
  *out = (ts_cp_runs){.n = 1, .len = T / n, .pos = {r * (T / n)}};
}

void ts_cp_project_q(ts_model *m, const layer_params *w, float *q) {
  m->be->linear_forward_heads(q, m->ln_out, w->wq, w->bq, m->ntok, m->C, m->C, m->dh, m->cfg.leaf);
  ts_model_rope_rows(m, q, m->H, m->C, 0);
}

void ts_cp_project_kv(ts_model *m, const layer_params *w, float *k, float *v) {
  const int C = m->C, Ckv = m->Ckv, dh = m->dh, rows = m->cfg.leaf;
  m->be->linear_forward_heads(k, m->ln_out, w->wk, w->bk, m->ntok, C, Ckv, dh, rows);
  m->be->linear_forward_heads(v, m->ln_out, w->wv, w->bv, m->ntok, C, Ckv, dh, rows);
  ts_model_rope_rows(m, k, m->Hkv, Ckv, 0);
}

void ts_cp_zigzag_positions(int n, int r, int T, ts_cp_runs *out) {
  const int len = T / (2 * n);
  *out = (ts_cp_runs){.n = 2, .len = len, .pos = {r * len, (2 * n - 1 - r) * len}};
}

ts_attn_shape ts_cp_attn_shape(const ts_model *m, int l, float p, uint64_t step) {
  ts_attn_shape as = {.B = m->B, .T = m->T, .H = m->H, .dh = m->dh, .tile = m->cfg.tile,
                      .dropout = p, .seed = m->cfg.seed, .step = step,
                      .index_base = ts_model_attn_base(m, l), .Tq = m->Tl, .q0 = m->t0,
                      .Tk = m->T, .Hkv = m->Hkv};
  return as;
}
