// Configuration: presets, run defaults, validation and the JSON form that
// goes into run logs and checkpoints.
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "boundary/boundary.h"
#include "json.h"
#include "parallel/cp.h"
#include "tessera.h"

// ---------------------------------------------------------------------------
// Presets. `small` and `large` are the 20M and 1.5B models of the LSS
// Transformer paper; `mini` is the README demo, `tiny` the test model. The
// llama-* presets are the LLaMA variant (UPipe and MAPL papers): d_ff is 8d/3
// rounded up to a multiple of 64, grouped-query attention, untied head.
typedef struct {
  const char *name;
  ts_variant variant;
  int d, n_layer, n_head, n_kv_head, d_ff, seq, batch;
} preset;

static const preset presets[] = {
    {"tiny", TS_GPT, 64, 2, 4, 0, 256, 64, 4}, // n_kv_head 0: as many as heads
    {"mini", TS_GPT, 128, 4, 4, 0, 512, 256, 8},
    {"small", TS_GPT, 512, 6, 8, 0, 2048, 1024, 4},
    {"large", TS_GPT, 2048, 24, 16, 0, 8192, 1024, 1},
    {"llama-tiny", TS_LLAMA, 64, 2, 4, 2, 192, 64, 4},
    {"llama-mini", TS_LLAMA, 128, 4, 4, 2, 384, 256, 8},
    {"llama-100m", TS_LLAMA, 768, 16, 12, 4, 2048, 1024, 1},
};
#define N_PRESETS ((int)(sizeof presets / sizeof presets[0]))

const char *const ts_preset_names[] = {"tiny", "mini", "small", "large", "llama-tiny",
                                       "llama-mini", "llama-100m", NULL};

int ts_config_preset(ts_config *cfg, const char *name) {
  for (int i = 0; i < N_PRESETS; i++) {
    const preset *p = &presets[i];
    if (strcmp(name, p->name) != 0) continue;
    snprintf(cfg->preset, sizeof cfg->preset, "%s", p->name);
    cfg->variant = p->variant;
    cfg->n_kv_head = p->n_kv_head;
    cfg->rope_theta = p->variant == TS_LLAMA ? 10000.0f : 0.0f; // GPT: unused
    cfg->vocab = 256; // byte-level tokens
    cfg->d = p->d;
    cfg->n_layer = p->n_layer;
    cfg->n_head = p->n_head;
    cfg->d_ff = p->d_ff;
    cfg->seq = p->seq;
    cfg->batch = p->batch;
    cfg->tied = p->variant == TS_GPT;
    cfg->dropout = 0.0f;
    return TS_OK;
  }
  return ts_fail(TS_EUSAGE,
                 "--model %s: unknown preset (tiny, mini, small, large, llama-tiny, llama-mini, "
                 "llama-100m)",
                 name);
}

// Run defaults. Model fields (set by the preset) are left alone so the order
// preset -> defaults -> flags works.
void ts_config_defaults(ts_config *cfg) {
  cfg->seed = 1337;
  cfg->steps = 100;
  cfg->tile = 0;
  cfg->leaf = 0;
  cfg->lr = 1e-3f;
  cfg->min_lr_frac = 0.1f;
  cfg->weight_decay = 0.1f;
  cfg->beta1 = 0.9f;
  cfg->beta2 = 0.95f;
  cfg->eps = 1e-8f;
  cfg->grad_clip = 1.0f;
  cfg->optimizer = TS_OPT_ADAMW;
  cfg->muon_lr = 0.0f; // 0.02 when a Muon optimizer is chosen (ts_config_finalize)
  cfg->warmup = 10;
  cfg->val_frac = 0.1f;
  cfg->eval_every = 0;
  cfg->eval_batches = 4;
  cfg->threads = 0;
  cfg->fast = 0;
  snprintf(cfg->data_path, sizeof cfg->data_path, "%s", "data/corpus.txt");
  cfg->log_path[0] = '\0';
  cfg->ckpt_dir[0] = '\0';
  cfg->ckpt_every = 0;
  cfg->resume = 0;
  cfg->quiet = 0;
}

