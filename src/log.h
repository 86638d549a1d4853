// Run log writer (docs/RUN-LOG.md). Lines are flushed as they are written so a
// crashed run leaves every completed step readable.
#ifndef TS_LOG_H
#define TS_LOG_H
#include <stdio.h>
#include "tessera.h"

typedef struct {
  FILE *f;
} ts_log;

int ts_log_open(ts_log *log, const char *path); // path NULL or "": no log
void ts_log_close(ts_log *log);
// Writes one already-formatted JSON object as a line.
void ts_log_line(ts_log *log, const char *json);
#endif
