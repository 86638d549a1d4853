// Which instruction set the exact products run on (isa.h).
#include "isa.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const names[TS_ISA_COUNT] = {"generic", "avx2", "avx512", "neon"};

const char *ts_isa_name(int isa) {
  return isa >= 0 && isa < TS_ISA_COUNT ? names[isa] : "?";
}

int ts_isa_available(int isa) {
  switch (isa) {
  case TS_ISA_GENERIC: return 1;
#if defined(__x86_64__) && defined(__GNUC__)
  case TS_ISA_AVX2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  case TS_ISA_AVX512: return __builtin_cpu_supports("avx512f");
#endif
#if defined(__aarch64__)
  case TS_ISA_NEON: return 1; // Advanced SIMD is part of every AArch64 CPU
#endif
  default: return 0;
  }
}

int ts_isa_best(void) {
  static const int order[] = {TS_ISA_AVX512, TS_ISA_AVX2, TS_ISA_NEON};
  for (size_t i = 0; i < sizeof order / sizeof *order; i++)
    if (ts_isa_available(order[i])) return order[i];
  return TS_ISA_GENERIC;
}

static int current = -1;

// The path TESSERA_ISA names, or -1 (unset: -2).
static int from_env(void) {
  const char *s = getenv("TESSERA_ISA");
  if (!s || !*s) return -2;
  for (int i = 0; i < TS_ISA_COUNT; i++)
    if (!strcmp(s, names[i])) return i;
  return -1;
}

int ts_isa(void) {
  if (current < 0) {
    int e = from_env();
    current = e >= 0 && ts_isa_available(e) ? e : ts_isa_best();
  }
  return current;
}

int ts_isa_check_env(char *err, size_t cap) {
  int e = from_env();
  if (e == -2) return 0;
  if (e == -1) {
    snprintf(err, cap, "TESSERA_ISA=%s: unknown instruction set (avx512, avx2, neon or generic)",
             getenv("TESSERA_ISA"));
    return -1;
  }
  if (!ts_isa_available(e)) {
    snprintf(err, cap, "TESSERA_ISA=%s: this CPU or build cannot run it (it runs %s)", names[e],
             ts_isa_name(ts_isa_best()));
    return -1;
  }
  current = e;
  return 0;
}

int ts_isa_check_blas_env(char *err, size_t cap) {
#if defined(__x86_64__) && defined(__GNUC__)
  const char *s = getenv("OPENBLAS_CORETYPE");
  if (!s || !*s) return 0;
  // OpenBLAS's x86 kernels and the instructions each needs (names as it reads them)
  static const struct {
    const char *name, *needs;
  } kernels[] = {{"SkylakeX", "avx512f"},  {"Cooperlake", "avx512bf16"},
                 {"SapphireRapids", "avx512fp16"}, {"Haswell", "avx2"},
                 {"Zen", "avx2"},         {"Sandybridge", "avx"},
                 {"Bulldozer", "avx"},     {"Piledriver", "avx"},
                 {"Steamroller", "avx"},   {"Excavator", "avx2"}};
  for (size_t i = 0; i < sizeof kernels / sizeof *kernels; i++) {
    if (strcasecmp(s, kernels[i].name) != 0) continue;
    const char *needs = kernels[i].needs;
    // __builtin_cpu_supports takes a string literal only
    const int has = !strcmp(needs, "avx512f")      ? __builtin_cpu_supports("avx512f")
                    : !strcmp(needs, "avx512bf16") ? __builtin_cpu_supports("avx512bf16")
                    : !strcmp(needs, "avx512fp16") ? __builtin_cpu_supports("avx512fp16")
                    : !strcmp(needs, "avx2")       ? __builtin_cpu_supports("avx2")
                                                   : __builtin_cpu_supports("avx");
    if (has) return 0;
    snprintf(err, cap, "OPENBLAS_CORETYPE=%s: this CPU cannot run that OpenBLAS kernel (it "
             "lacks %s); unset it or name one it runs", s, needs);
    return -1;
  }
#else
  (void)err;
  (void)cap;
#endif
  return 0;
}

int ts_isa_set(int isa) {
  if (!ts_isa_available(isa)) return -1;
  current = isa;
  return 0;
}

void ts_isa_describe(char *buf, size_t cap) {
  int used = ts_isa();
  size_t n = (size_t)snprintf(buf, cap, "%s", names[used]);
  int first = 1;
  for (int i = TS_ISA_COUNT - 1; i >= 0 && n < cap; i--) {
    if (i == used || !ts_isa_available(i)) continue;
    n += (size_t)snprintf(buf + n, cap - n, "%s%s", first ? " (also: " : ", ", names[i]);
    first = 0;
  }
  if (!first && n < cap) snprintf(buf + n, cap - n, ")");
}
