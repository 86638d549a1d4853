// Token data (data.h): whole files in memory, checked once on open, a training
// head and a validation tail (or a validation file), and windows chosen by a
// pure function of (seed, step, index).
#ifndef _GNU_SOURCE
#define _POSIX_C_SOURCE 200809L // fileno, fstat, strdup
#endif
#include "data.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/util.h"
#include "exact/rng.h"
#include "tessera.h"

const char *const ts_data_format_names[TS_DATA_NFORMATS] = {"bytes", "u16", "u32", "llmc"};

struct ts_data {
  int format;             // never TS_DATA_DETECT
  int width;              // bytes per token: 1, 2 or 4
  char *path[2];          // the file each split comes from, for messages
  uint8_t *buf[2];        // the files: training (with the tail), validation or NULL
  const uint8_t *base[2]; // first token of each split
  size_t split[2];        // tokens in the training and the validation split
};

// Little-endian whatever the machine, so a file reads the same everywhere.
static uint32_t le16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static const char *unit(int format) { return format == TS_DATA_BYTES ? "bytes" : "tokens"; }

// Reads a whole regular file into a fresh buffer. Errors name the file.
static int read_file(const char *path, uint8_t **out, size_t *out_n) {
  *out = NULL;
  *out_n = 0;
  FILE *f;
  size_t n;
  int rc = ts_open_regular(path, &f, &n);
  if (rc) return rc;
  // One extra byte so the read below can notice a file that grew under us.
  uint8_t *buf = malloc(n + 1);
  if (!buf) {
    fclose(f);
    return ts_fail(TS_ERUNTIME, "%s: cannot allocate %zu bytes", path, n);
  }
  size_t got = fread(buf, 1, n + 1, f);
  int bad = ferror(f);
  int err = errno;
  fclose(f);
  if (bad || got != n) {
    free(buf);
    if (bad) return ts_fail(TS_ERUNTIME, "%s: read failed: %s", path, strerror(err));
    return ts_fail(TS_ERUNTIME, "%s: read %zu bytes, expected %zu (file changed while reading?)",
                   path, got, n);
  }
  *out = buf;
  *out_n = n;
  return TS_OK;
}

// ---------------------------------------------------------------------------
// Detection: only what the file itself says. llm.c's magic is unmistakable
// (its bytes 88 d8 34 01 are no text); a raw .bin carries nothing, and reading
// uint16 ids as uint32 (or as bytes) would train on garbage without a word,
// so such a file needs its format named.

static int has_bin_suffix(const char *path) {
  size_t n = strlen(path);
  return n >= 4 && strcmp(path + n - 4, ".bin") == 0;
}

static int detect_buf(const char *path, const uint8_t *head, size_t n) {
  if (n >= 4 && le32(head) == TS_LLMC_MAGIC) return TS_DATA_LLMC;
  return has_bin_suffix(path) ? TS_DATA_DETECT : TS_DATA_BYTES;
}

int ts_data_detect(const char *path, int *format) {
  *format = TS_DATA_DETECT;
  FILE *f;
  size_t n;
  int rc = ts_open_regular(path, &f, &n);
  if (rc) return rc;
  uint8_t head[4];
  size_t got = fread(head, 1, sizeof head, f);
  int bad = ferror(f);
  int err = errno;
  fclose(f);
  if (bad) return ts_fail(TS_ERUNTIME, "%s: read failed: %s", path, strerror(err));
  *format = detect_buf(path, head, got);
  return TS_OK;
}

int ts_data_looks_u32(const char *path) {
  const char *why;
  FILE *f = ts_fopen_regular(path, "rb", &why);
  if (!f) return 0; // the reader says what is wrong with it
  uint16_t w[4096];
  const size_t n = fread(w, sizeof w[0], 4096, f);
  long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
  fclose(f);
  if (n < 2 || size < 0 || size % 4 != 0) return 0;
  int low = 0;
  for (size_t i = 0; i + 1 < n; i += 2) {
    if (w[i + 1] != 0) return 0;
    low |= w[i] != 0;
  }
  return low;
}

