// JSON (RFC 8259), read strictly into a tree: exactly one value, no trailing
// commas, comments or leading zeros, only the standard escapes, strings of
// valid UTF-8. What tessera reads back (checkpoint headers, run logs, configs)
// is machine-written, so anything outside the grammar is damage: it is refused
// with the byte offset where it was seen, never guessed at. The two leniencies
// (json.h) are opt-in, for the callers whose inputs need them.
#include "json.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  const char *s;
  size_t n, i; // the input, its length, the read position
  int flags, depth;
  json_error *err;
} parser;

static int fail(parser *p, size_t at, const char *msg) {
  p->err->pos = at;
  p->err->msg = msg;
  return -1;
}

static int oom(parser *p) {
  p->err->oom = 1;
  return fail(p, p->i, "out of memory");
}

static int at(const parser *p, char c) { return p->i < p->n && p->s[p->i] == c; }

// Skips whitespace; the next byte, or -1 at the end of the input.
static int peek(parser *p) {
  while (at(p, ' ') || at(p, '\t') || at(p, '\n') || at(p, '\r')) p->i++;
  return p->i < p->n ? (unsigned char)p->s[p->i] : -1;
}

// ---------------------------------------------------------------------------
// UTF-8.

// Length of the well-formed UTF-8 sequence at s (n bytes available), 0 when
// it is malformed: overlong forms, surrogates and code points above U+10FFFF
// are refused, as the JSON text must be valid UTF-8.
static size_t utf8_len(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  if (c < 0x80) return 1;
  size_t len;
  uint32_t cp;
  if (c >= 0xC2 && c <= 0xDF) len = 2, cp = c & 0x1F;
  else if (c >= 0xE0 && c <= 0xEF) len = 3, cp = c & 0x0F;
  else if (c >= 0xF0 && c <= 0xF4) len = 4, cp = c & 0x07;
  else return 0;
  if (n < len) return 0;
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    cp = cp << 6 | (s[i] & 0x3F);
  }
  if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000)) return 0; // overlong
  if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return 0;
  return len;
}

int json_utf8_valid(const char *s) {
  size_t n = strlen(s);
  for (size_t i = 0, k; i < n; i += k)
    if (!(k = utf8_len((const unsigned char *)s + i, n - i))) return 0;
  return 1;
}

// Writes code point cp (valid, not a surrogate) as UTF-8; returns the byte count.
static size_t utf8_put(char *o, uint32_t cp) {
  static const unsigned char lead[5] = {0, 0, 0xC0, 0xE0, 0xF0}; // by sequence length
  if (cp < 0x80) {
    o[0] = (char)cp;
    return 1;
  }
  size_t len = cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
  for (size_t i = len - 1; i > 0; i--, cp >>= 6) o[i] = (char)(0x80 | (cp & 0x3F));
  o[0] = (char)(lead[len] | cp);
  return len;
}

// ---------------------------------------------------------------------------
// Strings.

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The four hex digits of a \u escape.
static int hex4(parser *p, uint32_t *cp) {
  *cp = 0;
  for (int k = 0; k < 4; k++, p->i++) {
    int h = p->i < p->n ? hexval(p->s[p->i]) : -1;
    if (h < 0) return fail(p, p->i, "bad \\u escape");
    *cp = *cp << 4 | (uint32_t)h;
  }
  return 0;
}

// The escape after a backslash (p->i is just past it), decoded into buf at *k.
static int unescape(parser *p, char *buf, size_t *k) {
  static const char name[] = "\"\\/bfnrt", byte[] = "\"\\/\b\f\n\r\t";
  char c = p->i < p->n ? p->s[p->i] : 0;
  const char *hit = c ? strchr(name, c) : NULL;
  if (c != 'u' && !hit) return fail(p, p->i, "bad escape in string");
  p->i++;
  if (hit) {
    buf[(*k)++] = byte[hit - name];
    return 0;
  }
  uint32_t cp, lo;
  if (hex4(p, &cp)) return -1;
  if (cp >= 0xDC00 && cp <= 0xDFFF) return fail(p, p->i - 6, "unpaired surrogate in string");
  if (cp >= 0xD800 && cp <= 0xDBFF) { // a pair encodes one code point above U+FFFF
    if (!(at(p, '\\') && p->i + 1 < p->n && p->s[p->i + 1] == 'u'))
      return fail(p, p->i, "unpaired surrogate in string");
    p->i += 2;
    if (hex4(p, &lo)) return -1;
    if (lo < 0xDC00 || lo > 0xDFFF) return fail(p, p->i - 6, "unpaired surrogate in string");
    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
  }
  // Strings are C strings: an embedded NUL would silently cut one short.
  if (cp == 0) return fail(p, p->i - 6, "\\u0000 in string");
  *k += utf8_put(buf + *k, cp);
  return 0;
}

