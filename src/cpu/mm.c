// The canonical matrix product (mm.h) on every instruction set.
//
// The blocking is a textbook one: op(B) is packed into panels of NR columns
// (K rows of NR floats, zero-padded past N), a group of panels at a time, and
// a register block of up to MR rows by NR columns runs its whole chain over k
// with every element in a register of its own. What the blocking may never do
// is split one element's chain, so there is no cut of k: the chains are as
// long as K, each element's k order is ascending, and vector lanes are
// different columns. That is why every path, block shape, remainder and
// thread count gives the definition's bits. The build has contraction off, so
// each fused multiply-add below is written out (fmaf or the intrinsics).
#include "mm.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "isa.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#define MM_X86 1
#include <immintrin.h>
#else
#define MM_X86 0
#endif
#if defined(__aarch64__)
#include <arm_neon.h>
#endif

#define MR 6 // rows of a register block (every path)
#define INLINE static inline __attribute__((always_inline))

// The operands of one register block: rows of op(A) from A, (ai, ak) apart.
typedef struct {
  const float *A;
  ptrdiff_t ai, ak;
  const float *P; // the packed panel: K rows of nr floats
  int K;
  float *C;
  int ldc, w; // w: columns of C the panel holds (the rest is padding)
  float alpha;
  int accumulate;
  int nl;       // ts_mm_leaves: leaves of K each (A and P continue leaf after leaf)
  float *stack; // and a block of MR x nr floats per level of their tree
} block;

// ---- generic C: the definition, 16 columns at a time -----------------------
#define NR_GENERIC 16
static void kern_generic(const block *b, int rb) {
  float t[MR][NR_GENERIC];
  memset(t, 0, sizeof t);
  for (int k = 0; k < b->K; k++) {
    const float *p = b->P + (size_t)k * NR_GENERIC;
    for (int r = 0; r < rb; r++) {
      const float a = b->A[r * b->ai + k * b->ak];
      for (int j = 0; j < NR_GENERIC; j++) t[r][j] = fmaf(a, p[j], t[r][j]);
    }
  }
  for (int r = 0; r < rb; r++) {
    float *c = b->C + (size_t)r * b->ldc;
    for (int j = 0; j < b->w; j++) c[j] = b->accumulate ? fmaf(b->alpha, t[r][j], c[j]) : b->alpha * t[r][j];
  }
}

#if MM_X86
#define AVX512 __attribute__((target("avx512f")))
#define AVX2 __attribute__((target("avx2,fma")))

// ---- AVX-512: 6 rows by 4 vectors of 16 columns, 24 chains in registers ----
#define NR_AVX512 64
// t = the chains of K steps from +0 over A's rows and the panel p
AVX512 INLINE void chain512(__m512 t[MR][4], const float *A, ptrdiff_t ai, ptrdiff_t ak,
                            const float *p, int K, const int rb) {
#pragma GCC unroll 6
  for (int r = 0; r < rb; r++)
#pragma GCC unroll 4
    for (int v = 0; v < 4; v++) t[r][v] = _mm512_setzero_ps();
  for (int k = 0; k < K; k++, p += NR_AVX512) {
    const __m512 b0 = _mm512_load_ps(p), b1 = _mm512_load_ps(p + 16);
    const __m512 b2 = _mm512_load_ps(p + 32), b3 = _mm512_load_ps(p + 48);
#pragma GCC unroll 6
    for (int r = 0; r < rb; r++) {
      const __m512 a = _mm512_set1_ps(A[r * ai + k * ak]);
      t[r][0] = _mm512_fmadd_ps(a, b0, t[r][0]);
      t[r][1] = _mm512_fmadd_ps(a, b1, t[r][1]);
      t[r][2] = _mm512_fmadd_ps(a, b2, t[r][2]);
      t[r][3] = _mm512_fmadd_ps(a, b3, t[r][3]);
    }
  }
}

AVX512 INLINE void k512(const block *b, const int rb) {
  __m512 t[MR][4];
  chain512(t, b->A, b->ai, b->ak, b->P, b->K, rb);
  const __m512 al = _mm512_set1_ps(b->alpha);
#pragma GCC unroll 4
  for (int v = 0; v < 4; v++) {
    const int left = b->w - 16 * v;
    if (left <= 0) break;
    const __mmask16 m = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
#pragma GCC unroll 6
    for (int r = 0; r < rb; r++) {
      float *c = b->C + (size_t)r * b->ldc + 16 * v;
      const __m512 x = b->accumulate ? _mm512_fmadd_ps(al, t[r][v], _mm512_maskz_loadu_ps(m, c))
                                     : _mm512_mul_ps(al, t[r][v]);
      _mm512_mask_storeu_ps(c, m, x);
    }
  }
}

