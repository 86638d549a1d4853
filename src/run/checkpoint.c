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

#include "base/json.h"
#include "base/util.h"
#include "dist/pfile.h"
#include "run.h"
#include "train/ckpt.h"

#define META_CONFIG TS_META_CONFIG
#define META_STEP "tessera.step"
#define META_ADAM "tessera.adam_step"
#define META_POSITION "tessera.data_position"
#define META_RNG "tessera.rng"
#define META_DATA "tessera.data"
#define META_RUN "tessera.run"

// The data the run's checkpoints are written from: its tokens and digest
// (data.h), so that a resumed run refuses other data under any path; "" when
// the writer did not say.
static char data_id[96];
// The layout that writes them, for tessera.run ("" when the writer did not say).
static char layout_id[96];
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

int ts_run_ckpt_tensors(ts_model *m, ts_adamw *opt, ts_tensor **out) {
  const int n = ts_model_canonical_tensors(m), no = ts_model_num_tensors(m);
  const int nc = ts_model_num_copies(m);
  ts_tensor *t = calloc((size_t)3 * n, sizeof(ts_tensor));
  ts_tensor *held = calloc((size_t)(no + nc) + 1, sizeof(ts_tensor));
  if (!t || !held) {
    free(t), free(held);
    return -1;
  }
  ts_model_canonical_table(m, t);
  ts_model_tensors(m, held, NULL);
  ts_model_copies(m, held + no);
  const float *base = ts_model_params(m);
  // the tensors this model holds, found by their canonical offsets (both
  // lists in canonical order: the owned, then the copies); moments: the owned
  for (int part = 0; part < 2; part++) {
    const ts_tensor *h = held + (part ? no : 0);
    const int nh = part ? nc : no;
    for (int i = 0, k = 0; i < n && k < nh; i++) {
      if (t[i].at != h[k].at) continue;
      t[i].data = h[k].data;
      for (int j = 1; j <= 2 && part == 0; j++)
        t[j * n + i].data = opt ? (j == 1 ? opt->m : opt->v) + (h[k].data - base) : NULL;
      k++;
    }
  }
  for (int i = 0; i < n; i++)
    for (int j = 1; j <= 2; j++) {
      ts_tensor *s = &t[j * n + i];
      float *data = s->data;
      *s = t[i];
      s->data = data;
      snprintf(s->name, sizeof s->name, "adam.%c.%s", j == 1 ? 'm' : 'v', t[i].name);
    }
  free(held);
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

// Where the first non-finite value is among what m and opt hold (the
// parameters, their copies, the moments of upd[0, nupd) in that order; NULL:
// the owned tensors), or NULL: "'NAME'" or "'adam.m.NAME'".
static const char *nonfinite_state(ts_model *m, const ts_adamw *opt, const ts_tensor *upd,
                                   int nupd, float *value, int64_t *index) {
  static char what[96];
  const int nt = ts_model_num_tensors(m), nc = ts_model_num_copies(m);
  ts_tensor *h = calloc((size_t)(nt + nc) + 1, sizeof *h);
  if (!h) return NULL;
  ts_model_tensors(m, h, NULL);
  ts_model_copies(m, h + nt);
  if (!upd) upd = h, nupd = nt;
  int k;
  int64_t at;
  const char *out = NULL;
  if (find_nonfinite(h, nt + nc, &k, &at)) {
    snprintf(what, sizeof what, "'%s'", h[k].name);
    *value = h[k].data[at];
    *index = at;
    out = what;
  }
  size_t first = 0; // the moments of upd[j] start there
  for (int j = 0; !out && opt && j < nupd; j++) {
    const size_t n = (size_t)ts_tensor_numel(&upd[j]);
    for (size_t i = first; !out && i < first + n && i < opt->n; i++) {
      const int in_m = !isfinite(opt->m[i]);
      if (!in_m && isfinite(opt->v[i])) continue;
      *value = in_m ? opt->m[i] : opt->v[i];
      *index = (int64_t)(i - first);
      snprintf(what, sizeof what, "'adam.%c.%s'", in_m ? 'm' : 'v', upd[j].name);
      out = what;
    }
    first += n;
  }
  free(h);
  return out;
}

// The data section's CRC-32 as a fold over the owned runs (owners.h): of
// the parameters, then of each moment, all in canonical order.
typedef struct {
  const float *base;
  int moments; // base is a moment buffer: the runs' mlocal offsets
} crc_ctx;

static void crc_fold(void *state, const ts_owned_run *r, void *ctx) {
  const crc_ctx *c = ctx;
  uint32_t *crc = state;
  *crc = ts_ckpt_crc32(*crc, c->base + (c->moments ? r->mlocal : r->local),
                       (size_t)r->len * sizeof(float));
}

// The checkpoint's bytes into the temp file tmp, each rank of the owners'
// group writing its own runs of the three sections (parameters, then the
// moments) and the group's first rank the header once their CRC is known.
static int write_sections(const ts_owners *o, ts_model *m, ts_adamw *opt, const char *path,
                          const char *tmp, const ts_tensor *t, int n, const ts_meta *meta,
                          int n_meta) {
  ts_comm *g = o->group;
  const int me = g ? g->rank : 0;
  unsigned char *prefix = NULL;
  size_t plen = 0;
  // the header's length does not depend on the checksum: every rank knows
  // where the data starts
  int rc = ts_ckpt_prefix(path, t, n, meta, n_meta, 0, &prefix, &plen);
  if (rc) return rc;
  free(prefix);
  ts_pfile *f;
  if ((rc = ts_pfile_open(g, tmp, &f))) return rc;
  const float *sec[3] = {ts_model_params(m), opt->m, opt->v};
  const uint64_t total = o->total;
  for (int k = 0; k < 3 && !rc; k++)
    for (int j = 0; j < o->n && !rc; j++)
      if (o->run[j].rank == me)
        rc = ts_pfile_write_at(f, plen + 4 * ((uint64_t)k * total + o->run[j].at),
                               sec[k] + (k ? o->run[j].mlocal : o->run[j].local),
                               (size_t)o->run[j].len * sizeof(float));
  uint32_t crc = 0;
  for (int k = 0; k < 3 && !rc; k++) {
    crc_ctx c = {sec[k], k > 0};
    rc = ts_owners_fold(o, &crc, sizeof crc, crc_fold, &c);
  }
  if (!rc && me == 0 && !(rc = ts_ckpt_prefix(path, t, n, meta, n_meta, crc, &prefix, &plen))) {
    rc = ts_pfile_write_at(f, 0, prefix, plen);
    free(prefix);
  }
  // a failure here is told by ts_pfile_close to every rank
  int crc2 = ts_pfile_close(f);
  return rc ? rc : crc2;
}

int ts_run_save_checkpoint(const ts_owners *owners, ts_model *m, ts_adamw *opt,
                           const ts_tensor *upd, int nupd, const ts_config *cfg, int64_t step) {
  ts_owners whole = {0}; // without owners: this process owns the model
  const ts_owners *o = owners;
  int rc = TS_OK;
  if (!o) {
    const int nt = ts_model_num_tensors(m);
    ts_tensor *own = calloc((size_t)nt + 1, sizeof *own);
    if (!own) return ts_fail(TS_ERUNTIME, "out of memory writing a checkpoint");
    ts_model_tensors(m, own, NULL);
    rc = ts_owners_create(NULL, own, nt, ts_model_params(m), NULL, ts_model_canonical_params(m),
                          &whole);
    free(own);
    if (rc) return rc;
    o = &whole;
  }
  ts_comm *g = o->group;
  const int lead = !g || g->rank == 0;
  if (lead) rc = ts_run_mkdir_p(cfg->ckpt_dir);
  char stepbuf[32], optbuf[32], path[4200], tmp[4300] = "";
  // the computation in tessera.config, the run's own settings apart in
  // tessera.run: every layout of a run writes the same bytes but that member
  char *cfgjson = malloc(TS_CONFIG_JSON_MAX), *runjson = malloc(TS_CONFIG_JSON_MAX);
  if (!rc && (!cfgjson || !runjson)) rc = ts_fail(TS_ERUNTIME, "out of memory writing a checkpoint");
  if (!rc) rc = ts_config_computation_json(cfg, 0, cfgjson, TS_CONFIG_JSON_MAX);
  // the run id: which lineage wrote it, for --keep-last (ckpt_owner.c)
  if (!rc)
    rc = ts_config_run_json(cfg, layout_id[0] ? layout_id : NULL, ts_run_lineage(), runjson,
                            TS_CONFIG_JSON_MAX);
  ts_tensor *t = NULL;
  int n = rc ? 0 : ts_run_ckpt_tensors(m, opt, &t);
  if (n < 0) rc = ts_fail(TS_ERUNTIME, "out of memory writing a checkpoint");
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
      {META_DATA, data_id}, // "" when the writer did not say (ts_run_checkpoint_data)
      {META_RUN, runjson},
      {TS_META_TOKENIZER, ts_run_tokenizer_id()}, // only when the run named one
  };
  const int nmeta = (int)(sizeof meta / sizeof meta[0]) - !ts_run_tokenizer_id()[0];
  snprintf(path, sizeof path, "%s/step-%08" PRId64 ".safetensors", cfg->ckpt_dir, step);
  // A finite loss and gradient norm can still leave an update that overflowed:
  // that state is not kept, the previous checkpoint is (each rank checks
  // what it holds; a refusal on one ends them all).
  const char *what = NULL;
  float bad_value = 0.0f;
  int64_t bad_index = 0;
  if (!rc && (what = nonfinite_state(m, opt, upd, nupd, &bad_value, &bad_index)))
    rc = ts_fail(TS_ERUNTIME, "step %" PRId64 ": the update left %g in %s (diverged): not "
                 "checkpointed, the previous checkpoint is kept; try a smaller --lr", step,
                 (double)bad_value, what);
  // one temp name for the group (its first rank's), in the same directory
  // as path so that the rename cannot cross filesystems
  if (!rc && lead && ts_temp_path(tmp, sizeof tmp, path))
    rc = ts_fail(TS_ERUNTIME, "checkpoint %s: path too long", path);
  if (!rc && g) rc = ts_comm_bcast(g, tmp, sizeof tmp, 0, -1);
  if (!rc) {
    rc = write_sections(o, m, opt, path, tmp, t, n, meta, nmeta);
    if (lead) rc = rc ? (unlink(tmp), rc) : ts_ckpt_commit(tmp, path);
  }
  free(t);
  free(cfgjson);
  free(runjson);
  ts_owners_free(&whole);
  return rc;
}

