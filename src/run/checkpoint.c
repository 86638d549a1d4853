// Checkpoints of a training run and resuming from them (run.h;
// docs/CHECKPOINTS.md): parameters and AdamW moments in canonical order, the
// run's configuration and step; a resumed run refuses a checkpoint of
// another run and continues bit for bit.
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"
#include "run/run.h"

int ts_run_mkdir_p(const char *dir) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s", dir);
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(tmp, 0777) != 0 && errno != EEXIST)
      return ts_fail(TS_ERUNTIME, "cannot create directory %s: %s", tmp, strerror(errno));
    *p = '/';
  }
  if (mkdir(tmp, 0777) != 0 && errno != EEXIST)
    return ts_fail(TS_ERUNTIME, "cannot create directory %s: %s", tmp, strerror(errno));
  return TS_OK;
}

// Parameters, then the AdamW moments as "adam.m.<name>" / "adam.v.<name>".
static int ckpt_tensors(ts_model *m, ts_adamw *opt, ts_tensor **out) {
  int n = ts_model_num_tensors(m);
  ts_tensor *t = calloc((size_t)3 * n, sizeof(ts_tensor));
  if (!t) return -1;
  ts_model_tensors(m, t, NULL);
  size_t off = 0;
  for (int i = 0; i < n; i++) {
    for (int k = 1; k <= 2; k++) {
      ts_tensor *s = &t[k * n + i];
      *s = t[i];
      snprintf(s->name, sizeof s->name, "adam.%c.%s", k == 1 ? 'm' : 'v', t[i].name);
      s->data = (k == 1 ? opt->m : opt->v) + off;
    }
    off += (size_t)ts_tensor_numel(&t[i]);
  }
  *out = t;
  return 3 * n;
}

int ts_run_save_checkpoint(ts_model *m, ts_adamw *opt, const ts_config *cfg, int64_t step) {
  int rc = ts_run_mkdir_p(cfg->ckpt_dir);
  if (rc) return rc;
  char cfgjson[TS_CONFIG_JSON_MAX], stepbuf[32], optbuf[32], path[4200];
  if ((rc = ts_config_to_json(cfg, cfgjson, sizeof cfgjson))) return rc;
  ts_tensor *t;
  int n = ckpt_tensors(m, opt, &t);
  if (n < 0) return ts_fail(TS_ERUNTIME, "out of memory writing a checkpoint");
  snprintf(stepbuf, sizeof stepbuf, "%" PRId64, step);
  snprintf(optbuf, sizeof optbuf, "%" PRIu64, opt->step);
  ts_meta meta[] = {
      {"tessera.config", cfgjson},
      {"tessera.step", stepbuf},
      {"tessera.adam_step", optbuf},
      // Data windows and dropout masks are pure functions of (seed, step,
      // index): the step is the whole data position and generator state.
      {"tessera.data_position", stepbuf},
      {"tessera.rng", "philox4x32-10 counter-based, keyed by (seed, purpose, step, index)"},
  };
  snprintf(path, sizeof path, "%s/step-%08" PRId64 ".safetensors", cfg->ckpt_dir, step);
  rc = ts_ckpt_write(path, t, n, meta, (int)(sizeof meta / sizeof meta[0]));
  free(t);
  return rc;
}

// Highest-numbered step-*.safetensors in dir; 0 and path "" when none.
int64_t ts_run_latest_checkpoint(const char *dir, char *path, size_t cap) {
  DIR *d = opendir(dir);
  path[0] = 0;
  if (!d) return -1;
  int64_t best = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    long long s;
    char tail[64];
    if (sscanf(e->d_name, "step-%lld.%63s", &s, tail) == 2 && strcmp(tail, "safetensors") == 0 &&
        s > best) {
      best = s;
      if ((size_t)snprintf(path, cap, "%s/%s", dir, e->d_name) >= cap) path[0] = 0;
    }
  }
  closedir(d);
  return best;
}

