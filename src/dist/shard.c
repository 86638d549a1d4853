// A rank's share of the batch and the sequence group's sums (shard.h).
#include "shard.h"

#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/util.h"
#include "boundary/boundary.h"
#include "cp/strategy.h"
#include "exact/tree.h"
#include "segment_sum.h"

// Under --zero, tensors whose update is not element-wise stay whole in one
// shard: Muon's matrices (optim.h), and the tensors a boundary codec updates
// itself (boundary.h: owns, update), a boundary's together, since its update
// reads them together (SPEL's projector whole; mapl-vq's four codebooks and
// the statistics in their gradient slots at once). The codec's tensors go
// whole to one rank, like Muon's, rather than updated on every replica: the
// rank that owns them holds their whole summed gradient (under --zero 2 and
// 3 the tree over the rounds keeps only the rank's shard of a gradient), and
// the broadcast after the step (ts_shard_gather_params) brings them to the
// rest, which need no moments for them.
// So do the stream writers under a codec that confines the stream: their
// update's scale is one per output vector (train/adamw_rowwise.c).
static int must_stay_whole(const ts_config *cfg, const ts_boundary *bd, const ts_tensor *t) {
  if (cfg->optimizer != TS_OPT_ADAMW && t->ndim == 2 && t->role == TS_ROLE_LAYER) return 1;
  if (bd && bd->confines_stream && t->writes_stream) return 1;
  return bd && bd->owns && bd->owns(t->role);
}

// The end (exclusive) of the run of tensors from i on that must share one
// shard: i alone, or the codec's own tensors of t[i]'s boundary that follow
// it (a stage's codec tensors follow its last layer, boundary.h).
static int whole_run_end(const ts_config *cfg, const ts_boundary *bd, const ts_tensor *t, int nt,
                         int i) {
  int j = i + 1;
  if (t[i].role == TS_ROLE_LAYER) return j;
  while (j < nt && t[j].index == t[i].index && t[j].role != TS_ROLE_LAYER &&
         must_stay_whole(cfg, bd, &t[j]))
    j++;
  return j;
}

// The replica group's shards of the stage's owned elements t[0, nt) (np of
// them): Z balanced cuts, each moved to the end of a run of tensors that
// must stay whole when it falls inside one.
static void zero_cuts(const ts_config *cfg, const ts_tensor *t, int nt, size_t np, int Z,
                      size_t *cut) {
  const ts_boundary *bd = ts_boundary_get(cfg->compress);
  const float *base = nt > 0 ? t[0].data : NULL;
  cut[0] = 0;
  for (int q = 1; q <= Z; q++) {
    size_t c = q == Z ? np : (size_t)((double)np * q / Z);
    for (int i = 0; i < nt && q < Z; i++) {
      if (!must_stay_whole(cfg, bd, &t[i])) continue;
      const int j = whole_run_end(cfg, bd, t, nt, i);
      const size_t a = (size_t)(t[i].data - base);
      const size_t b = (size_t)(t[j - 1].data - base) + (size_t)ts_tensor_numel(&t[j - 1]);
      if (a < c && c < b) c = b;
      i = j - 1;
    }
    cut[q] = c < cut[q - 1] ? cut[q - 1] : c;
  }
}

// The views of [lo, hi) of the owned tensors t[0, nt) (whole tensors, or a
// part as a flat run: 1 × len for a matrix, so that weight decay applies as
// to the whole); returns their number.
static int shard_views(const ts_tensor *t, int nt, size_t lo, size_t hi, ts_tensor *out) {
  const float *base = nt > 0 ? t[0].data : NULL;
  int n = 0;
  for (int i = 0; i < nt; i++) {
    const size_t a = (size_t)(t[i].data - base), b = a + (size_t)ts_tensor_numel(&t[i]);
    const size_t s = a > lo ? a : lo, e = b < hi ? b : hi;
    if (s >= e) continue;
    ts_tensor v = t[i];
    v.data += s - a;
    v.at += (int64_t)(s - a);
    if (s != a || e != b) {
      v.ndim = t[i].ndim >= 2 ? 2 : 1;
      v.shape[0] = v.ndim == 2 ? 1 : (int64_t)(e - s);
      v.shape[1] = v.ndim == 2 ? (int64_t)(e - s) : 0;
    }
    out[n++] = v;
  }
  return n;
}

