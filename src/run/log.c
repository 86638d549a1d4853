// Run log writer (docs/RUN-LOG.md): one JSON object per line, flushed at once
// so that a run that crashes leaves every completed step readable. Every
// write is checked: a full disk or /dev/full ends the run with exit 1 rather
// than a log that stops mid-line while the run reports success.
#include "base/util.h"
#include "log.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

static int write_failed(ts_log *log, int err) {
  return ts_fail(TS_ERUNTIME, "cannot write log %s: %s", log->path, strerror(err ? err : EIO));
}

int ts_log_open(ts_log *log, const char *path, int append) {
  log->f = NULL;
  log->path = path;
  if (path == NULL || path[0] == '\0') return TS_OK; // logging off
  const char *why = "";
  log->f = ts_fopen_regular(path, append ? "a" : "w", &why); // (a FIFO would block)
  if (log->f == NULL) return ts_fail(TS_ERUNTIME, "cannot open log %s: %s", path, why);
  return TS_OK;
}

int ts_log_line(ts_log *log, const char *json) {
  if (log->f == NULL) return TS_OK;
  errno = 0;
  // the bytes reach the file at fflush: a full disk shows up there
  if (fputs(json, log->f) < 0 || fputc('\n', log->f) == EOF || fflush(log->f) != 0)
    return write_failed(log, errno);
  return TS_OK;
}

int ts_log_sync(ts_log *log) {
  if (log->f == NULL) return TS_OK;
  errno = 0;
  if (fflush(log->f) != 0) return write_failed(log, errno);
  // a pipe, a terminal or /dev/null cannot be synced, and need not be
  if (fsync(fileno(log->f)) != 0 && errno != EINVAL && errno != ENOTSUP && errno != EROFS)
    return write_failed(log, errno);
  return TS_OK;
}

int ts_log_close(ts_log *log) {
  if (log->f == NULL) return TS_OK;
  errno = 0;
  int bad = fclose(log->f) != 0;
  log->f = NULL;
  return bad ? write_failed(log, errno) : TS_OK;
}
