// Residual multi-codebook vector quantisation (vq.h).
#include "vq.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "exact/rng.h"

void ts_vq_shape_of(const ts_config *cfg, ts_vq_shape *q) {
  q->r = cfg->compress_rank;
  q->G = cfg->vq_groups;
  q->R = cfg->vq_rounds;
  q->K = cfg->vq_codes;
  q->ng = q->G > 0 ? q->r / q->G : 0;
  q->gamma = cfg->vq_gamma;
  q->commit = cfg->vq_commit;
  q->sync = cfg->vq_sync_codes;
  q->units = cfg->vq_stream_microbatches > 0 ? cfg->vq_stream_microbatches : 1;
  q->every = cfg->vq_stream_every > 0 ? cfg->vq_stream_every : 1;
}

static uint64_t units_of(const ts_vq_shape *q) { return q->units > 0 ? (uint64_t)q->units : 1; }
static uint64_t every_of(const ts_vq_shape *q) { return q->every > 0 ? (uint64_t)q->every : 1; }

// The stream events of units (lo, hi]: n in [*n0, *n1], none when *n1 < *n0.
static void events_in(const ts_vq_shape *q, uint64_t lo, uint64_t hi, uint64_t *n0, uint64_t *n1) {
  *n0 = lo / every_of(q) + 1;
  *n1 = hi / every_of(q);
}

// Code c = (j·ng + g)·K + k: round j, group g, code k; its G floats at c·G.
static inline const float *code_at(const ts_vq_shape *q, const float *e, int j, int g, int k) {
  return e + (((size_t)j * q->ng + (size_t)g) * q->K + (size_t)k) * q->G;
}

static int nearest(const ts_vq_shape *q, const float *e, int j, int g, const float *res) {
  int best = 0;
  float bd = FLT_MAX;
  for (int k = 0; k < q->K; k++) {
    const float *c = code_at(q, e, j, g, k);
    float d = 0.0f;
    for (int t = 0; t < q->G; t++) {
      float diff = res[t] - c[t];
      d = d + diff * diff;
    }
    if (d < bd) bd = d, best = k;
  }
  return best;
}

void ts_vq_encode(const ts_vq_shape *q, const float *e, const float *z, int64_t n,
                  uint8_t *codes, float *zq) {
  const size_t rb = ts_vq_row_bytes(q);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) {
    float res[64], acc[64]; // G <= r <= d; groups wider than 64 are refused by the config
    for (int g = 0; g < q->ng; g++) {
      const float *zg = z + (size_t)i * q->r + (size_t)g * q->G;
      for (int t = 0; t < q->G; t++) res[t] = zg[t], acc[t] = 0.0f;
      for (int j = 0; j < q->R; j++) {
        int k = nearest(q, e, j, g, res);
        codes[(size_t)i * rb + (size_t)j * q->ng + g] = (uint8_t)k;
        const float *c = code_at(q, e, j, g, k);
        for (int t = 0; t < q->G; t++) res[t] = res[t] - c[t], acc[t] = acc[t] + c[t];
      }
      if (zq) memcpy(zq + (size_t)i * q->r + (size_t)g * q->G, acc, (size_t)q->G * sizeof(float));
    }
  }
}

void ts_vq_decode(const ts_vq_shape *q, const float *e, const uint8_t *codes, int64_t n, float *zq) {
  const size_t rb = ts_vq_row_bytes(q);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++)
    for (int g = 0; g < q->ng; g++) {
      float *out = zq + (size_t)i * q->r + (size_t)g * q->G;
      for (int t = 0; t < q->G; t++) out[t] = 0.0f;
      for (int j = 0; j < q->R; j++) {
        const float *c = code_at(q, e, j, g, codes[(size_t)i * rb + (size_t)j * q->ng + g]);
        for (int t = 0; t < q->G; t++) out[t] = out[t] + c[t];
      }
    }
}

