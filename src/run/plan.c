// tessera plan (issue 31; docs/PLAN.md): for a model and a cluster, every
// layout of the ranks (dp x sp x mode x pp x --zero x --checkpoint) judged
// by the rules `train` applies (ts_layout_check, the model's shard checks),
// and for each valid one a rank's memory by kind, its bytes per step by
// collective and a predicted step time.
//
// Nothing here sizes a buffer or counts a byte on its own: the memory is
// ts_model_estimate_stage (the fit check's count, src/model/params.c), the
// attention's traffic each strategy's `traffic` (strategy.h, in the
// strategy's file), the gradient sums' and the pipeline's the communicator's
// byte counts (comm.h) for the calls shard.c, zero.c and pipeline.c make.
// tests/plan.sh holds both against runs of this machine.
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "boundary/boundary.h"
#include "comm/comm.h"
#include "cp/strategy.h"
#include "dist/pipeline.h"
#include "run.h"

// ---- named shapes of public models ---------------------------------------------------
// Their published dimensions (GPT-2: Radford et al. 2019, the Hugging Face
// configs; Llama 3: Meta's model cards): the architecture only, over a
// preset of the same variant for everything else.
typedef struct {
  const char *name;
  ts_variant variant;
  int d, layers, heads, kv_heads, d_ff, vocab, seq, tied;
  float rope_theta;
} shape;

static const shape shapes[] = {
    {"gpt2-124m", TS_GPT, 768, 12, 12, 0, 3072, 50257, 1024, 1, 0.0f},
    {"gpt2-350m", TS_GPT, 1024, 24, 16, 0, 4096, 50257, 1024, 1, 0.0f},
    {"gpt2-774m", TS_GPT, 1280, 36, 20, 0, 5120, 50257, 1024, 1, 0.0f},
    {"gpt2-1.5b", TS_GPT, 1600, 48, 25, 0, 6400, 50257, 1024, 1, 0.0f},
    {"llama3-8b", TS_LLAMA, 4096, 32, 32, 8, 14336, 128256, 8192, 0, 500000.0f},
    {"llama3-70b", TS_LLAMA, 8192, 80, 64, 8, 28672, 128256, 8192, 0, 500000.0f},
    // the models the papers measure (docs/PERFORMANCE.md, "The papers' tables"):
    // MAPL's LLaMA-2 models (vocabulary 32000, T 2048, no key/value groups;
    // LSS's 20M and 1.5B GPTs are the presets small and large)
    {"mapl-150m", TS_LLAMA, 1024, 9, 8, 8, 2688, 32000, 2048, 0, 10000.0f},
    {"mapl-500m", TS_LLAMA, 1536, 18, 12, 12, 4096, 32000, 2048, 0, 10000.0f},
    {"mapl-1b", TS_LLAMA, 2048, 20, 16, 16, 5440, 32000, 2048, 0, 10000.0f},
};
#define N_SHAPES ((int)(sizeof shapes / sizeof shapes[0]))

int ts_plan_shape(const char *name, ts_config *cfg) {
  char list[256] = "";
  for (int i = 0; i < N_SHAPES; i++) {
    const shape *s = &shapes[i];
    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", s->name);
    if (strcmp(name, s->name) != 0) continue;
    int rc = ts_config_preset(cfg, s->variant == TS_LLAMA ? "llama-tiny" : "tiny");
    if (rc) return rc;
    cfg->d = s->d, cfg->n_layer = s->layers, cfg->n_head = s->heads;
    cfg->n_kv_head = s->kv_heads, cfg->d_ff = s->d_ff, cfg->vocab = s->vocab;
    cfg->seq = s->seq, cfg->tied = s->tied, cfg->rope_theta = s->rope_theta;
    cfg->batch = 1;
    return TS_OK;
  }
  return ts_fail(TS_EUSAGE, "--shape %s: must be one of %s", name, list);
}

// ---- one layout ------------------------------------------------------------------------
typedef struct {
  ts_layout lay;
  int checkpoint;
  char name[96];
  char why[320];                  // the refusal ("" when valid)
  ts_mem_estimate first, largest; // stage 0's rank 0 (the run log's), the largest rank's
  int largest_stage;
  ts_comm_count layer[TS_COMM_NKINDS]; // a layer's collectives per step, on a rank of stage 0
  ts_comm_count step[TS_COMM_NKINDS];  // the step's, rank 0: layers, gradient sums, pipeline
  ts_comm_count link[2];               // the step's by link: 0 intra-node, 1 inter-node
  int stated;                          // 1: every collective's bytes stated; 0: some not (why)
  double t_compute, t_comm, t_step, tokens_per_s;
  double t_overlap; // the step were every byte moved under the compute: the bound overlap can reach
  int fits;
} plan_row;

static void layout_name(const plan_row *r, char *buf, size_t cap) {
  const ts_layout *l = &r->lay;
  char own[48] = "";
  const ts_cp *cp = l->sp > 1 ? ts_cp_get(l->sp_mode) : NULL;
  if (cp && cp->describe) cp->describe(l, own, sizeof own);
  snprintf(buf, cap, "dp%d sp%d%s%s%s pp%d z%d%s%s", l->dp, l->sp, cp ? " " : "",
           cp ? cp->name : "", own, l->pp, l->zero, r->checkpoint ? " ckpt" : "",
           cp && !cp->exact ? " ~" : ""); // ~: the tolerance tier (strategy.h exact)
}