// What this rank owns and updates (shard.h: owners, zero, the shard's views),
// once the positional table's rows are known (wpe_off, wpe_len).
static int plan_state(ts_shard *sh, const ts_config *cfg, const ts_grid *grid,
                      const ts_layout *lay) {
  ts_model *m = sh->m;
  const int nt = ts_model_num_tensors(m);
  const size_t np = ts_model_num_params(m);
  // under --sp the positional table's rows are the last owned elements and
  // every rank updates its own; the rest is the replicas' (shared, or sharded)
  const size_t rows = sh->seq ? sh->wpe_len : 0, nz = np - rows;
  sh->zero = lay->zero;
  sh->replica = grid->replica;
  const int Z = sh->zero ? grid->replica->size : 1, q = sh->zero ? grid->replica->rank : 0;
  ts_tensor *p = calloc((size_t)nt + 1, sizeof *p), *g = calloc((size_t)nt + 1, sizeof *g);
  ts_tensor *fold = calloc((size_t)2 * nt + 2, sizeof *fold);
  uint64_t *mlocal = calloc((size_t)2 * nt + 2, sizeof *mlocal);
  sh->upd_p = calloc((size_t)2 * nt + 2, sizeof *sh->upd_p);
  sh->upd_g = calloc((size_t)2 * nt + 2, sizeof *sh->upd_g);
  sh->cut = calloc((size_t)Z + 1, sizeof *sh->cut);
  int rc = p && g && fold && mlocal && sh->upd_p && sh->upd_g && sh->cut
               ? TS_OK : ts_fail(TS_ERUNTIME, "out of memory");
  if (!rc && rows && sh->wpe_off != nz)
    rc = ts_fail(TS_ERUNTIME, "model state: the positional rows are not the last owned tensors");
  if (!rc) {
    ts_model_tensors(m, p, g);
    zero_cuts(cfg, p, nt, nz, Z, sh->cut);
    sh->own_lo = sh->cut[q];
    sh->own_hi = sh->cut[q + 1];
    // what this rank updates: its shard, then its positional rows; the
    // moments are theirs in that order
    int n = shard_views(p, nt, sh->own_lo, sh->own_hi, sh->upd_p);
    shard_views(g, nt, sh->own_lo, sh->own_hi, sh->upd_g);
    const int nr = shard_views(p, nt, nz, np, sh->upd_p + n);
    shard_views(g, nt, nz, np, sh->upd_g + n);
    sh->nupd = n + nr;
    sh->nupd_floats = (sh->own_hi - sh->own_lo) + rows;
    // what it owns in the folds and the checkpoint: its shard under --zero,
    // else the first sequence rank the shared part and every rank the blocks
    // of a tensor split it holds alone (before the rows: [split_lo, nz));
    // its rows, under --zero those of the first data rank (the data group's
    // ranks hold the same rows)
    int nf = 0;
    const float *base = ts_model_params(m);
    const size_t split_lo = nz - sh->split_len;
    for (int j = 0; j < sh->nupd; j++) {
      const size_t local = (size_t)(sh->upd_p[j].data - base);
      const int is_row = j >= n, is_split = !is_row && local >= split_lo;
      const int mine = is_row ? (!sh->zero || grid->dp_rank == 0)
                              : (sh->zero || grid->sp_rank == 0 || is_split);
      if (!mine) continue;
      mlocal[nf] = is_row ? (sh->own_hi - sh->own_lo) + (local - nz) : local - sh->own_lo;
      fold[nf++] = sh->upd_p[j];
    }
    // the owners: under --zero every rank of the world; else the ranks that
    // hold one copy of the model between them (a data replica's stages and
    // sequence ranks; the data replicas fold each on their own)
    ts_comm *group = sh->zero ? grid->world : grid->model->size > 1 ? grid->model : NULL;
    rc = ts_owners_create(group, fold, nf, base, mlocal, ts_model_canonical_params(m),
                          &sh->owners);
  }
  free(p);
  free(g);
  free(fold);
  free(mlocal);
  return rc;
}

int ts_shard_gather_params(ts_shard *sh) {
  if (!sh->zero) return TS_OK;
  float *params = ts_model_params(sh->m);
  const size_t end = sh->cut[sh->replica->size];
  if (sh->zero < 3 || sh->nlay == 0) return ts_zero_gather(sh, params, 0, end);
  // under --zero 3 the layers' come one layer at a time, when used, and so
  // do the ends' when sharded too
  if (sh->ends) return TS_OK;
  int rc = ts_zero_gather(sh, params, 0, sh->lay_lo[0]);
  return rc ? rc : ts_zero_gather(sh, params, sh->lay_lo[sh->nlay], end);
}