// ts_mm_leaves: each leaf's chains in registers, merged there with the
// complete subtrees to their left (a level's block in the stack, the left
// operand), and the finished levels summed lowest first, as ts_tree does.
AVX512 INLINE void k512_leaves(const block *b, const int rb) {
  const size_t level = (size_t)MR * NR_AVX512;
  __m512 t[MR][4];
  for (int l = 0; l < b->nl; l++) {
    chain512(t, b->A + (ptrdiff_t)l * b->K * b->ak, b->ai, b->ak,
             b->P + (size_t)l * b->K * NR_AVX512, b->K, rb);
    int lev = 0;
    for (; (l >> lev) & 1; lev++) {
      const float *s = b->stack + lev * level;
#pragma GCC unroll 6
      for (int r = 0; r < rb; r++)
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++)
          t[r][v] = _mm512_add_ps(_mm512_load_ps(s + r * NR_AVX512 + 16 * v), t[r][v]);
    }
    float *s = b->stack + lev * level;
#pragma GCC unroll 6
    for (int r = 0; r < rb; r++)
#pragma GCC unroll 4
      for (int v = 0; v < 4; v++) _mm512_store_ps(s + r * NR_AVX512 + 16 * v, t[r][v]);
  }
  int have = 0;
  for (int lev = 0; (b->nl >> lev) != 0; lev++) {
    if (!((b->nl >> lev) & 1)) continue;
    const float *s = b->stack + lev * level;
#pragma GCC unroll 6
    for (int r = 0; r < rb; r++)
#pragma GCC unroll 4
      for (int v = 0; v < 4; v++) {
        const __m512 x = _mm512_load_ps(s + r * NR_AVX512 + 16 * v);
        t[r][v] = have ? _mm512_add_ps(x, t[r][v]) : x;
      }
    have = 1;
  }
  for (int v = 0; v < 4; v++) {
    const int left = b->w - 16 * v;
    if (left <= 0) break;
    const __mmask16 m = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
    for (int r = 0; r < rb; r++)
      _mm512_mask_storeu_ps(b->C + (size_t)r * b->ldc + 16 * v, m,
                            have ? t[r][v] : _mm512_setzero_ps());
  }
}

AVX512 static void kern_avx512_leaves(const block *b, int rb) {
  switch (rb) {
  case 6: k512_leaves(b, 6); break;
  case 5: k512_leaves(b, 5); break;
  case 4: k512_leaves(b, 4); break;
  case 3: k512_leaves(b, 3); break;
  case 2: k512_leaves(b, 2); break;
  default: k512_leaves(b, 1); break;
  }
}

AVX512 static void kern_avx512(const block *b, int rb) {
  switch (rb) {
  case 6: k512(b, 6); break;
  case 5: k512(b, 5); break;
  case 4: k512(b, 4); break;
  case 3: k512(b, 3); break;
  case 2: k512(b, 2); break;
  default: k512(b, 1); break;
  }
}

// A panel of op(B) = B^T (pack_panel's transposed case) sixteen by sixteen:
// sixteen of B's rows, 16 k each, loaded whole and transposed in registers,
// where a scalar copy would read 8 floats a row and write them 64 floats
// apart. Columns past w are zeros; a k tail under 16 loads and stores its
// rows only. A copy: no arithmetic, so no bit depends on it.
AVX512 static void pack_t512(float *P, const float *B, int ldb, int K, int j0, int w) {
  for (int jb = 0; jb < NR_AVX512; jb += 16)
    for (int k0 = 0; k0 < K; k0 += 16) {
      const int kn = K - k0 < 16 ? K - k0 : 16;
      const __mmask16 m = kn == 16 ? (__mmask16)0xffff : (__mmask16)((1u << kn) - 1);
      __m512 r[16], t[16];
#pragma GCC unroll 16
      for (int jj = 0; jj < 16; jj++)
        r[jj] = jb + jj < w ? _mm512_maskz_loadu_ps(m, B + (size_t)(j0 + jb + jj) * ldb + k0)
                            : _mm512_setzero_ps();
      // in each 128-bit lane L: row pairs, then rows 4g..4g+3 of column 4L + c in r[4g + c]
#pragma GCC unroll 16
      for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
      }
#pragma GCC unroll 16
      for (int g = 0; g < 16; g += 4) {
        r[g] = _mm512_shuffle_ps(t[g], t[g + 2], 0x44);
        r[g + 1] = _mm512_shuffle_ps(t[g], t[g + 2], 0xEE);
        r[g + 2] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0x44);
        r[g + 3] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0xEE);
      }
      // then the four row groups' lanes gathered: column c whole in one vector