void ts_vq_stats_leaf(const ts_vq_shape *q, const float *e, const float *z, const uint8_t *codes,
                      const int64_t *cand_row, int64_t li, int leaf, float *out) {
  const size_t nc = ts_vq_ncodes(q), rb = ts_vq_row_bytes(q);
  float *cnt = out, *sum = out + nc, *cand = sum + nc * q->G;
  memset(out, 0, ts_vq_stat_floats(q) * sizeof(float));
  const int64_t r0 = li * leaf, r1 = r0 + leaf;
  for (int64_t i = r0; i < r1; i++)
    for (int g = 0; g < q->ng; g++) {
      float res[64];
      memcpy(res, z + (size_t)i * q->r + (size_t)g * q->G, (size_t)q->G * sizeof(float));
      for (int j = 0; j < q->R; j++) {
        const int k = codes[(size_t)i * rb + (size_t)j * q->ng + g];
        const size_t c = ((size_t)j * q->ng + (size_t)g) * q->K + (size_t)k;
        cnt[c] = cnt[c] + 1.0f;
        for (int t = 0; t < q->G; t++) sum[c * q->G + t] = sum[c * q->G + t] + res[t];
        const float *ek = code_at(q, e, j, g, k);
        for (int t = 0; t < q->G; t++) res[t] = res[t] - ek[t];
      }
    }
  // candidates: the residual entering round j of the code's seeded row
  for (size_t c = 0; c < nc; c++) {
    const int64_t i = cand_row[c];
    if (i < r0 || i >= r1) continue;
    const int j = (int)(c / ((size_t)q->ng * q->K)), g = (int)(c / q->K % q->ng);
    float res[64];
    memcpy(res, z + (size_t)i * q->r + (size_t)g * q->G, (size_t)q->G * sizeof(float));
    for (int jj = 0; jj < j; jj++) {
      const float *ek = code_at(q, e, jj, g, codes[(size_t)i * rb + (size_t)jj * q->ng + g]);
      for (int t = 0; t < q->G; t++) res[t] = res[t] - ek[t];
    }
    memcpy(cand + c * q->G, res, (size_t)q->G * sizeof(float));
  }
}

void ts_vq_candidates(const ts_vq_shape *q, uint64_t seed, int boundary, uint64_t step,
                      int64_t ntok_global, int64_t g0, int64_t n, int64_t *cand_row) {
  const size_t nc = ts_vq_ncodes(q);
  for (size_t c = 0; c < nc; c++) {
    int64_t row = (int64_t)ts_rng_below(seed, TS_RNG_VQ, step,
                                        ((uint64_t)boundary << 32) | (uint64_t)c,
                                        (uint64_t)ntok_global);
    cand_row[c] = row >= g0 && row < g0 + n ? row - g0 : -1;
  }
}

void ts_vq_grad_encode(const ts_vq_shape *q, const float *e, const float *dz, int64_t n,
                       uint8_t *wire, float *u) {
  const int r = q->r;
  uint8_t *scales = wire + (size_t)n * ts_vq_row_bytes(q);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) {
    const float *g = dz + (size_t)i * r;
    float ss = 0.0f; // in order, one row per thread: the same bits on every layout
    for (int t = 0; t < r; t++) ss = ss + g[t] * g[t];
    const float s = sqrtf(ss / (float)r);
    float *ui = u + (size_t)i * r;
    for (int t = 0; t < r; t++) ui[t] = s > 0.0f ? g[t] / s : 0.0f;
    memcpy(scales + (size_t)i * sizeof(float), &s, sizeof(float)); // (unaligned in general)
  }
  ts_vq_encode(q, e, u, n, wire, NULL);
}

void ts_vq_grad_decode(const ts_vq_shape *q, const float *e, const uint8_t *wire, int64_t n,
                       float *dz) {
  const int r = q->r;
  const uint8_t *scales = wire + (size_t)n * ts_vq_row_bytes(q);
  ts_vq_decode(q, e, wire, n, dz);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) {
    float s;
    memcpy(&s, scales + (size_t)i * sizeof(float), sizeof(float));
    for (int t = 0; t < r; t++) dz[(size_t)i * r + t] = s * dz[(size_t)i * r + t];
  }
}

void ts_vq_init_scaled(const ts_vq_shape *q, uint64_t seed, int boundary, float std, float *count,
                       float *sum, float *codes, float *recv) {
  const size_t nc = ts_vq_ncodes(q), nf = nc * q->G;
  memset(count, 0, nc * sizeof(float));
  memset(sum, 0, nf * sizeof(float));
  for (size_t i = 0; i < nf; i++)
    codes[i] = std * ts_rng_normal(seed, TS_RNG_VQ, 0, ((uint64_t)boundary << 40) | i);
  memcpy(recv, codes, nf * sizeof(float));
}

