// Elementary functions whose bits are tessera's own: log, exp, pow, sin and
// cos for everything of the exact path that is not a product or a sum (the
// loss's and attention's log-sum-exp, RoPE's table, AdamW's bias correction,
// the learning-rate schedule, the normal draws of initialisation).
//
// The C library's versions are not the same bits everywhere: glibc picks an
// FMA or a non-FMA variant of exp, log, pow, sin and cos at load time, aarch64
// builds are compiled differently, and no library promises correctly rounded
// results. These are written with IEEE +, -, *, / alone (no fma, no libm), so
// with contraction off (configure.ac) every machine computes them alike. The
// exponential of the hot loops is src/exact/fastexp.h.
//
// Largest errors measured, against glibc's long double functions (x87, 64-bit
// significand) or mpmath at 200 bits: ts_log 0.55 ulp (4·10^6 arguments over
// the whole range; every u1 of the normal draws); ts_exp 0.69 ulp, 0.78 on
// subnormal results (6·10^7 in [-745, 710]); ts_pow 0.87 ulp for |y·log x|
// <= 16 (0.55 on RoPE's θ^(−2i/dh)), growing as |y·log x|·2^-57 beyond;
// ts_powi 0.50 ulp (β^step for ten β and steps to 10^6); ts_sincos 0.80 ulp
// (|a| < 2^20, and RoPE's angles for t < 2^17). ts_logf is the correctly
// rounded logf for every positive float but 5 halfway cases (glibc's logf
// is not, on 416,909 of them).
#ifndef TS_EXACTMATH_H
#define TS_EXACTMATH_H
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/hd.h" // TS_HD: the GPU's exact tier computes the same bits from this source

