// `tessera compare`: walks two run logs (docs/RUN-LOG.md) record by record and
// reports the first place where their results differ.
//
// Only records of type step, eval and final are compared, in order; the config
// line, timing, memory and communication fields are ignored, so a distributed
// run and the serial run compare as identical when their arithmetic is.
//
// Exit codes follow diff(1): 0 equal, 1 different, 2 trouble (a file that
// cannot be read or a malformed line). Trouble cannot share code 1 with
// "different", or a script could not tell a broken log from a diverged run.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compare.h"
#include "tessera.h"

// ---------------------------------------------------------------------------
// A small JSON reader: enough for one log record per line. Values become a
// tree of nodes; strings are decoded, numbers keep their text as well (for
// messages) and their value.
enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

typedef struct jnode jnode;
struct jnode {
  int type;
  double num;  // J_NUM value, J_BOOL 0/1
  char *text;  // J_STR decoded contents, J_NUM the token as written
  int n, cap;  // J_ARR / J_OBJ children
  char **keys; // J_OBJ member names, parallel to kids
  jnode *kids;
};

static void jfree(jnode *v) {
  for (int i = 0; i < v->n; i++) {
    jfree(&v->kids[i]);
    if (v->keys) free(v->keys[i]);
  }
  free(v->kids);
  free(v->keys);
  free(v->text);
  memset(v, 0, sizeof *v);
}

typedef struct {
  const char *s;
  size_t pos;
  const char *err; // static description of the first problem
  int depth;
} jparser;

#define J_MAX_DEPTH 64

static int jerr(jparser *p, const char *msg) {
  if (p->err == NULL) p->err = msg;
  return -1;
}

static void jws(jparser *p) {
  while (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' || p->s[p->pos] == '\n' ||
         p->s[p->pos] == '\r')
    p->pos++;
}

static int jhex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static int jhex4(jparser *p, unsigned *out) {
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    int h = jhex(p->s[p->pos]);
    if (h < 0) return jerr(p, "bad \\u escape");
    v = v * 16 + (unsigned)h;
    p->pos++;
  }
  *out = v;
  return 0;
}

