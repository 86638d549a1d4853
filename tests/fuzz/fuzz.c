// A mutation fuzzer over what tessera reads back (docs/FUZZING.md): the
// checkpoint reader (ts_ckpt_open, the --resume path, tessera eval), the
// configuration's JSON (ts_config_from_json, ts_config_finalize) and the run
// log reader (tessera compare). Run by tests/fuzz/run.sh, which makes the
// seed files with tessera itself:
//
//   fuzz --seeds DIR --tessera BIN --data CORPUS --work DIR [--cases N]
//        [--seed S] [--first K] [--exec-every E] [--keep DIR] [--verbose]
//
// Case k of seed S is a function of (S, k) alone, so `--first k --cases 1`
// replays it. Each case is one seed file, mutated, then read in a child
// process (fork) under a time and memory limit; a sample of them is also
// given to the tessera binary itself (exec). Every read must end in success
// or a clean refusal: the documented status, one line of message naming the
// file; never a signal, a hang or a silently different result. What counts
// as "different" depends on the mode:
//
//   raw    the bytes are mutated and nothing else: every change must be
//          refused (formats 2 and 3 checksum header and data; format 3
//          leaves the run's own settings out, which change no value), so whatever is
//          accepted must load exactly the seed's values, step and config.
//   fixed  after the edits the CRCs are recomputed (the header's as
//          src/train/ckpt.c documents it, and usually the data's), so that the
//          edits reach the parsers and the checks behind the checksums.
//          What is accepted must keep every promise of the reader: finite
//          values, step = adam_step in 1..steps, a resume only of the same
//          run (the configuration equal but for the fields a resume may
//          change, --steps among them), a configuration that survives its
//          own round trip.
//
// The parent never runs OpenMP code (the children do, after fork).
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "train/ckpt.h"
#include "tools/compare.h"
#include "train/optim.h"
#include "run/run.h"
#include "tessera.h"
#include "base/util.h"

#define CASE_SECONDS 30             // a case that runs longer hangs
#define CASE_MEMORY (3ull << 30)    // address space of a case's process
#define REFUSAL_RSS_MB 512.0        // a refusal may not first allocate more than this
// Under AddressSanitizer (the CI's sanitizer build) the address space is the
// sanitizer's shadow and the resident memory its bookkeeping: neither limit
// applies, and the sanitizer reports what they would have caught and more.
#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif
#if SANITIZED
#include <sanitizer/lsan_interface.h>
#endif

// ---------------------------------------------------------------------------
// Small things: a counter-based generator, CRC-32, growable byte buffers.

typedef struct {
  uint64_t s;
} rng;

static uint64_t next(rng *r) { // splitmix64
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static size_t below(rng *r, size_t n) { return n ? (size_t)(next(r) % n) : 0; }
static int chance(rng *r, int percent) { return (int)below(r, 100) < percent; }
#define PICK(r, arr) (arr[below(r, sizeof arr / sizeof arr[0])])

// CRC-32 as zlib computes it (reflected 0xEDB88320), bytewise: the format's
// checksums recomputed independently of src/train/ckpt.c, from its description.
static uint32_t crc_table[256];
static void crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0xEDB88320u : c >> 1;
    crc_table[i] = c;
  }
}
static uint32_t crc32_update(uint32_t crc, const void *p, size_t n) {
  const unsigned char *b = p;
  uint32_t c = ~crc;
  while (n--) c = (c >> 8) ^ crc_table[(c ^ *b++) & 0xFF];
  return ~c;
}

typedef struct {
  unsigned char *p;
  size_t n;
} buf;

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "fuzz: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  exit(99);
}

static void b_set(buf *b, const void *p, size_t n) {
  b->p = malloc(n + 1);
  if (!b->p) die("out of memory");
  if (n) memcpy(b->p, p, n);
  b->p[n] = 0;
  b->n = n;
}
static void b_free(buf *b) {
  free(b->p);
  b->p = NULL;
  b->n = 0;
}
// Replaces b[at, at + len) by the k bytes of s.
static void b_splice(buf *b, size_t at, size_t len, const void *s, size_t k) {
  if (at > b->n) at = b->n;
  if (len > b->n - at) len = b->n - at;
  unsigned char *p = malloc(b->n - len + k + 1);
  if (!p) die("out of memory");
  memcpy(p, b->p, at);
  if (k) memcpy(p + at, s, k);
  memcpy(p + at + k, b->p + at + len, b->n - at - len);
  b->n = b->n - len + k;
  p[b->n] = 0;
  free(b->p);
  b->p = p;
}
// The first occurrence of s in b at or after from; (size_t)-1 when none.
static size_t b_find(const buf *b, size_t from, const char *s) {
  size_t k = strlen(s);
  for (size_t i = from; k <= b->n && i + k <= b->n; i++)
    if (!memcmp(b->p + i, s, k)) return i;
  return (size_t)-1;
}
// The i-th occurrence (0-based, modulo their number) of s; -1 when none.
static size_t b_find_nth(const buf *b, const char *s, size_t i) {
  size_t count = 0;
  for (size_t at = b_find(b, 0, s); at != (size_t)-1; at = b_find(b, at + 1, s)) count++;
  if (!count) return (size_t)-1;
  i %= count;
  size_t at = b_find(b, 0, s);
  while (i--) at = b_find(b, at + 1, s);
  return at;
}

static int read_file(const char *path, buf *b) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *p = malloc((size_t)n + 1);
  if (!p || fread(p, 1, (size_t)n, f) != (size_t)n) die("cannot read %s", path);
  fclose(f);
  p[n] = 0;
  b->p = p;
  b->n = (size_t)n;
  return 0;
}
static void write_file(const char *path, const buf *b) {
  FILE *f = fopen(path, "wb");
  if (!f || (b->n && fwrite(b->p, 1, b->n, f) != b->n) || fclose(f) != 0)
    die("cannot write %s: %s", path, strerror(errno));
}

// ---------------------------------------------------------------------------
// Mutators. Each appends its name to the case's description.

typedef struct {
  char what[512];
} desc;
static void note(desc *d, const char *fmt, ...) {
  size_t k = strlen(d->what);
  if (k + 2 >= sizeof d->what) return;
  if (k) d->what[k++] = ' ';
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(d->what + k, sizeof d->what - k, fmt, ap);
  va_end(ap);
}

// Generic byte mutations of b[lo, hi).
static void mutate_bytes(rng *r, buf *b, size_t lo, size_t hi, desc *d) {
  if (hi > b->n) hi = b->n;
  if (lo >= hi) return;
  static const unsigned char interesting[] = {0, 0xff, 0x7f, 0x80, '"', '\\', '{', '}', '[', ']',
                                              ',', ':', '0', '1', '9', '-', '.', 'e', ' ', '\n',
                                              0xc0, 0xe0, 0xf4};
  size_t at = lo + below(r, hi - lo);
  switch (below(r, 7)) {
  case 0: { // a few bit flips
    int n = 1 + (int)below(r, 8);
    for (int i = 0; i < n; i++) b->p[lo + below(r, hi - lo)] ^= (unsigned char)(1u << below(r, 8));
    note(d, "flip%d@%zu", n, at);
    break;
  }
  case 1:
    b->p[at] = PICK(r, interesting);
    note(d, "byte@%zu=%02x", at, b->p[at]);
    break;
  case 2: { // truncate
    size_t cut = lo + below(r, hi - lo);
    b_splice(b, cut, b->n - cut, NULL, 0);
    note(d, "truncate@%zu", cut);
    break;
  }
  case 3: { // insert bytes
    unsigned char ins[8];
    size_t k = 1 + below(r, sizeof ins);
    for (size_t i = 0; i < k; i++) ins[i] = chance(r, 50) ? PICK(r, interesting) : (unsigned char)next(r);
    b_splice(b, at, 0, ins, k);
    note(d, "insert%zu@%zu", k, at);
    break;
  }
  case 4: { // delete bytes
    size_t k = 1 + below(r, 16);
    b_splice(b, at, k, NULL, 0);
    note(d, "delete%zu@%zu", k, at);
    break;
  }
  case 5: { // duplicate a chunk
    size_t k = 1 + below(r, 64);
    if (at + k > b->n) k = b->n - at;
    unsigned char *tmp = malloc(k);
    memcpy(tmp, b->p + at, k);
    b_splice(b, lo + below(r, hi - lo), 0, tmp, k);
    free(tmp);
    note(d, "dup%zu@%zu", k, at);
    break;
  }
  default: { // overwrite a run with one byte
    size_t k = 1 + below(r, 32);
    if (at + k > b->n) k = b->n - at;
    memset(b->p + at, PICK(r, interesting), k);
    note(d, "fill%zu@%zu", k, at);
    break;
  }
  }
}

