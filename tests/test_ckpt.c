// Checkpoint tests: bitwise round trips, the exact file layout (checked against
// an independent bitwise CRC-32), every kind of damage refused with a message
// that names it, and atomic writes that leave no temp file and never damage an
// existing checkpoint.
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train/ckpt.h"
#include "train/optim.h"
#include "run/run.h"

static char tmpdir[4096];

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  return remove(p);
}

static int setup(void **state) {
  const char *base = getenv("TMPDIR");
  snprintf(tmpdir, sizeof tmpdir, "%s/tessera-ckpt-XXXXXX", base && *base ? base : "/tmp");
  return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
  return nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void path_in(char *buf, size_t cap, const char *name) {
  snprintf(buf, cap, "%s/%s", tmpdir, name);
}

// ---------------------------------------------------------------------------
// Raw file helpers: the tests build damaged files byte by byte.

// CRC-32 the slow way (bit by bit, no table), independent of the module's.
static uint32_t ref_crc32(const void *data, size_t n) {
  const unsigned char *p = data;
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1)));
  }
  return ~c;
}

static unsigned char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *buf = malloc((size_t)len + 1);
  assert_non_null(buf);
  assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
  fclose(f);
  *n = (size_t)len;
  return buf;
}

static void put_file(const char *path, const void *bytes, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(bytes, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
}

static uint64_t get_u64le(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static void put_u64le(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

// Writes a file with the given header text and data section. The header
// format has one %s, replaced by the data's correct CRC, so that each test
// damages exactly one thing.
static void put_raw(const char *path, const char *header_fmt, const void *data, size_t dlen) {
  char crc[16], header[4096];
  snprintf(crc, sizeof crc, "%08x", (unsigned)ref_crc32(data, dlen));
  int hl = snprintf(header, sizeof header, header_fmt, crc);
  assert_true(hl > 0 && (size_t)hl < sizeof header);
  size_t n = 8 + (size_t)hl + dlen;
  unsigned char *buf = malloc(n);
  assert_non_null(buf);
  put_u64le(buf, (uint64_t)hl);
  memcpy(buf + 8, header, (size_t)hl);
  if (dlen) memcpy(buf + 8 + hl, data, dlen);
  put_file(path, buf, n);
  free(buf);
}

// Entries of tmpdir whose name contains ".tmp." (leftover temp files).
static int count_temp_files(const char *dir) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (strstr(e->d_name, ".tmp.")) n++;
  closedir(d);
  return n;
}

// Opening must fail with TS_ERUNTIME and a message naming the file and
// containing each of the given words (NULL-terminated).
static void expect_refused(const char *path, ...) {
  static char sentinel;
  ts_ckpt *ck = (ts_ckpt *)&sentinel; // must come back NULL
  int rc = ts_ckpt_open(path, &ck);
  if (rc == TS_OK) fail_msg("%s opened although damaged", path);
  assert_int_equal(rc, TS_ERUNTIME);
  assert_null(ck);
  const char *msg = ts_errmsg();
  if (!strstr(msg, path)) fail_msg("message does not name the file: %s", msg);
  va_list ap;
  va_start(ap, path);
  for (const char *w; (w = va_arg(ap, const char *));)
    if (!strstr(msg, w)) fail_msg("message lacks '%s': %s", w, msg);
  va_end(ap);
}

// ---------------------------------------------------------------------------
// A fixed set of tensors with awkward values: NaN payloads, -0, infinities,
// denormals; a scalar and an empty tensor.
#define A_N 15
#define B_N 7
#define D_N 12
static float a_data[A_N], b_data[B_N], c_data[1], d_data[D_N];

static void fill(float *x, int n, uint32_t seed) {
  for (int i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    uint32_t bits = seed;
    memcpy(&x[i], &bits, 4); // any bit pattern, NaNs included
  }
}

static int make_tensors(ts_tensor *t) {
  fill(a_data, A_N, 1);
  fill(b_data, B_N, 2);
  fill(d_data, D_N, 3);
  a_data[0] = -0.0f;
  a_data[1] = INFINITY;
  a_data[2] = -INFINITY;
  a_data[3] = 1e-45f;
  uint32_t nan_bits = 0x7FC12345u;
  memcpy(&a_data[4], &nan_bits, 4);
  c_data[0] = 42.5f;
  ts_tensor ts[5] = {
      {.name = "wte", .ndim = 2, .shape = {3, 5}, .data = a_data},
      {.name = "h.0.ln1.b", .ndim = 1, .shape = {B_N}, .data = b_data},
      {.name = "scalar", .ndim = 0, .data = c_data},
      {.name = "empty", .ndim = 2, .shape = {0, 4}, .data = NULL},
      {.name = "h.0.attn.w\"q\\", .ndim = 4, .shape = {2, 1, 3, 2}, .data = d_data},
  };
  memcpy(t, ts, sizeof ts);
  return 5;
}

static const ts_meta tricky_meta[] = {
    {"config", "{\"model\": {\"preset\": \"tiny\", \"path\": \"C:\\\\data\\\\x.txt\", \"lr\": 3e-4}}"},
    {"quotes", "\"\"\"'\\\"\\\\"},
    {"controls", "tab\t nl\n cr\r bs\b ff\f one\x01 esc\x1b us\x1f del\x7f"},
    {"utf8", "h\xc3\xa9llo \xe2\x9c\x93 \xf0\x9d\x84\x9e"},
    {"empty", ""},
    {"key with \"quotes\" and \\ and\nnewline", "v"},
    {"slash/", "</script>"},
};
#define N_META ((int)(sizeof tricky_meta / sizeof tricky_meta[0]))

static void write_good(const char *path) {
  ts_tensor t[5];
  int n = make_tensors(t);
  int rc = ts_ckpt_write(path, t, n, tricky_meta, N_META);
  if (rc) fail_msg("%s", ts_errmsg());
}

// ---------------------------------------------------------------------------
static void test_crc_reference(void **state) {
  // The standard check value of CRC-32 confirms the independent implementation.
  assert_int_equal(ref_crc32("123456789", 9), 0xCBF43926u);
}

static void test_round_trip(void **state) {
  char path[4200];
  path_in(path, sizeof path, "rt.safetensors");
  ts_tensor t[5];
  int n = make_tensors(t);
  assert_int_equal(ts_ckpt_write(path, t, n, tricky_meta, N_META), TS_OK);

  ts_ckpt *ck = NULL;
  if (ts_ckpt_open(path, &ck) != TS_OK) fail_msg("%s", ts_errmsg());
  assert_int_equal(ts_ckpt_num_tensors(ck), n);
  for (int i = 0; i < N_META; i++) {
    const char *v = ts_ckpt_meta(ck, tricky_meta[i].key);
    assert_non_null(v);
    assert_string_equal(v, tricky_meta[i].value);
  }
  assert_string_equal(ts_ckpt_meta(ck, "tessera.format"), "1");
  assert_null(ts_ckpt_meta(ck, "absent"));
  // Load in reverse order into fresh buffers; every bit must come back.
  for (int i = n - 1; i >= 0; i--) {
    ts_tensor u = t[i];
    size_t bytes = (size_t)ts_tensor_numel(&t[i]) * sizeof(float);
    u.data = bytes ? malloc(bytes) : NULL;
    if (bytes) memset(u.data, 0xAB, bytes);
    if (ts_ckpt_load(ck, &u) != TS_OK) fail_msg("%s", ts_errmsg());
    if (bytes) assert_memory_equal(u.data, t[i].data, bytes);
    free(u.data);
  }
  ts_ckpt_close(ck);
}

// The exact layout other readers rely on: u64 length, JSON, 8-byte aligned
// contiguous data in the given order, CRC of the data section in the header.
static void test_layout(void **state) {
  char path[4200];
  path_in(path, sizeof path, "layout.safetensors");
  write_good(path);
  size_t size;
  unsigned char *b = slurp(path, &size);
  uint64_t hlen = get_u64le(b);
  assert_true(8 + hlen <= size);
  assert_int_equal((8 + hlen) % 8, 0);
  assert_int_equal(b[8], '{');
  ts_tensor t[5];
  int n = make_tensors(t);
  size_t off = 8 + (size_t)hlen;
  for (int i = 0; i < n; i++) { // the data section is the tensors, in order
    size_t bytes = (size_t)ts_tensor_numel(&t[i]) * 4;
    if (bytes) assert_memory_equal(b + off, t[i].data, bytes);
    off += bytes;
  }
  assert_int_equal(off, size);
  char want[16];
  snprintf(want, sizeof want, "%08x", (unsigned)ref_crc32(b + 8 + hlen, size - 8 - hlen));
  char *hdr = strndup((const char *)b + 8, (size_t)hlen);
  char needle[64];
  snprintf(needle, sizeof needle, "\"tessera.data_crc32\":\"%s\"", want);
  if (!strstr(hdr, needle)) fail_msg("header lacks %s: %s", needle, hdr);
  assert_non_null(strstr(hdr, "\"wte\":{\"dtype\":\"F32\",\"shape\":[3,5],\"data_offsets\":[0,60]}"));
  free(hdr);
  free(b);
}

// Same inputs, same bytes (golden files are compared with cmp).
static void test_deterministic(void **state) {
  char p1[4200], p2[4200];
  path_in(p1, sizeof p1, "det1.safetensors");
  path_in(p2, sizeof p2, "det2.safetensors");
  write_good(p1);
  write_good(p2);
  size_t n1, n2;
  unsigned char *b1 = slurp(p1, &n1), *b2 = slurp(p2, &n2);
  assert_int_equal(n1, n2);
  assert_memory_equal(b1, b2, n1);
  free(b1);
  free(b2);
}

// Escapes another writer may use (\u, surrogate pairs, \/), an unpadded
// header, whitespace between tokens and unknown fields are all fine.
static void test_reads_other_writers(void **state) {
  char path[4200];
  path_in(path, sizeof path, "other.safetensors");
  float x[2] = {1.5f, -2.0f};
  put_raw(path,
          " { \"x\" : { \"shape\" : [ 2 ] , \"dtype\" : \"F32\", \"extra\": [1, {\"a\": null}],"
          " \"data_offsets\" : [ 0 , 8 ] } ,\n\t\"__metadata__\" : { \"tessera.format\" : "
          "\"\\u0031\", \"tessera.data_crc32\": \"%s\", \"s\": \"\\u0041\\u00e9\\ud834\\udd1e\\/\\\"\" } }",
          x, sizeof x);
  ts_ckpt *ck = NULL;
  if (ts_ckpt_open(path, &ck) != TS_OK) fail_msg("%s", ts_errmsg());
  assert_string_equal(ts_ckpt_meta(ck, "s"), "A\xc3\xa9\xf0\x9d\x84\x9e/\"");
  float y[2];
  ts_tensor t = {.name = "x", .ndim = 1, .shape = {2}, .data = y};
  assert_int_equal(ts_ckpt_load(ck, &t), TS_OK);
  assert_memory_equal(x, y, sizeof x);
  ts_ckpt_close(ck);
}

// ---------------------------------------------------------------------------
// Damage.

static void test_truncated(void **state) {
  char good[4200], path[4200];
  path_in(good, sizeof good, "trunc-src.safetensors");
  path_in(path, sizeof path, "trunc.safetensors");
  write_good(good);
  size_t size;
  unsigned char *b = slurp(good, &size);
  size_t hlen = (size_t)get_u64le(b);
  // inside the length word
  size_t in_len[] = {0, 1, 7};
  for (size_t i = 0; i < 3; i++) {
    put_file(path, b, in_len[i]);
    expect_refused(path, "too short", "truncated", NULL);
  }
  // inside the header
  size_t in_hdr[] = {8, 9, 8 + hlen / 2, 8 + hlen - 1};
  for (size_t i = 0; i < 4; i++) {
    put_file(path, b, in_hdr[i]);
    expect_refused(path, "header length", "exceeds", "truncated", NULL);
  }
  // inside the data (and with no data at all)
  size_t in_data[] = {8 + hlen, 8 + hlen + 1, 8 + hlen + 60, size - 1};
  for (size_t i = 0; i < 4; i++) {
    put_file(path, b, in_data[i]);
    expect_refused(path, "truncated", NULL);
  }
  free(b);
}

static void test_flipped_data_byte(void **state) {
  char path[4200];
  path_in(path, sizeof path, "flip.safetensors");
  write_good(path);
  size_t size;
  unsigned char *b = slurp(path, &size);
  size_t hlen = (size_t)get_u64le(b);
  size_t where[] = {8 + hlen, 8 + hlen + 37, size - 1};
  for (size_t i = 0; i < 3; i++) {
    b[where[i]] ^= 0x10;
    put_file(path, b, size);
    expect_refused(path, "checksum", "damaged", NULL);
    b[where[i]] ^= 0x10;
  }
  free(b);
}

static void test_appended_bytes(void **state) {
  char path[4200];
  path_in(path, sizeof path, "append.safetensors");
  write_good(path);
  size_t size;
  unsigned char *b = slurp(path, &size);
  b = realloc(b, size + 5);
  memcpy(b + size, "extra", 5);
  put_file(path, b, size + 5);
  expect_refused(path, "5 bytes after the last tensor", NULL);
  free(b);
}

static void test_header_length(void **state) {
  char path[4200];
  path_in(path, sizeof path, "hlen.safetensors");
  write_good(path);
  size_t size;
  unsigned char *b = slurp(path, &size);
  uint64_t lens[] = {size - 8 + 1, 1ull << 40, UINT64_MAX};
  for (int i = 0; i < 3; i++) {
    put_u64le(b, lens[i]);
    put_file(path, b, size);
    expect_refused(path, "header length", "exceeds", NULL);
  }
  put_u64le(b, 0);
  put_file(path, b, size);
  expect_refused(path, "header length 0", NULL);
  free(b);
}

static void test_garbage_json(void **state) {
  static const char *const headers[] = {
      "not json at all",
      "[1, 2]",
      "{\"__metadata__\": {\"tessera.format\": \"1\"}",          // unclosed
      "{\"__metadata__\": {\"tessera.format\": \"1\",}}",        // trailing comma
      "{\"__metadata__\": {\"tessera.format\": \"1\"}} x",       // trailing garbage
      "{\"__metadata__\": {\"tessera.format\": \"1\"}}{}",       // a second object
      "{\"__metadata__\": {\"tessera.format\": \"1}}",           // unterminated string
      "{\"__metadata__\": {\"tessera.format\" \"1\"}}",          // missing colon
      "{\"__metadata__\": {'tessera.format': \"1\"}}",           // single quotes
      "{\"__metadata__\": {\"a\": \"\\q\"}}",                    // unknown escape
      "{\"__metadata__\": {\"a\": \"\\u12\"}}",                  // short \u
      "{\"__metadata__\": {\"a\": \"\\ud800\"}}",                // lone surrogate
      "{\"__metadata__\": {\"a\": \"\\u0000\"}}",                // NUL
      "{\"__metadata__\": {\"a\": \"raw\ttab\"}}",               // raw control char
      "{\"__metadata__\": {\"a\": \"\xc3\x28\"}}",               // invalid UTF-8
      "{\"__metadata__\": {\"a\": \"\xc0\xaf\"}}",               // overlong UTF-8
      "{\"x\": {\"dtype\": \"F32\", \"shape\": [01], \"data_offsets\": [0, 4]}}",  // leading 0
      "{\"x\": {\"dtype\": \"F32\", \"shape\": [1.], \"data_offsets\": [0, 4]}}",  // bad number
      "{\"x\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4], \"e\": tru}}",
  };
  char path[4200];
  path_in(path, sizeof path, "garbage.safetensors");
  float x = 1.0f;
  for (size_t i = 0; i < sizeof headers / sizeof headers[0]; i++) {
    put_raw(path, headers[i], &x, sizeof x);
    expect_refused(path, "header is not valid JSON", NULL);
  }
}

// Valid JSON, but not a valid checkpoint header: each error names the problem.
static void test_bad_header_content(void **state) {
#define META "\"__metadata__\": {\"tessera.format\": \"1\", \"tessera.data_crc32\": \"%s\"}"
  static const struct {
    const char *header;
    const char *word1, *word2;
  } cases[] = {
      {"{" META ", \"x\": {\"dtype\": \"F16\", \"shape\": [2], \"data_offsets\": [0, 8]}}", "dtype F16",
       "'x'"},
      {"{" META ", \"x\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 8]}}", "shape [3]",
       "'x'"},
      {"{" META ", \"x\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
                " \"y\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}",
       "overlap", "'y'"},
      {"{" META ", \"x\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
                " \"y\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}",
       "overlap", "'x'"},
      {"{" META ", \"x\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}",
       "out of range", "'x'"},
      {"{" META ", \"x\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}",
       "belong to no tensor", "[0, 4)"},
      {"{" META ", \"x\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [8, 0]}}",
       "end before begin", "'x'"},
      {"{" META ", \"x\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0]}}",
       "data_offsets has 1 values", "'x'"},
      {"{" META ", \"x\": {\"dtype\": \"F32\", \"shape\": [-2], \"data_offsets\": [0, 8]}}",
       "not an integer", "'x'"},
      {"{" META ", \"x\": {\"dtype\": \"F32\", \"shape\": [1, 1, 1, 1, 2], \"data_offsets\": [0, 8]}}",
       "5 dims", "'x'"},
      {"{" META ", \"x\": {\"dtype\": \"F32\", \"data_offsets\": [0, 8]}}", "no shape", "'x'"},
      {"{" META ", \"x\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
                " \"x\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}",
       "appears twice", "'x'"},
      {"{" META ", \"x\": 7}", "not an object", "'x'"},
      {"{\"__metadata__\": {\"tessera.data_crc32\": \"%s\"},"
       " \"x\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}",
       "tessera.format", "not a tessera checkpoint"},
      {"{\"__metadata__\": {\"tessera.format\": \"2\", \"c\": \"%s\"},"
       " \"x\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}",
       "tessera.format", "'2'"},
      {"{\"__metadata__\": {\"tessera.format\": \"1\", \"c\": \"%s\"},"
       " \"x\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}",
       "no tessera.data_crc32", NULL},
      {"{\"__metadata__\": {\"tessera.format\": \"1\", \"tessera.data_crc32\": \"%s\", \"n\": 5}}",
       "not a string", "'n'"},
      // control characters in what a message quotes are escaped: one line,
      // no terminal control (the fuzzer found a name's newline printed as is)
      {"{" META ", \"a\\nb\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 8]}}",
       "'a\\nb'", "shape [3]"},
      {"{" META ", \"x\": {\"dtype\": \"F\\u001b[2J\", \"shape\": [2], \"data_offsets\": [0, 8]}}",
       "dtype F\\x1b[2J", "'x'"},
  };
#undef META
  char path[4200];
  path_in(path, sizeof path, "content.safetensors");
  float x[2] = {1.0f, 2.0f};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    put_raw(path, cases[i].header, x, sizeof x);
    expect_refused(path, cases[i].word1, cases[i].word2, NULL);
    for (const char *c = ts_errmsg(); *c; c++)
      if ((unsigned char)*c < 0x20) fail_msg("control character %#x in: %s", *c, ts_errmsg());
  }
}

static void test_missing_or_misshapen_tensor(void **state) {
  char path[4200];
  path_in(path, sizeof path, "load.safetensors");
  write_good(path);
  ts_ckpt *ck = NULL;
  assert_int_equal(ts_ckpt_open(path, &ck), TS_OK);
  float buf[64];
  ts_tensor t = {.name = "lm_head", .ndim = 2, .shape = {3, 5}, .data = buf};
  assert_int_equal(ts_ckpt_load(ck, &t), TS_ERUNTIME);
  assert_non_null(strstr(ts_errmsg(), "no tensor 'lm_head'"));
  assert_non_null(strstr(ts_errmsg(), path));

  ts_tensor u = {.name = "wte", .ndim = 2, .shape = {5, 3}, .data = buf};
  memset(buf, 0, sizeof buf);
  assert_int_equal(ts_ckpt_load(ck, &u), TS_ERUNTIME);
  const char *m = ts_errmsg();
  if (!strstr(m, "'wte'") || !strstr(m, "[3, 5]") || !strstr(m, "[5, 3]"))
    fail_msg("shape mismatch message lacks the name or a shape: %s", m);
  for (int i = 0; i < 64; i++) assert_true(buf[i] == 0.0f); // nothing was loaded

  ts_tensor v = {.name = "h.0.ln1.b", .ndim = 2, .shape = {B_N, 1}, .data = buf};
  assert_int_equal(ts_ckpt_load(ck, &v), TS_ERUNTIME);
  assert_non_null(strstr(ts_errmsg(), "[7, 1]"));
  ts_ckpt_close(ck);

  expect_refused(tmpdir, "not a regular file", NULL);
  char none[4200];
  path_in(none, sizeof none, "does-not-exist.safetensors");
  expect_refused(none, "cannot open", NULL);
}

// ---------------------------------------------------------------------------
// Format 2: the header is checksummed too, and a run can ask for exactly its
// tensors.

static void write_v2(const char *path) {
  ts_tensor t[5];
  int n = make_tensors(t);
  if (ts_ckpt_write_v2(path, t, n, tricky_meta, N_META)) fail_msg("%s", ts_errmsg());
}

// The stored header checksum (independent implementation): in format 3 the
// CRC-32 of the header up to its last non-space byte, its own 8 digits read
// as '0' and the run member (',"tessera.run":"…"', written last among the
// metadata) left out; in format 2 the CRC-32 of the length word and the
// whole header, its own 8 digits read as '0'.
static void check_header_crc(const char *path, int format) {
  size_t size;
  unsigned char *b = slurp(path, &size);
  uint64_t hlen = get_u64le(b);
  char *hdr = strndup((const char *)b + 8, (size_t)hlen);
  const char *key = "\"tessera.header_crc32\":\"";
  char *at = strstr(hdr, key), fmt[32];
  if (!at) fail_msg("no header checksum: %s", hdr);
  snprintf(fmt, sizeof fmt, "\"tessera.format\":\"%d\"", format);
  assert_non_null(strstr(hdr, fmt));
  size_t digits = 8 + (size_t)(at - hdr) + strlen(key);
  char stored[9];
  memcpy(stored, b + digits, 8);
  stored[8] = 0;
  memset(b + digits, '0', 8);
  uint32_t crc;
  if (format == 2) {
    crc = ref_crc32(b, 8 + (size_t)hlen);
  } else {
    size_t end = 8 + (size_t)hlen;
    while (b[end - 1] == ' ') end--;
    const char *member = ",\"tessera.run\":\"";
    char *run = strstr(hdr, member);
    size_t lo = run ? 8 + (size_t)(run - hdr) : end, hi = lo;
    if (run) { // to the closing quote, over escapes
      hi = lo + strlen(member);
      while (b[hi] != '"') hi += b[hi] == '\\' ? 2 : 1;
      hi++;
      assert_int_equal(b[hi], '}'); // last among the metadata
    }
    // the two pieces around the member, one after the other
    unsigned char *joined = malloc(end);
    memcpy(joined, b + 8, lo - 8);
    memcpy(joined + (lo - 8), b + hi, end - hi);
    crc = ref_crc32(joined, (lo - 8) + (end - hi));
    free(joined);
  }
  char want[16];
  snprintf(want, sizeof want, "%08x", (unsigned)crc);
  assert_string_equal(stored, want);
  free(hdr);
  free(b);
}

// A run member with quotes and backslashes in its value, and written first:
// the writer puts it last.
static const ts_meta run_meta[] = {
    {"tessera.run", "{\"ckpt_dir\":\"a \\\"b\\\" \\\\ c\",\"threads\":2}"},
    {"k", "v"},
};

static void test_v2_layout(void **state) {
  char path[4200];
  path_in(path, sizeof path, "v2.safetensors");
  write_v2(path);
  check_header_crc(path, 3);
  ts_ckpt *ck = NULL;
  if (ts_ckpt_open(path, &ck) != TS_OK) fail_msg("%s", ts_errmsg());
  assert_int_equal(ts_ckpt_format(ck), 3);
  assert_string_equal(ts_ckpt_path(ck), path);
  for (int i = 0; i < N_META; i++)
    assert_string_equal(ts_ckpt_meta(ck, tricky_meta[i].key), tricky_meta[i].value);
  ts_ckpt_close(ck);
  // a run member: left out of the checksum, so two files that differ only
  // there have the same bytes but it (and the padding its length moves)
  ts_tensor t[5];
  int n = make_tensors(t);
  assert_int_equal(ts_ckpt_write_v2(path, t, n, run_meta, 2), TS_OK);
  check_header_crc(path, 3);
  if (ts_ckpt_open(path, &ck) != TS_OK) fail_msg("%s", ts_errmsg());
  assert_string_equal(ts_ckpt_meta(ck, "tessera.run"), run_meta[0].value);
  ts_ckpt_close(ck);
  // format 2, as older builds wrote it, still reads
  assert_int_equal(ts_ckpt_write_format(path, t, n, tricky_meta, N_META, 2), TS_OK);
  check_header_crc(path, 2);
  if (ts_ckpt_open(path, &ck) != TS_OK) fail_msg("%s", ts_errmsg());
  assert_int_equal(ts_ckpt_format(ck), 2);
  ts_ckpt_close(ck);
  // format 1 still reads, and says so
  write_good(path);
  assert_int_equal(ts_ckpt_open(path, &ck), TS_OK);
  assert_int_equal(ts_ckpt_format(ck), 1);
  ts_ckpt_close(ck);
}

// Every single-bit change of a header byte is refused in format 2 (in format
// 1 a metadata value, for one, can change unseen: shown here too, so that the
// test would notice a format-2 writer that checks nothing).
static void test_v2_every_header_bit(void **state) {
  char path[4200];
  path_in(path, sizeof path, "v2bits.safetensors");
  for (int format = 1; format <= 3; format++) {
    if (format == 1) write_good(path);
    else {
      ts_tensor t[5];
      int n = make_tensors(t);
      assert_int_equal(ts_ckpt_write_format(path, t, n, tricky_meta, N_META, format), TS_OK);
    }
    size_t size;
    unsigned char *b = slurp(path, &size);
    size_t hlen = (size_t)get_u64le(b), accepted = 0;
    for (size_t i = 8; i < 8 + hlen; i++)
      for (int bit = 0; bit < 8; bit += 3) {
        b[i] ^= (unsigned char)(1u << bit);
        put_file(path, b, size);
        ts_ckpt *ck = NULL;
        if (ts_ckpt_open(path, &ck) == TS_OK) {
          accepted++;
          ts_ckpt_close(ck);
          if (format >= 2) fail_msg("format %d: header byte %zu ^ 0x%x accepted", format, i, 1u << bit);
        } else if (!strstr(ts_errmsg(), path)) {
          fail_msg("message does not name the file: %s", ts_errmsg());
        }
        b[i] ^= (unsigned char)(1u << bit);
      }
    if (format == 1) assert_true(accepted > 0);
    free(b);
  }
  // format 3 with a run member: a flip anywhere else is refused
  ts_tensor t[5];
  int n = make_tensors(t);
  assert_int_equal(ts_ckpt_write_v2(path, t, n, run_meta, 2), TS_OK);
  size_t size;
  unsigned char *b = slurp(path, &size);
  size_t hlen = (size_t)get_u64le(b);
  char *hdr = strndup((const char *)b + 8, hlen);
  const size_t lo = 8 + (size_t)(strstr(hdr, ",\"tessera.run\"") - hdr);
  size_t end = lo + strlen(",\"tessera.run\":\"");
  while (b[end] != '"') end += b[end] == '\\' ? 2 : 1;
  for (size_t i = 8; i < 8 + hlen; i++) {
    if (i >= lo && i <= end) continue;
    b[i] ^= 1u;
    put_file(path, b, size);
    ts_ckpt *ck = NULL;
    if (ts_ckpt_open(path, &ck) == TS_OK) {
      ts_ckpt_close(ck);
      fail_msg("format 3: header byte %zu ^ 1 (outside the run member) accepted", i);
    }
    b[i] ^= 1u;
  }
  free(hdr);
  free(b);
}

// A hand-edited format-2 header whose checksum was fixed up passes the file
// checks; what the run asks for is still held to: same tensors, same order.
static void test_expect(void **state) {
  char path[4200];
  path_in(path, sizeof path, "expect.safetensors");
  float x[4] = {1, 2, 3, 4};
  // "b" and "c" have the same size; their offsets swapped: a valid file
  static const char swapped[] =
      "{\"__metadata__\": {\"tessera.format\": \"1\", \"tessera.data_crc32\": \"%s\"},"
      " \"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
      " \"b\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [12, 16]},"
      " \"c\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 12]}}";
  put_raw(path, swapped, x, sizeof x);
  ts_tensor want[3] = {{.name = "a", .ndim = 1, .shape = {2}},
                       {.name = "b", .ndim = 1, .shape = {1}},
                       {.name = "c", .ndim = 1, .shape = {1}}};
  ts_ckpt *ck = NULL;
  if (ts_ckpt_open(path, &ck) != TS_OK) fail_msg("%s", ts_errmsg());
  assert_int_equal(ts_ckpt_expect(ck, want, 3), TS_ERUNTIME);
  if (!strstr(ts_errmsg(), path) || !strstr(ts_errmsg(), "'b' starts at data byte 12, expected 8"))
    fail_msg("%s", ts_errmsg());
  ts_ckpt_close(ck);

  // the same tensors in their own order: accepted
  write_v2(path);
  ts_tensor t[5];
  int n = make_tensors(t);
  assert_int_equal(ts_ckpt_open(path, &ck), TS_OK);
  if (ts_ckpt_expect(ck, t, n) != TS_OK) fail_msg("%s", ts_errmsg());
  // one fewer expected: the file's last is extra; one more: missing
  assert_int_equal(ts_ckpt_expect(ck, t, n - 1), TS_ERUNTIME);
  assert_non_null(strstr(ts_errmsg(), "'h.0.attn.w\"q\\' is not one of this model's"));
  ts_tensor more[6];
  memcpy(more, t, sizeof t);
  more[5] = (ts_tensor){.name = "lm_head", .ndim = 1, .shape = {1}};
  assert_int_equal(ts_ckpt_expect(ck, more, 6), TS_ERUNTIME);
  assert_non_null(strstr(ts_errmsg(), "no tensor 'lm_head'"));
  // a tensor in the middle the model does not have, then one it lacks
  ts_tensor other[5];
  memcpy(other, t, sizeof t);
  snprintf(other[1].name, sizeof other[1].name, "h.1.ln1.b");
  assert_int_equal(ts_ckpt_expect(ck, other, 5), TS_ERUNTIME);
  assert_non_null(strstr(ts_errmsg(), "no tensor 'h.1.ln1.b'"));
  // two swapped in the list
  ts_tensor sw[5];
  memcpy(sw, t, sizeof t);
  sw[0] = t[1], sw[1] = t[0];
  assert_int_equal(ts_ckpt_expect(ck, sw, 5), TS_ERUNTIME);
  assert_non_null(
      strstr(ts_errmsg(), "tensor 0 is 'wte', expected 'h.0.ln1.b' (tensors out of order)"));
  // a shape that differs
  ts_tensor sh[5];
  memcpy(sh, t, sizeof t);
  sh[0].shape[0] = 5, sh[0].shape[1] = 3;
  assert_int_equal(ts_ckpt_expect(ck, sh, 5), TS_ERUNTIME);
  assert_non_null(strstr(ts_errmsg(), "'wte' has shape [3, 5] in the file, expected [5, 3]"));
  ts_ckpt_close(ck);
}

// Format-2 damage the parse accepts: the checksum missing, not as written, wrong.
static void test_v2_bad_checksum(void **state) {
  static const struct {
    const char *hcrc; // the value of tessera.header_crc32, NULL: absent
    const char *word;
  } cases[] = {
      {NULL, "no tessera.header_crc32, which tessera.format '2' requires"},
      {"0000000", "not 8 lowercase hex digits"},
      {"ABCDEF01", "not 8 lowercase hex digits"},
      {"\\u0030\\u0030\\u0030\\u0030\\u0030\\u0030\\u0030\\u0030", "not 8 lowercase hex digits"},
      {"00000000", "header checksum mismatch"},
  };
  char path[4200];
  path_in(path, sizeof path, "v2crc.safetensors");
  float x[2] = {1.0f, 2.0f};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char fmt[1024], h[256] = "";
    if (cases[i].hcrc) snprintf(h, sizeof h, ", \"tessera.header_crc32\": \"%s\"", cases[i].hcrc);
    snprintf(fmt, sizeof fmt,
             "{\"__metadata__\": {\"tessera.format\": \"2\", \"tessera.data_crc32\": \"%%s\"%s},"
             " \"x\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", h);
    put_raw(path, fmt, x, sizeof x);
    expect_refused(path, cases[i].word, NULL);
  }
  // and the writer keeps the key to itself
  ts_meta m = {"tessera.header_crc32", "00000000"};
  ts_tensor t = {.name = "x", .ndim = 1, .shape = {2}, .data = x};
  assert_int_equal(ts_ckpt_write_v2(path, &t, 1, &m, 1), TS_ERUNTIME);
  assert_non_null(strstr(ts_errmsg(), "reserved"));
}

