// The run-log reader of tessera compare and tessera plot (logread.h).
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/util.h"
#include "logread.h"
#include "tessera.h"

const ts_log_result ts_log_results[TS_LOG_NRESULTS] = {
    {"loss", "loss_hex"},
    {"grad_norm", "grad_norm_hex"},
    {"lr", "lr_hex"},
    {"val_loss", "val_loss_hex"},
};

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

int ts_log_reader_open(ts_log_reader *r, const char *path) {
  memset(r, 0, sizeof *r);
  r->path = path;
  const char *why = "";
  r->f = ts_fopen_regular(path, "r", &why);
  if (r->f == NULL) return ts_fail(TS_EUSAGE, "cannot open %s: %s", path, why);
  return TS_OK;
}

void ts_log_reader_close(ts_log_reader *r) {
  if (r->f) fclose(r->f);
  free(r->line);
  json_free(&r->rec);
  json_free(&r->config);
}

int ts_log_reader_next(ts_log_reader *r) {
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
    if (strcmp(type->str, "config") == 0 && r->config.type == JSON_NULL) {
      r->config = r->rec; // kept for tessera plot (tokens per step); not compared
      memset(&r->rec, 0, sizeof r->rec);
      continue;
    }
    if (strcmp(type->str, "step") != 0 && strcmp(type->str, "eval") != 0 &&
        strcmp(type->str, "final") != 0) {
      json_free(&r->rec); // a later config line, or a kind this version does not know
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
    for (int i = 0; i < TS_LOG_NRESULTS; i++) {
      const json_value *h = json_get(&r->rec, ts_log_results[i].hex);
      const json_value *d = json_get(&r->rec, ts_log_results[i].name);
      if (h && (h->type != JSON_STRING || !is_hex_float(h->str)))
        return -ts_fail(TS_EUSAGE, "%s:%ld: \"%s\" is not a C hex float (%%a) string", r->path,
                        r->lineno, ts_log_results[i].hex);
      if (d && d->type != JSON_NUMBER)
        return -ts_fail(TS_EUSAGE, "%s:%ld: \"%s\" is not a number", r->path, r->lineno,
                        ts_log_results[i].name);
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

