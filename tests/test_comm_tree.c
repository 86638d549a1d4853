// The schedule of the exact reductions over ranks (src/comm_tree.h), without
// MPI: every rank's buffer lives in this process and the rounds are run on
// all of them at once, each rank sending what it holds before the round and
// adding with ts_tree_add (ours + theirs) as comm_mpi.c does. The results are
// compared bit for bit (memcmp) with ts_tree_sum over the ranks' values, on
// data where other associations round differently; a schedule that pairs
// the ranks otherwise is shown to fail that comparison. Alongside the
// floats, the ranks each chunk copy sums are tracked, so that every addition
// is seen to join two sibling subtrees of the canonical tree.
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "testdata.h"

#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "comm_tree.h"
#include "tree.h"

typedef ts_comm_round (*round_fn)(int P, int r, int k);

static ts_comm_round real_round(int P, int r, int k) { return ts_comm_tree_round(P, r, k); }

// Bit reversal of r in log2 P bits.
static int reversed(int P, int r) {
  int v = 0;
  for (int b = 1; b < P; b <<= 1) v = (v << 1) | ((r & b) != 0);
  return v;
}

// The same rounds on bit-reversed rank numbers: a valid exchange (partners
// and chunks pair up) that combines the ranks at distance P/2 first.
static ts_comm_round reversed_round(int P, int r, int k) {
  ts_comm_round q = ts_comm_tree_round(P, reversed(P, r), k);
  q.partner = reversed(P, q.partner);
  return q;
}

typedef struct {
  int lo, hi; // the ranks [lo, hi) a chunk copy is the sum of
} span;

// Whether a + b is a node of the canonical tree: two adjacent runs of the
// same power-of-two size whose union is aligned to its size (either order:
// the addition is commutative).
static int siblings(span a, span b) {
  int size = a.hi - a.lo, lo = a.lo < b.lo ? a.lo : b.lo;
  return size > 0 && (size & (size - 1)) == 0 && b.hi - b.lo == size && lo % (2 * size) == 0 &&
         (a.lo == lo ? b.lo : a.lo) == lo + size;
}

// The world: P ranks' buffers (P × n floats), the spans of their chunk copies
// (P × P), and per rank the floats sent plus received.
typedef struct {
  int P;
  size_t n;
  float *buf, *msg; // msg: P × n, each rank's packed send of the current round
  span *spans;
  uint64_t *moved;
} world;

static world world_new(int P, size_t n, uint64_t seed) {
  world w = {P, n, NULL, NULL, NULL, NULL};
  w.buf = malloc((size_t)P * n * sizeof(float) + 1);
  w.msg = malloc((size_t)P * n * sizeof(float) + 1);
  w.spans = malloc((size_t)P * P * sizeof(span));
  w.moved = calloc((size_t)P, sizeof(uint64_t));
  assert_non_null(w.buf);
  assert_non_null(w.msg);
  assert_non_null(w.spans);
  assert_non_null(w.moved);
  for (int r = 0; r < P; r++) {
    fill_wide(w.buf + (size_t)r * n, n, seed * 1000003u + (uint64_t)r);
    for (int c = 0; c < P; c++) w.spans[r * P + c] = (span){r, r + 1};
  }
  return w;
}

static void world_free(world *w) {
  free(w->buf);
  free(w->msg);
  free(w->spans);
  free(w->moved);
}

