// The tokenizers of src/text/tokenizer.h: bytes, and SentencePiece through the
// C++ shim of src/text/tokenizer_spm.cc when the build has the library.
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include "tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "tessera.h"
#ifdef TS_HAVE_SENTENCEPIECE
#include "tokenizer_spm.h"
#endif

// A model file larger than this is no tokenizer (LLaMA's 32K model is
// 0.5 MB; a 256K-piece one a few MB): refused before it is read whole.
#define TS_TOKENIZER_MAX_BYTES (256u << 20)

struct ts_tokenizer {
  int vocab;
  char path[4096]; // "" for bytes
  uint64_t digest; // of the model file's bytes
#ifdef TS_HAVE_SENTENCEPIECE
  ts_spm *spm; // NULL for bytes
  int newline; // id of a line break, -1: the model has none
#endif
};

// The whole file at path into a malloc'd *bytes (TS_ERUNTIME naming it).
static int read_model_file(const char *path, char **bytes, size_t *n) {
  *bytes = NULL;
  FILE *f;
  int rc = ts_open_regular(path, &f, n);
  if (rc) return rc;
  if (*n > TS_TOKENIZER_MAX_BYTES) {
    fclose(f);
    return ts_fail(TS_ERUNTIME, "%s: not a tokenizer model file (%zu bytes; a model is at most "
                   "%u MiB)", path, *n, TS_TOKENIZER_MAX_BYTES >> 20);
  }
  *bytes = malloc(*n ? *n : 1);
  if (!*bytes) rc = ts_fail(TS_ERUNTIME, "out of memory reading %s", path);
  else if (fread(*bytes, 1, *n, f) != *n)
    rc = ts_fail(TS_ERUNTIME, "%s: cannot read: %s", path,
                 ferror(f) ? strerror(errno) : "it changed while being read");
  fclose(f);
  if (rc) free(*bytes), *bytes = NULL;
  return rc;
}

int ts_tokenizer_open(const char *path, ts_tokenizer **out) {
  *out = NULL;
  ts_tokenizer *tok = calloc(1, sizeof *tok);
  if (!tok) return ts_fail(TS_ERUNTIME, "out of memory");
  tok->vocab = 256;
#ifdef TS_HAVE_SENTENCEPIECE
  tok->newline = -1;
#endif
  if (path && path[0]) {
    if (strlen(path) >= sizeof tok->path) {
      free(tok);
      return ts_fail(TS_ERUNTIME, "%.64s...: tokenizer path too long", path);
    }
    char *bytes;
    size_t n = 0;
    int rc = read_model_file(path, &bytes, &n);
    if (rc) {
      free(tok);
      return rc;
    }
    snprintf(tok->path, sizeof tok->path, "%s", path);
    tok->digest = ts_fnv1a64(TS_FNV_OFFSET, bytes, n);
#ifdef TS_HAVE_SENTENCEPIECE
    char why[512] = "";
    tok->spm = ts_spm_load(bytes, n, why, sizeof why);
    free(bytes);
    if (!tok->spm) {
      free(tok);
      return ts_fail(TS_ERUNTIME, "%s: not a SentencePiece model file (%s)", path, why);
    }
    tok->vocab = ts_spm_vocab(tok->spm);
    tok->newline = ts_spm_newline_id(tok->spm);
#else
    free(bytes);
    free(tok);
    return ts_fail(TS_ERUNTIME, "%s: this build has no SentencePiece, so it reads no tokenizer "
                   "model files (install libsentencepiece-dev and configure again)", path);
#endif
  }
  *out = tok;
  return TS_OK;
}

void ts_tokenizer_free(ts_tokenizer *tok) {
  if (!tok) return;
#ifdef TS_HAVE_SENTENCEPIECE
  ts_spm_free(tok->spm);
#endif
  free(tok);
}

int ts_tokenizer_vocab(const ts_tokenizer *tok) { return tok->vocab; }

