// Causal multi-head attention on the GPU: the semantics of attention_forward
// and attention_backward in src/cpu/attention.c (kernels.h). Two tiers
// (docs/GPU.md): the exact tier (fp32 without --fast) computes the CPU's
// bits with its own kernels, "the exact tier" below; the fast tier (--fast,
// bf16) runs the kernels described here, agreeing with the CPU to fp32
// rounding (bf16: to the operands' rounding).
//
// Design of the fast tier. Each row of work (a query row in the forward and in dQ, a key row
// in dK/dV) is owned by SPLIT adjacent lanes of one warp, each holding 32 of
// the head's features (dh <= 32: 1 lane, <= 64: 2, <= 128: 4), so the row's
// vectors and fp32 accumulators live in registers; dot products are summed
// across those lanes by a butterfly, which leaves identical bits in every
// lane, so the lanes of a row always take the same branches. The other
// operand (K, V tiles; or Q, dO tiles) is staged through shared memory, a
// tile at a time, by the whole block.
//  - forward: one block per (64 query rows, head, batch); key tiles from the
//    highest visible one down to 0 (the CPU's order, R2), online softmax per
//    tile: running max, running sum of undropped probabilities, accumulator
//    rescaled only when the max grows. Output = acc / l, lse = m + log l.
//    attention_forward_block runs the same walk over one block of keys,
//    carrying (acc, m, l) in and out through memory between the calls.
//  - backward, kernel 1 (dQ): the same blocks; each row first writes
//    dsum = rowsum(dO ∘ O), then visits its visible keys, tiles descending,
//    recomputing P = exp(S - lse). With dq_acc it starts from the dQ the
//    calls for later blocks of keys left instead of 0.
//  - backward, kernel 2 (dK, dV): one block per (64 key rows, kv head,
//    batch); each key row visits the query rows that see it, tiles
//    ascending, and within a tile the group's query heads in head order
//    (the CPU's leaf order), reading the dsum kernel 1 wrote.
// Determinism: every sum is a loop in a fixed order inside one thread (or a
// fixed butterfly), no atomics, so two runs give the same bits. Memory: no
// T x T buffer; only registers and a few tens of KiB of shared memory per
// block. Dropout masks come from the same counter-based Philox as the CPU
// (philox.h), indexed by global (batch, head, query, key) positions.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "exact/fastexp.h"
#include "exact/exactmath.h"
#include "gpu.h"
#include "exact/index.h"
#include "exact/philox.h"
extern "C" {
#include "exact/rng.h"
}

#define ATTN_CHUNK 32 // features of a row per lane
#define ATTN_ROWS 64  // rows owned per block (queries: forward, dQ; keys: dK/dV)
#define ATTN_TILE 32  // rows of the other operand staged per shared-memory tile
#define ATTN_MAX_DH 128
#define ATTN_FULL 0xffffffffu

// What every kernel needs: the shape with its defaults filled in.
struct attn_args {
  ts_attn_shape s;
  float scale; // 1/sqrt(dh), as on the CPU
  int G;       // query heads per key/value head
  int bf16;    // round q, k, v, dout to bf16 when reading them
  int first;   // forward: start the online softmax afresh (else: load the state)
  int last;    // forward: finish into out and lse (else: store the state)
};


// Global dropout index of probability (b, local head h, global positions i, j):
// the CPU's attn_index.
__device__ __forceinline__ uint64_t attn_index(const ts_attn_shape &s, int b, int h, int64_t i,
                                               int64_t j) {
  return ts_index_attn(s.index_base, (uint64_t)b, (uint64_t)s.Hg, (uint64_t)(s.h0 + h),
                       (uint64_t)s.T, (uint64_t)i, (uint64_t)j);
}

// Sum over the SPLIT lanes of a row. Each level adds the same two values in
// every lane (a + b == b + a), so all lanes end with the same bits.
template <int SPLIT>
__device__ __forceinline__ float row_sum(float x) {
#pragma unroll
  for (int o = 1; o < SPLIT; o <<= 1) x += __shfl_xor_sync(ATTN_FULL, x, o);
  return x;
}

// This lane's part of x · y, where x holds the lane's features (float4 groups
// e*SPLIT + sub of the row) and y is a padded row in shared memory. Four
// partial sums keep four independent FMA chains in flight.
template <int SPLIT>
__device__ __forceinline__ float dot_part(const float *x, const float4 *y, int sub) {
  float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
#pragma unroll
  for (int e = 0; e < ATTN_CHUNK / 4; e++) {
    float4 w = y[e * SPLIT + sub];
    a0 += x[4 * e] * w.x;
    a1 += x[4 * e + 1] * w.y;
    a2 += x[4 * e + 2] * w.z;
    a3 += x[4 * e + 3] * w.w;
  }
  return (a0 + a1) + (a2 + a3);
}

// acc += c * y (y as in dot_part).
template <int SPLIT>
__device__ __forceinline__ void axpy(float *acc, float c, const float4 *y, int sub) {
#pragma unroll
  for (int e = 0; e < ATTN_CHUNK / 4; e++) {
    float4 w = y[e * SPLIT + sub];
    acc[4 * e] += c * w.x;
    acc[4 * e + 1] += c * w.y;
    acc[4 * e + 2] += c * w.z;
    acc[4 * e + 3] += c * w.w;
  }
}

// Feature n (< ATTN_CHUNK) of this lane: float4 groups interleave across the
// row's lanes, so lanes of one row read different shared-memory banks while
// lanes of different rows read the same word (a broadcast).
template <int SPLIT>
__device__ __forceinline__ int lane_feature(int n, int sub) {
  return 4 * ((n / 4) * SPLIT + sub) + n % 4;
}

// Loads this lane's features of a row (zero past dh or for a missing row).
template <int SPLIT>
__device__ __forceinline__ void load_row(float *x, const float *row, bool valid, int dh, int sub,
                                         int bf16) {
#pragma unroll
  for (int n = 0; n < ATTN_CHUNK; n++) {
    int c = lane_feature<SPLIT>(n, sub);
    x[n] = valid && c < dh ? ts_operand(row[c], bf16) : 0.0f;
  }
}

// Loads this lane's features of a row as they are (an accumulator: no operand
// rounding; zero past dh or for a missing row).
template <int SPLIT>
__device__ __forceinline__ void load_acc(float *x, const float *row, bool valid, int dh, int sub) {
#pragma unroll
  for (int n = 0; n < ATTN_CHUNK; n++) {
    int c = lane_feature<SPLIT>(n, sub);
    x[n] = valid && c < dh ? row[c] : 0.0f;
  }
}

