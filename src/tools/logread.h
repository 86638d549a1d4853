// Run log reader (docs/RUN-LOG.md): the records of a log one at a time, each
// checked as strictly as `tessera compare` and `tessera plot` need. A line that
// is not one JSON object, a repeated key, a *_hex field that is not C's %a, a
// result that is not a number or a param_hash that is not 16 hex digits makes
// the log unreadable (TS_EUSAGE, naming the file and line), never a value.
#ifndef TS_LOGREAD_H
#define TS_LOGREAD_H
#include <stdio.h>
#include "base/json.h"

// The float results of the records: the decimal field and its exact "%a" one.
typedef struct {
  const char *name, *hex;
} ts_log_result;
extern const ts_log_result ts_log_results[];
#define TS_LOG_NRESULTS 4

typedef struct {
  const char *path;
  FILE *f;
  char *line;
  size_t cap;
  long lineno;
  long count;        // result records read so far
  json_value rec;    // the current result record (step, eval or final)
  json_value config; // the first config record read past (JSON_NULL until then)
  char label[64];    // "step 7", "step 10 eval", "step 100 final"
  char type[8];      // "step", "eval" or "final"
  double step;
  char step_text[32]; // the step as written
} ts_log_reader;

// TS_OK, or TS_EUSAGE when path cannot be opened (message names it).
int ts_log_reader_open(ts_log_reader *r, const char *path);
// The next result record (step, eval, final) into r->rec; config records are
// skipped (the first kept in r->config), as are kinds this version does not
// know. Returns 1 when one was read, 0 at the end of the file, or -TS_EUSAGE
// for a malformed line.
int ts_log_reader_next(ts_log_reader *r);
void ts_log_reader_close(ts_log_reader *r);
#endif