// ---------------------------------------------------------------------------
// Tile and leaf defaults depend on T alone (docs/EXACTNESS.md), so a serial run and
// any layout of up to 8 ranks along the sequence agree without extra flags:
// T/8 keeps at least one whole tile and leaf per rank.
static int pow2_floor(int x) {
  int p = 1;
  while (p <= x / 2)
    p *= 2;
  return p;
}

int ts_default_tile(int T) {
  int p = pow2_floor(T / 8 > 0 ? T / 8 : 1);
  return p < 64 ? p : 64;
}

int ts_default_leaf(int T) {
  int p = pow2_floor(T / 8 > 0 ? T / 8 : 1);
  if (p > 256) p = 256;
  int tile = ts_default_tile(T);
  return p > tile ? p : tile;
}

static int is_pow2(int x) { return x > 0 && (x & (x - 1)) == 0; }

// Every check names the flag that sets the field, so a user knows what to fix.
int ts_config_finalize(ts_config *cfg) {
  if (cfg->variant != TS_GPT && cfg->variant != TS_LLAMA)
    return ts_fail(TS_EUSAGE, "variant %d: unknown", (int)cfg->variant);
  if (cfg->vocab < 2) return ts_fail(TS_EUSAGE, "vocab %d: must be >= 2", cfg->vocab);
  if (cfg->d < 1) return ts_fail(TS_EUSAGE, "--d %d: must be >= 1", cfg->d);
  if (cfg->n_layer < 1) return ts_fail(TS_EUSAGE, "--layers %d: must be >= 1", cfg->n_layer);
  if (cfg->n_head < 1) return ts_fail(TS_EUSAGE, "--heads %d: must be >= 1", cfg->n_head);
  if (cfg->d % cfg->n_head != 0)
    return ts_fail(TS_EUSAGE, "--heads %d: must divide --d (%d)", cfg->n_head, cfg->d);
  if (cfg->d_ff < 1) return ts_fail(TS_EUSAGE, "--d-ff %d: must be >= 1", cfg->d_ff);
  // GPT: n_kv_head stays 0, "as many as heads" (its config JSON has no such key)
  if (cfg->variant == TS_GPT && cfg->n_kv_head != 0 && cfg->n_kv_head != cfg->n_head)
    return ts_fail(TS_EUSAGE, "--kv-heads %d: the GPT variant has as many key/value heads as "
                   "heads (%d); grouped-query attention is the LLaMA variant's",
                   cfg->n_kv_head, cfg->n_head);
  if (cfg->variant == TS_GPT) cfg->n_kv_head = 0;
  if (cfg->variant == TS_LLAMA && (cfg->n_kv_head < 1 || cfg->n_head % cfg->n_kv_head != 0))
    return ts_fail(TS_EUSAGE, "--kv-heads %d: must divide --heads (%d)", cfg->n_kv_head,
                   cfg->n_head);
  if (cfg->variant == TS_LLAMA && (cfg->d / cfg->n_head) % 2 != 0)
    return ts_fail(TS_EUSAGE, "--heads %d: the head width d/H = %d must be even (RoPE rotates "
                   "pairs)", cfg->n_head, cfg->d / cfg->n_head);
  if (cfg->variant == TS_LLAMA && !(cfg->rope_theta > 1.0f && isfinite(cfg->rope_theta)))
    return ts_fail(TS_EUSAGE, "--rope-theta %g: must be > 1", (double)cfg->rope_theta);
  if (cfg->tied != 0 && cfg->tied != 1)
    return ts_fail(TS_EUSAGE, "tied %d: must be 0 or 1", cfg->tied);
  if (!(cfg->dropout >= 0.0f && cfg->dropout < 1.0f))
    return ts_fail(TS_EUSAGE, "--dropout %g: must be in [0, 1)", cfg->dropout);

  // sequence, tile, leaf (R1, R3)
  if (cfg->seq < 8) return ts_fail(TS_EUSAGE, "--seq %d: must be >= 8", cfg->seq);
  if (cfg->tile == 0) cfg->tile = ts_default_tile(cfg->seq);
  if (cfg->leaf == 0) {
    // the default leaf, but never smaller than an explicitly chosen tile
    int leaf = ts_default_leaf(cfg->seq);
    cfg->leaf = leaf >= cfg->tile ? leaf : cfg->tile;
  }
  if (!is_pow2(cfg->tile))
    return ts_fail(TS_EUSAGE, "--tile %d: must be a power of two", cfg->tile);
  if (!is_pow2(cfg->leaf))
    return ts_fail(TS_EUSAGE, "--leaf %d: must be a power of two", cfg->leaf);
  if (cfg->leaf % cfg->tile != 0)
    return ts_fail(TS_EUSAGE, "--leaf %d: must be a multiple of the tile (%d)", cfg->leaf,
                   cfg->tile);
  if (cfg->seq % cfg->tile != 0)
    return ts_fail(TS_EUSAGE, "--seq %d: must be a multiple of the tile (%d)", cfg->seq, cfg->tile);
  if (cfg->seq % cfg->leaf != 0)
    return ts_fail(TS_EUSAGE, "--seq %d: must be a multiple of the leaf (%d)", cfg->seq, cfg->leaf);

  if (cfg->optimizer < TS_OPT_ADAMW || cfg->optimizer > TS_OPT_MUON_PE)
    return ts_fail(TS_EUSAGE, "optimizer %d: unknown", cfg->optimizer);
  if (cfg->optimizer == TS_OPT_ADAMW && cfg->muon_lr != 0.0f)
    return ts_fail(TS_EUSAGE, "--muon-lr %g: only with --optimizer muon or muon-pe",
                   (double)cfg->muon_lr);
  if (cfg->optimizer != TS_OPT_ADAMW && cfg->muon_lr == 0.0f) cfg->muon_lr = 0.02f;
  if (!(cfg->muon_lr >= 0.0f && cfg->muon_lr < 10.0f))
    return ts_fail(TS_EUSAGE, "--muon-lr %g: must be in [0, 10)", (double)cfg->muon_lr);
  // stage-boundary compression: the common rules, then the codec's (boundary.h)
  int rc = ts_boundary_finalize(cfg);
  if (rc) return rc;
  // run; written as !(x ok) so that NaN fails too
  if (cfg->batch < 1) return ts_fail(TS_EUSAGE, "--batch %d: must be >= 1", cfg->batch);
  if (cfg->steps < 1) return ts_fail(TS_EUSAGE, "--steps %d: must be >= 1", cfg->steps);
  if (!(cfg->lr > 0.0f && isfinite(cfg->lr)))
    return ts_fail(TS_EUSAGE, "--lr %g: must be > 0", cfg->lr);
  if (!(cfg->min_lr_frac >= 0.0f && cfg->min_lr_frac <= 1.0f))
    return ts_fail(TS_EUSAGE, "--min-lr-frac %g: must be in [0, 1]", cfg->min_lr_frac);
  if (!(cfg->weight_decay >= 0.0f && isfinite(cfg->weight_decay)))
    return ts_fail(TS_EUSAGE, "--weight-decay %g: must be >= 0", cfg->weight_decay);
  if (!(cfg->beta1 >= 0.0f && cfg->beta1 < 1.0f))
    return ts_fail(TS_EUSAGE, "beta1 %g: must be in [0, 1)", cfg->beta1);
  if (!(cfg->beta2 >= 0.0f && cfg->beta2 < 1.0f))
    return ts_fail(TS_EUSAGE, "beta2 %g: must be in [0, 1)", cfg->beta2);
  if (!(cfg->eps > 0.0f && isfinite(cfg->eps)))
    return ts_fail(TS_EUSAGE, "eps %g: must be > 0", cfg->eps);
  if (!(cfg->grad_clip >= 0.0f && isfinite(cfg->grad_clip)))
    return ts_fail(TS_EUSAGE, "--grad-clip %g: must be >= 0 (0 turns clipping off)",
                   cfg->grad_clip);
  if (cfg->warmup < 0) return ts_fail(TS_EUSAGE, "--warmup %d: must be >= 0", cfg->warmup);
  if (!(cfg->val_frac > 0.0f && cfg->val_frac < 1.0f))
    return ts_fail(TS_EUSAGE, "--val-frac %g: must be in (0, 1)", cfg->val_frac);
  if (cfg->eval_every < 0)
    return ts_fail(TS_EUSAGE, "--eval-every %d: must be >= 0 (0 = never)", cfg->eval_every);
  if (cfg->eval_batches < 1)
    return ts_fail(TS_EUSAGE, "--eval-batches %d: must be >= 1", cfg->eval_batches);
  if (cfg->threads < 0)
    return ts_fail(TS_EUSAGE, "--threads %d: must be >= 0 (0 = all cores)", cfg->threads);
  if (cfg->fast != 0 && cfg->fast != 1)
    return ts_fail(TS_EUSAGE, "fast %d: must be 0 or 1", cfg->fast);
  if (cfg->ckpt_every < 0)
    return ts_fail(TS_EUSAGE, "--ckpt-every %d: must be >= 0", cfg->ckpt_every);
  if (cfg->ckpt_every > 0 && cfg->ckpt_dir[0] == '\0')
    return ts_fail(TS_EUSAGE, "--ckpt-every %d: needs --ckpt-dir", cfg->ckpt_every);
  if (cfg->resume && cfg->ckpt_dir[0] == '\0')
    return ts_fail(TS_EUSAGE, "--resume: needs --ckpt-dir");
  return TS_OK;
}

