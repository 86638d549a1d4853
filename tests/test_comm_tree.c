// The schedule of the exact reductions over ranks (src/comm/comm_tree.h), without
// MPI: every rank's buffer lives in this process and the rounds are run on
// all of them at once, each rank sending what it holds before the round and
// adding with ts_tree_add (ours + theirs) as comm_mpi.c does. The results are
// compared bit for bit (memcmp) with ts_tree_sum over the ranks' values (the
// canonical tree, padded with empty leaves past the last rank), on data
// where other associations round differently, for groups of any size; a
// schedule that pairs the ranks otherwise is shown to fail that comparison.
// Alongside the floats, the run of tree positions each chunk copy sums is
// tracked, so that every addition is seen to join two sibling subtrees of
// the canonical tree and every position taken over to have an empty sibling.
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "testdata.h"

#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/comm_tree.h"
#include "exact/tree.h"

typedef int (*next_fn)(int P, int r, int k, int *at, ts_comm_swap *q);

// Bit reversal of r in log2 P bits (P a power of two).
static int reversed(int P, int r) {
  int v = 0;
  for (int b = 1; b < P; b <<= 1) v = (v << 1) | ((r & b) != 0);
  return v;
}

// The same rounds on bit-reversed rank numbers: a valid exchange (partners
// and chunks pair up) that combines the ranks at distance P/2 first.
static int reversed_next(int P, int r, int k, int *at, ts_comm_swap *q) {
  if (!ts_comm_tree_next(P, reversed(P, r), k, at, q)) return 0;
  q->partner = reversed(P, q->partner);
  return 1;
}

// The tree positions [lo, lo + 2^level) a chunk copy is the sum of (those
// past the last rank are empty).
typedef struct {
  int lo, level;
} span;

// Whether a + b is a node of the canonical tree: two runs of one level,
// siblings (either order: the addition is commutative).
static int siblings(span a, span b) {
  return a.level == b.level && (a.lo ^ (1 << a.level)) == b.lo && a.lo % (1 << a.level) == 0;
}

// The world: P ranks' buffers (P × n floats), the spans of their chunk copies
// (P × P), and per rank the floats sent plus received.
typedef struct {
  int P;
  size_t n;
  float *buf;
  span *spans;
  uint64_t *moved;
} world;

static world world_new(int P, size_t n, uint64_t seed) {
  world w = {P, n, NULL, NULL, NULL};
  w.buf = malloc((size_t)P * n * sizeof(float) + 1);
  w.spans = malloc((size_t)P * P * sizeof(span));
  w.moved = calloc((size_t)P, sizeof(uint64_t));
  assert_non_null(w.buf);
  assert_non_null(w.spans);
  assert_non_null(w.moved);
  for (int r = 0; r < P; r++) {
    fill_wide(w.buf + (size_t)r * n, n, seed * 1000003u + (uint64_t)r);
    for (int c = 0; c < P; c++) w.spans[r * P + c] = (span){r, 0};
  }
  return w;
}

static void world_free(world *w) {
  free(w->buf);
  free(w->spans);
  free(w->moved);
}

#define MAX_SWAPS 64

// Rank r's swaps in round k (at most MAX_SWAPS).
static int swaps_of(next_fn next, int P, int r, int k, ts_comm_swap *out) {
  int n = 0, at = 0;
  while (n < MAX_SWAPS && next(P, r, k, &at, &out[n])) n++;
  assert_false(next(P, r, k, &at, &(ts_comm_swap){0}));
  return n;
}