#pragma GCC unroll 16
      for (int c = 0; c < 4; c++) {
        t[c] = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88);
        t[4 + c] = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xDD);
        t[8 + c] = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88);
        t[12 + c] = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xDD);
      }
#pragma GCC unroll 16
      for (int c = 0; c < 4; c++) {
        r[c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0x88);
        r[8 + c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0xDD);
        r[4 + c] = _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0x88);
        r[12 + c] = _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0xDD);
      }
#pragma GCC unroll 16
      for (int kk = 0; kk < 16; kk++) // (all 16 indices constant: r stays in registers)
        if (kk < kn) _mm512_store_ps(P + (size_t)(k0 + kk) * NR_AVX512 + jb, r[kk]);
    }
}

// ---- AVX2 + FMA: 6 rows by 2 vectors of 8 columns (16 registers in all) ----
#define NR_AVX2 16
AVX2 static inline __m256i lanes256(int from, int n) { // lanes from .. from+7 below n
  const __m256i idx = _mm256_add_epi32(_mm256_set1_epi32(from), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx);
}

AVX2 INLINE void chain256(__m256 t[MR][2], const float *A, ptrdiff_t ai, ptrdiff_t ak,
                          const float *p, int K, const int rb) {
#pragma GCC unroll 6
  for (int r = 0; r < rb; r++) t[r][0] = t[r][1] = _mm256_setzero_ps();
  for (int k = 0; k < K; k++, p += NR_AVX2) {
    const __m256 b0 = _mm256_load_ps(p), b1 = _mm256_load_ps(p + 8);
#pragma GCC unroll 6
    for (int r = 0; r < rb; r++) {
      const __m256 a = _mm256_broadcast_ss(A + r * ai + k * ak);
      t[r][0] = _mm256_fmadd_ps(a, b0, t[r][0]);
      t[r][1] = _mm256_fmadd_ps(a, b1, t[r][1]);
    }
  }
}

AVX2 INLINE void k256(const block *b, const int rb) {
  __m256 t[MR][2];
  chain256(t, b->A, b->ai, b->ak, b->P, b->K, rb);
  const __m256 al = _mm256_set1_ps(b->alpha);
  const __m256i m0 = lanes256(0, b->w), m1 = lanes256(8, b->w);
#pragma GCC unroll 6
  for (int r = 0; r < rb; r++) {
    float *c = b->C + (size_t)r * b->ldc;
    __m256 x0, x1;
    if (b->accumulate) {
      x0 = _mm256_fmadd_ps(al, t[r][0], _mm256_maskload_ps(c, m0));
      x1 = _mm256_fmadd_ps(al, t[r][1], _mm256_maskload_ps(c + 8, m1));
    } else {
      x0 = _mm256_mul_ps(al, t[r][0]);
      x1 = _mm256_mul_ps(al, t[r][1]);
    }
    _mm256_maskstore_ps(c, m0, x0);
    _mm256_maskstore_ps(c + 8, m1, x1);
  }
}

