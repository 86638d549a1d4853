// Checkpoints of a training run and resuming from them (run.h;
// docs/CHECKPOINTS.md): parameters and AdamW moments in canonical order, the
// run's configuration and step; a resumed run refuses a checkpoint of
// another run and continues bit for bit.
//
// Everything read back is checked like a flag before it is used: the file is
// format 2 (its header checksummed, ckpt.c), the counts are whole numbers in
// range, the configuration passes ts_config_finalize unchanged and fits the
// machine, and the tensors are exactly the model's, in order, all finite.
// Each refusal is one line naming the file and the field (exit 1).
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"
#include "json.h"
#include "run/run.h"
#include "util.h"

#define META_CONFIG "tessera.config"
#define META_STEP "tessera.step"
#define META_ADAM "tessera.adam_step"
#define META_POSITION "tessera.data_position"
#define META_RNG "tessera.rng"
#define RNG_TEXT "philox4x32-10 counter-based, keyed by (seed, purpose, step, index)"

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

// t[0, n) the parameters: t[n, 2n) and t[2n, 3n) become the moments' names
// and shapes, their data in opt (or NULL).
static void add_moments(ts_tensor *t, int n, const ts_adamw *opt) {
  size_t off = 0;
  for (int i = 0; i < n; i++) {
    for (int k = 1; k <= 2; k++) {
      ts_tensor *s = &t[k * n + i];
      *s = t[i];
      snprintf(s->name, sizeof s->name, "adam.%c.%s", k == 1 ? 'm' : 'v', t[i].name);
      s->data = opt ? (k == 1 ? opt->m : opt->v) + off : NULL;
    }
    off += (size_t)ts_tensor_numel(&t[i]);
  }
}

int ts_run_ckpt_tensors(ts_model *m, ts_adamw *opt, ts_tensor **out) {
  int n = ts_model_num_tensors(m);
  ts_tensor *t = calloc((size_t)3 * n, sizeof(ts_tensor));
  if (!t) return -1;
  ts_model_tensors(m, t, NULL);
  add_moments(t, n, opt);
  *out = t;
  return 3 * n;
}

// The first non-finite value among n tensors: 0 when there is none, else 1
// with its tensor and index.
static int find_nonfinite(const ts_tensor *t, int n, int *which, int64_t *at) {
  for (int k = 0; k < n; k++) {
    const int64_t len = t[k].data ? ts_tensor_numel(&t[k]) : 0;
    for (int64_t i = 0; i < len; i++)
      if (!isfinite(t[k].data[i])) {
        *which = k, *at = i;
        return 1;
      }
  }
  return TS_OK;
}