// The sequence group's sum of one sequence's gradient g (the model's
// layout): one all-reduce of everything but the ends each rank sums itself,
// the positional rows it owns (the last owned elements), a tensor split's
// blocks (before them: complete on their rank) and, on a pipeline's last
// stage, a tied embedding (the first), which the pipeline sums apart.
// A rank that holds two runs (lss-zigzag) keeps the second run's partials
// apart (ts_model_second_run_grads): each is summed over the group, and the
// two sums added, the serial tree's root (src/model/run_partials.c).
static int sum_sequence_group(ts_shard *sh, float *g) {
  return ts_zero_seq_sum(sh, g, sh->seq_skip, sh->np - sh->wpe_len - sh->split_len);
}

int ts_shard_pass_first(const ts_shard *sh, int j) {
  return sh->strided ? (j * sh->D + sh->r) * sh->s : sh->b0 + j * (sh->seq ? 1 : sh->mb);
}

int ts_shard_sequence_done(ts_shard *sh) {
  if (sh->strided) return ts_zero_pass_done(sh);
  int rc = sum_sequence_group(sh, ts_model_grads(sh->m));
  if (rc || sh->nb == 1) return rc;
  if (ts_tree_push(&sh->seq_tree, ts_model_grads(sh->m)) != 0)
    return ts_fail(TS_ERUNTIME, "out of memory (gradient tree over sequences)");
  return TS_OK;
}

// The pipeline's hooks (pipeline.h): under --sp a microbatch is one sequence.
static int pipeline_seq_grads(void *ctx, float *g) { return sum_sequence_group(ctx, g); }
// A microbatch's tied-embedding gradient: the sequence group's sum (a rank
// of two runs: each run's partial summed apart, then added: the serial
// tree's root, src/model/run_partials.c), and in rounds the data group's
// after it (the round's subtree, as the hooks sum a layer's).
static int pipeline_seq_flat(void *ctx, float *buf, float *buf2, size_t n) {
  ts_shard *sh = ctx;
  float *parts[2] = {buf, buf2};
  for (int k = 0; k < 2; k++) {
    if (!parts[k] || !sh->seq || sh->seq->size < 2) continue;
    int rc = sh->fast ? ts_comm_allreduce_fast(sh->seq, parts[k], n, -1)
                      : ts_comm_allreduce_tree(sh->seq, parts[k], n, -1);
    if (rc) return rc;
  }
  if (buf2) sh->be->add(buf, buf, buf2, (int64_t)n);
  if (!sh->strided || !sh->data || sh->data->size < 2) return TS_OK;
  return sh->fast ? ts_comm_allreduce_fast(sh->data, buf, n, -1)
                  : ts_comm_allreduce_tree(sh->data, buf, n, -1);
}
static int rounds_loss(ts_shard *sh, const float *lsums, int n, float *out);
static int pipeline_round_done(void *ctx) { return ts_zero_pass_done(ctx); }
static int pipeline_loss_sum(void *ctx, const float *lsums, int M, float *out) {
  return rounds_loss(ctx, lsums, M, out);
}

