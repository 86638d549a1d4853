// The process grid, split from the world (world_mpi.c, or world_serial.c in a
// build without MPI).
#include "config.h"

#include "grid.h"

#include <stdlib.h>

#include "tessera.h"

// ---- the grid ----------------------------------------------------------------------------
int ts_grid_check(int dp, int sp, int pp) {
  int world = ts_mpi_world_size();
  long long need = (long long)dp * sp * pp;
  if (need == world) return TS_OK;
#ifndef TS_HAVE_MPI
  if (sp == 1 && pp == 1)
    return ts_fail(TS_EUSAGE,
                   "--dp %d: needs %lld ranks but the MPI world size is 1: this tessera is built "
                   "without MPI (configure --with-mpi)", dp, need);
  return ts_fail(TS_EUSAGE,
                 "--dp %d --sp %d --pp %d: needs dp x sp x pp = %lld ranks but the MPI world "
                 "size is 1: this tessera is built without MPI (configure --with-mpi)",
                 dp, sp, pp, need);
#endif
  if (sp == 1 && pp == 1)
    return ts_fail(TS_EUSAGE,
                   "--dp %d: needs %lld rank%s but the MPI world size is %d (run it with "
                   "mpiexec -n %lld, or pass --dp %d)",
                   dp, need, need == 1 ? "" : "s", world, need, world);
  return ts_fail(TS_EUSAGE,
                 "--dp %d --sp %d --pp %d: needs dp x sp x pp = %lld ranks but the MPI world "
                 "size is %d (start it with mpiexec -n %lld)",
                 dp, sp, pp, need, world, need);
}

int ts_grid_create(int dp, int sp, int pp, ts_grid **out) {
  int rc = ts_grid_check(dp, sp, pp);
  if (rc) return rc;
  ts_grid *g = calloc(1, sizeof *g);
  if (!g) return ts_fail(TS_ERUNTIME, "out of memory");
  g->dp = dp;
  g->sp = sp;
  g->pp = pp;
  g->world_rank = ts_mpi_world_rank();
  g->world_size = ts_mpi_world_size();
  g->local_size = 1;
  g->sp_rank = g->world_rank % sp;
  g->dp_rank = (g->world_rank / sp) % dp;
  g->pp_rank = g->world_rank / (sp * dp);
  if (g->world_size == 1) {
    if ((rc = ts_comm_serial(&g->data)) || (rc = ts_comm_serial(&g->seq)) ||
        (rc = ts_comm_serial(&g->pipe)) || (rc = ts_comm_serial(&g->replica)) ||
        (rc = ts_comm_serial(&g->world)) || (rc = ts_comm_serial(&g->model))) {
      ts_grid_free(g);
      return rc;
    }
    *out = g;
    return TS_OK;
  }
  g->local_size = ts_mpi_local_size();
  if ((rc = ts_mpi_split(g->pp_rank * sp + g->sp_rank, g->dp_rank, &g->data)) ||
      (rc = ts_mpi_split(g->pp_rank * dp + g->dp_rank, g->sp_rank, &g->seq)) ||
      (rc = ts_mpi_split(g->dp_rank * sp + g->sp_rank, g->pp_rank, &g->pipe)) ||
      (rc = ts_mpi_split(g->pp_rank, g->dp_rank * sp + g->sp_rank, &g->replica)) ||
      (rc = ts_mpi_split(0, g->world_rank, &g->world)) ||
      (rc = ts_mpi_split(g->dp_rank, g->pp_rank * sp + g->sp_rank, &g->model))) {
    ts_grid_free(g);
    return rc;
  }
  *out = g;
  return TS_OK;
}

void ts_grid_free(ts_grid *g) {
  if (!g) return;
  ts_comm_free(g->data);
  ts_comm_free(g->seq);
  ts_comm_free(g->pipe);
  ts_comm_free(g->replica);
  ts_comm_free(g->world);
  ts_comm_free(g->model);
  free(g);
}

void ts_grid_reset_counts(ts_grid *g) {
  ts_comm_reset_counts(g->data);
  ts_comm_reset_counts(g->seq);
  ts_comm_reset_counts(g->pipe);
  ts_comm_reset_counts(g->replica);
  ts_comm_reset_counts(g->world);
  ts_comm_reset_counts(g->model);
}

int ts_grid_counts_json(const ts_grid *g, char *buf, size_t cap) {
  ts_comm *groups[6] = {g->seq, g->data, g->pipe, g->replica, g->world, g->model};
  return ts_comm_counts_json(groups, 6, buf, cap);
}

size_t ts_grid_buffer_bytes(const ts_grid *g) {
  return ts_comm_buffer_bytes(g->seq) + ts_comm_buffer_bytes(g->data) +
         ts_comm_buffer_bytes(g->pipe) + ts_comm_buffer_bytes(g->replica) +
         ts_comm_buffer_bytes(g->world) + ts_comm_buffer_bytes(g->model);
}

double ts_grid_comm_seconds(const ts_grid *g) {
  return ts_comm_seconds(g->seq) + ts_comm_seconds(g->data) + ts_comm_seconds(g->pipe) +
         ts_comm_seconds(g->replica) + ts_comm_seconds(g->world) + ts_comm_seconds(g->model);
}
