// Configuration: presets, run defaults and validation. Its JSON form (run
// logs, checkpoints) is config_json.c; the parallel layout's rules layout.c.
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "boundary/boundary.h"
#include "tessera.h"
#include "ts_paths.h" // TS_PKGDATADIR, TS_SRCDATADIR (written by make)

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
    cfg->vocab = 256; // byte-level tokens (--vocab for a file of token ids)
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
// The bundled corpus: data/ of the working directory (a checkout), where
// `make install` put it, or the source tree this binary was built from, the
// first that exists; else the checkout's path, for the error to name.
static void default_corpus(char *buf, size_t cap) {
  const char *where[] = {"data/corpus.txt", TS_PKGDATADIR "/corpus.txt",
                         TS_SRCDATADIR "/corpus.txt"};
  snprintf(buf, cap, "%s", where[0]);
  for (size_t i = 0; i < sizeof where / sizeof where[0]; i++)
    if (access(where[i], R_OK) == 0) {
      snprintf(buf, cap, "%s", where[i]);
      return;
    }
}

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
  cfg->lr_schedule = TS_LR_COSINE;
  cfg->decay_frac = 0.0f; // TS_WSD_DECAY_FRAC when wsd is chosen (ts_config_finalize)
  cfg->val_frac = 0.1f;
  cfg->eval_every = 0;
  cfg->eval_batches = 4;
  cfg->threads = 0;
  cfg->fast = 0;
  cfg->data_format = TS_DATA_DETECT; // the run asks the file (data.h)
  default_corpus(cfg->data_path, sizeof cfg->data_path);
  cfg->val_path[0] = '\0';
  cfg->tokenizer_path[0] = '\0';
  cfg->log_path[0] = '\0';
  cfg->ckpt_dir[0] = '\0';
  cfg->init_from[0] = '\0';
  cfg->ckpt_every = 0;
  cfg->keep_last = 0;
  cfg->resume = 0;
  cfg->quiet = 0;
  cfg->log_every = 0; // every step
  cfg->data_from_ckpt = cfg->val_frac_from_ckpt = 0;
}