// Rounds k0 .. k1-1 of `next` on every rank. Each swap's partner must have
// the mirror swap (sending what it receives, same stride and kind), and no
// rank may receive in a round chunks it sends in it. Returns whether every
// addition joined two siblings and every position taken over (a reduce
// round's copy left at its level) had an empty sibling run.
static int run_rounds(world *w, next_fn next, int k0, int k1) {
  const int P = w->P;
  const size_t n = w->n;
  const int L = ts_comm_tree_levels(P);
  int tree = 1;
  ts_comm_swap *sw = malloc((size_t)P * MAX_SWAPS * sizeof *sw);
  int *nsw = malloc((size_t)P * sizeof(int));
  float *before = malloc((size_t)P * n * sizeof(float) + 1);
  span *sbefore = malloc((size_t)P * P * sizeof(span));
  assert_non_null(sw);
  assert_non_null(nsw);
  assert_non_null(before);
  assert_non_null(sbefore);
  for (int k = k0; k < k1; k++) {
    for (int r = 0; r < P; r++) nsw[r] = swaps_of(next, P, r, k, sw + (size_t)r * MAX_SWAPS);
    // every rank sends what it held before the round
    memcpy(before, w->buf, (size_t)P * n * sizeof(float));
    memcpy(sbefore, w->spans, (size_t)P * P * sizeof(span));
    for (int r = 0; r < P; r++) {
      int *sent = calloc((size_t)P, sizeof(int)), *got = calloc((size_t)P, sizeof(int));
      assert_non_null(sent);
      assert_non_null(got);
      for (int i = 0; i < nsw[r]; i++) {
        const ts_comm_swap q = sw[(size_t)r * MAX_SWAPS + i];
        assert_true(q.partner >= 0 && q.partner < P && q.partner != r);
        int mirrors = 0;
        for (int j = 0; j < nsw[q.partner]; j++) {
          const ts_comm_swap t = sw[(size_t)q.partner * MAX_SWAPS + j];
          mirrors += t.partner == r && t.stride == q.stride && t.add == q.add &&
                     t.send == q.recv && t.recv == q.send;
        }
        assert_int_equal(mirrors, 1);
        for (int c = q.send; c < P; c += q.stride) sent[c]++;
        for (int c = q.recv; c < P; c += q.stride) {
          size_t off, len;
          ts_comm_chunk(n, P, c, &off, &len);
          // the partner's copy as it was before the round
          const float *in = before + (size_t)q.partner * n + off;
          float *mine = w->buf + (size_t)r * n + off;
          span *s = &w->spans[r * P + c];
          const span theirs = sbefore[q.partner * P + c];
          if (q.add) {
            ts_tree_add(mine, in, len);
            tree &= siblings(*s, theirs);
            s->lo = s->lo < theirs.lo ? s->lo : theirs.lo;
            s->level++;
          } else {
            memcpy(mine, in, len * sizeof(float));
            *s = theirs;
          }
          got[c]++;
          w->moved[r] += len;
        }
        for (int c = q.send; c < P; c += q.stride) {
          size_t off, len;
          ts_comm_chunk(n, P, c, &off, &len);
          w->moved[r] += len;
        }
      }
      for (int c = 0; c < P; c++) assert_false(sent[c] && got[c]);
      for (int c = 0; c < P; c++) assert_true(got[c] <= 1);
      free(sent);
      free(got);
    }
    // a reduce round: the copies of the chunks a rank keeps that stayed at
    // this level are positions taken over, whose sibling run must be empty
    if (k < L)
      for (int r = 0; r < P; r++)
        for (int c = 0; c < P; c++) {
          span *s = &w->spans[r * P + c];
          // the position of r's run that stands for chunk c after the round
          const int d = 1 << k, v = (r & ~(2 * d - 1)) | (c % (2 * d));
          if (s->level == k && ts_comm_tree_holder(P, v, k + 1) == r) {
            tree &= (s->lo ^ d) >= P;
            s->lo &= ~d;
            s->level++;
          }
        }
  }
  free(sw);
  free(nsw);
  free(before);
  free(sbefore);
  return tree;
}

