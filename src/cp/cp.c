// The strategy registry and the pieces several strategies share (strategy.h, cp.h).
#include "cp.h"

#include "backend/kernels.h"

#define TS_CP(ID, NAME, TABLE) extern const ts_cp TABLE;
#include "strategies.def"
#undef TS_CP

static const ts_cp *const registry[TS_SP_NMODES] = {
#define TS_CP(ID, NAME, TABLE) [TS_SP_##ID] = &TABLE,
#include "strategies.def"
#undef TS_CP
};

const char *const ts_sp_mode_names[TS_SP_NMODES] = {
#define TS_CP(ID, NAME, TABLE) [TS_SP_##ID] = NAME,
#include "strategies.def"
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

void ts_rope_runs(const ts_backend *be, const ts_cp_runs *runs, int64_t rows, int dh,
                  const float *rope, float *x, int nh, int ld, int backward) {
  if (!rope) return;
  const int64_t run_rows = runs->n == 1 ? rows : runs->len; // one run: the B sequences
  for (int k = 0; k < runs->n; k++) {
    float *xk = x + (size_t)k * runs->len * ld;
    if (backward) be->rope_backward(xk, run_rows, runs->len, runs->pos[k], nh, dh, ld, rope);
    else be->rope_forward(xk, run_rows, runs->len, runs->pos[k], nh, dh, ld, rope);
  }
}

void ts_cp_rope(const ts_attn_io *io, float *x, int nh, int ld) {
  ts_rope_runs(io->be, &io->runs, io->ntok, io->dh, io->rope, x, nh, ld, 0);
}

void ts_cp_project_q(const ts_attn_io *io, float *q) {
  io->be->linear_forward_heads(q, io->x, io->wq, io->bq, io->ntok, io->C, io->C, io->dh,
                               io->cfg->leaf);
  ts_cp_rope(io, q, io->H, io->C);
}

void ts_cp_project_kv(const ts_attn_io *io, float *k, float *v) {
  const int C = io->C, Ckv = io->Ckv, dh = io->dh, rows = io->cfg->leaf;
  io->be->linear_forward_heads(k, io->x, io->wk, io->bk, io->ntok, C, Ckv, dh, rows);
  io->be->linear_forward_heads(v, io->x, io->wv, io->bv, io->ntok, C, Ckv, dh, rows);
  ts_cp_rope(io, k, io->Hkv, Ckv);
}

void ts_cp_zigzag_positions(int n, int r, int T, ts_cp_runs *out) {
  const int len = T / (2 * n);
  *out = (ts_cp_runs){.n = 2, .len = len, .pos = {r * len, (2 * n - 1 - r) * len}};
}