static inline TS_HD uint64_t ts_em_bits(double x) {
  uint64_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

static inline TS_HD double ts_em_double(uint64_t u) {
  double x;
  memcpy(&x, &u, sizeof x);
  return x;
}

// 2^k for -1022 <= k <= 1023.
static inline TS_HD double ts_em_pow2(int k) { return ts_em_double((uint64_t)(k + 1023) << 52); }

// a·b = p + e exactly (Dekker's product with Veltkamp's split: no fma, so no
// library call where the CPU lacks the instruction). |a|, |b| < 2^995.
static inline TS_HD double ts_em_mul_err(double a, double b, double p) {
  const double split = 134217729.0; // 2^27 + 1
  double ca = split * a, ah = ca - (ca - a), al = a - ah;
  double cb = split * b, bh = cb - (cb - b), bl = b - bh;
  return ((ah * bh - p) + ah * bl + al * bh) + al * bl;
}

// A NaN for an argument out of a function's domain: 0/0 for a finite x, x's
// own NaN for a NaN (the bits of (x − x)/0, without a constant division by
// zero that nvcc warns about).
static inline TS_HD double ts_em_nan(double x) { return (x - x) / (x - x); }

// ---- log ----------------------------------------------------------------------------------
static const double ts_em_ln2_hi = 0x1.62e42fee00000p-1; // 32 bits: k·ln2_hi is exact
static const double ts_em_ln2_lo = 0x1.a39ef35793c76p-33;

// x = 2^k·m with m in [√½, √2): f = m − 1 (exact), k. x positive and finite.
static inline TS_HD double ts_em_log_reduce(double x, int *k) {
  int e = 0;
  if (x < 0x1p-1022) { // subnormal: make it normal first
    x *= 0x1p54;
    e = -54;
  }
  uint64_t u = ts_em_bits(x);
  e += (int)(u >> 52) - 1023;
  uint64_t mant = u & 0xfffffffffffffull;
  const uint64_t sqrt2 = 0x6a09e667f3bcdull; // √2's significand bits
  double m;
  if (mant >= sqrt2) {
    m = ts_em_double(mant | (1022ull << 52));
    e += 1;
  } else {
    m = ts_em_double(mant | (1023ull << 52));
  }
  *k = e;
  return m - 1.0; // Sterbenz: exact
}

// R(z) = Σ 2z^n/(2n+1) of log(1+f) = 2·atanh(s) = 2s + s·R(s²), s = f/(2+f):
// |s| <= 0.1716, so z <= 0.0295 and 11 terms leave under 2^-60 of the result.
static inline TS_HD double ts_em_log_series(double z) {
  double R = 0x1.642c8590b2164p-4; // 2/23
  R = R * z + 0x1.8618618618618p-4; // 2/21
  R = R * z + 0x1.af286bca1af28p-4; // 2/19
  R = R * z + 0x1.e1e1e1e1e1e1ep-4; // 2/17
  R = R * z + 0x1.1111111111111p-3; // 2/15
  R = R * z + 0x1.3b13b13b13b14p-3; // 2/13
  R = R * z + 0x1.745d1745d1746p-3; // 2/11
  R = R * z + 0x1.c71c71c71c71cp-3; // 2/9
  R = R * z + 0x1.2492492492492p-2; // 2/7
  R = R * z + 0x1.999999999999ap-2; // 2/5
  R = R * z + 0x1.5555555555555p-1; // 2/3
  return R * z;
}

// log(x) as hi + lo, hi the double nearest hi + lo, with hi + lo within
// about 2^-59 of log(x) relative: s is carried as sh + sl and every rounding
// error of the large terms is kept, so only s·R(s²) (at most 0.0034) is a
// plain double. x positive and finite.
static inline TS_HD void ts_em_log_dd(double x, double *hi, double *lo) {
  int k;
  double f = ts_em_log_reduce(x, &k);
  double dh = 2.0 + f, dl = f - (dh - 2.0); // 2 + f exactly
  double sh = f / dh;
  double p = sh * dh, pe = ts_em_mul_err(sh, dh, p);
  double sl = (((f - p) - pe) - sh * dl) / dh; // f − sh·(2+f), f − p exact
  double low = 2.0 * sl + sh * ts_em_log_series(sh * sh);
  double a = 2.0 * sh, dk = (double)k, kh = dk * ts_em_ln2_hi;
  // b + be = kh + a exactly (Knuth's two-sum)
  double b = kh + a, bv = b - kh, be = (kh - (b - bv)) + (a - bv);
  low = low + (be + dk * ts_em_ln2_lo);
  double h = b + low;
  *hi = h;
  *lo = low - (h - b);
}

// Natural logarithm: hi of the above, so the one rounding that is not exact
// is the last.
static inline TS_HD double ts_log(double x) {
  if (!(x > 0.0)) return x == 0.0 ? -INFINITY : ts_em_nan(x); // NaN for x < 0 and NaN
  if (x == INFINITY) return x;
  double hi, lo;
  ts_em_log_dd(x, &hi, &lo);
  return hi;
}

// ---- exp ----------------------------------------------------------------------------------
// e^(x + xl) for |xl| <= ulp(x) (xl = 0: plain exp). x = k·ln2 + r with
// |r| <= ln2/2; e^r = 1 + r + r²·P(r), P the Taylor series to r^11/13!
// (the next term is under 2^-57).
static inline TS_HD double ts_em_exp_dd(double x, double xl) {
  if (x != x) return x + x;
  if (x > 709.782712893384) return INFINITY;
  if (x < -745.1332191019412) return 0.0;
  const double magic = 0x1.8p52; // adding it rounds to an integer
  double kd = (x * 0x1.71547652b82fep+0 + magic) - magic;
  double hi = x - kd * ts_em_ln2_hi; // exact (Sterbenz, and k·ln2_hi exact)
  double lo = kd * ts_em_ln2_lo - xl;
  double r = hi - lo, rl = (hi - r) - lo;
  double p = 0x1.6124613a86d09p-33;  // 1/13!
  p = p * r + 0x1.1eed8eff8d898p-29; // 1/12!
  p = p * r + 0x1.ae64567f544e4p-26; // 1/11!
  p = p * r + 0x1.27e4fb7789f5cp-22; // 1/10!
  p = p * r + 0x1.71de3a556c734p-19; // 1/9!
  p = p * r + 0x1.a01a01a01a01ap-16; // 1/8!
  p = p * r + 0x1.a01a01a01a01ap-13; // 1/7!
  p = p * r + 0x1.6c16c16c16c17p-10; // 1/6!
  p = p * r + 0x1.1111111111111p-7;  // 1/5!
  p = p * r + 0x1.5555555555555p-5;  // 1/4!
  p = p * r + 0x1.5555555555555p-3;  // 1/3!
  p = p * r + 0.5;
  // 1 + r exactly as one + oe (two-sum), so that the rest is added once
  double one = 1.0 + r, ov = one - 1.0, oe = (1.0 - (one - ov)) + (r - ov);
  double y = one + (oe + (r * r * p + rl));
  int k = (int)kd;
  if (k > 1023) return y * ts_em_pow2(k - 1) * 2.0;
  if (k < -1021) return y * ts_em_pow2(k + 1000) * 0x1p-1000; // subnormal: rounded twice
  return y * ts_em_pow2(k);
}

static inline TS_HD double ts_exp(double x) { return ts_em_exp_dd(x, 0.0); }

// x^y for x >= 0 (NaN for x < 0): e^(y·log x) with log x and the product
// carried to twice double precision, so that the error is exp's alone.
static inline TS_HD double ts_pow(double x, double y) {
  if (y == 0.0 || x == 1.0) return 1.0;
  if (x != x || y != y) return x + y;
  if (x < 0.0) return ts_em_nan(x);
  if (x == 0.0) return y > 0.0 ? 0.0 : INFINITY;
  if (x == INFINITY) return y > 0.0 ? INFINITY : 0.0;
  double lh, ll;
  ts_em_log_dd(x, &lh, &ll);
  double ph = y * lh;
  if (ph != ph || ph > 710.0) return ph != ph ? ph : INFINITY; // (y infinite)
  if (ph < -746.0) return 0.0;
  return ts_em_exp_dd(ph, ts_em_mul_err(y, lh, ph) + y * ll);
}

// x^n for 0 <= x <= 1 and an integer n >= 0 (AdamW's β^step): repeated
// squaring in double-double, every product's rounding error kept, so the
// result is x^n rounded once (the pieces lose precision only where x^n is
// below 2^-960).
static inline TS_HD void ts_em_dd_mul(double *h, double *l, double bh, double bl) {
  double p = *h * bh;
  double e = ts_em_mul_err(*h, bh, p) + (*h * bl + *l * bh);
  double s = p + e;
  *l = e - (s - p);
  *h = s;
}

static inline TS_HD double ts_powi(double x, uint64_t n) {
  double rh = 1.0, rl = 0.0, bh = x, bl = 0.0;
  while (n) {
    if (n & 1) ts_em_dd_mul(&rh, &rl, bh, bl);
    n >>= 1;
    if (n) ts_em_dd_mul(&bh, &bl, bh, bl);
  }
  return rh;
}

// ---- sin, cos -----------------------------------------------------------------------------
// sin and cos of h + l, |h| <= π/4 (a hair more after rounding), |l| <= ulp(h):
// Taylor series to r^17 and r^16 (the next terms are under 2^-60), with the
// last additions arranged so that 1 − r²/2 loses nothing.
static inline TS_HD void ts_em_sincos_kernel(double h, double l, double *s, double *c) {
  double z = h * h;
  double S = 0x1.952c77030ad4ap-49;   // 1/17!
  S = S * z - 0x1.ae7f3e733b81fp-41;  // 1/15!
  S = S * z + 0x1.6124613a86d09p-33;  // 1/13!
  S = S * z - 0x1.ae64567f544e4p-26;  // 1/11!
  S = S * z + 0x1.71de3a556c734p-19;  // 1/9!
  S = S * z - 0x1.a01a01a01a01ap-13;  // 1/7!
  S = S * z + 0x1.1111111111111p-7;   // 1/5!
  S = S * z - 0x1.5555555555555p-3;   // 1/3!
  double C = 0x1.ae7f3e733b81fp-45;   // 1/16!
  C = C * z - 0x1.93974a8c07c9dp-37;  // 1/14!
  C = C * z + 0x1.1eed8eff8d898p-29;  // 1/12!
  C = C * z - 0x1.27e4fb7789f5cp-22;  // 1/10!
  C = C * z + 0x1.a01a01a01a01ap-16;  // 1/8!
  C = C * z - 0x1.6c16c16c16c17p-10;  // 1/6!
  C = C * z + 0x1.5555555555555p-5;   // 1/4!
  // sin(h + l) = sin h + l·cos h; cos(h + l) = cos h − l·sin h
  *s = h + (h * z * S + l * (1.0 - 0.5 * z));
  double hz = 0.5 * z, w = 1.0 - hz;
  *c = w + (((1.0 - w) - hz) + (z * z * C - h * l)); // (1 − w) − hz: w's rounding error, exact
}

// sin a and cos a. a = k·π/2 + r, with π/2 in five pieces of 23 or 24 bits so
// that k·piece is exact for k < 2^29, and r carried as hi + lo: exact for
// |a| < 8.4e8 (beyond that, and for inf and NaN, both are NaN; RoPE's angles
// are below the sequence length).
static inline TS_HD void ts_sincos(double a, double *s, double *c) {
  if (!(fabs(a) < 8.4e8)) {
    *s = *c = ts_em_nan(a);
    return;
  }
  if (a == 0.0) { // (the sum below would lose the sign of −0)
    *s = a;
    *c = 1.0;
    return;
  }
  const double magic = 0x1.8p52;
  double kd = (a * 0x1.45f306dc9c883p-1 + magic) - magic; // round(a·2/π)
  static const double pio2[5] = {0x1.921fb4p+0, 0x1.4442d0p-24, 0x1.846988p-48, 0x1.8cc516p-72,
                                 0x1.01b838p-96};
  double h = a - kd * pio2[0], l = 0.0; // exact (Sterbenz)
  for (int i = 1; i < 5; i++) {
    double t = -kd * pio2[i];
    double u = h + t, v = u - h, e = (h - (u - v)) + (t - v);
    h = u;
    l = l + e;
  }
  double r = h + l;
  l = l - (r - h);
  double sr, cr;
  ts_em_sincos_kernel(r, l, &sr, &cr);
  switch ((int64_t)kd & 3) {
  case 0: *s = sr; *c = cr; break;
  case 1: *s = cr; *c = -sr; break;
  case 2: *s = -sr; *c = -cr; break;
  default: *s = -cr; *c = sr; break;
  }
}

static inline TS_HD double ts_cos(double a) {
  double s, c;
  ts_sincos(a, &s, &c);
  return c;
}

// ---- float --------------------------------------------------------------------------------
// logf through the double log: the result is rounded once more, to float.
static inline TS_HD float ts_logf(float x) { return (float)ts_log((double)x); }
#endif