void ts_vq_init(const ts_vq_shape *q, uint64_t seed, int boundary, float *count, float *sum,
                float *codes, float *recv) {
  ts_vq_init_scaled(q, seed, boundary, 0.02f, count, sum, codes, recv);
}

static void apply_events(const ts_vq_shape *q, uint64_t seed, int boundary, uint64_t lo,
                         uint64_t hi, const float *from, float *to);

void ts_vq_update(const ts_vq_shape *q, uint64_t seed, int boundary, uint64_t step, float *count,
                  float *sum, float *codes, float *recv, const float *stats) {
  const size_t nc = ts_vq_ncodes(q), per = (size_t)q->K;
  const uint64_t U = units_of(q);
  // the events inside the step, from the working codebook they copied
  apply_events(q, seed, boundary, (step - 1) * U, step * U - 1, codes, recv);
  const float *n = stats, *s = stats + nc, *cand = s + nc * q->G;
  const float gm = q->gamma, eps = 1e-5f;
  for (size_t c = 0; c < nc; c++) {
    count[c] = gm * count[c] + (1.0f - gm) * n[c];
    for (int t = 0; t < q->G; t++)
      sum[c * q->G + t] = gm * sum[c * q->G + t] + (1.0f - gm) * s[c * q->G + t];
  }
  for (size_t b = 0; b < nc; b += per) { // one codebook: K codes of round j, group g
    float tot = 0.0f;
    for (size_t k = 0; k < per; k++) tot = tot + count[b + k];
    for (size_t k = 0; k < per; k++) {
      const size_t c = b + k;
      const float sm = (count[c] + eps) / (tot + (float)q->K * eps) * tot;
      if (count[c] < 2.0f) { // dead: its candidate, with the EMA sum to match
        for (int t = 0; t < q->G; t++) {
          codes[c * q->G + t] = cand[c * q->G + t];
          sum[c * q->G + t] = cand[c * q->G + t] * sm;
        }
      } else {
        for (int t = 0; t < q->G; t++) codes[c * q->G + t] = sum[c * q->G + t] / sm;
      }
    }
  }
  // the event of the next step's first unit, from the new codebook (the
  // step unit's every event: ts_vq_stream(step) when every is 1)
  apply_events(q, seed, boundary, step * U - 1, step * U, codes, recv);
}

// The streamed codes of round j: a seeded partition of its K codes, taken in
// turn, sync codes a step: perm (K) is the order, fixed per boundary and
// round, and step t streams perm[(t·sync + i) mod K], i < sync. So every code
// reaches the receiver once every K/sync steps, and sync = K streams the
// whole codebook every step.
static void stream_order(const ts_vq_shape *q, uint64_t seed, int boundary, int j, int *perm) {
  for (int k = 0; k < q->K; k++) perm[k] = k;
  for (int k = q->K - 1; k > 0; k--) { // Fisher–Yates, seeded
    const int o = (int)ts_rng_below(seed, TS_RNG_VQ, 0,
                                    (1ull << 63) | ((uint64_t)boundary << 32) | ((uint64_t)j << 16) |
                                        (uint64_t)k,
                                    (uint64_t)k + 1);
    const int t = perm[k];
    perm[k] = perm[o];
    perm[o] = t;
  }
}

static int stream_code(const ts_vq_shape *q, const int *perm, uint64_t step, int i) {
  return perm[(step * (uint64_t)q->sync + (uint64_t)i) % (uint64_t)q->K];
}

int ts_vq_streamed_code(const ts_vq_shape *q, uint64_t seed, int boundary, uint64_t step, int j,
                        int i) {
  int perm[256];
  stream_order(q, seed, boundary, j, perm);
  return stream_code(q, perm, step, i);
}

// The floats of code k of round j, group g.
static size_t code_offset(const ts_vq_shape *q, int j, int g, int k) {
  return (((size_t)j * q->ng + (size_t)g) * q->K + (size_t)k) * q->G;
}

