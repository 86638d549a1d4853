// One layer's causal attention, forward then backward, timed on its own: the
// kernel that sets a step's speed at long T (docs/PERFORMANCE.md, "Attention
// at long T"). Usage:
//   bench/attention [--seq T[,T...]] [--heads H] [--dh D] [--threads N] [--reps R]
// Defaults: the `small` model's attention (8 heads of 64), T = 1024, 4096,
// 16384, 32768, one thread, 3 repetitions. Prints one line per T: the median
// forward and backward times, the throughput by the MFU convention (6·T²·H·dh
// FLOPs for forward plus backward under the causal mask) and that throughput
// as a fraction of the sgemm roof measured the same way. Times are the
// process's CPU time divided by the threads (on a machine shared with other
// work, wall time counts the time others held the cores), so run it on an
// otherwise idle machine for wall-clock figures with more than one thread.
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels.h"
#include "tessera.h"

static int nthreads = 1;

// Seconds of CPU time the process has used, per thread.
static double cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return ((double)t.tv_sec + 1e-9 * (double)t.tv_nsec) / nthreads;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *x, int n) {
  qsort(x, (size_t)n, sizeof *x, cmp_double);
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

// Deterministic inputs of a typical magnitude (unit-variance-ish rows).
static float *filled(size_t n, unsigned seed) {
  float *x = malloc(n * sizeof(float));
  if (!x) return NULL;
  uint32_t s = seed * 2654435761u + 1u;
  for (size_t i = 0; i < n; i++) {
    s = s * 1664525u + 1013904223u;
    x[i] = (float)((int32_t)(s >> 8) - (1 << 23)) / (float)(1 << 23);
  }
  return x;
}

// Times reps forward and backward passes at sequence length T; returns 0 or -1.
static int bench_one(int T, int H, int dh, int reps, double roof) {
  const size_t n = (size_t)T * H * dh;
  ts_attn_shape s = {.B = 1, .T = T, .H = H, .dh = dh, .tile = ts_default_tile(T)};
  float *q = filled(n, 1), *k = filled(n, 2), *v = filled(n, 3), *dout = filled(n, 4);
  float *out = malloc(n * sizeof(float)), *dq = malloc(n * sizeof(float));
  float *dk = malloc(n * sizeof(float)), *dv = malloc(n * sizeof(float));
  float *lse = malloc((size_t)H * T * sizeof(float)), *dsum = malloc((size_t)H * T * sizeof(float));
  double *tf = malloc((size_t)reps * sizeof(double)), *tb = malloc((size_t)reps * sizeof(double));
  ts_ws ws;
  int rc = -1;
  if (!q || !k || !v || !dout || !out || !dq || !dk || !dv || !lse || !dsum || !tf || !tb ||
      ts_ws_init(&ws, s.tile, s.tile, 1, dh) != 0)
    goto done;
  for (int r = 0; r < reps; r++) {
    double t0 = cpu_now();
    attention_forward(&ws, out, lse, q, k, v, &s);
    double t1 = cpu_now();
    if (attention_backward(&ws, dq, dk, dv, dsum, dout, q, k, v, out, lse, &s) != 0) goto free_ws;
    tf[r] = t1 - t0;
    tb[r] = cpu_now() - t1;
  }
  double mf = median(tf, reps), mb = median(tb, reps);
  double flops = 6.0 * (double)T * T * H * dh;
  double gf = flops / (mf + mb) / 1e9;
  printf("%6d  %5d  %9.3f  %9.3f  %8.1f  %7.1f  %5.1f%%\n", T, s.tile, mf, mb, gf, roof,
         100.0 * gf / roof);
  fflush(stdout);
  rc = 0;
free_ws:
  ts_ws_free(&ws);
done:
  free(q); free(k); free(v); free(dout); free(out); free(dq); free(dk); free(dv);
  free(lse); free(dsum); free(tf); free(tb);
  return rc;
}

// The roof as tessera's trainer measures it (src/run/common.c): a 1024^3
// sgemm, here on the benchmark's threads and timed like the attention.
static double sgemm_roof(void) {
  const int n = 1024;
  float *a = filled((size_t)n * n, 5), *b = filled((size_t)n * n, 6), *c = filled((size_t)n * n, 7);
  double best = 0.0;
  openblas_set_num_threads(nthreads);
  for (int r = 0; a && b && c && r < 9; r++) {
    double t0 = cpu_now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    double gf = 2.0 * n * n * (double)n / (cpu_now() - t0) / 1e9;
    if (r > 0 && gf > best) best = gf; // the first pays for page faults
  }
  openblas_set_num_threads(1); // attention's own threads are OpenMP's
  free(a); free(b); free(c);
  return best;
}

int main(int argc, char **argv) {
  const char *seqs = "1024,4096,16384,32768";
  int H = 8, dh = 64, reps = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--seq")) seqs = argv[i + 1];
    else if (!strcmp(argv[i], "--heads")) H = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--dh")) dh = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--threads")) nthreads = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
    else {
      fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (argc % 2 == 0 || H < 1 || dh < 1 || nthreads < 1 || reps < 1) {
    fprintf(stderr, "usage: %s [--seq T[,T...]] [--heads H] [--dh D] [--threads N] [--reps R]\n",
            argv[0]);
    return 2;
  }
  omp_set_num_threads(nthreads);
  double roof = sgemm_roof();
  printf("# attention forward + backward, B 1, %d heads of %d, %d thread%s, median of %d, CPU time\n",
         H, dh, nthreads, nthreads == 1 ? "" : "s", reps);
  printf("%6s  %5s  %9s  %9s  %8s  %7s  %6s\n", "T", "tile", "fwd_s", "bwd_s", "GFLOP/s", "roof",
         "of_roof");
  for (const char *p = seqs; *p;) {
    int T = atoi(p);
    if (T < 8 || bench_one(T, H, dh, reps, roof) != 0) {
      fprintf(stderr, "T %d: failed\n", T);
      return 1;
    }
    p = strchr(p, ',');
    if (!p) break;
    p++;
  }
  return 0;
}
