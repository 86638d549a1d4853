// Run log writer (docs/RUN-LOG.md): one JSON object per line, flushed at once
// so that a run that crashes leaves every completed step readable.
#include "log.h"

#include <errno.h>
#include <string.h>

int ts_log_open(ts_log *log, const char *path) {
  log->f = NULL;
  if (path == NULL || path[0] == '\0') return TS_OK; // logging off
  log->f = fopen(path, "w");
  if (log->f == NULL) return ts_fail(TS_ERUNTIME, "cannot open log %s: %s", path, strerror(errno));
  return TS_OK;
}

void ts_log_close(ts_log *log) {
  if (log->f != NULL) fclose(log->f);
  log->f = NULL;
}

void ts_log_line(ts_log *log, const char *json) {
  if (log->f == NULL) return;
  fputs(json, log->f);
  fputc('\n', log->f);
  fflush(log->f);
}