// Stores this lane's features of a row (features past dh are padding).
template <int SPLIT>
__device__ __forceinline__ void store_row(float *row, const float *x, int dh, int sub) {
#pragma unroll
  for (int n = 0; n < ATTN_CHUNK; n++) {
    int c = lane_feature<SPLIT>(n, sub);
    if (c < dh) row[c] = x[n];
  }
}

// Stages rows [r0, r0 + ATTN_TILE) of a (rows, ld) head slice into a padded
// shared tile (zeros past dh and past the last row), rounded as an operand.
// Consecutive threads read consecutive features: coalesced.
template <int SPLIT>
__device__ __forceinline__ void stage_tile(float4 *tile, const float *src, int r0, int rows,
                                           int ld, int dh, int bf16) {
  constexpr int DP = ATTN_CHUNK * SPLIT; // padded row width
  float *t = (float *)tile;
  for (int x = threadIdx.x; x < ATTN_TILE * DP; x += blockDim.x) {
    int i = x / DP, c = x % DP, r = r0 + i;
    t[x] = r < rows && c < dh ? ts_operand(src[(size_t)r * ld + c], bf16) : 0.0f;
  }
}

// Bit n set when probability n of a run of 32 (dropout indices idx0 + n*stride)
// is kept; only the bits in `want` (the visible pairs) are drawn. The row's
// lanes share the draws (lane sub takes n ≡ sub mod SPLIT), then OR them.
template <int SPLIT>
__device__ __forceinline__ uint32_t keep_bits(const ts_attn_shape &s, uint64_t idx0,
                                              uint64_t stride, uint32_t want, int sub) {
  uint32_t bits = 0;
  for (int n = sub; n < 32; n += SPLIT)
    if ((want >> n) & 1u) {
      float u = ts_philox_uniform(s.seed, TS_RNG_DROPOUT_ATTN, s.step, idx0 + (uint64_t)n * stride);
      if (u >= s.dropout) bits |= 1u << n;
    }
#pragma unroll
  for (int o = 1; o < SPLIT; o <<= 1) bits |= __shfl_xor_sync(ATTN_FULL, bits, o);
  return bits;
}

// Last local key row that local query row r can see (negative: none): a query
// at position q0 + r sees the keys at positions <= q0 + r of [k0, k0 + Tk).
__device__ __forceinline__ int last_key(const ts_attn_shape &s, int r) {
  int t = s.q0 + r - s.k0;
  return t < s.Tk - 1 ? t : s.Tk - 1;
}

// ---- forward ---------------------------------------------------------------------------
// out (B, Tq, ldo), lse (B, H, Tq); q (B, Tq, ldq); k, v (B, Tk, ldkv). Between
// the calls of a block walk, out holds acc, lse the running max and lsum
// (B, H, Tq) the running sum.
// Grid (query tiles, H, B), ATTN_ROWS * SPLIT threads: lanes [SPLIT*i, SPLIT*i + SPLIT)
// own query row r0 + i. The last query tiles (most keys) get the first blocks.
// A query row's loop over key tiles (forward and dQ): stages key/value tile
// t0 into shared memory once the previous one is consumed, and returns the
// bits of the tile's keys row r keeps after dropout; *vis gets those it sees.
template <int SPLIT>
__device__ __forceinline__ uint32_t stage_key_tile(float4 *Ks, float4 *Vs, const float *k,
                                                   const float *v, int t0, int last,
                                                   const attn_args &a, int b, int h, int r,
                                                   int sub, uint32_t *vis) {
  const ts_attn_shape &s = a.s;
  __syncthreads(); // the previous tile is consumed
  stage_tile<SPLIT>(Ks, k, t0, s.Tk, s.ldkv, s.dh, a.bf16);
  stage_tile<SPLIT>(Vs, v, t0, s.Tk, s.ldkv, s.dh, a.bf16);
  __syncthreads();
  uint32_t seen = 0;
#pragma unroll
  for (int j = 0; j < ATTN_TILE; j++)
    if (t0 + j <= last) seen |= 1u << j;
  *vis = seen;
  if (!(s.dropout > 0.0f)) return seen;
  return keep_bits<SPLIT>(s, attn_index(s, b, h, (int64_t)s.q0 + r, (int64_t)s.k0 + t0), 1, seen,
                          sub);
}

template <int SPLIT>
__global__ void __launch_bounds__(ATTN_ROWS * SPLIT)
attn_forward_kernel(float *out, float *lse, float *lsum, const float *q, const float *k,
                    const float *v, attn_args a) {
  constexpr int DP = ATTN_CHUNK * SPLIT;
  __shared__ float4 Ks[ATTN_TILE * DP / 4], Vs[ATTN_TILE * DP / 4];
  const ts_attn_shape &s = a.s;
  const int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z, kvh = h / a.G;
  const int sub = threadIdx.x % SPLIT, r0 = qt * ATTN_ROWS, r = r0 + threadIdx.x / SPLIT;
  const bool valid = r < s.Tq;
  const int last = valid ? last_key(s, r) : -1; // this row's last visible key
  const int rend = (r0 + ATTN_ROWS < s.Tq ? r0 + ATTN_ROWS : s.Tq) - 1;
  const int blast = last_key(s, rend);          // the block's (uniform across the block)
  const size_t kvoff = (size_t)b * s.Tk * s.ldkv + (size_t)kvh * s.dh;
  const size_t orow = ((size_t)b * s.Tq + r) * s.ldo + (size_t)h * s.dh;
  const size_t srow = ((size_t)b * s.H + h) * s.Tq + r; // lse, lsum

  float qr[ATTN_CHUNK], acc[ATTN_CHUNK];
  load_row<SPLIT>(qr, q + ((size_t)b * s.Tq + r) * s.ldq + (size_t)h * s.dh, valid, s.dh, sub,
                  a.bf16);
  float m = -INFINITY, l = 0.0f; // running max and sum (of undropped probabilities)
  if (a.first) {
#pragma unroll
    for (int n = 0; n < ATTN_CHUNK; n++) acc[n] = 0.0f;
  } else { // what the blocks of later keys left
    load_acc<SPLIT>(acc, out + orow, valid, s.dh, sub);
    if (valid) m = lse[srow], l = lsum[srow];
  }
  const float keep_scale = s.dropout > 0.0f ? 1.0f / (1.0f - s.dropout) : 1.0f;

  for (int t0 = blast >= 0 ? blast / ATTN_TILE * ATTN_TILE : -1; t0 >= 0; t0 -= ATTN_TILE) {
    uint32_t vis, kept = stage_key_tile<SPLIT>(Ks, Vs, k + kvoff, v + kvoff, t0, last, a, b, h,
                                                r, sub, &vis);
    float sc[ATTN_TILE]; // scores, then (dropped) probabilities
    float mt = -INFINITY;
#pragma unroll
    for (int j = 0; j < ATTN_TILE; j++) {
      float d = row_sum<SPLIT>(dot_part<SPLIT>(qr, Ks + j * (DP / 4), sub));
      sc[j] = (vis >> j) & 1u ? d * a.scale : -INFINITY;
      mt = fmaxf(mt, sc[j]);
    }
    const float mx = fmaxf(m, mt);
    if (mx == -INFINITY) continue; // no key seen yet (lanes of a row agree)
    const float corr = expf(m - mx); // 0 on the first visible tile (m = -inf)
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < ATTN_TILE; j++) {
      float p = expf(sc[j] - mx); // masked: exp(-inf) = 0
      sum += p;                   // in key order, like the CPU
      sc[j] = (kept >> j) & 1u ? p * keep_scale : 0.0f;
    }
    l = l * corr + sum;
    if (mx > m) { // the max grew: rescale (corr == 1 otherwise)
#pragma unroll
      for (int n = 0; n < ATTN_CHUNK; n++) acc[n] *= corr;
      m = mx;
    }
#pragma unroll
    for (int j = 0; j < ATTN_TILE; j++) axpy<SPLIT>(acc, sc[j], Vs + j * (DP / 4), sub);
  }
  if (!valid) return;
  if (!a.last) { // for the block of earlier keys
    store_row<SPLIT>(out + orow, acc, s.dh, sub);
    if (sub == 0) lse[srow] = m, lsum[srow] = l;
    return;
  }
  // A row that sees no key (possible only with k0 > its position) gets what
  // the CPU gives it: 0/0 = NaN and lse = -inf + log 0 = -inf.
