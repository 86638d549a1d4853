// Checkpoints in the safetensors layout:
//
//   [8 bytes]  N, the header length, little-endian u64
//   [N bytes]  UTF-8 JSON: {"__metadata__": {str: str, ...},
//                           "name": {"dtype": "F32", "shape": [...],
//                                    "data_offsets": [begin, end]}, ...}
//              padded with spaces so that the data section starts at a
//              multiple of 8 bytes (the format allows trailing whitespace)
//   [rest]     the data section: the tensors' raw little-endian floats, in
//              the order given, contiguous; offsets are relative to its start
//
// Anything that reads safetensors (the PyTorch oracle parses it by hand with
// struct + json) can read these files. tessera adds metadata keys:
// "tessera.format" and "tessera.data_crc32", the CRC-32 (zlib's) of the data
// section as 8 lowercase hex digits, so that damaged data is refused instead
// of silently resumed from. Format "2" (training checkpoints) also has
// "tessera.header_crc32": the CRC-32 of the length word and the header with
// its own 8 digits read as '0', so that every metadata value (the step, the
// configuration) and every shape and offset is covered too: a flipped bit
// there may parse and pass the layout checks. Format "3" (training
// checkpoints now) puts the run's own settings (paths, threads, layout: what
// two layouts of one run set differently) into one metadata member of their
// own, "tessera.run", written last among the metadata, and its header
// checksum leaves that member out, with the length word and the padding
// (which its length moves): two layouts' checkpoints of one run then hold the
// same bytes but that member (docs/CHECKPOINTS.md). Format "1" (tessera
// dump's golden files, older checkpoints) has the data checksum only; it is
// still read, and the runs decide whether a format-1 file is enough for them.
// Format 2 files are still read, with their own header checksum.
//
// Writes are atomic (temp file in the same directory, fsync, rename, fsync of
// the directory): a crash or a full disk leaves either the old file or the new
// one at the path, never a mixture. The bytes written are a function of the
// inputs alone, so two runs that agree write identical files (golden files are
// compared with cmp).
#include "base/json.h"
#include "base/util.h"
#include "ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// The data section is the in-memory floats byte for byte; a big-endian host
// would need a byte swap on both paths, which nothing here targets.
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "checkpoints assume a little-endian host");
_Static_assert(sizeof(float) == 4, "F32 is 4 bytes");

#define META_FORMAT "tessera.format"
#define META_CRC "tessera.data_crc32"
#define META_HCRC "tessera.header_crc32"
#define META_RUN "tessera.run"
#define RUN_MEMBER ",\"" META_RUN "\":" // as the writer puts it, before the value
#define FORMAT_NEWEST 3
// The reference safetensors reader refuses headers above 100 MB; so do we, so
// that a garbage length cannot make us allocate gigabytes.
#define MAX_HEADER ((uint64_t)100000000)
#define IO_CHUNK (1u << 20)    // bytes per read while checksumming

// ---------------------------------------------------------------------------
// CRC-32 (reflected polynomial 0xEDB88320, as zlib, PNG, gzip), slice-by-8:
// eight 256-entry tables let the loop consume 8 bytes per step. The tables are
// built per call (16 KiB, microseconds) so there is no shared mutable state.
typedef struct {
  uint32_t t[8][256];
} crc_tables;

static void crc_init(crc_tables *ct) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
    ct->t[0][i] = c;
  }
  // t[k][i]: CRC of byte i followed by k zero bytes.
  for (int k = 1; k < 8; k++)
    for (int i = 0; i < 256; i++)
      ct->t[k][i] = (ct->t[k - 1][i] >> 8) ^ ct->t[0][ct->t[k - 1][i] & 0xFF];
}

// crc is the running value of the *finalised* CRC (start with 0), so calls
// can be chained over consecutive pieces of the data.
static uint32_t crc_update(const crc_tables *ct, uint32_t crc, const void *data, size_t n) {
  const unsigned char *p = data;
  uint32_t c = ~crc;
  while (n >= 8) {
    uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                       (uint32_t)p[3] << 24);
    c = ct->t[7][lo & 0xFF] ^ ct->t[6][(lo >> 8) & 0xFF] ^ ct->t[5][(lo >> 16) & 0xFF] ^
        ct->t[4][lo >> 24] ^ ct->t[3][p[4]] ^ ct->t[2][p[5]] ^ ct->t[1][p[6]] ^
        ct->t[0][p[7]];
    p += 8;
    n -= 8;
  }
  while (n--) c = (c >> 8) ^ ct->t[0][(c ^ *p++) & 0xFF];
  return ~c;
}

// ---------------------------------------------------------------------------
// A growable string buffer for the header.
typedef struct {
  char *p;
  size_t len, cap;
  int oom;
} sbuf;

// Room for n more bytes and a NUL at b->p + b->len; NULL once out of memory.
static char *sb_room(sbuf *b, size_t n) {
  if (b->oom) return NULL;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = 1;
      return NULL;
    }
    b->p = p;
    b->cap = cap;
  }
  return b->p + b->len;
}