// ---------------------------------------------------------------------------
int ts_sp_mode_parse(const char *name, ts_sp_mode *out) {
  char list[256] = "";
  for (int i = 0; i < TS_SP_NMODES; i++) {
    if (strcmp(name, ts_sp_mode_names[i]) == 0) {
      *out = (ts_sp_mode)i;
      return TS_OK;
    }
    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s",
             i == 0 ? "" : i == TS_SP_NMODES - 1 ? " or " : ", ", ts_sp_mode_names[i]);
  }
  return ts_fail(TS_EUSAGE, "--sp-mode %s: must be %s", name, list);
}

// ---------------------------------------------------------------------------
// The layout. Data parallelism is exact when every rank's gradient leaves
// form an aligned subtree of the serial tree (docs/EXACTNESS.md R3): each rank holds
// batch/dp whole sequences, i.e. (batch/dp)·(seq/leaf) leaves, and that count
// and dp must be powers of two. --fast lets MPI sum, so it needs only whole
// sequences per rank.
int ts_layout_check(const ts_config *cfg, ts_layout *lay) {
  if (lay->dp < 1) return ts_fail(TS_EUSAGE, "--dp %d: must be >= 1", lay->dp);
  if (lay->sp < 1) return ts_fail(TS_EUSAGE, "--sp %d: must be >= 1", lay->sp);
  if (lay->pp < 1) return ts_fail(TS_EUSAGE, "--pp %d: must be >= 1", lay->pp);
  if (lay->microbatches < 1)
    return ts_fail(TS_EUSAGE, "--microbatches %d: must be >= 1", lay->microbatches);
  if (cfg->compress != TS_COMPRESS_NONE && lay->pp > 1 && lay->pp != cfg->compress_stages)
    return ts_fail(TS_EUSAGE, "--pp %d with --compress-stages %d: a pipeline's stages are the "
                   "compressed model's stages", lay->pp, cfg->compress_stages);
  if (cfg->compress != TS_COMPRESS_NONE && lay->sp > 1)
    return ts_fail(TS_EUSAGE, "--compress %s with --sp %d: compression runs on the serial, data- "
                   "and pipeline-parallel layouts", ts_compress_names[cfg->compress], lay->sp);
  if (lay->pp > 1) {
    // Pipeline parallelism (docs/ALGORITHMS.md §6): stages of whole layers; the
    // microbatches split each data rank's sequences, and each must be an
    // aligned power-of-two run of gradient leaves (a subtree).
    const int P = lay->pp, M = lay->microbatches, nb = cfg->batch / (lay->dp > 0 ? lay->dp : 1);
    if (cfg->n_layer % P != 0)
      return ts_fail(TS_EUSAGE, "--pp %d: the %d layers must divide into %d stages", P,
                     cfg->n_layer, P);
    if (lay->sp > 1 && M != nb)
      return ts_fail(TS_EUSAGE, "--pp %d with --sp %d: a microbatch is one sequence, so "
                     "--microbatches must be the %d sequences of each data rank (got %d)",
                     P, lay->sp, nb, M);
    if (nb % M != 0)
      return ts_fail(TS_EUSAGE, "--microbatches %d: must divide the %d sequences of each data rank",
                     M, nb);
    long long leaves = (long long)(nb / M) * (cfg->seq / cfg->leaf);
    if (!cfg->fast && (leaves & (leaves - 1)) != 0)
      return ts_fail(TS_EUSAGE, "--microbatches %d: each microbatch holds %d sequences x %d "
                                "leaves = %lld gradient leaves, not a power of two",
                     M, nb / M, cfg->seq / cfg->leaf, leaves);
  }
  if (lay->sp > 1) {
    // Sequence parallelism (docs/ALGORITHMS.md §2): rank s holds positions
    // [s·T/N, (s+1)·T/N). Its gradient leaves and its query tiles must each
    // be an aligned power-of-two run, so that its sums (weights over leaves,
    // dK/dV over query tiles) are subtrees of the serial trees.
    const int N = lay->sp, T = cfg->seq;
    if (!cfg->fast && !is_pow2(N))
      return ts_fail(TS_EUSAGE,
                     "--sp %d: must be a power of two (exact sequence parallelism combines the "
                     "segments as a binary tree; --fast lifts this)",
                     N);
    if (T % N != 0 || (T / N) % cfg->tile != 0 || (T / N) % cfg->leaf != 0)
      return ts_fail(TS_EUSAGE,
                     "--seq %d: must split into --sp %d segments of whole tiles (%d) and leaves "
                     "(%d); T/N = %g",
                     T, N, cfg->tile, cfg->leaf, (double)T / N);
    if (!cfg->fast && (!is_pow2((T / N) / cfg->tile) || !is_pow2((T / N) / cfg->leaf)))
      return ts_fail(TS_EUSAGE,
                     "--seq %d with --sp %d: each segment of %d tokens must hold a power of two "
                     "of tiles (%d) and of leaves (%d), so that its sums are subtrees of the "
                     "serial trees",
                     T, N, T / N, cfg->tile, cfg->leaf);
    // the strategy's own rules (src/parallel/, cp.h)
    const ts_cp *cp = ts_cp_get(lay->sp_mode);
    int rc;
    if (!cp) return ts_fail(TS_EUSAGE, "--sp-mode: no strategy %d", (int)lay->sp_mode);
    if (cp->check && (rc = cp->check(cfg, lay))) return rc;
  }
  const int D = lay->dp;
  if (D == 1) return TS_OK;
  if (!cfg->fast && !is_pow2(D))
    return ts_fail(TS_EUSAGE,
                   "--dp %d: must be a power of two (exact data parallelism combines the ranks' "
                   "gradients as a binary tree; --fast lifts this)",
                   D);
  if (cfg->batch % D != 0)
    return ts_fail(TS_EUSAGE,
                   "--batch %d: must be divisible by --dp %d (each rank holds whole sequences)",
                   cfg->batch, D);
  long long per_rank = (long long)(cfg->batch / D) * (cfg->seq / cfg->leaf);
  if (!cfg->fast && (per_rank & (per_rank - 1)) != 0)
    return ts_fail(TS_EUSAGE,
                   "--batch %d with --dp %d: each rank holds %d sequences x %d leaves = %lld "
                   "gradient leaves, not a power of two, so its sums are not a subtree of the "
                   "serial tree; choose --batch so that batch/dp x seq/leaf is a power of two",
                   cfg->batch, D, cfg->batch / D, cfg->seq / cfg->leaf, per_rank);
  return TS_OK;
}