// Many members inserted after the opening brace at b[at] (quote q, values
// strings or numbers), the last maybe repeating the first: an object of up
// to 200000 members, which a reader must not take quadratic time over.
static void widen(rng *r, buf *b, size_t at, const char *q, int strings, desc *d) {
  int n = chance(r, 50) ? 1000 + (int)below(r, 1000) : 100000 + (int)below(r, 100000);
  int dup = chance(r, 50);
  size_t cap = (size_t)n * (24 + 4 * strlen(q)) + 64, k = 0;
  char *ins = malloc(cap);
  if (!ins) die("out of memory");
  for (int i = 0; i < n; i++)
    k += (size_t)snprintf(ins + k, cap - k, "%sw%d%s:%s,", q, dup && i == n - 1 ? 0 : i, q,
                          strings ? (q[1] ? "\\\"\\\"" : "\"\"") : "0");
  b_splice(b, at + 1, 0, ins, k);
  free(ins);
  note(d, "widen%d%s", n, dup ? "+dup" : "");
}

// b = the first part of a, the rest of c (cut points anywhere).
static void splice_files(rng *r, buf *b, const buf *c, desc *d) {
  size_t i = below(r, b->n + 1), j = below(r, c->n + 1);
  if (chance(r, 50)) j = i < c->n ? i : c->n; // the same offset: two files of one kind
  b_splice(b, i, b->n - i, c->p + j, c->n - j);
  note(d, "splice@%zu+%zu", i, j);
}

// The value after key (a JSON member name, quotes included, e.g. "\"step\":")
// starting at *at: through the next ',' '}' or ']' at depth 0 outside strings.
static size_t value_end(const buf *b, size_t from, const char *q) {
  int depth = 0, in_str = 0;
  size_t qn = strlen(q);
  for (size_t i = from; i < b->n; i++) {
    if (!in_str && (b->p[i] == '{' || b->p[i] == '[')) depth++;
    else if (!in_str && (b->p[i] == '}' || b->p[i] == ']')) {
      if (depth-- == 0) return i;
    } else if (!in_str && depth == 0 && b->p[i] == ',')
      return i;
    if (i + qn <= b->n && !memcmp(b->p + i, q, qn)) {
      // an escaped quote of the embedded form is \" and the plain form's is "
      if (qn == 1 && i > 0 && b->p[i - 1] == '\\') continue;
      in_str = !in_str;
      i += qn - 1;
    }
  }
  return b->n;
}

// Sets the value of member `key` (found in b as q key q ':'; the i-th such
// member) to text; 0 when there is no such member.
static int set_member(buf *b, const char *q, const char *key, const char *text, size_t i) {
  char pat[128];
  snprintf(pat, sizeof pat, "%s%s%s:", q, key, q);
  size_t at = b_find_nth(b, pat, i);
  if (at == (size_t)-1) return 0;
  size_t v = at + strlen(pat), e = value_end(b, v, q);
  b_splice(b, v, e - v, text, strlen(text));
  return 1;
}

// The configuration's fields and values worth trying, in the form they take
// inside the JSON (q is the quote: " plain, \" inside the checkpoint header).
static const char *const config_keys[] = {
    "preset", "variant", "vocab", "d", "n_layer", "n_head", "n_kv_head", "rope_theta",
    "rope_theta_hex", "d_ff", "seq", "tied", "dropout", "dropout_hex", "batch", "steps", "seed",
    "tile", "leaf", "lr", "lr_hex", "min_lr_frac", "min_lr_frac_hex", "weight_decay", "beta1",
    "beta2_hex", "eps_hex", "grad_clip", "warmup", "val_frac_hex", "eval_every", "eval_batches",
    "threads", "fast", "optimizer", "muon_lr", "checkpoint", "fused_ce", "tiled_mlp", "compress",
    "compress_rank", "compress_stages", "proj_lr", "vq_groups", "vq_codes", "data_format",
    "data_path", "val_path", "log_path", "ckpt_dir", "ckpt_every", "resume", "quiet"};
static const char *const number_values[] = {
    "0", "1", "2", "3", "4", "7", "8", "16", "64", "-1", "-2147483648", "2147483647",
    "2147483648", "200000000", "99999999999999999999", "18446744073709551615",
    "18446744073709551616", "1.5", "0.5", "1e3", "1e-45", "1e39", "-0", "0.0", "1E2", "nan",
    "inf", "-inf", "NaN", "Infinity", "null", "true", "false", "[]", "{}", "[1]", "01", "+1",
    "1x", "", "0x10", "9223372036854775808", "1024", "4096", "10000", "100000"};
static const char *const string_values[] = {"", "x", "tiny", "llama", "gpt", "mini", "0x1p+0",
                                            "0x1.0624dep-10", "-0x1p+0", "nan", "inf", "0x1p+128",
                                            "0x1p-150", "0x", "1.5", "/dev/null", "\\u0001",
                                            "\\u00e9", "\\ud800"};

// Hex floats (%a) a run could have written.
static const char *const hex_values[] = {"0x1p+0", "0x1p+1", "0x1.8p+3", "0x1p-10", "0x1p+20",
                                         "0x0p+0", "-0x0p+0", "-0x1p+0", "0x1p-149",
                                         "0x1.fffffep+127", "0x1.4p+13", "0x1.e848p+19"};

// A value near the one a field has (orig, its JSON text with quote q): what a
// flipped digit or a run with another flag would have written, which the
// syntax checks cannot tell from the real one.
static int plausible_value(rng *r, const char *orig, const char *q, char *out, size_t cap) {
  size_t qn = strlen(q);
  if (!strncmp(orig, q, qn)) { // a string: a hex float, or a name
    if (strstr(orig, "0x")) return snprintf(out, cap, "%s%s%s", q, PICK(r, hex_values), q), 1;
    return 0;
  }
  char *end;
  long long v = strtoll(orig, &end, 10);
  if (end == orig || (*end && *end != ',' && *end != '}')) { // a decimal float
    double x = strtod(orig, NULL);
    static const double f[] = {2.0, 0.5, -1.0, 0.0, 1e3, 1.0000001};
    return snprintf(out, cap, "%.9g", x * PICK(r, f)), 1;
  }
  static const long long add[] = {1, -1, 2, -2};
  switch (below(r, 6)) {
  case 0: case 1: v += PICK(r, add); break;
  case 2: v *= 2; break;
  case 3: v /= 2; break;
  case 4: v *= 16; break;
  default: v = -v; break;
  }
  return snprintf(out, cap, "%lld", v), 1;
}

// A value for a config field, as JSON text with quote q.
static void config_value(rng *r, const char *q, char *out, size_t cap) {
  if (chance(r, 70)) {
    snprintf(out, cap, "%s", PICK(r, number_values));
  } else if (chance(r, 90)) {
    snprintf(out, cap, "%s%s%s", q, PICK(r, string_values), q);
  } else { // a long string: the path fields hold at most 4095 bytes
    size_t n = 4000 + below(r, 200), k = 0;
    k += (size_t)snprintf(out, cap, "%s", q);
    for (size_t i = 0; i < n && k + 8 < cap; i++) out[k++] = 'a';
    snprintf(out + k, cap - k, "%s", q);
  }
}

// One edit of a configuration's JSON inside b: a field's value, a field
// dropped, repeated or added.
static void edit_config(rng *r, buf *b, const char *q, desc *d) {
  const char *key = PICK(r, config_keys);
  char val[4400];
  int how = (int)below(r, 10);
  char pat[128];
  snprintf(pat, sizeof pat, "%s%s%s:", q, key, q);
  size_t at = b_find(b, 0, pat);
  int near = 0;
  if (at != (size_t)-1 && chance(r, 50)) {
    size_t v = at + strlen(pat), e = value_end(b, v, q);
    char *orig = strndup((const char *)b->p + v, e - v);
    near = plausible_value(r, orig, q, val, sizeof val);
    free(orig);
  }
  if (!near) config_value(r, q, val, sizeof val);
  if (how < 7 && at != (size_t)-1) {
    set_member(b, q, key, val, 0);
    note(d, "config.%s=%.40s", key, val);
  } else if (how < 8 && at != (size_t)-1) { // drop it (and its comma)
    size_t e = value_end(b, at + strlen(pat), q);
    if (e < b->n && b->p[e] == ',') e++;
    else if (at > 0 && b->p[at - 1] == ',') at--;
    b_splice(b, at, e - at, NULL, 0);
    note(d, "config.-%s", key);
  } else { // add it (again) after the opening brace
    size_t open = b_find(b, 0, q[1] ? "\"{\\\"" : "{\"");
    if (open == (size_t)-1) return;
    open += q[1] ? 2 : 1;
    char ins[4600];
    snprintf(ins, sizeof ins, "%s%s%s:%s,", q, key, q, val);
    b_splice(b, open, 0, ins, strlen(ins));
    note(d, "config.+%s=%.40s", key, val);
  }
}