// The characters of a string after its opening quote, through the closing one.
static int decode(parser *p, char *buf) {
  size_t k = 0;
  for (;;) {
    if (p->i >= p->n) return fail(p, p->i, "unterminated string");
    unsigned char c = (unsigned char)p->s[p->i];
    if (c == '"') break;
    if (c < 0x20) return fail(p, p->i, "control character in string");
    if (c == '\\') {
      p->i++;
      if (unescape(p, buf, &k)) return -1;
      continue;
    }
    size_t len =
        p->flags & JSON_ANY_BYTES ? 1 : utf8_len((const unsigned char *)p->s + p->i, p->n - p->i);
    if (!len) return fail(p, p->i, "invalid UTF-8 in string");
    memcpy(buf + k, p->s + p->i, len);
    k += len, p->i += len;
  }
  p->i++;
  buf[k] = '\0';
  return 0;
}

// The string at p->i (its opening quote) into a new buffer *out.
static int parse_string(parser *p, char **out) {
  size_t start = ++p->i, raw = 0;
  // Decoding never lengthens: an escape of 2, 6 or 12 bytes gives at most 1, 3 or 4.
  while (start + raw < p->n && p->s[start + raw] != '"') raw += p->s[start + raw] == '\\' ? 2 : 1;
  char *buf = malloc(raw + 1);
  if (!buf) return oom(p);
  if (decode(p, buf)) return free(buf), -1;
  *out = buf;
  return 0;
}

// ---------------------------------------------------------------------------
// Numbers and words.

// Keeps the number's text (callers may need it exactly: integers above 2^53,
// labels as written) and its value.
static int set_number(parser *p, json_value *v, size_t start) {
  v->type = JSON_NUMBER;
  if (!(v->str = strndup(p->s + start, p->i - start))) return oom(p);
  v->num = strtod(v->str, NULL);
  return 0;
}

static int digits(parser *p) {
  size_t start = p->i;
  while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
  return p->i > start;
}

// -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?; after "0" the number ends,
// so a leading zero ("01") fails at the next byte.
static int parse_number(parser *p, json_value *v) {
  size_t start = p->i;
  if (at(p, '-')) p->i++;
  if (at(p, '0')) p->i++;
  else if (!digits(p)) return fail(p, p->i, "bad number");
  if (at(p, '.')) {
    p->i++;
    if (!digits(p)) return fail(p, p->i, "bad number");
  }
  if (at(p, 'e') || at(p, 'E')) {
    p->i++;
    if (at(p, '+') || at(p, '-')) p->i++;
    if (!digits(p)) return fail(p, p->i, "bad number");
  }
  return set_number(p, v, start);
}

// The literal words; the non-finite numbers only with JSON_NONFINITE.
static const struct {
  const char *word;
  json_type type;
} words[] = {
    {"true", JSON_TRUE},   {"false", JSON_FALSE},     {"null", JSON_NULL},
    {"NaN", JSON_NUMBER},  {"-NaN", JSON_NUMBER},     {"nan", JSON_NUMBER},
    {"-nan", JSON_NUMBER}, {"Infinity", JSON_NUMBER}, {"-Infinity", JSON_NUMBER},
    {"inf", JSON_NUMBER},  {"-inf", JSON_NUMBER},
};

// ---------------------------------------------------------------------------
// Values.

static int parse_value(parser *p, json_value *v);

// Appends an empty item to v (an array or object); NULL when out of memory.
static json_value *push(parser *p, json_value *v) {
  // The capacity is implicit: 4, doubled each time n reaches a power of two.
  if (v->n == INT_MAX) return oom(p), NULL;
  if (v->n == 0 || (v->n >= 4 && (v->n & (v->n - 1)) == 0)) {
    json_value *items = realloc(v->items, (v->n ? 2 * (size_t)v->n : 4) * sizeof *items);
    if (!items) return oom(p), NULL;
    v->items = items;
  }
  json_value *item = &v->items[v->n++];
  memset(item, 0, sizeof *item);
  return item;
}

// Arrays and objects share the loop: items are `value` or `"key": value`.
static int parse_container(parser *p, json_value *v, int open) {
  int obj = open == '{', close = obj ? '}' : ']';
  v->type = obj ? JSON_OBJECT : JSON_ARRAY;
  if (++p->depth > JSON_MAX_DEPTH) return fail(p, p->i, "nested too deeply");
  p->i++;
  if (peek(p) == close) return p->i++, p->depth--, 0;
  for (;;) {
    json_value *item = push(p, v);
    if (!item) return -1;
    if (obj) {
      if (peek(p) != '"') return fail(p, p->i, "expected a member name");
      if (parse_string(p, &item->key)) return -1;
      if (peek(p) != ':') return fail(p, p->i, "expected ':'");
      p->i++;
    }
    if (parse_value(p, item)) return -1;
    int c = peek(p);
    if (c == close) return p->i++, p->depth--, 0;
    if (c != ',') return fail(p, p->i, obj ? "expected ',' or '}'" : "expected ',' or ']'");
    p->i++;
  }
}