#pragma unroll
  for (int n = 0; n < ATTN_CHUNK; n++) acc[n] = acc[n] / l;
  store_row<SPLIT>(out + orow, acc, s.dh, sub);
  if (sub == 0) lse[srow] = m + logf(l);
}

// ---- backward: dsum and dQ ---------------------------------------------------------------
// dq (B, Tq, ldq) overwritten (dq_acc: added to); dsum (B, H, Tq) = rowsum(dO ∘ O); dout, out (B, Tq, ldo).
// Same grid and ownership as the forward. For each visible key j, in the
// forward's tile order: dS = P (dP~ - D) scale, dQ += dS K_j, with
// P = exp(S - lse) undropped and dP~ = dO · V_j masked and scaled like P~.
template <int SPLIT>
__global__ void __launch_bounds__(ATTN_ROWS * SPLIT)
attn_dq_kernel(float *dq, float *dsum, const float *dout, const float *q, const float *k,
               const float *v, const float *out, const float *lse, attn_args a) {
  constexpr int DP = ATTN_CHUNK * SPLIT;
  __shared__ float4 Ks[ATTN_TILE * DP / 4], Vs[ATTN_TILE * DP / 4];
  const ts_attn_shape &s = a.s;
  const int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z, kvh = h / a.G;
  const int sub = threadIdx.x % SPLIT, r0 = qt * ATTN_ROWS, r = r0 + threadIdx.x / SPLIT;
  const bool valid = r < s.Tq;
  const int last = valid ? last_key(s, r) : -1;
  const int rend = (r0 + ATTN_ROWS < s.Tq ? r0 + ATTN_ROWS : s.Tq) - 1;
  const int blast = last_key(s, rend);
  const size_t kvoff = (size_t)b * s.Tk * s.ldkv + (size_t)kvh * s.dh;
  const size_t orow = ((size_t)b * s.Tq + r) * s.ldo + (size_t)h * s.dh;
  const size_t srow = ((size_t)b * s.H + h) * s.Tq + r; // lse, dsum

  float qr[ATTN_CHUNK], gr[ATTN_CHUNK], acc[ATTN_CHUNK];
  load_row<SPLIT>(qr, q + ((size_t)b * s.Tq + r) * s.ldq + (size_t)h * s.dh, valid, s.dh, sub,
                  a.bf16);
  load_row<SPLIT>(gr, dout + orow, valid, s.dh, sub, a.bf16);
  // D = dO · O, with dO as the products read it (rounded in bf16 mode) so that
  // D = Σ_j P_j dP_j holds for the products actually formed; O stays fp32.
  float D = 0.0f;
#pragma unroll
  for (int n = 0; n < ATTN_CHUNK; n++) {
    int c = lane_feature<SPLIT>(n, sub);
    if (valid && c < s.dh) D += gr[n] * out[orow + c];
    acc[n] = 0.0f;
  }
  const size_t qrow = ((size_t)b * s.Tq + r) * s.ldq + (size_t)h * s.dh;
  if (s.dq_acc) load_acc<SPLIT>(acc, dq + qrow, valid, s.dh, sub); // later blocks' terms
  D = row_sum<SPLIT>(D);
  if (valid && sub == 0) dsum[srow] = D;
  const float L = valid ? lse[srow] : 0.0f;
  const float inv_keep = s.dropout > 0.0f ? 1.0f / (1.0f - s.dropout) : 1.0f;

  for (int t0 = blast >= 0 ? blast / ATTN_TILE * ATTN_TILE : -1; t0 >= 0; t0 -= ATTN_TILE) {
    uint32_t vis, kept = stage_key_tile<SPLIT>(Ks, Vs, k + kvoff, v + kvoff, t0, last, a, b, h,
                                                r, sub, &vis);
    for (int j = 0; j < ATTN_TILE; j++) {
      // both sums run in every lane (the butterflies need the whole warp)
      float sj = row_sum<SPLIT>(dot_part<SPLIT>(qr, Ks + j * (DP / 4), sub)) * a.scale;
      float dp = row_sum<SPLIT>(dot_part<SPLIT>(gr, Vs + j * (DP / 4), sub));
      if (!((vis >> j) & 1u)) continue;
      float p = expf(sj - L);
      if (s.dropout > 0.0f) dp = (kept >> j) & 1u ? dp * inv_keep : 0.0f;
      float ds = p * (dp - D) * a.scale;
      axpy<SPLIT>(acc, ds, Ks + j * (DP / 4), sub);
    }
  }
  if (valid) store_row<SPLIT>(dq + qrow, acc, s.dh, sub);
}