// ---------------------------------------------------------------------------
// Checkpoints: the header-aware mutators, then the checksums recomputed.

static uint64_t get_len(const buf *b) {
  uint64_t n = 0;
  for (int i = 7; i >= 0 && b->n >= 8; i--) n = n << 8 | b->p[i];
  return b->n >= 8 ? n : 0;
}
static void put_len(buf *b, uint64_t n) {
  for (int i = 0; i < 8 && b->n >= 8; i++) b->p[i] = (unsigned char)(n >> (8 * i));
}

// The header as its own buffer (and the data after it), when the length word
// is plausible.
static int split(const buf *f, buf *hdr, buf *data) {
  uint64_t n = get_len(f);
  if (f->n < 8 || n > f->n - 8) return 0;
  b_set(hdr, f->p + 8, (size_t)n);
  b_set(data, f->p + 8 + n, f->n - 8 - (size_t)n);
  return 1;
}
static void join(buf *f, const buf *hdr, const buf *data) {
  b_free(f);
  unsigned char len8[8] = {0};
  b_set(f, len8, 8);
  b_splice(f, 8, 0, hdr->p, hdr->n);
  b_splice(f, f->n, 0, data->p, data->n);
  put_len(f, hdr->n);
}

static const char *const meta_keys[] = {"tessera.step", "tessera.adam_step",
                                        "tessera.data_position", "tessera.rng", "tessera.format",
                                        "tessera.data_crc32"};
static const char *const meta_values[] = {
    "0", "1", "2", "3", "4", "-1", "007", "02", "abc", "", " 2", "2 ", "+2", "1e1", "2.0",
    "9223372036854775807", "9223372036854775808", "99999999999999999999", "\\u0032",
    "philox4x32-10", "1", "3", "00000000", "ffffffff", "DEADBEEF"};

static void edit_header(rng *r, buf *h, desc *d, int step) {
  // the configuration and the metadata most often: behind the checksum they
  // are what only the checks of the readers stand guard over
  static const int kinds[] = {0, 1, 1, 2, 2, 3, 4, 4, 4, 5, 5, 5, 5, 5, 5, 6, 7, 7, 8, 8,
                              0, 1, 2, 4, 5, 5, 6, 7, 8, 8, 5, 4, 1, 2, 3, 5, 4, 8, 7, 9};
  switch (PICK(r, kinds)) {
  case 0: { // dtype
    static const char *const v[] = {"\"F16\"", "\"BF16\"", "\"F64\"", "\"I32\"", "\"U8\"",
                                    "\"\"", "\"f32\"", "\"F32 \"", "32", "null", "[\"F32\"]"};
    const char *val = PICK(r, v);
    size_t i = next(r);
    if (set_member(h, "\"", "dtype", val, i)) note(d, "dtype=%s", val);
    break;
  }
  case 1: { // shape
    static const char *const v[] = {"[]", "[0]", "[-1]", "[1,1]", "[64]", "[18446744073709551615]",
                                    "[18446744073709551616]", "[9223372036854775808]",
                                    "[4294967296,4294967296]", "[1.5]", "[1e3]", "[\"3\"]",
                                    "[[1]]", "[1,2,3,4,5,6,7,8,9]", "[0,0]", "[32,0]", "[2,16]",
                                    "[16,2]", "[33]", "[31]", "3", "null"};
    const char *val = PICK(r, v);
    if (set_member(h, "\"", "shape", val, next(r))) note(d, "shape=%s", val);
    break;
  }
  case 2: { // data_offsets
    char val[96];
    static const char *const v[] = {"[0,0]", "[0]", "[1,2,3]", "[-4,0]", "[4,0]",
                                    "[0,18446744073709551615]", "[18446744073709551612,18446744073709551616]",
                                    "[\"0\",\"4\"]", "null", "[0.0,4]"};
    size_t i = next(r);
    size_t at = b_find_nth(h, "\"data_offsets\":[", i);
    if (at == (size_t)-1) break;
    unsigned long long b0 = 0, e0 = 0;
    sscanf((const char *)h->p + at + 16, "%llu,%llu", &b0, &e0);
    long long db = (long long)below(r, 3) * 4 - 4, de = (long long)below(r, 3) * 4 - 4;
    if (chance(r, 60))
      snprintf(val, sizeof val, "[%lld,%lld]", (long long)b0 + db, (long long)e0 + de);
    else if (chance(r, 30))
      snprintf(val, sizeof val, "[%llu,%llu]", e0, b0);
    else
      snprintf(val, sizeof val, "%s", PICK(r, v));
    set_member(h, "\"", "data_offsets", val, i);
    note(d, "offsets=%s", val);
    break;
  }
  case 3: { // two tensors' offsets swapped
    size_t i = next(r), j = next(r);
    size_t a = b_find_nth(h, "\"data_offsets\":[", i), c = b_find_nth(h, "\"data_offsets\":[", j);
    if (a == (size_t)-1 || a == c) break;
    char va[64], vc[64];
    size_t ea = value_end(h, a + 15, "\""), ec = value_end(h, c + 15, "\"");
    snprintf(va, sizeof va, "%.*s", (int)(ea - a - 15), (const char *)h->p + a + 15);
    snprintf(vc, sizeof vc, "%.*s", (int)(ec - c - 15), (const char *)h->p + c + 15);
    set_member(h, "\"", "data_offsets", vc, i);
    set_member(h, "\"", "data_offsets", va, j);
    note(d, "swap-offsets");
    break;
  }
  case 4: { // metadata values (step, adam_step, …)
    const char *key = PICK(r, meta_keys);
    char val[64];
    if (chance(r, 10))
      snprintf(val, sizeof val, "%s", chance(r, 50) ? "3" : "null");
    else if (chance(r, 30))
      snprintf(val, sizeof val, "\"%d\"", step + (int)below(r, 3) - 1);
    else
      snprintf(val, sizeof val, "\"%s\"", PICK(r, meta_values));
    if (set_member(h, "\"", key, val, 0)) note(d, "%s=%s", key, val);
    break;
  }
  case 5: // the configuration
    edit_config(r, h, "\\\"", d);
    break;
  case 6: { // a tensor renamed
    static const char *const v[] = {"wtf", "__metadata__", "", "adam.m.wte", "wpe", "lnf.b",
                                    "h.0.ln1.w", "h.9.ln1.w", "lm_head", "\\u0000", "wte\\n"};
    size_t at = b_find_nth(h, "\":{\"dtype\"", next(r));
    if (at == (size_t)-1) break;
    size_t start = at;
    while (start > 0 && h->p[start - 1] != '"') start--;
    const char *val = PICK(r, v);
    b_splice(h, start, at - start, val, strlen(val));
    note(d, "rename=%s", val);
    break;
  }
  case 7: { // a metadata pair repeated, or dropped
    const char *key = PICK(r, meta_keys);
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    size_t at = b_find(h, 0, pat);
    if (at == (size_t)-1) break;
    size_t e = value_end(h, at + strlen(pat), "\"");
    if (chance(r, 50)) {
      char *copy = strndup((const char *)h->p + at, e - at);
      b_splice(h, at, 0, ",", 1);
      b_splice(h, at, 0, copy, strlen(copy));
      free(copy);
      note(d, "repeat-%s", key);
    } else {
      if (e < h->n && h->p[e] == ',') e++;
      b_splice(h, at, e - at, NULL, 0);
      note(d, "drop-%s", key);
    }
    break;
  }
  case 9: { // a very wide metadata map, or configuration
    size_t at = chance(r, 50) ? b_find(h, 0, "{\"__metadata__\":{") : b_find(h, 0, "\"{\\\"");
    if (at == (size_t)-1) break;
    if (h->p[at + 1] == '"' && h->p[at + 2] == '_') widen(r, h, at + 16, "\"", 1, d);
    else widen(r, h, at + 1, "\\\"", 0, d);
    break;
  }
  default: // bytes of the header
    mutate_bytes(r, h, 0, h->n, d);
    break;
  }
}