void ts_vq_stream(const ts_vq_shape *q, uint64_t seed, int boundary, uint64_t step,
                  const float *from, float *to) {
  int perm[256];
  for (int j = 0; j < q->R; j++) {
    stream_order(q, seed, boundary, j, perm);
    for (int i = 0; i < q->sync; i++) {
      const int k = stream_code(q, perm, step, i);
      for (int g = 0; g < q->ng; g++) {
        const size_t o = code_offset(q, j, g, k);
        memcpy(to + o, from + o, (size_t)q->G * sizeof(float));
      }
    }
  }
}

// Events n0..n1's codes, each round's then group's in order, between a
// codebook and a message (to_msg 1: book → msg) or between two codebooks
// (msg NULL: from → to).
static void move_events(const ts_vq_shape *q, uint64_t seed, int boundary, uint64_t n0,
                        uint64_t n1, const float *from, float *to, float *msg, int to_msg) {
  int perm[256];
  size_t n = 0;
  const size_t gb = (size_t)q->G * sizeof(float);
  for (uint64_t e = n0; e <= n1 && n0 <= n1; e++)
    for (int j = 0; j < q->R; j++) {
      stream_order(q, seed, boundary, j, perm);
      for (int i = 0; i < q->sync; i++) {
        const int k = stream_code(q, perm, e, i);
        for (int g = 0; g < q->ng; g++, n += (size_t)q->G) {
          const size_t o = code_offset(q, j, g, k);
          if (!msg) memcpy(to + o, from + o, gb);
          else if (to_msg) memcpy(msg + n, from + o, gb);
          else memcpy(to + o, msg + n, gb);
        }
      }
    }
}

static void apply_events(const ts_vq_shape *q, uint64_t seed, int boundary, uint64_t lo,
                         uint64_t hi, const float *from, float *to) {
  uint64_t n0, n1;
  events_in(q, lo, hi, &n0, &n1);
  move_events(q, seed, boundary, n0, n1, from, to, NULL, 0);
}

const float *ts_vq_shared_at(const ts_vq_shape *q, uint64_t seed, int boundary, uint64_t step,
                             int64_t m, const float *recv, const float *codes, float *view) {
  const uint64_t lo = (step - 1) * units_of(q);
  uint64_t n0, n1;
  events_in(q, lo, lo + (uint64_t)m, &n0, &n1);
  if (m <= 0 || n1 < n0) return recv;
  memcpy(view, recv, ts_vq_ncodes(q) * (size_t)q->G * sizeof(float));
  move_events(q, seed, boundary, n0, n1, codes, view, NULL, 0);
  return view;
}

size_t ts_vq_stream_events(const ts_vq_shape *q, uint64_t step) {
  uint64_t n0, n1;
  events_in(q, step * units_of(q) - 1, (step + 1) * units_of(q) - 1, &n0, &n1);
  return n1 < n0 ? 0 : (size_t)(n1 - n0 + 1);
}

void ts_vq_stream_pack(const ts_vq_shape *q, uint64_t seed, int boundary, uint64_t step,
                       const float *codes, float *msg) {
  uint64_t n0, n1;
  events_in(q, step * units_of(q) - 1, (step + 1) * units_of(q) - 1, &n0, &n1);
  move_events(q, seed, boundary, n0, n1, codes, NULL, msg, 1);
}

void ts_vq_stream_catch_up(const ts_vq_shape *q, uint64_t seed, int boundary, uint64_t step,
                           const float *codes, float *recv) {
  apply_events(q, seed, boundary, (step - 1) * units_of(q), step * units_of(q) - 1, codes, recv);
}

void ts_vq_stream_unpack(const ts_vq_shape *q, uint64_t seed, int boundary, uint64_t step,
                         const float *msg, float *recv, float *codes) {
  const uint64_t U = units_of(q);
  uint64_t n0, n1;
  events_in(q, step * U - 1, (step + 1) * U - 1, &n0, &n1);
  if (n1 < n0) return;
  const size_t per = ts_vq_stream_floats(q);
  size_t off = 0;
  for (uint64_t e = n0; e <= n1; e++, off += per) // the event of unit step·U: the shared copy
    move_events(q, seed, boundary, e, e, NULL, e * every_of(q) == step * U ? recv : codes,
                (float *)(msg + off), 0);
}
