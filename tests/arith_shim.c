// A rank that computes differently, for tests/mpi_arith.sh: preloaded into
// one rank (LD_PRELOAD), this library changes its arithmetic the way another
// machine's could. Built three ways:
//   -DSHIM_FMAF  fmaf rounds twice (a multiply, then an add), as a C library
//                without a fused fmaf would: the generic kernels use fmaf.
//   -DSHIM_LIBM  expf, logf, powf, sinf, cosf, tanhf, log1pf, exp, log, pow,
//                sin, cos and tanh return the C library's result moved by one
//                ulp, as another libm build (FMA or not, another glibc,
//                aarch64) may: the exact path calls none of them.
//   -DSHIM_FTZ   the CPU flushes subnormal results and operands to zero
//                (x86's FTZ and DAZ bits, as -ffast-math's startup code sets).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>

#if defined(SHIM_FMAF)
float fmaf(float a, float b, float c) {
  volatile float p = a * b; // rounded: no contraction back into one fma
  return p + c;
}
#endif

#if defined(SHIM_LIBM)
#define NUDGE_F(name)                                                        \
  float name(float x) {                                                      \
    static float (*real)(float);                                             \
    if (!real) real = (float (*)(float))dlsym(RTLD_NEXT, #name);             \
    return nextafterf(real(x), INFINITY);                                    \
  }
#define NUDGE_D(name)                                                        \
  double name(double x) {                                                    \
    static double (*real)(double);                                           \
    if (!real) real = (double (*)(double))dlsym(RTLD_NEXT, #name);           \
    return nextafter(real(x), INFINITY);                                     \
  }
NUDGE_F(expf)
NUDGE_F(logf)
NUDGE_F(sinf)
NUDGE_F(cosf)
NUDGE_F(tanhf)
NUDGE_F(log1pf)
NUDGE_D(exp)
NUDGE_D(log)
NUDGE_D(sin)
NUDGE_D(cos)
NUDGE_D(tanh)
float powf(float x, float y) {
  static float (*real)(float, float);
  if (!real) real = (float (*)(float, float))dlsym(RTLD_NEXT, "powf");
  return nextafterf(real(x, y), INFINITY);
}
double pow(double x, double y) {
  static double (*real)(double, double);
  if (!real) real = (double (*)(double, double))dlsym(RTLD_NEXT, "pow");
  return nextafter(real(x, y), INFINITY);
}
#endif

#if defined(SHIM_FTZ) && defined(__x86_64__)
#include <xmmintrin.h>
__attribute__((constructor)) static void flush_to_zero(void) {
  _mm_setcsr(_mm_getcsr() | 0x8040); // FTZ (bit 15) and DAZ (bit 6)
}
#endif