// Recomputes tessera.data_crc32 over the data section and (after it, as it
// covers those digits) tessera.header_crc32 as src/train/ckpt.c describes: the CRC
// of the header with its own 8 digits read as '0', in format 2 after the
// length word, in format 3 up to its last non-space byte with the run member
// (',"tessera.run":"…"') left out. On the file as it stands, with the header
// its length word says.
static void fix_crcs(buf *f, int data_too) {
  uint64_t n = get_len(f);
  if (f->n < 8 || n > f->n - 8) return;
  buf h = {f->p + 8, (size_t)n};
  char hex[9];
  size_t at = b_find(&h, 0, "\"tessera.data_crc32\":\"");
  if (data_too && at != (size_t)-1 && at + 22 + 8 <= h.n) {
    snprintf(hex, sizeof hex, "%08x", (unsigned)crc32_update(0, f->p + 8 + n, f->n - 8 - n));
    memcpy(h.p + at + 22, hex, 8);
  }
  at = b_find(&h, 0, "\"tessera.header_crc32\":\"");
  if (at == (size_t)-1 || at + 24 + 8 > h.n) return;
  at += 24;
  memcpy(h.p + at, "00000000", 8);
  uint32_t crc;
  if (b_find(&h, 0, "\"tessera.format\":\"3\"") == (size_t)-1) {
    crc = crc32_update(0, f->p, 8 + n);
  } else {
    size_t end = h.n, lo, hi;
    while (end > 0 && h.p[end - 1] == ' ') end--;
    lo = hi = b_find(&h, 0, ",\"tessera.run\":\"");
    if (lo == (size_t)-1) {
      lo = hi = end;
    } else {
      hi = lo + 16;
      while (hi < end && h.p[hi] != '"') hi += h.p[hi] == '\\' ? 2 : 1;
      if (hi < end) hi++;
      if (hi > end) hi = end;
    }
    if (lo > end) lo = hi = end;
    crc = crc32_update(crc32_update(0, h.p, lo), h.p + hi, end - hi);
  }
  snprintf(hex, sizeof hex, "%08x", (unsigned)crc);
  memcpy(h.p + at, hex, 8);
}

// ---------------------------------------------------------------------------
// The seeds and what the readers must say about them.

typedef struct {
  char path[4200];
  buf bytes;
  int format;             // 1 or 2
  int64_t step;           // format 2: its tessera.step
  ts_config cfg;          // format 2: its configuration (the run's)
  uint64_t digest;        // format 2: FNV-1a of parameters and moments as loaded
  char cfg_json[TS_CONFIG_JSON_MAX];
} ckpt_seed;

typedef struct {
  const char *tessera, *data, *work, *keep;
  ckpt_seed ck[3];
  int nck;
  buf logs[2];
  char log_path[2][4200];
  char config_json[2][TS_CONFIG_JSON_MAX];
  int nconfig;
  ts_config eval_base; // what `tessera eval --data CORPUS --eval-batches 1` starts from
  int verbose;
} world;

static uint64_t digest_of(ts_model *m, const ts_adamw *opt) {
  size_t np = ts_model_num_params(m);
  uint64_t h = ts_fnv1a64(TS_FNV_OFFSET, ts_model_params(m), np * sizeof(float));
  h = ts_fnv1a64(h, opt->m, np * sizeof(float));
  return ts_fnv1a64(h, opt->v, np * sizeof(float));
}

// Loads a format-2 checkpoint the way --resume does, with cfg as the run's
// flags: its model, moments, step. TS_OK or the reader's error.
static int load_as_resume(const ts_config *cfg, ts_run_ckpt *ck, ts_model **m, ts_adamw *opt) {
  ts_config run = *cfg; // the resume resolves its data into it
  int rc = ts_run_open_resume(&run, 1, 1, ck);
  if (rc) return rc;
  if (!ck->ck) return ts_fail(TS_ERUNTIME, "no checkpoint to resume from");
  if ((rc = ts_model_create(&run, m))) return rc;
  if ((rc = ts_adamw_init(opt, ts_model_num_params(*m)))) return rc;
  return ts_run_load_checkpoint(*m, opt, NULL, 0, ck);
}

// The case's directory (the resume path reads the latest step-*.safetensors
// of a directory); --work is short enough for a --ckpt-dir.
static void case_dir(const world *w, char *dir, size_t cap) {
  if ((size_t)snprintf(dir, cap, "%s/case", w->work) >= cap) die("--work %s: too long", w->work);
}

// The checkpoint at path made something other than a plain file (a case in
// eight): a link to the same bytes, which every reader follows and judges as
// the file itself; a directory, a FIFO, a dangling link or a link to itself,
// which every reader refuses in one line naming it, and never waits on.
static void place_oddly(rng *r, const world *w, const char *path, desc *d) {
  char other[2400];
  int rc = 0;
  switch (below(r, 5)) {
  case 0:
    snprintf(other, sizeof other, "%s/linked.safetensors", w->work);
    unlink(other);
    rc = rename(path, other) || symlink(other, path);
    note(d, "as-link");
    break;
  case 1:
    rc = unlink(path) || mkdir(path, 0777);
    note(d, "as-directory");
    break;
  case 2:
    rc = unlink(path) || mkfifo(path, 0666);
    note(d, "as-fifo");
    break;
  case 3:
    snprintf(other, sizeof other, "%s/nothere.safetensors", w->work);
    rc = unlink(path) || symlink(other, path);
    note(d, "as-dangling-link");
    break;
  default:
    rc = unlink(path) || symlink(path, path);
    note(d, "as-link-loop");
  }
  if (rc) die("cannot place %s oddly: %s", path, strerror(errno));
}

// An empty case directory: the resume path takes the latest checkpoint there.
static void clear_dir(const char *dir) {
  mkdir(dir, 0777);
  DIR *d = opendir(dir);
  if (!d) die("cannot open %s: %s", dir, strerror(errno));
  struct dirent *e;
  char p[4400];
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
      snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
      if (unlink(p) != 0) rmdir(p); // (place_oddly's directory)
    }
  closedir(d);
}

static void load_seeds(world *w, const char *dir) {
  static const char *const names[] = {"gpt.safetensors", "llama.safetensors", "f1.safetensors"};
  for (int i = 0; i < 3; i++) {
    ckpt_seed *s = &w->ck[w->nck];
    snprintf(s->path, sizeof s->path, "%s/%s", dir, names[i]);
    if (read_file(s->path, &s->bytes)) continue;
    ts_ckpt *ck;
    if (ts_ckpt_open(s->path, &ck)) die("seed %s: %s", s->path, ts_errmsg());
    s->format = ts_ckpt_format(ck);
    ts_ckpt_close(ck);
    if (s->format >= 2) {
      ts_run_ckpt rk;
      ts_config base = w->eval_base;
      if (ts_run_open_checkpoint(s->path, &base, 1, 1, 1, &rk)) die("seed %s: %s", s->path, ts_errmsg());
      s->step = rk.step;
      s->cfg = rk.cfg;
      ts_run_close_checkpoint(&rk);
      // the resume path on the seed itself: what every accepted raw mutant must give
      char cd[2048], p[2200];
      case_dir(w, cd, sizeof cd);
      mkdir(cd, 0777);
      snprintf(p, sizeof p, "%s/step-%08" PRId64 ".safetensors", cd, s->step);
      write_file(p, &s->bytes);
      ts_config run = s->cfg;
      memcpy(run.ckpt_dir, cd, strlen(cd) + 1);
      ts_model *m = NULL;
      ts_adamw opt = {0};
      if (load_as_resume(&run, &rk, &m, &opt)) die("seed %s resumed: %s", s->path, ts_errmsg());
      s->digest = digest_of(m, &opt);
      ts_run_close_checkpoint(&rk);
      ts_model_free(m);
      ts_adamw_free(&opt);
      unlink(p);
      if (ts_config_to_json(&s->cfg, s->cfg_json, sizeof s->cfg_json)) die("%s", ts_errmsg());
      if (w->nconfig < 2) memcpy(w->config_json[w->nconfig++], s->cfg_json, strlen(s->cfg_json) + 1);
    }
    w->nck++;
  }
  if (w->nck == 0 || w->ck[0].format < 2) die("no checksummed checkpoint seed (gpt.safetensors) in %s", dir);
  for (int i = 0; i < 2; i++) {
    snprintf(w->log_path[i], sizeof w->log_path[i], "%s/%s", dir, i ? "b.jsonl" : "a.jsonl");
    if (read_file(w->log_path[i], &w->logs[i])) die("no %s", w->log_path[i]);
  }
}