// The model a rank of stage s holds (shard.c create_stage's arguments), its
// memory estimated; under --sp the group's rank 0.
static int stage_memory(const ts_config *cfg, const ts_layout *lay, int s, int threads,
                        ts_mem_estimate *e) {
  const int nb = cfg->batch / lay->dp, per = cfg->n_layer / lay->pp;
  const int shards = lay->zero ? lay->dp * lay->sp : 1;
  ts_comm group = {.rank = 0, .size = lay->sp}; // its rank and size: all the sizing reads
  ts_seq_shard sp = {&group, lay->sp_mode, lay->upipe_u, lay->upipe_sched, lay->ulysses_degree};
  const int M = lay->pp == 1 ? lay->microbatches : 1;
  const int count = lay->sp > 1 ? 1 : lay->pp > 1 || M > 1 ? nb / lay->microbatches : nb;
  return ts_model_estimate_stage(cfg, 0, count, lay->sp > 1 ? &sp : NULL, s * per, (s + 1) * per,
                                 shards, lay->zero, lay->dp, threads, e);
}

// The forwards of stage 0's layers per step for `passes` backwards: a
// pipeline's recomputed ones (ts_pipeline_forwards), --checkpoint's one
// before each backward.
static int forwards(const ts_config *cfg, const ts_layout *lay, int passes) {
  const int f = lay->pp > 1 ? ts_pipeline_forwards(lay->pp, 0, lay->microbatches, lay->schedule)
                            : passes;
  return f + (cfg->checkpoint ? passes : 0);
}

// A layer's collectives per step (strategy.h `traffic`): a sequence's
// backward, and the forwards above.
static int layer_traffic(const ts_config *cfg, const ts_layout *lay, ts_comm_count *out) {
  memset(out, 0, TS_COMM_NKINDS * sizeof *out);
  if (lay->sp < 2) return 1;
  const ts_cp *cp = ts_cp_get(lay->sp_mode);
  if (!cp->traffic) return 0;
  ts_comm group = {.rank = 0, .size = lay->sp};
  ts_seq_shard sp = {&group, lay->sp_mode, lay->upipe_u, lay->upipe_sched, lay->ulysses_degree};
  const int Tl = cfg->seq / lay->sp, H = cfg->n_head, Hkv = cfg->n_kv_head ? cfg->n_kv_head : H;
  // the geometry of a rank's one sequence, as the model fills it (attn_io.c)
  ts_attn_io io = {.B = 1, .T = cfg->seq, .C = cfg->d, .H = H, .dh = cfg->d / H, .Hkv = Hkv,
                   .Ckv = Hkv * (cfg->d / H), .F = cfg->d_ff, .L = cfg->n_layer, .Tl = Tl,
                   .ntok = Tl, .cfg = cfg, .seq = &group, .cp = cp, .l = -1};
  ts_cp_positions(cp, lay->sp, 0, cfg->seq, &io.runs); // its runs (lss-zigzag: two)
  ts_comm_count fwd[TS_COMM_NKINDS] = {{0, 0}}, bwd[TS_COMM_NKINDS] = {{0, 0}};
  cp->traffic(&io, &sp, fwd, bwd);
  const int nb = cfg->batch / lay->dp;
  const uint64_t passes = (uint64_t)nb, f = (uint64_t)forwards(cfg, lay, nb);
  for (int k = 0; k < TS_COMM_NKINDS; k++) {
    out[k].calls = f * fwd[k].calls + passes * bwd[k].calls;
    out[k].bytes = f * fwd[k].bytes + passes * bwd[k].bytes;
  }
  return 1;
}

// Whether a group whose ranks span `span` consecutive world ranks (sp
// innermost, then dp, then pp: grid.c) stays inside a node.
static int intra(int span, int ranks, int per_node) {
  return ranks <= per_node || (span <= per_node && per_node % span == 0);
}

// One group's calls added to the step's counts and to its link's.
static void add_group(plan_row *r, const ts_plan_opts *o, int span, ts_comm_kind kind,
                      uint64_t calls, uint64_t bytes) {
  r->step[kind].calls += calls;
  r->step[kind].bytes += bytes;
  ts_comm_count *l = &r->link[intra(span, o->ranks, o->ranks_per_node) ? 0 : 1];
  l->calls += calls;
  l->bytes += bytes;
}

// The owners' broadcasts of [a, b) of the replicated parameters to the P
// ranks of the replica group (zero.c ts_zero_gather): each shard's part from
// its owner, rank 0 sending its own and receiving the rest. The shards are
// even cuts (shard.c moves a cut to the end of a tensor that must stay
// whole: the bytes differ by that, 0 at P = 2).
static void gather(plan_row *r, const ts_plan_opts *o, int P, size_t a, size_t b) {
  const ts_mem_estimate *e = &r->first;
  for (int q = 0; q < P; q++) {
    size_t off, len;
    ts_comm_chunk(e->nreplicated, P, q, &off, &len);
    const size_t lo = off > a ? off : a, hi = off + len < b ? off + len : b;
    if (lo < hi) add_group(r, o, P, TS_COMM_BCAST, 1, 4 * (uint64_t)(hi - lo) * (q ? 1 : P - 1));
  }
}