// ---------------------------------------------------------------------------
// Writing: bad inputs, failures, atomicity.

static void test_bad_inputs(void **state) {
  char path[4200];
  path_in(path, sizeof path, "inputs.safetensors");
  float x[2] = {0};
  ts_tensor dup[2] = {{.name = "a", .ndim = 1, .shape = {2}, .data = x},
                      {.name = "a", .ndim = 1, .shape = {2}, .data = x}};
  assert_int_equal(ts_ckpt_write(path, dup, 2, NULL, 0), TS_ERUNTIME);
  assert_non_null(strstr(ts_errmsg(), "'a' given twice"));
  ts_tensor reserved = {.name = "__metadata__", .ndim = 1, .shape = {2}, .data = x};
  assert_int_equal(ts_ckpt_write(path, &reserved, 1, NULL, 0), TS_ERUNTIME);
  ts_tensor neg = {.name = "n", .ndim = 1, .shape = {-1}, .data = x};
  assert_int_equal(ts_ckpt_write(path, &neg, 1, NULL, 0), TS_ERUNTIME);
  ts_meta crc = {"tessera.data_crc32", "00000000"};
  assert_int_equal(ts_ckpt_write(path, dup, 1, &crc, 1), TS_ERUNTIME);
  assert_non_null(strstr(ts_errmsg(), "reserved"));
  ts_meta utf = {"k", "\xff\xfe"};
  assert_int_equal(ts_ckpt_write(path, dup, 1, &utf, 1), TS_ERUNTIME);
  assert_non_null(strstr(ts_errmsg(), "UTF-8"));
  assert_int_equal(access(path, F_OK), -1); // refused before any file was made
  assert_int_equal(count_temp_files(tmpdir), 0);

  // No tensors at all is a valid (metadata-only) checkpoint.
  ts_meta m = {"k", "v"};
  assert_int_equal(ts_ckpt_write(path, NULL, 0, &m, 1), TS_OK);
  ts_ckpt *ck = NULL;
  assert_int_equal(ts_ckpt_open(path, &ck), TS_OK);
  assert_int_equal(ts_ckpt_num_tensors(ck), 0);
  assert_string_equal(ts_ckpt_meta(ck, "k"), "v");
  ts_ckpt_close(ck);
}

