// Small helpers shared by the runs: time, memory, hashing, aligned allocation,
// temporary files.
#include "util.h"

#include <sys/stat.h>

#include "tessera.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

void ts_pages_discard(void *p, size_t bytes) {
  const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)p;
  const uintptr_t lo = (a + page - 1) / page * page, hi = (a + bytes) / page * page;
  // private anonymous memory: the pages are dropped and read back as zeros
  if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

// Monotonic so that step times never go backwards when the wall clock is
// adjusted (NTP) in the middle of a long run.
double ts_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Peak, not current, resident memory: the number a user needs to size a
// machine. Linux reports ru_maxrss in KiB.
double ts_peak_rss_mb(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0.0;
  return (double)ru.ru_maxrss / 1024.0;
}

// FNV-1a, 64 bit. Chainable: pass the previous result as h to hash a sequence
// of buffers as if they were one (the parameter hash walks tensors this way).
uint64_t ts_fnv1a64(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

// 64-byte alignment keeps every tensor on its own cache lines (no false
// sharing between OpenMP threads) and suits AVX-512 loads. Zeroed so that
// gradient and optimizer buffers start from exact zeros. Large blocks are
// mapped, not taken from the heap: their zero pages become resident only
// when written, so a buffer used in parts (--zero 2 and 3 hold the parts of
// the parameters and gradients a rank owns, ts_pages_discard) costs only
// those parts. A 64-byte header before the block holds its mapping's
// length (0: from the heap).
#define ALLOC_HEADER 64
#define ALLOC_MAP_MIN ((size_t)1 << 20)

void *ts_alloc(size_t bytes) {
  if (bytes == 0) bytes = 64; // a valid, freeable pointer for empty buffers
  // round up to a whole number of cache lines
  const size_t rounded = (bytes + 63) & ~(size_t)63;
  if (rounded < bytes || rounded > SIZE_MAX - ALLOC_HEADER) return NULL; // overflow
  const size_t total = rounded + ALLOC_HEADER;
  size_t mapped = 0;
  char *base;
  if (total >= ALLOC_MAP_MIN) {
    base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) return NULL;
    mapped = total;
  } else {
    void *p = NULL;
    if (posix_memalign(&p, 64, total) != 0) return NULL;
    memset(p, 0, total);
    base = p;
  }
  memcpy(base, &mapped, sizeof mapped);
  return base + ALLOC_HEADER;
}

void ts_free(void *p) {
  if (!p) return;
  char *base = (char *)p - ALLOC_HEADER;
  size_t mapped;
  memcpy(&mapped, base, sizeof mapped);
  if (mapped) munmap(base, mapped);
  else free(base);
}

// This host's name as a temp file's tag: letters, digits and '-' (any other
// character, the dots included, becomes '-', so the pid stays the part after
// the last dot), at most 63 characters; "host" where it has none.
static void host_tag(char *out, size_t cap) {
  char host[256] = "";
  if (gethostname(host, sizeof host - 1) != 0 || !host[0]) snprintf(host, sizeof host, "host");
  size_t k = 0;
  for (const char *c = host; *c && k + 1 < cap && k < 63; c++, k++)
    out[k] = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
                     *c == '-'
                 ? *c
                 : '-';
  out[k] = 0;
}

int ts_temp_path(char *buf, size_t cap, const char *path) {
  char host[64];
  host_tag(host, sizeof host);
  int n = snprintf(buf, cap, "%s.tmp.%s.%ld", path, host, (long)getpid());
  return n >= 0 && (size_t)n < cap ? 0 : -1;
}

// Only our own pattern, only this host's (whether another host's writer is
// alive cannot be told from here), and only when its pid is not a live
// process: a temp file of a run still writing (a second run on the same
// directory) stays. A pid reused by an unrelated process keeps a stale file;
// it is removed on a later start.
int ts_remove_stale_temps(const char *dir, const char *name) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  char pattern[4200], host[64];
  host_tag(host, sizeof host);
  snprintf(pattern, sizeof pattern, "%s.tmp.%s.*", name, host);
  int removed = 0;
  for (struct dirent *e; (e = readdir(d));) {
    const char *tail = strrchr(e->d_name, '.');
    if (!tail || fnmatch(pattern, e->d_name, FNM_PERIOD) != 0) continue;
    char *end;
    long pid = strtol(tail + 1, &end, 10);
    if (tail[1] < '1' || tail[1] > '9' || *end || pid <= 0 || (pid_t)pid != pid) continue;
    if (pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno == EPERM) continue; // alive
    char path[4200];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= sizeof path) continue;
    if (unlink(path) == 0) removed++;
  }
  closedir(d);
  return removed;
}

FILE *ts_fopen_regular(const char *path, const char *mode, const char **why) {
  // Opened without blocking, then checked: open() on a FIFO would wait for
  // the other end forever, and fopen succeeds on a directory on Linux.
  const int reading = mode[0] == 'r' && !strchr(mode, '+');
  const int flags = reading ? O_RDONLY
                            : O_WRONLY | O_CREAT | (mode[0] == 'a' ? O_APPEND : O_TRUNC);
  int fd = open(path, flags | O_NONBLOCK | O_CLOEXEC, 0666);
  if (fd < 0) {
    *why = errno == ENXIO ? "a FIFO with no reader" : strerror(errno);
    return NULL;
  }
  struct stat st;
  // an output may also be a character device (/dev/null, a terminal) or a
  // FIFO that has its reader already (the open above did not fail)
  if (fstat(fd, &st) != 0 ||
      !(S_ISREG(st.st_mode) || (!reading && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))))) {
    close(fd);
    errno = EINVAL;
    *why = "not a regular file";
    return NULL;
  }
  int fl = fcntl(fd, F_GETFL);
  FILE *f = fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0 ? NULL : fdopen(fd, mode);
  if (!f) {
    *why = strerror(errno);
    close(fd);
  }
  return f;
}

int ts_open_regular(const char *path, FILE **out, size_t *size) {
  const char *why = "";
  *out = ts_fopen_regular(path, "rb", &why);
  if (!*out) return ts_fail(TS_ERUNTIME, "%s: cannot open: %s", path, why);
  struct stat st;
  if (fstat(fileno(*out), &st) != 0) st.st_size = 0;
  if (size) *size = (size_t)st.st_size;
  return TS_OK;
}
