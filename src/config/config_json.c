// The configuration's JSON form, written into run logs and checkpoints and
// read back from them (ts_config_to_json, ts_config_from_json).
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "tessera.h"

// JSON form. One table drives both directions and the ranks' agreement, so a
// field added to the table is written, read back and compared between ranks;
// floats are written twice, as "%.9g" for people and as a "%a" string (key
// suffix _hex) that reads back bit for bit.
typedef enum { F_INT, F_U64, F_FLOAT, F_STR, F_VARIANT, F_DATA_FORMAT, F_LR_SCHEDULE,
               F_MAPL_ANCHOR } field_kind;

typedef struct {
  const char *key;
  const char *flag; // the flag that sets it: how a rank that differs in it is told
  field_kind kind;
  size_t off;
  size_t size;  // strings: capacity of the char array
  int required; // model fields: a checkpoint without them is damaged
  int llama;    // written and required only for the LLaMA variant
  int optional; // written only when not 0 or "" (new options: files stay as they were)
  int unwritten; // not in the JSON form (logs and checkpoints): the ranks compare it alone
  ts_agreement agree; // what the ranks of a run must have in common (tessera.h)
} field;

#define FIELD(k, flag, kind, member, req, llama, opt, unwritten, agree)                            \
  { k, flag, kind, offsetof(ts_config, member), sizeof(((ts_config *)0)->member), req, llama, opt, \
    unwritten, agree }
#define FLD(k, flag, kind, member, req) FIELD(k, flag, kind, member, req, 0, 0, 0, TS_AGREE_SAME)
#define FLD_LLAMA(k, flag, kind, member) FIELD(k, flag, kind, member, 1, 1, 0, 0, TS_AGREE_SAME)
#define FLD_OPT(k, flag, member) FIELD(k, flag, F_INT, member, 0, 0, 1, 0, TS_AGREE_SAME)
#define FLD_OPTF(k, flag, member) FIELD(k, flag, F_FLOAT, member, 0, 0, 1, 0, TS_AGREE_SAME)
#define FLD_OPTK(k, flag, kind, member) FIELD(k, flag, kind, member, 0, 0, 1, 0, TS_AGREE_SAME)
// an input path, optional or not: the ranks compare what it holds apart
#define FLD_INPUT(k, flag, member, opt)                                                            \
  FIELD(k, flag, F_STR, member, 0, 0, opt, 0, TS_AGREE_GIVEN)
// a field outside the JSON form (an int), compared between ranks or not
#define FLD_UNWRITTEN(k, flag, member, agree) FIELD(k, flag, F_INT, member, 0, 0, 0, 1, agree)