int ts_data_resolve(const char *path, const char *val_path, int format, int *out) {
  *out = format;
  if (format != TS_DATA_DETECT) return TS_OK;
  const char *files[2] = {path, val_path && val_path[0] ? val_path : NULL};
  static const char *const flag[2] = {"--data", "--val-data"};
  int got[2] = {TS_DATA_DETECT, TS_DATA_DETECT};
  for (int i = 0; i < 2; i++) {
    if (!files[i]) continue;
    int rc = ts_data_detect(files[i], &got[i]);
    if (rc) return ts_fail_flag(rc, flag[i], files[i]);
    if (got[i] == TS_DATA_DETECT)
      return ts_fail(TS_EUSAGE,
                     "%s %s: a .bin without llm.c's header does not say whether its token ids are "
                     "uint16 or uint32: name the format with --data-format u16, u32 (or bytes)",
                     flag[i], files[i]);
  }
  if (files[0] && files[1] && got[0] != got[1])
    return ts_fail(TS_EUSAGE,
                   "--val-data %s: reads as %s but --data %s as %s; both files hold tokens of "
                   "one format (--data-format)",
                   files[1], ts_data_format_names[got[1]], files[0], ts_data_format_names[got[0]]);
  *out = files[0] ? got[0] : got[1];
  return TS_OK;
}

// Every byte is a token, so the ids of the bytes format go to 255.
int ts_data_check_vocab(int format, int vocab, const char *path) {
  if (format == TS_DATA_BYTES && vocab < 256)
    return ts_fail(TS_EUSAGE, "--vocab %d: %s is read as bytes (token ids 0..255), which needs "
                   "--vocab >= 256; a file of token ids needs its --data-format", vocab, path);
  return TS_OK;
}

// ---------------------------------------------------------------------------
// One file, read whole and checked against its format and the vocabulary.

typedef struct {
  uint8_t *buf;
  const uint8_t *tokens; // the first token: past a header, if any
  size_t n;              // tokens
} token_file;

static int width_of(int format) {
  return format == TS_DATA_U32 ? 4 : format == TS_DATA_BYTES ? 1 : 2;
}

// The llm.c header: magic, version 1 (uint16 ids), the count, which must be
// what the file holds after it (a file cut short or run on is damaged).
static int check_llmc(const char *path, const uint8_t *b, size_t n) {
  if (n < 4 || le32(b) != TS_LLMC_MAGIC)
    return ts_fail(TS_ERUNTIME, "%s: not an llm.c token file: it does not start with the magic "
                   "%d (--data-format llmc)", path, TS_LLMC_MAGIC);
  if (n < TS_LLMC_HEADER_BYTES)
    return ts_fail(TS_ERUNTIME, "%s: %zu bytes, shorter than llm.c's %d-byte header", path, n,
                   TS_LLMC_HEADER_BYTES);
  int32_t version = (int32_t)le32(b + 4), count = (int32_t)le32(b + 8);
  if (version != TS_LLMC_VERSION)
    return ts_fail(TS_ERUNTIME, "%s: llm.c header version %d; version %d (uint16 token ids) is "
                   "the one read", path, (int)version, TS_LLMC_VERSION);
  size_t body = n - TS_LLMC_HEADER_BYTES;
  if (body % 2 != 0)
    return ts_fail(TS_ERUNTIME, "%s: the %zu bytes after the llm.c header are not a whole "
                   "number of 2-byte tokens", path, body);
  if (count < 0 || (uint64_t)count != body / 2)
    return ts_fail(TS_ERUNTIME, "%s: the llm.c header says %d tokens, but the file holds %zu "
                   "after it", path, (int)count, body / 2);
  return TS_OK;
}

// The first token id >= vocab, by its byte offset in the file.
static int check_ids(const char *path, const token_file *f, int width, size_t header, int vocab) {
  const uint64_t V = (uint64_t)vocab;
  if ((width == 1 && V > 0xff) || (width == 2 && V > 0xffff)) return TS_OK; // every id fits
  for (size_t i = 0; i < f->n; i++) {
    const uint8_t *p = f->tokens + i * (size_t)width;
    uint64_t v = width == 1 ? p[0] : width == 2 ? le16(p) : le32(p);
    if (v >= V)
      return ts_fail(TS_ERUNTIME, "%s: token id %llu at byte offset %zu is out of range for "
                     "--vocab %d (ids 0..%d)", path, (unsigned long long)v,
                     header + i * (size_t)width, vocab, vocab - 1);
  }
  return TS_OK;
}

