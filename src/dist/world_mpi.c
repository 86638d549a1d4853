// The MPI world (grid.h): MPI's lifetime, the start-up agreements over the
// world, and the groups the grid splits from it. A build without MPI has
// world_serial.c instead.
#include "config.h"

#include <limits.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "grid.h"
#include "tessera.h"

int ts_mpi_init(int *argc, char ***argv) {
  // OpenMP threads compute, only the main thread calls MPI.
  int provided = 0;
  int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  if (rc != MPI_SUCCESS) return ts_fail(TS_ERUNTIME, "MPI initialisation failed (code %d)", rc);
  return TS_OK;
}

int ts_mpi_active(void) {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

void ts_mpi_finalize(void) {
  if (ts_mpi_active()) MPI_Finalize();
}

void ts_mpi_abort(int code) {
  if (ts_mpi_active()) {
    // The launcher forwards this rank's stderr through a pipe and kills every
    // rank on MPI_Abort: under load it could kill the forwarder before the
    // error message went through. A fifth of a second lets it through.
    struct timespec pause = {0, 200000000L};
    nanosleep(&pause, NULL);
    MPI_Abort(MPI_COMM_WORLD, code);
  }
  exit(code);
}

int ts_mpi_world_rank(void) {
  int r = 0;
  if (ts_mpi_active()) MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int ts_mpi_world_size(void) {
  int n = 1;
  if (ts_mpi_active()) MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

void ts_mpi_spread(const double *v, int n, double *max, double *min, double *mean) {
  const int W = ts_mpi_world_size();
  double *all = W > 1 ? malloc((size_t)W * n * sizeof(double)) : NULL;
  // (one rank, or no memory for the gather: this rank's own figures)
  if (!all || MPI_Allgather(v, n, MPI_DOUBLE, all, n, MPI_DOUBLE, MPI_COMM_WORLD) != MPI_SUCCESS) {
    for (int j = 0; j < n; j++) max[j] = min[j] = mean[j] = v[j];
    free(all);
    return;
  }
  for (int j = 0; j < n; j++) {
    double hi = all[j], lo = all[j], sum = 0.0;
    for (int r = 0; r < W; r++) { // in rank order: every rank the same figures
      const double x = all[(size_t)r * n + j];
      hi = x > hi ? x : hi;
      lo = x < lo ? x : lo;
      sum += x;
    }
    const double m = sum / W; // (clamped: rounding can take it a hair outside [lo, hi])
    max[j] = hi;
    min[j] = lo;
    mean[j] = m > hi ? hi : m < lo ? lo : m;
  }
  free(all);
}

void ts_mpi_sum_max(double x, double *sum, double *max) {
  *sum = *max = x;
  if (ts_mpi_world_size() == 1) return;
  MPI_Allreduce(&x, sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(&x, max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
}

int ts_mpi_allgather_raw(const void *send, void *recv, size_t bytes) {
  if (ts_mpi_world_size() == 1) {
    memcpy(recv, send, bytes);
    return TS_OK;
  }
  if (bytes > (size_t)INT_MAX) return ts_fail(TS_ERUNTIME, "agreement: %zu bytes", bytes);
  int rc = MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
  return rc == MPI_SUCCESS ? TS_OK : ts_fail(TS_ERUNTIME, "MPI_Allgather failed (code %d)", rc);
}

int ts_mpi_failed_ranks(int failed, int *first) {
  const int n = ts_mpi_world_size();
  *first = failed ? ts_mpi_world_rank() : -1;
  if (n == 1) return failed != 0;
  int *all = calloc((size_t)n, sizeof *all), bad = 0;
  if (!all || MPI_Allgather(&failed, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD) != MPI_SUCCESS) {
    free(all);
    return failed != 0; // no agreement possible: this rank's own view
  }
  for (int q = n - 1; q >= 0; q--)
    if (all[q]) bad++, *first = q;
  free(all);
  return bad;
}

int ts_mpi_split(int color, int key, ts_comm **out) {
  MPI_Comm sub;
  int rc = MPI_Comm_split(MPI_COMM_WORLD, color, key, &sub);
  if (rc != MPI_SUCCESS) return ts_fail(TS_ERUNTIME, "MPI_Comm_split failed (code %d)", rc);
  int n = 0;
  MPI_Comm_size(sub, &n);
  if (n == 1) rc = ts_comm_serial(out);
#ifdef TS_HAVE_CUDA
  else if (ts_backend_uses_nccl()) rc = ts_comm_nccl_create(&sub, out);
#endif
  else rc = ts_comm_mpi_create(&sub, out);
  MPI_Comm_free(&sub);
  return rc;
}

int ts_mpi_local_size(void) {
  int n = 1;
  MPI_Comm node;
  if (ts_mpi_active() &&
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) ==
          MPI_SUCCESS) {
    MPI_Comm_size(node, &n);
    MPI_Comm_free(&node);
  }
  return n;
}