AVX2 INLINE void k256_leaves(const block *b, const int rb) {
  const size_t level = (size_t)MR * NR_AVX2;
  __m256 t[MR][2];
  for (int l = 0; l < b->nl; l++) {
    chain256(t, b->A + (ptrdiff_t)l * b->K * b->ak, b->ai, b->ak,
             b->P + (size_t)l * b->K * NR_AVX2, b->K, rb);
    int lev = 0;
    for (; (l >> lev) & 1; lev++) {
      const float *s = b->stack + lev * level;
#pragma GCC unroll 6
      for (int r = 0; r < rb; r++)
        for (int v = 0; v < 2; v++)
          t[r][v] = _mm256_add_ps(_mm256_load_ps(s + r * NR_AVX2 + 8 * v), t[r][v]);
    }
    float *s = b->stack + lev * level;
#pragma GCC unroll 6
    for (int r = 0; r < rb; r++)
      for (int v = 0; v < 2; v++) _mm256_store_ps(s + r * NR_AVX2 + 8 * v, t[r][v]);
  }
  int have = 0;
  for (int lev = 0; (b->nl >> lev) != 0; lev++) {
    if (!((b->nl >> lev) & 1)) continue;
    const float *s = b->stack + lev * level;
    for (int r = 0; r < rb; r++)
      for (int v = 0; v < 2; v++) {
        const __m256 x = _mm256_load_ps(s + r * NR_AVX2 + 8 * v);
        t[r][v] = have ? _mm256_add_ps(x, t[r][v]) : x;
      }
    have = 1;
  }
  const __m256i m0 = lanes256(0, b->w), m1 = lanes256(8, b->w);
  for (int r = 0; r < rb; r++) {
    float *c = b->C + (size_t)r * b->ldc;
    _mm256_maskstore_ps(c, m0, have ? t[r][0] : _mm256_setzero_ps());
    _mm256_maskstore_ps(c + 8, m1, have ? t[r][1] : _mm256_setzero_ps());
  }
}

AVX2 static void kern_avx2_leaves(const block *b, int rb) {
  switch (rb) {
  case 6: k256_leaves(b, 6); break;
  case 5: k256_leaves(b, 5); break;
  case 4: k256_leaves(b, 4); break;
  case 3: k256_leaves(b, 3); break;
  case 2: k256_leaves(b, 2); break;
  default: k256_leaves(b, 1); break;
  }
}

AVX2 static void kern_avx2(const block *b, int rb) {
  switch (rb) {
  case 6: k256(b, 6); break;
  case 5: k256(b, 5); break;
  case 4: k256(b, 4); break;
  case 3: k256(b, 3); break;
  case 2: k256(b, 2); break;
  default: k256(b, 1); break;
  }
}
#endif

#if defined(__aarch64__)
// ---- NEON: 6 rows by 4 vectors of 4 columns, 24 chains in registers --------
#define NR_NEON 16
INLINE void kneon(const block *b, const int rb) {
  float32x4_t t[MR][4];
  for (int r = 0; r < rb; r++)
    for (int v = 0; v < 4; v++) t[r][v] = vdupq_n_f32(0.0f);
  const float *A = b->A;
  const ptrdiff_t ai = b->ai, ak = b->ak;
  const float *p = b->P;
  for (int k = 0; k < b->K; k++, p += NR_NEON) {
    const float32x4_t b0 = vld1q_f32(p), b1 = vld1q_f32(p + 4), b2 = vld1q_f32(p + 8),
                      b3 = vld1q_f32(p + 12);
    for (int r = 0; r < rb; r++) {
      const float a = A[r * ai + k * ak];
      t[r][0] = vfmaq_n_f32(t[r][0], b0, a); // t + b·a, fused
      t[r][1] = vfmaq_n_f32(t[r][1], b1, a);
      t[r][2] = vfmaq_n_f32(t[r][2], b2, a);
      t[r][3] = vfmaq_n_f32(t[r][3], b3, a);
    }
  }
  for (int r = 0; r < rb; r++) {
    float *c = b->C + (size_t)r * b->ldc;
    float x[NR_NEON];
    if (b->accumulate) memcpy(x, c, (size_t)b->w * sizeof(float));
    for (int v = 0; v < 4; v++) {
      const float32x4_t al = vdupq_n_f32(b->alpha);
      float32x4_t y = b->accumulate ? vfmaq_f32(vld1q_f32(x + 4 * v), al, t[r][v]) : vmulq_f32(al, t[r][v]);
      vst1q_f32(x + 4 * v, y);
    }
    memcpy(c, x, (size_t)b->w * sizeof(float));
  }
}

static void kern_neon(const block *b, int rb) {
  switch (rb) {
  case 6: kneon(b, 6); break;
  case 5: kneon(b, 5); break;
  case 4: kneon(b, 4); break;
  case 3: kneon(b, 3); break;
  case 2: kneon(b, 2); break;
  default: kneon(b, 1); break;
  }
}
#endif