static int load(const char *path, int format, int vocab, token_file *out) {
  memset(out, 0, sizeof *out);
  uint8_t *b;
  size_t n;
  int rc = read_file(path, &b, &n);
  if (rc) return rc;
  const int width = width_of(format);
  const size_t header = format == TS_DATA_LLMC ? TS_LLMC_HEADER_BYTES : 0;
  if (n == 0) rc = ts_fail(TS_ERUNTIME, "%s: file is empty", path);
  else if (format == TS_DATA_LLMC) rc = check_llmc(path, b, n);
  else if (n % (size_t)width != 0)
    rc = ts_fail(TS_ERUNTIME, "%s: %zu bytes are not a whole number of %d-byte tokens "
                 "(--data-format %s)", path, n, width, ts_data_format_names[format]);
  if (rc) {
    free(b);
    return rc;
  }
  token_file f = {.buf = b, .tokens = b + header, .n = (n - header) / (size_t)width};
  if (f.n == 0) rc = ts_fail(TS_ERUNTIME, "%s: holds no tokens", path);
  if (!rc) rc = check_ids(path, &f, width, header, vocab);
  if (rc) {
    free(b);
    return rc;
  }
  *out = f;
  return TS_OK;
}

// ---------------------------------------------------------------------------
// The data handle.

// The validation tail is floor(n * val_frac) tokens, the product taken in
// double precision (exact for n < 2^53), so any reimplementation gets the
// same split.
static size_t val_len_of(size_t n, double val_frac) {
  return (size_t)floor((double)n * val_frac);
}

int ts_data_open_spec(const ts_data_spec *s, ts_data **out) {
  *out = NULL;
  const int has_val = s->val_path && s->val_path[0];
  if (!s->path && !has_val) return ts_fail(TS_EUSAGE, "no data file (--data)");
  // val_frac 0 means "no validation split"; 1 would leave nothing to train on.
  if (!has_val && !(s->val_frac >= 0.0 && s->val_frac < 1.0))
    return ts_fail(TS_EUSAGE, "--val-frac %g: must be in [0, 1)", s->val_frac);
  if (s->vocab < 2) return ts_fail(TS_EUSAGE, "--vocab %d: must be >= 2", s->vocab);
  if (s->format < TS_DATA_DETECT || s->format >= TS_DATA_NFORMATS)
    return ts_fail(TS_EUSAGE, "--data-format %d: unknown", s->format);
  int format;
  int rc = ts_data_resolve(s->path, has_val ? s->val_path : NULL, s->format, &format);
  if (rc) return rc;
  // before reading anything
  if ((rc = ts_data_check_vocab(format, s->vocab, s->path ? s->path : s->val_path))) return rc;
  ts_data *d = calloc(1, sizeof *d);
  if (!d)
    return ts_fail(TS_ERUNTIME, "%s: cannot allocate the data handle",
                   s->path ? s->path : s->val_path);
  d->format = format;
  d->width = width_of(format);
  token_file f[2] = {{0}};
  const char *paths[2] = {s->path, has_val ? s->val_path : NULL};
  for (int i = 0; i < 2 && !rc; i++)
    if (paths[i] && !(rc = load(paths[i], format, s->vocab, &f[i]))) {
      d->buf[i] = f[i].buf;
      d->path[i] = strdup(paths[i]);
      if (!d->path[i]) rc = ts_fail(TS_ERUNTIME, "%s: cannot allocate the data handle", paths[i]);
    }
  if (!rc && !has_val) {
    // one file: its head trains, its tail validates
    size_t n = f[0].n, nval = val_len_of(n, s->val_frac), ntrain = n - nval;
    // A split that exists must hold at least one window; an absent validation
    // split (val_frac 0) is not checked, but one that rounds down to nothing is.
    int short_val = s->val_frac > 0.0 && nval < s->min_len;
    if (ntrain < s->min_len || short_val)
      rc = ts_fail(TS_ERUNTIME,
                   "%s: too short: %zu %s split into %zu for training and %zu for "
                   "validation (--val-frac %g), each split needs at least %zu",
                   s->path, n, unit(format), ntrain, nval, s->val_frac, s->min_len);
    d->path[1] = rc ? NULL : strdup(s->path);
    if (!rc && !d->path[1])
      rc = ts_fail(TS_ERUNTIME, "%s: cannot allocate the data handle", s->path);
    d->base[0] = f[0].tokens;
    d->base[1] = f[0].tokens + ntrain * (size_t)d->width;
    d->split[0] = ntrain;
    d->split[1] = nval;
  } else if (!rc) {
    // two files: the whole of each is its split
    for (int i = 0; i < 2 && !rc; i++) {
      d->base[i] = f[i].tokens;
      d->split[i] = f[i].n;
      if (paths[i] && f[i].n < s->min_len)
        rc = ts_fail(TS_ERUNTIME, "%s: too short: %zu %s, the %s split needs at least %zu",
                     paths[i], f[i].n, unit(format), i == 0 ? "training" : "validation",
                     s->min_len);
    }
  }
  if (rc) {
    ts_data_close(d);
    return rc;
  }
  *out = d;
  return TS_OK;
}