// ---------------------------------------------------------------------------
// JSON form. One table drives both directions, so a field added to the table
// is written and read back; floats are written twice, as "%.9g" for people and
// as a "%a" string (key suffix _hex) that reads back bit for bit.
typedef enum { F_INT, F_U64, F_FLOAT, F_STR, F_VARIANT } field_kind;

typedef struct {
  const char *key;
  field_kind kind;
  size_t off;
  size_t size;  // strings: capacity of the char array
  int required; // model fields: a checkpoint without them is damaged
  int llama;    // written and required only for the LLaMA variant
  int optional; // written only when not 0 (memory options: files stay as they were)
} field;

#define FLD(k, kind, member, req)                                                                  \
  { k, kind, offsetof(ts_config, member), sizeof(((ts_config *)0)->member), req, 0, 0 }
#define FLD_LLAMA(k, kind, member)                                                                 \
  { k, kind, offsetof(ts_config, member), sizeof(((ts_config *)0)->member), 1, 1, 0 }
#define FLD_OPT(k, member)                                                                         \
  { k, F_INT, offsetof(ts_config, member), sizeof(((ts_config *)0)->member), 0, 0, 1 }
#define FLD_OPTF(k, member)                                                                        \
  { k, F_FLOAT, offsetof(ts_config, member), sizeof(((ts_config *)0)->member), 0, 0, 1 }

