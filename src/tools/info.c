// `tessera info`: what this binary was built with and what it will use. Put
// at the top of a bug report or next to golden files, it answers "which
// BLAS, which MPI, which flags" — the things that change floating-point bits.
#include "config.h"

#ifdef TS_HAVE_BLAS
#include <cblas.h>
#endif
#ifdef TS_HAVE_MPI
#include <mpi.h>
#endif
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "cp/strategy.h"
#include "cpu/isa.h"
#include "run/fingerprint.h"
#include "tessera.h"

#if defined(__clang__)
#define TS_COMPILER "clang " __clang_version__
#elif defined(__GNUC__)
#define TS_COMPILER "gcc " __VERSION__
#else
#define TS_COMPILER "unknown C11 compiler"
#endif

static void row(const char *key, const char *value) { printf("  %-16s %s\n", key, value); }

#ifdef TS_HAVE_MPI
// The text after "key:" on its line of a multi-line banner, tabs trimmed.
static int banner_field(const char *banner, const char *key, char *out, size_t cap) {
  const char *p = strstr(banner, key);
  if (p == NULL) return 0;
  p += strlen(key);
  while (*p == ' ' || *p == '\t')
    p++;
  size_t n = strcspn(p, "\r\n");
  if (n >= cap) n = cap - 1;
  memcpy(out, p, n);
  out[n] = '\0';
  return 1;
}

// "MPICH 4.0.2 (ch4:ucx), MPI 4.0". MPICH's banner is many lines (its whole
// configure line); other libraries get their first line.
static void mpi_description(char *out, size_t cap) {
  char banner[MPI_MAX_LIBRARY_VERSION_STRING] = "";
  int len = 0, major = 0, minor = 0;
  MPI_Get_library_version(banner, &len); // allowed before MPI_Init
  MPI_Get_version(&major, &minor);
  char version[64], device[64];
  if (banner_field(banner, "MPICH Version:", version, sizeof version)) {
    if (banner_field(banner, "MPICH Device:", device, sizeof device))
      snprintf(out, cap, "MPICH %s (%s), MPI %d.%d", version, device, major, minor);
    else
      snprintf(out, cap, "MPICH %s, MPI %d.%d", version, major, minor);
    return;
  }
  char first[128];
  size_t n = strcspn(banner, "\r\n");
  if (n >= sizeof first) n = sizeof first - 1;
  memcpy(first, banner, n);
  first[n] = '\0';
  snprintf(out, cap, "%s, MPI %d.%d", first, major, minor);
}
#endif

int ts_info(void) {
  char buf[512];
  printf("tessera %s\n", PACKAGE_VERSION);
  row("configure", TS_BUILD_CONFIG[0] ? TS_BUILD_CONFIG : "(no arguments)");
  row("compiler", TS_COMPILER);
#ifdef __FAST_MATH__
  row("floating point", "built with fast-math: results are NOT reproducible");
#else
  row("floating point", "no fast-math; contraction fixed at build time");
#endif
  // The exact path's products are tessera's own on every build; the ISA
  // changes their speed, never their bits.
  char isa[128];
  ts_isa_describe(isa, sizeof isa);
  snprintf(buf, sizeof buf, "ts_mm on %s; TESSERA_ISA=NAME picks another, with the same bits", isa);
  row("products", buf);
  // the bits of a fixed computation through the real kernels: two machines
  // whose fingerprints match compute the same bits (docs/PORTABILITY.md)
  ts_arith_describe(buf, sizeof buf);
  row("arithmetic", buf);
#ifdef TS_HAVE_BLAS
  snprintf(buf, sizeof buf, "%s, %d threads", openblas_get_config(), openblas_get_num_threads());
  row("BLAS", buf);
  row("MFU roof", "the faster of ts_mm and OpenBLAS sgemm, 1024^3 on all threads, measured as "
                  "train starts");
#else
  row("BLAS", "none: built --without-blas (no result depends on it)");
  row("MFU roof", "ts_mm, 1024^3 on all threads, measured as train starts");
#endif
  const char *wait = getenv("OMP_WAIT_POLICY"), *spin = getenv("GOMP_SPINCOUNT");
  snprintf(buf, sizeof buf, "OpenMP %d, max threads %d, OMP_WAIT_POLICY=%s, GOMP_SPINCOUNT=%s",
           _OPENMP, omp_get_max_threads(), wait ? wait : "unset", spin ? spin : "unset");
  row("threads", buf);
#ifdef TS_HAVE_MPI
  mpi_description(buf, sizeof buf);
  row("MPI", buf);
#else
  row("MPI", "none: built --without-mpi (one process: serial layouts only)");
#endif
#ifdef TS_HAVE_SENTENCEPIECE
  row("tokenizers", "bytes, sentencepiece (docs/TOKENIZER.md)");
#else
  row("tokenizers", "bytes (sentencepiece not built: configure --with-sentencepiece, Debian package libsentencepiece-dev)");
#endif

  printf("backends\n");
#ifdef TS_HAVE_MPI
  row("cpu", "built (OpenMP; MPI between processes)");
#else
  row("cpu", "built (OpenMP; one process)");
#endif
#ifdef TS_HAVE_CUDA
  row("cuda", "built (cuBLAS + NCCL; --device cuda, --precision fp32|bf16)");
  ts_backend_cuda_describe(buf, sizeof buf);
  row("cuda devices", buf);
#else
  row("cuda", "not built (configure --enable-cuda)");
#endif

#ifdef TS_HAVE_MPI
  printf("layouts (docs/DISTRIBUTED.md)\n");
#else
  printf("layouts (docs/DISTRIBUTED.md; a build with MPI runs them, this one only the serial run)\n");
#endif
  row("--dp", "data parallel: exact");
  { // the strategies, from the registry (src/strategies.def)
    char tier[2][160] = {"", ""};
    for (int i = 0; i < TS_SP_NMODES; i++) {
      char *t = tier[ts_cp_get((ts_sp_mode)i)->exact ? 0 : 1];
      snprintf(t + strlen(t), sizeof tier[0] - strlen(t), "%s%s", t[0] ? ", " : "",
               ts_sp_mode_names[i]);
    }
    char buf[400];
    snprintf(buf, sizeof buf, "%s: exact; %s: within tolerance", tier[0], tier[1]);
    row("--sp-mode", buf);
  }
  row("--pp", "GPipe, 1F1B: exact; composes with --dp and --sp");
  row("--compress", "ssn, mapl, mapl-unconstrained, mapl-vq, mapl-frozen: a model of its own, exact on "
                    "every --pp layout (docs/COMPRESSION.md)");

  // The rule from docs/EXACTNESS.md, with worked examples so a user can check a run.
  printf("exactness defaults (T = sequence length)\n");
  row("mode",
      "exact: every layout reproduces the serial run bit for bit (--fast: within tolerance)");
  row("tile", "largest power of two <= min(64, T/8)");
  row("leaf", "largest power of two <= min(256, T/8), at least the tile");
  static const int examples[] = {64, 256, 1024, 4096};
  for (size_t i = 0; i < sizeof examples / sizeof examples[0]; i++) {
    int T = examples[i];
    char key[32];
    snprintf(key, sizeof key, "T = %d", T);
    snprintf(buf, sizeof buf, "tile %d, leaf %d", ts_default_tile(T), ts_default_leaf(T));
    row(key, buf);
  }
  return TS_OK;
}