// One all-reduce of n floats over a group of P ranks (none when empty or alone).
static void sum(plan_row *r, const ts_plan_opts *o, int P, int span, size_t n) {
  if (P > 1 && n > 0) add_group(r, o, span, TS_COMM_ALLREDUCE, 1, ts_comm_allreduce_bytes(n, P, 0));
}

// --zero 2 and 3 outside a pipeline (zero.c): in each pass every layer's
// gradient is summed as its backward ends, over the sequence group (a rank
// of two runs: each run's) and then the data group, and the ends after the
// pass; under 3 each layer's parameters are gathered before its forward and
// its backward, the embeddings' around theirs and the final norm's and the
// head's (with a tied embedding) around the head's; under 2 every shard is
// broadcast after the update, as under 1.
static void zero_traffic(plan_row *r, const ts_plan_opts *o, int passes) {
  const ts_layout *l = &r->lay;
  const ts_mem_estimate *e = &r->first;
  const int P = l->dp * l->sp, seqs = l->sp > 1 && ts_cp_get(l->sp_mode)->run_partials ? 2 : 1;
  const size_t L0 = e->layers_lo, n = e->layer_floats, L1 = L0 + (size_t)e->nlayers * n;
  const size_t nz = e->nreplicated, np = e->nparams;
  for (int j = 0; j < passes; j++) {
    for (int i = 0; i < e->nlayers; i++) {
      for (int k = 0; k < seqs; k++) sum(r, o, l->sp, l->sp, n);
      sum(r, o, l->dp, l->sp * l->dp, n);
      for (int k = 0; k < 2 && l->zero >= 3; k++) // before its forward and its backward
        gather(r, o, P, L0 + i * n, L0 + (i + 1) * n);
    }
    for (int k = 0; k < seqs; k++) sum(r, o, l->sp, l->sp, L0), sum(r, o, l->sp, l->sp, nz - L1);
    sum(r, o, l->dp, l->sp * l->dp, L0);
    sum(r, o, l->dp, l->sp * l->dp, np - L1);
    for (int k = 0; k < 2 && l->zero >= 3; k++) {
      gather(r, o, P, 0, L0);
      gather(r, o, P, L1, nz);
      if (e->wte_len) gather(r, o, P, e->wte_lo, e->wte_lo + e->wte_len);
    }
  }
  if (l->zero == 2) gather(r, o, P, 0, nz);
}

// --zero 2 and 3 in a pipeline (zero.c, shard.c pipeline_in_rounds): the
// stage's microbatches are its rounds, so each microbatch sums every layer's
// gradient as its backward ends and then the stage's ends (which stay whole:
// `ends` is off in a pipeline), over the sequence group and the data group;
// under 3 each layer's parameters are gathered before each of its forwards
// (a pipeline's recomputed ones too, ts_pipeline_forwards) and its backward,
// and the ends' once after the update; under 2 every shard after it.
static void zero_pipeline_traffic(plan_row *r, const ts_plan_opts *o) {
  const ts_layout *l = &r->lay;
  const ts_mem_estimate *e = &r->first;
  const int P = l->dp * l->sp, M = l->microbatches;
  const int seqs = l->sp > 1 && ts_cp_get(l->sp_mode)->run_partials ? 2 : 1;
  const size_t L0 = e->layers_lo, n = e->layer_floats, L1 = L0 + (size_t)e->nlayers * n;
  const size_t nz = e->nreplicated, np = e->nparams;
  const int gathers = ts_pipeline_forwards(l->pp, 0, M, l->schedule) + M;
  for (int j = 0; j < M; j++) {
    for (int i = 0; i < e->nlayers; i++) {
      for (int k = 0; k < seqs; k++) sum(r, o, l->sp, l->sp, n);
      sum(r, o, l->dp, l->sp * l->dp, n);
    }
    for (int k = 0; k < seqs; k++) sum(r, o, l->sp, l->sp, L0), sum(r, o, l->sp, l->sp, nz - L1);
    sum(r, o, l->dp, l->sp * l->dp, L0);
    sum(r, o, l->dp, l->sp * l->dp, np - L1);
  }
  for (int i = 0; i < e->nlayers && l->zero >= 3; i++)
    for (int k = 0; k < gathers; k++) gather(r, o, P, L0 + i * n, L0 + (i + 1) * n);
  if (l->zero >= 3) {
    gather(r, o, P, 0, L0);
    gather(r, o, P, L1, nz);
  } else {
    gather(r, o, P, 0, nz);
  }
}