// Rounds k0 .. k1-1 of `round` on every rank. Every rank's partner must name
// it back, with the same stride and kind, sending what it receives. Returns
// whether every addition joined two siblings.
static int run_rounds(world *w, round_fn round, int k0, int k1) {
  const int P = w->P;
  const size_t n = w->n;
  int tree = 1;
  for (int k = k0; k < k1; k++) {
    // every rank sends first: the chunks as they were before the round
    for (int r = 0; r < P; r++) {
      ts_comm_round q = round(P, r, k), t = round(P, q.partner, k);
      assert_true(q.partner >= 0 && q.partner < P && q.partner != r);
      assert_int_equal(t.partner, r);
      assert_int_equal(t.stride, q.stride);
      assert_int_equal(t.add, q.add);
      assert_int_equal(t.send, q.recv);
      assert_int_equal(t.recv, q.send);
      assert_int_not_equal(q.send, q.recv);
      size_t at = 0;
      for (int c = q.send; c < P; c += q.stride) {
        size_t off, len;
        ts_comm_chunk(n, P, c, &off, &len);
        memcpy(w->msg + (size_t)r * n + at, w->buf + (size_t)r * n + off, len * sizeof(float));
        at += len;
      }
      w->moved[r] += at;
    }
    // then every rank takes its partner's chunks, in chunk order
    span *before = malloc((size_t)P * P * sizeof(span));
    assert_non_null(before);
    memcpy(before, w->spans, (size_t)P * P * sizeof(span));
    for (int r = 0; r < P; r++) {
      ts_comm_round q = round(P, r, k);
      const float *in = w->msg + (size_t)q.partner * n;
      for (int c = q.recv; c < P; c += q.stride) {
        size_t off, len;
        ts_comm_chunk(n, P, c, &off, &len);
        float *mine = w->buf + (size_t)r * n + off;
        span *s = &w->spans[r * P + c], theirs = before[q.partner * P + c];
        if (q.add) {
          ts_tree_add(mine, in, len);
          tree &= siblings(*s, theirs);
          s->lo = s->lo < theirs.lo ? s->lo : theirs.lo;
          s->hi = s->hi > theirs.hi ? s->hi : theirs.hi;
        } else {
          memcpy(mine, in, len * sizeof(float));
          *s = theirs;
        }
        in += len;
        w->moved[r] += len;
      }
    }
    free(before);
  }
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

static const int groups[] = {2, 4, 8, 16, 32};
#define NGROUPS (sizeof groups / sizeof groups[0])

// ---- tests ------------------------------------------------------------------------

// The rounds of comm_tree.h's example, and their number.
static void test_rounds_by_hand(void **state) {
  (void)state;
  const ts_comm_round want[4] = {
      {0, 2, 0, 1, 1}, {3, 4, 3, 1, 1}, {3, 4, 1, 3, 0}, {0, 2, 1, 0, 0}};
  assert_int_equal(ts_comm_tree_nrounds(4, 0), 2);
  assert_int_equal(ts_comm_tree_nrounds(4, 1), 4);
  for (int k = 0; k < 4; k++) {
    ts_comm_round q = ts_comm_tree_round(4, 1, k);
    assert_int_equal(q.partner, want[k].partner);
    assert_int_equal(q.stride, want[k].stride);
    assert_int_equal(q.send, want[k].send);
    assert_int_equal(q.recv, want[k].recv);
    assert_int_equal(q.add, want[k].add);
  }
  assert_int_equal(ts_comm_tree_nrounds(1, 1), 0);
  assert_int_equal(ts_comm_tree_nrounds(2, 1), 2);
  assert_int_equal(ts_comm_tree_nrounds(64, 0), 6);
  assert_int_equal(ts_comm_tree_levels(3), 2); // --fast's byte count: ceil(log2 P)
}

// P = 2 .. 32 ranks, n from fewer floats than ranks to uneven chunks: the
// reduce-scatter leaves rank r chunk r, and the all-reduce every rank all,
// equal bit for bit to ts_tree_sum over the ranks; every addition is a node
// of the tree; the floats moved are ts_comm_tree_bytes.
static void test_schedule_sums_are_the_canonical_tree(void **state) {
  (void)state;
  for (size_t g = 0; g < NGROUPS; g++) {
    const int P = groups[g];
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

      const int L = ts_comm_tree_nrounds(P, 0);
      assert_true(run_rounds(&w, real_round, 0, L));
      for (int r = 0; r < P; r++) {
        size_t off, len;
        ts_comm_chunk(n, P, r, &off, &len);
        assert_memory_equal(w.buf + (size_t)r * n + off, want + off, len * sizeof(float));
        assert_int_equal(w.spans[r * P + r].lo, 0);
        assert_int_equal(w.spans[r * P + r].hi, P);
        assert_int_equal(w.moved[r] * sizeof(float), ts_comm_tree_bytes(n, P, r));
      }
      assert_true(run_rounds(&w, real_round, L, ts_comm_tree_nrounds(P, 1)));
      for (int r = 0; r < P; r++) {
        assert_memory_equal(w.buf + (size_t)r * n, want, n * sizeof(float));
        for (int c = 0; c < P; c++) {
          assert_int_equal(w.spans[r * P + c].lo, 0);
          assert_int_equal(w.spans[r * P + c].hi, P);
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
  for (size_t g = 1; g < NGROUPS; g++) { // P >= 4: with 2 ranks there is one tree
    const int P = groups[g];
    const size_t n = 4099;
    world w = world_new(P, n, 5);
    float *want = malloc(n * sizeof(float));
    assert_non_null(want);
    canonical(want, &w, w.buf);
    assert_false(run_rounds(&w, reversed_round, 0, ts_comm_tree_nrounds(P, 1)));
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

// ts_comm_tree_bytes for any group size (--fast counts groups that are not
// powers of two as this tree too), against the chunks written out per
// distance d = 1, 2, 4, ... < P: those = r or r xor d (mod 2d); and the
// plain formula 4n(P-1)/P each way when P divides n.
static void test_bytes_for_any_group(void **state) {
  (void)state;
  for (int P = 1; P <= 40; P++)
    for (size_t n = 0; n <= 70; n++)
      for (int r = 0; r < P; r++) {
        uint64_t want = 0;
        for (int d = 1; d < P; d <<= 1)
          for (int c = 0; c < P; c++) {
            size_t off, len;
            ts_comm_chunk(n, P, c, &off, &len);
            int m = c % (2 * d);
            if (m == r % (2 * d) || m == (r ^ d) % (2 * d)) want += 4 * len;
          }
        assert_int_equal(ts_comm_tree_bytes(n, P, r), want);
        if ((P & (P - 1)) == 0 && n % (size_t)P == 0)
          assert_int_equal(ts_comm_tree_bytes(n, P, r), 8 * n * (size_t)(P - 1) / (size_t)P);
      }
}

// The staging the communicators reserve holds every round's message.
static void test_max_floats_holds_every_round(void **state) {
  (void)state;
  for (size_t g = 0; g < NGROUPS; g++) {
    const int P = groups[g];
    for (size_t n = 0; n <= 3 * (size_t)P + 1; n++) {
      size_t biggest = 0;
      for (int r = 0; r < P; r++)
        for (int k = 0; k < ts_comm_tree_nrounds(P, 1); k++) {
          ts_comm_round q = ts_comm_tree_round(P, r, k);
          size_t s = ts_comm_tree_floats(n, P, q.send, q.stride);
          size_t v = ts_comm_tree_floats(n, P, q.recv, q.stride);
          if (s > biggest) biggest = s;
          if (v > biggest) biggest = v;
        }
      assert_int_equal(ts_comm_tree_max_floats(n, P), biggest);
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