static void test_write_missing_directory(void **state) {
  char path[4200];
  path_in(path, sizeof path, "no-such-dir/ck.safetensors");
  ts_tensor t[5];
  int n = make_tensors(t);
  assert_int_equal(ts_ckpt_write(path, t, n, NULL, 0), TS_ERUNTIME);
  assert_non_null(strstr(ts_errmsg(), path));
  char dir[4200];
  path_in(dir, sizeof dir, "no-such-dir");
  assert_int_equal(access(dir, F_OK), -1);
  assert_int_equal(count_temp_files(tmpdir), 0);
}

// The rename fails (the target is a directory): the temp file must go.
static void test_failed_rename_leaves_no_temp(void **state) {
  char path[4200];
  path_in(path, sizeof path, "is-a-dir");
  assert_int_equal(mkdir(path, 0755), 0);
  ts_tensor t[5];
  int n = make_tensors(t);
  assert_int_equal(ts_ckpt_write(path, t, n, NULL, 0), TS_ERUNTIME);
  assert_non_null(strstr(ts_errmsg(), "rename"));
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_true(S_ISDIR(st.st_mode));
  assert_int_equal(count_temp_files(tmpdir), 0);
  assert_int_equal(rmdir(path), 0);
}

// A write that fails half way (here: the file-size limit, which behaves like a
// full disk even for root) must leave the previous checkpoint byte for byte.
static void test_failed_overwrite_keeps_old(void **state) {
  char path[4200];
  path_in(path, sizeof path, "keep.safetensors");
  write_good(path);
  size_t old_n;
  unsigned char *old = slurp(path, &old_n);

  enum { BIG = 1 << 16 };
  float *big = calloc(BIG, sizeof(float));
  assert_non_null(big);
  ts_tensor t = {.name = "big", .ndim = 1, .shape = {BIG}, .data = big};

  struct rlimit saved, lim;
  assert_int_equal(getrlimit(RLIMIT_FSIZE, &saved), 0);
  lim = saved;
  lim.rlim_cur = 4096;
  void (*oldsig)(int) = signal(SIGXFSZ, SIG_IGN); // write() then fails with EFBIG
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
  int rc = ts_ckpt_write(path, &t, 1, NULL, 0);
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", ts_errmsg());
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &saved), 0);
  signal(SIGXFSZ, oldsig);

  assert_int_equal(rc, TS_ERUNTIME);
  if (!strstr(msg, "writing") || !strstr(msg, strerror(EFBIG)))
    fail_msg("message does not say the write failed: %s", msg);
  assert_int_equal(count_temp_files(tmpdir), 0);
  size_t now_n;
  unsigned char *now = slurp(path, &now_n);
  assert_int_equal(now_n, old_n);
  assert_memory_equal(now, old, old_n);
  ts_ckpt *ck = NULL;
  assert_int_equal(ts_ckpt_open(path, &ck), TS_OK);
  ts_ckpt_close(ck);

  // And a successful overwrite replaces it completely.
  assert_int_equal(ts_ckpt_write(path, &t, 1, NULL, 0), TS_OK);
  assert_int_equal(ts_ckpt_open(path, &ck), TS_OK);
  assert_int_equal(ts_ckpt_num_tensors(ck), 1);
  assert_null(ts_ckpt_meta(ck, "config"));
  ts_ckpt_close(ck);
  assert_int_equal(count_temp_files(tmpdir), 0);
  free(now);
  free(old);
  free(big);
}