// want[i] = the canonical tree over ranks of element i (ts_tree_sum).
static void canonical(float *want, const world *w, const float *inputs) {
  float *col = malloc((size_t)w->P * sizeof(float));
  assert_non_null(col);
  for (size_t i = 0; i < w->n; i++) {
    for (int r = 0; r < w->P; r++) col[r] = inputs[(size_t)r * w->n + i];
    want[i] = ts_tree_sum(col, (size_t)w->P);
  }
  free(col);
}

// Groups of every kind: powers of two, one past and one short of them, and
// sizes whose last ranks play many positions.
static const int groups[] = {2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 16, 17, 24, 32, 33};
#define NGROUPS (sizeof groups / sizeof groups[0])

// ---- tests ------------------------------------------------------------------------

static void expect_swap(ts_comm_swap q, int partner, int stride, int send, int recv, int add) {
  assert_int_equal(q.partner, partner);
  assert_int_equal(q.stride, stride);
  assert_int_equal(q.send, send);
  assert_int_equal(q.recv, recv);
  assert_int_equal(q.add, add);
}

// The swaps of comm_tree.h's examples, their number, and who plays which
// position.
static void test_rounds_by_hand(void **state) {
  (void)state;
  ts_comm_swap q[MAX_SWAPS];
  assert_int_equal(ts_comm_tree_nrounds(4, 0), 2);
  assert_int_equal(ts_comm_tree_nrounds(4, 1), 4);
  const int want4[4][5] = {{0, 2, 0, 1, 1}, {3, 4, 3, 1, 1}, {3, 4, 1, 3, 0}, {0, 2, 1, 0, 0}};
  for (int k = 0; k < 4; k++) {
    assert_int_equal(swaps_of(ts_comm_tree_next, 4, 1, k, q), 1);
    expect_swap(q[0], want4[k][0], want4[k][1], want4[k][2], want4[k][3], want4[k][4]);
  }
  assert_int_equal(ts_comm_tree_nrounds(1, 1), 0);
  assert_int_equal(ts_comm_tree_nrounds(2, 1), 2);
  assert_int_equal(ts_comm_tree_nrounds(64, 0), 6);
  assert_int_equal(ts_comm_tree_levels(3), 2);
  // P = 3: rank 2 takes the empty position 3 in round 0, then swaps with
  // rank 0 (as position 2) and rank 1 (as position 3)
  assert_int_equal(swaps_of(ts_comm_tree_next, 3, 2, 0, q), 0);
  assert_int_equal(swaps_of(ts_comm_tree_next, 3, 2, 1, q), 2);
  expect_swap(q[0], 0, 4, 0, 2, 1);
  expect_swap(q[1], 1, 4, 1, 3, 1);
  assert_int_equal(swaps_of(ts_comm_tree_next, 3, 1, 1, q), 1);
  expect_swap(q[0], 2, 4, 3, 1, 1);
  assert_int_equal(swaps_of(ts_comm_tree_next, 3, 2, 2, q), 2); // the gather's mirror
  expect_swap(q[0], 0, 4, 2, 0, 0);
  expect_swap(q[1], 1, 4, 3, 1, 0);
  // P = 5: positions 5, 6, 7 are rank 4's from levels 1, 2, 2
  assert_int_equal(ts_comm_tree_holder(5, 5, 0), -1);
  assert_int_equal(ts_comm_tree_holder(5, 5, 1), 4);
  assert_int_equal(ts_comm_tree_holder(5, 6, 1), -1);
  assert_int_equal(ts_comm_tree_holder(5, 6, 2), 4);
  assert_int_equal(ts_comm_tree_holder(5, 7, 1), -1);
  assert_int_equal(ts_comm_tree_holder(5, 7, 2), 4);
  assert_int_equal(ts_comm_tree_holder(5, 3, 0), 3);
  assert_int_equal(swaps_of(ts_comm_tree_next, 5, 4, 2, q), 4); // with ranks 0, 1, 2, 3
  for (int i = 0; i < 4; i++) assert_int_equal(q[i].partner, i);
  for (int r = 0; r < 4; r++) assert_int_equal(swaps_of(ts_comm_tree_next, 5, r, 2, q), 1);
}

