// Where every rank runs (run.h): its host and process id, gathered over the
// world at start-up. When a rank dies by SIGKILL (the kernel's OOM killer,
// `kill -9`, a node lost) no code of it runs, and the launcher ends the other
// ranks at once (docs/DISTRIBUTED.md, "When a rank dies"): what remains is the
// launcher's report of a process id and a host ("PID 17390 RUNNING AT vm").
// This map, in the run log and the start-up output, tells which rank that was.
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/json.h"
#include "dist/grid.h"
#include "run.h"

#define HOST_MAX 64 // a longer host name is cut (it only has to be recognised)

typedef struct {
  long pid;
  char host[HOST_MAX];
} whereabouts;

static void here(whereabouts *w) {
  memset(w, 0, sizeof *w);
  w->pid = (long)getpid();
  if (gethostname(w->host, sizeof w->host - 1) != 0) snprintf(w->host, sizeof w->host, "?");
}

int ts_run_gather_ranks(ts_run_ranks *out) {
  memset(out, 0, sizeof *out);
  const int n = ts_mpi_world_size();
  whereabouts mine, *all = malloc((size_t)n * sizeof *all);
  if (!all) return ts_fail(TS_ERUNTIME, "out of memory");
  here(&mine);
  int rc = ts_mpi_allgather_raw(&mine, all, sizeof mine);
  // per rank: {"rank":R,"host":"...","pid":P}, the host escaped at most 6x
  const size_t per = 48 + 6 * HOST_MAX;
  const size_t cap = (size_t)n * per + 8;
  if (!rc && (!(out->json = malloc(cap)) || !(out->text = malloc(cap))))
    rc = ts_fail(TS_ERUNTIME, "out of memory");
  size_t j = 0, t = 0;
  if (!rc) {
    j += (size_t)snprintf(out->json + j, cap - j, "[");
    t += (size_t)snprintf(out->text + t, cap - t, "ranks:");
  }
  for (int r = 0; r < n && !rc; r++) {
    char host[6 * HOST_MAX + 3];
    json_escape(host, sizeof host, all[r].host);
    j += (size_t)snprintf(out->json + j, cap - j, "%s{\"rank\":%d,\"host\":%s,\"pid\":%ld}",
                          r ? "," : "", r, host, all[r].pid);
    // the host as JSON writes it (quotes dropped): a name with control
    // characters still prints on one line
    t += (size_t)snprintf(out->text + t, cap - t, "%s %d = pid %ld on %.*s", r ? "," : "", r,
                          all[r].pid, (int)strlen(host) - 2, host + 1);
  }
  if (!rc) snprintf(out->json + j, cap - j, "]");
  free(all);
  if (rc) ts_run_free_ranks(out);
  return rc;
}

void ts_run_free_ranks(ts_run_ranks *r) {
  free(r->json);
  free(r->text);
  r->json = r->text = NULL;
}