// Rank 0's step outside the layers: the sequence group's gradient sum after
// each sequence and the data group's after the step (shard.c), the loss's,
// --zero 1's broadcast of the updated shards (zero.c; 2 and 3: zero_traffic),
// the pipeline's messages of each microbatch and a tied embedding's
// (pipeline.c); --zero 2 and 3 in a pipeline: zero_pipeline_traffic.
static void step_traffic(const ts_config *cfg, plan_row *r, const ts_plan_opts *o) {
  const ts_layout *l = &r->lay;
  const ts_mem_estimate *e = &r->first;
  const int per = cfg->n_layer / l->pp, nb = cfg->batch / l->dp, P = l->dp * l->sp;
  for (int k = 0; k < TS_COMM_NKINDS; k++)
    add_group(r, o, l->sp, (ts_comm_kind)k, (uint64_t)per * r->layer[k].calls,
              (uint64_t)per * r->layer[k].bytes);
  if (l->zero >= 2 && l->pp == 1) {
    zero_traffic(r, o, l->sp > 1 ? nb : l->microbatches);
  } else if (l->zero >= 2) {
    zero_pipeline_traffic(r, o);
  } else {
    if (l->sp > 1) { // a rank of two runs sums each run's partials apart (zero.c seq_sum)
      const uint64_t sums = (uint64_t)nb * (ts_cp_get(l->sp_mode)->run_partials ? 2 : 1);
      add_group(r, o, l->sp, TS_COMM_ALLREDUCE, sums,
                sums * ts_comm_allreduce_bytes(e->nreplicated, l->sp, 0));
    }
    if (l->dp > 1)
      add_group(r, o, l->sp * l->dp, TS_COMM_ALLREDUCE, 1,
                ts_comm_allreduce_bytes(e->nparams, l->dp, 0));
  }
  // the loss: the sequence group's segment sums of each sequence
  // (segment_sum.c), the data group's shard sums (train.c, common.c)
  if (l->sp > 1 && l->pp == 1) { // (a rank of two runs summed apart: each run's; under
                                  // --pp the last stage's)
    const ts_cp *cp = ts_cp_get(l->sp_mode);
    add_group(r, o, l->sp, TS_COMM_ALLGATHER, 1,
              ts_comm_gather_bytes((size_t)nb * (cp->run_partials ? 2 : 1) * 4, l->sp));
  }
  // (--zero 2 and 3 of several passes go in rounds, shard.h: the data group
  // gathers each pass's sum, shard.c rounds_loss_sum)
  const int passes = l->sp > 1 ? nb : l->microbatches;
  const int rounds = l->zero >= 2 && l->pp == 1 && passes > 1 ? passes : 1;
  // (in a pipeline's rounds the last stage gathers them, shard.c rounds_loss,
  // and sends the loss down: rank 0's stage gathers none)
  if (l->dp > 1 && !(l->zero >= 2 && l->pp > 1))
    add_group(r, o, l->sp * l->dp, TS_COMM_ALLGATHER, 1,
              ts_comm_gather_bytes(4 * (size_t)rounds, l->dp));
  if (l->zero == 1) gather(r, o, P, 0, e->nreplicated); // each owner broadcasts its shard
  if (l->pp > 1) { // stage 0: a microbatch's activations out, their gradient back: d floats
    // a token each way, or what the codec puts on the wire (Z, dZ, codes)
    const ts_boundary *bd = ts_boundary_get(cfg->compress);
    const uint64_t rows = l->sp > 1 ? (uint64_t)cfg->seq / l->sp
                                    : (uint64_t)(nb / l->microbatches) * cfg->seq;
    const uint64_t M = (uint64_t)l->microbatches, msg = rows * (uint64_t)cfg->d * 4;
    const uint64_t out = rows * bd->wire_bytes(cfg, 0), back = rows * bd->wire_bytes(cfg, 1);
    add_group(r, o, o->ranks, TS_COMM_SENDRECV, 2 * M, M * (out + back));
    ts_config laid = *cfg; // mapl-vq's stream by microbatch counts the layout's (train.c)
    if (laid.vq_stream_microbatches < 0) laid.vq_stream_microbatches = l->dp * l->microbatches;
    if (bd->sync_bytes) // after the step its receiver's copies (pipeline.c sync_copies)
      add_group(r, o, o->ranks, TS_COMM_SENDRECV, 1, bd->sync_bytes(&laid));
    if (cfg->tied) // each microbatch's embedding-output gradient to the last stage, the
                   // updated embedding back (pipeline.c tied_embedding, sync_copies)
      add_group(r, o, o->ranks, TS_COMM_SENDRECV, M + 1,
                M * msg + (uint64_t)cfg->vocab * cfg->d * 4);
  }
}