static const field fields[] = {
    FLD("preset", F_STR, preset, 0),
    FLD("variant", F_VARIANT, variant, 1),
    FLD("vocab", F_INT, vocab, 1),
    FLD("d", F_INT, d, 1),
    FLD("n_layer", F_INT, n_layer, 1),
    FLD("n_head", F_INT, n_head, 1),
    FLD_LLAMA("n_kv_head", F_INT, n_kv_head),
    FLD_LLAMA("rope_theta", F_FLOAT, rope_theta),
    FLD("d_ff", F_INT, d_ff, 1),
    FLD("seq", F_INT, seq, 1),
    FLD("tied", F_INT, tied, 1),
    FLD("dropout", F_FLOAT, dropout, 1),
    FLD("batch", F_INT, batch, 0),
    FLD("steps", F_INT, steps, 0),
    FLD("seed", F_U64, seed, 0),
    FLD("tile", F_INT, tile, 0),
    FLD("leaf", F_INT, leaf, 0),
    FLD("lr", F_FLOAT, lr, 0),
    FLD("min_lr_frac", F_FLOAT, min_lr_frac, 0),
    FLD("weight_decay", F_FLOAT, weight_decay, 0),
    FLD("beta1", F_FLOAT, beta1, 0),
    FLD("beta2", F_FLOAT, beta2, 0),
    FLD("eps", F_FLOAT, eps, 0),
    FLD("grad_clip", F_FLOAT, grad_clip, 0),
    FLD("warmup", F_INT, warmup, 0),
    FLD("val_frac", F_FLOAT, val_frac, 0),
    FLD("eval_every", F_INT, eval_every, 0),
    FLD("eval_batches", F_INT, eval_batches, 0),
    FLD("threads", F_INT, threads, 0),
    FLD("fast", F_INT, fast, 0),
    FLD_OPT("optimizer", optimizer),
    FLD_OPTF("muon_lr", muon_lr),
    FLD_OPT("checkpoint", checkpoint),
    FLD_OPT("fused_ce", fused_ce),
    FLD_OPT("tiled_mlp", tiled_mlp),
    FLD_OPT("compress", compress),
    FLD_OPT("compress_rank", compress_rank),
    FLD_OPT("compress_stages", compress_stages),
    FLD_OPTF("proj_lr", proj_lr),
    FLD_OPT("vq_groups", vq_groups),
    FLD_OPT("vq_rounds", vq_rounds),
    FLD_OPT("vq_codes", vq_codes),
    FLD_OPTF("vq_gamma", vq_gamma),
    FLD_OPTF("vq_commit", vq_commit),
    FLD_OPT("vq_sync_codes", vq_sync_codes),
    FLD("data_path", F_STR, data_path, 0),
    FLD("log_path", F_STR, log_path, 0),
    FLD("ckpt_dir", F_STR, ckpt_dir, 0),
    FLD("ckpt_every", F_INT, ckpt_every, 0),
    FLD("resume", F_INT, resume, 0),
    FLD("quiet", F_INT, quiet, 0),
};
#define N_FIELDS ((int)(sizeof fields / sizeof fields[0]))