typedef void (*kern_fn)(const block *, int rb);

static int panel_width(int isa) {
#if MM_X86
  if (isa == TS_ISA_AVX512) return NR_AVX512;
  if (isa == TS_ISA_AVX2) return NR_AVX2;
#endif
#if defined(__aarch64__)
  if (isa == TS_ISA_NEON) return NR_NEON;
#endif
  return NR_GENERIC;
}

// Levels of the tree over nl leaves: the bits of nl.
static int levels_of(int nl) {
  int n = 0;
  while (n < 31 && (nl >> n) != 0) n++;
  return n;
}

// ts_mm_leaves on the paths without a kernel of their own (generic C, NEON):
// each leaf's chains through the path's kernel into a level block of the
// stack (alpha 1: the chain itself), merged in memory with the complete
// subtrees to their left, then the finished levels summed lowest first, each
// higher one the left operand. The same additions as the vector kernels.
static void leaves_by_kernel(kern_fn kern, int nr, const block *b, int rb) {
  const size_t level = (size_t)MR * nr;
  float *top = b->stack + (size_t)levels_of(b->nl) * level; // the leaf being made
  block one = *b;
  one.alpha = 1.0f;
  one.accumulate = 0;
  one.ldc = nr;
  one.w = nr;
  one.C = top;
  for (int l = 0; l < b->nl; l++) {
    one.A = b->A + (ptrdiff_t)l * b->K * b->ak;
    one.P = b->P + (size_t)l * b->K * nr;
    kern(&one, rb);
    int lev = 0;
    for (; (l >> lev) & 1; lev++) {
      const float *s = b->stack + lev * level;
      for (size_t e = 0; e < (size_t)rb * nr; e++) top[e] = s[e] + top[e];
    }
    memcpy(b->stack + lev * level, top, (size_t)rb * nr * sizeof(float));
  }
  int have = 0;
  for (int lev = 0; (b->nl >> lev) != 0; lev++) {
    if (!((b->nl >> lev) & 1)) continue;
    const float *s = b->stack + lev * level;
    for (size_t e = 0; e < (size_t)rb * nr; e++) top[e] = have ? s[e] + top[e] : s[e];
    have = 1;
  }
  for (int r = 0; r < rb; r++)
    for (int j = 0; j < b->w; j++) b->C[(size_t)r * b->ldc + j] = have ? top[(size_t)r * nr + j] : 0.0f;
}

static kern_fn leaves_kernel_of(int isa) {
#if MM_X86
  if (isa == TS_ISA_AVX512) return kern_avx512_leaves;
  if (isa == TS_ISA_AVX2) return kern_avx2_leaves;
#endif
  (void)isa;
  return NULL; // leaves_by_kernel
}

static kern_fn kernel_of(int isa) {
#if MM_X86
  if (isa == TS_ISA_AVX512) return kern_avx512;
  if (isa == TS_ISA_AVX2) return kern_avx2;
#endif
#if defined(__aarch64__)
  if (isa == TS_ISA_NEON) return kern_neon;
#endif
  return kern_generic;
}

// Columns j0 .. j0+w-1 of op(B) into P: K rows of nr floats, zeros past w.
static void pack_panel(float *P, int nr, const float *B, int ldb, int transB, int K, int j0, int w) {
  if (!transB) {
    for (int k = 0; k < K; k++) {
      float *p = P + (size_t)k * nr;
      memcpy(p, B + (size_t)k * ldb + j0, (size_t)w * sizeof(float));
      for (int j = w; j < nr; j++) p[j] = 0.0f;
    }
    return;
  }
#if MM_X86
  if (nr == NR_AVX512) { // the AVX-512 path's panels
    pack_t512(P, B, ldb, K, j0, w);
    return;
  }
#endif
  // op(B)(k, j) = B[j*ldb + k]: a block of 8 k at a time keeps both the
  // reads (along B's rows) and the writes (along P's rows) in few lines
  int k0 = 0;
  for (; k0 + 8 <= K; k0 += 8)
    for (int j = 0; j < nr; j++) {
      float *p = P + (size_t)k0 * nr + j;
      if (j < w) {
        const float *s = B + (size_t)(j0 + j) * ldb + k0;
        for (int kk = 0; kk < 8; kk++) p[(size_t)kk * nr] = s[kk];
      } else
        for (int kk = 0; kk < 8; kk++) p[(size_t)kk * nr] = 0.0f;
    }
  for (; k0 < K; k0++)
    for (int j = 0; j < nr; j++)
      P[(size_t)k0 * nr + j] = j < w ? B[(size_t)(j0 + j) * ldb + k0] : 0.0f;
}