// ---------------------------------------------------------------------------
// The children: each check ends the process with 0 (all as promised) or 3
// and a line on stderr saying what was broken.

static char why_path[2300]; // where a child says what it found broken
static void broken(const char *fmt, ...) {
  char why[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  FILE *f = fopen(why_path, "w");
  if (f) fprintf(f, "%s\n", why), fclose(f);
  else fprintf(stderr, "%s\n", why);
  _exit(3);
}

static void clear_error(void) { ts_fail(TS_OK, "%s", ""); }

// rc must be TS_OK or one of the refusals in `allowed` (bit per code), and a
// refusal's message one line, naming `path` when it is not NULL.
static void expect_clean(const char *who, int rc, unsigned allowed, const char *path) {
  if (rc == TS_OK) return;
  if (rc < 0 || rc > 8 || !(allowed & (1u << rc))) broken("%s: return code %d: %s", who, rc, ts_errmsg());
  const char *m = ts_errmsg();
  if (!strcmp(m, "unknown error") || !m[0]) broken("%s: refused (%d) without a message", who, rc);
  if (strchr(m, '\n')) broken("%s: a message of more than one line: %s", who, m);
  if (path && !strstr(m, path)) broken("%s: the message does not name %s: %s", who, path, m);
}

// The configuration fields a resume may change (they change no result, or
// name files) are blanked in both: any other difference between an accepted
// checkpoint's configuration and the run's means another run was resumed.
static void same_run(const ts_config *ran, const ts_config *ck) {
  char a[TS_CONFIG_JSON_MAX], b[TS_CONFIG_JSON_MAX];
  ts_config x = *ran, y = *ck;
  x.data_path[0] = y.data_path[0] = x.log_path[0] = y.log_path[0] = 0;
  // a --val-data file's path may change, not whether there is one (DATA.md)
  snprintf(x.val_path, sizeof x.val_path, "%s", x.val_path[0] ? "set" : "");
  snprintf(y.val_path, sizeof y.val_path, "%s", y.val_path[0] ? "set" : "");
  x.ckpt_dir[0] = y.ckpt_dir[0] = 0;
  snprintf(x.preset, sizeof x.preset, "-");
  snprintf(y.preset, sizeof y.preset, "-");
  x.ckpt_every = y.ckpt_every = x.resume = y.resume = x.quiet = y.quiet = 0;
  x.threads = y.threads = x.eval_every = y.eval_every = x.eval_batches = y.eval_batches = 0;
  x.checkpoint = y.checkpoint = x.fused_ce = y.fused_ce = x.tiled_mlp = y.tiled_mlp = 0;
  x.fast = y.fast = 0;
  // --steps may change (a run extended, docs/CHECKPOINTS.md); init_from
  // names the file another run started from
  x.steps = y.steps = 0;
  x.init_from[0] = y.init_from[0] = 0;
  if (ts_config_to_json(&x, a, sizeof a) || ts_config_to_json(&y, b, sizeof b))
    broken("config to JSON failed: %s", ts_errmsg());
  if (strcmp(a, b)) {
    size_t i = 0;
    while (a[i] && a[i] == b[i]) i++;
    while (i > 0 && a[i - 1] != ',') i--;
    broken("resume accepted another run's checkpoint: its configuration differs at %.60s (run) vs "
           "%.60s (checkpoint)", a + i, b + i);
  }
}

// What a case's child reports to the parent (about ts_eval, to compare with
// the tessera binary's answer).
typedef struct {
  int eval_rc;
  char eval_msg[1100];
} child_report;

static void write_report(const char *path, const child_report *rep) {
  FILE *f = fopen(path, "w");
  if (!f) return;
  fprintf(f, "%d\n%s\n", rep->eval_rc, rep->eval_msg);
  fclose(f);
}

static void all_finite(const float *p, size_t n, const char *what) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(p[i])) broken("accepted a checkpoint whose %s holds %g at %zu", what, (double)p[i], i);
}

// The checkpoint readers on the file at path, a mutant of seed s.
static void child_ckpt(const world *w, const ckpt_seed *s, const char *path, const char *cd,
                       int fixed, const char *report) {
  // 1. the file reader
  ts_ckpt *ck = NULL;
  clear_error();
  int rc = ts_ckpt_open(path, &ck);
  expect_clean("ts_ckpt_open", rc, 1u << TS_ERUNTIME, path);
  int fmt = 0, run_changed = 0;
  if (!rc) {
    fmt = ts_ckpt_format(ck);
    if (fmt < 1 || fmt > 3) broken("ts_ckpt_open accepted format %d", fmt);
    (void)ts_ckpt_num_tensors(ck);
    // format 3's run member is outside the header checksum: an edit there
    // is accepted by the file checks and judged by the run (its settings)
    ts_ckpt *seed = NULL;
    if (!ts_ckpt_open(s->path, &seed)) {
      const char *a = ts_ckpt_meta(seed, "tessera.run"), *b = ts_ckpt_meta(ck, "tessera.run");
      run_changed = (a == NULL) != (b == NULL) || (a && strcmp(a, b));
      ts_ckpt_close(seed);
    }
    ts_ckpt_close(ck);
  }
  // 2. --resume, by the run that wrote the seed
  // (a format-1 file, by the run of the first seed: it must be refused)
  int resumed = 0;
  {
    ts_config run = s->format >= 2 ? s->cfg : w->ck[0].cfg;
    memcpy(run.ckpt_dir, cd, strlen(cd) + 1);
    ts_run_ckpt rk = {0};
    ts_model *m = NULL;
    ts_adamw opt = {0};
    clear_error();
    rc = load_as_resume(&run, &rk, &m, &opt);
    expect_clean("--resume", rc, 1u << TS_ERUNTIME | 1u << TS_EUSAGE, path);
    if (!rc) {
      resumed = 1;
      size_t np = ts_model_num_params(m);
      if (!fixed && (digest_of(m, &opt) != s->digest || rk.step != s->step))
        broken("--resume accepted a changed file and loaded other values (step %" PRId64 ")", rk.step);
      all_finite(ts_model_params(m), np, "parameters");
      all_finite(opt.m, np, "first moments");
      all_finite(opt.v, np, "second moments");
      if (rk.step < 1 || rk.step > rk.cfg.steps || opt.step != (uint64_t)rk.step)
        broken("--resume accepted step %" PRId64 " (adam %" PRIu64 ") of a %d-step run", rk.step,
               opt.step, rk.cfg.steps);
      same_run(&run, &rk.cfg);
    }
    ts_run_close_checkpoint(&rk);
    ts_model_free(m);
    ts_adamw_free(&opt);
  }
  // 3. tessera compare on two checkpoints: symmetric, never "different" from itself
  {
    FILE *null = fopen("/dev/null", "w");
    clear_error();
    int r1 = ts_compare_checkpoints(s->path, path, null);
    if (r1 != 0 && r1 != 1 && r1 != TS_EUSAGE) broken("compare of checkpoints: return code %d", r1);
    if (r1 == TS_EUSAGE) {
      expect_clean("compare of checkpoints", r1, 1u << TS_EUSAGE, NULL);
      if (!strstr(ts_errmsg(), path) && !strstr(ts_errmsg(), s->path) &&
          !strstr(ts_errmsg(), "out of memory"))
        broken("compare of checkpoints: the message names neither file: %s", ts_errmsg());
    }
    int r2 = ts_compare_checkpoints(path, s->path, null);
    if (r2 != r1) broken("compare of checkpoints: A B says %d, B A says %d", r1, r2);
    int r3 = ts_compare_checkpoints(path, path, null);
    if (r3 == 1) broken("a checkpoint is a different model state from itself");
    // (a format edited to 1 is the same state, in a file no run reads; an
    // edited run member, the same state with run settings a run may refuse)
    if (!fixed && s->format >= 2 && r1 == 0 && !resumed && fmt != 1 && !run_changed)
      broken("compare says the seed's model state, --resume refuses the file");
    fclose(null);
  }
  // 4. tessera eval (in this process; the parent may run the binary too)
  child_report rep = {0};
  int out = open("/dev/null", O_WRONLY);
  int saved = dup(STDOUT_FILENO);
  fflush(stdout);
  dup2(out, STDOUT_FILENO);
  clear_error();
  rc = ts_eval(&w->eval_base, path);
  fflush(stdout);
  dup2(saved, STDOUT_FILENO);
  close(out);
  close(saved);
  expect_clean("tessera eval", rc, 1u << TS_ERUNTIME, NULL);
  // (a corpus too short for the checkpoint's --seq is the corpus's refusal)
  if (rc && !strstr(ts_errmsg(), path) && !strstr(ts_errmsg(), w->data))
    broken("tessera eval: the message names neither %s nor the corpus: %s", path, ts_errmsg());
  rep.eval_rc = rc;
  snprintf(rep.eval_msg, sizeof rep.eval_msg, "%s", rc ? ts_errmsg() : "");
  if (s->format == 1 && resumed) broken("--resume accepted a format-1 file");
  if (!fixed && s->format >= 2 && rc == TS_OK && !resumed && !run_changed)
    broken("tessera eval accepted a changed file that --resume refuses");
  write_report(report, &rep);
}

