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
                          int *inputs, int *targets, float vl) {
  float vi;
  ts_model_set_identity_boundaries(m, 1);
  int rc = ts_run_evaluate(whole, data, cfg, NULL, inputs, targets, &vi);
  if (rc) return rc;
  printf("identity boundaries: val loss %.6f (%a), change %+.6f (%+.3g%%)\n", (double)vi,
         (double)vi, (double)(vi - vl), 100.0 * ((double)vi - vl) / vl);
  return TS_OK;
}

int ts_eval(const ts_config *cfg_in, const char *ckpt_path, int identity_boundaries) {
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
  if (identity_boundaries && cfg.compress == TS_COMPRESS_NONE) {
    rc = ts_fail(TS_EUSAGE, "--identity-boundaries: checkpoint %s has no compressed boundaries "
                 "(it was trained without --compress)", ckpt_path);
    goto done;
  }
  const int recorded = cfg_in->data_from_ckpt && !cfg_in->val_path[0];
  if (!recorded) {
    snprintf(cfg.data_path, sizeof cfg.data_path, "%s", cfg_in->data_path);
    snprintf(cfg.val_path, sizeof cfg.val_path, "%s", cfg_in->val_path);
  }
  if (!recorded || !cfg_in->val_frac_from_ckpt) cfg.val_frac = cfg_in->val_frac;
  cfg.eval_batches = cfg_in->eval_batches;
  cfg.checkpoint = cfg_in->checkpoint;
  cfg.fused_ce = cfg_in->fused_ce;
  cfg.tiled_mlp = cfg_in->tiled_mlp;
  // Only the validation split is read: with --val-data that file alone. Its
  // format is the flag's, else what the file says; a .bin that says nothing
  // is read as the checkpoint's raw ids if it was trained on raw ids.
  const char *file = cfg.val_path[0] ? cfg.val_path : cfg.data_path;
  if (recorded && access(file, R_OK) != 0) {
    rc = ts_fail(TS_ERUNTIME, "checkpoint %s was trained on %s, which cannot be read (%s): pass "
                 "--data", ckpt_path, file, strerror(errno));
    goto done;
  }
  if (recorded && cfg_in->data_format == TS_DATA_DETECT) cfg.data_format = ck.cfg.data_format;
  else cfg.data_format = cfg_in->data_format;
  if (cfg.data_format == TS_DATA_DETECT && (rc = ts_data_detect(file, &cfg.data_format))) {
    if (!recorded) rc = ts_fail_flag(rc, cfg.val_path[0] ? "--val-data" : "--data", file);
    goto done;
  }
  if (cfg.data_format == TS_DATA_DETECT &&
      (ck.cfg.data_format == TS_DATA_U16 || ck.cfg.data_format == TS_DATA_U32)) {
    cfg.data_format = ck.cfg.data_format;
    // nothing in the file says its width: a file of uint32 ids read as the
    // checkpoint's uint16 would give a loss of ids every second one 0
    if (cfg.data_format == TS_DATA_U16 && ts_data_looks_u32(file)) {
      rc = ts_fail(TS_EUSAGE, "%s %s: a .bin without a header, read as checkpoint %s's uint16 "
                   "ids, looks like uint32 ids (every second 16-bit word is 0): name its format "
                   "with --data-format", cfg.val_path[0] ? "--val-data" : "--data", file,
                   ckpt_path);
      goto done;
    }
  }
  // text (bytes) and token ids are other languages: a loss of one on the other means nothing
  // (a checkpoint that does not say what it was trained on is not refused)
  if (!recorded && cfg.data_format != TS_DATA_DETECT && ck.cfg.data_format >= 0 &&
      ck.cfg.data_format < TS_DATA_NFORMATS &&
      (cfg.data_format == TS_DATA_BYTES) != (ck.cfg.data_format == TS_DATA_BYTES)) {
    rc = ts_fail(TS_EUSAGE, "%s %s is %s, but checkpoint %s was trained on %s (%s)",
                 cfg.val_path[0] ? "--val-data" : "--data", file,
                 cfg.data_format == TS_DATA_BYTES ? "text (bytes)" : "token ids", ckpt_path,
                 ck.cfg.data_format == TS_DATA_BYTES ? "text (bytes)" : "token ids",
                 ts_data_format_names[ck.cfg.data_format]);
    goto done;
  }
  if ((rc = ts_run_open_data(&cfg, cfg.val_path[0] ? NULL : cfg.data_path, &data))) goto done;
  if ((rc = ts_model_create(&cfg, &m))) { // the model is the checkpoint's: say which
    rc = ts_run_restate(ckpt_path, "tessera.config");
    goto done;
  }
  inputs = malloc((size_t)cfg.batch * cfg.seq * sizeof(int));
  targets = malloc((size_t)cfg.batch * cfg.seq * sizeof(int));
  if (!inputs || !targets) { rc = ts_fail(TS_ERUNTIME, "out of memory"); goto done; }
  ts_model_init(m, cfg.seed); // what no checkpoint holds: a codec's frozen bases, from the seed
  if ((rc = ts_run_load_checkpoint(m, NULL, NULL, 0, &ck))) goto done;
  float vl;
  ts_shard whole = {.m = m, .nb = cfg.batch, .T = cfg.seq, .Tl = cfg.seq};
  if ((rc = ts_run_evaluate(&whole, data, &cfg, NULL, inputs, targets, &vl))) goto done;
  // finite weights can still overflow on this data: a number, or an error
  if (!isfinite(vl)) {
    rc = ts_fail(TS_ERUNTIME, "checkpoint %s: validation loss is %g on %s", ckpt_path, (double)vl,
                 file);
    goto done;
  }
  printf("checkpoint %s (step %" PRId64 "): val loss %.6f (%a) over %d batches of %dx%d\n",
         ckpt_path, ck.step, (double)vl, (double)vl, cfg.eval_batches, cfg.batch, cfg.seq);
  if (identity_boundaries) rc = identity_probe(m, &whole, data, &cfg, inputs, targets, vl);
done:
  free(inputs); free(targets);
  ts_model_free(m);
  ts_data_close(data);
  ts_run_close_checkpoint(&ck);
  return rc;
}