// Each thread's packing space, kept from call to call (aligned for the
// vector loads of the panels). It hangs on a pthread key so that a thread
// that ends (OpenMP's team shrinks when a product asks for fewer threads)
// gives its space back instead of leaking it.
typedef struct {
  float *buf;
  size_t cap; // floats
} pack_t;

static pthread_key_t pack_key;
static pthread_once_t pack_once = PTHREAD_ONCE_INIT;
static int pack_key_ok;

static void pack_release(void *v) {
  pack_t *p = v;
  free(p->buf);
  free(p);
}

static void pack_key_make(void) { pack_key_ok = pthread_key_create(&pack_key, pack_release) == 0; }

static float *pack_space(size_t floats) {
  pthread_once(&pack_once, pack_key_make);
  if (!pack_key_ok) return NULL;
  pack_t *p = pthread_getspecific(pack_key);
  if (!p) {
    p = calloc(1, sizeof *p);
    if (!p || pthread_setspecific(pack_key, p) != 0) {
      free(p);
      return NULL;
    }
  }
  if (floats > p->cap) {
    free(p->buf);
    size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
    p->buf = aligned_alloc(64, bytes);
    p->cap = p->buf ? bytes / sizeof(float) : 0;
  }
  return p->buf;
}

// Sizes of the blocking: a group of panels is packed at once (about 256 KB),
// and rows go through it a chunk at a time (about 128 KB of op(A)), so both
// stay in the caches while the chunk's register blocks run.
#define GROUP_FLOATS 65536
#define CHUNK_FLOATS 32768

// The product, single-threaded or on the OpenMP threads; any split gives the
// same bits (each element is computed whole by one register block).
// nl = 0: the product over K. nl > 0: ts_mm_leaves, nl leaves of `leaf`
// steps each (K = nl * leaf), alpha 1 and no accumulation.
static int run(int isa, int threads, int transA, int transB, int M, int N, int K, float alpha,
               const float *A, int lda, const float *B, int ldb, int accumulate, float *C, int ldc,
               int nl, int leaf) {
  if (M <= 0 || N <= 0) return 0;
  const int nr = panel_width(isa);
  const kern_fn kern = kernel_of(isa), kern_leaves = leaves_kernel_of(isa);
  // the leaves' tree: a block per level, and (generic, NEON) the leaf being made
  const size_t stack_floats = nl > 0 ? (size_t)(levels_of(nl) + 1) * MR * nr : 0;
  const ptrdiff_t ai = transA ? 1 : lda, ak = transA ? lda : 1;
  const int Kp = K > 0 ? K : 1;
  const int npanels = (N + nr - 1) / nr;
  int G = GROUP_FLOATS / (Kp * nr);
  if (G < 1) G = 1;
  if (G > npanels) G = npanels;
  const int ngroups = (npanels + G - 1) / G;
  int mc = CHUNK_FLOATS / Kp / MR * MR;
  if (mc < MR) mc = MR;

  int nth = 1;
#ifdef _OPENMP
  if (threads == 0 && !omp_in_parallel() && (double)M * N * (K + 1) >= 262144.0)
    nth = omp_get_max_threads();
#endif
  // Row ranges: enough units for the threads to share; each range packs its
  // groups again, so ranges stay at least a few chunks tall.
  int R = 1;
  if (nth > 1) {
    R = (4 * nth + ngroups - 1) / ngroups;
    int most = (M + 4 * MR - 1) / (4 * MR);
    if (R > most) R = most;
    if (R < 1) R = 1;
  }
  int rows = (M + R - 1) / R;
  rows = (rows + MR - 1) / MR * MR;
  R = (M + rows - 1) / rows;
  const int units = ngroups * R;
  int failed = 0;

#pragma omp parallel for schedule(dynamic, 1) num_threads(nth) if (nth > 1) reduction(| : failed)
  for (int u = 0; u < units; u++) {
    const int g = u / R, r = u % R;
    const int p0 = g * G, p1 = p0 + G < npanels ? p0 + G : npanels;
    const size_t panel_floats = (size_t)(p1 - p0) * Kp * nr;
    float *P = pack_space(panel_floats + stack_floats);
    if (!P) {
      failed = 1;
      continue;
    }
    for (int p = p0; p < p1; p++) {
      const int j0 = p * nr, w = N - j0 < nr ? N - j0 : nr;
      pack_panel(P + (size_t)(p - p0) * Kp * nr, nr, B, ldb, transB, K, j0, w);
    }
    const int i_end = (r + 1) * rows < M ? (r + 1) * rows : M;
    for (int c0 = r * rows; c0 < i_end; c0 += mc) {
      const int c1 = c0 + mc < i_end ? c0 + mc : i_end;
      for (int p = p0; p < p1; p++) {
        const int j0 = p * nr;
        block b = {NULL, ai, ak, P + (size_t)(p - p0) * Kp * nr, nl > 0 ? leaf : K, NULL, ldc,
                   N - j0 < nr ? N - j0 : nr, alpha, accumulate, nl, P + panel_floats};
        for (int i = c0; i < c1; i += MR) {
          b.A = A + (size_t)i * ai;
          b.C = C + (size_t)i * ldc + j0;
          const int rb = c1 - i < MR ? c1 - i : MR;
          if (nl == 0)
            kern(&b, rb);
          else if (kern_leaves)
            kern_leaves(&b, rb);
          else
            leaves_by_kernel(kern, nr, &b, rb);
        }
      }
    }
  }
  return failed ? -1 : 0;
}