static void sb_put(sbuf *b, const char *s, size_t n) {
  char *d = sb_room(b, n);
  if (!d) return;
  memcpy(d, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
  char tmp[128];
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (k > 0) sb_put(b, tmp, (size_t)k < sizeof tmp ? (size_t)k : sizeof tmp - 1);
}

// Appends s as a JSON string literal (s is valid UTF-8, checked by the caller).
static void sb_json_string(sbuf *b, const char *s) {
  size_t n = json_escape(NULL, 0, s);
  char *d = sb_room(b, n);
  if (d) b->len += json_escape(d, n + 1, s);
}

// Formats "[d0, d1, ...]" for error messages.
static void shape_str(char *buf, size_t cap, int ndim, const int64_t *shape) {
  size_t k = (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < ndim && k < cap; i++)
    k += (size_t)snprintf(buf + k, cap - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
  if (k < cap) snprintf(buf + k, cap - k, "]");
}

// All checkpoint errors read "checkpoint <path>: <what>".
int ts_ckpt_fail(const char *path, const char *fmt, ...) {
  char what[900];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return ts_fail(TS_ERUNTIME, "checkpoint %s: %s", path, what);
}
#define bad ts_ckpt_fail

// ---------------------------------------------------------------------------
// Writing.

// Checks what will go into the header and returns each tensor's byte count in
// bytes[] (n entries). Everything here is refused before a file is touched.
static int check_inputs(const char *path, const ts_tensor *tensors, int n, const ts_meta *meta,
                        int n_meta, uint64_t *bytes, int need_data) {
  for (int i = 0; i < n_meta; i++) {
    const char *k = meta[i].key, *v = meta[i].value;
    if (!k || !v) return bad(path, "metadata pair %d has a NULL key or value", i);
    if (!strcmp(k, META_FORMAT) || !strcmp(k, META_CRC) || !strcmp(k, META_HCRC))
      return bad(path, "metadata key '%s' is reserved (written by the checkpoint writer)", k);
    if (!json_utf8_valid(k) || !json_utf8_valid(v))
      return bad(path, "metadata key '%s' or its value is not valid UTF-8", k);
    for (int j = 0; j < i; j++)
      if (!strcmp(meta[j].key, k)) return bad(path, "metadata key '%s' given twice", k);
  }
  for (int i = 0; i < n; i++) {
    const ts_tensor *t = &tensors[i];
    size_t len = strnlen(t->name, sizeof t->name);
    if (len == 0 || len == sizeof t->name)
      return bad(path, "tensor %d has an empty or unterminated name", i);
    if (!strcmp(t->name, "__metadata__") || !json_utf8_valid(t->name))
      return bad(path, "tensor %d: '%s' is not a usable tensor name", i, t->name);
    for (int j = 0; j < i; j++)
      if (!strcmp(tensors[j].name, t->name))
        return bad(path, "tensor '%s' given twice", t->name);
    if (t->ndim < 0 || t->ndim > TS_MAX_DIMS)
      return bad(path, "tensor '%s' has %d dims (0..%d allowed)", t->name, t->ndim,
                 TS_MAX_DIMS);
    uint64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
      if (t->shape[d] < 0) return bad(path, "tensor '%s' has a negative dim", t->name);
      uint64_t s = (uint64_t)t->shape[d];
      if (s && numel > (UINT64_MAX / 8) / s)
        return bad(path, "tensor '%s' is too large", t->name);
      numel *= s;
    }
    if (numel && need_data && !t->data) return bad(path, "tensor '%s' has no data", t->name);
    bytes[i] = numel * 4;
  }
  return TS_OK;
}

// Where a header's run member lies: bytes [lo, hi) of the header, the
// comma before its key to the value's closing quote; lo = hi without one.
typedef struct {
  size_t lo, hi;
} span;

// CRC-32 of hdr[a, b) with the 8 digits at [at, at + 8) read as '0'.
static uint32_t crc_part(const crc_tables *ct, uint32_t crc, const char *hdr, size_t a, size_t b,
                         size_t at) {
  if (at >= b || at + 8 <= a) return crc_update(ct, crc, hdr + a, b - a);
  crc = crc_update(ct, crc, hdr + a, at - a);
  crc = crc_update(ct, crc, "00000000", 8);
  return crc_update(ct, crc, hdr + at + 8, b - at - 8);
}

// The header checksum, its own 8 digits at hdr[at, at + 8) read as '0'.
// Format 2: the length word, then the whole header. Format 3: the header up
// to its last non-space byte, the run member left out.
static uint32_t header_crc(const crc_tables *ct, int format, const unsigned char len8[8],
                           const char *hdr, size_t len, size_t at, span run) {
  if (format == 2) return crc_part(ct, crc_update(ct, 0, len8, 8), hdr, 0, len, at);
  while (len > 0 && (hdr[len - 1] == ' ' || hdr[len - 1] == '\n' || hdr[len - 1] == '\t' ||
                     hdr[len - 1] == '\r'))
    len--;
  uint32_t crc = crc_part(ct, 0, hdr, 0, run.lo, at);
  return crc_part(ct, crc, hdr, run.hi, len, at);
}

static void put_len8(unsigned char len8[8], uint64_t len) {
  for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(len >> (8 * i));
}

// The JSON header, padded with spaces so 8 + its length is a multiple of 8;
// in formats 2 and 3 with its header checksum filled in.
static int build_header(const char *path, sbuf *h, const ts_tensor *tensors, int n,
                        const uint64_t *bytes, const ts_meta *meta, int n_meta, uint32_t crc,
                        int format, const crc_tables *ct) {
  char crc_hex[9], fmt[2] = {(char)('0' + format), 0};
  size_t hcrc_at = 0;
  span run = {0, 0};
  snprintf(crc_hex, sizeof crc_hex, "%08x", (unsigned)crc);
  sb_str(h, "{\"__metadata__\":{");
  sb_json_string(h, META_FORMAT);
  sb_str(h, ":");
  sb_json_string(h, fmt);
  sb_str(h, ",");
  sb_json_string(h, META_CRC);
  sb_str(h, ":");
  sb_json_string(h, crc_hex);
  if (format >= 2) {
    sb_str(h, ",");
    sb_json_string(h, META_HCRC);
    sb_str(h, ":\"");
    hcrc_at = h->len;
    sb_str(h, "00000000\"");
  }
  // the run member last (format 3), so that it is one run of bytes
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < n_meta; i++) {
      const int is_run = format == 3 && !strcmp(meta[i].key, META_RUN);
      if (is_run != pass) continue;
      if (is_run) run.lo = h->len;
      sb_str(h, ",");
      sb_json_string(h, meta[i].key);
      sb_str(h, ":");
      sb_json_string(h, meta[i].value);
      if (is_run) run.hi = h->len;
    }
  sb_str(h, "}");
  uint64_t off = 0;
  for (int i = 0; i < n; i++) {
    const ts_tensor *t = &tensors[i];
    sb_str(h, ",");
    sb_json_string(h, t->name);
    sb_str(h, ":{\"dtype\":\"F32\",\"shape\":[");
    for (int d = 0; d < t->ndim; d++) sb_printf(h, "%s%lld", d ? "," : "", (long long)t->shape[d]);
    sb_printf(h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
              (unsigned long long)(off + bytes[i]));
    off += bytes[i];
  }
  sb_str(h, "}");
  while ((8 + h->len) % 8) sb_str(h, " ");
  if (h->oom) return bad(path, "out of memory building the header");
  if (h->len > MAX_HEADER) return bad(path, "header of %zu bytes is too large", h->len);
  if (format >= 2) {
    unsigned char len8[8];
    put_len8(len8, h->len);
    char hex[9];
    snprintf(hex, sizeof hex, "%08x",
             (unsigned)header_crc(ct, format, len8, h->p, h->len, hcrc_at, run));
    memcpy(h->p + hcrc_at, hex, 8);
  }
  return TS_OK;
}

