// The world of a build without MPI (configure --without-mpi): one process,
// rank 0 of 1, so every layout but the serial one is refused by
// ts_grid_check, and the agreements over the world are this rank's own view.
// The same functions over MPI are world_mpi.c.
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "grid.h"
#include "tessera.h"

// Started by an MPI launcher as one of several processes, each would run the
// whole job alone and write the same files: refused, saying why.
static int launched_size(void) {
  static const char *const vars[] = {"PMI_SIZE", "OMPI_COMM_WORLD_SIZE"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    if (v && atoi(v) > 1) return atoi(v);
  }
  return 1;
}

int ts_mpi_init(int *argc, char ***argv) {
  const int n = launched_size();
  if (n > 1)
    return ts_fail(TS_ERUNTIME,
                   "started as one of %d processes, but this tessera is built without MPI "
                   "(configure --with-mpi)", n);
  return TS_OK;
}

int ts_mpi_active(void) { return 0; }
void ts_mpi_finalize(void) {}
void ts_mpi_abort(int code) { exit(code); }
int ts_mpi_world_rank(void) { return 0; }
int ts_mpi_world_size(void) { return 1; }

void ts_mpi_spread(const double *v, int n, double *max, double *min, double *mean) {
  for (int j = 0; j < n; j++) max[j] = min[j] = mean[j] = v[j];
}

void ts_mpi_sum_max(double x, double *sum, double *max) { *sum = *max = x; }

int ts_mpi_allgather_raw(const void *send, void *recv, size_t bytes) {
  memcpy(recv, send, bytes);
  return TS_OK;
}

int ts_mpi_failed_ranks(int failed, int *first) {
  *first = failed ? 0 : -1;
  return failed != 0;
}

// Never reached: ts_grid_create splits only a world of two or more.
int ts_mpi_split(int color, int key, ts_comm **out) { return ts_comm_serial(out); }

int ts_mpi_local_size(void) { return 1; }
