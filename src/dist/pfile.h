// A file the ranks of a group write together (MPI-IO): each rank its own
// byte ranges, so that no rank needs the whole of what is written. A group
// of one (or NULL) writes with POSIX calls, with no MPI needed.
#ifndef TS_PFILE_H
#define TS_PFILE_H
#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"

typedef struct ts_pfile ts_pfile;

// Collective: creates (or truncates) path, opened for writing by every rank.
int ts_pfile_open(ts_comm *group, const char *path, ts_pfile **out);
// This rank's n bytes at offset off (independent of the other ranks).
int ts_pfile_write_at(ts_pfile *f, uint64_t off, const void *buf, size_t n);
// Collective: the data on disk (sync), the file closed, and TS_OK on every
// rank only when every rank's writes and the sync succeeded (else the first
// failing rank's message there, a one-line pointer to it elsewhere). Frees f.
int ts_pfile_close(ts_pfile *f);
#endif