int ts_run_save_checkpoint(ts_model *m, ts_adamw *opt, const ts_config *cfg, int64_t step) {
  int rc = ts_run_mkdir_p(cfg->ckpt_dir);
  if (rc) return rc;
  char cfgjson[TS_CONFIG_JSON_MAX], stepbuf[32], optbuf[32], path[4200];
  if ((rc = ts_config_to_json(cfg, cfgjson, sizeof cfgjson))) return rc;
  ts_tensor *t;
  int n = ts_run_ckpt_tensors(m, opt, &t);
  if (n < 0) return ts_fail(TS_ERUNTIME, "out of memory writing a checkpoint");
  snprintf(stepbuf, sizeof stepbuf, "%" PRId64, step);
  snprintf(optbuf, sizeof optbuf, "%" PRIu64, opt->step);
  ts_meta meta[] = {
      {META_CONFIG, cfgjson},
      {META_STEP, stepbuf},
      {META_ADAM, optbuf},
      // Data windows and dropout masks are pure functions of (seed, step,
      // index): the step is the whole data position and generator state.
      {META_POSITION, stepbuf},
      {META_RNG, RNG_TEXT},
  };
  snprintf(path, sizeof path, "%s/step-%08" PRId64 ".safetensors", cfg->ckpt_dir, step);
  // A finite loss and gradient norm can still leave an update that overflowed:
  // that state is not kept, the previous checkpoint is.
  int k;
  int64_t at;
  if (find_nonfinite(t, n, &k, &at))
    rc = ts_fail(TS_ERUNTIME, "step %" PRId64 ": the update left %g in '%s' (diverged): not "
                 "checkpointed, the previous checkpoint is kept; try a smaller --lr", step,
                 (double)t[k].data[at], t[k].name);
  else
    rc = ts_ckpt_write_v2(path, t, n, meta, (int)(sizeof meta / sizeof meta[0]));
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
static int check_resume_config(const ts_config *cfg, const ts_config *ck_cfg, const char *path) {
  const ts_config old = *ck_cfg;
#define SAME_INT(F, FLAG)                                                                 \
  if (old.F != cfg->F)                                                                    \
    return ts_fail(TS_EUSAGE, "--resume: checkpoint %s was written with %s %lld, this run has %lld", \
                   path, FLAG, (long long)old.F, (long long)cfg->F);
#define SAME_FLT(F, FLAG)                                                                 \
  if (memcmp(&old.F, &cfg->F, sizeof(float)) != 0)                                         \
    return ts_fail(TS_EUSAGE, "--resume: checkpoint %s was written with %s %g, this run has %g", \
                   path, FLAG, (double)old.F, (double)cfg->F);
  // the variant first: the other fields' flags mean other tensors in the other
  if (old.variant != cfg->variant && (old.variant == TS_GPT || old.variant == TS_LLAMA))
    return ts_fail(TS_EUSAGE, "--resume: checkpoint %s was written by a %s model, this run's "
                   "--model %s is %s", path, old.variant == TS_LLAMA ? "LLaMA" : "GPT",
                   cfg->preset, cfg->variant == TS_LLAMA ? "LLaMA" : "GPT");
  SAME_INT(variant, "variant")
  SAME_INT(vocab, "vocab") SAME_INT(d, "--d") SAME_INT(n_layer, "--layers")
  SAME_INT(n_head, "--heads") SAME_INT(n_kv_head, "--kv-heads")
  if (old.variant == TS_LLAMA) { SAME_FLT(rope_theta, "--rope-theta") } // a GPT has none
  SAME_INT(d_ff, "--d-ff") SAME_INT(seq, "--seq")
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

// ---------------------------------------------------------------------------
// Reading a checkpoint back.

#define bad ts_ckpt_fail

int ts_run_restate(const char *path, const char *what) {
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", ts_errmsg()); // ts_fail writes the buffer it would read
  return bad(path, "%s: %s", what, msg);
}

// A count as the writer prints it (%" PRId64 "): decimal digits, no sign, no
// leading zero, no space, at most INT64_MAX. strtoll would take "abc" as 0
// and "-1" as -1.
static int meta_count(const ts_ckpt *ck, const char *key, int64_t *out) {
  const char *path = ts_ckpt_path(ck), *s = ts_ckpt_meta(ck, key);
  if (!s) return bad(path, "metadata has no %s", key);
  size_t n = strlen(s);
  if (n == 0 || strspn(s, "0123456789") != n || (s[0] == '0' && n > 1))
    return bad(path, "%s '%s' is not a count (decimal digits, no sign, no leading zero)", key, s);
  int64_t v = 0;
  for (const char *c = s; *c; c++) {
    if (v > (INT64_MAX - (*c - '0')) / 10) return bad(path, "%s %s is out of range", key, s);
    v = v * 10 + (*c - '0');
  }
  *out = v;
  return TS_OK;
}

// The JSON key of the first field in which two configurations' JSON forms
// differ (both written by ts_config_to_json: same order, optional fields
// present or not), or "" when they do not.
static void first_difference(const char *a, const char *b, char *key, size_t cap) {
  json_value va, vb;
  json_error err;
  key[0] = 0;
  if (json_parse(&va, a, strlen(a), JSON_NONFINITE | JSON_ANY_BYTES, &err)) return;
  if (json_parse(&vb, b, strlen(b), JSON_NONFINITE | JSON_ANY_BYTES, &err)) {
    json_free(&va);
    return;
  }
  for (int i = 0; i < va.n || i < vb.n; i++) {
    const json_value *x = i < va.n ? &va.items[i] : NULL, *y = i < vb.n ? &vb.items[i] : NULL;
    const char *sx = x && x->str ? x->str : "", *sy = y && y->str ? y->str : "";
    if (x && y && !strcmp(x->key, y->key) && x->type == y->type && !strcmp(sx, sy)) continue;
    // a field written by one side only (optional fields) shifts the rest: name it
    const json_value *only = y && !json_get(&va, y->key) ? y : x ? x : y;
    snprintf(key, cap, "%s", only->key);
    break;
  }
  json_free(&va);
  json_free(&vb);
}

// The configuration, read over base (the fields it lacks keep base's value;
// those written only when set are 0 when absent) and validated like the
// command line: it must be what ts_config_finalize leaves, unchanged (a run
// writes its finalized configuration: a tile of 0, say, is no run's), and
// fit this machine.
static int read_config(const ts_ckpt *ck, const ts_config *base, int training, int share,
                       ts_config *out) {
  const char *path = ts_ckpt_path(ck), *js = ts_ckpt_meta(ck, META_CONFIG);
  if (!js) return bad(path, "metadata has no %s", META_CONFIG);
  json_value v;
  json_error err;
  if (json_parse(&v, js, strlen(js), JSON_NONFINITE | JSON_ANY_BYTES, &err))
    return bad(path, "%s is not JSON: %s at byte %zu", META_CONFIG, err.msg, err.pos);
  const json_value *dup = json_find_duplicate(&v);
  char dup_key[64] = "";
  if (dup) snprintf(dup_key, sizeof dup_key, "%s", dup->key);
  json_free(&v);
  if (dup) return bad(path, "%s: \"%s\" appears twice", META_CONFIG, dup_key);
  *out = *base;
  out->optimizer = 0, out->muon_lr = 0.0f;
  out->checkpoint = out->fused_ce = out->tiled_mlp = 0;
  out->compress = out->compress_rank = out->compress_stages = 0, out->proj_lr = 0.0f;
  out->vq_groups = out->vq_rounds = out->vq_codes = out->vq_sync_codes = 0;
  out->vq_gamma = out->vq_commit = 0.0f;
  if (ts_config_from_json(out, js)) return ts_run_restate(path, META_CONFIG);
  if (out->tile == 0 || out->leaf == 0)
    return bad(path, "%s: %s 0: a run writes the one it used, never 0", META_CONFIG,
               out->tile == 0 ? "tile" : "leaf");
  ts_config fin = *out;
  if (ts_config_finalize(&fin)) return ts_run_restate(path, META_CONFIG);
  char a[TS_CONFIG_JSON_MAX], b[TS_CONFIG_JSON_MAX], key[64];
  if (ts_config_to_json(out, a, sizeof a) || ts_config_to_json(&fin, b, sizeof b))
    return ts_run_restate(path, META_CONFIG);
  first_difference(a, b, key, sizeof key);
  if (key[0])
    return bad(path, "%s: \"%s\" is not a value a run writes (it is left for a default)",
               META_CONFIG, key);
  if (ts_run_check_fit(out, training, share)) return ts_run_restate(path, META_CONFIG);
  return TS_OK;
}

// The file's tensors against those of the model its configuration makes
// (names, shapes, order: ts_ckpt_expect), from the configuration alone: a
// configuration edited to a larger model is refused for what it is before
// that model's memory is allocated, not after.
static int check_tensors(const ts_ckpt *ck, const ts_config *cfg) {
  ts_tensor *p;
  int n = ts_config_tensors(cfg, &p);
  if (n < 0) return ts_run_restate(ts_ckpt_path(ck), META_CONFIG);
  ts_tensor *t = calloc((size_t)3 * n + 1, sizeof *t);
  if (!t) {
    free(p);
    return bad(ts_ckpt_path(ck), "out of memory");
  }
  memcpy(t, p, (size_t)n * sizeof *t);
  free(p);
  add_moments(t, n, NULL);
  int rc = ts_ckpt_expect(ck, t, 3 * n);
  free(t);
  return rc;
}

int ts_run_open_checkpoint(const char *path, const ts_config *base, int training, int share,
                           ts_run_ckpt *out) {
  memset(out, 0, sizeof *out);
  int rc = ts_ckpt_open(path, &out->ck);
  if (rc) return rc;
  if (ts_ckpt_format(out->ck) < 2)
    rc = bad(path, "tessera.format 1 has no header checksum (a file of tessera dump, or of an "
                   "older tessera); a run reads format 2");
  int64_t adam = 0, position = 0;
  if (!rc) rc = read_config(out->ck, base, training, share, &out->cfg);
  if (!rc) rc = check_tensors(out->ck, &out->cfg);
  if (!rc) rc = meta_count(out->ck, META_STEP, &out->step);
  if (!rc && (out->step < 1 || out->step > out->cfg.steps))
    rc = bad(path, "%s %" PRId64 ": a run of %d steps writes checkpoints after steps 1..%d",
             META_STEP, out->step, out->cfg.steps, out->cfg.steps);
  // one AdamW update per optimizer step, and the data position is the step
  if (!rc) rc = meta_count(out->ck, META_ADAM, &adam);
  if (!rc && adam != out->step)
    rc = bad(path, "%s %" PRId64 " differs from %s %" PRId64 " (one update per step)", META_ADAM,
             adam, META_STEP, out->step);
  if (!rc) rc = meta_count(out->ck, META_POSITION, &position);
  if (!rc && position != out->step)
    rc = bad(path, "%s %" PRId64 " differs from %s %" PRId64, META_POSITION, position, META_STEP,
             out->step);
  const char *rng = rc ? NULL : ts_ckpt_meta(out->ck, META_RNG);
  if (!rc && (!rng || strcmp(rng, RNG_TEXT)))
    rc = bad(path, "%s is '%s', this build's generator is '%s'", META_RNG, rng ? rng : "(none)",
             RNG_TEXT);
  if (rc) {
    ts_run_close_checkpoint(out);
    return rc;
  }
  out->adam_step = (uint64_t)adam;
  return TS_OK;
}

int ts_run_open_resume(const ts_config *cfg, int share, ts_run_ckpt *ck) {
  char path[4200];
  memset(ck, 0, sizeof *ck);
  int64_t s = ts_run_latest_checkpoint(cfg->ckpt_dir, path, sizeof path);
  if (s < 0)
    return ts_fail(TS_ERUNTIME, "--resume: cannot open checkpoint directory %s", cfg->ckpt_dir);
  if (s == 0)
    return ts_fail(TS_ERUNTIME, "--resume: no checkpoint (step-*.safetensors) in %s",
                   cfg->ckpt_dir);
  int rc = ts_run_open_checkpoint(path, cfg, 1, share, ck);
  if (!rc && ck->step != s)
    rc = bad(path, "%s is %" PRId64 " but the file is named for step %" PRId64, META_STEP,
             ck->step, s);
  if (!rc) rc = check_resume_config(cfg, &ck->cfg, path);
  if (rc) ts_run_close_checkpoint(ck);
  return rc;
}

void ts_run_close_checkpoint(ts_run_ckpt *ck) {
  ts_ckpt_close(ck->ck);
  ck->ck = NULL;
}

int ts_run_load_checkpoint(ts_model *m, ts_adamw *opt, const ts_run_ckpt *ck) {
  const char *path = ts_ckpt_path(ck->ck);
  ts_tensor *t;
  int n = ts_run_ckpt_tensors(m, opt, &t);
  if (n < 0) return ts_fail(TS_ERUNTIME, "out of memory");
  int rc = ts_ckpt_expect(ck->ck, t, n);
  int nload = opt ? n : n / 3; // without an optimizer: the parameters
  for (int i = 0; i < nload && !rc; i++) rc = ts_ckpt_load(ck->ck, &t[i]);
  // none is written with a NaN or Inf (ts_run_save_checkpoint): it is damage
  int k;
  int64_t at;
  if (!rc && find_nonfinite(t, nload, &k, &at))
    rc = bad(path, "tensor '%s' holds %g at index %" PRId64 " (a checkpoint holds finite values "
                   "only)", t[k].name, (double)t[k].data[at], at);
  free(t);
  if (!rc && opt) opt->step = ck->adam_step;
  return rc;
}

// On resume, the log keeps the records up to the checkpoint and continues,
// so that a resumed run's log equals the log of the run done straight.
// A last line without its newline is a record the killed run did not finish:
// it is dropped, or the next record would be glued onto it.
int ts_run_trim_log(const char *path, int64_t upto) {
  FILE *f = fopen(path, "r");
  if (!f) return TS_OK; // no old log: start a new one
  char tmp[4200];
  if (ts_temp_path(tmp, sizeof tmp, path)) {
    fclose(f);
    return ts_fail(TS_ERUNTIME, "cannot rewrite log %s: path too long", path);
  }
  FILE *o = fopen(tmp, "w");
  if (!o) { fclose(f); return ts_fail(TS_ERUNTIME, "cannot write %s: %s", tmp, strerror(errno)); }
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  int ok = 1;
  errno = 0;
  while (ok && (len = getline(&line, &cap, f)) > 0) {
    if (line[len - 1] != '\n') break; // torn
    const char *sp = strstr(line, "\"step\":");
    long long s = sp ? strtoll(sp + 7, NULL, 10) : 0;
    int is_final = strstr(line, "\"type\":\"final\"") != NULL;
    if (!is_final && s <= upto) ok = fputs(line, o) >= 0;
  }
  int err = ferror(f) || !ok ? (errno ? errno : EIO) : 0;
  free(line);
  fclose(f);
  if (!err && (fflush(o) != 0 || fsync(fileno(o)) != 0)) err = errno;
  if (fclose(o) != 0 && !err) err = errno;
  if (!err && rename(tmp, path) != 0) err = errno;
  if (err) {
    unlink(tmp);
    return ts_fail(TS_ERUNTIME, "cannot rewrite log %s: %s", path, strerror(err));
  }
  return TS_OK;
}

// fnmatch's special characters of s escaped, so that it matches itself.
static void literal_pattern(char *out, size_t cap, const char *s) {
  size_t k = 0;
  for (; *s && k + 2 < cap; s++) {
    if (strchr("*?[\\", *s)) out[k++] = '\\';
    out[k++] = *s;
  }
  out[k] = 0;
}

int ts_run_remove_stale_temps(const ts_config *cfg) {
  int n = 0;
  if (cfg->ckpt_dir[0]) n += ts_remove_stale_temps(cfg->ckpt_dir, "step-*.safetensors");
  if (cfg->log_path[0]) {
    char dir[4096], name[8200];
    const char *slash = strrchr(cfg->log_path, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else
      snprintf(dir, sizeof dir, "%.*s", slash == cfg->log_path ? 1 : (int)(slash - cfg->log_path),
               cfg->log_path);
    literal_pattern(name, sizeof name, slash ? slash + 1 : cfg->log_path);
    n += ts_remove_stale_temps(dir, name);
  }
  return n;
}