// fsync of the directory holding path, so that the rename itself is durable.
static int sync_dir(const char *path) {
  const char *slash = strrchr(path, '/');
  char *dir;
  if (!slash) dir = strdup(".");
  else if (slash == path) dir = strdup("/");
  else dir = strndup(path, (size_t)(slash - path));
  if (!dir) return bad(path, "out of memory");
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int err = fd < 0 ? errno : 0;
  if (fd >= 0) {
    // Some filesystems cannot sync a directory (EINVAL); nothing more can be done there.
    if (fsync(fd) != 0 && errno != EINVAL && errno != ENOTSUP) err = errno;
    close(fd);
  }
  int rc = err ? bad(path, "written, but syncing directory %s failed: %s", dir, strerror(err))
               : TS_OK;
  free(dir);
  return rc;
}

static int write_file(const char *path, const char *tmp, const sbuf *h, const ts_tensor *tensors,
                      int n, const uint64_t *bytes) {
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) return bad(path, "cannot create %s: %s", tmp, strerror(errno));
  FILE *f = fdopen(fd, "wb");
  if (!f) {
    int e = errno;
    close(fd);
    return bad(path, "cannot create %s: %s", tmp, strerror(e));
  }
  unsigned char len8[8];
  put_len8(len8, h->len);
  errno = 0;
  int ok = fwrite(len8, 1, 8, f) == 8 && fwrite(h->p, 1, h->len, f) == h->len;
  for (int i = 0; ok && i < n; i++)
    ok = bytes[i] == 0 || fwrite(tensors[i].data, 1, bytes[i], f) == bytes[i];
  // Buffered bytes reach the kernel only at fflush; a full disk shows up there
  // or at fsync, so each step is checked, and errno is read right away.
  int e = 0;
  if (!ok || fflush(f) != 0) e = errno ? errno : EIO;
  if (!e && fsync(fileno(f)) != 0) e = errno;
  if (fclose(f) != 0 && !e) e = errno;
  if (e) return bad(path, "writing %s failed: %s", tmp, strerror(e));
  return TS_OK;
}