// Appends a code point as UTF-8.
static size_t utf8(char *o, unsigned cp) {
  if (cp < 0x80) {
    o[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (char)(0xc0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (char)(0xe0 | (cp >> 12));
    o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[2] = (char)(0x80 | (cp & 0x3f));
    return 3;
  }
  o[0] = (char)(0xf0 | (cp >> 18));
  o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
  o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
  o[3] = (char)(0x80 | (cp & 0x3f));
  return 4;
}

// Reads a string at the opening quote into a new heap buffer.
static int jstring(jparser *p, char **out) {
  p->pos++; // opening quote
  size_t start = p->pos;
  // the decoded text is never longer than the raw text up to the closing quote
  size_t n = 0;
  while (p->s[start + n] && p->s[start + n] != '"')
    n += p->s[start + n] == '\\' && p->s[start + n + 1] ? 2 : 1;
  char *buf = malloc(n + 1);
  if (buf == NULL) return jerr(p, "out of memory");
  size_t k = 0;
  for (;;) {
    unsigned char c = (unsigned char)p->s[p->pos];
    if (c == '\0') {
      free(buf);
      return jerr(p, "unterminated string");
    }
    if (c < 0x20) {
      free(buf);
      return jerr(p, "control character in string");
    }
    p->pos++;
    if (c == '"') break;
    if (c != '\\') {
      buf[k++] = (char)c;
      continue;
    }
    char e = p->s[p->pos++];
    unsigned cp, lo;
    switch (e) {
    case '"':
    case '\\':
    case '/': buf[k++] = e; break;
    case 'b': buf[k++] = '\b'; break;
    case 'f': buf[k++] = '\f'; break;
    case 'n': buf[k++] = '\n'; break;
    case 'r': buf[k++] = '\r'; break;
    case 't': buf[k++] = '\t'; break;
    case 'u':
      if (jhex4(p, &cp) != 0) {
        free(buf);
        return -1;
      }
      if (cp >= 0xd800 && cp < 0xdc00) { // high surrogate: needs its low half
        if (p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u') {
          free(buf);
          return jerr(p, "unpaired surrogate in string");
        }
        p->pos += 2;
        if (jhex4(p, &lo) != 0 || lo < 0xdc00 || lo > 0xdfff) {
          free(buf);
          return jerr(p, "unpaired surrogate in string");
        }
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
      } else if (cp >= 0xdc00 && cp <= 0xdfff) {
        free(buf);
        return jerr(p, "unpaired surrogate in string");
      }
      // a \uXXXX (6 raw bytes) or a pair (12) never decodes to more bytes
      k += utf8(buf + k, cp);
      break;
    default: free(buf); return jerr(p, "bad escape in string");
    }
  }
  buf[k] = '\0';
  *out = buf;
  return 0;
}

// Numbers by the JSON grammar, plus NaN/Infinity (as Python writes them) and
// nan/inf (as C's printf writes them): a diverged run must still compare.
static int jnumber(jparser *p, jnode *v) {
  const char *s = p->s + p->pos;
  size_t n = 0;
  static const char *special[] = {"NaN", "-NaN", "Infinity", "-Infinity",
                                  "nan", "-nan", "inf",      "-inf"};
  for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) {
    size_t len = strlen(special[i]);
    if (strncmp(s, special[i], len) == 0 &&
        !((s[len] >= 'a' && s[len] <= 'z') || (s[len] >= 'A' && s[len] <= 'Z'))) {
      n = len;
      goto done;
    }
  }
  if (s[n] == '-') n++;
  if (s[n] == '0') {
    n++;
  } else if (s[n] >= '1' && s[n] <= '9') {
    while (s[n] >= '0' && s[n] <= '9')
      n++;
  } else {
    return jerr(p, "unexpected character");
  }
  if (s[n] == '.') {
    n++;
    if (!(s[n] >= '0' && s[n] <= '9')) return jerr(p, "bad number");
    while (s[n] >= '0' && s[n] <= '9')
      n++;
  }
  if (s[n] == 'e' || s[n] == 'E') {
    n++;
    if (s[n] == '+' || s[n] == '-') n++;
    if (!(s[n] >= '0' && s[n] <= '9')) return jerr(p, "bad number");
    while (s[n] >= '0' && s[n] <= '9')
      n++;
  }
done:
  v->type = J_NUM;
  v->text = strndup(s, n);
  if (v->text == NULL) return jerr(p, "out of memory");
  if (strstr(v->text, "Infinity")) // strtod spells it inf/infinity, case-insensitive
    v->num = v->text[0] == '-' ? -INFINITY : INFINITY;
  else
    v->num = strtod(v->text, NULL);
  p->pos += n;
  return 0;
}

static int jvalue(jparser *p, jnode *v);

static int jpush(jparser *p, jnode *v, char *key) {
  if (v->n == v->cap) {
    int cap = v->cap ? 2 * v->cap : 8;
    jnode *kids = realloc(v->kids, (size_t)cap * sizeof *kids);
    if (kids == NULL) return jerr(p, "out of memory");
    v->kids = kids;
    if (v->type == J_OBJ) {
      char **keys = realloc(v->keys, (size_t)cap * sizeof *keys);
      if (keys == NULL) return jerr(p, "out of memory");
      v->keys = keys;
    }
    v->cap = cap;
  }
  memset(&v->kids[v->n], 0, sizeof v->kids[v->n]);
  if (v->type == J_OBJ) v->keys[v->n] = key;
  v->n++;
  return 0;
}

// Objects and arrays share the loop: members are `"key": value` or `value`.
static int jcontainer(jparser *p, jnode *v, int type) {
  char close = type == J_OBJ ? '}' : ']';
  v->type = type;
  if (++p->depth > J_MAX_DEPTH) return jerr(p, "nested too deeply");
  p->pos++;
  jws(p);
  if (p->s[p->pos] == close) {
    p->pos++;
    p->depth--;
    return 0;
  }
  for (;;) {
    char *key = NULL;
    jws(p);
    if (type == J_OBJ) {
      if (p->s[p->pos] != '"') return jerr(p, "expected a member name");
      if (jstring(p, &key) != 0) return -1;
      jws(p);
      if (p->s[p->pos] != ':') {
        free(key);
        return jerr(p, "expected ':'");
      }
      p->pos++;
    }
    if (jpush(p, v, key) != 0) {
      free(key);
      return -1;
    }
    if (jvalue(p, &v->kids[v->n - 1]) != 0) return -1;
    jws(p);
    char c = p->s[p->pos];
    if (c == ',') {
      p->pos++;
      continue;
    }
    if (c == close) {
      p->pos++;
      p->depth--;
      return 0;
    }
    return jerr(p, type == J_OBJ ? "expected ',' or '}'" : "expected ',' or ']'");
  }
}

static int jliteral(jparser *p, const char *word) {
  size_t n = strlen(word);
  if (strncmp(p->s + p->pos, word, n) != 0) return jerr(p, "unexpected character");
  p->pos += n;
  return 0;
}

static int jvalue(jparser *p, jnode *v) {
  jws(p);
  char c = p->s[p->pos];
  switch (c) {
  case '{': return jcontainer(p, v, J_OBJ);
  case '[': return jcontainer(p, v, J_ARR);
  case '"': v->type = J_STR; return jstring(p, &v->text);
  case 't':
    v->type = J_BOOL;
    v->num = 1;
    return jliteral(p, "true");
  case 'f': v->type = J_BOOL; return jliteral(p, "false");
  case 'n':
    if (strncmp(p->s + p->pos, "nan", 3) == 0) return jnumber(p, v);
    v->type = J_NULL;
    return jliteral(p, "null");
  case '\0': return jerr(p, "unexpected end of line");
  default: return jnumber(p, v);
  }
}

// Parses one whole line; anything after the value is an error.
static int jparse(const char *line, jnode *out, const char **err, size_t *col) {
  jparser p = {.s = line};
  memset(out, 0, sizeof *out);
  int rc = jvalue(&p, out);
  if (rc == 0) {
    jws(&p);
    if (p.s[p.pos] != '\0') rc = jerr(&p, "trailing text after the value");
  }
  if (rc != 0) {
    jfree(out);
    *err = p.err;
    *col = p.pos + 1;
  }
  return rc;
}

static const jnode *jget(const jnode *obj, const char *key) {
  if (obj->type != J_OBJ) return NULL;
  for (int i = 0; i < obj->n; i++)
    if (strcmp(obj->keys[i], key) == 0) return &obj->kids[i];
  return NULL;
}

// ---------------------------------------------------------------------------
// Log reader: yields the result records (step, eval, final) one at a time.
typedef struct {
  const char *path;
  FILE *f;
  char *line;
  size_t cap;
  long lineno;
  long count;     // result records read so far
  jnode rec;      // the current record
  char label[64]; // "step 7", "step 10 eval", "step 100 final"
  char type[8];
  double step;
  char step_text[32];
} reader;

static int reader_open(reader *r, const char *path) {
  memset(r, 0, sizeof *r);
  r->path = path;
  r->f = fopen(path, "r");
  if (r->f == NULL) return ts_fail(TS_EUSAGE, "cannot open %s: %s", path, strerror(errno));
  return TS_OK;
}

static void reader_close(reader *r) {
  if (r->f) fclose(r->f);
  free(r->line);
  jfree(&r->rec);
}

// Next result record into r->rec. Returns 1 when one was read, 0 at the end
// of the file, or TS_EUSAGE (negated) for a malformed line.
static int reader_next(reader *r) {
  jfree(&r->rec);
  for (;;) {
    ssize_t len = getline(&r->line, &r->cap, r->f);
    if (len < 0) {
      if (ferror(r->f)) return -ts_fail(TS_EUSAGE, "%s: read error", r->path);
      return 0;
    }
    r->lineno++;
    if (strlen(r->line) != (size_t)len)
      return -ts_fail(TS_EUSAGE, "%s:%ld: NUL byte in line", r->path, r->lineno);
    while (len > 0 && (r->line[len - 1] == '\n' || r->line[len - 1] == '\r'))
      r->line[--len] = '\0';                             // so that error columns stay on the line
    if (strspn(r->line, " \t") == (size_t)len) continue; // blank line
    const char *err = NULL;
    size_t col = 0;
    if (jparse(r->line, &r->rec, &err, &col) != 0)
      return -ts_fail(TS_EUSAGE, "%s:%ld: malformed JSON at column %zu: %s", r->path, r->lineno,
                      col, err ? err : "syntax error");
    if (r->rec.type != J_OBJ)
      return -ts_fail(TS_EUSAGE, "%s:%ld: a record must be a JSON object", r->path, r->lineno);
    const jnode *type = jget(&r->rec, "type");
    if (type == NULL || type->type != J_STR)
      return -ts_fail(TS_EUSAGE, "%s:%ld: record has no \"type\" string", r->path, r->lineno);
    if (strcmp(type->text, "step") != 0 && strcmp(type->text, "eval") != 0 &&
        strcmp(type->text, "final") != 0) {
      jfree(&r->rec); // config line, or a kind this version does not compare
      continue;
    }
    snprintf(r->type, sizeof r->type, "%s", type->text);
    const jnode *step = jget(&r->rec, "step");
    if (step == NULL || step->type != J_NUM)
      return -ts_fail(TS_EUSAGE, "%s:%ld: %s record has no numeric \"step\"", r->path, r->lineno,
                      r->type);
    r->step = step->num;
    snprintf(r->step_text, sizeof r->step_text, "%s", step->text);
    if (strcmp(r->type, "step") == 0)
      snprintf(r->label, sizeof r->label, "step %s", r->step_text);
    else
      snprintf(r->label, sizeof r->label, "step %s %s", r->step_text, r->type);
    r->count++;
    return 1;
  }
}

// ---------------------------------------------------------------------------
// Field comparison.

// A float result: its decimal field and its exact "%a" field.
typedef struct {
  const char *name, *hex;
} result_field;

static const result_field results[] = {
    {"loss", "loss_hex"},
    {"grad_norm", "grad_norm_hex"},
    {"lr", "lr_hex"},
    {"val_loss", "val_loss_hex"},
};
#define N_RESULTS ((int)(sizeof results / sizeof results[0]))

// Value of a float result as the mode sees it: from the hex field in bitwise
// mode (exact), from the decimal field with --rtol (as documented), each
// falling back to the other form when only one is present. Returns 0 if absent.
static int result_value(const jnode *rec, const result_field *f, int use_hex, double *v,
                        const char **hex) {
  const jnode *h = jget(rec, f->hex), *d = jget(rec, f->name);
  *hex = h && h->type == J_STR ? h->text : NULL;
  int have_h = 0, have_d = d && d->type == J_NUM;
  double hv = 0;
  if (*hex) {
    char *end;
    hv = strtod(*hex, &end);
    have_h = end != *hex && *end == '\0';
  }
  if (have_h && (use_hex || !have_d)) {
    *v = hv;
    return 1;
  }
  if (have_d) {
    *v = d->num;
    return 1;
  }
  return 0;
}

// Relative to the first log (the reference run): |a - b| / |a|.
static double rel_diff(double a, double b) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b) ? 0.0 : NAN;
  if (a == b) return 0.0;
  if (a == 0.0) return INFINITY;
  return fabs(a - b) / fabs(a);
}