// The rank's model, its pipeline stage's layers (all of them without --pp),
// and under --pp the stage's pipeline.
static int create_stage(ts_shard *sh, const ts_config *cfg, const ts_grid *grid,
                        const ts_layout *lay) {
  sh->be = ts_backend_current();
  sh->fast = cfg->fast;
  sh->nb = cfg->batch / grid->dp;
  sh->b0 = grid->dp_rank * sh->nb;
  sh->T = cfg->seq;
  sh->seq = grid->sp > 1 ? grid->seq : NULL;
  int rc;
  const int mb = sh->nb / lay->microbatches; // a microbatch's sequences (--sp: one)
  // a pipeline stage's layers (pipeline.h), or all of them
  const int per = cfg->n_layer / grid->pp, l0 = grid->pp_rank * per;
  ts_seq_shard sp = {sh->seq, lay->sp_mode, lay->upipe_u, lay->upipe_sched, lay->ulysses_degree};
  if (sh->seq) {
    sh->cp = ts_cp_get(lay->sp_mode);
    rc = ts_model_create_stage(cfg, sh->b0, 1, &sp, l0, l0 + per, &sh->m);
  } else { // under --pp, or accumulating (--microbatches without it), one microbatch at a time
    sh->M = grid->pp == 1 ? lay->microbatches : 1;
    sh->mb = mb;
    rc = ts_model_create_stage(cfg, sh->b0, grid->pp > 1 || sh->M > 1 ? mb : sh->nb, NULL, l0,
                               l0 + per, &sh->m);
  }
  if (rc) return rc;
  if (grid->pp > 1) {
    if (!(sh->pl = calloc(1, sizeof *sh->pl))) rc = ts_fail(TS_ERUNTIME, "out of memory");
    if (!rc)
      rc = ts_pipeline_create(sh->pl, sh->m, grid->pipe, lay->microbatches, lay->schedule, mb);
    if (rc) {
      if (sh->pl) ts_pipeline_free(sh->pl);
      free(sh->pl);
      ts_model_free(sh->m);
      return rc;
    }
  }
  return TS_OK;
}

// Where the rank's part of the model lies: its positions and runs of the
// sequence, its parameters and its tensor split's share of them, and the
// positional table's rows (none: LLaMA; under --sp the rank's rows, one
// piece per run, consecutive), which plan_state keeps apart.
static int find_positions(ts_shard *sh) {
  ts_model_positions(sh->m, &sh->t0, &sh->Tl);
  sh->nrun = ts_model_runs(sh->m, sh->run_pos, &sh->run_len);
  sh->np = ts_model_num_params(sh->m);
  sh->split_len = ts_model_split_params(sh->m);
  int nt = ts_model_num_tensors(sh->m);
  ts_tensor *t = calloc((size_t)nt, sizeof *t);
  if (!t) return ts_fail(TS_ERUNTIME, "out of memory");
  ts_model_tensors(sh->m, t, NULL);
  for (int i = 0; i < nt; i++)
    if (t[i].role == TS_ROLE_POSITIONAL) {
      if (sh->wpe_len == 0) sh->wpe_off = (size_t)(t[i].data - ts_model_params(sh->m));
      sh->wpe_len += (size_t)ts_tensor_numel(&t[i]);
    }
  free(t);
  return TS_OK;
}

// The buffers of a step's several passes: under accumulation the
// microbatches' loss sums and gradient tree; under --sp the sequences'
// (two runs' loss sums, the tree, the rank's rows of inputs and targets).
static int alloc_pass_buffers(ts_shard *sh) {
  if (sh->M > 1) { // accumulation
    sh->lsums = calloc((size_t)sh->M, sizeof(float));
    ts_tree_init(&sh->seq_tree, sh->np);
    sh->has_tree = 1;
    if (!sh->lsums) return ts_fail(TS_ERUNTIME, "out of memory");
  }
  if (sh->seq) {
    sh->lsums = calloc((size_t)2 * sh->nb, sizeof(float)); // two runs' sums (lss-zigzag)
    ts_tree_init(&sh->seq_tree, sh->np);
    sh->has_tree = 1;
    const size_t seqs = sh->pl ? (size_t)sh->nb : 1; // the pipeline takes them all at once
    sh->rows_in = malloc(seqs * sh->Tl * sizeof(int));
    sh->rows_tg = malloc(seqs * sh->Tl * sizeof(int));
    if (!sh->lsums || !sh->rows_in || !sh->rows_tg)
      return ts_fail(TS_ERUNTIME, "out of memory (sequence-parallel buffers)");
  }
  return TS_OK;
}

// A pipeline's microbatches in the shard's rounds (pipeline.h), once
// ts_zero_plan has chosen them; sh is the shard's final place, which the
// hooks are given.
static int pipeline_in_rounds(ts_shard *sh) {
  ts_pipeline *pl = sh->pl;
  if (pl->tied && pl->s == pl->P - 1 && pl->wte_off != 0)
    return ts_fail(TS_ERUNTIME, "--zero %d: the tied embedding does not lead the last "
                   "stage's tensors", sh->zero);
  ts_pipeline_set_round_hooks(pl, sh->D * sh->s, pipeline_round_done, pipeline_loss_sum,
                              pipeline_seq_flat, sh);
  return TS_OK;
}

