// The bytes tokenizer (src/tokenizer.h). Other kinds plug in at
// ts_tokenizer_open.
#include "tokenizer.h"
#include "tessera.h"
#include <stdlib.h>
#include <string.h>

struct ts_tokenizer {
  int vocab;
};

int ts_tokenizer_open(const char *path, ts_tokenizer **out) {
  *out = NULL;
  if (path && path[0])
    return ts_fail(TS_ERUNTIME, "%s: this build reads no tokenizer model files", path);
  ts_tokenizer *tok = calloc(1, sizeof *tok);
  if (!tok) return ts_fail(TS_ERUNTIME, "out of memory");
  tok->vocab = 256;
  *out = tok;
  return TS_OK;
}

void ts_tokenizer_free(ts_tokenizer *tok) { free(tok); }

int ts_tokenizer_vocab(const ts_tokenizer *tok) { return tok->vocab; }

const char *ts_tokenizer_kind(const ts_tokenizer *tok) {
  (void)tok;
  return "bytes";
}

int ts_tokenizer_encode(const ts_tokenizer *tok, const char *text, size_t len, int32_t **ids,
                        size_t *n) {
  (void)tok;
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
  char *s = malloc(n + 1);
  if (!s) return ts_fail(TS_ERUNTIME, "out of memory");
  for (size_t i = 0; i < n; i++) s[i] = (char)ids[i];
  s[n] = 0;
  *text = s;
  *len = n;
  return TS_OK;
}