int ts_data_open(const char *path, double val_frac, size_t min_len, ts_data **out) {
  const ts_data_spec s = {.path = path, .val_path = NULL, .format = TS_DATA_BYTES, .vocab = 256,
                          .val_frac = val_frac, .min_len = min_len};
  return ts_data_open_spec(&s, out);
}

void ts_data_close(ts_data *data) {
  if (!data) return;
  for (int i = 0; i < 2; i++) {
    free(data->buf[i]);
    free(data->path[i]);
  }
  free(data);
}

int ts_data_format_of(const ts_data *data) { return data->format; }

uint64_t ts_data_digest(const ts_data *data) {
  uint64_t h = ts_fnv1a64(TS_FNV_OFFSET, &data->format, sizeof data->format);
  for (int k = 0; k < 2; k++) {
    const uint64_t n = data->split[k];
    h = ts_fnv1a64(h, &n, sizeof n);
    if (n) h = ts_fnv1a64(h, data->base[k], (size_t)n * (size_t)data->width);
  }
  return h;
}

size_t ts_data_split_len(const ts_data *data, int split) {
  if (split != TS_SPLIT_TRAIN && split != TS_SPLIT_VAL) return 0;
  return data->split[split];
}

size_t ts_data_window_start(const ts_data *data, int split, uint64_t seed, uint64_t step,
                            uint64_t index, int T) {
  size_t len = ts_data_split_len(data, split);
  // No valid window: 0 is as good as any answer, and ts_data_window reports it.
  if (T <= 0 || len <= (size_t)T) return 0;
  // len - T choices: the last window's target is the split's last token.
  return (size_t)ts_rng_below(seed, TS_RNG_DATA, step, index, (uint64_t)(len - (size_t)T));
}

int ts_data_window(const ts_data *data, int split, uint64_t seed, uint64_t step,
                   uint64_t index, int T, int *inputs, int *targets) {
  if (split != TS_SPLIT_TRAIN && split != TS_SPLIT_VAL)
    return ts_fail(TS_EUSAGE, "%s: no split number %d",
                   data->path[0] ? data->path[0] : data->path[1], split);
  if (T <= 0) return ts_fail(TS_EUSAGE, "--seq %d: must be positive", T);
  size_t len = data->split[split];
  if (len <= (size_t)T)
    return ts_fail(TS_EUSAGE, "%s: the %s split has %zu %s, a window of --seq %d needs %zu",
                   data->path[split] ? data->path[split] : data->path[1 - split],
                   split == TS_SPLIT_TRAIN ? "training" : "validation", len, unit(data->format),
                   T, (size_t)T + 1);
  return ts_data_window_at(data, split, ts_data_window_start(data, split, seed, step, index, T),
                           T, inputs, targets);
}

int ts_data_window_at(const ts_data *data, int split, size_t start, int T, int *inputs,
                      int *targets) {
  if (split != TS_SPLIT_TRAIN && split != TS_SPLIT_VAL)
    return ts_fail(TS_EUSAGE, "%s: no split number %d",
                   data->path[0] ? data->path[0] : data->path[1], split);
  if (T <= 0) return ts_fail(TS_EUSAGE, "--seq %d: must be positive", T);
  const size_t len = data->split[split];
  if (len <= (size_t)T || start > len - (size_t)T - 1)
    return ts_fail(TS_EUSAGE, "%s: no window of --seq %d at token %zu of the %s split (%zu %s)",
                   data->path[split] ? data->path[split] : data->path[1 - split], T, start,
                   split == TS_SPLIT_TRAIN ? "training" : "validation", len, unit(data->format));
  // w is (T+1,) tokens: inputs are w[0..T), targets w[1..T]. Every id was
  // checked below the vocabulary (an int) on open.
  const uint8_t *w = data->base[split] + start * (size_t)data->width;
  switch (data->width) {
  case 1:
    for (int t = 0; t < T; t++) {
      inputs[t] = w[t];
      targets[t] = w[t + 1];
    }
    break;
  case 2:
    for (int t = 0; t < T; t++) {
      inputs[t] = (int)le16(w + 2 * (size_t)t);
      targets[t] = (int)le16(w + 2 * (size_t)t + 2);
    }
    break;
  default:
    for (int t = 0; t < T; t++) {
      inputs[t] = (int)le32(w + 4 * (size_t)t);
      targets[t] = (int)le32(w + 4 * (size_t)t + 4);
    }
  }
  return TS_OK;
}