// A layout's step time: compute at the stated fraction of the rank's FLOP/s
// (each recomputed forward, --checkpoint's or a pipeline's, a third more of
// its share; a pipeline's bubble
// (M + P − 1)/M), communication by α–β per link (each call one latency, the
// bytes sent and received at the link's bandwidth each way), the two summed:
// no overlap, as tessera's CPU path runs. Beside it the bound overlap can
// reach, the larger of the two: what a trainer that hid every collective
// under the compute would take (ring attention's blocks, the data group's
// sums under the backward), never less.
static void predict(const ts_config *cfg, plan_row *r, const ts_plan_opts *o, double fpt) {
  const ts_layout *l = &r->lay;
  const double tokens = (double)cfg->batch * cfg->seq;
  // a forward is a third of a step's FLOPs: the extra ones (recomputed) add theirs
  const int passes = l->sp > 1 || l->pp > 1 ? cfg->batch / l->dp : 1;
  const double extra = (double)forwards(cfg, l, passes) / passes - 1.0;
  const double work = fpt * tokens * (1.0 + extra / 3.0) / o->ranks;
  const double bubble = l->pp > 1 ? (double)(l->microbatches + l->pp - 1) / l->microbatches : 1.0;
  r->t_compute = work / (o->flops * o->efficiency) * bubble;
  const double bw[2] = {o->bw_intra, o->bw_inter}, lat[2] = {o->lat_intra, o->lat_inter};
  r->t_comm = 0.0;
  for (int k = 0; k < 2; k++)
    r->t_comm += (double)r->link[k].bytes / (2.0 * bw[k]) + (double)r->link[k].calls * lat[k];
  r->t_step = r->t_compute + r->t_comm;
  r->t_overlap = r->t_compute > r->t_comm ? r->t_compute : r->t_comm;
  r->tokens_per_s = r->t_step > 0 ? tokens / r->t_step : 0.0;
}

// A layout judged as `train` would (its rules, then each stage's model's),
// and when valid its memory, traffic and time. 1 valid, 0 refused (r->why).
static int judge(const ts_config *cfg0, plan_row *r, const ts_plan_opts *o, int threads) {
  ts_config cfg = *cfg0;
  cfg.checkpoint = r->checkpoint;
  int rc = ts_layout_check(&cfg, &r->lay, o->device);
  layout_name(r, r->name, sizeof r->name);
  double most = -1.0;
  for (int s = 0; s < r->lay.pp && !rc; s++) {
    ts_mem_estimate e;
    if ((rc = stage_memory(&cfg, &r->lay, s, threads, &e))) break;
    if (s == 0) r->first = e;
    if (e.total > most) most = e.total, r->largest = e, r->largest_stage = s;
  }
  if (rc) {
    snprintf(r->why, sizeof r->why, "%s", ts_errmsg());
    return 0;
  }
  r->fits = r->largest.total <= 0.9 * o->device_mem; // the fit check's margin
  r->stated = layer_traffic(&cfg, &r->lay, r->layer);
  step_traffic(&cfg, r, o);
  predict(&cfg, r, o, ts_config_flops_per_token(&cfg));
  return 1;
}

// Those that fit first, of them those whose bytes are all stated (the
// others' times leave some traffic out: lower bounds), each by tokens/s.
static int by_speed(const void *a, const void *b) {
  const plan_row *x = a, *y = b;
  if (x->fits != y->fits) return y->fits - x->fits;
  if (x->stated != y->stated) return y->stated - x->stated;
  return (x->tokens_per_s < y->tokens_per_s) - (x->tokens_per_s > y->tokens_per_s);
}

// The layout flags given (o->only_*): values some layout of o->ranks can
// have, else TS_EUSAGE naming the flag. Whether train takes the layout is
// each layout's own verdict (judge).
static int check_pins(const ts_plan_opts *o) {
  if (o->only_zero > 3)
    return ts_fail(TS_EUSAGE, "--zero %d: must be 0, 1, 2 or 3", o->only_zero);
  const struct {
    const char *flag;
    int v;
  } pin[3] = {{"--dp", o->only_dp}, {"--sp", o->only_sp}, {"--pp", o->only_pp}};
  long long product = 1;
  for (int i = 0; i < 3; i++) {
    if (pin[i].v > 0 && o->ranks % pin[i].v != 0)
      return ts_fail(TS_EUSAGE, "%s %d: no layout of --ranks %d has it (dp x sp x pp must be "
                     "the ranks)", pin[i].flag, pin[i].v, o->ranks);
    product *= pin[i].v > 0 ? pin[i].v : 1;
  }
  const int all = o->only_dp > 0 && o->only_sp > 0 && o->only_pp > 0;
  if (o->ranks % product != 0 || (all && product != o->ranks))
    return ts_fail(TS_EUSAGE, "--dp %d --sp %d --pp %d: %s %lld, not --ranks %d%s",
                   o->only_dp > 0 ? o->only_dp : 1, o->only_sp > 0 ? o->only_sp : 1,
                   o->only_pp > 0 ? o->only_pp : 1, all ? "their product is" : "their product",
                   product, o->ranks, all ? "" : " or a divisor of it");
  return TS_OK;
}

// Whether a layout passes the filters the flags set (--sp-mode, --dp, --sp,
// --pp, --zero).
static int pinned(const ts_plan_opts *o, int dp, int sp, int pp, int mode, int zero) {
  return (o->only_dp <= 0 || dp == o->only_dp) && (o->only_sp <= 0 || sp == o->only_sp) &&
         (o->only_pp <= 0 || pp == o->only_pp) && (o->only_zero < 0 || zero == o->only_zero) &&
         !(sp > 1 && o->only_mode >= 0 && mode != o->only_mode);
}

