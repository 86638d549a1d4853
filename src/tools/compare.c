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
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "compare.h"
#include "logread.h"
#include "tessera.h"

// ---------------------------------------------------------------------------
// Field comparison.

// Value of a float result as the mode sees it: from the hex field in bitwise
// mode (exact), from the decimal field with --rtol (as documented), each
// falling back to the other form when only one is present. Returns 0 if absent.
static int result_value(const json_value *rec, const ts_log_result *f, int use_hex, double *v,
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
static int compare_records(const ts_log_reader *a, const ts_log_reader *b, double rtol,
                           rtol_stats *st, FILE *out) {
  for (int i = 0; i < TS_LOG_NRESULTS; i++) {
    const ts_log_result *f = &ts_log_results[i];
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
  ts_log_reader a, b;
  int rc = ts_log_reader_open(&a, path_a);
  if (rc != TS_OK) return rc;
  rc = ts_log_reader_open(&b, path_b);
  if (rc != TS_OK) {
    ts_log_reader_close(&a);
    return rc;
  }
  rtol_stats st = {0};
  char last[64] = "";
  for (;;) {
    int na = ts_log_reader_next(&a);
    if (na < 0) {
      rc = -na;
      break;
    }
    int nb = ts_log_reader_next(&b);
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
      const ts_log_reader *ended = na == 0 ? &a : &b, *goes_on = na == 0 ? &b : &a;
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
  ts_log_reader_close(&a);
  ts_log_reader_close(&b);
  return rc;
}