// ---- backward: dK and dV -----------------------------------------------------------------
// dk, dv (B, Tk, ldkv) overwritten for every key row. Grid (key tiles, Hkv, B),
// ATTN_ROWS * SPLIT threads: lanes [SPLIT*i, SPLIT*i + SPLIT) own key row t0 + i
// of kv head j. Query rows come in tiles, ascending, from the first that can
// see the block's keys; within a tile the group's heads h = j*G + g in order:
//   dK += dS_i Q_i, dV += P~_i dO_i
// over the query rows i that see the key. Accumulators start at -0.0, the
// exact identity of addition, so a key no local query sees stays -0.0 (R3).
template <int SPLIT>
__global__ void __launch_bounds__(ATTN_ROWS * SPLIT)
attn_dkv_kernel(float *dk, float *dv, const float *dout, const float *q, const float *k,
                const float *v, const float *lse, const float *dsum, attn_args a) {
  constexpr int DP = ATTN_CHUNK * SPLIT;
  __shared__ float4 Qs[ATTN_TILE * DP / 4], Gs[ATTN_TILE * DP / 4];
  __shared__ float Ls[ATTN_TILE], Ds[ATTN_TILE];
  const ts_attn_shape &s = a.s;
  const int jh = blockIdx.y, b = blockIdx.z;
  const int sub = threadIdx.x % SPLIT, t0 = blockIdx.x * ATTN_ROWS, t = t0 + threadIdx.x / SPLIT;
  const bool valid = t < s.Tk;
  const int64_t kpos = (int64_t)s.k0 + t; // global key position
  const size_t kvrow = ((size_t)b * s.Tk + t) * s.ldkv + (size_t)jh * s.dh;

  float kr[ATTN_CHUNK], vr[ATTN_CHUNK], dka[ATTN_CHUNK], dva[ATTN_CHUNK];
  load_row<SPLIT>(kr, k + kvrow, valid, s.dh, sub, a.bf16);
  load_row<SPLIT>(vr, v + kvrow, valid, s.dh, sub, a.bf16);
#pragma unroll
  for (int n = 0; n < ATTN_CHUNK; n++) {
    dka[n] = -0.0f;
    dva[n] = -0.0f;
  }
  const float inv_keep = s.dropout > 0.0f ? 1.0f / (1.0f - s.dropout) : 1.0f;
  // first local query row that sees any key of the block (uniform)
  const int64_t rf = (int64_t)s.k0 + t0 - s.q0;
  const int rfirst = rf > 0 ? (int)(rf < s.Tq ? rf : s.Tq) : 0;

  for (int r0 = rfirst; r0 < s.Tq; r0 += ATTN_TILE) {
    // row r0 + i sees this key iff its position q0 + r0 + i >= kpos
    const int64_t ifirst = kpos - s.q0 - r0;
    const int nrows = s.Tq - r0 < ATTN_TILE ? s.Tq - r0 : ATTN_TILE;
    uint32_t vis = 0;
    if (valid)
      for (int i = 0; i < nrows; i++)
        if (i >= ifirst) vis |= 1u << i;
    for (int g = 0; g < a.G; g++) {
      const int h = jh * a.G + g;
      const size_t qoff = (size_t)b * s.Tq * s.ldq + (size_t)h * s.dh;
      const size_t ooff = (size_t)b * s.Tq * s.ldo + (size_t)h * s.dh;
      const size_t soff = ((size_t)b * s.H + h) * s.Tq; // lse, dsum
      __syncthreads();
      stage_tile<SPLIT>(Qs, q + qoff, r0, s.Tq, s.ldq, s.dh, a.bf16);
      stage_tile<SPLIT>(Gs, dout + ooff, r0, s.Tq, s.ldo, s.dh, a.bf16);
      if (threadIdx.x < ATTN_TILE) {
        int i = r0 + threadIdx.x;
        Ls[threadIdx.x] = i < s.Tq ? lse[soff + i] : 0.0f;
        Ds[threadIdx.x] = i < s.Tq ? dsum[soff + i] : 0.0f;
      }
      __syncthreads();
      uint32_t kept = vis;
      if (s.dropout > 0.0f)
        kept = keep_bits<SPLIT>(s, attn_index(s, b, h, (int64_t)s.q0 + r0, kpos), (uint64_t)s.T,
                                vis, sub);
      for (int i = 0; i < ATTN_TILE; i++) {
        float si = row_sum<SPLIT>(dot_part<SPLIT>(kr, Qs + i * (DP / 4), sub)) * a.scale;
        float dp = row_sum<SPLIT>(dot_part<SPLIT>(vr, Gs + i * (DP / 4), sub));
        if (!((vis >> i) & 1u)) continue;
        float p = expf(si - Ls[i]), pt = p;
        if (s.dropout > 0.0f) {
          bool keep = (kept >> i) & 1u;
          dp = keep ? dp * inv_keep : 0.0f;
          pt = keep ? p * inv_keep : 0.0f;
        }
        float ds = p * (dp - Ds[i]) * a.scale;
        axpy<SPLIT>(dka, ds, Qs + i * (DP / 4), sub);
        axpy<SPLIT>(dva, pt, Gs + i * (DP / 4), sub);
      }
    }
  }
  if (!valid) return;
  store_row<SPLIT>(dk + kvrow, dka, s.dh, sub);
  store_row<SPLIT>(dv + kvrow, dva, s.dh, sub);
}

// ---- the exact tier ----------------------------------------------------------------------
// fp32 without --fast (ts_cuda_exact): the CPU's bits, by the CPU's operations
// in the CPU's order (src/cpu/attention.c, docs/EXACTNESS.md R2). The unit of
// work is the CPU's: a (query tile, head) for the forward and dQ, a (key tile,
// kv head) for dK/dV, one block each, and every element of a tile product is
// one thread's fused multiply-add chain over k in ascending order from +0,
// then scaled (the scores, by 1/√dh) or added to the accumulator
// (ts_tile_mm's definition). Per key tile of the forward, as
// online_softmax_t: the row's max from the running max over the keys in
// order, corr = ts_expf(m − mx), P = ts_expf(S − mx), the row's sum over the
// keys in order from +0, l = l·corr + sum, acc ·= corr (always), then the
// dropout mask, then acc += P~·V. The element-wise steps run a thread per
// element; the two in-order reductions of a row (max, sum) a thread per row.
// The backward recomputes P = ts_expf(S − lse) and dP = dO·Vᵀ per tile pair
// and forms dS = P∘(dP~ − D)·scale as tile_grads, D = Σ_c dO·O in feature
// order. dQ (one block per query tile) adds its key tiles' terms from the
// diagonal down; dK/dV (one block per key tile) sums, per query tile, the
// group's heads in head order into a leaf and pushes it into the canonical
// tree over query tiles (positions counted from the first local one, those
// before the key tile empty), whose levels live in device scratch.
//
// Cost: the same arithmetic as the CPU's, tile·tile·dh multiply-adds per tile
// pair and product, the backward's scores and dP computed twice (once for dQ,
// once for dK/dV, as flash attention's backward does); every operand is read
// from global memory (L1/L2) rather than staged, the row reductions are
// serial over the tile, and a philox draw is made per probability per pass.
// Expect several times the fast tier's time; parallelism is B·H·T/tile blocks
// of EX_THREADS threads.
#define EX_THREADS 256 // threads per block
#define EX_SHTILE 64   // tiles up to this size keep their score tiles in shared memory
// The thread's index and the block's size, read where used rather than kept
// in variables: the emulator (tests/gpu_emu) tells barriers apart by their
// call site, and a compiler that knew a thread's loop bounds could not
// change between two barriers might thread its jumps through a copy of one.
#define EX_TID ((int)threadIdx.x)
#define EX_NT ((int)blockDim.x)

