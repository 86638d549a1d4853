// Small helpers shared by the runs: time, memory, hashing, allocation, temp files.
#ifndef TS_UTIL_H
#define TS_UTIL_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

double ts_now(void);              // monotonic seconds
double ts_peak_rss_mb(void);      // peak resident set of this process
// Gives the whole pages inside [p, p + bytes) of host memory back to the
// system: they read as zeros afterwards and are resident again only once
// written. The bytes at either end that share a page with others stay.
// (How --zero 2 and 3 hold a layer's state only while it is in use.)
void ts_pages_discard(void *p, size_t bytes);
uint64_t ts_fnv1a64(uint64_t h, const void *data, size_t n); // start with TS_FNV_OFFSET
#define TS_FNV_OFFSET 0xcbf29ce484222325ull
// aligned zeroed allocation (64 bytes); NULL on failure
void *ts_alloc(size_t bytes);
void ts_free(void *p);
// Files written whole go to a temporary name in the same directory first,
// PATH.tmp.HOST.PID, and are renamed into place (atomic; the host and pid
// keep concurrent writers apart, on one machine or several sharing the
// directory). buf gets that name; 0, or -1 when cap is too small.
int ts_temp_path(char *buf, size_t cap, const char *path);
// Removes the temporary files NAME.tmp.HOST.PID in dir whose NAME matches
// the fnmatch pattern `name`, written on this host, whose writer is gone (no
// such process): what a killed run left. Another host's are never removed.
// Returns how many were removed.
int ts_remove_stale_temps(const char *dir, const char *name);
// Opens a regular file for reading, its size in *size: TS_ERUNTIME naming
// the file when it cannot be opened or is not a regular file (a directory).
int ts_open_regular(const char *path, FILE **out, size_t *size);
// fopen for a regular file only (an output may also be a character device such
// as /dev/null, or a FIFO whose reader is there): opened without blocking, so
// a FIFO is refused instead of waiting forever for its other end. NULL with
// *why saying why.
FILE *ts_fopen_regular(const char *path, const char *mode, const char **why);
#endif