static int same_bits(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

static void show_value(char *buf, size_t cap, int present, double v, const char *hex) {
  if (!present)
    snprintf(buf, cap, "(missing)");
  else if (hex)
    snprintf(buf, cap, "%s (%.9g)", hex, v);
  else
    snprintf(buf, cap, "%a (%.9g)", v, v);
}

typedef struct {
  double max_rel;
  char where[128];
} rtol_stats;

// Compares the result fields of one pair of records. Returns 1 and prints the
// divergence when they differ.
static int compare_records(const reader *a, const reader *b, double rtol, rtol_stats *st,
                           FILE *out) {
  for (int i = 0; i < N_RESULTS; i++) {
    const result_field *f = &results[i];
    double va = 0, vb = 0;
    const char *ha, *hb;
    int pa = result_value(&a->rec, f, rtol == 0, &va, &ha);
    int pb = result_value(&b->rec, f, rtol == 0, &vb, &hb);
    if (!pa && !pb) continue;
    double rel = pa && pb ? rel_diff(va, vb) : NAN;
    int equal;
    if (!pa || !pb)
      equal = 0;
    else if (rtol == 0)
      equal = same_bits(va, vb) || (isnan(va) && isnan(vb));
    else
      equal = rel <= rtol || (isnan(va) && isnan(vb));
    if (equal) {
      if (rtol > 0 && rel > st->max_rel) {
        st->max_rel = rel;
        snprintf(st->where, sizeof st->where, "%s, %s", a->label, f->name);
      }
      continue;
    }
    char sa[96], sb[96];
    show_value(sa, sizeof sa, pa, va, ha);
    show_value(sb, sizeof sb, pb, vb, hb);
    fprintf(out, "first divergence: %s, %s: %s vs %s", a->label, f->name, sa, sb);
    if (pa && pb) fprintf(out, ", relative difference %.1e", rel);
    fprintf(out, "\n");
    return 1;
  }
  if (rtol == 0) { // the parameter hash is exact by nature; --rtol skips it
    const jnode *ha = jget(&a->rec, "param_hash"), *hb = jget(&b->rec, "param_hash");
    const char *sa = ha && ha->type == J_STR ? ha->text : NULL;
    const char *sb = hb && hb->type == J_STR ? hb->text : NULL;
    if ((sa || sb) && !(sa && sb && strcmp(sa, sb) == 0)) {
      fprintf(out, "first divergence: %s, param_hash: %s vs %s\n", a->label, sa ? sa : "(missing)",
              sb ? sb : "(missing)");
      return 1;
    }
  }
  return 0;
}

int ts_compare_logs(const char *path_a, const char *path_b, double rtol, FILE *out) {
  if (!(rtol >= 0.0) || isinf(rtol))
    return ts_fail(TS_EUSAGE, "--rtol %g: must be a finite number >= 0", rtol);
  reader a, b;
  int rc = reader_open(&a, path_a);
  if (rc != TS_OK) return rc;
  rc = reader_open(&b, path_b);
  if (rc != TS_OK) {
    reader_close(&a);
    return rc;
  }
  rtol_stats st = {0};
  char last[64] = "";
  for (;;) {
    int na = reader_next(&a);
    if (na < 0) {
      rc = -na;
      break;
    }
    int nb = reader_next(&b);
    if (nb < 0) {
      rc = -nb;
      break;
    }
    if (na == 0 && nb == 0) { // both ended together
      if (a.count == 0) {
        rc = ts_fail(TS_EUSAGE, "%s and %s contain no step, eval or final records", path_a, path_b);
      } else {
        if (rtol == 0)
          fprintf(out, "identical\n");
        else if (st.max_rel > 0)
          fprintf(out, "equal within rtol %g (max relative difference %.1e at %s)\n", rtol,
                  st.max_rel, st.where);
        else
          fprintf(out, "equal within rtol %g (no differences)\n", rtol);
        rc = 0;
      }
      break;
    }
    if (na == 0 || nb == 0) { // one log is shorter
      const reader *ended = na == 0 ? &a : &b, *goes_on = na == 0 ? &b : &a;
      fprintf(out, "first divergence: %s: %s has no such record (it ends %s%s)\n", goes_on->label,
              ended->path, last[0] ? "after " : "before the first record", last);
      rc = 1;
      break;
    }
    if (strcmp(a.type, b.type) != 0 || !same_bits(a.step, b.step)) {
      fprintf(out, "first divergence: record %ld: %s vs %s\n", a.count, a.label, b.label);
      rc = 1;
      break;
    }
    if (compare_records(&a, &b, rtol, &st, out)) {
      rc = 1;
      break;
    }
    snprintf(last, sizeof last, "%s", a.label);
  }
  reader_close(&a);
  reader_close(&b);
  return rc;
}