// A configuration JSON string (the case's file).
static void check_config(const world *w, const char *js, const char *report);
static void child_config(const world *w, const char *path, const char *report) {
  buf js; // (a NUL in it: the C string ends there, as it would for any reader)
  if (read_file(path, &js)) broken("cannot read %s", path);
  check_config(w, (const char *)js.p, report);
  b_free(&js);
}

static void check_config(const world *w, const char *js, const char *report) {
  ts_config c = w->eval_base;
  child_report rep = {0};
  clear_error();
  int rc = ts_config_from_json(&c, js);
  expect_clean("ts_config_from_json", rc, 1u << TS_ERUNTIME, NULL);
  ts_config fin = c;
  if (!rc) {
    clear_error();
    rc = ts_config_finalize(&fin);
    expect_clean("ts_config_finalize", rc, 1u << TS_EUSAGE, NULL);
  }
  rep.eval_rc = rc;
  snprintf(rep.eval_msg, sizeof rep.eval_msg, "%s", rc ? ts_errmsg() : "");
  write_report(report, &rep);
  if (rc) return;
  // a finalized configuration is a fixed point, and survives its JSON form
  char j1[TS_CONFIG_JSON_MAX], j2[TS_CONFIG_JSON_MAX], j3[TS_CONFIG_JSON_MAX];
  if (ts_config_to_json(&fin, j1, sizeof j1)) broken("an accepted configuration cannot be written: %s", ts_errmsg());
  ts_config again = fin;
  if (ts_config_finalize(&again)) broken("finalizing twice refuses: %s", ts_errmsg());
  if (ts_config_to_json(&again, j2, sizeof j2) || strcmp(j1, j2))
    broken("finalizing twice changes the configuration: %.200s", j2);
  ts_config back = w->eval_base;
  if (ts_config_from_json(&back, j1)) broken("a written configuration does not read back: %s", ts_errmsg());
  if (ts_config_finalize(&back)) broken("a written configuration does not finalize: %s", ts_errmsg());
  if (ts_config_to_json(&back, j3, sizeof j3) || strcmp(j1, j3))
    broken("the JSON round trip changes the configuration: %.200s vs %.200s", j1, j3);
}

// A run log against the seed it came from.
static int compare_quiet(const char *a, const char *b) {
  FILE *null = fopen("/dev/null", "w");
  clear_error();
  int rc = ts_compare_logs(a, b, 0.0, null);
  fclose(null);
  return rc;
}

// want: -1, or what compare must say (0: only ignored fields were edited,
// 1: a result was changed to another well-formed value).
static void child_log(const char *orig, const char *path, const char *report, int want) {
  int r1 = compare_quiet(orig, path);
  if (r1 != 0 && r1 != 1 && r1 != TS_EUSAGE) broken("compare: return code %d", r1);
  if (want >= 0 && r1 != want)
    broken("compare says %d (%s), expected %s", r1, r1 == TS_EUSAGE ? ts_errmsg() : "",
           want ? "a divergence: a result was changed" : "identical: only ignored fields were edited");
  char m1[1100] = "";
  if (r1 == TS_EUSAGE) {
    expect_clean("compare", r1, 1u << TS_EUSAGE, NULL);
    snprintf(m1, sizeof m1, "%s", ts_errmsg());
    if (!strstr(m1, path) && !strstr(m1, orig)) broken("compare: the message names neither log: %s", m1);
  }
  int r2 = compare_quiet(path, orig);
  if (r2 != r1) broken("compare A B says %d, compare B A says %d", r1, r2);
  int r3 = compare_quiet(path, path);
  if (r3 == 1) broken("a log differs from itself");
  if (r1 == 0 && r3 != 0) broken("a log identical to the seed is unreadable alone (%d)", r3);
  child_report rep = {.eval_rc = r1};
  snprintf(rep.eval_msg, sizeof rep.eval_msg, "%s", m1);
  write_report(report, &rep);
}

// ---------------------------------------------------------------------------
// The parent: makes case k, runs it, judges how its process ended.

enum { T_CKPT_RAW, T_CKPT_FIXED, T_CONFIG, T_LOG, N_TARGETS };
static const char *const target_names[] = {"checkpoint (raw)", "checkpoint (checksums fixed)",
                                           "config JSON", "run log"};

typedef struct {
  int cases, accepted, refused, differ, failed, execs;
} tally;

static void limit_child(void) {
  struct rlimit lim = {CASE_MEMORY, CASE_MEMORY};
  if (!SANITIZED) setrlimit(RLIMIT_AS, &lim);
  alarm(CASE_SECONDS * (SANITIZED ? 4 : 1));
}

// Runs fn in a child; returns how it ended in *status and its peak RSS (MB).
static pid_t spawn(void) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) die("fork: %s", strerror(errno));
  if (pid == 0) limit_child();
  return pid;
}

static int wait_child(pid_t pid, double *rss_mb) {
  int status;
  struct rusage ru;
  while (wait4(pid, &status, 0, &ru) < 0)
    if (errno != EINTR) die("wait: %s", strerror(errno));
  *rss_mb = (double)ru.ru_maxrss / 1024.0;
  return status;
}

static void read_report(const char *path, child_report *rep) {
  rep->eval_rc = -1;
  rep->eval_msg[0] = 0;
  FILE *f = fopen(path, "r");
  if (!f) return;
  if (fscanf(f, "%d\n", &rep->eval_rc) != 1) rep->eval_rc = -1;
  if (!fgets(rep->eval_msg, sizeof rep->eval_msg, f)) rep->eval_msg[0] = 0;
  rep->eval_msg[strcspn(rep->eval_msg, "\n")] = 0;
  fclose(f);
}

