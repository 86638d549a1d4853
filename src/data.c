// Byte-level corpus (data.h): the whole file in memory, a training head and a
// validation tail, and windows chosen by a pure function of (seed, step, index).
#ifndef _GNU_SOURCE
#define _POSIX_C_SOURCE 200809L // fileno, fstat
#endif
#include "data.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "rng.h"
#include "tessera.h"

struct ts_data {
  char *path;       // for messages
  uint8_t *bytes;   // the whole file: split[0] + split[1] bytes
  size_t split[2];  // byte length of the training head and the validation tail
};

// Reads a whole regular file into a fresh buffer. Errors name the file.
static int read_file(const char *path, uint8_t **out, size_t *out_n) {
  *out = NULL;
  *out_n = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return ts_fail(TS_ERUNTIME, "%s: cannot open: %s", path, strerror(errno));
  // fopen succeeds on a directory on Linux; say so instead of a confusing read error.
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    fclose(f);
    return ts_fail(TS_ERUNTIME, "%s: not a regular file", path);
  }
  size_t n = (size_t)st.st_size;
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

// The validation tail is floor(n * val_frac) bytes, the product taken in double
// precision (exact for n < 2^53), so any reimplementation gets the same split.
static size_t val_len_of(size_t n, double val_frac) {
  return (size_t)floor((double)n * val_frac);
}

int ts_data_open(const char *path, double val_frac, size_t min_len, ts_data **out) {
  *out = NULL;
  // val_frac 0 means "no validation split"; 1 would leave nothing to train on.
  if (!(val_frac >= 0.0 && val_frac < 1.0))
    return ts_fail(TS_EUSAGE, "--val-frac %g: must be in [0, 1)", val_frac);
  uint8_t *bytes;
  size_t n;
  int rc = read_file(path, &bytes, &n);
  if (rc) return rc;
  if (n == 0) {
    free(bytes);
    return ts_fail(TS_ERUNTIME, "%s: file is empty", path);
  }
  size_t nval = val_len_of(n, val_frac);
  size_t ntrain = n - nval;
  // A split that exists must hold at least one window; an absent validation
  // split (val_frac 0) is not checked, but one that rounds down to nothing is.
  int short_val = val_frac > 0.0 && nval < min_len;
  if (ntrain < min_len || short_val) {
    free(bytes);
    return ts_fail(TS_ERUNTIME,
                   "%s: too short: %zu bytes split into %zu for training and %zu for "
                   "validation (--val-frac %g), each split needs at least %zu",
                   path, n, ntrain, nval, val_frac, min_len);
  }
  ts_data *d = calloc(1, sizeof *d);
  size_t path_size = strlen(path) + 1;
  char *path_copy = malloc(path_size);
  if (!d || !path_copy) {
    free(d);
    free(path_copy);
    free(bytes);
    return ts_fail(TS_ERUNTIME, "%s: cannot allocate the data handle", path);
  }
  memcpy(path_copy, path, path_size);
  d->path = path_copy;
  d->bytes = bytes;
  d->split[TS_SPLIT_TRAIN] = ntrain;
  d->split[TS_SPLIT_VAL] = nval;
  *out = d;
  return TS_OK;
}

void ts_data_close(ts_data *data) {
  if (!data) return;
  free(data->bytes);
  free(data->path);
  free(data);
}

size_t ts_data_split_len(const ts_data *data, int split) {
  if (split != TS_SPLIT_TRAIN && split != TS_SPLIT_VAL) return 0;
  return data->split[split];
}

// First byte of a split: training is the head of the file, validation the tail.
static const uint8_t *split_base(const ts_data *data, int split) {
  return split == TS_SPLIT_TRAIN ? data->bytes : data->bytes + data->split[TS_SPLIT_TRAIN];
}

size_t ts_data_window_start(const ts_data *data, int split, uint64_t seed, uint64_t step,
                            uint64_t index, int T) {
  size_t len = ts_data_split_len(data, split);
  // No valid window: 0 is as good as any answer, and ts_data_window reports it.
  if (T <= 0 || len <= (size_t)T) return 0;
  // len - T choices: the last window's target is the split's last byte.
  return (size_t)ts_rng_below(seed, TS_RNG_DATA, step, index, (uint64_t)(len - (size_t)T));
}

int ts_data_window(const ts_data *data, int split, uint64_t seed, uint64_t step,
                   uint64_t index, int T, int *inputs, int *targets) {
  if (split != TS_SPLIT_TRAIN && split != TS_SPLIT_VAL)
    return ts_fail(TS_EUSAGE, "%s: no split number %d", data->path, split);
  if (T <= 0) return ts_fail(TS_EUSAGE, "--seq %d: must be positive", T);
  size_t len = data->split[split];
  if (len <= (size_t)T)
    return ts_fail(TS_EUSAGE, "%s: the %s split has %zu bytes, a window of --seq %d needs %zu",
                   data->path, split == TS_SPLIT_TRAIN ? "training" : "validation", len, T,
                   (size_t)T + 1);
  size_t start = ts_data_window_start(data, split, seed, step, index, T);
  // w is (T+1,): inputs are w[0..T), targets w[1..T].
  const uint8_t *w = split_base(data, split) + start;
  for (int t = 0; t < T; t++) {
    inputs[t] = w[t];
    targets[t] = w[t + 1];
  }
  return TS_OK;
}