// ---------------------------------------------------------------------------
// A training checkpoint (src/run/checkpoint.c): everything in its header is
// checked like a flag. The damaged files are written by ts_ckpt_write_v2, so
// their checksums are right: these are the edits a checksum cannot catch
// (or a hostile editor who fixed it up).

typedef struct {
  ts_config cfg;
  ts_model *m;
  ts_adamw opt;
  char path[4200]; // the good checkpoint, step 2 of 4
} run_fixture;

static void run_setup(run_fixture *f) {
  memset(f, 0, sizeof *f);
  assert_int_equal(ts_config_preset(&f->cfg, "tiny"), TS_OK);
  ts_config_defaults(&f->cfg);
  f->cfg.steps = 4;
  char dir[4200];
  path_in(dir, sizeof dir, "run");
  assert_true(strlen(dir) < sizeof f->cfg.ckpt_dir);
  memcpy(f->cfg.ckpt_dir, dir, strlen(dir) + 1);
  assert_int_equal(ts_config_finalize(&f->cfg), TS_OK);
  if (ts_model_create(&f->cfg, &f->m)) fail_msg("%s", ts_errmsg());
  ts_model_init(f->m, f->cfg.seed);
  assert_int_equal(ts_adamw_init(&f->opt, ts_model_num_params(f->m)), TS_OK);
  for (size_t i = 0; i < f->opt.n; i++) f->opt.m[i] = 1e-3f * (float)(i % 7), f->opt.v[i] = 1e-6f;
  f->opt.step = 2;
  if (ts_run_save_checkpoint(NULL, f->m, &f->opt, NULL, 0, &f->cfg, 2)) fail_msg("%s", ts_errmsg());
  snprintf(f->path, sizeof f->path, "%s/step-00000002.safetensors", f->cfg.ckpt_dir);
}