static int write_format(const char *path, const ts_tensor *tensors, int n, const ts_meta *meta,
                        int n_meta, int format) {
  if (!path || !*path) return ts_fail(TS_ERUNTIME, "checkpoint: empty path");
  if (n < 0 || n_meta < 0 || (n && !tensors) || (n_meta && !meta))
    return bad(path, "bad tensor or metadata list");
  uint64_t *bytes = calloc((size_t)n + 1, sizeof *bytes);
  if (!bytes) return bad(path, "out of memory");
  sbuf h = {0};
  char *tmp = NULL;
  int rc = check_inputs(path, tensors, n, meta, n_meta, bytes, 1);
  if (rc == TS_OK) {
    crc_tables *ct = malloc(sizeof *ct);
    if (!ct) rc = bad(path, "out of memory");
    else {
      crc_init(ct);
      uint32_t crc = 0;
      for (int i = 0; i < n; i++) crc = crc_update(ct, crc, tensors[i].data, bytes[i]);
      rc = build_header(path, &h, tensors, n, bytes, meta, n_meta, crc, format, ct);
      free(ct);
    }
  }
  if (rc == TS_OK) {
    // Same directory as path, so the rename cannot cross filesystems; the pid
    // keeps concurrent writers (ranks sharing a directory) apart.
    size_t cap = strlen(path) + 32;
    tmp = malloc(cap);
    if (!tmp) rc = bad(path, "out of memory");
    else ts_temp_path(tmp, cap, path);
  }
  if (rc == TS_OK) {
    rc = write_file(path, tmp, &h, tensors, n, bytes);
    if (rc == TS_OK && rename(tmp, path) != 0)
      rc = bad(path, "cannot rename %s over it: %s", tmp, strerror(errno));
    if (rc != TS_OK) unlink(tmp); // the old file at path is untouched
    else rc = sync_dir(path);
  }
  free(tmp);
  free(h.p);
  free(bytes);
  return rc;
}

uint32_t ts_ckpt_crc32(uint32_t crc, const void *data, size_t n) {
  static crc_tables ct;
  static int ready; // built once, by the main thread (the writers' callers)
  if (!ready) crc_init(&ct), ready = 1;
  return crc_update(&ct, crc, data, n);
}

int ts_ckpt_prefix(const char *path, const ts_tensor *tensors, int n, const ts_meta *meta,
                   int n_meta, uint32_t data_crc, unsigned char **out, size_t *len) {
  *out = NULL;
  *len = 0;
  if (!path || !*path) return ts_fail(TS_ERUNTIME, "checkpoint: empty path");
  if (n < 0 || n_meta < 0 || (n && !tensors) || (n_meta && !meta))
    return bad(path, "bad tensor or metadata list");
  uint64_t *bytes = calloc((size_t)n + 1, sizeof *bytes);
  crc_tables *ct = malloc(sizeof *ct);
  sbuf h = {0};
  int rc = !bytes || !ct ? bad(path, "out of memory") : TS_OK;
  if (!rc) rc = check_inputs(path, tensors, n, meta, n_meta, bytes, 0);
  if (!rc) {
    crc_init(ct);
    rc = build_header(path, &h, tensors, n, bytes, meta, n_meta, data_crc, FORMAT_NEWEST, ct);
  }
  unsigned char *buf = rc ? NULL : malloc(8 + h.len);
  if (!rc && !buf) rc = bad(path, "out of memory");
  if (!rc) {
    put_len8(buf, h.len);
    memcpy(buf + 8, h.p, h.len);
    *out = buf;
    *len = 8 + h.len;
  }
  free(h.p);
  free(ct);
  free(bytes);
  return rc;
}

int ts_ckpt_commit(const char *tmp, const char *path) {
  if (rename(tmp, path) != 0) {
    int rc = bad(path, "cannot rename %s over it: %s", tmp, strerror(errno));
    unlink(tmp); // the old file at path is untouched
    return rc;
  }
  return sync_dir(path);
}

int ts_ckpt_write(const char *path, const ts_tensor *tensors, int n, const ts_meta *meta,
                  int n_meta) {
  return write_format(path, tensors, n, meta, n_meta, 1);
}

int ts_ckpt_write_v2(const char *path, const ts_tensor *tensors, int n, const ts_meta *meta,
                     int n_meta) {
  return write_format(path, tensors, n, meta, n_meta, FORMAT_NEWEST);
}

int ts_ckpt_write_format(const char *path, const ts_tensor *tensors, int n, const ts_meta *meta,
                         int n_meta, int format) {
  if (format < 1 || format > FORMAT_NEWEST)
    return bad(path, "no checkpoint format %d (1..%d)", format, FORMAT_NEWEST);
  return write_format(path, tensors, n, meta, n_meta, format);
}

// ---------------------------------------------------------------------------
// Reading: the header is parsed strictly (json.c), then its members are read
// into the checkpoint's tables in document order. Tensor names and metadata
// stay in the parsed tree, which lives as long as the checkpoint.
typedef struct {
  const char *name; // points into the parsed header
  int ndim;
  int64_t shape[TS_MAX_DIMS];
  uint64_t begin, end;
} entry;

struct ts_ckpt {
  char *path;
  int fd;
  int format;          // 1 or 2 (tessera.format)
  uint64_t data_start; // 8 + N
  uint64_t data_len;
  json_value header;      // the parsed header, alive as long as the checkpoint
  const json_value *meta; // its "__metadata__" object, NULL when absent
  entry *tensors;
  int n_tensors;
  int header_only; // ts_ckpt_open_header: the data section's checksum not read
};

// A header that is JSON, but not of the shape every reader expects, reads as
// a syntax error too, with the byte offset of the value.
static int not_json(const char *path, const char *what, size_t pos) {
  return bad(path, "header is not valid JSON: %s at header byte %zu", what, pos);
}