// The fields that must agree for a resumed run to continue the same run.
static int check_resume_config(const ts_config *cfg, const char *json, const char *path) {
  ts_config old = *cfg;
  // the fields a config writes only when set: absent means 0, not this run's value
  old.optimizer = 0, old.muon_lr = 0.0f;
  old.compress = old.compress_rank = old.compress_stages = 0, old.proj_lr = 0.0f;
  old.vq_groups = old.vq_rounds = old.vq_codes = old.vq_sync_codes = 0;
  old.vq_gamma = old.vq_commit = 0.0f;
  if (ts_config_from_json(&old, json) != TS_OK)
    return ts_fail(TS_ERUNTIME, "checkpoint %s: unreadable configuration", path);
#define SAME_INT(F, FLAG)                                                                 \
  if (old.F != cfg->F)                                                                    \
    return ts_fail(TS_EUSAGE, "--resume: checkpoint %s was written with %s %lld, this run has %lld", \
                   path, FLAG, (long long)old.F, (long long)cfg->F);
#define SAME_FLT(F, FLAG)                                                                 \
  if (memcmp(&old.F, &cfg->F, sizeof(float)) != 0)                                         \
    return ts_fail(TS_EUSAGE, "--resume: checkpoint %s was written with %s %g, this run has %g", \
                   path, FLAG, (double)old.F, (double)cfg->F);
  SAME_INT(vocab, "vocab") SAME_INT(d, "--d") SAME_INT(n_layer, "--layers")
  SAME_INT(n_head, "--heads") SAME_INT(d_ff, "--d-ff") SAME_INT(seq, "--seq")
  SAME_INT(tied, "--tied") SAME_INT(batch, "--batch") SAME_INT(steps, "--steps")
  SAME_INT(seed, "--seed") SAME_INT(tile, "--tile") SAME_INT(leaf, "--leaf")
  SAME_INT(warmup, "--warmup") SAME_INT(optimizer, "--optimizer")
  SAME_FLT(dropout, "--dropout") SAME_FLT(lr, "--lr") SAME_FLT(min_lr_frac, "--min-lr-frac")
  SAME_FLT(weight_decay, "--weight-decay") SAME_FLT(beta1, "beta1") SAME_FLT(beta2, "beta2")
  SAME_FLT(eps, "eps") SAME_FLT(grad_clip, "--grad-clip") SAME_FLT(val_frac, "--val-frac")
  SAME_FLT(muon_lr, "--muon-lr")
  if (old.compress != cfg->compress && old.compress >= 0 && old.compress < TS_COMPRESS_NMODES)
    return ts_fail(TS_EUSAGE, "--resume: checkpoint %s was written with --compress %s, this run "
                   "has %s", path, ts_compress_names[old.compress],
                   ts_compress_names[cfg->compress]);
  SAME_INT(compress, "--compress") SAME_INT(compress_rank, "--rank")
  SAME_INT(compress_stages, "--compress-stages") SAME_FLT(proj_lr, "--proj-lr")
  SAME_INT(vq_groups, "--vq-group") SAME_INT(vq_rounds, "--vq-rounds")
  SAME_INT(vq_codes, "--vq-codes") SAME_INT(vq_sync_codes, "--vq-sync-codes")
  SAME_FLT(vq_gamma, "--vq-gamma") SAME_FLT(vq_commit, "--vq-commit")
#undef SAME_INT
#undef SAME_FLT
  return TS_OK;
}

int ts_run_load_checkpoint(ts_model *m, ts_adamw *opt, const ts_config *cfg, const char *path,
                           int64_t *step_out) {
  ts_ckpt *ck;
  int rc = ts_ckpt_open(path, &ck);
  if (rc) return rc;
  const char *js = ts_ckpt_meta(ck, "tessera.config");
  const char *st = ts_ckpt_meta(ck, "tessera.step");
  const char *os = ts_ckpt_meta(ck, "tessera.adam_step");
  if (!js || !st || !os) {
    ts_ckpt_close(ck);
    return ts_fail(TS_ERUNTIME, "checkpoint %s: missing tessera metadata", path);
  }
  if ((rc = check_resume_config(cfg, js, path))) { ts_ckpt_close(ck); return rc; }
  ts_tensor *t;
  int n = ckpt_tensors(m, opt, &t);
  if (n < 0) { ts_ckpt_close(ck); return ts_fail(TS_ERUNTIME, "out of memory"); }
  for (int i = 0; i < n && !rc; i++) rc = ts_ckpt_load(ck, &t[i]);
  free(t);
  if (!rc) {
    *step_out = strtoll(st, NULL, 10);
    opt->step = strtoull(os, NULL, 10);
  }
  ts_ckpt_close(ck);
  return rc;
}

// On resume, the log keeps the records up to the checkpoint and continues,
// so that a resumed run's log equals the log of the run done straight.
int ts_run_trim_log(const char *path, int64_t upto) {
  FILE *f = fopen(path, "r");
  if (!f) return TS_OK; // no old log: start a new one
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
  FILE *o = fopen(tmp, "w");
  if (!o) { fclose(f); return ts_fail(TS_ERUNTIME, "cannot write %s: %s", tmp, strerror(errno)); }
  char *line = NULL;
  size_t cap = 0;
  while (getline(&line, &cap, f) > 0) {
    const char *sp = strstr(line, "\"step\":");
    long long s = sp ? strtoll(sp + 7, NULL, 10) : 0;
    int is_final = strstr(line, "\"type\":\"final\"") != NULL;
    if (!is_final && s <= upto) fputs(line, o);
  }
  free(line);
  fclose(f);
  if (fclose(o) != 0 || rename(tmp, path) != 0) {
    unlink(tmp);
    return ts_fail(TS_ERUNTIME, "cannot rewrite log %s: %s", path, strerror(errno));
  }
  return TS_OK;
}
