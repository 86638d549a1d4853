// A file the ranks of a group write together (pfile.h). A build without MPI
// has only groups of one, which write with POSIX calls.
#include "config.h"

#include "pfile.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#ifdef TS_HAVE_MPI
#include <mpi.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tessera.h"

struct ts_pfile {
  ts_comm *group; // NULL: POSIX
#ifdef TS_HAVE_MPI
  MPI_File fh;
#endif
  int fd;
  int failed;     // TS_OK until a write fails here (its message is in ts_errmsg)
  char path[4096];
};

#ifdef TS_HAVE_MPI
static int mpi_io_error(const char *path, int rc, const char *what) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return ts_fail(TS_ERUNTIME, "%s %s failed: %s", what, path, msg);
}
#endif

int ts_pfile_open(ts_comm *group, const char *path, ts_pfile **out) {
  ts_pfile *f = calloc(1, sizeof *f);
  if (!f) return ts_fail(TS_ERUNTIME, "out of memory");
  snprintf(f->path, sizeof f->path, "%s", path);
  f->fd = -1;
#ifdef TS_HAVE_MPI
  if (group && group->size > 1 && group->mpi) {
    f->group = group;
    const MPI_Comm comm = *(const MPI_Comm *)group->mpi;
    int rc = MPI_File_open(comm, path, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &f->fh);
    if (rc == MPI_SUCCESS) rc = MPI_File_set_size(f->fh, 0); // collective: truncates
    if (rc != MPI_SUCCESS) {
      free(f);
      return mpi_io_error(path, rc, "creating");
    }
    *out = f;
    return TS_OK;
  }
#endif
  f->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (f->fd < 0) {
    int e = errno;
    free(f);
    return ts_fail(TS_ERUNTIME, "cannot create %s: %s", path, strerror(e));
  }
  *out = f;
  return TS_OK;
}

int ts_pfile_write_at(ts_pfile *f, uint64_t off, const void *buf, size_t n) {
  if (f->failed) return f->failed;
  const char *p = buf;
  while (n > 0) { // in pieces an int counts
    const size_t k = n < (size_t)1 << 30 ? n : (size_t)1 << 30;
#ifdef TS_HAVE_MPI
    if (f->group) {
      MPI_Status st;
      int rc = MPI_File_write_at(f->fh, (MPI_Offset)off, p, (int)k, MPI_BYTE, &st), got = 0;
      if (rc == MPI_SUCCESS) MPI_Get_count(&st, MPI_BYTE, &got);
      if (rc != MPI_SUCCESS) return f->failed = mpi_io_error(f->path, rc, "writing");
      if ((size_t)got != k)
        return f->failed = ts_fail(TS_ERUNTIME, "writing %s: %d of %zu bytes written", f->path,
                                   got, k);
      n -= k, p += k, off += k;
      continue;
    }
#endif
    ssize_t w = pwrite(f->fd, p, k, (off_t)off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      return f->failed = ts_fail(TS_ERUNTIME, "writing %s failed: %s", f->path,
                                 w < 0 ? strerror(errno) : "nothing written");
    n -= (size_t)w, p += w, off += (uint64_t)w;
  }
  return TS_OK;
}

#ifdef TS_HAVE_MPI
static int close_mpi(ts_pfile *f) {
  int rc = f->failed;
  int s = MPI_File_sync(f->fh); // collective
  if (!rc && s != MPI_SUCCESS) rc = mpi_io_error(f->path, s, "syncing");
  s = MPI_File_close(&f->fh);
  if (!rc && s != MPI_SUCCESS) rc = mpi_io_error(f->path, s, "closing");
  // every rank's outcome: the first failing rank
  int *all = malloc((size_t)f->group->size * sizeof *all), first = -1;
  int mine = rc != TS_OK, arc = all ? ts_comm_allgather(f->group, &mine, all, sizeof mine, -1)
                                    : ts_fail(TS_ERUNTIME, "out of memory");
  for (int q = 0; !arc && q < f->group->size && first < 0; q++)
    if (all[q]) first = q;
  free(all);
  if (!rc && arc) rc = arc;
  if (!rc && first >= 0)
    rc = ts_fail(TS_ERUNTIME, "writing %s failed on rank %d of its group", f->path, first);
  free(f);
  return rc;
}
#endif

int ts_pfile_close(ts_pfile *f) {
#ifdef TS_HAVE_MPI
  if (f->group) return close_mpi(f);
#endif
  int rc = f->failed;
  if (!rc && fsync(f->fd) != 0)
    rc = ts_fail(TS_ERUNTIME, "writing %s failed: %s", f->path, strerror(errno));
  if (close(f->fd) != 0 && !rc)
    rc = ts_fail(TS_ERUNTIME, "writing %s failed: %s", f->path, strerror(errno));
  free(f);
  return rc;
}
