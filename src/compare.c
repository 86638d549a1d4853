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
#include <strings.h>

#include "compare.h"
#include "json.h"
#include "tessera.h"

// ---------------------------------------------------------------------------
// The results compared. A float result: its decimal field and its exact "%a" field.
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

// C's "%a" of a float, as printf and Python's float.hex write it:
// [-]0xH[.H...]p[+-]D, or inf / nan. Anything else in a *_hex field is a
// damaged log, not a value that could differ (strtod would also take "1.5").
static int is_hex_float(const char *s) {
  if (*s == '-' || *s == '+') s++;
  if (!strcasecmp(s, "inf") || !strcasecmp(s, "infinity") || !strcasecmp(s, "nan")) return 1;
  if (s[0] != '0' || (s[1] != 'x' && s[1] != 'X')) return 0;
  s += 2;
  size_t k = strspn(s, "0123456789abcdefABCDEF");
  if (k == 0) return 0;
  s += k;
  if (*s == '.') s += 1 + strspn(s + 1, "0123456789abcdefABCDEF");
  if (*s != 'p' && *s != 'P') return 0;
  s++;
  if (*s == '+' || *s == '-') s++;
  k = strspn(s, "0123456789");
  return k > 0 && s[k] == '\0';
}

// The parameter hash: 16 hex digits (docs/RUN-LOG.md).
static int is_hash(const char *s) {
  return strlen(s) == 16 && strspn(s, "0123456789abcdefABCDEF") == 16;
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
  json_value rec; // the current record
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
  json_free(&r->rec);
}

// Next result record into r->rec. Returns 1 when one was read, 0 at the end
// of the file, or TS_EUSAGE (negated) for a malformed line.
static int reader_next(reader *r) {
  json_free(&r->rec);
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
    // NaN and inf are what a diverged run writes; paths in the config line are any bytes
    json_error err;
    if (json_parse(&r->rec, r->line, (size_t)len, JSON_NONFINITE | JSON_ANY_BYTES, &err) != 0)
      return -ts_fail(TS_EUSAGE, "%s:%ld: malformed JSON at column %zu: %s", r->path, r->lineno,
                      err.pos + 1, err.msg);
    if (r->rec.type != JSON_OBJECT)
      return -ts_fail(TS_EUSAGE, "%s:%ld: a record must be a JSON object", r->path, r->lineno);
    const json_value *type = json_get(&r->rec, "type");
    if (type == NULL || type->type != JSON_STRING)
      return -ts_fail(TS_EUSAGE, "%s:%ld: record has no \"type\" string", r->path, r->lineno);
    if (strcmp(type->str, "step") != 0 && strcmp(type->str, "eval") != 0 &&
        strcmp(type->str, "final") != 0) {
      json_free(&r->rec); // config line, or a kind this version does not compare
      continue;
    }
    snprintf(r->type, sizeof r->type, "%s", type->str);
    const json_value *step = json_get(&r->rec, "step");
    if (step == NULL || step->type != JSON_NUMBER)
      return -ts_fail(TS_EUSAGE, "%s:%ld: %s record has no numeric \"step\"", r->path, r->lineno,
                      r->type);
    // A repeated key or a result field of the wrong form is damage: the
    // comparison would otherwise take the first copy, or report a divergence
    // where there is only a broken line.
    const json_value *dup = json_find_duplicate(&r->rec);
    if (dup)
      return -ts_fail(TS_EUSAGE, "%s:%ld: key \"%s\" appears twice (column %zu)", r->path,
                      r->lineno, dup->key, dup->pos + 1);
    for (int i = 0; i < N_RESULTS; i++) {
      const json_value *h = json_get(&r->rec, results[i].hex);
      const json_value *d = json_get(&r->rec, results[i].name);
      if (h && (h->type != JSON_STRING || !is_hex_float(h->str)))
        return -ts_fail(TS_EUSAGE, "%s:%ld: \"%s\" is not a C hex float (%%a) string", r->path,
                        r->lineno, results[i].hex);
      if (d && d->type != JSON_NUMBER)
        return -ts_fail(TS_EUSAGE, "%s:%ld: \"%s\" is not a number", r->path, r->lineno,
                        results[i].name);
    }
    const json_value *hash = json_get(&r->rec, "param_hash");
    if (hash && (hash->type != JSON_STRING || !is_hash(hash->str)))
      return -ts_fail(TS_EUSAGE, "%s:%ld: \"param_hash\" is not 16 hex digits", r->path,
                      r->lineno);
    r->step = step->num;
    snprintf(r->step_text, sizeof r->step_text, "%s", step->str);
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

// Value of a float result as the mode sees it: from the hex field in bitwise
// mode (exact), from the decimal field with --rtol (as documented), each
// falling back to the other form when only one is present. Returns 0 if absent.
static int result_value(const json_value *rec, const result_field *f, int use_hex, double *v,
                        const char **hex) {
  const json_value *h = json_get(rec, f->hex), *d = json_get(rec, f->name);
  *hex = h && h->type == JSON_STRING ? h->str : NULL;
  int have_h = 0, have_d = d && d->type == JSON_NUMBER;
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
    const json_value *ha = json_get(&a->rec, "param_hash"), *hb = json_get(&b->rec, "param_hash");
    const char *sa = ha && ha->type == JSON_STRING ? ha->str : NULL;
    const char *sb = hb && hb->type == JSON_STRING ? hb->str : NULL;
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
