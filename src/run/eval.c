// tessera eval: the validation loss of a checkpoint, its model read from the
// checkpoint's configuration (checked like the flags, checkpoint.c).
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run.h"
#include "train/ckpt.h"

// The same weights with each boundary's basis replaced by the identity (the
// MAPL paper's probe of SSN, its Table 4): what the stream holds outside the
// subspace the model was trained through. vl: the loss as trained.
static int identity_probe(ts_model *m, ts_shard *whole, ts_data *data, const ts_config *cfg,
                          int windows, int *inputs, int *targets, float vl) {
  float vi;
  ts_model_set_identity_boundaries(m, 1);
  int rc = ts_run_evaluate_windows(whole, data, cfg, NULL, windows, inputs, targets, &vi);
  if (rc) return rc;
  printf("identity boundaries: val loss %.6f (%a), change %+.6f (%+.3g%%)\n", (double)vi,
         (double)vi, (double)(vi - vl), 100.0 * ((double)vi - vl) / vl);
  return TS_OK;
}

// --activations-out: the stream entering each layer l (0 < l < L) over the
// evaluated batches, one (E·B·T × d) buffer a layer, filled batch by batch as
// the model's tap reports it (ts_residual_tap), then written as
// "residual.<l>" with the checkpoint's configuration (bench/geometry.py reads
// it: docs/COMPRESSION.md "Geometry"), and the rows' token ids as "tokens"
// (floats: ids below 2^24 are exact), which the measures subtract the
// embeddings of.
typedef struct {
  int L, d;
  int64_t rows;      // of the whole file: E·B·T
  float **x;         // per l (x[0]: the token ids)
  int64_t *filled;   // rows written per l
} activations;

// More than this is refused before anything runs: it is held in memory whole.
#define TS_ACTIVATIONS_MAX_BYTES ((size_t)4 << 30)

static void tap_activations(void *ctx, int l, const float *x, const int *tokens, int64_t rows,
                            int d) {
  activations *a = ctx;
  if (l <= 0 || l >= a->L || d != a->d || a->filled[l] + rows > a->rows) return;
  if (l == 1) {
    for (int64_t i = 0; i < rows; i++) a->x[0][a->filled[0] + i] = (float)tokens[i];
    a->filled[0] += rows;
  }
  memcpy(a->x[l] + a->filled[l] * d, x, (size_t)rows * d * sizeof(float));
  a->filled[l] += rows;
}

static void activations_free(activations *a) {
  if (a->x)
    for (int l = 0; l < a->L; l++) free(a->x[l]);
  free(a->x);
  free(a->filled);
}

static int activations_create(const ts_config *cfg, const char *path, activations *a) {
  *a = (activations){.L = cfg->n_layer, .d = cfg->d,
                     .rows = (int64_t)cfg->eval_batches * cfg->batch * cfg->seq};
  if (a->L < 2)
    return ts_fail(TS_EUSAGE, "--activations-out %s: a model of %d layer has no stream between "
                   "layers", path, a->L);
  const double bytes = (double)(a->L - 1) * (double)a->rows * a->d * sizeof(float);
  if (bytes > (double)TS_ACTIVATIONS_MAX_BYTES)
    return ts_fail(TS_EUSAGE, "--activations-out %s: %d layers x %lld rows x %d floats is %.1f "
                   "GiB, more than the %zu GiB held in memory: lower --eval-batches", path,
                   a->L - 1, (long long)a->rows, a->d, bytes / (1 << 30),
                   TS_ACTIVATIONS_MAX_BYTES >> 30);
  // a directory that cannot take the file is found before the batches run
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (!slash) snprintf(dir, sizeof dir, ".");
  else slash[slash == dir] = '\0';
  if (access(dir, W_OK | X_OK) != 0)
    return ts_fail(TS_ERUNTIME, "--activations-out %s: cannot write into %s (%s)", path, dir,
                   strerror(errno));
  a->x = calloc((size_t)a->L, sizeof *a->x);
  a->filled = calloc((size_t)a->L, sizeof *a->filled);
  if (!a->x || !a->filled) return ts_fail(TS_ERUNTIME, "out of memory");
  for (int l = 0; l < a->L; l++)
    if (!(a->x[l] = malloc((size_t)a->rows * (l ? a->d : 1) * sizeof(float))))
      return ts_fail(TS_ERUNTIME, "--activations-out %s: out of memory for %.1f GiB", path,
                     bytes / (1 << 30));
  return TS_OK;
}