void ts_config_drop_run_settings(ts_config *cfg) {
  cfg->threads = 0;
  cfg->quiet = 0;
  cfg->resume = 0;
  cfg->eval_every = 0;
  cfg->eval_batches = 4;
  cfg->ckpt_every = 0;
  cfg->keep_last = 0;
  cfg->log_every = 0; // every step
  cfg->data_from_ckpt = cfg->val_frac_from_ckpt = 0;
  cfg->data_path[0] = '\0';
  cfg->val_path[0] = '\0';
  cfg->tokenizer_path[0] = '\0'; // its model's digest is compared apart (run/tokenizer_record.c)
  cfg->log_path[0] = '\0';
  cfg->ckpt_dir[0] = '\0';
  // the weights a run started from are its first checkpoint's (or its
  // resumed one's): the run it continues computed from those
  cfg->init_from[0] = '\0';
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

// The weight matrices alone (embeddings, head, each layer's projections and
// MLP): the biases, norms and compression tensors are left out, so that this
// is a lower bound of the parameter count that needs no parameter table, and
// in a double it cannot overflow whatever the sizes.
double ts_config_param_floor(const ts_config *cfg) {
  const double C = cfg->d, F = cfg->d_ff, V = cfg->vocab, L = cfg->n_layer;
  const int hkv = cfg->n_kv_head > 0 ? cfg->n_kv_head : cfg->n_head;
  const double Ckv = cfg->n_head > 0 ? (double)hkv * (cfg->d / cfg->n_head) : C;
  const int llama = cfg->variant == TS_LLAMA;
  double per_layer = 2.0 * C * C + 2.0 * Ckv * C + (llama ? 3.0 : 2.0) * C * F;
  return V * C * (cfg->tied ? 1.0 : 2.0) + (llama ? 0.0 : (double)cfg->seq * C) + L * per_layer;
}

// Every check names the flag that sets the field, so a user knows what to fix.
// A check written as !(x ok) refuses NaN too.

// The model: its variant and shape, its tokens, and what the variant
// allows (GPT: as many key/value heads as heads; LLaMA: grouped-query
// attention and RoPE).
static int finalize_model(ts_config *cfg) {
  if (cfg->variant != TS_GPT && cfg->variant != TS_LLAMA)
    return ts_fail(TS_EUSAGE, "variant %d: unknown", (int)cfg->variant);
  if (cfg->vocab < 2) return ts_fail(TS_EUSAGE, "--vocab %d: must be >= 2", cfg->vocab);
  if (cfg->data_format < TS_DATA_DETECT || cfg->data_format >= TS_DATA_NFORMATS)
    return ts_fail(TS_EUSAGE, "--data-format %d: unknown", cfg->data_format);
  // a detected format is checked when the run resolves it (ts_data_open_spec)
  if (cfg->data_format == TS_DATA_BYTES && cfg->vocab < 256)
    return ts_fail(TS_EUSAGE, "--vocab %d: --data-format bytes has token ids 0..255, which "
                   "needs --vocab >= 256", cfg->vocab);
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
  return TS_OK;
}

// The sequence, tile and leaf (R1, R3): the tile and leaf, by default from
// the sequence length, are powers of two that divide it, the leaf a whole
// number of tiles.
static int finalize_sequence(ts_config *cfg) {
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
  return TS_OK;
}

// The optimizer, and Muon's own learning rate: given only with a Muon
// optimizer, 0.02 when not given.
static int finalize_optimizer(ts_config *cfg) {
  if (cfg->optimizer < TS_OPT_ADAMW || cfg->optimizer > TS_OPT_MUON_PE)
    return ts_fail(TS_EUSAGE, "optimizer %d: unknown", cfg->optimizer);
  if (cfg->optimizer == TS_OPT_ADAMW && cfg->muon_lr != 0.0f)
    return ts_fail(TS_EUSAGE, "--muon-lr %g: only with --optimizer muon or muon-pe",
                   (double)cfg->muon_lr);
  if (cfg->optimizer != TS_OPT_ADAMW && cfg->muon_lr == 0.0f) cfg->muon_lr = 0.02f;
  if (!(cfg->muon_lr >= 0.0f && cfg->muon_lr < 10.0f))
    return ts_fail(TS_EUSAGE, "--muon-lr %g: must be in [0, 10)", (double)cfg->muon_lr);
  return TS_OK;
}

// The training schedule: the batch, the steps, AdamW's hyperparameters and
// the learning rate's schedule (decay_frac wsd's alone).
static int finalize_schedule(ts_config *cfg) {
  if (cfg->batch < 1) return ts_fail(TS_EUSAGE, "--batch %d: must be >= 1", cfg->batch);
  if (cfg->steps < 1) return ts_fail(TS_EUSAGE, "--steps %d: must be >= 1", cfg->steps);
  if (!(cfg->lr > 0.0f && isfinite(cfg->lr)))
    return ts_fail(TS_EUSAGE, "--lr %g: must be > 0", cfg->lr);
  if (!(cfg->min_lr_frac >= 0.0f && cfg->min_lr_frac <= 1.0f))
    return ts_fail(TS_EUSAGE, "--min-lr-frac %g: must be in [0, 1]", cfg->min_lr_frac);
  if (!(cfg->weight_decay >= 0.0f && isfinite(cfg->weight_decay)))
    return ts_fail(TS_EUSAGE, "--weight-decay %g: must be >= 0", cfg->weight_decay);
  if (!(cfg->beta1 >= 0.0f && cfg->beta1 < 1.0f))
    return ts_fail(TS_EUSAGE, "--beta1 %g: must be in [0, 1)", cfg->beta1);
  if (!(cfg->beta2 >= 0.0f && cfg->beta2 < 1.0f))
    return ts_fail(TS_EUSAGE, "--beta2 %g: must be in [0, 1)", cfg->beta2);
  if (!(cfg->eps > 0.0f && isfinite(cfg->eps)))
    return ts_fail(TS_EUSAGE, "--eps %g: must be > 0", cfg->eps);
  if (!(cfg->grad_clip >= 0.0f && isfinite(cfg->grad_clip)))
    return ts_fail(TS_EUSAGE, "--grad-clip %g: must be >= 0 (0 turns clipping off)",
                   cfg->grad_clip);
  if (cfg->warmup < 0) return ts_fail(TS_EUSAGE, "--warmup %d: must be >= 0", cfg->warmup);
  if (cfg->lr_schedule < 0 || cfg->lr_schedule >= TS_LR_NSCHEDULES)
    return ts_fail(TS_EUSAGE, "lr_schedule %d: unknown", cfg->lr_schedule);
  // decay_frac is wsd's alone, so that the other schedules' configurations
  // (and golden files) stay as they were
  if (cfg->lr_schedule != TS_LR_WSD && cfg->decay_frac != 0.0f)
    return ts_fail(TS_EUSAGE, "--decay-frac %g: only with --lr-schedule wsd",
                   (double)cfg->decay_frac);
  if (cfg->lr_schedule == TS_LR_WSD && cfg->decay_frac == 0.0f)
    cfg->decay_frac = TS_WSD_DECAY_FRAC;
  if (cfg->lr_schedule == TS_LR_WSD && !(cfg->decay_frac > 0.0f && cfg->decay_frac <= 1.0f))
    return ts_fail(TS_EUSAGE, "--decay-frac %g: must be in (0, 1]", (double)cfg->decay_frac);
  return TS_OK;
}

// The run around the training: evaluation, threads, switches, checkpoints
// and logging.
static int finalize_run(ts_config *cfg) {
  if (!(cfg->val_frac > 0.0f && cfg->val_frac < 1.0f))
    return ts_fail(TS_EUSAGE, "--val-frac %g: must be in (0, 1)", cfg->val_frac);
  if (cfg->eval_every < 0)
    return ts_fail(TS_EUSAGE, "--eval-every %d: must be >= 0 (0 = never)", cfg->eval_every);
  if (cfg->eval_batches < 1)
    return ts_fail(TS_EUSAGE, "--eval-batches %d: must be >= 1", cfg->eval_batches);
  // libgomp gives every thread its own stack and crashes, not fails, when it
  // cannot: a count no machine has is refused here instead
  if (cfg->threads < 0 || cfg->threads > TS_MAX_THREADS)
    return ts_fail(TS_EUSAGE, "--threads %d: must be in [0, %d] (0 = all cores)", cfg->threads,
                   TS_MAX_THREADS);
  if (cfg->fast != 0 && cfg->fast != 1)
    return ts_fail(TS_EUSAGE, "fast %d: must be 0 or 1", cfg->fast);
  // switches: a configuration read back from a file may hold anything
  const struct { const char *name; int v; } sw[] = {
      {"--checkpoint", cfg->checkpoint}, {"--fused-ce", cfg->fused_ce},
      {"--tiled-mlp", cfg->tiled_mlp},   {"--resume", cfg->resume},
      {"--quiet", cfg->quiet}};
  for (size_t i = 0; i < sizeof sw / sizeof sw[0]; i++)
    if (sw[i].v != 0 && sw[i].v != 1)
      return ts_fail(TS_EUSAGE, "%s %d: a switch, 0 or 1", sw[i].name, sw[i].v);
  if (cfg->ckpt_every < 0)
    return ts_fail(TS_EUSAGE, "--ckpt-every %d: must be >= 0", cfg->ckpt_every);
  if (cfg->ckpt_every > 0 && cfg->ckpt_dir[0] == '\0')
    return ts_fail(TS_EUSAGE, "--ckpt-every %d: needs --ckpt-dir", cfg->ckpt_every);
  if (cfg->resume && cfg->ckpt_dir[0] == '\0')
    return ts_fail(TS_EUSAGE, "--resume: needs --ckpt-dir");
  if (cfg->keep_last < 0)
    return ts_fail(TS_EUSAGE, "--keep-last %d: must be >= 0 (0 keeps every checkpoint)",
                   cfg->keep_last);
  if (cfg->keep_last > 0 && cfg->ckpt_dir[0] == '\0')
    return ts_fail(TS_EUSAGE, "--keep-last %d: needs --ckpt-dir", cfg->keep_last);
  if (cfg->log_every < 0) // 0 (the default) and 1: every step
    return ts_fail(TS_EUSAGE, "--log-every %d: must be >= 1", cfg->log_every);
  return TS_OK;
}

// The steps in this order, each stopping at its first failing check: an
// invalid configuration is refused by the same message, whatever else is
// wrong with it.
int ts_config_finalize(ts_config *cfg) {
  int rc;
  if ((rc = finalize_model(cfg))) return rc;
  if ((rc = finalize_sequence(cfg))) return rc;
  if ((rc = finalize_optimizer(cfg))) return rc;
  // stage-boundary compression: the common rules, then the codec's (boundary.h)
  if ((rc = ts_boundary_finalize(cfg))) return rc;
  if ((rc = finalize_schedule(cfg))) return rc;
  return finalize_run(cfg);
}