void ts_run_checkpoint_layout(const char *name) {
  snprintf(layout_id, sizeof layout_id, "%s", name ? name : "");
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

// mapl-vq's stream unit as the flags say it (vq_stream_microbatches: 0 step,
// M microbatches of a step).
static void stream_unit_name(int microbatches, char *out, size_t cap) {
  if (microbatches > 0) snprintf(out, cap, "microbatch (%d a step)", microbatches);
  else snprintf(out, cap, "%s", microbatches ? "microbatch" : "step");
}

// The fields that must agree for a resumed run to continue the same run.
// what: whose configuration ck_cfg is, as the refusal names it ("checkpoint
// PATH", or a checkpoint directory's run identity); mine: whose cfg is ("this
// run", or a log's configuration record).
static int check_resume_config(const ts_config *cfg, const ts_config *ck_cfg, int64_t step,
                               const char *what, const char *mine) {
  ts_config old = *ck_cfg;
#define SAME_INT(F, FLAG)                                                                 \
  if (old.F != cfg->F)                                                                    \
    return ts_fail(TS_EUSAGE, "--resume: %s was written with %s %lld, %s has %lld", \
                   what, FLAG, (long long)old.F, mine, (long long)cfg->F);
#define SAME_FLT(F, FLAG)                                                                 \
  if (memcmp(&old.F, &cfg->F, sizeof(float)) != 0)                                         \
    return ts_fail(TS_EUSAGE, "--resume: %s was written with %s %g, %s has %g", \
                   what, FLAG, (double)old.F, mine, (double)cfg->F);
  // the variant first: the other fields' flags mean other tensors in the other
  if (old.variant != cfg->variant && (old.variant == TS_GPT || old.variant == TS_LLAMA))
    return ts_fail(TS_EUSAGE, "--resume: %s was written by a %s model, %s's "
                   "--model %s is %s", what, old.variant == TS_LLAMA ? "LLaMA" : "GPT", mine,
                   cfg->preset, cfg->variant == TS_LLAMA ? "LLaMA" : "GPT");
  SAME_INT(variant, "variant")
  SAME_INT(vocab, "--vocab") SAME_INT(d, "--d") SAME_INT(n_layer, "--layers")
  SAME_INT(n_head, "--heads") SAME_INT(n_kv_head, "--kv-heads")
  if (old.variant == TS_LLAMA) { SAME_FLT(rope_theta, "--rope-theta") } // a GPT has none
  SAME_INT(d_ff, "--d-ff") SAME_INT(seq, "--seq")
  SAME_INT(tied, "--tied") SAME_INT(batch, "--batch")
  SAME_INT(seed, "--seed") SAME_INT(tile, "--tile") SAME_INT(leaf, "--leaf")
  SAME_INT(warmup, "--warmup") SAME_INT(optimizer, "--optimizer")
  if (old.lr_schedule != cfg->lr_schedule && old.lr_schedule >= 0 &&
      old.lr_schedule < TS_LR_NSCHEDULES)
    return ts_fail(TS_EUSAGE, "--resume: %s was written with --lr-schedule %s, %s "
                   "has %s", what, ts_lr_schedule_names[old.lr_schedule], mine,
                   ts_lr_schedule_names[cfg->lr_schedule]);
  SAME_INT(lr_schedule, "--lr-schedule") SAME_FLT(decay_frac, "--decay-frac")
  SAME_FLT(dropout, "--dropout") SAME_FLT(lr, "--lr") SAME_FLT(min_lr_frac, "--min-lr-frac")
  SAME_FLT(weight_decay, "--weight-decay") SAME_FLT(beta1, "--beta1") SAME_FLT(beta2, "--beta2")
  SAME_FLT(eps, "--eps") SAME_FLT(grad_clip, "--grad-clip") SAME_FLT(val_frac, "--val-frac")
  SAME_FLT(muon_lr, "--muon-lr")
  // --steps may change (a finished run extended, a run cut short), not below
  // the steps done: the schedule of the steps left is then derived for the
  // new total (train.c says so), and the steps done stay as they were
  if (cfg->steps < step)
    return ts_fail(TS_EUSAGE, "--resume: --steps %d: %s is of step %" PRId64
                   " already", cfg->steps, what, step);
  if (old.compress != cfg->compress && old.compress >= 0 && old.compress < TS_COMPRESS_NMODES)
    return ts_fail(TS_EUSAGE, "--resume: %s was written with --compress %s, %s "
                   "has %s", what, ts_compress_names[old.compress], mine,
                   ts_compress_names[cfg->compress]);
  SAME_INT(compress, "--compress") SAME_INT(compress_rank, "--rank")
  SAME_INT(compress_stages, "--compress-stages") SAME_FLT(proj_lr, "--proj-lr")
  SAME_INT(vq_groups, "--vq-group") SAME_INT(vq_rounds, "--vq-rounds")
  SAME_INT(vq_codes, "--vq-codes") SAME_INT(vq_sync_codes, "--vq-sync-codes")
  SAME_FLT(vq_gamma, "--vq-gamma") SAME_FLT(vq_commit, "--vq-commit")
  if (old.vq_backward != cfg->vq_backward)
    return ts_fail(TS_EUSAGE, "--resume: %s was written with --vq-backward %s, %s has %s", what,
                   old.vq_backward ? "on" : "off", mine, cfg->vq_backward ? "on" : "off");
  SAME_FLT(vq_backward_gamma, "--vq-backward-gamma")
  SAME_INT(vq_stream_every, "--vq-stream-every")
  if (old.vq_stream_microbatches != cfg->vq_stream_microbatches) {
    char was[48], now[48];
    stream_unit_name(old.vq_stream_microbatches, was, sizeof was);
    stream_unit_name(cfg->vq_stream_microbatches, now, sizeof now);
    return ts_fail(TS_EUSAGE, "--resume: %s was written with --vq-stream-unit %s, %s has %s (a "
                   "microbatch stream's step is --dp x --microbatches microbatches)", what, was,
                   mine, now);
  }
  if (old.mapl_anchor != cfg->mapl_anchor && old.mapl_anchor >= 0 &&
      old.mapl_anchor < TS_ANCHOR_NKINDS)
    return ts_fail(TS_EUSAGE, "--resume: %s was written with --mapl-anchor %s, %s "
                   "has %s", what, ts_mapl_anchor_names[old.mapl_anchor], mine,
                   ts_mapl_anchor_names[cfg->mapl_anchor]);
  SAME_INT(mapl_anchor, "--mapl-anchor")
  // The data's paths may change (a file moved), not how its tokens are read
  // nor where the training split ends: with a validation file the training
  // split is all of --data, without one its head. (A run records the format
  // it read; "detect" is a configuration no run resolved, and says nothing.)
  if (old.data_format != cfg->data_format && old.data_format >= 0 &&
      old.data_format < TS_DATA_NFORMATS && cfg->data_format >= 0 &&
      cfg->data_format < TS_DATA_NFORMATS)
    return ts_fail(TS_EUSAGE, "--resume: %s was written reading --data-format %s, "
                   "%s reads %s", what, ts_data_format_names[old.data_format], mine,
                   ts_data_format_names[cfg->data_format]);
  if (!old.val_path[0] != !cfg->val_path[0])
    return ts_fail(TS_EUSAGE, "--resume: %s was written %s --val-data, %s has %s",
                   what, old.val_path[0] ? "with" : "without", mine,
                   cfg->val_path[0] ? "one" : "none");
#undef SAME_INT
#undef SAME_FLT
  // And whatever else changes the computation, derived from the configuration
  // itself: every field but the run's own settings and the memory options
  // (which change where values live, not their bits), so that a field added
  // later is refused without being listed above.
  char ja[8192], jb[8192], key[64];
  old.steps = cfg->steps; // allowed to change (above)
  if (ts_config_computation_json(&old, 0, ja, sizeof ja) ||
      ts_config_computation_json(cfg, 0, jb, sizeof jb))
    return TS_ERUNTIME;
  ts_config_json_difference(ja, jb, key, sizeof key);
  if (key[0])
    return ts_fail(TS_EUSAGE, "--resume: %s was written with another \"%s\" than "
                   "%s's (a resumed run must compute what the run it continues computed)",
                   what, key, mine);
  return TS_OK;
}

void ts_run_checkpoint_data(const ts_data *data) {
  snprintf(data_id, sizeof data_id, "%zu+%zu tokens, digest %016" PRIx64,
           ts_data_split_len(data, TS_SPLIT_TRAIN), ts_data_split_len(data, TS_SPLIT_VAL),
           ts_data_digest(data));
}

const char *ts_run_data_id(void) { return data_id; }

int ts_run_check_resume_data(const ts_run_ckpt *ck, const ts_data *data) {
  const char *was = ts_ckpt_meta(ck->ck, META_DATA);
  if (!was || !was[0]) return TS_OK; // written before checkpoints recorded their data
  if (!data_id[0]) ts_run_checkpoint_data(data);
  if (strcmp(was, data_id))
    return ts_fail(TS_EUSAGE, "--resume: checkpoint %s was written from other data (%s); this "
                   "run's --data holds %s", ts_ckpt_path(ck->ck), was, data_id);
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

// A metadata value that holds a JSON record: it must parse, with no key
// twice (the config reader would silently take the last).
static int json_record(const char *path, const char *key, const char *js) {
  json_value v;
  json_error err;
  if (json_parse(&v, js, strlen(js), JSON_NONFINITE | JSON_ANY_BYTES, &err))
    return bad(path, "%s is not JSON: %s at byte %zu", key, err.msg, err.pos);
  const json_value *dup = json_find_duplicate(&v);
  char dup_key[64] = "";
  if (dup) snprintf(dup_key, sizeof dup_key, "%s", dup->key);
  json_free(&v);
  if (dup) return bad(path, "%s: \"%s\" appears twice", key, dup_key);
  return TS_OK;
}

int ts_run_ckpt_run_id(const ts_ckpt *ck, char *out, size_t cap) {
  const char *run = ts_ckpt_meta(ck, META_RUN);
  out[0] = 0;
  if (!run) return 0; // format 2: none
  json_value v;
  json_error err;
  if (json_parse(&v, run, strlen(run), JSON_NONFINITE | JSON_ANY_BYTES, &err)) {
    bad(ts_ckpt_path(ck), "%s is not JSON: %s at byte %zu", META_RUN, err.msg, err.pos);
    return -1;
  }
  const json_value *id = v.type == JSON_OBJECT ? json_get(&v, "run_id") : NULL;
  int rc = id ? 1 : 0; // none: written before checkpoints recorded their lineage
  if (id && (id->type != JSON_STRING || !ts_run_id_valid(id->str) || cap <= TS_RUN_ID_LEN)) {
    bad(ts_ckpt_path(ck), "%s: \"run_id\" is not %d lowercase hex digits (a run lineage's id)",
        META_RUN, TS_RUN_ID_LEN);
    rc = -1;
  } else if (id) {
    snprintf(out, cap, "%s", id->str);
  }
  json_free(&v);
  return rc;
}

// The fields a configuration's JSON form holds only when set (and the data
// format, which every file before the field read as bytes) at the value
// their absence means, for a form to be read over.
static void fields_written_when_set(ts_config *c) {
  c->optimizer = 0, c->muon_lr = 0.0f;
  c->checkpoint = c->fused_ce = c->tiled_mlp = 0;
  c->compress = c->compress_rank = c->compress_stages = 0, c->proj_lr = 0.0f;
  c->vq_groups = c->vq_rounds = c->vq_codes = c->vq_sync_codes = 0;
  c->vq_gamma = c->vq_commit = 0.0f, c->mapl_anchor = TS_ANCHOR_FACTORISED;
  c->vq_stream_every = c->vq_stream_microbatches = 0;
  c->lr_schedule = TS_LR_COSINE, c->decay_frac = 0.0f;
  c->data_format = TS_DATA_BYTES;
  c->val_path[0] = c->init_from[0] = '\0';
}

int ts_run_check_recorded_config(const ts_config *cfg, const char *json, const char *what) {
  ts_config was = *cfg;
  fields_written_when_set(&was);
  if (ts_config_from_json(&was, json)) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", ts_errmsg());
    return ts_fail(TS_ERUNTIME, "%s: %s", what, msg);
  }
  return check_resume_config(cfg, &was, 0, what, "this run");
}

// The configuration, read over base (the fields it lacks keep base's value;
// those written only when set are 0 when absent) and validated like the
// command line: it must be what ts_config_finalize leaves, unchanged (a run
// writes its finalized configuration: a tile of 0, say, is no run's), and
// fit this machine.
static int read_config(const ts_ckpt *ck, const ts_config *base, int training, int share,
                       int stages, ts_config *out) {
  const char *path = ts_ckpt_path(ck), *js = ts_ckpt_meta(ck, META_CONFIG);
  const char *run = ts_ckpt_meta(ck, META_RUN);
  if (!js) return bad(path, "metadata has no %s", META_CONFIG);
  int rc = json_record(path, META_CONFIG, js);
  if (!rc && run) rc = json_record(path, META_RUN, run);
  if (rc) return rc;
  *out = *base;
  fields_written_when_set(out);
  // every run writes its tile and leaf (they set the sums' trees): one left
  // out is refused below, not taken from the flags (eval's would be the
  // command line's, and change the loss's bits)
  out->tile = out->leaf = 0;
  if (ts_config_from_json(out, js)) return ts_run_restate(path, META_CONFIG);
  // format 3: the run's own settings apart (a format-2 file has them in its
  // configuration); only those may be there
  if (run && ts_config_run_from_json(out, run)) return ts_run_restate(path, META_RUN);
  char id[TS_RUN_ID_LEN + 1];
  if (ts_run_ckpt_run_id(ck, id, sizeof id) < 0) return TS_ERUNTIME;
  if (out->tile == 0 || out->leaf == 0)
    return bad(path, "%s: %s 0: a run writes the one it used, never 0", META_CONFIG,
               out->tile == 0 ? "tile" : "leaf");
  ts_config fin = *out;
  if (ts_config_finalize(&fin)) return ts_run_restate(path, META_CONFIG);
  char a[TS_CONFIG_JSON_MAX], b[TS_CONFIG_JSON_MAX], key[64];
  if (ts_config_to_json(out, a, sizeof a) || ts_config_to_json(&fin, b, sizeof b))
    return ts_run_restate(path, META_CONFIG);
  ts_config_json_difference(a, b, key, sizeof key);
  if (key[0])
    return bad(path, "%s: \"%s\" is not a value a run writes (it is left for a default)",
               META_CONFIG, key);
  if (ts_run_check_fit(out, training, share, stages, 1, 0, 1)) return ts_run_restate(path, META_CONFIG);
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
  // the parameters, then their moments, named as ts_run_ckpt_tensors names them
  for (int i = 0; i < n; i++)
    for (int k = 0; k < 3; k++) {
      ts_tensor *s = &t[k * n + i];
      *s = p[i];
      if (k) {
        char name[sizeof s->name + 8];
        snprintf(name, sizeof name, "adam.%c.%s", k == 1 ? 'm' : 'v', p[i].name);
        snprintf(s->name, sizeof s->name, "%.*s", (int)sizeof s->name - 1, name);
      }
    }
  free(p);
  int rc = ts_ckpt_expect(ck, t, 3 * n);
  free(t);
  return rc;
}

int ts_run_open_checkpoint(const char *path, const ts_config *base, int training, int share,
                           int stages, ts_run_ckpt *out) {
  memset(out, 0, sizeof *out);
  int rc = ts_ckpt_open(path, &out->ck);
  if (rc) return rc;
  if (ts_ckpt_format(out->ck) < 2)
    rc = bad(path, "tessera.format 1 has no header checksum (a file of tessera dump, or of an "
                   "older tessera); a run reads format 2");
  int64_t adam = 0, position = 0;
  if (!rc) rc = read_config(out->ck, base, training, share, stages, &out->cfg);
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

// --resume without --data: the checkpoint's recorded data (its paths, its
// format unless --data-format says, its split unless --val-frac says), each
// file checked readable here, so that a missing one is named with the way out.
static int recorded_data(ts_config *cfg, const ts_run_ckpt *ck, const char *path) {
  const ts_config *was = &ck->cfg;
  snprintf(cfg->data_path, sizeof cfg->data_path, "%s", was->data_path);
  if (!cfg->val_path[0]) snprintf(cfg->val_path, sizeof cfg->val_path, "%s", was->val_path);
  if (cfg->data_format == TS_DATA_DETECT) cfg->data_format = was->data_format;
  if (cfg->val_frac_from_ckpt) cfg->val_frac = was->val_frac;
  const char *files[2] = {cfg->data_path, cfg->val_path};
  for (int i = 0; i < 2; i++)
    if (files[i][0] && access(files[i], R_OK) != 0)
      return ts_fail(TS_ERUNTIME, "checkpoint %s was trained on %s, which cannot be read (%s): "
                     "pass --data%s", path, files[i], strerror(errno),
                     i ? " and --val-data" : "");
  return TS_OK;
}

int ts_run_open_resume(ts_config *cfg, int share, int stages, ts_run_ckpt *ck) {
  char path[4200];
  memset(ck, 0, sizeof *ck);
  int64_t s = ts_run_latest_checkpoint(cfg->ckpt_dir, path, sizeof path);
  // no directory yet, or none in it: nothing to resume (ck->ck stays NULL)
  if (s < 0 && errno == ENOENT) return TS_OK;
  if (s < 0)
    return ts_fail(TS_ERUNTIME, "--resume: cannot open checkpoint directory %s: %s",
                   cfg->ckpt_dir, strerror(errno));
  if (s == 0) return TS_OK;
  int rc = ts_run_open_checkpoint(path, cfg, 1, share, stages, ck);
  if (!rc && ck->step != s)
    rc = bad(path, "%s is %" PRId64 " but the file is named for step %" PRId64, META_STEP,
             ck->step, s);
  if (!rc && cfg->data_from_ckpt) rc = recorded_data(cfg, ck, path);
  // the format the files are read in, which the checkpoint's run recorded
  if (!rc) rc = ts_data_resolve(cfg->data_path, cfg->val_path, cfg->data_format, &cfg->data_format);
  if (!rc) rc = ts_data_check_vocab(cfg->data_format, cfg->vocab, cfg->data_path);
  char what[4300];
  snprintf(what, sizeof what, "checkpoint %s", path);
  if (!rc) rc = check_resume_config(cfg, &ck->cfg, ck->step, what, "this run");
  if (rc) ts_run_close_checkpoint(ck);
  return rc;
}

// The flag that sets an architecture field (ts_config_architecture_json's keys).
static const char *architecture_flag(const char *key) {
  static const char *const map[][2] = {
      {"variant", "--model"},        {"vocab", "--vocab"},
      {"d", "--d"},                  {"n_layer", "--layers"},
      {"n_head", "--heads"},         {"n_kv_head", "--kv-heads"},
      {"rope_theta", "--rope-theta"}, {"d_ff", "--d-ff"},
      {"seq", "--seq"},              {"tied", "--tied/--untied"},
      {"compress", "--compress"},    {"compress_rank", "--rank"},
      {"compress_stages", "--compress-stages"}, {"vq_groups", "--vq-group"},
      {"vq_rounds", "--vq-rounds"},  {"vq_codes", "--vq-codes"},
      {"mapl_anchor", "--mapl-anchor"}};
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (strcmp(map[i][0], key) == 0) return map[i][1];
  return key;
}

// A key's value in a JSON object as written ("none" when it is left out).
static void json_text(const char *js, const char *key, char *out, size_t cap) {
  json_value v;
  json_error err;
  snprintf(out, cap, "none");
  if (json_parse(&v, js, strlen(js), JSON_NONFINITE | JSON_ANY_BYTES, &err)) return;
  const json_value *x = json_get(&v, key);
  if (x && x->str) snprintf(out, cap, "%s", x->str);
  json_free(&v);
}

int ts_run_open_init(const ts_config *cfg, int share, int stages, ts_run_ckpt *ck) {
  const char *path = cfg->init_from;
  int rc = ts_run_open_checkpoint(path, cfg, 1, share, stages, ck);
  if (rc) return rc;
  char a[TS_CONFIG_JSON_MAX], b[TS_CONFIG_JSON_MAX], key[64];
  if ((rc = ts_config_architecture_json(&ck->cfg, a, sizeof a)) ||
      (rc = ts_config_architecture_json(cfg, b, sizeof b))) {
    ts_run_close_checkpoint(ck);
    return rc;
  }
  ts_config_json_difference(a, b, key, sizeof key);
  if (key[0]) {
    char field[64], va[64], vb[64];
    snprintf(field, sizeof field, "%s", key);
    const size_t n = strlen(field);
    if (n > 4 && strcmp(field + n - 4, "_hex") == 0) field[n - 4] = 0; // a float's bits
    json_text(a, field, va, sizeof va);
    json_text(b, field, vb, sizeof vb);
    ts_run_close_checkpoint(ck);
    return ts_fail(TS_EUSAGE, "--init-from %s: another architecture: its \"%s\" is %s, this "
                   "run's (%s) %s", path, field, va, architecture_flag(field), vb);
  }
  return TS_OK;
}

// tessera's own name for the checkpoint of a step (ts_run_save_checkpoint's
// "step-%08lld.safetensors"): the step, or 0 for any other name.
static int64_t own_checkpoint_step(const char *name) {
  long long s;
  int end = 0;
  char again[64];
  if (sscanf(name, "step-%lld.safetensors%n", &s, &end) != 1 || end == 0 || name[end] || s < 1)
    return 0;
  snprintf(again, sizeof again, "step-%08lld.safetensors", s);
  return strcmp(again, name) == 0 ? (int64_t)s : 0;
}

// The step of dir/name when it is a checkpoint a run wrote: tessera's name
// for it and a regular file (a link or a directory is not one), else 0; its
// path goes to p.
static int64_t written_checkpoint(const char *dir, const char *name, char *p, size_t cap) {
  const int64_t s = own_checkpoint_step(name);
  struct stat st;
  if (s < 1 || (size_t)snprintf(p, cap, "%s/%s", dir, name) >= cap) return 0;
  return lstat(p, &st) == 0 && S_ISREG(st.st_mode) ? s : 0;
}

int64_t ts_run_latest_own_checkpoint(const char *dir, char *path, size_t cap) {
  DIR *d = opendir(dir);
  path[0] = 0;
  if (!d) return -1;
  int64_t best = 0;
  struct dirent *e;
  char p[4400];
  while ((e = readdir(d))) {
    const int64_t s = written_checkpoint(dir, e->d_name, p, sizeof p);
    if (s <= best) continue;
    best = s;
    if ((size_t)snprintf(path, cap, "%s", p) >= cap) path[0] = 0;
  }
  closedir(d);
  return best;
}

static int by_step_descending(const void *a, const void *b) {
  const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x < y) - (x > y);
}

// Whether the checkpoint at path is this run lineage's (its run id is
// ts_run_lineage's): a file that cannot be read as a checkpoint, or that
// records no run id or another, is not, and --keep-last leaves it alone.
// Its header alone is read.
static int of_this_lineage(const char *path) {
  const char *lineage = ts_run_lineage();
  ts_ckpt *ck;
  char id[TS_RUN_ID_LEN + 1];
  if (!lineage[0] || ts_ckpt_open_header(path, &ck)) return 0;
  const int found = ts_run_ckpt_run_id(ck, id, sizeof id);
  ts_ckpt_close(ck);
  return found == 1 && strcmp(id, lineage) == 0;
}

int ts_run_prune_checkpoints(const char *dir, int64_t step, int keep) {
  DIR *d = opendir(dir);
  if (!d) return ts_fail(TS_ERUNTIME, "--keep-last: cannot open %s: %s", dir, strerror(errno));
  int64_t *steps = NULL;
  size_t n = 0, cap = 0;
  int rc = TS_OK;
  struct dirent *e;
  char p[4400];
  while (!rc && (e = readdir(d))) {
    // a later step's file is another run's, a link or a directory is not a
    // file tessera wrote, and a checkpoint of another run lineage (copied
    // in, say) is not this run's: all stay
    const int64_t s = written_checkpoint(dir, e->d_name, p, sizeof p);
    if (s < 1 || s > step || !of_this_lineage(p)) continue;
    if (n == cap) {
      int64_t *grown = realloc(steps, (cap = cap ? 2 * cap : 16) * sizeof *steps);
      if (!grown) rc = ts_fail(TS_ERUNTIME, "out of memory");
      else steps = grown;
    }
    if (!rc) steps[n++] = s;
  }
  closedir(d);
  if (!rc && n) qsort(steps, n, sizeof *steps, by_step_descending);
  for (size_t i = (size_t)keep; !rc && i < n; i++) {
    snprintf(p, sizeof p, "%s/step-%08" PRId64 ".safetensors", dir, steps[i]);
    if (unlink(p) != 0 && errno != ENOENT)
      rc = ts_fail(TS_ERUNTIME, "--keep-last: cannot remove %s: %s (the checkpoint of step %"
                   PRId64 " is written)", p, strerror(errno), step);
  }
  free(steps);
  return rc;
}

void ts_run_close_checkpoint(ts_run_ckpt *ck) {
  ts_ckpt_close(ck->ck);
  ck->ck = NULL;
}

int ts_run_load_checkpoint(ts_model *m, ts_adamw *opt, const ts_tensor *upd, int nupd,
                           const ts_run_ckpt *ck) {
  const char *path = ts_ckpt_path(ck->ck);
  ts_tensor *t;
  int n = ts_run_ckpt_tensors(m, NULL, &t); // the canonical table, to check the file against
  if (n < 0) return ts_fail(TS_ERUNTIME, "out of memory");
  int rc = ts_ckpt_expect(ck->ck, t, n);
  free(t);
  // what this model holds, from those byte ranges alone: every tensor (or
  // part) it holds, copies included, and with an optimizer the moments of
  // those it updates, in their order (NULL: its owned tensors)
  const int nt = ts_model_num_tensors(m), nc = ts_model_num_copies(m);
  ts_tensor *h = calloc((size_t)(nt + nc) + 1, sizeof *h);
  if (!rc && !h) rc = ts_fail(TS_ERUNTIME, "out of memory");
  if (!rc) {
    ts_model_tensors(m, h, NULL);
    ts_model_copies(m, h + nt);
    if (!upd) upd = h, nupd = nt;
  }
  const uint64_t total = ts_model_canonical_params(m);
  for (int i = 0; i < nt + nc && !rc; i++)
    rc = ts_ckpt_read(ck->ck, 4 * (uint64_t)h[i].at, h[i].data,
                      (size_t)ts_tensor_numel(&h[i]) * sizeof(float));
  size_t first = 0;
  for (int j = 0; opt && j < nupd && !rc; j++) {
    const size_t len = (size_t)ts_tensor_numel(&upd[j]);
    for (int k = 1; k <= 2 && !rc; k++)
      rc = ts_ckpt_read(ck->ck, 4 * ((uint64_t)k * total + (uint64_t)upd[j].at),
                        (k == 1 ? opt->m : opt->v) + first, len * sizeof(float));
    first += len;
  }
  // none is written with a NaN or Inf (ts_run_save_checkpoint): it is damage
  float value = 0.0f;
  int64_t index = 0;
  const char *what = NULL;
  if (!rc && (what = nonfinite_state(m, opt, upd, nupd, &value, &index)))
    rc = bad(path, "tensor %s holds %g at index %" PRId64 " (a checkpoint holds finite values "
                   "only)", what, (double)value, index);
  free(h);
  if (!rc && opt) opt->step = ck->adam_step;
  return rc;
}

// On resume, the log keeps the records up to the checkpoint and continues,
// so that a resumed run's log equals the log of the run done straight.
// A last line without its newline is a record the killed run did not finish:
// it is dropped, or the next record would be glued onto it. A resume record
// of step `upto` or later goes with the steps that run made after it. The
// run's log reaches its checkpoint's step (it is synced before the checkpoint
// is written): a log that ends earlier is another run's, and continuing it
// would leave a log with steps missing.
// The text of the object that follows "key": in a JSON line, into a new
// string (NULL: none, or no memory). Strings are skipped whole, so braces in
// a path do not count.
static char *member_object(const char *line, const char *key) {
  const char *p = strstr(line, key);
  if (!p || (p = strchr(p + strlen(key), '{')) == NULL) return NULL;
  int depth = 0, in_str = 0;
  for (const char *q = p; *q; q++) {
    if (in_str) {
      if (*q == '\\' && q[1]) q++;
      else if (*q == '"') in_str = 0;
    } else if (*q == '"') {
      in_str = 1;
    } else if (*q == '{') {
      depth++;
    } else if (*q == '}' && --depth == 0) {
      const size_t n = (size_t)(q - p) + 1;
      char *out = malloc(n + 1);
      if (out) memcpy(out, p, n), out[n] = 0;
      return out;
    }
  }
  return NULL;
}

// A log's first record is its run's configuration: a log whose run differs
// from the checkpoint's (another seed, model, batch...) is another run's,
// whatever its length. TS_OK when it matches or says nothing to compare.
static int log_of_this_run(const char *path, const char *first, const ts_run_ckpt *ck) {
  if (!strstr(first, "\"type\":\"config\"")) return TS_OK;
  char *model = member_object(first, "\"model\":");
  if (!model) return TS_OK;
  ts_config was = ck->cfg; // read over: what the record leaves out is not garbage
  fields_written_when_set(&was);
  int rc = ts_config_from_json(&was, model);
  free(model);
  if (rc) return TS_OK; // unreadable: the length check below still applies
  char what[4300];
  snprintf(what, sizeof what, "checkpoint %s", ts_ckpt_path(ck->ck));
  if (check_resume_config(&was, &ck->cfg, ck->step, what, "the log") == TS_OK) return TS_OK;
  char why[1024];
  snprintf(why, sizeof why, "%s", ts_errmsg());
  return ts_fail(TS_EUSAGE, "--log %s: another run's log (%s); name a new --log to start one",
                 path, why + (strncmp(why, "--resume: ", 10) ? 0 : 10));
}

int ts_run_trim_log(const char *path, const ts_run_ckpt *ck) {
  const int64_t upto = ck->step;
  const char *why = "";
  FILE *f = ts_fopen_regular(path, "r", &why);
  if (!f && errno == ENOENT) return TS_OK; // no old log: start a new one
  if (!f) return ts_fail(TS_ERUNTIME, "--log %s: cannot open: %s", path, why);
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
  int ok = 1, records = 0;
  long long last = 0; // the last step record's step
  errno = 0;
  while (ok && (len = getline(&line, &cap, f)) > 0) {
    if (line[len - 1] != '\n') break; // torn
    if (records++ == 0 && log_of_this_run(path, line, ck) != TS_OK) {
      free(line);
      fclose(f);
      fclose(o);
      unlink(tmp);
      return TS_EUSAGE;
    }
    const char *sp = strstr(line, "\"step\":");
    long long s = sp ? strtoll(sp + 7, NULL, 10) : 0;
    int is_final = strstr(line, "\"type\":\"final\"") != NULL;
    int is_resume = strstr(line, "\"type\":\"resume\"") != NULL;
    if (strstr(line, "\"type\":\"step\"") && s > last) last = s;
    if (!is_final && (is_resume ? s < upto : s <= upto)) ok = fputs(line, o) >= 0;
  }
  int err = ferror(f) || !ok ? (errno ? errno : EIO) : 0;
  free(line);
  fclose(f);
  if (!err && (fflush(o) != 0 || fsync(fileno(o)) != 0)) err = errno;
  if (fclose(o) != 0 && !err) err = errno;
  if (!err && records > 0 && last < upto) {
    unlink(tmp);
    return ts_fail(TS_ERUNTIME, "--log %s: its step records end at step %lld but the checkpoint "
                   "is of step %" PRId64 ": not this run's log (name a new --log to start one)",
                   path, last, upto);
  }
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
  // in --ckpt-dir only under its lock (ckpt_owner.c): no other run writes there
  if (cfg->ckpt_dir[0]) {
    n += ts_remove_stale_temps(cfg->ckpt_dir, "step-*.safetensors");
    n += ts_remove_stale_temps(cfg->ckpt_dir, TS_RUN_IDENTITY);
  }
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

// ---------------------------------------------------------------------------
// Comparing two checkpoints' model state.

static int compare_state(ts_ckpt *a, ts_ckpt *b, FILE *out) {
  const char *pa = ts_ckpt_path(a), *pb = ts_ckpt_path(b);
  const char *keys[] = {META_STEP, META_ADAM, META_POSITION};
  // a file without them is no run's checkpoint (a dump's weights, or
  // damage): unreadable, not "different", even from itself
  for (int i = 0; i < 3; i++)
    for (int k = 0; k < 2; k++)
      if (!ts_ckpt_meta(k ? b : a, keys[i]))
        return ts_fail(TS_EUSAGE, "%s: metadata has no %s (not a training run's checkpoint)",
                       k ? pb : pa, keys[i]);
  for (int i = 0; i < 3; i++) {
    const char *va = ts_ckpt_meta(a, keys[i]), *vb = ts_ckpt_meta(b, keys[i]);
    if (strcmp(va, vb)) {
      fprintf(out, "different: %s is %s in %s, %s in %s\n", keys[i], va, pa, vb, pb);
      return 1;
    }
  }
  const char *ja = ts_ckpt_meta(a, META_CONFIG), *jb = ts_ckpt_meta(b, META_CONFIG);
  // Read over zeros, as a run reads its checkpoint (read_config): the fields
  // written only when set are 0 when absent, and none is left uninitialised
  // (which made the answer depend on the stack, and differ with the order).
  ts_config ca, cb;
  memset(&ca, 0, sizeof ca);
  memset(&cb, 0, sizeof cb);
  ts_config_defaults(&ca);
  ts_config_defaults(&cb);
  if (!ja || ts_config_from_json(&ca, ja)) return ts_fail(TS_EUSAGE, "%s: unreadable %s", pa, META_CONFIG);
  if (!jb || ts_config_from_json(&cb, jb)) return ts_fail(TS_EUSAGE, "%s: unreadable %s", pb, META_CONFIG);
  char sa[TS_CONFIG_JSON_MAX], sb[TS_CONFIG_JSON_MAX], key[64];
  if (ts_config_computation_json(&ca, 1, sa, sizeof sa) ||
      ts_config_computation_json(&cb, 1, sb, sizeof sb))
    return ts_fail(TS_EUSAGE, "%s: %s", pa, ts_errmsg());
  ts_config_json_difference(sa, sb, key, sizeof key);
  if (key[0]) {
    fprintf(out, "different: the configurations differ in \"%s\"\n", key);
    return 1;
  }
  const int n = ts_ckpt_num_tensors(a);
  if (n != ts_ckpt_num_tensors(b)) {
    fprintf(out, "different: %d tensors in %s, %d in %s\n", n, pa, ts_ckpt_num_tensors(b), pb);
    return 1;
  }
  int rc = 0;
  for (int i = 0; i < n && rc == 0; i++) {
    ts_tensor ta, tb;
    if (ts_ckpt_tensor(a, i, &ta) || ts_ckpt_tensor(b, i, &tb)) return TS_EUSAGE;
    if (strcmp(ta.name, tb.name) || ta.ndim != tb.ndim ||
        memcmp(ta.shape, tb.shape, sizeof ta.shape)) {
      fprintf(out, "different: tensor %d is '%s' in %s, '%s' (or another shape) in %s\n", i,
              ta.name, pa, tb.name, pb);
      return 1;
    }
    const int64_t len = ts_tensor_numel(&ta);
    ta.data = malloc((size_t)(len ? len : 1) * sizeof(float));
    tb.data = malloc((size_t)(len ? len : 1) * sizeof(float));
    if (!ta.data || !tb.data) rc = ts_fail(TS_EUSAGE, "out of memory");
    if (!rc && (ts_ckpt_load(a, &ta) || ts_ckpt_load(b, &tb))) rc = TS_EUSAGE;
    for (int64_t k = 0; !rc && k < len; k++)
      if (memcmp(&ta.data[k], &tb.data[k], sizeof(float))) {
        fprintf(out, "different: tensor '%s' at index %" PRId64 ": %a in %s, %a in %s\n", ta.name,
                k, (double)ta.data[k], pa, (double)tb.data[k], pb);
        rc = 1;
      }
    free(ta.data);
    free(tb.data);
  }
  if (rc == 0) fprintf(out, "same model state\n");
  return rc;
}

int ts_compare_checkpoints(const char *path_a, const char *path_b, FILE *out) {
  ts_ckpt *a = NULL, *b = NULL;
  int rc = ts_ckpt_open(path_a, &a);
  if (!rc) rc = ts_ckpt_open(path_b, &b);
  if (!rc) rc = compare_state(a, b, out);
  else rc = TS_EUSAGE; // unreadable or damaged: the message is ts_open's
  ts_ckpt_close(a);
  ts_ckpt_close(b);
  if (rc != 0 && rc != 1) {
    if (rc != TS_EUSAGE) rc = TS_EUSAGE;
  }
  return rc;
}
