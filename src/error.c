#include <stdarg.h>
#include <stdio.h>

#include "tessera.h"

static _Thread_local char errbuf[1024];
static _Thread_local int everywhere; // the last error is every rank's (ts_fail_everywhere)

int ts_fail(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(errbuf, sizeof errbuf, fmt, ap);
  va_end(ap);
  everywhere = 0;
  return code;
}

int ts_fail_everywhere(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(errbuf, sizeof errbuf, fmt, ap);
  va_end(ap);
  everywhere = 1;
  return code;
}

int ts_error_everywhere(void) { return everywhere; }

const char *ts_errmsg(void) { return errbuf[0] ? errbuf : "unknown error"; }