// Every field of ts_config is here (test_config checks that the table covers
// the struct), so that a new field is written, read back and compared
// between ranks, or says why not.
static const field fields[] = {
    FLD("preset", "--model", F_STR, preset, 0),
    FLD("variant", "--model", F_VARIANT, variant, 1),
    FLD("vocab", "--vocab", F_INT, vocab, 1),
    FLD("d", "--d", F_INT, d, 1),
    FLD("n_layer", "--layers", F_INT, n_layer, 1),
    FLD("n_head", "--heads", F_INT, n_head, 1),
    FLD_LLAMA("n_kv_head", "--kv-heads", F_INT, n_kv_head),
    FLD_LLAMA("rope_theta", "--rope-theta", F_FLOAT, rope_theta),
    FLD("d_ff", "--d-ff", F_INT, d_ff, 1),
    FLD("seq", "--seq", F_INT, seq, 1),
    FLD("tied", "--tied", F_INT, tied, 1),
    FLD("dropout", "--dropout", F_FLOAT, dropout, 1),
    FLD("batch", "--batch", F_INT, batch, 0),
    FLD("steps", "--steps", F_INT, steps, 0),
    FLD("seed", "--seed", F_U64, seed, 0),
    FLD("tile", "--tile", F_INT, tile, 0),
    FLD("leaf", "--leaf", F_INT, leaf, 0),
    FLD("lr", "--lr", F_FLOAT, lr, 0),
    FLD("min_lr_frac", "--min-lr-frac", F_FLOAT, min_lr_frac, 0),
    FLD("weight_decay", "--weight-decay", F_FLOAT, weight_decay, 0),
    FLD("beta1", "--beta1", F_FLOAT, beta1, 0),
    FLD("beta2", "--beta2", F_FLOAT, beta2, 0),
    FLD("eps", "--eps", F_FLOAT, eps, 0),
    FLD("grad_clip", "--grad-clip", F_FLOAT, grad_clip, 0),
    FLD("warmup", "--warmup", F_INT, warmup, 0),
    FLD("val_frac", "--val-frac", F_FLOAT, val_frac, 0),
    FLD("eval_every", "--eval-every", F_INT, eval_every, 0),
    FLD("eval_batches", "--eval-batches", F_INT, eval_batches, 0),
    // how many threads a process runs: the bits do not depend on it
    // (docs/EXACTNESS.md), no collective does, and nodes differ in cores
    FIELD("threads", "--threads", F_INT, threads, 0, 0, 0, 0, TS_AGREE_PER_RANK),
    FLD("fast", "--fast", F_INT, fast, 0),
    FLD_OPT("optimizer", "--optimizer", optimizer),
    FLD_OPTF("muon_lr", "--muon-lr", muon_lr),
    FLD_OPTK("lr_schedule", "--lr-schedule", F_LR_SCHEDULE, lr_schedule), // cosine (0) is left out
    FLD_OPTF("decay_frac", "--decay-frac", decay_frac),
    FLD_OPT("checkpoint", "--checkpoint", checkpoint),
    FLD_OPT("fused_ce", "--fused-ce", fused_ce),
    FLD_OPT("tiled_mlp", "--tiled-mlp", tiled_mlp),
    FLD_OPT("compress", "--compress", compress),
    FLD_OPT("compress_rank", "--rank", compress_rank),
    FLD_OPT("compress_stages", "--compress-stages", compress_stages),
    FLD_OPTF("proj_lr", "--proj-lr", proj_lr),
    FLD_OPT("vq_groups", "--vq-group", vq_groups),
    FLD_OPT("vq_rounds", "--vq-rounds", vq_rounds),
    FLD_OPT("vq_codes", "--vq-codes", vq_codes),
    FLD_OPTF("vq_gamma", "--vq-gamma", vq_gamma),
    FLD_OPTF("vq_commit", "--vq-commit", vq_commit),
    FLD_OPT("vq_sync_codes", "--vq-sync-codes", vq_sync_codes),
    FLD_OPT("vq_backward", "--vq-backward", vq_backward), // off (0) is left out
    FLD_OPTF("vq_backward_gamma", "--vq-backward-gamma", vq_backward_gamma),
    FLD_OPT("vq_stream_every", "--vq-stream-every", vq_stream_every),
    FLD_OPT("vq_stream_microbatches", "--vq-stream-unit", vq_stream_microbatches), // step (0) is left out
    FLD_OPTK("mapl_anchor", "--mapl-anchor", F_MAPL_ANCHOR, mapl_anchor), // factorised (0) is left out
    FLD_OPT("ssn_refresh", "--ssn-refresh", ssn_refresh),
    FLD_OPTF("ssn_refresh_step", "--ssn-refresh-step", ssn_refresh_step),
    FLD_OPTK("data_format", "--data-format", F_DATA_FORMAT, data_format), // bytes (0) is left out
    // the data and the tokenizer are compared by their digests (run/agree.c)
    FLD_INPUT("data_path", "--data", data_path, 0),
    FLD_INPUT("val_path", "--val-data", val_path, 1),
    FLD_INPUT("tokenizer", "--tokenizer", tokenizer_path, 1),
    FLD("log_path", "--log", F_STR, log_path, 0),
    FLD("ckpt_dir", "--ckpt-dir", F_STR, ckpt_dir, 0),
    // the checkpoint by its step and header checksum (run/agree.c)
    FLD_INPUT("init_from", "--init-from", init_from, 1),
    FLD("ckpt_every", "--ckpt-every", F_INT, ckpt_every, 0),
    FLD("resume", "--resume", F_INT, resume, 0),
    FLD_UNWRITTEN("restart", "--restart", restart, TS_AGREE_SAME),
    // rank 0 alone talks to people: ts_train makes every other rank quiet
    FIELD("quiet", "--quiet", F_INT, quiet, 0, 0, 0, 0, TS_AGREE_PER_RANK),
    FLD_UNWRITTEN("keep_last", "--keep-last", keep_last, TS_AGREE_SAME),
    FLD_UNWRITTEN("log_every", "--log-every", log_every, TS_AGREE_SAME),
    // whether --data and --val-frac were named; what they came to (the
    // checkpoint's, on --resume) is data_path, val_frac and the data's digest
    FLD_UNWRITTEN("data_from_ckpt", "--data", data_from_ckpt, TS_AGREE_PER_RANK),
    FLD_UNWRITTEN("val_frac_from_ckpt", "--val-frac", val_frac_from_ckpt, TS_AGREE_PER_RANK),
};
#define N_FIELDS ((int)(sizeof fields / sizeof fields[0]))