static void run_teardown(run_fixture *f) {
  ts_adamw_free(&f->opt);
  ts_model_free(f->m);
}

#define CFG_KEY "tessera.config"
#define RUN_KEY "tessera.run"

// s with its first `from` replaced by `to` (static buffer).
static const char *replaced(const char *s, const char *from, const char *to) {
  static char out[TS_CONFIG_JSON_MAX + 256];
  const char *at = strstr(s, from);
  if (!at) fail_msg("'%s' not in '%s'", from, s);
  snprintf(out, sizeof out, "%.*s%s%s", (int)(at - s), s, to, at + strlen(from));
  return out;
}

// Writes the fixture's tensors to path with the good file's metadata, `key`
// set to `value` (NULL: left out), in the given format.
static void write_edited(run_fixture *f, const char *path, const char *key, const char *value,
                         int format) {
  static const char *const keys[] = {"tessera.config", "tessera.step", "tessera.adam_step",
                                     "tessera.data_position", "tessera.rng", "tessera.run"};
  ts_ckpt *ck = NULL;
  assert_int_equal(ts_ckpt_open(f->path, &ck), TS_OK);
  ts_meta meta[6];
  int n_meta = 0;
  for (int i = 0; i < 6; i++) {
    const char *v = !strcmp(keys[i], key) ? value : ts_ckpt_meta(ck, keys[i]);
    if (v) meta[n_meta++] = (ts_meta){keys[i], strdup(v)};
  }
  ts_ckpt_close(ck);
  ts_tensor *t;
  int n = ts_run_ckpt_tensors(f->m, &f->opt, &t);
  assert_true(n > 0);
  int rc = ts_ckpt_write_format(path, t, n, meta, n_meta, format);
  if (rc) fail_msg("%s", ts_errmsg());
  free(t);
  for (int i = 0; i < n_meta; i++) free((char *)meta[i].value);
}