// An array of non-negative integers; stores up to max of them, counts all.
static int int_array(const char *path, const entry *e, const json_value *a, uint64_t *vals,
                     int max, int *count) {
  if (a->type != JSON_ARRAY) return not_json(path, "expected '['", a->pos);
  for (int i = 0; i < a->n; i++) {
    uint64_t v;
    if (a->items[i].type != JSON_NUMBER)
      return bad(path, "tensor '%s': %s must hold integers", e->name, a->key);
    if (json_u64(&a->items[i], &v))
      return bad(path, "tensor '%s': %s holds a value that is not an integer in 0..2^64-1",
                 e->name, a->key);
    if (i < max) vals[i] = v;
  }
  *count = a->n;
  return TS_OK;
}

// "name": {"dtype": "F32", "shape": [...], "data_offsets": [b, e]}; the
// entry's name is already set. Layout checks come later, over all tensors.
static int read_tensor(const char *path, const json_value *t, entry *e) {
  if (t->type != JSON_OBJECT) return bad(path, "tensor '%s': its entry is not an object", e->name);
  const json_value *dtype = NULL, *shape = NULL, *offsets = NULL;
  for (int i = 0; i < t->n; i++) {
    const json_value *f = &t->items[i];
    const json_value **seen = !strcmp(f->key, "dtype")          ? &dtype
                              : !strcmp(f->key, "shape")        ? &shape
                              : !strcmp(f->key, "data_offsets") ? &offsets
                                                                : NULL;
    if (!seen) continue; // unknown fields are allowed by the format
    if (*seen) return bad(path, "tensor '%s': field '%s' appears twice", e->name, f->key);
    *seen = f;
    int rc;
    if (f == dtype && f->type != JSON_STRING)
      return bad(path, "tensor '%s': dtype is not a string", e->name);
    if (f == shape) {
      uint64_t dims[TS_MAX_DIMS];
      if ((rc = int_array(path, e, f, dims, TS_MAX_DIMS, &e->ndim))) return rc;
      if (e->ndim > TS_MAX_DIMS)
        return bad(path, "tensor '%s' has %d dims (at most %d supported)", e->name, e->ndim,
                   TS_MAX_DIMS);
      for (int d = 0; d < e->ndim; d++) {
        if (dims[d] > (uint64_t)INT64_MAX)
          return bad(path, "tensor '%s': dim %d is too large", e->name, d);
        e->shape[d] = (int64_t)dims[d];
      }
    }
    if (f == offsets) {
      uint64_t off[2];
      int k;
      if ((rc = int_array(path, e, f, off, 2, &k))) return rc;
      if (k != 2) return bad(path, "tensor '%s': data_offsets has %d values, not 2", e->name, k);
      e->begin = off[0], e->end = off[1];
    }
  }
  if (!dtype) return bad(path, "tensor '%s' has no dtype", e->name);
  if (!shape) return bad(path, "tensor '%s' has no shape", e->name);
  if (!offsets) return bad(path, "tensor '%s' has no data_offsets", e->name);
  if (strcmp(dtype->str, "F32"))
    return bad(path, "tensor '%s' has dtype %s (only F32 is supported)", e->name, dtype->str);
  return TS_OK;
}

// "__metadata__": {"key": "value", ...}, string to string only.
// Repeated keys are found by sorting (json_object_duplicate), not pairwise: a
// header of a million entries must not take hours to refuse. Each is
// reported where the member-by-member reading reaches it.
static int read_meta(const char *path, const json_value *m) {
  if (m->type != JSON_OBJECT) return bad(path, "__metadata__ is not an object");
  const json_value *dup;
  if (json_object_duplicate(m, &dup)) return bad(path, "out of memory");
  for (int i = 0; i < m->n; i++) {
    const char *key = m->items[i].key;
    if (m->items[i].type != JSON_STRING)
      return bad(path, "metadata value of '%s' is not a string", key);
    if (&m->items[i] == dup) return bad(path, "metadata key '%s' appears twice", key);
  }
  return TS_OK;
}

static int read_header(ts_ckpt *ck) {
  const json_value *h = &ck->header, *dup;
  if (h->type != JSON_OBJECT) return not_json(ck->path, "expected '{'", h->pos);
  ck->tensors = calloc((size_t)h->n + 1, sizeof *ck->tensors);
  if (!ck->tensors || json_object_duplicate(h, &dup)) return bad(ck->path, "out of memory");
  for (int i = 0; i < h->n; i++) {
    const json_value *v = &h->items[i];
    int rc;
    if (!strcmp(v->key, "__metadata__")) {
      if (ck->meta) return bad(ck->path, "__metadata__ appears twice");
      ck->meta = v;
      rc = read_meta(ck->path, v);
    } else {
      if (v == dup) return bad(ck->path, "tensor '%s' appears twice", v->key);
      entry *e = &ck->tensors[ck->n_tensors++];
      e->name = v->key;
      rc = read_tensor(ck->path, v, e);
    }
    if (rc) return rc;
  }
  return TS_OK;
}

// ---------------------------------------------------------------------------
// Opening: size, header, layout, checksum, in that order, so that each kind
// of damage is reported by the first check that can name it.