// The file: the tensors, the checkpoint's configuration and where it came from.
static int activations_write(const activations *a, const char *path, const char *ckpt_path,
                             const ts_run_ckpt *ck, const ts_config *cfg) {
  for (int l = 0; l < a->L; l++)
    if (a->filled[l] != a->rows) // every forward reports every layer: anything else is a bug
      return ts_fail(TS_ERUNTIME, "--activations-out %s: layer %d reported %lld of %lld rows",
                     path, l, (long long)a->filled[l], (long long)a->rows);
  ts_tensor *t = calloc((size_t)a->L, sizeof *t);
  char *config = malloc(TS_CONFIG_JSON_MAX);
  int rc = !t || !config ? ts_fail(TS_ERUNTIME, "out of memory")
                         : ts_config_to_json(cfg, config, TS_CONFIG_JSON_MAX);
  if (rc) {
    free(t); free(config);
    return rc;
  }
  for (int l = 0; l < a->L; l++) { // the ids last: the layers' names come first in the file
    ts_tensor *e = &t[l ? l - 1 : a->L - 1];
    snprintf(e->name, sizeof e->name, l ? "residual.%d" : "tokens", l);
    e->data = a->x[l];
    e->ndim = l ? 2 : 1;
    e->shape[0] = a->rows;
    e->shape[1] = l ? a->d : 0;
  }
  char step[32];
  snprintf(step, sizeof step, "%" PRId64, ck->step);
  const ts_meta meta[] = {{"tessera.config", config},
                          {"tessera.checkpoint", ckpt_path},
                          {"tessera.step", step},
                          {"tessera.activations", "residual.<l>: the stream entering layer l, "
                                                  "rows of the validation batches in order; "
                                                  "tokens: their ids"}};
  rc = ts_ckpt_write(path, t, a->L, meta, 4);
  if (rc) rc = ts_fail_flag(rc, "--activations-out", path);
  free(t); free(config);
  return rc;
}

// The format eval reads the validation data in (cfg->data_format), checked
// against the checkpoint's (trained): the flag's, else the file's; recorded:
// the data is the checkpoint's own; file: the one file read.
static int resolve_format(ts_config *cfg, const ts_config *cfg_in, const ts_config *trained,
                          const char *ckpt_path, const char *file, int recorded) {
  if (recorded && access(file, R_OK) != 0)
    return ts_fail(TS_ERUNTIME, "checkpoint %s was trained on %s, which cannot be read (%s): "
                   "pass --data", ckpt_path, file, strerror(errno));
  if (recorded && cfg_in->data_format == TS_DATA_DETECT) cfg->data_format = trained->data_format;
  else cfg->data_format = cfg_in->data_format;
  const char *flag = cfg->val_path[0] ? "--val-data" : "--data";
  int rc;
  if (cfg->data_format == TS_DATA_DETECT && (rc = ts_data_detect(file, &cfg->data_format)))
    return recorded ? rc : ts_fail_flag(rc, flag, file);
  if (cfg->data_format == TS_DATA_DETECT &&
      (trained->data_format == TS_DATA_U16 || trained->data_format == TS_DATA_U32)) {
    cfg->data_format = trained->data_format;
    // nothing in the file says its width: a file of uint32 ids read as the
    // checkpoint's uint16 would give a loss of ids every second one 0
    if (cfg->data_format == TS_DATA_U16 && ts_data_looks_u32(file))
      return ts_fail(TS_EUSAGE, "%s %s: a .bin without a header, read as checkpoint %s's "
                     "uint16 ids, looks like uint32 ids (every second 16-bit word is 0): name "
                     "its format with --data-format", flag, file, ckpt_path);
  }
  // text (bytes) and token ids are other languages: a loss of one on the other means nothing
  // (a checkpoint that does not say what it was trained on is not refused)
  if (!recorded && cfg->data_format != TS_DATA_DETECT && trained->data_format >= 0 &&
      trained->data_format < TS_DATA_NFORMATS &&
      (cfg->data_format == TS_DATA_BYTES) != (trained->data_format == TS_DATA_BYTES))
    return ts_fail(TS_EUSAGE, "%s %s is %s, but checkpoint %s was trained on %s (%s)", flag, file,
                   cfg->data_format == TS_DATA_BYTES ? "text (bytes)" : "token ids", ckpt_path,
                   trained->data_format == TS_DATA_BYTES ? "text (bytes)" : "token ids",
                   ts_data_format_names[trained->data_format]);
  return TS_OK;
}

int ts_eval(const ts_config *cfg_in, const char *ckpt_path) {
  return ts_eval_with(cfg_in, ckpt_path, NULL);
}

// The flags' part of the checkpoint's configuration cfg (see ts_eval_with);
// returns whether the data is the checkpoint's own (no --data, no --val-data).
static int settings_from_flags(ts_config *cfg, const ts_config *cfg_in) {
  const int recorded = cfg_in->data_from_ckpt && !cfg_in->val_path[0];
  if (!recorded) {
    snprintf(cfg->data_path, sizeof cfg->data_path, "%s", cfg_in->data_path);
    snprintf(cfg->val_path, sizeof cfg->val_path, "%s", cfg_in->val_path);
  }
  if (!recorded || !cfg_in->val_frac_from_ckpt) cfg->val_frac = cfg_in->val_frac;
  cfg->eval_batches = cfg_in->eval_batches;
  cfg->checkpoint = cfg_in->checkpoint;
  cfg->fused_ce = cfg_in->fused_ce;
  cfg->tiled_mlp = cfg_in->tiled_mlp;
  return recorded;
}