// The tessera binary on the case: its status and stderr must agree with the
// library's answer (want: 0, or the status the library's code maps to, and
// its message), and it must end cleanly.
static int run_binary(const world *w, char *const argv[], int want, const char *want_msg,
                      char *why, size_t cap) {
  char errpath[4300];
  snprintf(errpath, sizeof errpath, "%s/exec.err", w->work);
  pid_t pid = spawn();
  if (pid == 0) {
    int out = open("/dev/null", O_WRONLY), err = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    dup2(out, STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    execv(w->tessera, argv);
    _exit(127);
  }
  double rss;
  int st = wait_child(pid, &rss);
  buf err = {0};
  read_file(errpath, &err);
  int lines = 0;
  for (size_t i = 0; i < err.n; i++) lines += err.p[i] == '\n';
  int ok = 1;
  if (WIFSIGNALED(st)) {
    snprintf(why, cap, "%s %s: killed by signal %d%s", argv[0], argv[1], WTERMSIG(st),
             WTERMSIG(st) == SIGALRM ? " (a hang)" : "");
    ok = 0;
  } else if (WEXITSTATUS(st) != want) {
    snprintf(why, cap, "%s %s: exit %d, the library said %d; stderr: %.300s", argv[0], argv[1],
             WEXITSTATUS(st), want, err.p ? (const char *)err.p : "");
    ok = 0;
  } else if (want == 2 || (want == 1 && want_msg[0])) {
    if (lines != 1 || !strstr((const char *)err.p, want_msg)) {
      snprintf(why, cap, "%s %s: stderr is not the one line '%.200s': %.300s", argv[0], argv[1],
               want_msg, err.p ? (const char *)err.p : "");
      ok = 0;
    }
  }
  b_free(&err);
  return ok;
}

static void keep_case(const world *w, int k, const char *path, const char *ext) {
  if (!w->keep) return;
  mkdir(w->keep, 0777);
  char dst[4300];
  snprintf(dst, sizeof dst, "%s/case-%d.%s", w->keep, k, ext);
  struct stat st; // (a FIFO would block the read; place_oddly's description says what it was)
  if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return;
  buf b;
  if (read_file(path, &b) == 0) {
    write_file(dst, &b);
    b_free(&b);
    printf("      kept as %s\n", dst);
  }
}

static double slowest_s;
static int slowest_case = -1;

// One case: returns 1 when every promise held.
static int run_case(world *w, uint64_t seed, int k, int exec_every, tally *t) {
  const double t0 = ts_now();
  rng r = {seed * 0x100000001b3ull ^ (uint64_t)k * 0x9e3779b97f4a7c15ull};
  for (int i = 0; i < 4; i++) next(&r);
  int target = (int)below(&r, 100);
  target = target < 35 ? T_CKPT_FIXED : target < 55 ? T_CKPT_RAW : target < 75 ? T_CONFIG : T_LOG;
  desc d = {""};
  char cd[2048], path[2200], report[2200];
  case_dir(w, cd, sizeof cd);
  clear_dir(cd);
  snprintf(report, sizeof report, "%s/report", w->work);
  unlink(report);
  snprintf(why_path, sizeof why_path, "%s/why", w->work);
  unlink(why_path);
  const ckpt_seed *s = NULL;
  const char *orig_log = NULL;
  int want = -1; // a log's comparison, when the edit decides it
  buf f = {0};
  if (target == T_CKPT_RAW || target == T_CKPT_FIXED) {
    s = &w->ck[below(&r, (size_t)w->nck)];
    // the resume path looks for the latest step-*.safetensors: the seed's step
    snprintf(path, sizeof path, "%s/step-%08" PRId64 ".safetensors", cd, s->step > 0 ? s->step : 1);
    b_set(&f, s->bytes.p, s->bytes.n);
    note(&d, "%s", strrchr(s->path, '/') + 1);
    int n = 1 + (int)below(&r, chance(&r, 70) ? 1 : 3);
    for (int i = 0; i < n; i++) {
      buf h, data;
      int kind = (int)below(&r, 10);
      if (kind < 6 && split(&f, &h, &data)) { // the header, understood
        edit_header(&r, &h, &d, (int)s->step);
        join(&f, &h, &data);
        b_free(&h);
        b_free(&data);
      } else if (kind < 7) { // the length word
        uint64_t len = get_len(&f);
        static const int64_t delta[] = {-8, -1, 1, 8, 0};
        uint64_t v = chance(&r, 60) ? len + (uint64_t)PICK(&r, delta)
                                    : (uint64_t[]){0, 1, 2, f.n - 8, f.n - 7, 100000001,
                                                   1ull << 63, ~0ull}[below(&r, 8)];
        put_len(&f, v);
        note(&d, "length=%" PRIu64, v);
      } else if (kind < 8) { // a float of the data set to a special value
        uint64_t len = get_len(&f);
        if (f.n >= 8 && len <= f.n - 8 && f.n - 8 - len >= 4) {
          static const float special[] = {NAN, INFINITY, -INFINITY, 3.4e38f, 1e-45f, -0.0f};
          size_t at = 8 + (size_t)len + 4 * below(&r, (f.n - 8 - (size_t)len) / 4);
          float v = PICK(&r, special);
          memcpy(f.p + at, &v, 4);
          note(&d, "float@%zu=%g", at, (double)v);
        }
      } else if (kind < 9 && w->nck > 1) { // two checkpoints spliced
        splice_files(&r, &f, &w->ck[below(&r, (size_t)w->nck)].bytes, &d);
      } else {
        uint64_t len = get_len(&f);
        int in_header = target == T_CKPT_FIXED && chance(&r, 80) && f.n >= 8 && len <= f.n - 8;
        mutate_bytes(&r, &f, in_header ? 8 : 0, in_header ? 8 + (size_t)len : f.n, &d);
      }
    }
    if (target == T_CKPT_FIXED) fix_crcs(&f, chance(&r, 85));
  } else if (target == T_CONFIG) {
    snprintf(path, sizeof path, "%s/config.json", cd);
    const char *src = w->config_json[below(&r, (size_t)w->nconfig)];
    b_set(&f, src, strlen(src));
    int n = 1 + (int)below(&r, 3);
    for (int i = 0; i < n; i++) {
      if (chance(&r, 2)) widen(&r, &f, 0, "\"", 0, &d);
      else if (chance(&r, 75)) edit_config(&r, &f, "\"", &d);
      else if (chance(&r, 30)) splice_files(&r, &f, &(buf){(unsigned char *)w->config_json[0], strlen(w->config_json[0])}, &d);
      else mutate_bytes(&r, &f, 0, f.n, &d);
    }
  } else {
    int which = (int)below(&r, 2);
    orig_log = w->log_path[which];
    snprintf(path, sizeof path, "%s/log.jsonl", cd);
    b_set(&f, w->logs[which].p, w->logs[which].n);
    note(&d, "%s", which ? "b.jsonl" : "a.jsonl");
    int n = 1 + (int)below(&r, 3);
    if (chance(&r, 15)) { // fields compare ignores, given other well-formed values
      static const char *const ignored[] = {"tokens_per_s", "step_ms", "comm_ms", "mfu",
                                            "peak_rss_mb", "comm", "mem_peak_bytes", "version",
                                            "layout", "world", "model", "roof_gflops", "ranks",
                                            "compute_ms_max", "grad_norm_extra"};
      static const char *const values[] = {"0", "-1", "1e308", "\"x\"", "null", "true", "{}",
                                           "[]", "{\"a\":[1,2]}", "\"0x1p+0\"", "NaN"};
      n = 0;
      want = 0;
      for (int i = 0, e = 1 + (int)below(&r, 3); i < e; i++) {
        const char *key = PICK(&r, ignored), *val = PICK(&r, values);
        if (set_member(&f, "\"", key, val, next(&r))) note(&d, "ignored %s=%s", key, val);
      }
    } else if (chance(&r, 12)) { // a result's last hex digit changed: a divergence
      static const char *const results[] = {"\"loss_hex\":\"0x1.", "\"grad_norm_hex\":\"0x1.",
                                            "\"lr_hex\":\"0x1.", "\"val_loss_hex\":\"0x1."};
      const char *pat = PICK(&r, results);
      // in a result record: the config line's model has an "lr_hex" too
      size_t first_nl = b_find(&f, 0, "\n"), at = (size_t)-1;
      buf rest = {f.p + first_nl + 1, first_nl == (size_t)-1 ? 0 : f.n - first_nl - 1};
      size_t in_rest = b_find_nth(&rest, pat, next(&r));
      if (in_rest != (size_t)-1) at = first_nl + 1 + in_rest;
      if (at != (size_t)-1) {
        size_t p = b_find(&f, at + strlen(pat), "p");
        if (p != (size_t)-1 && p > at + strlen(pat)) {
          unsigned char *c = &f.p[p - 1]; // the last digit of the mantissa
          *c = *c == 'f' ? 'e' : *c == '9' ? 'a' : (unsigned char)(*c + 1);
          note(&d, "result %.14s changed", pat + 1);
          want = 1;
        }
      }
      n = 0;
    }
    for (int i = 0; i < n; i++) {
      int kind = (int)below(&r, 12);
      static const char *const keys[] = {"step", "loss", "loss_hex", "grad_norm_hex", "lr_hex",
                                         "val_loss_hex", "val_loss", "type", "param_hash"};
      static const char *const vals[] = {
          "1", "2", "-1", "1.0", "1e0", "1.5", "\"3\"", "null", "1e400", "18446744073709551616",
          "\"0x1.6p+2\"", "\"0x1.6p+3\"", "\"nan\"", "\"-inf\"", "\"0x1.6q+2\"", "\"\"", "\"1.5\"",
          "\"0x\"", "\"0xp+1\"", "\"0x1p\"", "\"0x1p+99999999\"", "\"-0x0p+0\"", "NaN", "-Infinity",
          "\"step\"", "\"eval\"", "\"final\"", "\"config\"", "\"Step\"", "\"0011223344556677\"",
          "\"001122334455667\"", "\"gggggggggggggggg\"", "\"00112233445566778\"", "{}", "[]", "true"};
      if (kind < 5) {
        const char *key = PICK(&r, keys), *val = PICK(&r, vals);
        if (set_member(&f, "\"", key, val, next(&r))) note(&d, "%s=%s", key, val);
      } else if (kind < 8) { // lines: dropped, repeated, swapped
        size_t nl = 0;
        for (size_t i2 = 0; i2 < f.n; i2++) nl += f.p[i2] == '\n';
        if (nl < 2) continue;
        size_t a = b_find_nth(&f, "\n", next(&r)) + 1, e = b_find(&f, a, "\n");
        if (e == (size_t)-1) continue;
        e++;
        char *line = strndup((const char *)f.p + a, e - a);
        if (kind != 6) b_splice(&f, a, e - a, NULL, 0); // dropped or moved
        if (kind != 5) {                                 // repeated or moved: at a line start
          size_t to = b_find_nth(&f, "\n", next(&r));
          b_splice(&f, to == (size_t)-1 ? 0 : to + 1, 0, line, strlen(line));
        }
        note(&d, "%s-line@%zu", kind == 5 ? "drop" : kind == 6 ? "repeat" : "move", a);
        free(line);
      } else if (kind < 9) {
        if (chance(&r, 10)) widen(&r, &f, b_find_nth(&f, "{\"type\":", next(&r)), "\"", 0, &d);
        else splice_files(&r, &f, &w->logs[1 - which], &d);
      } else if (kind < 10) { // a key repeated in a record
        size_t at = b_find_nth(&f, "\"loss_hex\":", next(&r));
        if (at == (size_t)-1) continue;
        size_t e = value_end(&f, at + 11, "\"");
        char *copy = strndup((const char *)f.p + at, e - at);
        b_splice(&f, e, 0, ",", 1);
        b_splice(&f, e + 1, 0, copy, strlen(copy));
        free(copy);
        note(&d, "repeat-key");
      } else {
        mutate_bytes(&r, &f, 0, f.n, &d);
      }
    }
  }
  write_file(path, &f);
  b_free(&f);
  if ((target == T_CKPT_RAW || target == T_CKPT_FIXED) && chance(&r, 12)) place_oddly(&r, w, path, &d);

  // the library, in a child
  pid_t pid = spawn();
  if (pid == 0) {
    if (target == T_CONFIG) child_config(w, path, report);
    else if (target == T_LOG) child_log(orig_log, path, report, want);
    else child_ckpt(w, s, path, cd, target == T_CKPT_FIXED, report);
    fflush(stdout);
#if SANITIZED
    // what the readers allocated and did not free, refusals included
    if (__lsan_do_recoverable_leak_check()) broken("memory leaked (the report above)");
#endif
    _exit(0);
  }
  double rss;
  int st = wait_child(pid, &rss);
  char why[2400] = "";
  int ok = 1;
  child_report rep;
  read_report(report, &rep);
  if (WIFSIGNALED(st)) {
    snprintf(why, sizeof why, "killed by signal %d (%s)%s", WTERMSIG(st), strsignal(WTERMSIG(st)),
             WTERMSIG(st) == SIGALRM ? ": it ran past the time limit (a hang)" : "");
    ok = 0;
  } else if (WEXITSTATUS(st) == 3) {
    buf b = {0};
    if (read_file(why_path, &b) == 0) {
      snprintf(why, sizeof why, "%.*s", (int)strcspn((const char *)b.p, "\n"), (const char *)b.p);
      b_free(&b);
    } else {
      snprintf(why, sizeof why, "a promise was broken");
    }
    ok = 0;
  } else if (WEXITSTATUS(st) != 0) {
    snprintf(why, sizeof why, "the case's process exited %d", WEXITSTATUS(st));
    ok = 0;
  } else if ((target == T_CKPT_RAW || target == T_CKPT_FIXED) && rep.eval_rc != 0 &&
             rss > REFUSAL_RSS_MB && !SANITIZED) {
    snprintf(why, sizeof why, "refused only after allocating: peak RSS %.0f MB (%s)", rss,
             rep.eval_msg);
    ok = 0;
  }
  // a sample through the binary: it must say what the library said
  if (ok && exec_every > 0 && k % exec_every == 0 && target != T_CONFIG && rep.eval_rc >= 0) {
    t[target].execs++;
    if (target == T_LOG) {
      char *argv[] = {"tessera", "compare", (char *)orig_log, path, NULL};
      ok = run_binary(w, argv, rep.eval_rc, rep.eval_msg, why, sizeof why);
    } else {
      char *argv[] = {"tessera", "eval", "--ckpt", path, "--data", (char *)w->data,
                      "--eval-batches", "1", NULL};
      ok = run_binary(w, argv, rep.eval_rc == 0 ? 0 : rep.eval_rc == TS_EUSAGE ? 2 : 1,
                      rep.eval_msg, why, sizeof why);
    }
  }
  t[target].cases++;
  if (ts_now() - t0 > slowest_s) slowest_s = ts_now() - t0, slowest_case = k;
  if (!ok) {
    t[target].failed++;
    printf("FAIL case %d [%s] %s: %s\n", k, target_names[target], d.what, why);
    keep_case(w, k, path, target == T_LOG ? "jsonl" : target == T_CONFIG ? "json" : "safetensors");
  } else {
    t[target].accepted += rep.eval_rc == 0;
    t[target].differ += target == T_LOG && rep.eval_rc == 1; // compare: "different"
    t[target].refused += rep.eval_rc != 0 && !(target == T_LOG && rep.eval_rc == 1);
    if (w->verbose)
      printf("ok case %d [%s] %s: %s\n", k, target_names[target], d.what,
             rep.eval_rc == 0 ? "accepted" : rep.eval_msg);
  }
  return ok;
}

static void usage(void) {
  fprintf(stderr, "usage: fuzz --seeds DIR --tessera BIN --data CORPUS --work DIR [--cases N] "
                  "[--seed S] [--first K] [--exec-every E] [--keep DIR] [--verbose]\n");
  exit(2);
}

int main(int argc, char **argv) {
  world w = {0};
  const char *seeds = NULL;
  long cases = 300, first = 0, exec_every = 10;
  unsigned long long seed = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--verbose")) { w.verbose = 1; continue; }
    if (!v) usage();
    i++;
    if (!strcmp(a, "--seeds")) seeds = v;
    else if (!strcmp(a, "--tessera")) w.tessera = v;
    else if (!strcmp(a, "--data")) w.data = v;
    else if (!strcmp(a, "--work")) w.work = v;
    else if (!strcmp(a, "--keep")) w.keep = v;
    else if (!strcmp(a, "--cases")) cases = strtol(v, NULL, 10);
    else if (!strcmp(a, "--seed")) seed = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--first")) first = strtol(v, NULL, 10);
    else if (!strcmp(a, "--exec-every")) exec_every = strtol(v, NULL, 10);
    else usage();
  }
  if (!seeds || !w.tessera || !w.data || !w.work || cases < 0 || first < 0) usage();
  crc_init();
  if (mkdir(w.work, 0777) != 0 && errno != EEXIST) die("cannot create %s: %s", w.work, strerror(errno));
  ts_config_preset(&w.eval_base, "tiny");
  ts_config_defaults(&w.eval_base);
  snprintf(w.eval_base.data_path, sizeof w.eval_base.data_path, "%s", w.data);
  w.eval_base.eval_batches = 1;
  w.eval_base.threads = 1;
  load_seeds(&w, seeds);
  tally t[N_TARGETS] = {{0}};
  int failed = 0;
  double t0 = ts_now();
  for (long k = first; k < first + cases; k++) failed += !run_case(&w, seed, (int)k, (int)exec_every, t);
  printf("fuzz: seed %llu, cases %ld..%ld, %.1f s (the slowest: case %d, %.2f s)\n", seed, first,
         first + cases - 1, ts_now() - t0, slowest_case, slowest_s);
  for (int i = 0; i < N_TARGETS; i++)
    printf("  %-28s %5d cases: %5d accepted%s, %5d refused cleanly, %4d also by the binary, %d "
           "failed\n", target_names[i], t[i].cases, t[i].accepted + t[i].differ,
           i == T_LOG ? " (identical or different)" : "", t[i].refused, t[i].execs, t[i].failed);
  for (int i = 0; i < w.nck; i++) b_free(&w.ck[i].bytes);
  for (int i = 0; i < 2; i++) b_free(&w.logs[i]);
  return failed ? 1 : 0;
}