static int read_full(int fd, void *buf, size_t n, uint64_t off) {
  char *p = buf;
  while (n) {
    ssize_t k = pread(fd, p, n, (off_t)off);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return errno;
    if (k == 0) return EIO; // the file shrank under us
    p += k, n -= (size_t)k, off += (uint64_t)k;
  }
  return 0;
}

static int by_offset(const void *a, const void *b) {
  const entry *x = *(const entry *const *)a, *y = *(const entry *const *)b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return x->end < y->end ? -1 : x->end > y->end;
}

// Each tensor's size must match its shape, and the tensors must tile the data
// section exactly: no gap, no overlap, nothing missing (truncation) or extra.
static int check_layout(ts_ckpt *ck) {
  const char *path = ck->path;
  for (int i = 0; i < ck->n_tensors; i++) {
    const entry *e = &ck->tensors[i];
    if (e->end < e->begin)
      return bad(path, "tensor '%s' has data_offsets [%llu, %llu] with end before begin",
                 e->name, (unsigned long long)e->begin, (unsigned long long)e->end);
    uint64_t numel = 1;
    int overflow = 0;
    for (int d = 0; d < e->ndim; d++) {
      uint64_t s = (uint64_t)e->shape[d];
      if (s && numel > (UINT64_MAX / 4) / s) overflow = 1;
      numel *= s;
    }
    char sh[128];
    shape_str(sh, sizeof sh, e->ndim, e->shape);
    if (overflow || numel * 4 != e->end - e->begin)
      return bad(path, "tensor '%s' has shape %s but data_offsets [%llu, %llu] span %llu bytes",
                 e->name, sh, (unsigned long long)e->begin, (unsigned long long)e->end,
                 (unsigned long long)(e->end - e->begin));
    if (e->end > ck->data_len)
      return bad(path,
                 "tensor '%s' ends at data byte %llu but the data section has only %llu bytes "
                 "(file truncated, or offsets out of range)",
                 e->name, (unsigned long long)e->end, (unsigned long long)ck->data_len);
  }
  const entry **order = malloc(((size_t)ck->n_tensors + 1) * sizeof *order);
  if (!order) return bad(path, "out of memory");
  for (int i = 0; i < ck->n_tensors; i++) order[i] = &ck->tensors[i];
  qsort(order, (size_t)ck->n_tensors, sizeof *order, by_offset);
  uint64_t at = 0;
  int rc = TS_OK;
  for (int i = 0; i < ck->n_tensors && rc == TS_OK; i++) {
    const entry *e = order[i];
    if (e->begin < at)
      rc = bad(path, "tensors '%s' and '%s' overlap in the data section", order[i - 1]->name,
               e->name);
    else if (e->begin > at)
      rc = bad(path, "data bytes [%llu, %llu) before tensor '%s' belong to no tensor",
               (unsigned long long)at, (unsigned long long)e->begin, e->name);
    at = e->end;
  }
  free(order);
  if (rc == TS_OK && at != ck->data_len)
    rc = bad(path, "%llu bytes after the last tensor's data (appended bytes, or a bad header)",
             (unsigned long long)(ck->data_len - at));
  return rc;
}

static int check_format(ts_ckpt *ck) {
  const char *fmt = ts_ckpt_meta(ck, META_FORMAT);
  if (!fmt) return bad(ck->path, "metadata has no %s: not a tessera checkpoint", META_FORMAT);
  if (strcmp(fmt, "1") && strcmp(fmt, "2") && strcmp(fmt, "3"))
    return bad(ck->path, "%s is '%s', this build reads '1', '2' and '3'", META_FORMAT, fmt);
  ck->format = fmt[0] - '0';
  return TS_OK;
}

// Format 3: the run member's bytes, as the writer puts them (RUN_MEMBER,
// then the value's string literal); none: an empty span.
static int run_span(const ts_ckpt *ck, const char *hdr, size_t hlen, span *out) {
  *out = (span){0, 0};
  const json_value *v = ck->meta ? json_get(ck->meta, META_RUN) : NULL;
  if (!v) return TS_OK;
  const size_t k = strlen(RUN_MEMBER);
  if (v->pos < k || v->pos >= hlen || hdr[v->pos] != '"' || memcmp(hdr + v->pos - k, RUN_MEMBER, k))
    return bad(ck->path, "%s is not written as a checkpoint writer writes it", META_RUN);
  size_t i = v->pos + 1; // the parser accepted the literal: it ends before hlen
  while (i < hlen && hdr[i] != '"') i += hdr[i] == '\\' ? 2 : 1;
  if (i >= hlen) return bad(ck->path, "%s: its value does not end", META_RUN);
  *out = (span){v->pos - k, i + 1};
  return TS_OK;
}