int ts_eval_with(const ts_config *cfg_in, const char *ckpt_path, const ts_eval_options *opt) {
  const char *act_path = opt && opt->activations_out && opt->activations_out[0]
                             ? opt->activations_out : NULL;
  const int identity = opt && opt->identity_boundaries;
  const int windows = opt && opt->whole_split ? TS_EVAL_TILED : TS_EVAL_RANDOM;
  activations act = {0};
  ts_run_setup_threads(cfg_in, 1);
  ts_run_ckpt ck;
  ts_data *data = NULL;
  ts_model *m = NULL;
  int *inputs = NULL, *targets = NULL;
  int rc = ts_run_open_checkpoint(ckpt_path, cfg_in, 0, 1, 1, &ck);
  if (rc) return rc;
  // the model (its vocabulary too) comes from the checkpoint; batches and
  // the memory options (which change no bit) from the flags; the data from
  // the flags, else (no --data, no --val-data) the checkpoint's validation
  // split: its files, format and --val-frac (that flag may still change)
  ts_config cfg = ck.cfg;
  if (identity && cfg.compress == TS_COMPRESS_NONE &&
      (rc = ts_fail(TS_EUSAGE, "--identity-boundaries: checkpoint %s has no compressed "
                    "boundaries (it was trained without --compress)", ckpt_path)))
    goto done;
  const int recorded = settings_from_flags(&cfg, cfg_in);
  // Only the validation split is read: with --val-data that file alone. Its
  // format is the flag's, else what the file says; a .bin that says nothing
  // is read as the checkpoint's raw ids if it was trained on raw ids.
  const char *file = cfg.val_path[0] ? cfg.val_path : cfg.data_path;
  if ((rc = resolve_format(&cfg, cfg_in, &ck.cfg, ckpt_path, file, recorded))) goto done;
  if ((rc = ts_run_open_data(&cfg, cfg.val_path[0] ? NULL : cfg.data_path, &data))) goto done;
  if (windows == TS_EVAL_TILED && (cfg.eval_batches = ts_run_tiled_batches(data, &cfg)) < 1) {
    rc = ts_fail(TS_EUSAGE, "--whole-split: the validation split of %s has %zu tokens, fewer "
                 "than one batch of %d windows of %d (%lld tokens)", file,
                 ts_data_split_len(data, TS_SPLIT_VAL), cfg.batch, cfg.seq,
                 (long long)cfg.batch * cfg.seq + 1);
    goto done;
  }
  if ((rc = ts_model_create(&cfg, &m))) { // the model is the checkpoint's: say which
    rc = ts_run_restate(ckpt_path, "tessera.config");
    goto done;
  }
  inputs = malloc((size_t)cfg.batch * cfg.seq * sizeof(int));
  targets = malloc((size_t)cfg.batch * cfg.seq * sizeof(int));
  if (!inputs || !targets) { rc = ts_fail(TS_ERUNTIME, "out of memory"); goto done; }
  ts_model_init(m, cfg.seed); // what no checkpoint holds: a codec's frozen bases, from the seed
  if ((rc = ts_run_load_checkpoint(m, NULL, NULL, 0, &ck))) goto done;
  if (act_path) {
    if ((rc = activations_create(&cfg, act_path, &act))) goto done;
    ts_model_set_residual_tap(m, tap_activations, &act);
  }
  float vl;
  ts_shard whole = {.m = m, .nb = cfg.batch, .T = cfg.seq, .Tl = cfg.seq};
  if ((rc = ts_run_evaluate_windows(&whole, data, &cfg, NULL, windows, inputs, targets, &vl)))
    goto done;
  // finite weights can still overflow on this data: a number, or an error
  if (!isfinite(vl)) {
    rc = ts_fail(TS_ERUNTIME, "checkpoint %s: validation loss is %g on %s", ckpt_path, (double)vl,
                 file);
    goto done;
  }
  printf("checkpoint %s (step %" PRId64 "): val loss %.6f (%a) over %d batches of %dx%d",
         ckpt_path, ck.step, (double)vl, (double)vl, cfg.eval_batches, cfg.batch, cfg.seq);
  if (windows == TS_EVAL_TILED)
    printf(" (the whole validation split, tiled: %lld of its %zu tokens scored)",
           (long long)cfg.eval_batches * cfg.batch * cfg.seq,
           ts_data_split_len(data, TS_SPLIT_VAL));
  printf("\n");
  if (act_path && !(rc = activations_write(&act, act_path, ckpt_path, &ck, &cfg)))
    printf("activations: %d layer inputs x %lld rows x %d -> %s\n", act.L - 1,
           (long long)act.rows, act.d, act_path);
  ts_model_set_residual_tap(m, NULL, NULL); // (the activations are the model's as trained)
  if (!rc && identity) rc = identity_probe(m, &whole, data, &cfg, windows, inputs, targets, vl);
done:
  activations_free(&act);
  free(inputs); free(targets);
  ts_model_free(m);
  ts_data_close(data);
  ts_run_close_checkpoint(&ck);
  return rc;
}
