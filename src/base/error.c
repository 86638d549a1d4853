#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tessera.h"

static _Thread_local char errbuf[1024];
static _Thread_local int everywhere; // the last error is every rank's (ts_fail_everywhere)

// Messages quote what they were given (a tensor name, a metadata value, a
// path), which may hold any byte: a control character is written as an
// escape (\n, \t, \xNN), so that every message stays one line and cannot
// move a terminal's cursor.
static void put_printable(char *dst, size_t cap, const char *src) {
  size_t k = 0;
  for (const unsigned char *c = (const unsigned char *)src; *c && k + 1 < cap; c++) {
    char esc[8];
    if (*c >= 0x20 && *c != 0x7f) {
      dst[k++] = (char)*c;
      continue;
    }
    if (*c == '\n') snprintf(esc, sizeof esc, "\\n");
    else if (*c == '\r') snprintf(esc, sizeof esc, "\\r");
    else if (*c == '\t') snprintf(esc, sizeof esc, "\\t");
    else snprintf(esc, sizeof esc, "\\x%02x", *c);
    for (const char *e = esc; *e && k + 1 < cap; e++) dst[k++] = *e;
  }
  dst[k] = '\0';
}

static int set_message(int code, int all, const char *fmt, va_list ap) {
  char raw[sizeof errbuf];
  vsnprintf(raw, sizeof raw, fmt, ap);
  put_printable(errbuf, sizeof errbuf, raw);
  everywhere = all;
  return code;
}

int ts_fail(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  code = set_message(code, 0, fmt, ap);
  va_end(ap);
  return code;
}

int ts_fail_everywhere(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  code = set_message(code, 1, fmt, ap);
  va_end(ap);
  return code;
}

int ts_error_everywhere(void) { return everywhere; }

int ts_fail_flag(int code, const char *flag, const char *path) {
  char was[sizeof errbuf];
  snprintf(was, sizeof was, "%s", ts_errmsg());
  const size_t n = strlen(path);
  const char *why = strncmp(was, path, n) == 0 && was[n] == ':' && was[n + 1] == ' ' ? was + n + 2
                                                                                     : was;
  return ts_fail(code, "%s %s: %s", flag, path, why);
}

const char *ts_errmsg(void) { return errbuf[0] ? errbuf : "unknown error"; }