// Formats 2 and 3: the stored header checksum must be 8 hex digits written
// as such (no escapes: the bytes are what was summed) and equal the
// recomputed one.
static int check_header_crc(ts_ckpt *ck, const unsigned char len8[8], const char *hdr,
                            size_t hlen) {
  if (ck->format < 2) return TS_OK;
  const json_value *v = ck->meta ? json_get(ck->meta, META_HCRC) : NULL;
  if (!v)
    return bad(ck->path, "metadata has no %s, which %s '%d' requires", META_HCRC, META_FORMAT,
               ck->format);
  span run = {0, 0};
  int rc = ck->format == 3 ? run_span(ck, hdr, hlen, &run) : TS_OK;
  if (rc) return rc;
  size_t at = v->pos + 1;
  if (strlen(v->str) != 8 || strspn(v->str, "0123456789abcdef") != 8 || at + 9 > hlen ||
      memcmp(hdr + at, v->str, 8) || hdr[at + 8] != '"')
    return bad(ck->path, "%s is not 8 lowercase hex digits", META_HCRC);
  crc_tables *ct = malloc(sizeof *ct);
  if (!ct) return bad(ck->path, "out of memory");
  crc_init(ct);
  char got[9];
  snprintf(got, sizeof got, "%08x",
           (unsigned)header_crc(ct, ck->format, len8, hdr, hlen, at, run));
  free(ct);
  if (strcmp(v->str, got))
    return bad(ck->path,
               "header checksum mismatch (stored %s, computed %s): the header (metadata, "
               "shapes or offsets) is damaged or was edited",
               v->str, got);
  return TS_OK;
}

static int check_crc(ts_ckpt *ck) {
  const char *want = ts_ckpt_meta(ck, META_CRC);
  if (!want) return bad(ck->path, "metadata has no %s", META_CRC);
  unsigned char *buf = malloc(IO_CHUNK);
  crc_tables *ct = malloc(sizeof *ct);
  if (!buf || !ct) {
    free(buf), free(ct);
    return bad(ck->path, "out of memory");
  }
  crc_init(ct);
  uint32_t crc = 0;
  int err = 0;
  for (uint64_t off = 0; off < ck->data_len && !err;) {
    size_t k = ck->data_len - off < IO_CHUNK ? (size_t)(ck->data_len - off) : IO_CHUNK;
    err = read_full(ck->fd, buf, k, ck->data_start + off);
    if (!err) crc = crc_update(ct, crc, buf, k);
    off += k;
  }
  free(buf), free(ct);
  if (err) return bad(ck->path, "reading the data failed: %s", strerror(err));
  char got[9];
  snprintf(got, sizeof got, "%08x", (unsigned)crc);
  if (strcmp(want, got))
    return bad(ck->path, "data checksum mismatch (stored %s, computed %s): the data is damaged",
               want, got);
  return TS_OK;
}

static int open_checked(ts_ckpt *ck) {
  const char *path = ck->path;
  // without blocking (a FIFO would wait for a writer), checked regular below
  ck->fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (ck->fd < 0) return bad(path, "cannot open: %s", strerror(errno));
  struct stat st;
  if (fstat(ck->fd, &st) != 0) return bad(path, "cannot stat: %s", strerror(errno));
  if (!S_ISREG(st.st_mode)) return bad(path, "not a regular file");
  uint64_t size = (uint64_t)st.st_size;
  if (size < 8)
    return bad(path, "file is %llu bytes, too short for the 8-byte header length (truncated?)",
               (unsigned long long)size);
  unsigned char len8[8];
  int err = read_full(ck->fd, len8, 8, 0);
  if (err) return bad(path, "cannot read: %s", strerror(err));
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | len8[i];
  if (hlen > size - 8)
    return bad(path, "header length %llu exceeds the %llu bytes after it (file truncated, or "
                     "not a checkpoint)",
               (unsigned long long)hlen, (unsigned long long)(size - 8));
  if (hlen < 2 || hlen > MAX_HEADER)
    return bad(path, "header length %llu is not plausible (2..%llu)", (unsigned long long)hlen,
               (unsigned long long)MAX_HEADER);
  ck->data_start = 8 + hlen;
  ck->data_len = size - 8 - hlen;
  char *hdr = malloc((size_t)hlen);
  if (!hdr) return bad(path, "out of memory for a %llu-byte header", (unsigned long long)hlen);
  err = read_full(ck->fd, hdr, (size_t)hlen, 8);
  if (err) {
    free(hdr);
    return bad(path, "cannot read the header: %s", strerror(err));
  }
  json_error je;
  int bad_json = json_parse(&ck->header, hdr, (size_t)hlen, 0, &je);
  int rc = TS_OK;
  if (bad_json && je.oom) rc = bad(path, "out of memory parsing the header");
  else if (bad_json) rc = not_json(path, je.msg, je.pos);
  if (rc == TS_OK) rc = read_header(ck);
  if (rc == TS_OK) rc = check_layout(ck);
  if (rc == TS_OK) rc = check_format(ck);
  if (rc == TS_OK) rc = check_header_crc(ck, len8, hdr, (size_t)hlen);
  free(hdr);
  if (rc == TS_OK && !ck->header_only) rc = check_crc(ck);
  return rc;
}

static int open_file(const char *path, int header_only, ts_ckpt **out) {
  *out = NULL;
  if (!path) return ts_fail(TS_ERUNTIME, "checkpoint: NULL path");
  ts_ckpt *ck = calloc(1, sizeof *ck);
  if (!ck || !(ck->path = strdup(path))) {
    free(ck);
    return bad(path, "out of memory");
  }
  ck->fd = -1;
  ck->header_only = header_only;
  int rc = open_checked(ck);
  if (rc != TS_OK) {
    ts_ckpt_close(ck);
    return rc;
  }
  *out = ck;
  return TS_OK;
}