// Every layout of o->ranks (dp x sp x pp, each sp mode, --zero 0-3,
// --checkpoint off and on, or on alone when given) that passes the filters
// into *out; returns their count, or -1. A pipeline's microbatches are the
// data rank's sequences unless --microbatches is given; without a pipeline,
// --microbatches as given (gradient accumulation). A strategy's own settings
// (--upipe-u, --upipe-schedule, --ulysses-degree) are base's: given, the
// layouts of the other strategies are refused by train's rule.
static int enumerate(const ts_config *cfg, const ts_layout *base, const ts_plan_opts *o,
                     int threads, plan_row **out, int *valid) {
  int n = 0, cap = 64;
  plan_row *rows = malloc((size_t)cap * sizeof *rows);
  *valid = 0;
  for (int dp = 1; dp <= o->ranks && rows; dp++)
    for (int sp = 1; dp * sp <= o->ranks && rows; sp++) {
      if (o->ranks % (dp * sp)) continue;
      const int pp = o->ranks / (dp * sp), nb = dp <= cfg->batch ? cfg->batch / dp : 1;
      for (int mode = 0; mode < (sp > 1 ? TS_SP_NMODES : 1) && rows; mode++)
        for (int zero = 0; zero < 4 && rows; zero++)
          for (int ck = cfg->checkpoint; ck < 2 && rows; ck++) { // --checkpoint: on alone
            if (!pinned(o, dp, sp, pp, mode, zero)) continue;
            if (n == cap && !(rows = realloc(rows, (size_t)(cap *= 2) * sizeof *rows))) break;
            plan_row *r = &rows[n++];
            memset(r, 0, sizeof *r);
            r->lay = *base;
            r->lay.dp = dp, r->lay.sp = sp, r->lay.pp = pp, r->lay.zero = zero;
            r->lay.sp_mode = sp > 1 ? (ts_sp_mode)mode : base->sp_mode;
            r->lay.microbatches = pp > 1 && !o->microbatches_given ? nb : base->microbatches;
            r->checkpoint = ck;
            *valid += judge(cfg, r, o, threads);
          }
    }
  if (!rows) return ts_fail(TS_ERUNTIME, "out of memory"), -1;
  *out = rows;
  return n;
}

// Whether the layout takes a context of T and fits in it (the tile and the
// leaf as given, else their defaults at T).
static int fits_at(const ts_config *cfg0, const plan_row *best, const ts_plan_opts *o,
                   int threads, int T) {
  ts_config cfg = *cfg0;
  plan_row r = *best;
  cfg.seq = T;
  cfg.tile = o->tile, cfg.leaf = o->leaf;
  return !ts_config_finalize(&cfg) && judge(&cfg, &r, o, threads) && r.fits;
}

// The longest context the layout fits in: the largest T = seq·2^k that
// does, then bisection above it on multiples of its leaf times the sequence
// ranks (the memory grows with T; a T the layout rules refuse counts as too
// long, so the answer is one they take). 0: none.
static int longest_seq(const ts_config *cfg0, const plan_row *best, const ts_plan_opts *o,
                       int threads) {
  int lo = 0;
  for (int T = cfg0->seq; T <= INT_MAX / 2 && fits_at(cfg0, best, o, threads, T); T *= 2) lo = T;
  if (!lo) return 0;
  ts_config at = *cfg0;
  at.seq = lo;
  at.tile = o->tile, at.leaf = o->leaf;
  if (ts_config_finalize(&at)) return lo;
  const int g = at.leaf * best->lay.sp;
  int a = 0, b = lo / g; // lo + a·g fits, lo + b·g = 2·lo does not
  while (b - a > 1) {
    const int mid = a + (b - a) / 2;
    *(fits_at(cfg0, best, o, threads, lo + mid * g) ? &a : &b) = mid;
  }
  return lo + a * g;
}

// ---- output ----------------------------------------------------------------------------
static double mib(double b) { return b / 1048576.0; }

// Memory outside the model state and the activations: copies, the memory
// options' leaves, the codec's, the strategy's, --zero's layer in flight.
static double other_bytes(const ts_mem_estimate *e) {
  return e->copies + e->scratch + e->codec + e->strategy + e->strategy_state + e->transient;
}

static uint64_t step_bytes(const plan_row *r) {
  uint64_t b = 0;
  for (int k = 0; k < TS_COMM_NKINDS; k++) b += r->step[k].bytes;
  return b;
}