static const char *variant_names[] = {"gpt", "llama"};

// Appends to buf at *len, tracking overflow in *len (> cap means truncated).
static void put(char *buf, size_t cap, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void put(char *buf, size_t cap, size_t *len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  size_t room = *len < cap ? cap - *len : 0;
  int n = vsnprintf(room ? buf + *len : NULL, room, fmt, ap);
  va_end(ap);
  if (n > 0) *len += (size_t)n;
}

static void put_string(char *buf, size_t cap, size_t *len, const char *s) {
  size_t room = *len < cap ? cap - *len : 0;
  *len += json_escape(room ? buf + *len : NULL, room, s);
}

int ts_config_to_json(const ts_config *cfg, char *buf, size_t cap) {
  size_t len = 0;
  const char *base = (const char *)cfg;
  put(buf, cap, &len, "{");
  for (int i = 0; i < N_FIELDS; i++) {
    const field *f = &fields[i];
    const void *p = base + f->off;
    if (f->llama && cfg->variant != TS_LLAMA) continue; // GPT files stay as they were
    if (f->optional && (f->kind == F_FLOAT ? *(const float *)p == 0.0f : *(const int *)p == 0))
      continue;
    put(buf, cap, &len, "%s\"%s\":", i ? "," : "", f->key);
    switch (f->kind) {
    case F_INT: put(buf, cap, &len, "%d", *(const int *)p); break;
    case F_U64: put(buf, cap, &len, "%llu", (unsigned long long)*(const uint64_t *)p); break;
    case F_FLOAT: {
      double v = *(const float *)p;
      put(buf, cap, &len, "%.9g,\"%s_hex\":\"%a\"", v, f->key, v);
      break;
    }
    case F_STR: put_string(buf, cap, &len, (const char *)p); break;
    case F_VARIANT: {
      int v = (int)*(const ts_variant *)p;
      put_string(buf, cap, &len, v >= 0 && v < 2 ? variant_names[v] : "unknown");
      break;
    }
    }
  }
  put(buf, cap, &len, "}");
  if (len >= cap)
    return ts_fail(TS_ERUNTIME, "config JSON needs %zu bytes, buffer has %zu", len + 1, cap);
  return TS_OK;
}

// ---------------------------------------------------------------------------
// Reading back. Unknown keys are ignored whatever their values (other writers
// may nest extra information there), so that newer files stay readable.
static const field *find_field(const char *key, size_t len) {
  for (int i = 0; i < N_FIELDS; i++)
    if (strlen(fields[i].key) == len && strncmp(fields[i].key, key, len) == 0) return &fields[i];
  return NULL;
}

// Parses a value into the field, from its text: exact integers (a seed above
// 2^53 must not pass through a double) and floats. Floats: the _hex form wins
// over the decimal one whichever comes first, so the round trip is exact.
static int set_field(ts_config *cfg, const field *f, const json_value *jv, int from_hex,
                     int *seen_hex) {
  char *base = (char *)cfg;
  void *p = base + f->off;
  int is_string = jv->type == JSON_STRING, is_number = jv->type == JSON_NUMBER;
  const char *text = jv->str;
  char *end;
  errno = 0;
  switch (f->kind) {
  case F_INT: {
    if (!is_number) return -1;
    long v = strtol(text, &end, 10);
    if (*end || errno || v < -2147483647L - 1 || v > 2147483647L) return -1;
    *(int *)p = (int)v;
    return 0;
  }
  case F_U64: return is_number ? json_u64(jv, (uint64_t *)p) : -1;
  case F_FLOAT: {
    if (is_string != from_hex) return -1;
    if (!from_hex && *seen_hex) return 0;
    if (!is_string && !is_number) return -1;
    // strtof reads both "%a" and "%.9g" exactly; overflow (ERANGE) is an
    // error, but underflow to a subnormal is a legitimate value
    float v = strtof(text, &end);
    if (*end || end == text || (errno == ERANGE && isinf(v))) return -1;
    *(float *)p = v;
    if (from_hex) *seen_hex = 1;
    return 0;
  }
  case F_STR:
    if (!is_string || strlen(text) >= f->size) return -1;
    memcpy(p, text, strlen(text) + 1);
    return 0;
  case F_VARIANT:
    if (!is_string) return -1;
    for (int v = 0; v < 2; v++)
      if (strcmp(text, variant_names[v]) == 0) {
        *(ts_variant *)p = (ts_variant)v;
        return 0;
      }
    return -1;
  }
  return -1;
}

int ts_config_from_json(ts_config *cfg, const char *json) {
  json_value obj;
  json_error err;
  // nan and inf: "%.9g" writes them for a float that is not finite
  if (json_parse(&obj, json, strlen(json), JSON_NONFINITE | JSON_ANY_BYTES, &err) != 0)
    return ts_fail(TS_ERUNTIME, "config JSON: malformed near byte %zu: %s", err.pos, err.msg);
  if (obj.type != JSON_OBJECT) {
    json_free(&obj);
    return ts_fail(TS_ERUNTIME, "config JSON: not an object");
  }
  int seen[N_FIELDS] = {0}, seen_hex[N_FIELDS] = {0}, rc = TS_OK;
  for (int i = 0; i < obj.n && rc == TS_OK; i++) {
    const json_value *v = &obj.items[i];
    size_t klen = strlen(v->key);
    int from_hex = klen > 4 && strcmp(v->key + klen - 4, "_hex") == 0;
    const field *f = find_field(v->key, from_hex ? klen - 4 : klen);
    if (f == NULL || (from_hex && f->kind != F_FLOAT)) continue;
    int k = (int)(f - fields);
    if (set_field(cfg, f, v, from_hex, &seen_hex[k]) != 0)
      rc = ts_fail(TS_ERUNTIME, "config JSON: bad value for \"%s%s\"", f->key,
                   from_hex ? "_hex" : "");
    seen[k] = 1;
  }
  json_free(&obj);
  for (int i = 0; i < N_FIELDS && rc == TS_OK; i++)
    if (fields[i].required && !seen[i] && (!fields[i].llama || cfg->variant == TS_LLAMA))
      rc = ts_fail(TS_ERUNTIME, "config JSON: missing \"%s\"", fields[i].key);
  if (rc == TS_OK && cfg->variant == TS_GPT) { // not in a GPT's JSON: the canonical values
    cfg->n_kv_head = 0;
    cfg->rope_theta = 0.0f;
  }
  return rc;
}