int ts_ckpt_open(const char *path, ts_ckpt **out) { return open_file(path, 0, out); }

int ts_ckpt_open_header(const char *path, ts_ckpt **out) { return open_file(path, 1, out); }

void ts_ckpt_close(ts_ckpt *ck) {
  if (!ck) return;
  if (ck->fd >= 0) close(ck->fd);
  json_free(&ck->header);
  free(ck->tensors);
  free(ck->path);
  free(ck);
}

const char *ts_ckpt_meta(const ts_ckpt *ck, const char *key) {
  const json_value *v = ck->meta ? json_get(ck->meta, key) : NULL;
  return v ? v->str : NULL; // every value was checked to be a string
}

int ts_ckpt_num_tensors(const ts_ckpt *ck) { return ck->n_tensors; }

int ts_ckpt_format(const ts_ckpt *ck) { return ck->format; }

const char *ts_ckpt_path(const ts_ckpt *ck) { return ck->path; }

static const entry *find_entry(const ts_ckpt *ck, const char *name) {
  for (int i = 0; i < ck->n_tensors; i++)
    if (!strcmp(ck->tensors[i].name, name)) return &ck->tensors[i];
  return NULL;
}

static int shape_mismatch(const ts_ckpt *ck, const entry *e, const ts_tensor *t) {
  int same = e->ndim == t->ndim;
  for (int d = 0; same && d < e->ndim; d++) same = e->shape[d] == t->shape[d];
  if (same) return TS_OK;
  char have[128], want[128];
  shape_str(have, sizeof have, e->ndim, e->shape);
  shape_str(want, sizeof want, t->ndim < 0 ? 0 : t->ndim > TS_MAX_DIMS ? TS_MAX_DIMS : t->ndim,
            t->shape);
  return bad(ck->path, "tensor '%s' has shape %s in the file, expected %s", t->name, have, want);
}

// The header order is the data order (check_layout tiles the data, so the
// offsets only need to follow each other); the first difference is named as
// what it is: a tensor missing, one the model does not have, or the order.
int ts_ckpt_read(const ts_ckpt *ck, uint64_t off, void *dst, size_t n) {
  if (off > ck->data_len || n > ck->data_len - off)
    return bad(ck->path, "bytes [%llu, %llu) are outside the data section of %llu bytes",
               (unsigned long long)off, (unsigned long long)(off + n),
               (unsigned long long)ck->data_len);
  int err = read_full(ck->fd, dst, n, ck->data_start + off);
  return err ? bad(ck->path, "reading the data failed: %s", strerror(err)) : TS_OK;
}

int ts_ckpt_tensor(const ts_ckpt *ck, int i, ts_tensor *out) {
  memset(out, 0, sizeof *out);
  if (i < 0 || i >= ck->n_tensors) return bad(ck->path, "no tensor %d", i);
  const entry *e = &ck->tensors[i];
  snprintf(out->name, sizeof out->name, "%s", e->name);
  out->ndim = e->ndim;
  for (int d = 0; d < e->ndim; d++) out->shape[d] = e->shape[d];
  return TS_OK;
}

int ts_ckpt_expect(const ts_ckpt *ck, const ts_tensor *t, int n) {
  uint64_t at = 0;
  for (int i = 0; i < n || i < ck->n_tensors; i++) {
    const entry *e = i < ck->n_tensors ? &ck->tensors[i] : NULL;
    if (i < n && (!e || strcmp(e->name, t[i].name))) {
      if (!find_entry(ck, t[i].name)) return bad(ck->path, "no tensor '%s'", t[i].name);
      int known = 0;
      for (int j = 0; e && j < n && !known; j++) known = !strcmp(t[j].name, e->name);
      if (e && !known)
        return bad(ck->path, "tensor '%s' is not one of this model's", e->name);
      return bad(ck->path, "tensor %d is '%s', expected '%s' (tensors out of order)", i,
                 e ? e->name : "(none)", t[i].name);
    }
    if (i >= n) return bad(ck->path, "tensor '%s' is not one of this model's", e->name);
    int rc = shape_mismatch(ck, e, &t[i]);
    if (rc) return rc;
    if (e->begin != at)
      return bad(ck->path,
                 "tensor '%s' starts at data byte %llu, expected %llu (tensors out of order)",
                 e->name, (unsigned long long)e->begin, (unsigned long long)at);
    at = e->end;
  }
  return TS_OK;
}

int ts_ckpt_load(const ts_ckpt *ck, ts_tensor *t) {
  const entry *e = find_entry(ck, t->name);
  if (!e) return bad(ck->path, "no tensor '%s'", t->name);
  int rc = shape_mismatch(ck, e, t);
  if (rc) return rc;
  uint64_t n = e->end - e->begin;
  if (n == 0) return TS_OK;
  if (!t->data) return bad(ck->path, "tensor '%s': no buffer to load into", t->name);
  if ((uint64_t)(size_t)n != n) return bad(ck->path, "tensor '%s' is too large", t->name);
  int err = read_full(ck->fd, t->data, (size_t)n, ck->data_start + e->begin);
  if (err) return bad(ck->path, "reading tensor '%s' failed: %s", t->name, strerror(err));
  return TS_OK;
}