// Groups of 2 to 33 ranks (powers of two and not), n from fewer floats than
// ranks to uneven chunks: the reduce-scatter leaves rank r chunk r, and the
// all-reduce every rank all, equal bit for bit to ts_tree_sum over the ranks;
// every addition is a node of the tree; the floats moved are
// ts_comm_tree_bytes.
static void test_schedule_sums_are_the_canonical_tree(void **state) {
  (void)state;
  for (size_t g = 0; g < NGROUPS; g++) {
    const int P = groups[g], L = ts_comm_tree_levels(P);
    const size_t sizes[] = {1, 3, (size_t)P - 1, (size_t)P, (size_t)P + 1, 7, 1000, 4099};
    size_t differ_from_naive = 0, total = 0;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
      const size_t n = sizes[s];
      world w = world_new(P, n, 17 + s);
      float *inputs = malloc((size_t)P * n * sizeof(float)), *want = malloc(n * sizeof(float));
      assert_non_null(inputs);
      assert_non_null(want);
      memcpy(inputs, w.buf, (size_t)P * n * sizeof(float));
      canonical(want, &w, inputs);

      assert_true(run_rounds(&w, ts_comm_tree_next, 0, L));
      for (int r = 0; r < P; r++) {
        size_t off, len;
        ts_comm_chunk(n, P, r, &off, &len);
        assert_memory_equal(w.buf + (size_t)r * n + off, want + off, len * sizeof(float));
        assert_int_equal(w.spans[r * P + r].lo, 0);
        assert_int_equal(w.spans[r * P + r].level, L);
        assert_int_equal(w.moved[r] * sizeof(float), ts_comm_tree_bytes(n, P, r));
      }
      assert_true(run_rounds(&w, ts_comm_tree_next, L, ts_comm_tree_nrounds(P, 1)));
      for (int r = 0; r < P; r++) {
        assert_memory_equal(w.buf + (size_t)r * n, want, n * sizeof(float));
        for (int c = 0; c < P; c++) {
          assert_int_equal(w.spans[r * P + c].lo, 0);
          assert_int_equal(w.spans[r * P + c].level, L);
        }
        assert_int_equal(w.moved[r] * sizeof(float), 2 * ts_comm_tree_bytes(n, P, r));
      }
      // the data tells the association apart: rank order left to right
      // rounds differently (for P = 4 in about one sum in six)
      for (size_t i = 0; i < n; i++) {
        float naive = inputs[i];
        for (int r = 1; r < P; r++) naive = naive + inputs[(size_t)r * n + i];
        differ_from_naive += memcmp(&naive, &want[i], sizeof naive) != 0;
      }
      total += n;
      free(inputs);
      free(want);
      world_free(&w);
    }
    if (P >= 4) assert_true(differ_from_naive > total / 10);
  }
}

// Pairing the ranks at distance P/2 first (the same rounds on bit-reversed
// rank numbers) moves the same bytes but builds another tree: the additions
// are not its nodes and many sums differ (for P = 4 about one in four), so
// the memcmp above can fail.
static void test_other_pairings_give_other_bits(void **state) {
  (void)state;
  for (int P = 4; P <= 32; P *= 2) { // powers of two: with 2 ranks there is one tree
    const size_t n = 4099;
    world w = world_new(P, n, 5);
    float *want = malloc(n * sizeof(float));
    assert_non_null(want);
    canonical(want, &w, w.buf);
    assert_false(run_rounds(&w, reversed_next, 0, ts_comm_tree_nrounds(P, 1)));
    size_t differ = 0;
    for (int r = 0; r < P; r++) {
      assert_int_equal(w.moved[r] * sizeof(float), 2 * ts_comm_tree_bytes(n, P, reversed(P, r)));
      for (size_t i = 0; i < n; i++)
        differ += memcmp(&w.buf[(size_t)r * n + i], &want[i], sizeof(float)) != 0;
    }
    assert_true(differ > (size_t)P * n / 8);
    free(want);
    world_free(&w);
  }
}

