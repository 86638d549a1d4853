// tessera dump: the golden-file set of a configuration (docs/GOLDEN.md):
// config.json, the initial weights and batch, one step's gradients and
// logits, and the loss trajectory, each written to a temp name and renamed.
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "run.h"
#include "train/ckpt.h"

static int write_text_atomic(const char *path, const char *text) {
  char tmp[4200];
  if (ts_temp_path(tmp, sizeof tmp, path)) return ts_fail(TS_ERUNTIME, "%s: path too long", path);
  FILE *f = fopen(tmp, "w");
  if (!f) return ts_fail(TS_ERUNTIME, "cannot write %s: %s", tmp, strerror(errno));
  int bad = fputs(text, f) < 0;
  bad |= fflush(f) != 0;
  bad |= fsync(fileno(f)) != 0;
  bad |= fclose(f) != 0;
  if (bad || rename(tmp, path) != 0) {
    unlink(tmp);
    return ts_fail(TS_ERUNTIME, "cannot write %s: %s", path, strerror(errno));
  }
  return TS_OK;
}

int ts_dump(const ts_config *cfg_in, const char *out_dir, int traj_steps) {
  ts_config cfg = *cfg_in;
  cfg.steps = traj_steps; // the trajectory's schedule
  // The files must not depend on where the data lives or where logs go, so
  // that a dump made elsewhere compares byte for byte.
  const char *base = strrchr(cfg_in->data_path, '/');
  snprintf(cfg.data_path, sizeof cfg.data_path, "%s", base ? base + 1 : cfg_in->data_path);
  base = strrchr(cfg_in->val_path, '/');
  snprintf(cfg.val_path, sizeof cfg.val_path, "%s", base ? base + 1 : cfg_in->val_path);
  cfg.log_path[0] = cfg.ckpt_dir[0] = 0;
  cfg.threads = 0;
  ts_run_setup_threads(&cfg, 1);
  int rc;
  ts_data *data = NULL;
  ts_model *m = NULL;
  ts_adamw opt = {0};
  int *inputs = NULL, *targets = NULL;
  ts_tensor *pt = NULL, *gt = NULL;
  float *binp = NULL, *btgt = NULL;
  char *result = NULL;
  if ((rc = ts_run_check_fit(&cfg, 1, 1, 1, 1, 0, 1))) return rc; // before the directory and the model
  // the format config.json records, before the directory too
  if ((rc = ts_data_resolve(cfg_in->data_path, cfg_in->val_path, cfg_in->data_format,
                            &cfg.data_format)) ||
      (rc = ts_data_check_vocab(cfg.data_format, cfg.vocab, cfg_in->data_path)))
    return rc;
  if ((rc = ts_run_mkdir_p(out_dir))) return rc;
  ts_config where = *cfg_in; // the files where they are
  where.data_format = cfg.data_format;
  if ((rc = ts_run_open_data(&where, cfg_in->data_path, &data))) goto done;
  if ((rc = ts_model_create(&cfg, &m))) goto done;
  ts_model_init(m, cfg.seed);
  size_t np = ts_model_num_params(m);
  int nt = ts_model_num_tensors(m);
  size_t ntok = (size_t)cfg.batch * cfg.seq;
  pt = calloc((size_t)nt + 2, sizeof *pt);
  gt = calloc((size_t)nt + 1, sizeof *gt);
  inputs = malloc(ntok * sizeof(int));
  targets = malloc(ntok * sizeof(int));
  binp = malloc(ntok * sizeof(float));
  btgt = malloc(ntok * sizeof(float));
  result = malloc(64 + (size_t)traj_steps * 128 + 512);
  if ((rc = ts_adamw_init(&opt, np))) goto done;
  if (!pt || !gt || !inputs || !targets || !binp || !btgt || !result) { rc = ts_fail(TS_ERUNTIME, "out of memory"); goto done; }
  ts_model_tensors(m, pt, gt);
  if ((rc = ts_run_load_batch(data, TS_SPLIT_TRAIN, &cfg, 1, 0, cfg.batch, inputs, targets))) goto done;
  for (size_t i = 0; i < ntok; i++) { binp[i] = (float)inputs[i]; btgt[i] = (float)targets[i]; }

  char path[4200], cj[TS_CONFIG_JSON_MAX], buf[TS_CONFIG_JSON_MAX + 64];
  if ((rc = ts_config_to_json(&cfg, cj, sizeof cj))) goto done;
  snprintf(buf, sizeof buf, "{\"model\":%s}\n", cj);
  snprintf(path, sizeof path, "%s/config.json", out_dir);
  if ((rc = write_text_atomic(path, buf))) goto done;
  ts_tensor extra[2] = {
      {.name = "batch.inputs", .ndim = 2, .shape = {cfg.batch, cfg.seq}, .data = binp},
      {.name = "batch.targets", .ndim = 2, .shape = {cfg.batch, cfg.seq}, .data = btgt}};
  pt[nt] = extra[0];
  pt[nt + 1] = extra[1];
  ts_meta meta[] = {{"tessera.config", cj}};
  snprintf(path, sizeof path, "%s/weights.safetensors", out_dir);
  if ((rc = ts_ckpt_write(path, pt, nt + 2, meta, 1))) goto done;

  float loss = ts_model_forward(m, inputs, targets, 1, 1);
  if ((rc = ts_model_backward(m, 1))) goto done;
  float norm = ts_grad_norm_trained(gt, nt, np);
  uint64_t lh = ts_fnv1a64(TS_FNV_OFFSET, ts_model_logits(m), ntok * cfg.vocab * sizeof(float));
  ts_tensor lt = {.name = "logits", .ndim = 3, .shape = {cfg.batch, cfg.seq, cfg.vocab},
                  .data = (float *)ts_model_logits(m)};
  gt[nt] = lt;
  snprintf(path, sizeof path, "%s/grads.safetensors", out_dir);
  if ((rc = ts_ckpt_write(path, gt, nt + 1, meta, 1))) goto done;

  int len = sprintf(result,
                    "{\"loss\":%.9g,\"loss_hex\":\"%a\",\"logits_fnv1a64\":\"%016" PRIx64 "\","
                    "\"grad_norm_hex\":\"%a\",\"trajectory\":[",
                    (double)loss, (double)loss, lh, (double)norm);
  for (int s = 0; s < traj_steps; s++) {
    uint64_t step = (uint64_t)s + 1;
    float l = ts_model_forward(m, inputs, targets, step, 1);
    if ((rc = ts_model_backward(m, step))) goto done;
    float n2 = ts_grad_norm_trained(gt, nt, np);
    ts_clip_tensors(gt, nt, n2, cfg.grad_clip);
    if ((rc = ts_optimizer_step(&opt, pt, gt, nt, &cfg, s))) goto done;
    len += sprintf(result + len, "%s{\"step\":%d,\"loss\":%.9g,\"loss_hex\":\"%a\"}", s ? "," : "",
                   s + 1, (double)l, (double)l);
  }
  sprintf(result + len, "]}\n");
  snprintf(path, sizeof path, "%s/result.json", out_dir);
  rc = write_text_atomic(path, result);
done:
  free(pt); free(gt); free(inputs); free(targets); free(binp); free(btgt); free(result);
  ts_adamw_free(&opt);
  ts_model_free(m);
  ts_data_close(data);
  return rc;
}