static void print_table(FILE *out, const plan_row *rows, int n, int top) {
  fprintf(out, "%4s  %-34s %8s %8s %8s %8s %8s %8s %8s %12s %9s %9s %9s %10s %9s\n", "rank",
          "layout", "mem GiB", "params", "grads", "optim", "acts", "packing", "other",
          "bytes/step", "compute", "comm", "step ms", "tokens/s", "overlap");
  char line[256];
  snprintf(line, sizeof line, "%4s  %-34s %8s %8s %8s %8s %8s %8s %8s %12s %9s %9s %9s %10s %9s",
           "", "", "(largest)", "MiB", "MiB", "MiB", "MiB", "MiB", "MiB", "", "ms", "ms", "", "",
           "ms");
  fprintf(out, "%s\n", line);
  for (int i = 0, shown = 0; i < n && shown < top; i++) {
    const plan_row *r = &rows[i];
    if (r->why[0] || !r->fits) continue;
    const ts_mem_estimate *e = &r->largest;
    char bytes[32];
    snprintf(bytes, sizeof bytes, "%.4g%s", (double)step_bytes(r), r->stated ? "" : "*");
    fprintf(out,
            "%4d  %-34s %8.3f %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %12s %9.3f %9.3f %9.3f %10.0f "
            "%9.3f\n",
            ++shown, r->name, e->total / 1073741824.0, mib(e->params), mib(e->grads),
            mib(e->optimizer), mib(e->activations + e->incall), mib(e->comm_buffers),
            mib(other_bytes(e)), bytes, r->t_compute * 1e3, r->t_comm * 1e3, r->t_step * 1e3,
            r->tokens_per_s, r->t_overlap * 1e3);
  }
}

static void json_counts(FILE *out, const ts_comm_count *k) {
  fputc('{', out);
  for (int i = 0, first = 1; i < TS_COMM_NKINDS; i++)
    if (k[i].calls) {
      fprintf(out, "%s\"%s\":{\"calls\":%llu,\"bytes\":%llu}", first ? "" : ",",
              ts_comm_kind_names[i], (unsigned long long)k[i].calls,
              (unsigned long long)k[i].bytes);
      first = 0;
    }
  fputc('}', out);
}

static void json_memory(FILE *out, const ts_mem_estimate *e) {
  fprintf(out, "{\"params\":%.0f,\"grads\":%.0f,\"optimizer\":%.0f,\"copies\":%.0f,"
          "\"activations\":%.0f,\"scratch\":%.0f,\"codec\":%.0f,\"strategy\":%.0f,"
          "\"strategy_state\":%.0f,\"transient\":%.0f,\"incall\":%.0f,\"comm_buffers\":%.0f,"
          "\"total\":%.0f}",
          e->params, e->grads, e->optimizer, e->copies, e->activations, e->scratch, e->codec,
          e->strategy, e->strategy_state, e->transient, e->incall, e->comm_buffers, e->total);
}

static void json_row(FILE *out, const plan_row *r) {
  const ts_layout *l = &r->lay;
  fprintf(out, "{\"layout\":\"%s\",\"dp\":%d,\"sp\":%d,\"sp_mode\":\"%s\",\"pp\":%d,"
          "\"microbatches\":%d,\"zero\":%d,\"checkpoint\":%d,\"exact\":%d", r->name, l->dp,
          l->sp, l->sp > 1 ? ts_sp_mode_names[l->sp_mode] : "none", l->pp, l->microbatches,
          l->zero, r->checkpoint, l->sp < 2 || ts_cp_get(l->sp_mode)->exact);
  if (r->why[0]) {
    fputs(",\"refused\":\"", out);
    for (const char *c = r->why; *c; c++) fprintf(out, *c == '"' || *c == '\\' ? "\\%c" : "%c", *c);
    fputs("\"}", out);
    return;
  }
  fprintf(out, ",\"fits\":%d,\"largest_stage\":%d,\"memory_first\":", r->fits, r->largest_stage);
  json_memory(out, &r->first);
  fputs(",\"memory_largest\":", out);
  json_memory(out, &r->largest);
  fputs(",\"comm_layer\":", out);
  json_counts(out, r->layer);
  fputs(",\"comm_step\":", out);
  json_counts(out, r->step);
  fprintf(out, ",\"bytes_intra\":%llu,\"bytes_inter\":%llu,\"stated\":%d,\"compute_s\":%.6g,"
          "\"comm_s\":%.6g,\"step_s\":%.6g,\"tokens_per_s\":%.6g,\"step_overlap_s\":%.6g}",
          (unsigned long long)r->link[0].bytes, (unsigned long long)r->link[1].bytes, r->stated,
          r->t_compute, r->t_comm, r->t_step, r->tokens_per_s, r->t_overlap);
}

// The cluster's defaults this machine gives: its memory and measured roof,
// shared by the ranks of a node.
static void cluster_defaults(ts_plan_opts *o) {
  if (o->ranks < 1) o->ranks = 1;
  if (o->ranks_per_node < 1) o->ranks_per_node = o->ranks;
  if (o->device_mem <= 0)
    o->device_mem = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE) /
                    o->ranks_per_node;
  if (o->flops <= 0) o->flops = ts_run_sgemm_roof(NULL) * 1e9 / o->ranks_per_node;
}