// ts_comm_tree_bytes against the chunks written out. P a power of two: per
// distance d = 1, 2, 4, ... < P, those = r or r xor d (mod 2d), and the plain
// formula 4n(P-1)/P each way when P divides n. Any P: never less than the
// chunks a rank must receive (all but its own) and, with equal chunks, the
// mean over the ranks is that same bandwidth-optimal 8n(P-1)/P bytes, the
// busiest rank (the one that plays the most positions) at most 1.25 times it
// (P = 3 and 5; 1.08 at 33, 1.01 at 48).
static void test_bytes_for_any_group(void **state) {
  (void)state;
  for (int P = 1; P <= 40; P++)
    for (size_t n = 0; n <= 120; n++) {
      uint64_t sum = 0, most = 0;
      for (int r = 0; r < P; r++) {
        const uint64_t bytes = ts_comm_tree_bytes(n, P, r);
        sum += bytes;
        most = bytes > most ? bytes : most;
        if ((P & (P - 1)) == 0) {
          uint64_t want = 0;
          for (int d = 1; d < P; d <<= 1)
            for (int c = 0; c < P; c++) {
              size_t off, len;
              ts_comm_chunk(n, P, c, &off, &len);
              int m = c % (2 * d);
              if (m == r % (2 * d) || m == (r ^ d) % (2 * d)) want += 4 * len;
            }
          assert_int_equal(bytes, want);
        }
        size_t off, len;
        ts_comm_chunk(n, P, r, &off, &len);
        if (P > 1) assert_true(bytes >= 4 * (n - len));
      }
      if (n % (size_t)P == 0) {
        const uint64_t optimal = 8 * n * (size_t)(P - 1) / (size_t)P;
        assert_int_equal(sum, (uint64_t)P * optimal);
        assert_true(4 * most <= 5 * optimal);
        if ((P & (P - 1)) == 0) assert_int_equal(most, optimal);
      }
    }
}

// The staging the communicators reserve holds every swap's message (MPI) and,
// when P is not a power of two, a round's receives side by side (NCCL
// reserves n then; half the chunks, the largest swap, otherwise).
static void test_max_floats_holds_every_round(void **state) {
  (void)state;
  for (size_t g = 0; g < NGROUPS; g++) {
    const int P = groups[g];
    for (size_t n = 0; n <= 3 * (size_t)P + 1; n++) {
      size_t biggest = 0, biggest_round = 0;
      for (int r = 0; r < P; r++)
        for (int k = 0; k < ts_comm_tree_nrounds(P, 1); k++) {
          ts_comm_swap q;
          size_t round = 0;
          for (int at = 0; ts_comm_tree_next(P, r, k, &at, &q);) {
            size_t s = ts_comm_tree_floats(n, P, q.send, q.stride);
            size_t v = ts_comm_tree_floats(n, P, q.recv, q.stride);
            if (s > biggest) biggest = s;
            if (v > biggest) biggest = v;
            round += v;
          }
          if (round > biggest_round) biggest_round = round;
        }
      assert_true(biggest <= ts_comm_tree_max_floats(n, P));
      if ((P & (P - 1)) == 0) {
        assert_int_equal(ts_comm_tree_max_floats(n, P), biggest);
        assert_int_equal(biggest_round, biggest);
      }
      assert_true(biggest_round <= n);
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rounds_by_hand),
      cmocka_unit_test(test_schedule_sums_are_the_canonical_tree),
      cmocka_unit_test(test_other_pairings_give_other_bits),
      cmocka_unit_test(test_bytes_for_any_group),
      cmocka_unit_test(test_max_floats_holds_every_round),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
