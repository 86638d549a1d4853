#include <stdarg.h>
#include <stdio.h>

#include "tessera.h"

static _Thread_local char errbuf[1024];

int ts_fail(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(errbuf, sizeof errbuf, fmt, ap);
  va_end(ap);
  return code;
}

const char *ts_errmsg(void) { return errbuf[0] ? errbuf : "unknown error"; }
