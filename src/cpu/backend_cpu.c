// The CPU backend: the reference kernels of kernels.h, buffers from the
// aligned host allocator.
#include <string.h>

#include "backend/backend.h"
#include "base/util.h"

static void cpu_add(float *dst, const float *a, const float *b, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) dst[i] = a[i] + b[i];
}

static void cpu_add_rows(float *dst, int ldd, const float *a, int lda, const float *b, int ldb,
                         int64_t rows, int cols) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) dst[r * ldd + c] = a[r * lda + c] + b[r * ldb + c];
}

static void cpu_copy(void *dst, const void *src, size_t bytes) { memmove(dst, src, bytes); }

const ts_backend ts_backend_cpu = {
    .name = "cpu",
    .alloc = ts_alloc,
    .free = ts_free,
    // each operation's reference kernel, as the list names it
#define TS_OP(op, cpu, ret, params) .op = cpu,
#include "backend/backend_ops.def"
};