static const char *variant_names[] = {"gpt", "llama"};
// A data format by name: the flag's names, and "detect" for a configuration
// not yet run (a run writes the format it read).
static const char *format_name(int v) {
  if (v == TS_DATA_DETECT) return "detect";
  return v >= 0 && v < TS_DATA_NFORMATS ? ts_data_format_names[v] : "unknown";
}

static const char *schedule_name(int v) {
  return v >= 0 && v < TS_LR_NSCHEDULES ? ts_lr_schedule_names[v] : "unknown";
}

static const char *anchor_name(int v) {
  return v >= 0 && v < TS_ANCHOR_NKINDS ? ts_mapl_anchor_names[v] : "unknown";
}

// Whether an optional field holds its "absent" value (0, 0.0 or "").
static int is_absent(const field *f, const void *p) {
  if (f->kind == F_FLOAT) return *(const float *)p == 0.0f;
  if (f->kind == F_STR) return *(const char *)p == '\0';
  return *(const int *)p == 0;
}

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

// Which fields a JSON form holds: all of them, the computation (without the
// run's own settings, with or without the memory options), or the run's own
// settings alone (the memory options among them); or what ranks compare:
// every field but those each rank holds its own, the unwritten ones too.
typedef enum { PART_ALL, PART_COMPUTATION, PART_COMPUTATION_MEMORY, PART_RUN, PART_AGREE } part;

// The run's own settings (ts_config_drop_run_settings sets them to fixed
// values; test_config checks that the two lists agree) and the memory
// options: what two layouts of one run may set differently.
static const char *const run_keys[] = {"threads", "eval_every", "eval_batches", "quiet",
                                       "resume", "data_path", "val_path", "tokenizer",
                                       "log_path", "ckpt_dir", "init_from", "ckpt_every"};
static const char *const memory_keys[] = {"checkpoint", "fused_ce", "tiled_mlp"};

static int among(const char *key, const char *const *keys, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(key, keys[i])) return 1;
  return 0;
}

static int in_part(const field *f, part which) {
  if (which == PART_AGREE) return f->agree != TS_AGREE_PER_RANK;
  if (f->unwritten) return 0;
  if (which == PART_ALL) return 1;
  const int run = among(f->key, run_keys, sizeof run_keys / sizeof run_keys[0]);
  const int memory = among(f->key, memory_keys, sizeof memory_keys / sizeof memory_keys[0]);
  if (which == PART_RUN) return run || memory;
  return !run && (which == PART_COMPUTATION_MEMORY || !memory);
}

static int write_json(const ts_config *cfg, part which, const char *extra, char *buf, size_t cap) {
  size_t len = 0;
  const char *base = (const char *)cfg;
  int n = 0;
  put(buf, cap, &len, "{");
  for (int i = 0; i < N_FIELDS; i++) {
    const field *f = &fields[i];
    const void *p = base + f->off;
    if (!in_part(f, which)) continue;
    // the ranks' form has every field it compares, always (its order is the table's)
    const int agree = which == PART_AGREE;
    if (!agree && f->llama && cfg->variant != TS_LLAMA) continue; // GPT files stay as they were
    if (!agree && f->optional && is_absent(f, p)) continue;
    put(buf, cap, &len, "%s\"%s\":", n++ ? "," : "", f->key);
    if (agree && f->agree == TS_AGREE_GIVEN) {
      put(buf, cap, &len, "%d", *(const char *)p != '\0');
      continue;
    }
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
    case F_DATA_FORMAT: put_string(buf, cap, &len, format_name(*(const int *)p)); break;
    case F_LR_SCHEDULE: put_string(buf, cap, &len, schedule_name(*(const int *)p)); break;
    case F_MAPL_ANCHOR: put_string(buf, cap, &len, anchor_name(*(const int *)p)); break;
    }
  }
  if (extra && extra[0]) put(buf, cap, &len, "%s%s", n ? "," : "", extra);
  put(buf, cap, &len, "}");
  if (len >= cap)
    return ts_fail(TS_ERUNTIME, "config JSON needs %zu bytes, buffer has %zu", len + 1, cap);
  return TS_OK;
}

int ts_config_to_json(const ts_config *cfg, char *buf, size_t cap) {
  return write_json(cfg, PART_ALL, NULL, buf, cap);
}