void ts_mm(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
           const float *B, int ldb, int accumulate, float *C, int ldc) {
  if (run(ts_isa(), 0, transA, transB, M, N, K, alpha, A, lda, B, ldb, accumulate, C, ldc, 0, 0) == 0)
    return;
  // no memory for a panel: the definition itself, element by element, needs
  // none (slow, and the same bits)
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      float t = 0.0f;
      for (int k = 0; k < K; k++)
        t = fmaf(transA ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k],
                 transB ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j], t);
      float *c = C + (size_t)i * ldc + j;
      *c = accumulate ? fmaf(alpha, t, *c) : alpha * t;
    }
}

int ts_mm_isa(int isa, int threads, int transA, int transB, int M, int N, int K, float alpha,
              const float *A, int lda, const float *B, int ldb, int accumulate, float *C, int ldc) {
  if (!ts_isa_available(isa)) return -1;
  return run(isa, threads, transA, transB, M, N, K, alpha, A, lda, B, ldb, accumulate, C, ldc, 0, 0);
}

// The definition of ts_mm_leaves element by element, for when no memory can
// be had for a panel: each leaf's chain, then ts_tree's order over them.
static void leaves_slow(int M, int N, int nl, int leaf, const float *A, int lda, const float *B,
                        int ldb, float *C, int ldc) {
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      float stack[32], acc = 0.0f;
      for (int l = 0; l < nl; l++) {
        float t = 0.0f;
        for (int k = l * leaf; k < (l + 1) * leaf; k++)
          t = fmaf(A[(size_t)k * lda + i], B[(size_t)k * ldb + j], t);
        int lev = 0;
        for (; (l >> lev) & 1; lev++) t = stack[lev] + t;
        stack[lev] = t;
      }
      int have = 0;
      for (int lev = 0; (nl >> lev) != 0; lev++)
        if ((nl >> lev) & 1) {
          acc = have ? stack[lev] + acc : stack[lev];
          have = 1;
        }
      C[(size_t)i * ldc + j] = acc;
    }
}

void ts_mm_leaves(int M, int N, int nleaves, int leaf, const float *A, int lda, const float *B,
                  int ldb, float *C, int ldc) {
  if (run(ts_isa(), 0, 1, 0, M, N, nleaves * leaf, 1.0f, A, lda, B, ldb, 0, C, ldc, nleaves, leaf) != 0)
    leaves_slow(M, N, nleaves, leaf, A, lda, B, ldb, C, ldc);
}

int ts_mm_leaves_isa(int isa, int threads, int M, int N, int nleaves, int leaf, const float *A,
                     int lda, const float *B, int ldb, float *C, int ldc) {
  if (!ts_isa_available(isa)) return -1;
  return run(isa, threads, 1, 0, M, N, nleaves * leaf, 1.0f, A, lda, B, ldb, 0, C, ldc, nleaves, leaf);
}
