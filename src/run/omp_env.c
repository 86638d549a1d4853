// Why passive: a step is hundreds of short parallel regions (one per kernel
// call). Under libgomp's default policy a thread that reaches a region's end
// spins for a while (about 3 ms) before it sleeps, which costs nothing on an
// idle machine and a great deal on a shared one: when another process holds a
// core, the spinning thread burns the time slice its partner needs to finish,
// and every barrier waits a scheduler tick. Measured on two cores at the
// GPT-2 124M shape (docs/PERFORMANCE.md): passive keeps a step within about
// 2x its quiet time beside one busy process, where spinning took about 3x.
// Why a short spin before sleeping (GOMP_SPINCOUNT, about 30 us): without it
// every region's start wakes its threads through the kernel (a futex call
// each), about a tenth of a quiet step at T=64; the next region usually starts
// within microseconds, so a short spin finds it awake, and it is too short to
// cost a busy neighbour its time slice. A user who sets OMP_WAIT_POLICY
// (active, for a dedicated node) or GOMP_SPINCOUNT keeps it.
#include "omp_env.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tessera.h"

// spins before an idle thread sleeps (libgomp: about 100 a microsecond)
#define SPIN_BEFORE_SLEEP "3000"

void ts_wait_policy_passive(char **argv) {
  if (getenv("OMP_WAIT_POLICY")) return;
  if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
  if (!getenv("GOMP_SPINCOUNT") && setenv("GOMP_SPINCOUNT", SPIN_BEFORE_SLEEP, 1) != 0) return;
  execv("/proc/self/exe", argv);
  // not run again (no /proc): carry on under the policy libgomp loaded with
}

// The most threads tessera takes (--threads' limit): more than that many
// threads is a mistake (libgomp crashes creating 100000 of them).
#define MAX_THREADS 1024

// A whole number from lo to hi, all of s (no sign, no spaces, no suffix).
static int whole(const char *s, long lo, long hi, long *v) {
  if (!isdigit((unsigned char)s[0])) return 0;
  errno = 0;
  char *end;
  *v = strtol(s, &end, 10);
  return errno == 0 && *end == '\0' && *v >= lo && *v <= hi;
}

int ts_omp_env_check(void) {
  const char *n = getenv("OMP_NUM_THREADS");
  if (n) { // a list, one count per nesting level; tessera uses the first
    char first[32];
    const size_t len = strcspn(n, ",");
    long v = 0;
    snprintf(first, sizeof first, "%.*s", (int)(len < sizeof first ? len : sizeof first - 1), n);
    if (len >= sizeof first || !whole(first, 1, MAX_THREADS, &v))
      return ts_fail(TS_EUSAGE, "OMP_NUM_THREADS=%s: must be a number of threads from 1 to %d "
                     "(or unset: all cores)", n, MAX_THREADS);
  }
  const char *l = getenv("OMP_THREAD_LIMIT");
  long v = 0;
  if (l && !whole(l, 1, INT32_MAX, &v))
    return ts_fail(TS_EUSAGE, "OMP_THREAD_LIMIT=%s: must be a positive whole number (or unset)", l);
  const char *st = getenv("OMP_STACKSIZE");
  if (st) { // a size: a number with B, K (the default), M or G
    char *end;
    errno = 0;
    const double num = isdigit((unsigned char)st[0]) ? strtod(st, &end) : -1.0;
    double mul = 1024.0;
    if (num >= 0 && *end) {
      const char u = (char)toupper((unsigned char)*end++);
      mul = u == 'B' ? 1.0 : u == 'K' ? 1024.0 : u == 'M' ? 1048576.0 : u == 'G' ? 1073741824.0 : -1.0;
    }
    if (num < 0 || errno || *end || mul < 0 || num * mul < 1048576.0)
      return ts_fail(TS_EUSAGE, "OMP_STACKSIZE=%s: must be a size of at least 1M (each thread's "
                     "stack; or unset: libgomp's default)", st);
  }
  return TS_OK;
}