const char *ts_tokenizer_kind(const ts_tokenizer *tok) {
  return tok->path[0] ? "sentencepiece" : "bytes";
}

const char *ts_tokenizer_path(const ts_tokenizer *tok) { return tok->path; }

uint64_t ts_tokenizer_digest(const ts_tokenizer *tok) { return tok->digest; }

#ifdef TS_HAVE_SENTENCEPIECE
// Line by line (tokenizer.h): each line's ids, then the line break's.
static int spm_encode(const ts_tokenizer *tok, const char *text, size_t len, int32_t **ids,
                      size_t *n) {
  size_t cap = 0;
  char why[512];
  *ids = NULL;
  *n = 0;
  for (size_t at = 0; at < len;) {
    const char *nl = memchr(text + at, '\n', len - at);
    const size_t end = nl ? (size_t)(nl - text) : len;
    if (ts_spm_encode(tok->spm, text + at, end - at, ids, n, &cap, why, sizeof why))
      goto fail;
    if (nl && tok->newline >= 0) {
      if (*n == cap) {
        int32_t *p = realloc(*ids, (cap ? 2 * cap : 256) * sizeof *p);
        if (!p) {
          snprintf(why, sizeof why, "out of memory");
          goto fail;
        }
        *ids = p;
        cap = cap ? 2 * cap : 256;
      }
      (*ids)[(*n)++] = tok->newline;
    }
    at = end + (nl != NULL);
  }
  if (!*ids && !(*ids = malloc(sizeof **ids))) {
    snprintf(why, sizeof why, "out of memory");
    goto fail;
  }
  return TS_OK;
fail:
  free(*ids);
  *ids = NULL;
  *n = 0;
  return ts_fail(TS_ERUNTIME, "%s: encoding failed: %s", tok->path, why);
}

static int spm_decode(const ts_tokenizer *tok, const int32_t *ids, size_t n, char **text,
                      size_t *len) {
  size_t cap = 0;
  char why[512];
  *len = 0;
  for (size_t at = 0; at <= n;) {
    size_t end = at;
    while (end < n && ids[end] != tok->newline) end++;
    if (ts_spm_decode(tok->spm, ids + at, end - at, text, len, &cap, why, sizeof why)) {
      free(*text);
      *text = NULL;
      return ts_fail(TS_ERUNTIME, "%s: decoding failed: %s", tok->path, why);
    }
    // in the room kept for the NUL, which the next segment's decode (there
    // is one: the last segment ends at n) grows past and writes
    if (end < n) (*text)[(*len)++] = '\n';
    at = end + 1;
  }
  return TS_OK;
}
#endif

int ts_tokenizer_encode(const ts_tokenizer *tok, const char *text, size_t len, int32_t **ids,
                        size_t *n) {
#ifdef TS_HAVE_SENTENCEPIECE
  if (tok->spm) return spm_encode(tok, text, len, ids, n);
#endif
  *ids = malloc((len ? len : 1) * sizeof **ids);
  if (!*ids) return ts_fail(TS_ERUNTIME, "out of memory");
  for (size_t i = 0; i < len; i++) (*ids)[i] = (unsigned char)text[i];
  *n = len;
  return TS_OK;
}

int ts_tokenizer_decode(const ts_tokenizer *tok, const int32_t *ids, size_t n, char **text,
                        size_t *len) {
  *text = NULL;
  for (size_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= tok->vocab)
      return ts_fail(TS_ERUNTIME, "token %ld is outside the %s tokenizer's %d ids", (long)ids[i],
                     ts_tokenizer_kind(tok), tok->vocab);
#ifdef TS_HAVE_SENTENCEPIECE
  if (tok->spm) return spm_decode(tok, ids, n, text, len);
#endif
  char *s = malloc(n + 1);
  if (!s) return ts_fail(TS_ERUNTIME, "out of memory");
  for (size_t i = 0; i < n; i++) s[i] = (char)ids[i];
  s[n] = 0;
  *text = s;
  *len = n;
  return TS_OK;
}
