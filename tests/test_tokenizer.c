// Tests of the tokenizers (src/text/tokenizer.c): the bytes tokenizer's round
// trip, the refusals of files that are no model, and, in a build with
// SentencePiece and spm_train on the PATH, models trained here on the
// bundled corpus: encoding line by line with the line break's id, decoding
// back to the same bytes, the digest of the model file, ids outside the
// vocabulary. Without them those tests skip (cmocka skip()).
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tessera.h"
#include "text/tokenizer.h"
#include "base/util.h"

static char tmpdir[4096];

static int make_tmpdir(void **state) {
  const char *base = getenv("TMPDIR");
  snprintf(tmpdir, sizeof tmpdir, "%s/tessera-tok-XXXXXX", base && *base ? base : "/tmp");
  return mkdtemp(tmpdir) ? 0 : -1;
}

static int remove_tmpdir(void **state) {
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  return system(cmd) == 0 ? 0 : -1;
}

static char *read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("%s: cannot open (set TESSERA_SRCDIR to the source tree)", path);
  assert_int_equal(fseek(f, 0, SEEK_END), 0);
  const long len = ftell(f);
  assert_true(len >= 0);
  rewind(f);
  char *b = malloc((size_t)len + 1);
  assert_non_null(b);
  assert_int_equal(fread(b, 1, (size_t)len, f), (size_t)len);
  fclose(f);
  b[len] = 0;
  *n = (size_t)len;
  return b;
}

static const char *corpus(void) {
  static char path[4096];
  const char *src = getenv("TESSERA_SRCDIR");
  snprintf(path, sizeof path, "%s/data/corpus.txt", src && *src ? src : ".");
  return path;
}

// ---------------------------------------------------------------------------

static void test_bytes_round_trip(void **state) {
  ts_tokenizer *tok;
  assert_int_equal(ts_tokenizer_open(NULL, &tok), TS_OK);
  assert_int_equal(ts_tokenizer_vocab(tok), 256);
  assert_string_equal(ts_tokenizer_kind(tok), "bytes");
  assert_string_equal(ts_tokenizer_path(tok), "");
  char text[256];
  for (int i = 0; i < 256; i++) text[i] = (char)(255 - i);
  int32_t *ids;
  size_t n;
  assert_int_equal(ts_tokenizer_encode(tok, text, sizeof text, &ids, &n), TS_OK);
  assert_int_equal(n, 256);
  for (int i = 0; i < 256; i++) assert_int_equal(ids[i], 255 - i);
  char *back;
  size_t len;
  assert_int_equal(ts_tokenizer_decode(tok, ids, n, &back, &len), TS_OK);
  assert_int_equal(len, sizeof text);
  assert_memory_equal(back, text, sizeof text);
  free(back);
  ids[7] = 256;
  assert_int_equal(ts_tokenizer_decode(tok, ids, n, &back, &len), TS_ERUNTIME);
  assert_non_null(strstr(ts_errmsg(), "token 256"));
  assert_null(back);
  free(ids);
  ts_tokenizer_free(tok);
  assert_int_equal(ts_tokenizer_open("", &tok), TS_OK); // "" is bytes too
  assert_string_equal(ts_tokenizer_kind(tok), "bytes");
  ts_tokenizer_free(tok);
}

// Files that are no model: each refused with one message naming the file.
static void test_not_models(void **state) {
  char missing[4200], empty[4200];
  snprintf(missing, sizeof missing, "%s/missing.model", tmpdir);
  snprintf(empty, sizeof empty, "%s/empty.model", tmpdir);
  FILE *f = fopen(empty, "wb");
  assert_non_null(f);
  fclose(f);
  const char *paths[] = {missing, corpus(), empty, tmpdir};
  for (int i = 0; i < 4; i++) {
    ts_tokenizer *tok = (ts_tokenizer *)1;
    assert_int_equal(ts_tokenizer_open(paths[i], &tok), TS_ERUNTIME);
    assert_null(tok);
    assert_non_null(strstr(ts_errmsg(), paths[i]));
  }
}

#ifdef TS_HAVE_SENTENCEPIECE
// Trains a model on the bundled corpus into tmpdir/NAME.model; 0 when
// spm_train is not there.
static int train(const char *name, int vocab, int byte_fallback, char *model, size_t cap) {
  if (system("command -v spm_train >/dev/null 2>&1") != 0) return 0;
  char cmd[16384];
  snprintf(cmd, sizeof cmd, "spm_train --input='%s' --model_prefix='%s/%s' --vocab_size=%d "
           "--character_coverage=1.0 --byte_fallback=%s --minloglevel=2 >/dev/null 2>&1",
           corpus(), tmpdir, name, vocab, byte_fallback ? "true" : "false");
  assert_int_equal(system(cmd), 0);
  snprintf(model, cap, "%s/%s.model", tmpdir, name);
  return 1;
}

// A model trained as train() does, opened: its vocabulary and kind checked.
static ts_tokenizer *open_trained(const char *name, int vocab, int byte_fallback, char *model,
                                  size_t cap) {
  if (!train(name, vocab, byte_fallback, model, cap)) return NULL;
  ts_tokenizer *tok;
  assert_int_equal(ts_tokenizer_open(model, &tok), TS_OK);
  assert_int_equal(ts_tokenizer_vocab(tok), vocab);
  assert_string_equal(ts_tokenizer_kind(tok), "sentencepiece");
  assert_string_equal(ts_tokenizer_path(tok), model);
  return tok;
}

