// Run log writer (docs/RUN-LOG.md). Lines are flushed as they are written so a
// crashed run leaves every completed step readable; a write that fails is an
// error of the run, never a silently shorter log.
#ifndef TS_LOG_H
#define TS_LOG_H
#include <stdio.h>
#include "tessera.h"

typedef struct {
  FILE *f;
  const char *path; // as given to ts_log_open, for messages
} ts_log;

// path NULL or "": no log (every call below is then a no-op). append: keep
// what is there (a resumed run's log, already cut back to its checkpoint).
int ts_log_open(ts_log *log, const char *path, int append);
// Writes one already-formatted JSON object as a line and flushes it.
int ts_log_line(ts_log *log, const char *json);
// Makes the lines written so far durable (fsync), as a checkpoint is.
int ts_log_sync(ts_log *log);
// Closes the log; TS_ERUNTIME when the last bytes could not be written.
int ts_log_close(ts_log *log);
#endif
