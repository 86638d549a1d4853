// The tokenizer a run's data was made with, recorded in its checkpoints
// (run.h; docs/TOKENIZER.md), checked on --resume, and read back by the
// commands that turn text into the checkpoint's tokens or back.
//
// A tokenizer is known by the digest of its model file's bytes, not by its
// path: a copy elsewhere is the same tokenizer, another file of the same name
// is not.
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "run.h"
#include "train/ckpt.h"

// A record read back or about to be written.
typedef struct {
  char kind[16];   // "sentencepiece"; "" when the run named none
  char file[4096]; // absolute path of the model file when the run started
  int vocab;
  uint64_t digest; // ts_tokenizer_digest
} ts_run_tokenizer;

// This run's record, as its checkpoints hold it; "" when it named none.
static char tokenizer_id[6 * 4096 + 256];

// The JSON form: {"kind":K,"file":F,"vocab":V,"digest":"16 hex digits"}.
static int record_json(const ts_run_tokenizer *t, char *buf, size_t cap) {
  char kind[64], file[6 * 4096 + 8];
  json_escape(kind, sizeof kind, t->kind);
  json_escape(file, sizeof file, t->file);
  const int n = snprintf(buf, cap, "{\"kind\":%s,\"file\":%s,\"vocab\":%d,\"digest\":\"%016" PRIx64
                         "\"}", kind, file, t->vocab, t->digest);
  return n < 0 || (size_t)n >= cap ? ts_fail(TS_ERUNTIME, "tokenizer record too long") : TS_OK;
}

// The record `s` read back, TS_ERUNTIME naming the checkpoint at path when
// it is not one record_json wrote.
static int record_parse(const char *s, const char *path, ts_run_tokenizer *out) {
  memset(out, 0, sizeof *out);
  json_value v;
  json_error err;
  if (json_parse(&v, s, strlen(s), JSON_ANY_BYTES, &err))
    return ts_fail(TS_ERUNTIME, "checkpoint %s: %s is not JSON: %s at byte %zu", path,
                   TS_META_TOKENIZER, err.msg, err.pos);
  const json_value *kind = json_get(&v, "kind"), *file = json_get(&v, "file"),
                   *vocab = json_get(&v, "vocab"), *digest = json_get(&v, "digest");
  uint64_t nv = 0;
  const char *d = digest && digest->type == JSON_STRING ? digest->str : "";
  int ok = json_find_duplicate(&v) == NULL && kind && kind->type == JSON_STRING &&
           strcmp(kind->str, "sentencepiece") == 0 && file && file->type == JSON_STRING &&
           strlen(file->str) < sizeof out->file && vocab && json_u64(vocab, &nv) == 0 &&
           nv >= 2 && nv <= INT_MAX && strlen(d) == 16 && strspn(d, "0123456789abcdef") == 16;
  if (ok) {
    snprintf(out->kind, sizeof out->kind, "%s", kind->str);
    snprintf(out->file, sizeof out->file, "%s", file->str);
    out->vocab = (int)nv;
    out->digest = strtoull(d, NULL, 16);
  }
  json_free(&v);
  if (!ok)
    return ts_fail(TS_ERUNTIME, "checkpoint %s: %s is not a tokenizer record (kind "
                   "\"sentencepiece\", file, vocab, a 16-digit hex digest)", path,
                   TS_META_TOKENIZER);
  return TS_OK;
}

int ts_run_checkpoint_tokenizer(const ts_config *cfg) {
  tokenizer_id[0] = 0;
  if (!cfg->tokenizer_path[0]) return TS_OK;
  ts_tokenizer *tok;
  int rc = ts_tokenizer_open(cfg->tokenizer_path, &tok);
  if (rc) return ts_fail_flag(rc, "--tokenizer", cfg->tokenizer_path);
  ts_run_tokenizer t = {.vocab = ts_tokenizer_vocab(tok), .digest = ts_tokenizer_digest(tok)};
  snprintf(t.kind, sizeof t.kind, "%s", ts_tokenizer_kind(tok));
  ts_tokenizer_free(tok);
  if (t.vocab != cfg->vocab)
    return ts_fail(TS_EUSAGE, "--tokenizer %s has %d ids, but --vocab is %d: train with --vocab %d "
                   "(the embedding and the head have one row per id)", cfg->tokenizer_path,
                   t.vocab, cfg->vocab, t.vocab);
  // where the file is, wherever a later command runs
  char *abs = realpath(cfg->tokenizer_path, NULL);
  snprintf(t.file, sizeof t.file, "%s", abs ? abs : cfg->tokenizer_path);
  free(abs);
  return record_json(&t, tokenizer_id, sizeof tokenizer_id);
}

const char *ts_run_tokenizer_id(void) { return tokenizer_id; }