int ts_config_run_json(const ts_config *cfg, const char *layout, const char *run_id, char *buf,
                       size_t cap) {
  char extra[384] = "";
  size_t len = 0;
  if (layout) {
    put(extra, sizeof extra, &len, "\"layout\":");
    put_string(extra, sizeof extra, &len, layout);
  }
  if (run_id && run_id[0]) {
    put(extra, sizeof extra, &len, "%s\"run_id\":", layout ? "," : "");
    put_string(extra, sizeof extra, &len, run_id);
  }
  if (len >= sizeof extra)
    return ts_fail(TS_ERUNTIME, "layout name or run id too long: %s", layout ? layout : run_id);
  return write_json(cfg, PART_RUN, extra, buf, cap);
}

// ---------------------------------------------------------------------------
// Reading back. Unknown keys are ignored whatever their values (other writers
// may nest extra information there), so that newer files stay readable; so
// are the keys of the unwritten fields (unwritten_too 0).
static const field *find_field(const char *key, size_t len, int unwritten_too) {
  for (int i = 0; i < N_FIELDS; i++)
    if (strlen(fields[i].key) == len && strncmp(fields[i].key, key, len) == 0)
      return fields[i].unwritten && !unwritten_too ? NULL : &fields[i];
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
  case F_DATA_FORMAT:
    if (!is_string) return -1;
    for (int v = TS_DATA_DETECT; v < TS_DATA_NFORMATS; v++)
      if (strcmp(text, format_name(v)) == 0) {
        *(int *)p = v;
        return 0;
      }
    return -1;
  case F_LR_SCHEDULE:
    if (!is_string) return -1;
    for (int v = 0; v < TS_LR_NSCHEDULES; v++)
      if (strcmp(text, ts_lr_schedule_names[v]) == 0) {
        *(int *)p = v;
        return 0;
      }
    return -1;
  case F_MAPL_ANCHOR:
    if (!is_string) return -1;
    for (int v = 0; v < TS_ANCHOR_NKINDS; v++)
      if (strcmp(text, ts_mapl_anchor_names[v]) == 0) {
        *(int *)p = v;
        return 0;
      }
    return -1;
  }
  return -1;
}

// Reads json over cfg; with required, the model fields must be there. A
// field outside the part is refused: the run's settings are read from a
// record the checkpoint's header checksum does not cover (docs/CHECKPOINTS.md),
// which must not carry the computation in.
static int read_json(ts_config *cfg, const char *json, int required, part which) {
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
    const field *f = find_field(v->key, from_hex ? klen - 4 : klen, 0);
    if (f == NULL || (from_hex && f->kind != F_FLOAT)) continue;
    if (!in_part(f, which)) {
      rc = ts_fail(TS_ERUNTIME, "config JSON: \"%s\" is not one of the run's own settings", f->key);
      break;
    }
    int k = (int)(f - fields);
    if (set_field(cfg, f, v, from_hex, &seen_hex[k]) != 0)
      rc = ts_fail(TS_ERUNTIME, "config JSON: bad value for \"%s%s\"", f->key,
                   from_hex ? "_hex" : "");
    seen[k] = 1;
  }
  json_free(&obj);
  for (int i = 0; i < N_FIELDS && rc == TS_OK; i++)
    if (required && fields[i].required && !seen[i] &&
        (!fields[i].llama || cfg->variant == TS_LLAMA))
      rc = ts_fail(TS_ERUNTIME, "config JSON: missing \"%s\"", fields[i].key);
  if (rc == TS_OK && cfg->variant == TS_GPT) { // not in a GPT's JSON: the canonical values
    cfg->n_kv_head = 0;
    cfg->rope_theta = 0.0f;
  }
  return rc;
}

// The JSON key of the first field in which two configurations' JSON forms
// differ (both written by ts_config_to_json: same order, optional fields
// present or not), or "" when they do not.
int ts_config_from_json(ts_config *cfg, const char *json) {
  return read_json(cfg, json, 1, PART_ALL);
}

int ts_config_run_from_json(ts_config *cfg, const char *json) {
  return read_json(cfg, json, 0, PART_RUN);
}

int ts_config_computation_json(const ts_config *cfg, int memory_options, char *buf, size_t cap) {
  return write_json(cfg, memory_options ? PART_COMPUTATION_MEMORY : PART_COMPUTATION, NULL, buf,
                    cap);
}

int ts_config_architecture_json(const ts_config *cfg, char *buf, size_t cap) {
  ts_config a;
  memset(&a, 0, sizeof a);
  a.variant = cfg->variant;
  a.vocab = cfg->vocab, a.d = cfg->d, a.n_layer = cfg->n_layer, a.n_head = cfg->n_head;
  a.n_kv_head = cfg->n_kv_head, a.rope_theta = cfg->rope_theta;
  a.d_ff = cfg->d_ff, a.tied = cfg->tied;
  a.seq = cfg->variant == TS_GPT ? cfg->seq : 0; // RoPE has no table of positions
  a.compress = cfg->compress, a.compress_rank = cfg->compress_rank;
  a.compress_stages = cfg->compress_stages;
  a.vq_groups = cfg->vq_groups, a.vq_rounds = cfg->vq_rounds, a.vq_codes = cfg->vq_codes;
  a.mapl_anchor = cfg->mapl_anchor;
  a.vq_backward = cfg->vq_backward; // (its gradient codebooks are tensors)
  return ts_config_to_json(&a, buf, cap);
}

