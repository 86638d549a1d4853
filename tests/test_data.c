// Tests of the data module (src/train/data.c): window contents, windows as a pure
// function of (seed, step, index), the train/validation boundary, the errors,
// the rules the bundled data files promise, and the token-file formats (each
// read back exactly, detection, every refusal) of docs/DATA.md.
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train/data.h"
#include "exact/rng.h"
#include "tessera.h"

// ---------------------------------------------------------------------------
// Scratch files live in one mkdtemp() directory, removed at the end.

static char tmpdir[4096];
static char made[64][4200]; // files written, to remove
static int n_made;

static int make_tmpdir(void **state) {
  const char *base = getenv("TMPDIR");
  snprintf(tmpdir, sizeof tmpdir, "%s/tessera-data-XXXXXX", base && *base ? base : "/tmp");
  return mkdtemp(tmpdir) ? 0 : -1;
}

static int remove_tmpdir(void **state) {
  for (int i = 0; i < n_made; i++) remove(made[i]);
  return rmdir(tmpdir);
}

// Writes n bytes to a new file in the scratch directory; returns its path.
static const char *write_tmp(const char *name, const uint8_t *bytes, size_t n) {
  assert_true(n_made < 64);
  char *path = made[n_made++];
  snprintf(path, sizeof made[0], "%s/%s", tmpdir, name);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(bytes, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
  return path;
}

// Bytes from a fixed generator, so every value 0..255 occurs (255 must read as 255).
static uint8_t *random_bytes(size_t n, uint64_t seed) {
  uint8_t *b = malloc(n);
  assert_non_null(b);
  for (size_t i = 0; i < n; i++) b[i] = (uint8_t)(ts_rng_u32(seed, 99, 0, i) >> 24);
  return b;
}

// Reads a whole file from the source tree (for the bundled data).
static uint8_t *read_srcfile(const char *rel, size_t *n) {
  const char *src = getenv("TESSERA_SRCDIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", src && *src ? src : ".", rel);
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("%s: cannot open (set TESSERA_SRCDIR to the source tree)", path);
  assert_int_equal(fseek(f, 0, SEEK_END), 0);
  long len = ftell(f);
  assert_true(len > 0);
  rewind(f);
  uint8_t *b = malloc((size_t)len);
  assert_non_null(b);
  assert_int_equal(fread(b, 1, (size_t)len, f), (size_t)len);
  fclose(f);
  *n = (size_t)len;
  return b;
}

static const char *srcpath(const char *rel) {
  static char path[4096];
  const char *src = getenv("TESSERA_SRCDIR");
  snprintf(path, sizeof path, "%s/%s", src && *src ? src : ".", rel);
  return path;
}

// ---------------------------------------------------------------------------
// Window contents.

static void test_window_is_file_bytes(void **state) {
  const size_t n = 20000;
  const int T = 64;
  uint8_t *bytes = random_bytes(n, 1);
  const char *path = write_tmp("random.bin", bytes, n);
  ts_data *d;
  assert_int_equal(ts_data_open(path, 0.25, (size_t)T + 1, &d), TS_OK);
  size_t nval = ts_data_split_len(d, TS_SPLIT_VAL);
  size_t ntrain = ts_data_split_len(d, TS_SPLIT_TRAIN);
  assert_int_equal(nval, 5000); // floor(20000 * 0.25)
  assert_int_equal(ntrain + nval, n);
  int in[64], tg[64];
  for (int split = 0; split < 2; split++) {
    size_t len = split == TS_SPLIT_TRAIN ? ntrain : nval;
    const uint8_t *base = split == TS_SPLIT_TRAIN ? bytes : bytes + ntrain;
    for (uint64_t step = 1; step <= 20; step++) {
      for (uint64_t j = 0; j < 8; j++) {
        size_t start = ts_data_window_start(d, split, 42, step, j, T);
        // The documented rule, spelled out.
        assert_int_equal(start, ts_rng_below(42, TS_RNG_DATA, step, j, len - (size_t)T));
        assert_int_equal(ts_data_window(d, split, 42, step, j, T, in, tg), TS_OK);
        for (int t = 0; t < T; t++) {
          assert_int_equal(in[t], base[start + t]);
          assert_int_equal(tg[t], base[start + t + 1]);
        }
      }
    }
  }
  ts_data_close(d);
  free(bytes);
}

// A window at a given start (eval --whole-split's k·T) is the file's tokens
// from there; every start from 0 to the last one that leaves T+1 tokens
// reads, the next is refused, as is any start on a split too short.
static void test_window_at(void **state) {
  const size_t n = 4000;
  const int T = 64;
  uint8_t *bytes = random_bytes(n, 3);
  const char *path = write_tmp("at.bin", bytes, n);
  ts_data *d;
  assert_int_equal(ts_data_open(path, 0.25, (size_t)T + 1, &d), TS_OK);
  const size_t ntrain = ts_data_split_len(d, TS_SPLIT_TRAIN), nval = ts_data_split_len(d, TS_SPLIT_VAL);
  int in[64], tg[64];
  for (size_t start = 0; start + (size_t)T < nval; start++) {
    assert_int_equal(ts_data_window_at(d, TS_SPLIT_VAL, start, T, in, tg), TS_OK);
    for (int t = 0; t < T; t++) {
      assert_int_equal(in[t], bytes[ntrain + start + t]);
      assert_int_equal(tg[t], bytes[ntrain + start + t + 1]);
    }
  }
  assert_int_equal(ts_data_window_at(d, TS_SPLIT_VAL, nval - (size_t)T, T, in, tg), TS_EUSAGE);
  assert_int_equal(ts_data_window_at(d, TS_SPLIT_VAL, SIZE_MAX, T, in, tg), TS_EUSAGE);
  assert_int_equal(ts_data_window_at(d, TS_SPLIT_VAL, 0, (int)nval, in, tg), TS_EUSAGE);
  assert_int_equal(ts_data_window_at(d, 2, 0, T, in, tg), TS_EUSAGE);
  // the drawn window is the window at its drawn start
  int in2[64], tg2[64];
  assert_int_equal(ts_data_window(d, TS_SPLIT_TRAIN, 9, 3, 1, T, in, tg), TS_OK);
  assert_int_equal(ts_data_window_at(d, TS_SPLIT_TRAIN,
                                     ts_data_window_start(d, TS_SPLIT_TRAIN, 9, 3, 1, T), T, in2, tg2),
                   TS_OK);
  assert_memory_equal(in, in2, sizeof in);
  assert_memory_equal(tg, tg2, sizeof tg);
  ts_data_close(d);
  free(bytes);
}

// Bytes are tokens 0..255: a file of 0,1,..,255,0,1,.. reads back unsigned.
static void test_tokens_are_unsigned_bytes(void **state) {
  uint8_t bytes[1024];
  for (int i = 0; i < 1024; i++) bytes[i] = (uint8_t)i;
  const char *path = write_tmp("ramp.bin", bytes, sizeof bytes);
  ts_data *d;
  assert_int_equal(ts_data_open(path, 0.0, 301, &d), TS_OK);
  int in[300], tg[300];
  int saw255 = 0;
  for (uint64_t j = 0; j < 16; j++) {
    assert_int_equal(ts_data_window(d, TS_SPLIT_TRAIN, 5, 1, j, 300, in, tg), TS_OK);
    size_t start = ts_data_window_start(d, TS_SPLIT_TRAIN, 5, 1, j, 300);
    for (int t = 0; t < 300; t++) {
      assert_int_equal(in[t], (int)((start + (size_t)t) % 256));
      assert_int_equal(tg[t], (int)((start + (size_t)t + 1) % 256));
      saw255 |= in[t] == 255;
    }
  }
  assert_true(saw255); // a window of 300 always covers one 255
  ts_data_close(d);
}

// ---------------------------------------------------------------------------
// Windows are a pure function of (seed, step, index).

enum { PT = 32, PSTEPS = 12, PSEQ = 6 };

static void read_all(const ts_data *d, int reverse, int (*out)[2][PT]) {
  for (int k = 0; k < PSTEPS * PSEQ; k++) {
    int kk = reverse ? PSTEPS * PSEQ - 1 - k : k;
    uint64_t step = 1 + (uint64_t)(kk / PSEQ), j = (uint64_t)(kk % PSEQ);
    assert_int_equal(ts_data_window(d, TS_SPLIT_TRAIN, 7, step, j, PT, out[kk][0], out[kk][1]),
                     TS_OK);
  }
}

static void test_windows_are_pure(void **state) {
  const size_t n = 50000;
  uint8_t *bytes = random_bytes(n, 2);
  const char *path = write_tmp("pure.bin", bytes, n);
  ts_data *a, *b;
  assert_int_equal(ts_data_open(path, 0.1, PT + 1, &a), TS_OK);
  assert_int_equal(ts_data_open(path, 0.1, PT + 1, &b), TS_OK);
  static int w1[PSTEPS * PSEQ][2][PT], w2[PSTEPS * PSEQ][2][PT], w3[PSTEPS * PSEQ][2][PT];
  read_all(a, 0, w1);
  read_all(a, 1, w2); // the other order, same handle
  read_all(b, 1, w3); // a second handle on the same file
  assert_memory_equal(w1, w2, sizeof w1);
  assert_memory_equal(w1, w3, sizeof w1);
  // Reading validation windows in between changes nothing either.
  int in[PT], tg[PT];
  assert_int_equal(ts_data_window(a, TS_SPLIT_VAL, 7, 0, 3, PT, in, tg), TS_OK);
  read_all(a, 0, w2);
  assert_memory_equal(w1, w2, sizeof w1);
  ts_data_close(a);
  ts_data_close(b);
  free(bytes);
}

// ---------------------------------------------------------------------------
// Different (seed, step, index) give different, evenly spread starts.

static int cmp_size(const void *x, const void *y) {
  size_t a = *(const size_t *)x, b = *(const size_t *)y;
  return (a > b) - (a < b);
}

static void test_starts_spread(void **state) {
  const size_t n = 200064;
  const int T = 64; // len - T = 200000 possible starts
  uint8_t *bytes = random_bytes(n, 3);
  const char *path = write_tmp("spread.bin", bytes, n);
  ts_data *d;
  assert_int_equal(ts_data_open(path, 0.0, (size_t)T + 1, &d), TS_OK);
  enum { S = 64, J = 64, N = S * J };
  static size_t starts[N];
  size_t same_seed = 0, swapped = 0;
  size_t bins[16] = {0};
  for (int s = 0; s < S; s++)
    for (int j = 0; j < J; j++) {
      size_t st = ts_data_window_start(d, TS_SPLIT_TRAIN, 11, (uint64_t)s + 1, (uint64_t)j, T);
      starts[s * J + j] = st;
      bins[st * 16 / 200000]++;
      same_seed += st == ts_data_window_start(d, TS_SPLIT_TRAIN, 12, (uint64_t)s + 1,
                                              (uint64_t)j, T);
      if (s != j)
        swapped += st == ts_data_window_start(d, TS_SPLIT_TRAIN, 11, (uint64_t)j + 1,
                                              (uint64_t)s, T);
    }
  // 4096 draws from 200000 starts: ~42 equal pairs expected; far more means the
  // step or the index is being ignored somewhere.
  qsort(starts, N, sizeof starts[0], cmp_size);
  size_t dup = 0;
  for (int i = 1; i < N; i++) dup += starts[i] == starts[i - 1];
  assert_true(dup < 100);
  // Another seed or swapping step and index: a match has chance 1/200000.
  assert_true(same_seed < 5);
  assert_true(swapped < 5);
  // Even spread: 256 per sixteenth expected, sd 16; allow 6 sd.
  for (int b = 0; b < 16; b++) {
    if (bins[b] < 160 || bins[b] > 352) fail_msg("sixteenth %d holds %zu starts", b, bins[b]);
  }
  ts_data_close(d);
  free(bytes);
}

// ---------------------------------------------------------------------------
// The boundary: training bytes are < 128, validation bytes >= 128, so a
// window that crosses would show it.

static void check_boundary(size_t ntrain, size_t nval, int T, int draws) {
  size_t n = ntrain + nval;
  uint8_t *bytes = malloc(n);
  assert_non_null(bytes);
  for (size_t i = 0; i < n; i++) bytes[i] = (uint8_t)(i < ntrain ? i % 128 : 128 + i % 128);
  char name[64];
  snprintf(name, sizeof name, "boundary-%zu-%zu.bin", ntrain, nval);
  const char *path = write_tmp(name, bytes, n);
  double frac = ((double)nval + 0.5) / (double)n; // floor(n * frac) = nval, robustly
  ts_data *d;
  assert_int_equal(ts_data_open(path, frac, (size_t)T + 1, &d), TS_OK);
  assert_int_equal(ts_data_split_len(d, TS_SPLIT_VAL), nval);
  int *in = malloc(sizeof(int) * (size_t)T), *tg = malloc(sizeof(int) * (size_t)T);
  assert_true(in && tg);
  for (int split = 0; split < 2; split++) {
    size_t len = split == TS_SPLIT_TRAIN ? ntrain : nval;
    int saw_last = 0;
    for (int k = 0; k < draws; k++) {
      uint64_t step = (uint64_t)(k / 8), j = (uint64_t)(k % 8);
      assert_int_equal(ts_data_window(d, split, 3, step, j, T, in, tg), TS_OK);
      for (int t = 0; t < T; t++) {
        if ((in[t] >= 128) != (split == TS_SPLIT_VAL) || (tg[t] >= 128) != (split == TS_SPLIT_VAL))
          fail_msg("split %d window (%d) crosses the boundary at t=%d", split, k, t);
      }
      // The last possible window ends exactly on the split's last byte.
      if (ts_data_window_start(d, split, 3, step, j, T) == len - (size_t)T - 1) {
        saw_last = 1;
        size_t last = split == TS_SPLIT_TRAIN ? ntrain - 1 : n - 1;
        assert_int_equal(tg[T - 1], bytes[last]);
      }
    }
    if (len - (size_t)T <= 8) assert_true(saw_last); // few starts: every one is drawn
  }
  free(in);
  free(tg);
  ts_data_close(d);
  free(bytes);
}

static void test_splits_never_cross(void **state) {
  check_boundary(4096 + 3, 4096 + 5, 4096, 400); // 3 and 5 possible starts
  check_boundary(700, 300, 64, 4000);            // val_frac 0.3
  check_boundary(5000, 1000, 257, 4000);
}

// val_len = floor(n * val_frac) in double precision, also for a float flag.
static void test_split_rounding(void **state) {
  uint8_t bytes[1000];
  memset(bytes, 'x', sizeof bytes);
  const char *path = write_tmp("round.bin", bytes, sizeof bytes);
  const double fracs[] = {0.1, 0.3, 0.7f, 0.05, 0.999};
  for (size_t i = 0; i < sizeof fracs / sizeof fracs[0]; i++) {
    ts_data *d;
    assert_int_equal(ts_data_open(path, fracs[i], 1, &d), TS_OK);
    assert_int_equal(ts_data_split_len(d, TS_SPLIT_VAL), (size_t)floor(1000.0 * fracs[i]));
    assert_int_equal(ts_data_split_len(d, TS_SPLIT_TRAIN),
                     1000 - (size_t)floor(1000.0 * fracs[i]));
    ts_data_close(d);
  }
}

// ---------------------------------------------------------------------------
// Errors.

static void test_missing_file(void **state) {
  char path[4200];
  snprintf(path, sizeof path, "%s/no-such-file.txt", tmpdir);
  ts_data *d = (ts_data *)1;
  assert_int_equal(ts_data_open(path, 0.1, 65, &d), TS_ERUNTIME);
  assert_null(d);
  assert_non_null(strstr(ts_errmsg(), path));
  // A directory is not a corpus either.
  assert_int_equal(ts_data_open(tmpdir, 0.1, 65, &d), TS_ERUNTIME);
  assert_non_null(strstr(ts_errmsg(), tmpdir));
}

static void test_empty_file(void **state) {
  const char *path = write_tmp("empty.txt", (const uint8_t *)"", 0);
  ts_data *d;
  assert_int_equal(ts_data_open(path, 0.1, 65, &d), TS_ERUNTIME);
  assert_non_null(strstr(ts_errmsg(), path));
  assert_non_null(strstr(ts_errmsg(), "empty"));
  assert_int_equal(ts_data_open(path, 0.0, 0, &d), TS_ERUNTIME); // even when nothing is needed
}

static void test_too_short(void **state) {
  uint8_t bytes[1000];
  memset(bytes, 'y', sizeof bytes);
  const char *path = write_tmp("short.txt", bytes, sizeof bytes);
  ts_data *d;
  // Training 900 bytes, validation 100: a window of T = 256 needs 257 in each.
  assert_int_equal(ts_data_open(path, 0.1, 257, &d), TS_ERUNTIME);
  const char *msg = ts_errmsg();
  assert_non_null(strstr(msg, path));
  assert_non_null(strstr(msg, "900"));
  assert_non_null(strstr(msg, "100"));
  assert_non_null(strstr(msg, "257"));
  // Training too short on its own.
  assert_int_equal(ts_data_open(path, 0.0, 1001, &d), TS_ERUNTIME);
  assert_non_null(strstr(ts_errmsg(), "1001"));
  // Exactly long enough is fine: 1000 bytes hold one window of T = 999.
  assert_int_equal(ts_data_open(path, 0.0, 1000, &d), TS_OK);
  int in[999], tg[999];
  assert_int_equal(ts_data_window(d, TS_SPLIT_TRAIN, 1, 1, 0, 999, in, tg), TS_OK);
  assert_int_equal(ts_data_window_start(d, TS_SPLIT_TRAIN, 1, 1, 0, 999), 0);
  // A window longer than the split is refused at window time too (callers
  // that pass a smaller min_len than T+1).
  static int big_in[1000], big_tg[1000];
  assert_int_equal(ts_data_window(d, TS_SPLIT_TRAIN, 1, 1, 0, 1000, big_in, big_tg), TS_EUSAGE);
  assert_non_null(strstr(ts_errmsg(), "1001"));
  assert_int_equal(ts_data_window(d, TS_SPLIT_TRAIN, 1, 1, 0, 0, in, tg), TS_EUSAGE);
  assert_int_equal(ts_data_window(d, 2, 1, 1, 0, 10, in, tg), TS_EUSAGE);
  ts_data_close(d);
}

// val_frac 0 means no validation split: allowed, and validation windows are
// refused. A positive fraction must give a usable split.
static void test_val_frac(void **state) {
  uint8_t bytes[2000];
  memset(bytes, 'z', sizeof bytes);
  const char *path = write_tmp("valfrac.txt", bytes, sizeof bytes);
  ts_data *d;
  assert_int_equal(ts_data_open(path, 0.0, 65, &d), TS_OK);
  assert_int_equal(ts_data_split_len(d, TS_SPLIT_TRAIN), 2000);
  assert_int_equal(ts_data_split_len(d, TS_SPLIT_VAL), 0);
  int in[64], tg[64];
  assert_int_equal(ts_data_window(d, TS_SPLIT_VAL, 1, 0, 0, 64, in, tg), TS_EUSAGE);
  assert_non_null(strstr(ts_errmsg(), "validation"));
  ts_data_close(d);
  // 2000 * 0.0001 rounds down to nothing: an error, not a silent empty split.
  assert_int_equal(ts_data_open(path, 0.0001, 65, &d), TS_ERUNTIME);
  const double bad[] = {-0.1, 1.0, 1.5, NAN};
  for (size_t i = 0; i < 4; i++) {
    d = (ts_data *)1;
    assert_int_equal(ts_data_open(path, bad[i], 65, &d), TS_EUSAGE);
    assert_null(d);
    assert_non_null(strstr(ts_errmsg(), "--val-frac"));
  }
}

// ---------------------------------------------------------------------------
// The bundled data (docs/DATA.md).

static void test_bundled_corpus(void **state) {
  ts_data *d;
  int rc = ts_data_open(srcpath("data/corpus.txt"), 0.1, 1025, &d);
  if (rc) fail_msg("%s", ts_errmsg());
  size_t n = ts_data_split_len(d, TS_SPLIT_TRAIN) + ts_data_split_len(d, TS_SPLIT_VAL);
  assert_true(n >= 1500000 && n <= 2000000);
  int in[1024], tg[1024];
  for (uint64_t j = 0; j < 64; j++) {
    assert_int_equal(ts_data_window(d, TS_SPLIT_TRAIN, 1, 1, j, 1024, in, tg), TS_OK);
    for (int t = 0; t < 1024; t++) assert_true(in[t] == '\n' || (in[t] >= 32 && in[t] < 127));
  }
  ts_data_close(d);
}

// recall-T256.txt: lines "KEY=VVVV" (two) then "?KEY=VVVV". Every query whose
// look-back starts inside the file is answered by the latest definition of its
// key, 128..256 bytes before its last answer digit; a key is defined at most
// once in any 512 bytes; no definition is asked for twice.
static void test_bundled_recall(void **state) {
  enum { T = 256 };
  size_t n;
  uint8_t *b = read_srcfile("data/recall-T256.txt", &n);
  assert_true(n <= 2000000 && b[n - 1] == '\n');
  typedef struct { size_t pos; char key[8]; int value; int asked; } def;
  size_t cap = n / 8 + 1, ndef = 0, nquery = 0, checked = 0;
  def *defs = calloc(cap, sizeof *defs);
  assert_non_null(defs);
  int line = 0;
  for (size_t p = 0; p < n; line++) {
    size_t e = p;
    while (e < n && b[e] != '\n') e++;
    int query = b[p] == '?';
    assert_int_equal(query, line % 3 == 2); // the rhythm never changes
    size_t k = p + (size_t)query, eq = k;
    while (eq < e && b[eq] >= 'A' && b[eq] <= 'Z') eq++;
    assert_true(eq - k >= 2 && eq - k <= 7 && b[eq] == '=' && e - eq == 5);
    int value = 0;
    for (size_t i = eq + 1; i < e; i++) {
      assert_true(b[i] >= '0' && b[i] <= '9');
      value = value * 10 + (b[i] - '0');
    }
    char key[8] = {0};
    memcpy(key, b + k, eq - k);
    if (!query) {
      // No earlier definition of this key within 2T bytes.
      for (size_t i = ndef; i-- > 0 && p - defs[i].pos <= 2 * T;)
        assert_string_not_equal(defs[i].key, key);
      defs[ndef].pos = p;
      memcpy(defs[ndef].key, key, sizeof key);
      defs[ndef].value = value;
      ndef++;
    } else {
      nquery++;
      size_t last = e - 1; // the last answer digit
      size_t i = ndef;
      while (i-- > 0 && strcmp(defs[i].key, key) != 0) {
      }
      if (i == (size_t)-1 || last - defs[i].pos > T) {
        // Its definition precedes the file: only possible at the very start.
        assert_true(last <= T);
      } else {
        assert_int_equal(defs[i].value, value);
        assert_true(last - defs[i].pos >= T / 2);
        assert_false(defs[i].asked);
        defs[i].asked = 1;
        checked++;
      }
    }
    p = e + 1;
  }
  assert_true(checked > nquery - 20 && checked > 30000);
  free(defs);
  free(b);
}

// ---------------------------------------------------------------------------
// Token files (docs/DATA.md "Token files"). Their bytes are built here one by
// one, little-endian, never copied from this machine's memory layout.

static void put_le(uint8_t *p, uint64_t v, int width) {
  for (int k = 0; k < width; k++) p[k] = (uint8_t)(v >> (8 * k));
}

// n ids below vocab from a fixed generator, with the largest id vocab-1 and 0
// among them (the extremes must read back as themselves).
static uint32_t *random_ids(size_t n, uint64_t vocab, uint64_t seed) {
  uint32_t *ids = malloc(n * sizeof *ids);
  assert_non_null(ids);
  for (size_t i = 0; i < n; i++) {
    uint64_t r = (uint64_t)ts_rng_u32(seed, 98, 0, i) << 32 | ts_rng_u32(seed, 98, 1, i);
    ids[i] = (uint32_t)(r % vocab);
  }
  ids[n / 3] = (uint32_t)(vocab - 1);
  ids[n / 2] = 0;
  return ids;
}

// A raw file of ids, `width` bytes each, after `header` bytes (llm.c's header
// when header is 1024, with the given version and count; else none).
static const char *write_ids(const char *name, const uint32_t *ids, size_t n, int width,
                             size_t header, int32_t version, int32_t count) {
  size_t len = header + n * (size_t)width;
  uint8_t *b = calloc(len ? len : 1, 1);
  assert_non_null(b);
  if (header >= 12) {
    put_le(b, (uint32_t)TS_LLMC_MAGIC, 4);
    put_le(b + 4, (uint32_t)version, 4);
    put_le(b + 8, (uint32_t)count, 4);
  }
  for (size_t i = 0; i < n; i++) put_le(b + header + i * (size_t)width, ids[i], width);
  const char *path = write_tmp(name, b, len);
  free(b);
  return path;
}

static int open_fmt(const char *path, const char *val_path, int format, int vocab,
                    double val_frac, size_t min_len, ts_data **d) {
  const ts_data_spec s = {.path = path, .val_path = val_path, .format = format, .vocab = vocab,
                          .val_frac = val_frac, .min_len = min_len};
  return ts_data_open_spec(&s, d);
}

// Every window of both splits is the ids at the documented start, in tokens.
static void check_windows(const ts_data *d, const uint32_t *ids, size_t n, double val_frac,
                          int T) {
  size_t nval = (size_t)floor((double)n * val_frac), ntrain = n - nval;
  assert_int_equal(ts_data_split_len(d, TS_SPLIT_TRAIN), ntrain);
  assert_int_equal(ts_data_split_len(d, TS_SPLIT_VAL), nval);
  int *in = malloc(sizeof(int) * (size_t)T), *tg = malloc(sizeof(int) * (size_t)T);
  assert_true(in && tg);
  for (int split = 0; split < 2; split++) {
    size_t len = split == TS_SPLIT_TRAIN ? ntrain : nval;
    const uint32_t *base = split == TS_SPLIT_TRAIN ? ids : ids + ntrain;
    for (uint64_t step = 1; step <= 12; step++)
      for (uint64_t j = 0; j < 6; j++) {
        size_t start = ts_data_window_start(d, split, 42, step, j, T);
        assert_int_equal(start, ts_rng_below(42, TS_RNG_DATA, step, j, len - (size_t)T));
        assert_int_equal(ts_data_window(d, split, 42, step, j, T, in, tg), TS_OK);
        for (int t = 0; t < T; t++) {
          assert_int_equal((uint32_t)in[t], base[start + (size_t)t]);
          assert_int_equal((uint32_t)tg[t], base[start + (size_t)t + 1]);
        }
      }
  }
  free(in);
  free(tg);
}

static void test_u16_reads_back(void **state) {
  const size_t n = 9000;
  uint32_t *ids = random_ids(n, 65536, 4); // 65535 included
  const char *path = write_ids("ids16.bin", ids, n, 2, 0, 0, 0);
  ts_data *d;
  if (open_fmt(path, NULL, TS_DATA_U16, 65536, 0.25, 65, &d)) fail_msg("%s", ts_errmsg());
  assert_int_equal(ts_data_format_of(d), TS_DATA_U16);
  check_windows(d, ids, n, 0.25, 64);
  ts_data_close(d);
  // a vocabulary below 65536 is fine when every id is below it
  uint32_t *small = random_ids(n, 300, 5);
  path = write_ids("ids16-300.bin", small, n, 2, 0, 0, 0);
  if (open_fmt(path, NULL, TS_DATA_U16, 300, 0.1, 65, &d)) fail_msg("%s", ts_errmsg());
  check_windows(d, small, n, 0.1, 64);
  ts_data_close(d);
  free(small);
  free(ids);
}

static void test_u32_reads_back(void **state) {
  const size_t n = 7000;
  uint32_t *ids = random_ids(n, 2147483647u, 6); // up to INT_MAX - 1
  ids[10] = 70000;                               // above any uint16
  const char *path = write_ids("ids32.bin", ids, n, 4, 0, 0, 0);
  ts_data *d;
  if (open_fmt(path, NULL, TS_DATA_U32, 2147483647, 0.2, 33, &d)) fail_msg("%s", ts_errmsg());
  assert_int_equal(ts_data_format_of(d), TS_DATA_U32);
  check_windows(d, ids, n, 0.2, 32);
  ts_data_close(d);
  free(ids);
}

// The largest id of each format reads back as itself: 66 tokens hold 2
// windows of 64, both over positions 1..63.
static void test_extreme_ids(void **state) {
  static const struct { int format, width; uint32_t max; } f[] = {
      {TS_DATA_U16, 2, 65535}, {TS_DATA_U32, 4, 2147483646u}, {TS_DATA_LLMC, 2, 65535}};
  for (int k = 0; k < 3; k++) {
    uint32_t ids[66];
    for (int i = 0; i < 66; i++) ids[i] = (uint32_t)(i * 1000 + 1);
    ids[30] = f[k].max;
    ids[31] = 0;
    char name[32];
    snprintf(name, sizeof name, "extreme-%d.bin", k);
    const char *path = write_ids(name, ids, 66, f[k].width,
                                 f[k].format == TS_DATA_LLMC ? TS_LLMC_HEADER_BYTES : 0, 1, 66);
    ts_data *d;
    if (open_fmt(path, NULL, f[k].format, (int)f[k].max + 1, 0.0, 65, &d))
      fail_msg("%s", ts_errmsg());
    int in[64], tg[64];
    for (uint64_t j = 0; j < 8; j++) {
      assert_int_equal(ts_data_window(d, TS_SPLIT_TRAIN, 1, 1, j, 64, in, tg), TS_OK);
      size_t s = ts_data_window_start(d, TS_SPLIT_TRAIN, 1, 1, j, 64);
      assert_true(s <= 1);
      assert_int_equal((uint32_t)in[30 - s], f[k].max);
      assert_int_equal(in[31 - s], 0);
      assert_int_equal((uint32_t)tg[29 - s], f[k].max);
    }
    ts_data_close(d);
  }
}

// llm.c's file: the header is skipped and the ids after it are the tokens; the
// same ids as a raw uint16 file give the same windows.
static void test_llmc_reads_back(void **state) {
  const size_t n = 8000;
  uint32_t *ids = random_ids(n, 50257, 7);
  const char *path = write_ids("llmc.bin", ids, n, 2, TS_LLMC_HEADER_BYTES, 1, (int32_t)n);
  const char *raw = write_ids("llmc-raw.bin", ids, n, 2, 0, 0, 0);
  ts_data *d, *r;
  // detected from the header, like the explicit format
  if (open_fmt(path, NULL, TS_DATA_DETECT, 50257, 0.1, 129, &d)) fail_msg("%s", ts_errmsg());
  assert_int_equal(ts_data_format_of(d), TS_DATA_LLMC);
  check_windows(d, ids, n, 0.1, 128);
  ts_data_close(d);
  if (open_fmt(path, NULL, TS_DATA_LLMC, 50257, 0.1, 129, &d)) fail_msg("%s", ts_errmsg());
  if (open_fmt(raw, NULL, TS_DATA_U16, 50257, 0.1, 129, &r)) fail_msg("%s", ts_errmsg());
  static int a[2][128], b[2][128];
  for (uint64_t j = 0; j < 16; j++) {
    assert_int_equal(ts_data_window(d, TS_SPLIT_TRAIN, 9, 3, j, 128, a[0], a[1]), TS_OK);
    assert_int_equal(ts_data_window(r, TS_SPLIT_TRAIN, 9, 3, j, 128, b[0], b[1]), TS_OK);
    assert_memory_equal(a, b, sizeof a);
  }
  ts_data_close(d);
  ts_data_close(r);
  free(ids);
}

// Text read through the detecting open is the byte reader, bit for bit.
static void test_detected_bytes_are_bytes(void **state) {
  const size_t n = 12000;
  uint8_t *bytes = random_bytes(n, 8);
  const char *path = write_tmp("text.txt", bytes, n);
  ts_data *a, *b;
  assert_int_equal(ts_data_open(path, 0.1, 65, &a), TS_OK);
  if (open_fmt(path, NULL, TS_DATA_DETECT, 256, 0.1, 65, &b)) fail_msg("%s", ts_errmsg());
  assert_int_equal(ts_data_format_of(b), TS_DATA_BYTES);
  int w1[2][64], w2[2][64];
  for (int split = 0; split < 2; split++)
    for (uint64_t j = 0; j < 32; j++) {
      assert_int_equal(ts_data_window(a, split, 3, j + 1, j, 64, w1[0], w1[1]), TS_OK);
      assert_int_equal(ts_data_window(b, split, 3, j + 1, j, 64, w2[0], w2[1]), TS_OK);
      assert_memory_equal(w1, w2, sizeof w1);
    }
  ts_data_close(a);
  ts_data_close(b);
  // a larger vocabulary reads the same bytes
  assert_int_equal(open_fmt(path, NULL, TS_DATA_BYTES, 1000, 0.1, 65, &b), TS_OK);
  ts_data_close(b);
  free(bytes);
}

static void expect_msg(const char *want) {
  if (!strstr(ts_errmsg(), want)) fail_msg("want \"%s\" in \"%s\"", want, ts_errmsg());
}

// Only what the file says: llm.c's magic (any name), else a .bin is
// ambiguous, else bytes.
static void test_detection(void **state) {
  uint32_t ids[100];
  for (int i = 0; i < 100; i++) ids[i] = (uint32_t)i;
  const char *llmc = write_ids("det-llmc.bin", ids, 100, 2, TS_LLMC_HEADER_BYTES, 1, 100);
  const char *llmc_txt = write_ids("det-llmc.dat", ids, 100, 2, TS_LLMC_HEADER_BYTES, 1, 100);
  const char *raw = write_ids("det-raw.bin", ids, 100, 2, 0, 0, 0);
  const char *tiny = write_tmp("det-tiny.bin", (const uint8_t *)"ab", 2);
  const char *text = write_tmp("det-text.txt", (const uint8_t *)"hello", 5);
  int f;
  assert_int_equal(ts_data_detect(llmc, &f), TS_OK);
  assert_int_equal(f, TS_DATA_LLMC);
  assert_int_equal(ts_data_detect(llmc_txt, &f), TS_OK);
  assert_int_equal(f, TS_DATA_LLMC);
  assert_int_equal(ts_data_detect(raw, &f), TS_OK);
  assert_int_equal(f, TS_DATA_DETECT);
  assert_int_equal(ts_data_detect(tiny, &f), TS_OK);
  assert_int_equal(f, TS_DATA_DETECT);
  assert_int_equal(ts_data_detect(text, &f), TS_OK);
  assert_int_equal(f, TS_DATA_BYTES);
  char missing[4200];
  snprintf(missing, sizeof missing, "%s/no-such.bin", tmpdir);
  assert_int_equal(ts_data_detect(missing, &f), TS_ERUNTIME);
  expect_msg(missing);
  // a .bin that does not say is refused, asking for the flag
  ts_data *d = (ts_data *)1;
  assert_int_equal(open_fmt(raw, NULL, TS_DATA_DETECT, 300, 0.1, 9, &d), TS_EUSAGE);
  assert_null(d);
  expect_msg(raw);
  expect_msg("--data-format");
  assert_int_equal(ts_data_resolve(text, raw, TS_DATA_DETECT, &f), TS_EUSAGE);
  expect_msg("--val-data");
  // named, it reads
  assert_int_equal(open_fmt(raw, NULL, TS_DATA_U16, 300, 0.1, 9, &d), TS_OK);
  assert_int_equal(ts_data_format_of(d), TS_DATA_U16);
  ts_data_close(d);
  // two files that say different things
  assert_int_equal(ts_data_resolve(llmc, text, TS_DATA_DETECT, &f), TS_EUSAGE);
  expect_msg("llmc");
  expect_msg("bytes");
  assert_int_equal(ts_data_resolve(llmc, llmc_txt, TS_DATA_DETECT, &f), TS_OK);
  assert_int_equal(f, TS_DATA_LLMC);
  // a named format is used as named
  assert_int_equal(ts_data_resolve(raw, NULL, TS_DATA_U32, &f), TS_OK);
  assert_int_equal(f, TS_DATA_U32);
}

static void test_llmc_refusals(void **state) {
  uint32_t ids[200];
  for (int i = 0; i < 200; i++) ids[i] = (uint32_t)(i * 7);
  ts_data *d = (ts_data *)1;
  const char *v2 = write_ids("llmc-v2.bin", ids, 200, 2, TS_LLMC_HEADER_BYTES, 2, 200);
  assert_int_equal(open_fmt(v2, NULL, TS_DATA_DETECT, 2000, 0.1, 9, &d), TS_ERUNTIME);
  assert_null(d);
  expect_msg(v2);
  expect_msg("version 2");
  const char *more = write_ids("llmc-count.bin", ids, 200, 2, TS_LLMC_HEADER_BYTES, 1, 201);
  assert_int_equal(open_fmt(more, NULL, TS_DATA_LLMC, 2000, 0.1, 9, &d), TS_ERUNTIME);
  expect_msg(more);
  expect_msg("says 201 tokens");
  expect_msg("200");
  const char *neg = write_ids("llmc-neg.bin", ids, 200, 2, TS_LLMC_HEADER_BYTES, 1, -5);
  assert_int_equal(open_fmt(neg, NULL, TS_DATA_LLMC, 2000, 0.1, 9, &d), TS_ERUNTIME);
  expect_msg("says -5 tokens");
  // a file cut inside a token, and one cut inside the header
  size_t len = TS_LLMC_HEADER_BYTES + 2 * 200;
  uint8_t *b = calloc(len, 1);
  assert_non_null(b);
  put_le(b, (uint32_t)TS_LLMC_MAGIC, 4);
  put_le(b + 4, 1, 4);
  put_le(b + 8, 200, 4);
  const char *odd = write_tmp("llmc-odd.bin", b, len - 1);
  assert_int_equal(open_fmt(odd, NULL, TS_DATA_DETECT, 2000, 0.1, 9, &d), TS_ERUNTIME);
  expect_msg(odd);
  expect_msg("2-byte tokens");
  const char *cut = write_tmp("llmc-cut.bin", b, 600);
  assert_int_equal(open_fmt(cut, NULL, TS_DATA_DETECT, 2000, 0.1, 9, &d), TS_ERUNTIME);
  expect_msg(cut);
  expect_msg("shorter than llm.c's 1024-byte header");
  free(b);
  // no header where one is named
  const char *raw = write_ids("llmc-none.bin", ids, 200, 2, 0, 0, 0);
  assert_int_equal(open_fmt(raw, NULL, TS_DATA_LLMC, 2000, 0.1, 9, &d), TS_ERUNTIME);
  expect_msg(raw);
  expect_msg("magic 20240520");
  // a header with no tokens after it
  const char *none = write_ids("llmc-empty.bin", ids, 0, 2, TS_LLMC_HEADER_BYTES, 1, 0);
  assert_int_equal(open_fmt(none, NULL, TS_DATA_LLMC, 2000, 0.1, 0, &d), TS_ERUNTIME);
  expect_msg("holds no tokens");
}

static void test_whole_tokens(void **state) {
  uint8_t b[1002];
  memset(b, 1, sizeof b);
  ts_data *d = (ts_data *)1;
  const char *p16 = write_tmp("odd16.bin", b, 1001);
  assert_int_equal(open_fmt(p16, NULL, TS_DATA_U16, 65536, 0.1, 9, &d), TS_ERUNTIME);
  assert_null(d);
  expect_msg(p16);
  expect_msg("1001 bytes are not a whole number of 2-byte tokens");
  const char *p32 = write_tmp("odd32.bin", b, 1002);
  assert_int_equal(open_fmt(p32, NULL, TS_DATA_U32, 65536, 0.1, 9, &d), TS_ERUNTIME);
  expect_msg(p32);
  expect_msg("4-byte tokens");
  // 1002 bytes are 501 whole uint16s
  assert_int_equal(open_fmt(p32, NULL, TS_DATA_U16, 65536, 0.1, 9, &d), TS_OK);
  assert_int_equal(ts_data_split_len(d, TS_SPLIT_TRAIN) + ts_data_split_len(d, TS_SPLIT_VAL), 501);
  ts_data_close(d);
  const char *empty = write_tmp("empty16.bin", b, 0);
  assert_int_equal(open_fmt(empty, NULL, TS_DATA_U16, 65536, 0.1, 0, &d), TS_ERUNTIME);
  expect_msg("empty");
  // too short, counted in tokens: 501 split 451 / 50, a window of 64 needs 65
  assert_int_equal(open_fmt(p32, NULL, TS_DATA_U16, 65536, 0.1, 65, &d), TS_ERUNTIME);
  expect_msg("501 tokens");
  expect_msg("451");
}

// The first id >= vocab is named by its byte offset in the file; the whole
// file is checked on open, so no run starts on it.
static void test_ids_below_vocab(void **state) {
  const size_t n = 3000;
  uint32_t *ids = random_ids(n, 300, 10);
  ts_data *d = (ts_data *)1;
  ids[2500] = 300; // a later one too: the first is named
  ids[777] = 301;
  const char *p16 = write_ids("big16.bin", ids, n, 2, 0, 0, 0);
  assert_int_equal(open_fmt(p16, NULL, TS_DATA_U16, 300, 0.1, 9, &d), TS_ERUNTIME);
  assert_null(d);
  expect_msg(p16);
  expect_msg("token id 301 at byte offset 1554 ");
  expect_msg("--vocab 300");
  // in the validation tail too (the last 10%)
  ids[777] = 5;
  p16 = write_ids("big16-tail.bin", ids, n, 2, 0, 0, 0);
  assert_int_equal(open_fmt(p16, NULL, TS_DATA_U16, 300, 0.1, 9, &d), TS_ERUNTIME);
  expect_msg("token id 300 at byte offset 5000 ");
  assert_int_equal(open_fmt(p16, NULL, TS_DATA_U16, 301, 0.1, 9, &d), TS_OK);
  ts_data_close(d);
  // llm.c: the offset counts the header
  const char *pl = write_ids("bigl.bin", ids, n, 2, TS_LLMC_HEADER_BYTES, 1, (int32_t)n);
  assert_int_equal(open_fmt(pl, NULL, TS_DATA_DETECT, 300, 0.1, 9, &d), TS_ERUNTIME);
  expect_msg("token id 300 at byte offset 6024 ");
  // uint32: ids up to 2^32 - 1, more than an int holds
  ids[2500] = 7;
  ids[5] = 4294967295u;
  const char *p32 = write_ids("big32.bin", ids, n, 4, 0, 0, 0);
  assert_int_equal(open_fmt(p32, NULL, TS_DATA_U32, 2147483647, 0.1, 9, &d), TS_ERUNTIME);
  expect_msg("token id 4294967295 at byte offset 20 ");
  // bytes: a vocabulary below 256 cannot hold them (refused before reading)
  const char *text = write_tmp("vocab.txt", (const uint8_t *)"some text", 9);
  assert_int_equal(open_fmt(text, NULL, TS_DATA_DETECT, 255, 0.0, 2, &d), TS_EUSAGE);
  expect_msg("--vocab 255");
  expect_msg(text);
  assert_int_equal(open_fmt(text, NULL, TS_DATA_BYTES, 256, 0.0, 2, &d), TS_OK);
  ts_data_close(d);
  assert_int_equal(open_fmt(text, NULL, TS_DATA_BYTES, 1, 0.0, 2, &d), TS_EUSAGE);
  expect_msg("--vocab 1: must be >= 2");
  free(ids);
}

// --val-data: all of the first file trains, all of the second validates.
static void test_validation_file(void **state) {
  const size_t nt = 5000, nv = 700;
  uint32_t *tr = random_ids(nt, 1000, 11), *va = random_ids(nv, 1000, 12);
  const char *ptr = write_ids("train16.bin", tr, nt, 2, 0, 0, 0);
  const char *pva = write_ids("val16.bin", va, nv, 2, 0, 0, 0);
  ts_data *d;
  // val_frac is not used (not even checked) with a validation file
  if (open_fmt(ptr, pva, TS_DATA_U16, 1000, 1.5, 65, &d)) fail_msg("%s", ts_errmsg());
  assert_int_equal(ts_data_split_len(d, TS_SPLIT_TRAIN), nt);
  assert_int_equal(ts_data_split_len(d, TS_SPLIT_VAL), nv);
  int in[64], tg[64];
  for (int split = 0; split < 2; split++) {
    const uint32_t *ids = split == TS_SPLIT_TRAIN ? tr : va;
    size_t len = split == TS_SPLIT_TRAIN ? nt : nv;
    for (uint64_t j = 0; j < 40; j++) {
      size_t start = ts_data_window_start(d, split, 5, 2, j, 64);
      assert_int_equal(start, ts_rng_below(5, TS_RNG_DATA, 2, j, len - 64));
      assert_int_equal(ts_data_window(d, split, 5, 2, j, 64, in, tg), TS_OK);
      for (int t = 0; t < 64; t++) {
        assert_int_equal((uint32_t)in[t], ids[start + (size_t)t]);
        assert_int_equal((uint32_t)tg[t], ids[start + (size_t)t + 1]);
      }
    }
  }
  ts_data_close(d);
  // the validation file alone (evaluation): no training split
  if (open_fmt(NULL, pva, TS_DATA_U16, 1000, 0.1, 65, &d)) fail_msg("%s", ts_errmsg());
  assert_int_equal(ts_data_split_len(d, TS_SPLIT_TRAIN), 0);
  assert_int_equal(ts_data_window(d, TS_SPLIT_VAL, 5, 2, 0, 64, in, tg), TS_OK);
  assert_int_equal(ts_data_window(d, TS_SPLIT_TRAIN, 5, 2, 0, 64, in, tg), TS_EUSAGE);
  ts_data_close(d);
  // each file holds a window, each is checked against the vocabulary
  assert_int_equal(open_fmt(ptr, pva, TS_DATA_U16, 1000, 0.1, 701, &d), TS_ERUNTIME);
  expect_msg(pva);
  expect_msg("700 tokens");
  va[600] = 1000;
  pva = write_ids("val16-big.bin", va, nv, 2, 0, 0, 0);
  assert_int_equal(open_fmt(ptr, pva, TS_DATA_U16, 1000, 0.1, 65, &d), TS_ERUNTIME);
  expect_msg(pva);
  expect_msg("byte offset 1200 ");
  free(tr);
  free(va);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_window_is_file_bytes),
      cmocka_unit_test(test_window_at),
      cmocka_unit_test(test_tokens_are_unsigned_bytes),
      cmocka_unit_test(test_windows_are_pure),
      cmocka_unit_test(test_starts_spread),
      cmocka_unit_test(test_splits_never_cross),
      cmocka_unit_test(test_split_rounding),
      cmocka_unit_test(test_missing_file),
      cmocka_unit_test(test_empty_file),
      cmocka_unit_test(test_too_short),
      cmocka_unit_test(test_val_frac),
      cmocka_unit_test(test_bundled_corpus),
      cmocka_unit_test(test_bundled_recall),
      cmocka_unit_test(test_u16_reads_back),
      cmocka_unit_test(test_u32_reads_back),
      cmocka_unit_test(test_extreme_ids),
      cmocka_unit_test(test_llmc_reads_back),
      cmocka_unit_test(test_detected_bytes_are_bytes),
      cmocka_unit_test(test_detection),
      cmocka_unit_test(test_llmc_refusals),
      cmocka_unit_test(test_whole_tokens),
      cmocka_unit_test(test_ids_below_vocab),
      cmocka_unit_test(test_validation_file),
  };
  return cmocka_run_group_tests(tests, make_tmpdir, remove_tmpdir);
}