int ts_shard_create(const ts_config *cfg, const ts_grid *grid, const ts_layout *lay,
                    ts_shard *out) {
  ts_shard sh = {0};
  int rc = create_stage(&sh, cfg, grid, lay);
  if (rc) return rc;
  rc = find_positions(&sh);
  if (!rc) rc = plan_state(&sh, cfg, grid, lay);
  if (!rc) rc = alloc_pass_buffers(&sh);
  if (rc) {
    ts_shard_free(&sh);
    return rc;
  }
  // the stages' sequences: segment losses, each sequence's sums (ctx: the
  // shard's final place, copied there below)
  if (sh.pl && sh.seq)
    ts_pipeline_set_sequence_hooks(sh.pl, sh.seq, pipeline_seq_grads, pipeline_seq_flat, out);
  // a tied embedding leads the last stage's gradient, summed apart (pipeline.h)
  if (sh.pl && sh.pl->tied && grid->pp_rank == grid->pp - 1) sh.seq_skip = sh.pl->wte_len;
  sh.data = grid->data;
  sh.D = grid->dp;
  sh.r = grid->dp_rank;
  *out = sh;
  // the zero plan's hooks and the pipeline's hold the shard's final place
  rc = ts_zero_plan(out);
  if (!rc && out->pl && out->strided) rc = pipeline_in_rounds(out);
  if (rc) ts_shard_free(out);
  return rc;
}

size_t ts_shard_buffer_bytes(const ts_shard *sh) {
  size_t b = 0;
  if (sh->pl) b += ts_pipeline_buffer_bytes(sh->pl);
  return b;
}

void ts_shard_free(ts_shard *sh) {
  ts_owners_free(&sh->owners);
  free(sh->cut);
  free(sh->lay_lo);
  free(sh->upd_p);
  free(sh->upd_g);
  if (sh->pl) ts_pipeline_free(sh->pl);
  free(sh->pl);
  ts_model_free(sh->m);
  free(sh->lsums);
  if (sh->has_tree) ts_tree_free(&sh->seq_tree);
  if (sh->strided) ts_tree_free(&sh->rounds);
  free(sh->rows_in);
  free(sh->rows_tg);
  memset(sh, 0, sizeof *sh);
}

// In rounds: the global loss sum from each rank's n pass sums x (each an
// aligned subtree): pass j of data rank r is position j·D + r of the tree.
static int rounds_loss_sum(ts_shard *sh, const float *x, int n, float *out) {
  const int D = sh->D;
  float *all = malloc((size_t)D * n * sizeof(float)), *pos = malloc((size_t)D * n * sizeof(float));
  int rc = !all || !pos ? ts_fail(TS_ERUNTIME, "out of memory") : TS_OK;
  if (!rc && D > 1) rc = ts_comm_allgather(sh->data, x, all, (size_t)n * sizeof(float), -1);
  if (!rc && D == 1) memcpy(all, x, (size_t)n * sizeof(float));
  if (!rc) {
    for (int r = 0; r < D; r++)
      for (int j = 0; j < n; j++) pos[(size_t)j * D + r] = all[(size_t)r * n + j];
    *out = ts_tree_sum(pos, (size_t)D * n);
  }
  free(all);
  free(pos);
  return rc;
}

// This rank's runs of sequence j (inputs, targets: whole windows) into
// rows_in, rows_tg from row `at`.
static void gather_rows(ts_shard *sh, const int *inputs, const int *targets, int j, size_t at) {
  for (int k = 0; k < sh->nrun; k++) {
    const size_t from = (size_t)j * sh->T + (size_t)sh->run_pos[k];
    const size_t n = (size_t)sh->run_len * sizeof(int);
    memcpy(sh->rows_in + at + (size_t)k * sh->run_len, inputs + from, n);
    memcpy(sh->rows_tg + at + (size_t)k * sh->run_len, targets + from, n);
  }
}