static int parse_value(parser *p, json_value *v) {
  int c = peek(p);
  v->pos = p->i;
  if (c == '{' || c == '[') return parse_container(p, v, c);
  if (c == '"') return v->type = JSON_STRING, parse_string(p, &v->str);
  for (size_t k = 0; k < sizeof words / sizeof words[0]; k++) {
    size_t len = strlen(words[k].word);
    if (words[k].type == JSON_NUMBER && !(p->flags & JSON_NONFINITE)) continue;
    if (p->n - p->i < len || memcmp(p->s + p->i, words[k].word, len)) continue;
    p->i += len;
    if (words[k].type == JSON_NUMBER) return set_number(p, v, v->pos);
    return v->type = words[k].type, 0;
  }
  if (c == '-' || (c >= '0' && c <= '9')) return parse_number(p, v);
  return fail(p, p->i, c < 0 ? "unexpected end of input" : "unexpected character");
}

int json_parse(json_value *out, const char *s, size_t n, int flags, json_error *err) {
  parser p = {.s = s, .n = n, .flags = flags, .err = err};
  memset(out, 0, sizeof *out);
  *err = (json_error){0};
  int rc = parse_value(&p, out);
  if (rc == 0 && peek(&p) >= 0) rc = fail(&p, p.i, "trailing characters after the value");
  if (rc) json_free(out);
  return rc;
}

void json_free(json_value *v) {
  for (int i = 0; i < v->n; i++) json_free(&v->items[i]);
  free(v->items);
  free(v->key);
  free(v->str);
  memset(v, 0, sizeof *v);
}

const json_value *json_get(const json_value *obj, const char *key) {
  if (obj->type != JSON_OBJECT) return NULL;
  for (int i = 0; i < obj->n; i++)
    if (!strcmp(obj->items[i].key, key)) return &obj->items[i];
  return NULL;
}

// Members by key, then by position: equal keys end up adjacent, in
// document order.
static int by_key(const void *a, const void *b) {
  const json_value *x = *(const json_value *const *)a, *y = *(const json_value *const *)b;
  int c = strcmp(x->key, y->key);
  return c ? c : (x > y) - (x < y);
}

// Sorted, not pairwise: a damaged or crafted file may hold an object of a
// million members, whose pairwise check would take hours.
int json_object_duplicate(const json_value *obj, const json_value **dup) {
  *dup = NULL;
  if (obj->type != JSON_OBJECT || obj->n < 2) return 0;
  const json_value **m = malloc((size_t)obj->n * sizeof *m);
  if (!m) return -1;
  for (int i = 0; i < obj->n; i++) m[i] = &obj->items[i];
  qsort(m, (size_t)obj->n, sizeof *m, by_key);
  // of each run of one key, its second member; the first of those in the document
  for (int i = 1; i < obj->n; i++)
    if (!strcmp(m[i - 1]->key, m[i]->key) && (i < 2 || strcmp(m[i - 2]->key, m[i]->key)) &&
        (!*dup || m[i] < *dup))
      *dup = m[i];
  free(m);
  return 0;
}

const json_value *json_find_duplicate(const json_value *v) {
  if (v->type != JSON_OBJECT && v->type != JSON_ARRAY) return NULL;
  const json_value *here = NULL;
  // out of memory: pairwise after all (slow, but never a wrong answer)
  if (v->type == JSON_OBJECT && json_object_duplicate(v, &here) != 0)
    for (int i = 1; i < v->n && !here; i++)
      for (int j = 0; j < i && !here; j++)
        if (!strcmp(v->items[j].key, v->items[i].key)) here = &v->items[i];
  for (int i = 0; i < v->n; i++) {
    if (&v->items[i] == here) return here;
    const json_value *d = json_find_duplicate(&v->items[i]);
    if (d) return d;
  }
  return NULL;
}

int json_u64(const json_value *v, uint64_t *out) {
  if (v->type != JSON_NUMBER) return -1;
  uint64_t x = 0;
  for (const char *c = v->str; *c; c++) {
    unsigned d = (unsigned)(*c - '0');
    if (d > 9 || x > (UINT64_MAX - d) / 10) return -1; // a sign, fraction, exponent or overflow
    x = x * 10 + d;
  }
  *out = x;
  return 0;
}

// ---------------------------------------------------------------------------
// Writing.

// Appends k bytes at *n, keeping the last byte of dst for the NUL.
static void put(char *dst, size_t cap, size_t *n, const char *s, size_t k) {
  for (size_t i = 0; i < k; i++, (*n)++)
    if (*n + 1 < cap) dst[*n] = s[i];
}

size_t json_escape(char *dst, size_t cap, const char *s) {
  static const char byte[] = "\"\\\b\f\n\r\t", name[] = "\"\\bfnrt";
  size_t n = 0;
  put(dst, cap, &n, "\"", 1);
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    const char *hit = strchr(byte, *c);
    char e[8] = {'\\'};
    if (hit) e[1] = name[hit - byte], put(dst, cap, &n, e, 2);
    else if (*c < 0x20) snprintf(e, sizeof e, "\\u%04x", *c), put(dst, cap, &n, e, 6);
    else put(dst, cap, &n, (const char *)c, 1);
  }
  put(dst, cap, &n, "\"", 1);
  if (cap) dst[n < cap ? n : cap - 1] = '\0';
  return n;
}