static void test_sentencepiece(void **state) {
  char model[4200];
  ts_tokenizer *tok = open_trained("bf", 400, 1, model, sizeof model);
  if (!tok) skip();
  size_t nm;
  char *bytes = read_file(model, &nm);
  assert_true(ts_tokenizer_digest(tok) == ts_fnv1a64(TS_FNV_OFFSET, bytes, nm));
  free(bytes);

  // The corpus (its lines normalised already: ASCII, single spaces) decodes
  // back to itself, line breaks included, one newline id per line break.
  size_t len;
  char *text = read_file(corpus(), &len);
  len = 200000;
  while (text[len - 1] != '\n') len--;
  int32_t *ids;
  size_t n;
  assert_int_equal(ts_tokenizer_encode(tok, text, len, &ids, &n), TS_OK);
  assert_true(n > 1000 && n < len); // pieces longer than a byte on average
  size_t breaks = 0, nl_ids = 0;
  int32_t nl = -1;
  {
    int32_t *one;
    size_t k;
    assert_int_equal(ts_tokenizer_encode(tok, "\n", 1, &one, &k), TS_OK);
    assert_int_equal(k, 1); // an empty line, then the break
    nl = one[0];
    free(one);
  }
  for (size_t i = 0; i < len; i++) breaks += text[i] == '\n';
  for (size_t i = 0; i < n; i++) {
    assert_true(ids[i] >= 0 && ids[i] < 400);
    nl_ids += ids[i] == nl;
  }
  assert_int_equal(nl_ids, breaks);
  char *back;
  size_t blen;
  assert_int_equal(ts_tokenizer_decode(tok, ids, n, &back, &blen), TS_OK);
  assert_int_equal(blen, len);
  assert_memory_equal(back, text, len);
  assert_int_equal(back[blen], 0);
  free(back);

  // Line by line: "a\nb" is the ids of "a", the break's, the ids of "b".
  int32_t *a, *b, *ab;
  size_t na, nb, nab;
  assert_int_equal(ts_tokenizer_encode(tok, "the salt", 8, &a, &na), TS_OK);
  assert_int_equal(ts_tokenizer_encode(tok, "of Orla", 7, &b, &nb), TS_OK);
  assert_int_equal(ts_tokenizer_encode(tok, "the salt\nof Orla", 16, &ab, &nab), TS_OK);
  assert_int_equal(nab, na + 1 + nb);
  assert_memory_equal(ab, a, na * sizeof *a);
  assert_int_equal(ab[na], nl);
  assert_memory_equal(ab + na + 1, b, nb * sizeof *b);
  free(a), free(b), free(ab);

  // Nothing encodes to nothing and decodes to "".
  assert_int_equal(ts_tokenizer_encode(tok, "", 0, &a, &na), TS_OK);
  assert_int_equal(na, 0);
  assert_int_equal(ts_tokenizer_decode(tok, a, 0, &back, &blen), TS_OK);
  assert_int_equal(blen, 0);
  assert_string_equal(back, "");
  free(back), free(a);

  // Ids outside the vocabulary are refused, naming the id.
  ids[3] = 400;
  assert_int_equal(ts_tokenizer_decode(tok, ids, n, &back, &blen), TS_ERUNTIME);
  assert_non_null(strstr(ts_errmsg(), "token 400"));
  ids[3] = -1;
  assert_int_equal(ts_tokenizer_decode(tok, ids, n, &back, &blen), TS_ERUNTIME);
  assert_null(back);
  free(ids);
  free(text);
  ts_tokenizer_free(tok);
}

// Without --byte_fallback a model has no id for a line break: lines run
// together, as spm_encode's concatenated lines do.
static void test_sentencepiece_without_line_breaks(void **state) {
  char model[4200];
  ts_tokenizer *tok = open_trained("plain", 300, 0, model, sizeof model);
  if (!tok) skip();
  int32_t *a, *b, *ab;
  size_t na, nb, nab;
  assert_int_equal(ts_tokenizer_encode(tok, "the salt", 8, &a, &na), TS_OK);
  assert_int_equal(ts_tokenizer_encode(tok, "of Orla", 7, &b, &nb), TS_OK);
  assert_int_equal(ts_tokenizer_encode(tok, "the salt\nof Orla\n", 17, &ab, &nab), TS_OK);
  assert_int_equal(nab, na + nb);
  assert_memory_equal(ab, a, na * sizeof *a);
  assert_memory_equal(ab + na, b, nb * sizeof *b);
  char *back;
  size_t blen;
  assert_int_equal(ts_tokenizer_decode(tok, ab, nab, &back, &blen), TS_OK);
  assert_string_equal(back, "the salt of Orla");
  free(back), free(a), free(b), free(ab);
  ts_tokenizer_free(tok);
}
#else
static void test_sentencepiece(void **state) { skip(); }
static void test_sentencepiece_without_line_breaks(void **state) { skip(); }
#endif

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bytes_round_trip),
      cmocka_unit_test(test_not_models),
      cmocka_unit_test(test_sentencepiece),
      cmocka_unit_test(test_sentencepiece_without_line_breaks),
  };
  return cmocka_run_group_tests(tests, make_tmpdir, remove_tmpdir);
}