int ts_shard_pass(ts_shard *sh, const int *inputs, const int *targets, uint64_t step, int train,
                  float *loss_sum) {
  ts_model *m = sh->m;
  int rc;
  // (in rounds the first microbatch's sequences, the pipeline's stride apart)
  const int b0 = sh->strided ? ts_shard_pass_first(sh, 0) : sh->b0;
  if (sh->pl && sh->seq) { // every sequence's rows of this rank, for the pipeline
    for (int j = 0; j < sh->nb; j++) gather_rows(sh, inputs, targets, j, (size_t)j * sh->Tl);
    return ts_pipeline_pass(sh->pl, m, b0, sh->rows_in, sh->rows_tg, step, train, loss_sum);
  }
  if (sh->pl) return ts_pipeline_pass(sh->pl, m, b0, inputs, targets, step, train, loss_sum);
  if (sh->M > 1) { // accumulation: each microbatch's gradient into the tree, in order
    const size_t tokens = (size_t)sh->mb * sh->T;
    for (int mu = 0; mu < sh->M; mu++) {
      ts_model_select_sequence(m, ts_shard_pass_first(sh, mu));
      ts_model_forward(m, inputs + mu * tokens, targets + mu * tokens, step, train);
      if ((rc = ts_model_status(m))) return rc;
      sh->lsums[mu] = ts_model_loss_sum(m);
      if (!train) continue;
      if ((rc = ts_model_backward(m, step))) return rc;
      if (sh->strided) {
        if ((rc = ts_zero_pass_done(sh))) return rc;
      } else if (ts_tree_push(&sh->seq_tree, ts_model_grads(m)) != 0) {
        return ts_fail(TS_ERUNTIME, "out of memory (gradient tree over microbatches)");
      }
    }
    if (sh->strided) return rounds_loss_sum(sh, sh->lsums, sh->M, loss_sum);
    *loss_sum = ts_tree_sum(sh->lsums, (size_t)sh->M);
    return TS_OK;
  }
  if (!sh->seq) {
    ts_model_forward(m, inputs, targets, step, train);
    if ((rc = ts_model_status(m))) return rc;
    if (train && (rc = ts_model_backward(m, step))) return rc;
    *loss_sum = ts_model_loss_sum(m);
    return TS_OK;
  }
  for (int j = 0; j < sh->nb; j++) {
    gather_rows(sh, inputs, targets, j, 0);
    ts_model_select_sequence(m, ts_shard_pass_first(sh, j));
    ts_model_forward(m, sh->rows_in, sh->rows_tg, step, train);
    if ((rc = ts_model_status(m))) return rc;
    sh->lsums[j] = ts_model_run_loss_sum(m, 0);
    sh->lsums[sh->nb + j] = ts_model_run_loss_sum(m, 1);
    if (!train) continue;
    if ((rc = ts_model_backward(m, step))) return rc;
    if ((rc = ts_shard_sequence_done(sh))) return rc;
  }
  // (a rank of two runs: each sequence's two runs, then the sequences)
  const int runs = ts_model_second_run_grads(m) ? 2 : 1;
  if (!sh->strided) return ts_segment_loss_sum(sh->seq, sh->lsums, sh->nb, runs, loss_sum);
  return rounds_loss(sh, sh->lsums, sh->nb, loss_sum);
}

// In rounds: the global loss sum from the rank's n pass sums (under --sp
// its segments' sums, the sequence group's columns first; a rank of two
// runs holds each run's, run k's of the n from k·n).
static int rounds_loss(ts_shard *sh, const float *lsums, int n, float *out) {
  const int runs = ts_model_second_run_grads(sh->m) ? 2 : 1;
  float *seqsum = malloc((size_t)n * sizeof(float));
  int rc = seqsum ? ts_segment_sequence_sums(sh->seq, lsums, n, runs, seqsum)
                  : ts_fail(TS_ERUNTIME, "out of memory");
  if (!rc) rc = rounds_loss_sum(sh, seqsum, n, out);
  free(seqsum);
  return rc;
}

int ts_shard_sync_grads(ts_shard *sh, ts_comm *data_group) {
  int rc;
  float *g = ts_model_grads(sh->m);
  // in rounds every pass was summed over the groups already, and the last
  // wrote the rank's shard of the step's gradient in place
  if (sh->strided) return TS_OK;
  // the sequence group's sums came per sequence (ts_shard_sequence_done);
  // the tree over the sequences (a pipeline keeps its own)
  if ((sh->seq && sh->nb > 1 && !sh->pl) || sh->M > 1) ts_tree_finish(&sh->seq_tree, g);
  if ((rc = ts_zero_sum(sh, data_group, g, 0, sh->np))) return rc;
  ts_zero_ends_summed(sh); // --zero 2, 3: all but the rank's shard of them go
  return TS_OK;
}
