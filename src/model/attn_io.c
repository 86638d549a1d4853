// The seams' io for strategies (cp/strategy.h): what a strategy sees of
// the model at the attention seam and, for a tensor split, at the layer seam,
// filled here from the model's geometry, buffers and layer l's tensors. The
// one place a strategy's view of the model is written.
#include "cp/strategy.h"
#include "model_impl.h"

void ts_attn_io_geometry(const ts_model *m, ts_attn_io *io) {
  *io = (ts_attn_io){
      .B = m->B, .T = m->T, .C = m->C, .H = m->H, .dh = m->dh, .Hkv = m->Hkv, .Ckv = m->Ckv,
      .F = m->F, .L = m->L, .Tl = m->Tl, .t0 = m->t0, .ntok = m->ntok,
      .runs = m->runs,
      .rope = m->llama ? m->rope : NULL, .cfg = &m->cfg,
      .be = m->be, .ws = (ts_ws *)&m->ws, .seq = m->seq, .cp = m->cp, .state = m->cp_state,
      .l = -1};
}

void ts_attn_io_layer(ts_model *m, int l, uint64_t step, float p, ts_attn_io *io) {
  ts_attn_io_geometry(m, io);
  const layer_params *w = &m->p.layer[l];
  layer_acts *a = ts_layer_acts(m, l);
  io->l = l;
  io->step = step;
  io->p = p;
  io->shape = (ts_attn_shape){.B = m->B, .T = m->T, .H = m->H, .dh = m->dh,
                              .tile = m->cfg.tile, .dropout = p, .seed = m->cfg.seed,
                              .step = step, .index_base = ts_model_attn_base(m, l),
                              .Tq = m->Tl, .q0 = m->t0, .Tk = m->T, .Hkv = m->Hkv};
  io->x = m->ln_out;
  io->wq = w->wq, io->bq = w->bq, io->wk = w->wk, io->bk = w->bk, io->wv = w->wv, io->bv = w->bv;
  io->q = a->q, io->k = a->k, io->v = a->v, io->att = a->att, io->lse = a->lse;
  io->datt = m->datt, io->dq = m->dq, io->dk = m->dk, io->dv = m->dv;
  io->dkv_stride = (size_t)(m->dv - m->dk);
  io->dsum = m->dsum, io->tmp = m->dtmp, io->tmp2 = m->dtmp2, io->scratch = m->spbuf;
  layer_params *g = &m->g.layer[l];
  io->dx = m->dtmp; // a forms_dx strategy's dX: the norm's gradient, as the model forms it
  io->dwq = g->wq, io->dbq = g->bq, io->dwk = g->wk, io->dbk = g->bk, io->dwv = g->wv,
  io->dbv = g->bv;
}

void ts_layer_io_fill(ts_model *m, int l, uint64_t step, float p, ts_layer_io *io) {
  layer_acts *a = &m->la[l]; // a tensor split keeps every layer's (no --checkpoint)
  ts_attn_io_layer(m, l, step, p, &io->attn);
  io->x = m->res[l];
  io->y = m->res[l + 1];
  io->dres = m->dres;
  io->ln_out = m->ln_out;
  io->w = &m->p.layer[l];
  io->g = &m->g.layer[l];
  io->ln1_mean = a->ln1_mean, io->ln1_rstd = a->ln1_rstd, io->res_mid = a->res_mid;
  io->ln2_mean = a->ln2_mean, io->ln2_rstd = a->ln2_rstd;
  io->row_base = ts_model_row_base(m, l);
}
