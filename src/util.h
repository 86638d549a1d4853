// Small helpers shared by the runs: time, memory, hashing, number formatting.
#ifndef TS_UTIL_H
#define TS_UTIL_H
#include <stddef.h>
#include <stdint.h>

double ts_now(void);              // monotonic seconds
double ts_peak_rss_mb(void);      // peak resident set of this process
uint64_t ts_fnv1a64(uint64_t h, const void *data, size_t n); // start with TS_FNV_OFFSET
#define TS_FNV_OFFSET 0xcbf29ce484222325ull
// aligned zeroed allocation (64 bytes); NULL on failure
void *ts_alloc(size_t bytes);
void ts_free(void *p);
#endif