struct ex_args {
  ts_attn_shape s;
  float scale;   // 1/sqrt(dh), as on the CPU
  int G;         // query heads per key/value head
  int qa, qb;    // global query tiles held: [qa, qb)
  int ka, kb;    // global key tiles held: [ka, kb)
  int first, last; // forward: start the state afresh / finish it
  int b0;        // first sequence of this launch (grid.z counts from it)
  int levels;    // dK/dV: tree levels per element
  float *scr;    // device scratch (per block: see the launches), or NULL
};

// The keep/drop draw of probability (b, h, global query position i, key j):
// the CPU's ts_rng_uniform(seed, TS_RNG_DROPOUT_ATTN, step, attn_index(...)).
__device__ __forceinline__ bool ex_kept(const ts_attn_shape &s, int b, int h, int64_t i,
                                        int64_t j) {
  return ts_philox_uniform(s.seed, TS_RNG_DROPOUT_ATTN, s.step, attn_index(s, b, h, i, j)) >=
         s.dropout;
}

// One element of a tile product: the fma chain over c of a[c] · b[c] from +0
// (ts_tile_mm's definition, before its alpha).
__device__ __forceinline__ float ex_dot(const float *a, const float *b, int n) {
  float t = 0.0f;
  for (int c = 0; c < n; c++) t = fmaf(a[c], b[c], t);
  return t;
}

// The block's buffers: static shared memory for tiles up to EX_SHTILE, else
// `per` floats of scratch for block `blk` at offset `off` of its slot.
__device__ __forceinline__ float *ex_buf(float *sh, const ex_args &a, size_t per, size_t off,
                                         size_t blk) {
  return a.s.tile <= EX_SHTILE ? sh : a.scr + blk * per + off;
}