static void print_header(FILE *out, const ts_config *cfg, const ts_plan_opts *o, int n, int valid,
                         int fit) {
  fprintf(out, "model: %s, d %d, %d layers, %d heads (%d kv), d_ff %d, vocab %d; T %d, batch %d\n",
          cfg->variant == TS_LLAMA ? "llama" : "gpt", cfg->d, cfg->n_layer, cfg->n_head,
          cfg->n_kv_head ? cfg->n_kv_head : cfg->n_head, cfg->d_ff, cfg->vocab, cfg->seq,
          cfg->batch);
  char measured[4200] = "";
  if (o->calibrated_from)
    snprintf(measured, sizeof measured, " (measured: %s, median of %d steps)", o->calibrated_from,
             o->calibrated_steps);
  fprintf(out, "cluster: %d ranks, %d per node; %.1f GiB and %.4g FLOP/s per rank at efficiency "
          "%.3g%s; intra %.4g GB/s %.3g us, inter %.4g GB/s %.3g us\n", o->ranks,
          o->ranks_per_node, o->device_mem / 1073741824.0, o->flops, o->efficiency, measured,
          o->bw_intra / 1e9, o->lat_intra * 1e6, o->bw_inter / 1e9, o->lat_inter * 1e6);
  fprintf(out, "%d layouts: %d valid (%d fit in 90%% of the memory), %d refused by train's "
          "rules%s\n", n, valid, fit, n - valid, o->verbose ? ":" : " (--verbose: why)");
}

// With no layout valid, the user's next question is why: the distinct
// refusals, the most common first (at most four), without --verbose's list.
static void print_refusal_summary(FILE *out, const plan_row *rows, int n) {
  enum { SHOWN = 4 };
  int shown[SHOWN], count[SHOWN], k = 0;
  for (int pass = 0; pass < SHOWN; pass++) {
    int best = -1, best_count = 0;
    for (int i = 0; i < n; i++) {
      if (!rows[i].why[0]) continue;
      int seen = 0, c = 0;
      for (int j = 0; j < k && !seen; j++) seen = strcmp(rows[shown[j]].why, rows[i].why) == 0;
      for (int j = 0; j < i && !seen; j++) seen = strcmp(rows[j].why, rows[i].why) == 0;
      if (seen) continue; // (counted at its first row)
      for (int j = i; j < n; j++) c += strcmp(rows[j].why, rows[i].why) == 0;
      if (c > best_count) best = i, best_count = c;
    }
    if (best < 0) break;
    shown[k] = best, count[k++] = best_count;
  }
  fprintf(out, "no layout is valid; the refusals, the most common first:\n");
  for (int j = 0; j < k; j++)
    fprintf(out, "  %d layouts: %s\n", count[j], rows[shown[j]].why);
}

int ts_plan(const ts_config *raw, const ts_layout *base, const ts_plan_opts *opts, FILE *out) {
  ts_config cfg = *raw;
  int rc = ts_config_finalize(&cfg);
  if (rc) return rc;
  ts_plan_opts o = *opts;
  o.tile = raw->tile, o.leaf = raw->leaf; // as given (0: their defaults follow T)
  cluster_defaults(&o);
  if ((rc = check_pins(&o))) return rc;
  // the memory options' leaves are per thread: the node's threads shared by its ranks
  const int threads = cfg.threads > 0 ? cfg.threads
                                      : (omp_get_max_threads() / o.ranks_per_node > 0
                                             ? omp_get_max_threads() / o.ranks_per_node : 1);
  plan_row *rows = NULL;
  int valid, fit = 0;
  const int n = enumerate(&cfg, base, &o, threads, &rows, &valid);
  if (n < 0) return TS_ERUNTIME;
  qsort(rows, (size_t)n, sizeof *rows, by_speed);
  for (int i = 0; i < n; i++) fit += !rows[i].why[0] && rows[i].fits;
  const int longest = fit ? longest_seq(&cfg, &rows[0], &o, threads) : 0;
  if (o.json) {
    fprintf(out, "{\"ranks\":%d,\"ranks_per_node\":%d,\"device_mem\":%.0f,\"flops\":%.6g,"
            "\"efficiency\":%.17g,\"efficiency_steps\":%d,\"layouts\":%d,\"valid\":%d,"
            "\"fit\":%d,\"longest_seq\":%d,\"rows\":[", o.ranks, o.ranks_per_node,
            o.device_mem, o.flops, o.efficiency, o.calibrated_steps, n, valid, fit, longest);
    for (int i = 0; i < n; i++) {
      if (i) fputc(',', out);
      json_row(out, &rows[i]);
    }
    fputs("]}\n", out);
  } else {
    print_header(out, &cfg, &o, n, valid, fit);
    for (int i = 0; i < n && o.verbose; i++)
      if (rows[i].why[0]) fprintf(out, "  refused %-34s %s\n", rows[i].name, rows[i].why);
    if (!valid && !o.verbose) print_refusal_summary(out, rows, n);
    if (valid) print_table(out, rows, n, o.top > 0 ? o.top : 20);
    if (fit)
      fprintf(out, "longest T that fits the first: %d (the layout rules' and the memory's)\n",
              longest);
    fprintf(out, "memory: the largest rank's, by the fit check's count (acts: with the attention "
            "calls' own buffers; packing: the communicators'); bytes: rank 0's; * not all "
            "stated (ranked after the others: docs/PLAN.md); ~ tolerance tier; time: compute + "
            "communication, no overlap (overlap: the larger of the two, every byte hidden)\n");
  }
  free(rows);
  return TS_OK;
}