int ts_run_check_resume_tokenizer(const ts_run_ckpt *ck) {
  const char *path = ts_ckpt_path(ck->ck), *was = ts_ckpt_meta(ck->ck, TS_META_TOKENIZER);
  if (!was || !was[0]) return TS_OK; // its run named no tokenizer
  ts_run_tokenizer old, cur;
  int rc = record_parse(was, path, &old);
  if (rc) return rc;
  if (!tokenizer_id[0]) { // this run goes on recording the checkpoint's
    snprintf(tokenizer_id, sizeof tokenizer_id, "%s", was);
    return TS_OK;
  }
  if ((rc = record_parse(tokenizer_id, path, &cur))) return rc;
  if (cur.digest != old.digest)
    return ts_fail(TS_EUSAGE, "--resume: checkpoint %s was written with tokenizer %s (digest %016"
                   PRIx64 "); this run's --tokenizer %s is another (digest %016" PRIx64 ")", path,
                   old.file, old.digest, cur.file, cur.digest);
  return TS_OK;
}

int ts_run_check_init_source(const ts_run_ckpt *ck, const ts_config *cfg) {
  const char *path = ts_ckpt_path(ck->ck), *was = ts_ckpt_meta(ck->ck, TS_META_TOKENIZER);
  // text (bytes) and token ids are other languages: the ids would mean other things
  const int a = ck->cfg.data_format, b = cfg->data_format;
  if ((a == TS_DATA_BYTES) != (b == TS_DATA_BYTES) && a >= 0 && a < TS_DATA_NFORMATS &&
      b >= 0 && b < TS_DATA_NFORMATS)
    return ts_fail(TS_EUSAGE, "--init-from %s was trained on %s, but this run's --data %s is %s: "
                   "its weights would read other tokens", path,
                   a == TS_DATA_BYTES ? "text (bytes)" : "token ids", cfg->data_path,
                   b == TS_DATA_BYTES ? "text (bytes)" : "token ids");
  if (!was || !was[0] || !tokenizer_id[0]) return TS_OK; // nothing to compare
  ts_run_tokenizer old, cur;
  int rc = record_parse(was, path, &old);
  if (!rc) rc = record_parse(tokenizer_id, path, &cur);
  if (rc) return rc;
  if (cur.digest != old.digest)
    return ts_fail(TS_EUSAGE, "--init-from %s was trained with tokenizer %s (digest %016" PRIx64
                   "); this run's --tokenizer %s is another (digest %016" PRIx64 "): the same ids "
                   "would be other words", path, old.file, old.digest, cur.file, cur.digest);
  return TS_OK;
}

int ts_run_open_ckpt_tokenizer(const ts_run_ckpt *ck, const char *path, ts_tokenizer **out) {
  *out = NULL;
  const char *ckpt = ts_ckpt_path(ck->ck), *was = ts_ckpt_meta(ck->ck, TS_META_TOKENIZER);
  ts_run_tokenizer rec = {0};
  int rc = was && was[0] ? record_parse(was, ckpt, &rec) : TS_OK;
  if (rc) return rc;
  const int given = path && path[0];
  const char *use = given ? path : rec.kind[0] ? rec.file : NULL;
  ts_tokenizer *tok;
  if ((rc = ts_tokenizer_open(use, &tok))) {
    if (given) return ts_fail_flag(rc, "--tokenizer", path);
    char why[1024];
    snprintf(why, sizeof why, "%s", ts_errmsg());
    return ts_fail(TS_ERUNTIME, "checkpoint %s was trained with tokenizer %s, which cannot be "
                   "opened (%s): name a copy of it with --tokenizer", ckpt, rec.file, why);
  }
  // (a flag not given is not blamed: the recorded file is, or the missing record)
  if (rec.kind[0] && ts_tokenizer_digest(tok) != rec.digest && given)
    rc = ts_fail(TS_EUSAGE, "--tokenizer %s: not the tokenizer checkpoint %s was trained with (%s, "
                 "digest %016" PRIx64 "; this file's digest is %016" PRIx64 ")", path, ckpt,
                 rec.file, rec.digest, ts_tokenizer_digest(tok));
  else if (rec.kind[0] && ts_tokenizer_digest(tok) != rec.digest)
    rc = ts_fail(TS_ERUNTIME, "checkpoint %s was trained with tokenizer %s (digest %016" PRIx64
                 "), but that file has changed since (digest %016" PRIx64 "): name a copy of the "
                 "original with --tokenizer", ckpt, rec.file, rec.digest, ts_tokenizer_digest(tok));
  else if (ts_tokenizer_vocab(tok) != ck->cfg.vocab && given)
    rc = ts_fail(TS_EUSAGE, "--tokenizer %s: the %s tokenizer has %d ids but checkpoint %s has a "
                 "vocabulary of %d", path, ts_tokenizer_kind(tok), ts_tokenizer_vocab(tok), ckpt,
                 ck->cfg.vocab);
  else if (ts_tokenizer_vocab(tok) != ck->cfg.vocab)
    rc = ts_fail(TS_EUSAGE, "checkpoint %s has a vocabulary of %d and records no tokenizer, and "
                 "the default (%s, %d ids) does not fit it: name its tokenizer with --tokenizer",
                 ckpt, ck->cfg.vocab, ts_tokenizer_kind(tok), ts_tokenizer_vocab(tok));
  if (rc) {
    ts_tokenizer_free(tok);
    return rc;
  }
  *out = tok;
  return TS_OK;
}
