// tessera eval: the validation loss of a checkpoint, its model read from the
// checkpoint's configuration.
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include <stdio.h>
#include <stdlib.h>

#include "ckpt.h"
#include "run/run.h"

int ts_eval(const ts_config *cfg_in, const char *ckpt_path) {
  ts_config cfg = *cfg_in;
  ts_run_setup_threads(&cfg, 1);
  ts_ckpt *ck = NULL;
  ts_data *data = NULL;
  ts_model *m = NULL;
  int *inputs = NULL, *targets = NULL;
  ts_tensor *pt = NULL;
  int rc = ts_ckpt_open(ckpt_path, &ck);
  if (rc) return rc;
  const char *js = ts_ckpt_meta(ck, "tessera.config");
  if (!js || ts_config_from_json(&cfg, js) != TS_OK) {
    rc = ts_fail(TS_ERUNTIME, "checkpoint %s: missing or unreadable tessera.config", ckpt_path);
    goto done;
  }
  // the model comes from the checkpoint; data and batches from the flags
  snprintf(cfg.data_path, sizeof cfg.data_path, "%s", cfg_in->data_path);
  cfg.eval_batches = cfg_in->eval_batches;
  cfg.val_frac = cfg_in->val_frac;
  if ((rc = ts_data_open(cfg.data_path, cfg.val_frac, (size_t)cfg.seq + 1, &data))) goto done;
  if ((rc = ts_model_create(&cfg, &m))) goto done;
  int nt = ts_model_num_tensors(m);
  pt = calloc((size_t)nt, sizeof *pt);
  inputs = malloc((size_t)cfg.batch * cfg.seq * sizeof(int));
  targets = malloc((size_t)cfg.batch * cfg.seq * sizeof(int));
  if (!pt || !inputs || !targets) { rc = ts_fail(TS_ERUNTIME, "out of memory"); goto done; }
  ts_model_tensors(m, pt, NULL);
  for (int i = 0; i < nt && !rc; i++) rc = ts_ckpt_load(ck, &pt[i]);
  if (rc) goto done;
  float vl;
  ts_shard whole = {.m = m, .nb = cfg.batch, .T = cfg.seq, .Tl = cfg.seq};
  if ((rc = ts_run_evaluate(&whole, data, &cfg, NULL, inputs, targets, &vl))) goto done;
  const char *st = ts_ckpt_meta(ck, "tessera.step");
  printf("checkpoint %s (step %s): val loss %.6f (%a) over %d batches of %dx%d\n", ckpt_path,
         st ? st : "?", (double)vl, (double)vl, cfg.eval_batches, cfg.batch, cfg.seq);
done:
  free(pt); free(inputs); free(targets);
  ts_model_free(m);
  ts_data_close(data);
  ts_ckpt_close(ck);
  return rc;
}