// Forward: grid (local query tiles, H, sequences), the last query tile first.
// acc lives in out (the CPU's acc, which a block walk stores there anyway),
// m and l in the block's buffer.
__global__ void __launch_bounds__(EX_THREADS)
ex_forward_kernel(float *out, float *lse, float *lsum, const float *q, const float *k,
                  const float *v, ex_args a) {
  __shared__ float sh[EX_SHTILE * EX_SHTILE + 4 * EX_SHTILE];
  const ts_attn_shape &s = a.s;
  const int tile = s.tile, dh = s.dh;
  const int nq = a.qb - a.qa, lq = nq - 1 - (int)blockIdx.x, qt = a.qa + lq;
  const int h = blockIdx.y, b = a.b0 + blockIdx.z, kvh = h / a.G;
  const size_t blk = ((size_t)blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  float *St = ex_buf(sh, a, (size_t)tile * tile + 4 * tile, 0, blk); // Stᵀ: (key j, query i)
  float *m = St + (size_t)tile * tile, *l = m + tile, *mx = l + tile, *corr = mx + tile;
  const float *Q = q + ((size_t)b * s.Tq + (size_t)lq * tile) * s.ldq + (size_t)h * dh;
  float *O = out + ((size_t)b * s.Tq + (size_t)lq * tile) * s.ldo + (size_t)h * dh;
  float *L = lse + ((size_t)b * s.H + h) * s.Tq + (size_t)lq * tile;
  float *Ls = lsum ? lsum + ((size_t)b * s.H + h) * s.Tq + (size_t)lq * tile : NULL;
  const size_t khead = (size_t)b * s.Tk * s.ldkv + (size_t)kvh * dh;
  const float keep = 1.0f / (1.0f - s.dropout);
  if (a.first) {
    for (int e = EX_TID; e < tile * dh; e += EX_NT) O[(size_t)(e / dh) * s.ldo + e % dh] = 0.0f;
    for (int i = EX_TID; i < tile; i += EX_NT) m[i] = -INFINITY, l[i] = 0.0f;
  } else { // the state the blocks of later keys left
    for (int i = EX_TID; i < tile; i += EX_NT) m[i] = L[i], l[i] = Ls[i];
  }
  __syncthreads();
  for (int kt = qt < a.kb - 1 ? qt : a.kb - 1; kt >= a.ka; kt--) {
    const float *K = k + khead + (size_t)(kt - a.ka) * tile * s.ldkv;
    const float *V = v + khead + (size_t)(kt - a.ka) * tile * s.ldkv;
    for (int e = EX_TID; e < tile * tile; e += EX_NT) {
      const int j = e / tile, i = e % tile;
      float sc = a.scale * ex_dot(K + (size_t)j * s.ldkv, Q + (size_t)i * s.ldq, dh);
      St[e] = kt == qt && j > i ? -INFINITY : sc; // the diagonal tile's mask
    }
    __syncthreads();
    for (int i = EX_TID; i < tile; i += EX_NT) { // the row's max over its keys in order
      float x = m[i];
      for (int j = 0; j < tile; j++) {
        const float r = St[(size_t)j * tile + i];
        x = r > x ? r : x;
      }
      mx[i] = x;
      corr[i] = ts_expf(m[i] - x); // m = -inf on the first tile: corr = 0
    }
    __syncthreads();
    for (int e = EX_TID; e < tile * tile; e += EX_NT) St[e] = ts_expf(St[e] - mx[e % tile]);
    __syncthreads();
    for (int i = EX_TID; i < tile; i += EX_NT) { // the row's sum over its keys in order
      float sum = 0.0f;
      for (int j = 0; j < tile; j++) sum += St[(size_t)j * tile + i];
      l[i] = l[i] * corr[i] + sum;
      m[i] = mx[i];
    }
    __syncthreads();
    if (s.dropout > 0.0f) {
      for (int e = EX_TID; e < tile * tile; e += EX_NT) {
        const int j = e / tile, i = e % tile;
        St[e] = ex_kept(s, b, h, (int64_t)qt * tile + i, (int64_t)kt * tile + j) ? St[e] * keep
                                                                                 : 0.0f;
      }
      __syncthreads();
    }
    for (int e = EX_TID; e < tile * dh; e += EX_NT) { // acc = acc·corr + P~·V
      const int i = e / dh, c = e % dh;
      float *o = O + (size_t)i * s.ldo + c;
      const float ac = *o * corr[i];
      float t = 0.0f;
      for (int j = 0; j < tile; j++) t = fmaf(St[(size_t)j * tile + i], V[(size_t)j * s.ldkv + c], t);
      *o = fmaf(1.0f, t, ac);
    }
    __syncthreads();
  }
  if (a.last) {
    for (int e = EX_TID; e < tile * dh; e += EX_NT) {
      float *o = O + (size_t)(e / dh) * s.ldo + e % dh;
      *o = *o / l[e / dh];
    }
    for (int i = EX_TID; i < tile; i += EX_NT) L[i] = m[i] + ts_logf(l[i]);
  } else { // for the block of earlier keys (acc is in out already)
    for (int i = EX_TID; i < tile; i += EX_NT) L[i] = m[i], Ls[i] = l[i];
  }
}

// D = Σ_c dO_c · O_c in feature order, a thread per (row, head): dsum (B, H, Tq).
__global__ void ex_dsum_kernel(float *dsum, const float *dout, const float *out, ex_args a) {
  const ts_attn_shape &s = a.s;
  const int64_t x = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (x >= (int64_t)s.B * s.Tq * s.H) return;
  const int h = (int)(x % s.H);
  const int64_t r = x / s.H;
  const int b = (int)(r / s.Tq), i = (int)(r % s.Tq);
  const float *o = out + r * s.ldo + (size_t)h * s.dh, *g = dout + r * s.ldo + (size_t)h * s.dh;
  float acc = 0.0f;
  for (int c = 0; c < s.dh; c++) acc += g[c] * o[c];
  dsum[((size_t)b * s.H + h) * s.Tq + i] = acc;
}

// tile_grads for the pair (query tile qt of head h, key tile kt): S (query i,
// key j) ← P~, dS ← P∘(dP~ − D)·scale. Q, dO: the query tile's rows; K, V the
// key tile's; L, D: the query rows' lse and dsum.
__device__ __forceinline__ void ex_tile_grads(float *S, float *dS, const float *Q,
                                              const float *dO, const float *K, const float *V,
                                              const float *L, const float *D, const ex_args &a,
                                              int b, int h, int qt, int kt) {
  const ts_attn_shape &s = a.s;
  const int tile = s.tile, dh = s.dh;
  const float inv_keep = 1.0f / (1.0f - s.dropout);
  for (int e = threadIdx.x; e < tile * tile; e += blockDim.x) {
    const int i = e / tile, j = e % tile;
    float sc = a.scale * ex_dot(Q + (size_t)i * s.ldq, K + (size_t)j * s.ldkv, dh);
    if (kt == qt && j > i) sc = -INFINITY;
    const float p = ts_expf(sc - L[i]);
    float dp = 1.0f * ex_dot(dO + (size_t)i * s.ldo, V + (size_t)j * s.ldkv, dh);
    if (s.dropout > 0.0f) {
      const bool kept = ex_kept(s, b, h, (int64_t)qt * tile + i, (int64_t)kt * tile + j);
      dp = kept ? dp * inv_keep : 0.0f;
      S[e] = kept ? p * inv_keep : 0.0f;
    } else {
      S[e] = p;
    }
    dS[e] = p * (dp - D[i]) * a.scale;
  }
}

// dQ: grid (local query tiles, H, sequences); a block adds its query tile's
// terms over the key tiles from the diagonal down, dq in place.
__global__ void __launch_bounds__(EX_THREADS)
ex_dq_kernel(float *dq, const float *dout, const float *q, const float *k, const float *v,
             const float *lse, const float *dsum, ex_args a) {
  __shared__ float sh[2 * EX_SHTILE * EX_SHTILE];
  const ts_attn_shape &s = a.s;
  const int tile = s.tile, dh = s.dh;
  const int nq = a.qb - a.qa, lq = nq - 1 - (int)blockIdx.x, qt = a.qa + lq;
  const int h = blockIdx.y, b = a.b0 + blockIdx.z, kvh = h / a.G;
  const size_t blk = ((size_t)blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  float *S = ex_buf(sh, a, (size_t)2 * tile * tile, 0, blk), *dS = S + (size_t)tile * tile;
  const size_t qrow = ((size_t)b * s.Tq + (size_t)lq * tile) * s.ldq + (size_t)h * dh;
  const float *Q = q + qrow;
  float *dQ = dq + qrow;
  const float *dO = dout + ((size_t)b * s.Tq + (size_t)lq * tile) * s.ldo + (size_t)h * dh;
  const float *L = lse + ((size_t)b * s.H + h) * s.Tq + (size_t)lq * tile;
  const float *D = dsum + ((size_t)b * s.H + h) * s.Tq + (size_t)lq * tile;
  const size_t khead = (size_t)b * s.Tk * s.ldkv + (size_t)kvh * dh;
  if (!s.dq_acc)
    for (int e = EX_TID; e < tile * dh; e += EX_NT) dQ[(size_t)(e / dh) * s.ldq + e % dh] = 0.0f;
  for (int kt = qt < a.kb - 1 ? qt : a.kb - 1; kt >= a.ka; kt--) {
    const float *K = k + khead + (size_t)(kt - a.ka) * tile * s.ldkv;
    const float *V = v + khead + (size_t)(kt - a.ka) * tile * s.ldkv;
    ex_tile_grads(S, dS, Q, dO, K, V, L, D, a, b, h, qt, kt);
    __syncthreads();
    for (int e = EX_TID; e < tile * dh; e += EX_NT) { // dQ += dS · K
      const int i = e / dh, c = e % dh;
      float t = 0.0f;
      for (int j = 0; j < tile; j++) t = fmaf(dS[(size_t)i * tile + j], K[(size_t)j * s.ldkv + c], t);
      float *d = dQ + (size_t)i * s.ldq + c;
      *d = fmaf(1.0f, t, *d);
    }
    __syncthreads();
  }
}

// dK/dV: grid (local key tiles, Hkv, sequences of this launch). The block's
// scratch: `levels` tree slots of 2·tile·dh floats ([dK | dV] of the tile),
// the group's leaf, then (tile > EX_SHTILE) the score tiles. Each element is
// one thread's for the whole walk, so its tree needs no synchronisation; the
// tree's shape (count, occupied levels) is the same in every thread.
__global__ void __launch_bounds__(EX_THREADS)
ex_dkv_kernel(float *dk, float *dv, const float *dout, const float *q, const float *k,
              const float *v, const float *lse, const float *dsum, ex_args a) {
  __shared__ float sh[2 * EX_SHTILE * EX_SHTILE];
  const ts_attn_shape &s = a.s;
  const int tile = s.tile, dh = s.dh;
  const int kt = a.ka + (int)blockIdx.x, j = blockIdx.y, b = a.b0 + blockIdx.z;
  const size_t ne = (size_t)2 * tile * dh; // elements: [dK | dV]
  const size_t blk = ((size_t)blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  const size_t per = ne * (a.levels + 1) + (tile > EX_SHTILE ? (size_t)2 * tile * tile : 0);
  float *slot = a.scr + blk * per, *leaf = slot + ne * a.levels;
  float *S = tile > EX_SHTILE ? leaf + ne : sh, *dS = S + (size_t)tile * tile;
  const size_t rowk = (size_t)b * s.Tk * s.ldkv + (size_t)j * dh + (size_t)(kt - a.ka) * tile * s.ldkv;
  const float *K = k + rowk, *V = v + rowk;
  if (kt >= a.qb) { // no local query sees this key tile: -0.0, the identity of addition
    for (int e = EX_TID; e < tile * dh; e += EX_NT) {
      const size_t x = (size_t)(e / dh) * s.ldkv + e % dh;
      dk[rowk + x] = -0.0f;
      dv[rowk + x] = -0.0f;
    }
    return;
  }
  const int first = kt > a.qa ? kt : a.qa;
  uint64_t count = (uint64_t)(first - a.qa), have = 0; // the tree: positions, occupied levels
  for (int qt = first; qt < a.qb; qt++) {
    const int lq = qt - a.qa;
    for (int g = 0; g < a.G; g++) {
      const int h = j * a.G + g;
      const float *Q = q + ((size_t)b * s.Tq + (size_t)lq * tile) * s.ldq + (size_t)h * dh;
      const float *dO = dout + ((size_t)b * s.Tq + (size_t)lq * tile) * s.ldo + (size_t)h * dh;
      const float *L = lse + ((size_t)b * s.H + h) * s.Tq + (size_t)lq * tile;
      const float *D = dsum + ((size_t)b * s.H + h) * s.Tq + (size_t)lq * tile;
      ex_tile_grads(S, dS, Q, dO, K, V, L, D, a, b, h, qt, kt);
      __syncthreads();
      for (size_t e = EX_TID; e < ne; e += EX_NT) {
        const int w = e >= (size_t)tile * dh; // 0: dK = dSᵀ·Q, 1: dV = P~ᵀ·dO
        const int x = (int)(e - (size_t)w * tile * dh), jj = x / dh, c = x % dh;
        const float *P = w ? S : dS, *R = w ? dO : Q;
        const int ld = w ? s.ldo : s.ldq;
        float t = 0.0f;
        for (int i = 0; i < tile; i++) t = fmaf(P[(size_t)i * tile + jj], R[(size_t)i * ld + c], t);
        t = 1.0f * t; // ts_tile_mm's overwrite form, alpha 1
        if (a.G > 1) { // the group's heads in head order
          if (g == 0) leaf[e] = t;
          else leaf[e] = leaf[e] + t;
          if (g < a.G - 1) continue;
          t = leaf[e];
        }
        // ts_tree_push: merge with the complete subtrees to the left (empty
        // levels, positions before the first, are skipped), left + right
        float carry = t;
        int lv = 0;
        for (; (count >> lv) & 1u; lv++)
          if ((have >> lv) & 1u) carry = slot[lv * ne + e] + carry;
        slot[lv * ne + e] = carry;
      }
      __syncthreads();
    }
    int lv = 0;
    for (; (count >> lv) & 1u; lv++) have &= ~((uint64_t)1 << lv);
    have |= (uint64_t)1 << lv;
    count++;
  }
  for (size_t e = EX_TID; e < ne; e += EX_NT) { // ts_tree_finish: lowest level up, higher ones left
    float acc = 0.0f;
    int any = 0;
    for (int lv = 0; lv < a.levels; lv++) {
      if (!((have >> lv) & 1u)) continue;
      acc = any ? slot[lv * ne + e] + acc : slot[lv * ne + e];
      any = 1;
    }
    const int w = e >= (size_t)tile * dh;
    const int x = (int)(e - (size_t)w * tile * dh);
    (w ? dv : dk)[rowk + (size_t)(x / dh) * s.ldkv + x % dh] = acc;
  }
}

static ex_args ex_make_args(const ts_attn_shape *shape) {
  ex_args a;
  memset(&a, 0, sizeof a);
  a.s = ts_attn_resolved(shape);
  a.scale = 1.0f / sqrtf((float)a.s.dh);
  a.G = a.s.H / a.s.Hkv;
  a.qa = a.s.q0 / a.s.tile;
  a.qb = a.qa + a.s.Tq / a.s.tile;
  a.ka = a.s.k0 / a.s.tile;
  a.kb = a.ka + a.s.Tk / a.s.tile;
  a.first = a.last = 1;
  return a;
}

// Sequences per launch so that the blocks' scratch (per_seq bytes a sequence)
// stays near 256 MiB: at least one. Emulated, 256 KiB, so that the tests'
// small shapes run the split into several launches too.
static int ex_seqs_per_launch(size_t per_seq, int B) {
#ifdef TS_CUDA_EMULATE
  const size_t cap = (size_t)256 << 10;
#else
  const size_t cap = (size_t)256 << 20;
#endif
  size_t n = per_seq ? cap / per_seq : (size_t)B;
  if (n < 1) n = 1;
  return n < (size_t)B ? (int)n : B;
}

static void ex_forward(float *out, float *lse, float *lsum, const float *q, const float *k,
                       const float *v, ex_args a, const char *what) {
  const ts_attn_shape &s = a.s;
  const int nq = a.qb - a.qa, tile = s.tile;
  if (s.B <= 0 || nq <= 0 || s.H <= 0) return ts_cuda_finish(what);
  const size_t per = tile > EX_SHTILE ? ((size_t)tile * tile + 4 * tile) * sizeof(float) : 0;
  const int nb = ex_seqs_per_launch(per * nq * s.H, s.B);
  if (per) a.scr = (float *)ts_cuda_scratch(per * nq * s.H * nb);
  for (int b0 = 0; b0 < s.B; b0 += nb) {
    a.b0 = b0;
    dim3 grid(nq, s.H, b0 + nb <= s.B ? nb : s.B - b0);
    ts_launch(ex_forward_kernel, grid, EX_THREADS, 0, out, lse, lsum, q, k, v, a);
  }
  ts_cuda_finish(what);
}

static void ex_backward(float *dq, float *dk, float *dv, float *dsum, const float *dout,
                        const float *q, const float *k, const float *v, const float *out,
                        const float *lse, ex_args a) {
  const ts_attn_shape &s = a.s;
  const int nq = a.qb - a.qa, nk = a.kb - a.ka, tile = s.tile;
  const bool rows = s.B > 0 && nq > 0 && s.H > 0, keys = s.B > 0 && nk > 0 && s.Hkv > 0;
  // Scratch per block: dQ's score tiles when they do not fit in shared
  // memory; dK/dV's tree levels, leaf and those tiles. One request for both,
  // so that the buffer is not reallocated under the dQ launches.
  a.levels = 1;
  while (((int64_t)1 << a.levels) <= nq) a.levels++;
  const size_t tiles = tile > EX_SHTILE ? (size_t)2 * tile * tile * sizeof(float) : 0;
  const size_t per_kv = ((size_t)2 * tile * s.dh * (a.levels + 1)) * sizeof(float) + tiles;
  const int nbq = ex_seqs_per_launch(tiles * nq * s.H, s.B);
  const int nbk = ex_seqs_per_launch(per_kv * nk * s.Hkv, s.B);
  size_t need = rows ? tiles * nq * s.H * nbq : 0;
  if (keys && per_kv * nk * s.Hkv * nbk > need) need = per_kv * nk * s.Hkv * nbk;
  a.scr = need ? (float *)ts_cuda_scratch(need) : NULL;
  if (rows) {
    const int64_t n = (int64_t)s.B * s.Tq * s.H;
    ts_launch(ex_dsum_kernel, ts_blocks(n, 256), 256, 0, dsum, dout, out, a);
    for (int b0 = 0; b0 < s.B; b0 += nbq) {
      a.b0 = b0;
      dim3 grid(nq, s.H, b0 + nbq <= s.B ? nbq : s.B - b0);
      ts_launch(ex_dq_kernel, grid, EX_THREADS, 0, dq, dout, q, k, v, lse, dsum, a);
    }
  }
  if (keys)
    for (int b0 = 0; b0 < s.B; b0 += nbk) {
      a.b0 = b0;
      dim3 grid(nk, s.Hkv, b0 + nbk <= s.B ? nbk : s.B - b0);
      ts_launch(ex_dkv_kernel, grid, EX_THREADS, 0, dk, dv, dout, q, k, v, lse, dsum, a);
    }
  ts_cuda_finish("attention_backward");
}

// ---- entry points ----------------------------------------------------------------------

// Lanes per row for head dimension dh; above ATTN_MAX_DH the accumulators would
// not fit in registers: the run stops with a message naming the operation.
static int attn_split(int dh, const char *what) {
  if (dh >= 1 && dh <= 32) return 1;
  if (dh >= 1 && dh <= 64) return 2;
  if (dh >= 1 && dh <= ATTN_MAX_DH) return 4;
  char msg[160];
  snprintf(msg, sizeof msg, "%s: head dimension %d unsupported on the GPU (1..%d)", what, dh,
           ATTN_MAX_DH);
  ts_cuda_check(cudaErrorInvalidValue, msg); // does not return
  return 0;
}

static attn_args attn_make_args(const ts_attn_shape *shape) {
  attn_args a;
  a.s = ts_attn_resolved(shape);
  a.scale = 1.0f / sqrtf((float)a.s.dh);
  a.G = a.s.H / a.s.Hkv;
  a.bf16 = ts_cuda_bf16();
  a.first = a.last = 1;
  return a;
}

// Launches the instantiation for `split` lanes per row (1, 2 or 4) with
// ATTN_ROWS rows per block; the three share one signature.
template <typename K, typename... A>
static void launch_split(int split, K k1, K k2, K k4, dim3 grid, A... args) {
  ts_launch(split == 1 ? k1 : split == 2 ? k2 : k4, grid, ATTN_ROWS * split, 0, args...);
}

static void forward_walk(float *out, float *lse, float *lsum, const float *q, const float *k,
                         const float *v, const attn_args &a, const char *what) {
  const int split = attn_split(a.s.dh, what);
  if (a.s.B > 0 && a.s.Tq > 0 && a.s.H > 0) {
    dim3 grid(ts_blocks(a.s.Tq, ATTN_ROWS), a.s.H, a.s.B);
    launch_split(split, attn_forward_kernel<1>, attn_forward_kernel<2>, attn_forward_kernel<4>,
                 grid, out, lse, lsum, q, k, v, a);
  }
  ts_cuda_finish(what);
}

void cuda_attention_forward(ts_ws *ws, float *out, float *lse, const float *q, const float *k,
                            const float *v, const ts_attn_shape *shape) {
  (void)ws; // no host scratch on the GPU
  if (ts_cuda_exact())
    return ex_forward(out, lse, NULL, q, k, v, ex_make_args(shape), "attention_forward");
  forward_walk(out, lse, NULL, q, k, v, attn_make_args(shape), "attention_forward");
}

void cuda_attention_forward_block(ts_ws *ws, float *acc, float *m, float *l, const float *q,
                                  const float *k, const float *v, const ts_attn_shape *shape,
                                  int first, int last) {
  (void)ws;
  if (ts_cuda_exact()) {
    ex_args e = ex_make_args(shape);
    e.first = first;
    e.last = last;
    return ex_forward(acc, m, l, q, k, v, e, "attention_forward_block");
  }
  attn_args a = attn_make_args(shape);
  a.first = first;
  a.last = last;
  forward_walk(acc, m, l, q, k, v, a, "attention_forward_block");
}

int cuda_attention_backward(ts_ws *ws, float *dq, float *dk, float *dv, float *dsum,
                            const float *dout, const float *q, const float *k, const float *v,
                            const float *out, const float *lse, const ts_attn_shape *shape) {
  (void)ws;
  if (ts_cuda_exact()) {
    ex_backward(dq, dk, dv, dsum, dout, q, k, v, out, lse, ex_make_args(shape));
    return TS_OK;
  }
  const attn_args a = attn_make_args(shape);
  const int split = attn_split(a.s.dh, "attention_backward");
  // dQ first: it writes the dsum that the dK/dV kernel reads (same stream).
  if (a.s.B > 0 && a.s.Tq > 0 && a.s.H > 0) {
    dim3 grid(ts_blocks(a.s.Tq, ATTN_ROWS), a.s.H, a.s.B);
    launch_split(split, attn_dq_kernel<1>, attn_dq_kernel<2>, attn_dq_kernel<4>,
                 grid, dq, dsum, dout, q, k, v, out, lse, a);
  }
  if (a.s.B > 0 && a.s.Tk > 0 && a.s.Hkv > 0) {
    dim3 grid(ts_blocks(a.s.Tk, ATTN_ROWS), a.s.Hkv, a.s.B);
    launch_split(split, attn_dkv_kernel<1>, attn_dkv_kernel<2>, attn_dkv_kernel<4>,
                 grid, dk, dv, dout, q, k, v, lse, dsum, a);
  }
  ts_cuda_finish("attention_backward");
  return TS_OK;
}