static void expect_run_refused(run_fixture *f, const char *path, const char *word) {
  ts_run_ckpt ck;
  int rc = ts_run_open_checkpoint(path, &f->cfg, 0, 1, 1, &ck);
  if (rc == TS_OK) {
    ts_run_close_checkpoint(&ck);
    fail_msg("accepted: %s (want '%s')", path, word);
  }
  assert_int_equal(rc, TS_ERUNTIME);
  assert_null(ck.ck);
  if (!strstr(ts_errmsg(), path) || !strstr(ts_errmsg(), word))
    fail_msg("message lacks the file or '%s': %s", word, ts_errmsg());
}

static void test_run_header_checked(void **state) {
  run_fixture f;
  run_setup(&f);
  ts_run_ckpt ck;
  if (ts_run_open_checkpoint(f.path, &f.cfg, 0, 1, 1, &ck)) fail_msg("%s", ts_errmsg());
  assert_int_equal(ck.step, 2);
  assert_int_equal(ck.adam_step, 2);
  assert_int_equal(ck.cfg.n_layer, f.cfg.n_layer);
  char js[TS_CONFIG_JSON_MAX], run[TS_CONFIG_JSON_MAX];
  snprintf(js, sizeof js, "%s", ts_ckpt_meta(ck.ck, "tessera.config"));
  assert_non_null(ts_ckpt_meta(ck.ck, RUN_KEY));
  snprintf(run, sizeof run, "%s", ts_ckpt_meta(ck.ck, RUN_KEY));
  assert_null(strstr(js, "threads")); // the run's own settings are apart
  ts_run_close_checkpoint(&ck);

  char bad[4200];
  path_in(bad, sizeof bad, "run-bad.safetensors");
  // a metadata value replaced (from NULL), or a piece of the configuration
  // (tessera.config's text with `from` replaced): through ts_config_finalize,
  // unchanged by it, fitting
  static const struct {
    const char *key, *from, *to, *word;
  } cases[] = {
      {"tessera.step", NULL, "abc", "tessera.step 'abc' is not a count"},
      {"tessera.step", NULL, "-1", "tessera.step '-1' is not a count"},
      {"tessera.step", NULL, "", "tessera.step '' is not a count"},
      {"tessera.step", NULL, " 2", "is not a count"},
      {"tessera.step", NULL, "02", "is not a count"},
      {"tessera.step", NULL, "0", "tessera.step 0: a run of 4 steps"},
      {"tessera.step", NULL, "99", "tessera.step 99: a run of 4 steps"},
      {"tessera.step", NULL, "99999999999999999999",
        "tessera.step 99999999999999999999 is out of range"},
      {"tessera.step", NULL, "3", "tessera.adam_step 2 differs from tessera.step 3"},
      {"tessera.step", NULL, NULL, "metadata has no tessera.step"},
      {"tessera.adam_step", NULL, "1", "tessera.adam_step 1 differs"},
      {"tessera.adam_step", NULL, "2x", "tessera.adam_step '2x'"},
      {"tessera.data_position", NULL, "3", "tessera.data_position 3 differs"},
      {"tessera.rng", NULL, "mt19937", "tessera.rng is 'mt19937'"},
      {"tessera.config", NULL, NULL, "metadata has no tessera.config"},
      {"tessera.config", NULL, "{", "tessera.config is not JSON"},
      {CFG_KEY, "\"n_head\":4", "\"n_head\":0", "tessera.config: --heads 0"},
      {CFG_KEY, "\"tile\":8", "\"tile\":0", "tessera.config: tile 0"},
      {CFG_KEY, "\"leaf\":8", "\"leaf\":0", "tessera.config: leaf 0"},
      // left out: refused, not taken from the flags (eval's would be the command line's)
      {CFG_KEY, "\"tile\":8,", "", "tessera.config: tile 0"},
      {CFG_KEY, "\"leaf\":8,", "", "tessera.config: leaf 0"},
      {CFG_KEY, "\"tile\":8", "\"tile\":7", "tessera.config: --tile 7"},
      {CFG_KEY, "\"leaf\":8", "\"leaf\":1", "tessera.config: --leaf 1"},
      {CFG_KEY, "\"tied\":1", "\"tied\":2", "tessera.config: tied 2"},
      {CFG_KEY, "\"batch\":4", "\"batch\":0", "tessera.config: --batch 0"},
      {CFG_KEY, "\"n_layer\":2", "\"n_layer\":-1", "tessera.config: --layers -1"},
      {CFG_KEY, "\"n_layer\":2", "\"n_layer\":200000000",
        "tessera.config: the model's weight matrices alone need"},
      // a model that fits but is not the file's: refused on open, before
      // anything of it is allocated (the fuzzer found it allocated first)
      {CFG_KEY, "\"d\":64", "\"d\":1024",
        "tensor 'wte' has shape [256, 64] in the file, expected [256, 1024]"},
      {CFG_KEY, "\"n_layer\":2", "\"n_layer\":200", "no tensor 'h.2.ln1.w'"},
      {CFG_KEY, "\"d\":64", "\"d\":2147483647", "tessera.config: --heads 4: must divide"},
      {CFG_KEY, "\"n_head\":4", "\"n_head\":4,\"compress\":99",
        "tessera.config: compress 99: unknown"},
      {RUN_KEY, "\"threads\":0", "\"threads\":100000", "tessera.config: --threads 100000"},
      // the run's own settings, which the header checksum leaves out: never
      // the computation, nor a key twice
      {RUN_KEY, "\"threads\":0", "\"threads\":0,\"d\":128",
        "tessera.run: config JSON: \"d\" is not one of the run's own settings"},
      {RUN_KEY, "\"threads\":0", "\"threads\":0,\"threads\":1",
        "tessera.run: \"threads\" appears twice"},
      {RUN_KEY, "\"threads\":0", "\"threads\":\"x\"", "bad value for \"threads\""},
      {"tessera.run", NULL, "[", "tessera.run is not JSON"},
      {CFG_KEY, "\"n_head\":4", "\"n_head\":4,\"n_head\":0",
        "tessera.config: \"n_head\" appears twice"},
      {CFG_KEY, "\"n_head\":4", "\"n_head\":\"4\"", "bad value for \"n_head\""},
      {CFG_KEY, "\"n_head\":4", "\"n_head\":4,\"optimizer\":1",
        "\"muon_lr\" is not a value a run writes"},
      {CFG_KEY, "\"n_head\":4", "\"n_head\":4,\"muon_lr\":0.5", "tessera.config: --muon-lr 0.5"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *base = !strcmp(cases[i].key, RUN_KEY) ? run : js;
    const char *v = cases[i].from ? replaced(base, cases[i].from, cases[i].to) : cases[i].to;
    write_edited(&f, bad, cases[i].key, v, 3);
    expect_run_refused(&f, bad, cases[i].word);
  }
  // a configuration that passes, but of a model too large to create: eval
  // names the file (the data is read first, so a corpus is needed)
  write_edited(&f, bad, CFG_KEY, replaced(js, "\"batch\":4", "\"batch\":1073741824"), 3);
  ts_config ev = f.cfg;
  char corpus_path[4200];
  path_in(corpus_path, sizeof corpus_path, "corpus.txt");
  assert_true(strlen(corpus_path) < sizeof ev.data_path);
  memcpy(ev.data_path, corpus_path, strlen(corpus_path) + 1);
  FILE *corpus = fopen(ev.data_path, "w");
  assert_non_null(corpus);
  for (int i = 0; i < 20000; i++) fputs("abcd", corpus);
  assert_int_equal(fclose(corpus), 0);
  assert_int_equal(ts_eval(&ev, bad), TS_ERUNTIME);
  if (!strstr(ts_errmsg(), bad) || !strstr(ts_errmsg(), "tessera.config: this model needs"))
    fail_msg("%s", ts_errmsg());
  // format 1 (no header checksum) is not enough for a run
  write_edited(&f, bad, "-", NULL, 1);
  expect_run_refused(&f, bad, "tessera.format 1 has no header checksum");
  // and the unedited rewrite is accepted (the edits above are what was
  // refused), in format 3 and as format 2 wrote it (the run's settings in
  // the configuration)
  write_edited(&f, bad, "-", NULL, 3);
  assert_int_equal(ts_run_open_checkpoint(bad, &f.cfg, 0, 1, 1, &ck), TS_OK);
  ts_run_close_checkpoint(&ck);
  char full[TS_CONFIG_JSON_MAX];
  assert_int_equal(ts_config_to_json(&f.cfg, full, sizeof full), TS_OK);
  ts_meta old[5] = {{"tessera.config", full}, {"tessera.step", "2"}, {"tessera.adam_step", "2"},
                    {"tessera.data_position", "2"}, {"tessera.rng", NULL}};
  assert_int_equal(ts_ckpt_open(f.path, &ck.ck), TS_OK);
  old[4].value = strdup(ts_ckpt_meta(ck.ck, "tessera.rng"));
  ts_ckpt_close(ck.ck);
  ts_tensor *t;
  int n = ts_run_ckpt_tensors(f.m, &f.opt, &t);
  assert_int_equal(ts_ckpt_write_format(bad, t, n, old, 5, 2), TS_OK);
  free(t);
  free((char *)old[4].value);
  if (ts_run_open_checkpoint(bad, &f.cfg, 0, 1, 1, &ck)) fail_msg("%s", ts_errmsg());
  assert_int_equal(ts_ckpt_format(ck.ck), 2);
  assert_string_equal(ck.cfg.ckpt_dir, f.cfg.ckpt_dir); // read from the configuration
  ts_run_close_checkpoint(&ck);
  run_teardown(&f);
}

// The file written from t (n tensors) is refused on open, before a model is
// made, naming the file and `word`: its tensors are not its configuration's.
static void expect_open_refused(run_fixture *f, const char *path, const ts_tensor *t, int n,
                                const ts_meta *meta, const char *word) {
  assert_int_equal(ts_ckpt_write_v2(path, t, n, meta, 5), TS_OK);
  for (int training = 0; training <= 1; training++) {
    ts_run_ckpt ck;
    assert_int_equal(ts_run_open_checkpoint(path, &f->cfg, training, 1, 1, &ck), TS_ERUNTIME);
    assert_null(ck.ck);
    if (!strstr(ts_errmsg(), path) || !strstr(ts_errmsg(), word))
      fail_msg("message lacks the file or '%s': %s", word, ts_errmsg());
  }
}

// The file written from t (n tensors) opens as a run's checkpoint, and its
// load into (m, opt) is refused naming the file and `word`.
static void expect_load_refused(run_fixture *f, const char *path, const ts_tensor *t, int n,
                                const ts_meta *meta, ts_model *m, ts_adamw *opt,
                                const char *word) {
  assert_int_equal(ts_ckpt_write_v2(path, t, n, meta, 5), TS_OK);
  ts_run_ckpt ck;
  if (ts_run_open_checkpoint(path, &f->cfg, opt != NULL, 1, 1, &ck)) fail_msg("%s", ts_errmsg());
  assert_int_equal(ts_run_load_checkpoint(m, opt, NULL, 0, &ck), TS_ERUNTIME);
  if (!strstr(ts_errmsg(), path) || !strstr(ts_errmsg(), word))
    fail_msg("message lacks the file or '%s': %s", word, ts_errmsg());
  ts_run_close_checkpoint(&ck);
}

// ts_compare_checkpoints: the same answer in either order, and a file
// without a run's metadata unreadable (2), not "different" from itself. The
// configurations were read over uninitialised fields: a field one file sets
// and the other leaves out kept the previous call's value, so the second
// order said "same model state".
static void test_compare_checkpoints(void **state) {
  run_fixture f;
  run_setup(&f);
  ts_ckpt *ck = NULL;
  assert_int_equal(ts_ckpt_open(f.path, &ck), TS_OK);
  char js[TS_CONFIG_JSON_MAX];
  snprintf(js, sizeof js, "%s", ts_ckpt_meta(ck, CFG_KEY));
  ts_ckpt_close(ck);
  char other[4200];
  path_in(other, sizeof other, "other-state.safetensors");
  write_edited(&f, other, CFG_KEY, replaced(js, "\"n_head\":4", "\"n_head\":4,\"proj_lr\":16"), 2);
  FILE *null = fopen("/dev/null", "w");
  assert_non_null(null);
  assert_int_equal(ts_compare_checkpoints(f.path, other, null), 1);
  assert_int_equal(ts_compare_checkpoints(other, f.path, null), 1);
  assert_int_equal(ts_compare_checkpoints(f.path, f.path, null), 0);
  assert_int_equal(ts_compare_checkpoints(other, other, null), 0);
  write_edited(&f, other, "tessera.step", NULL, 2);
  assert_int_equal(ts_compare_checkpoints(other, other, null), TS_EUSAGE);
  if (!strstr(ts_errmsg(), other) || !strstr(ts_errmsg(), "metadata has no tessera.step"))
    fail_msg("%s", ts_errmsg());
  assert_int_equal(ts_compare_checkpoints(f.path, other, null), TS_EUSAGE);
  fclose(null);
  run_teardown(&f);
}

// The tensors: exactly the model's, in its order, all finite.
static void test_run_tensors_checked(void **state) {
  run_fixture f;
  run_setup(&f);
  char bad[4200];
  path_in(bad, sizeof bad, "run-tensors.safetensors");
  ts_ckpt *ck0 = NULL;
  assert_int_equal(ts_ckpt_open(f.path, &ck0), TS_OK);
  ts_meta meta[5] = {{"tessera.config", NULL}, {"tessera.step", NULL}, {"tessera.adam_step", NULL},
                     {"tessera.data_position", NULL}, {"tessera.rng", NULL}};
  for (int i = 0; i < 5; i++) meta[i].value = strdup(ts_ckpt_meta(ck0, meta[i].key));
  ts_ckpt_close(ck0);
  ts_tensor *t;
  int n = ts_run_ckpt_tensors(f.m, &f.opt, &t);

  // a good load: the fresh model and optimizer get every bit back
  ts_model *m2 = NULL;
  ts_adamw opt2 = {0};
  assert_int_equal(ts_model_create(&f.cfg, &m2), TS_OK);
  assert_int_equal(ts_adamw_init(&opt2, ts_model_num_params(m2)), TS_OK);
  ts_run_ckpt ck;
  assert_int_equal(ts_run_open_checkpoint(f.path, &f.cfg, 1, 1, 1, &ck), TS_OK);
  if (ts_run_load_checkpoint(m2, &opt2, NULL, 0, &ck)) fail_msg("%s", ts_errmsg());
  ts_run_close_checkpoint(&ck);
  assert_memory_equal(ts_model_params(m2), ts_model_params(f.m), f.opt.n * sizeof(float));
  assert_memory_equal(opt2.v, f.opt.v, f.opt.n * sizeof(float));
  assert_int_equal(opt2.step, 2);

  // two same-size tensors swapped in the file (names and data move together:
  // the file is self-consistent, its order is not the model's)
  int a = -1, b = -1;
  for (int i = 0; i < n && b < 0; i++)
    if (!strcmp(t[i].name, "h.0.attn.bq")) a = i;
    else if (!strcmp(t[i].name, "h.0.attn.bk")) b = i;
  assert_true(a >= 0 && b > a && ts_tensor_numel(&t[a]) == ts_tensor_numel(&t[b]));
  ts_tensor sw = t[a];
  t[a] = t[b], t[b] = sw;
  expect_open_refused(&f, bad, t, n, meta, "out of order");
  t[b] = t[a], t[a] = sw;

  // one tensor missing (the last moment), one extra (evaluation too)
  expect_open_refused(&f, bad, t, n - 1, meta, "no tensor 'adam.v.lnf.b'");
  ts_tensor *more = calloc((size_t)n + 1, sizeof *more);
  memcpy(more, t, (size_t)n * sizeof *t);
  float x = 1.0f;
  more[n] = (ts_tensor){.name = "h.2.ln1.w", .ndim = 1, .shape = {1}, .data = &x};
  expect_open_refused(&f, bad, more, n + 1, meta, "'h.2.ln1.w' is not one of this model's");
  free(more);
  // a model whose tensors are the file's but not the run's: the load says so
  ts_config other = f.cfg;
  other.d_ff *= 2;
  ts_model *m3 = NULL;
  assert_int_equal(ts_model_create(&other, &m3), TS_OK);
  expect_load_refused(&f, bad, t, n, meta, m3, NULL, "has shape");
  ts_model_free(m3);

  // a NaN in the weights (evaluation) and an Inf in a moment: refused on load
  float *w = ts_model_params(f.m), keep = w[5];
  w[5] = NAN;
  expect_load_refused(&f, bad, t, n, meta, m2, NULL, "'wte' holds nan at index 5");
  w[5] = keep;
  f.opt.v[7] = INFINITY;
  expect_load_refused(&f, bad, t, n, meta, m2, &opt2, "'adam.v.wte' holds inf at index 7");
  // and never written: the step is not checkpointed, the earlier file stays
  assert_int_equal(ts_run_save_checkpoint(NULL, f.m, &f.opt, NULL, 0, &f.cfg, 3), TS_ERUNTIME);
  if (!strstr(ts_errmsg(), "step 3: the update left inf in 'adam.v.wte'"))
    fail_msg("%s", ts_errmsg());
  char p3[4200];
  snprintf(p3, sizeof p3, "%s/step-00000003.safetensors", f.cfg.ckpt_dir);
  assert_int_equal(access(p3, F_OK), -1);
  assert_int_equal(count_temp_files(f.cfg.ckpt_dir), 0);

  free(t);
  for (int i = 0; i < 5; i++) free((char *)meta[i].value);
  ts_adamw_free(&opt2);
  ts_model_free(m2);
  run_teardown(&f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_crc_reference),
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_layout),
      cmocka_unit_test(test_deterministic),
      cmocka_unit_test(test_reads_other_writers),
      cmocka_unit_test(test_truncated),
      cmocka_unit_test(test_flipped_data_byte),
      cmocka_unit_test(test_appended_bytes),
      cmocka_unit_test(test_header_length),
      cmocka_unit_test(test_garbage_json),
      cmocka_unit_test(test_bad_header_content),
      cmocka_unit_test(test_missing_or_misshapen_tensor),
      cmocka_unit_test(test_v2_layout),
      cmocka_unit_test(test_v2_every_header_bit),
      cmocka_unit_test(test_expect),
      cmocka_unit_test(test_v2_bad_checksum),
      cmocka_unit_test(test_run_header_checked),
      cmocka_unit_test(test_run_tensors_checked),
      cmocka_unit_test(test_compare_checkpoints),
      cmocka_unit_test(test_bad_inputs),
      cmocka_unit_test(test_write_missing_directory),
      cmocka_unit_test(test_failed_rename_leaves_no_temp),
      cmocka_unit_test(test_failed_overwrite_keeps_old),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