void ts_config_json_difference(const char *a, const char *b, char *key, size_t cap) {
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

// ---------------------------------------------------------------------------
// What the ranks of a run compare (ts_run_agree).

int ts_config_agreement_json(const ts_config *cfg, char *buf, size_t cap) {
  return write_json(cfg, PART_AGREE, NULL, buf, cap);
}

// A value of the ranks' form as people read it: a path quoted (and cut to
// what fits), an input given or not; "absent" from a form without the field
// (a rank of another version).
static void shown(const field *f, const json_value *v, char *out, size_t cap) {
  if (!v) {
    snprintf(out, cap, "absent");
  } else if (f && f->agree == TS_AGREE_GIVEN) {
    snprintf(out, cap, "%s", strcmp(v->str, "0") ? "given" : "not given");
  } else if (f && f->kind == F_STR && v->type == JSON_STRING) {
    const size_t n = strlen(v->str), room = cap > 6 ? cap - 6 : 0; // quotes, "...", NUL
    if (n <= room) snprintf(out, cap, "\"%s\"", v->str);
    else snprintf(out, cap, "\"%.*s...\"", (int)room, v->str);
  } else {
    snprintf(out, cap, "%s", v->str ? v->str : v->type == JSON_TRUE ? "true" : "?");
  }
}

// The first key, in a's order, whose value b does not share, then b's keys
// that a lacks; NULL when none.
static const char *first_different(const json_value *a, const json_value *b) {
  for (int i = 0; i < a->n; i++) {
    const json_value *x = &a->items[i], *y = json_get(b, x->key);
    const char *sx = x->str ? x->str : "", *sy = y && y->str ? y->str : "";
    if (!y || x->type != y->type || strcmp(sx, sy)) return x->key;
  }
  for (int i = 0; i < b->n; i++)
    if (!json_get(a, b->items[i].key)) return b->items[i].key;
  return NULL;
}

int ts_config_agreement_difference(const char *a, const char *b, ts_config_difference *d) {
  json_value va, vb;
  json_error err;
  memset(d, 0, sizeof *d);
  if (!strcmp(a, b)) return 0;
  if (json_parse(&va, a, strlen(a), JSON_NONFINITE | JSON_ANY_BYTES, &err)) {
    snprintf(d->flag, sizeof d->flag, "the configuration");
    snprintf(d->a, sizeof d->a, "unreadable");
    snprintf(d->b, sizeof d->b, "?");
    return 1;
  }
  if (json_parse(&vb, b, strlen(b), JSON_NONFINITE | JSON_ANY_BYTES, &err)) {
    json_free(&va);
    snprintf(d->flag, sizeof d->flag, "the configuration");
    snprintf(d->a, sizeof d->a, "?");
    snprintf(d->b, sizeof d->b, "unreadable");
    return 1;
  }
  const char *key = first_different(&va, &vb);
  int differ = key != NULL;
  if (differ) {
    // a float's _hex form is shown by its decimal one, which differs with it
    char name[64];
    size_t klen = strlen(key);
    if (klen > 4 && !strcmp(key + klen - 4, "_hex")) klen -= 4;
    snprintf(name, sizeof name, "%.*s", (int)klen, key);
    const field *f = find_field(name, strlen(name), 1);
    snprintf(d->flag, sizeof d->flag, "%s", f ? f->flag : name);
    shown(f, json_get(&va, name), d->a, sizeof d->a);
    shown(f, json_get(&vb, name), d->b, sizeof d->b);
  }
  json_free(&va);
  json_free(&vb);
  return differ;
}

int ts_config_field_at(int i, ts_config_field *out) {
  if (i < 0 || i >= N_FIELDS) return 0;
  const field *f = &fields[i];
  out->key = f->key;
  out->flag = f->flag;
  out->offset = f->off;
  out->size = f->size;
  out->align = f->kind == F_STR ? 1 : f->kind == F_U64 ? (size_t)_Alignof(uint64_t)
                                                       : (size_t)_Alignof(int);
  out->written = !f->unwritten;
  out->agree = f->agree;
  return 1;
}
