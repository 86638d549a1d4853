// The instruction set the exact products run on (src/cpu/isa.c).
//
// Every product of the exact path has one definition, element by element
// (src/cpu/mm.h), and each instruction set below computes exactly those bits:
// the choice changes speed, never a result. The best one this CPU has is used
// unless TESSERA_ISA names another, which tests and users checking a machine
// use to run the same computation on the narrower paths.
#ifndef TS_ISA_H
#define TS_ISA_H
#include <stddef.h>

enum { TS_ISA_GENERIC = 0, TS_ISA_AVX2 = 1, TS_ISA_AVX512 = 2, TS_ISA_NEON = 3, TS_ISA_COUNT = 4 };

// "generic", "avx2", "avx512", "neon".
const char *ts_isa_name(int isa);
// 1 when this build and this CPU can run isa.
int ts_isa_available(int isa);
// The widest available.
int ts_isa_best(void);
// The ISA in use (the first call picks it: TESSERA_ISA if set and runnable,
// else the best; an unusable TESSERA_ISA falls back to the best here, and
// ts_isa_check_env is what refuses it).
int ts_isa(void);
// Reads TESSERA_ISA: 0 when it is unset or names a path this CPU runs (which
// is then used); -1 with a one-line reason in err when it names no path or
// one this CPU or build lacks.
int ts_isa_check_env(char *err, size_t cap);
// Reads OPENBLAS_CORETYPE (OpenBLAS's kernel, which it uses without asking
// whether the CPU runs it: the roof's sgemm then dies of SIGILL): 0 when it
// is unset, names no kernel known here, or one this CPU runs; -1 with a
// one-line reason in err when it names a known kernel this CPU lacks the
// instructions of.
int ts_isa_check_blas_env(char *err, size_t cap);
// Uses isa from now on (tests); returns -1 when it is not available.
int ts_isa_set(int isa);
// "avx512 (avx2, generic also available)": for tessera info and run headers.
void ts_isa_describe(char *buf, size_t cap);
#endif
