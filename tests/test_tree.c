// ts_tree, the canonical reduction of docs/EXACTNESS.md R3: every result is compared
// bit for bit (memcmp) with a plain recursive implementation of the perfect
// binary tree, in which an empty leaf or subtree is the identity.
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "testdata.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exact/tree.h"
#include "exact/tree_hd.h"

// ---- the reference ----------------------------------------------------------------

// The whole tree: padded to the next power of two; all empty gives zeros.
static void ref_sum(float *out, const float *leaves, const int *present, size_t n, size_t m) {
  size_t size = 1;
  while (size < n) size *= 2;
  if (!ref_tree(out, leaves, present, n, m, 0, size)) memset(out, 0, m * sizeof(float));
}

// Pushes leaves [0, n) (m floats each; present[i] == 0 pushes an empty) and finishes.
static void tree_of(ts_tree *t, float *out, const float *leaves, const int *present, size_t n,
                    size_t m) {
  for (size_t i = 0; i < n; i++)
    assert_int_equal(ts_tree_push(t, present && !present[i] ? NULL : leaves + i * m), 0);
  ts_tree_finish(t, out);
}

// ---- tests --------------------------------------------------------------------------

static void test_empty_tree_gives_zeros(void **state) {
  ts_tree t;
  ts_tree_init(&t, 5);
  float out[5];
  memset(out, 0xAB, sizeof out); // garbage that finish must overwrite
  ts_tree_finish(&t, out);
  const float zeros[5] = {0};
  assert_memory_equal(out, zeros, sizeof out);
  // Only empty leaves pushed: still exact (positive) zeros.
  for (int i = 0; i < 7; i++) assert_int_equal(ts_tree_push(&t, NULL), 0);
  memset(out, 0xAB, sizeof out);
  ts_tree_finish(&t, out);
  assert_memory_equal(out, zeros, sizeof out);
  ts_tree_free(&t);
}

static void test_one_leaf_is_itself(void **state) {
  ts_tree t;
  ts_tree_init(&t, 4);
  const float leaf[4] = {1.5f, -0.0f, 3e-38f, -7.25e20f};
  float out[4];
  assert_int_equal(ts_tree_push(&t, leaf), 0);
  ts_tree_finish(&t, out);
  assert_memory_equal(out, leaf, sizeof out);
  // Padding is the identity, not "+ 0": -0.0 survives any number of empties
  // around it (an added +0.0 would turn it into +0.0).
  for (int before = 0; before < 5; before++)
    for (int after = 0; after < 5; after++) {
      for (int i = 0; i < before; i++) ts_tree_push(&t, NULL);
      ts_tree_push(&t, leaf);
      for (int i = 0; i < after; i++) ts_tree_push(&t, NULL);
      ts_tree_finish(&t, out);
      assert_memory_equal(out, leaf, sizeof out);
    }
  ts_tree_free(&t);
}

// The shapes of small trees written out by hand, on data where every
// association gives different bits.
static void test_small_trees_by_hand(void **state) {
  const float a = 16777216.0f, b = 1.0f, c = 1.0f, d = -16777216.0f, e = 0.75f, f = 0.5f,
              g = 3.0f;
  const float x[7] = {a, b, c, d, e, f, g};
  float want[7];
  want[0] = a;
  want[1] = a + b;
  want[2] = (a + b) + c;
  want[3] = (a + b) + (c + d);
  want[4] = ((a + b) + (c + d)) + e;
  want[5] = ((a + b) + (c + d)) + (e + f);
  want[6] = ((a + b) + (c + d)) + ((e + f) + g);
  ts_tree t;
  ts_tree_init(&t, 1);
  for (int n = 1; n <= 7; n++) {
    float out;
    tree_of(&t, &out, x, NULL, (size_t)n, 1);
    assert_memory_equal(&out, &want[n - 1], sizeof out);
    float s = ts_tree_sum(x, (size_t)n);
    assert_memory_equal(&s, &want[n - 1], sizeof s);
  }
  // The data really tells the orders apart: left to right gives other bits.
  float tree4 = (a + b) + (c + d), naive4 = ((a + b) + c) + d;
  assert_memory_not_equal(&tree4, &naive4, sizeof tree4);
  ts_tree_free(&t);
}

// n = 1..100 leaves of 3 floats, some of them empty, against the reference.
static void test_matches_reference_1_to_100(void **state) {
  const size_t m = 3, nmax = 100;
  float *leaves = malloc(nmax * m * sizeof(float));
  int *present = malloc(nmax * sizeof(int));
  assert_non_null(leaves);
  assert_non_null(present);
  fill_wide(leaves, nmax * m, 42);
  uint64_t s = 7;
  for (size_t i = 0; i < nmax; i++) present[i] = (mix64(&s) % 5) != 0; // ~1 in 5 empty
  ts_tree t;
  ts_tree_init(&t, m);
  for (size_t n = 1; n <= nmax; n++) {
    float got[3], want[3];
    tree_of(&t, got, leaves, NULL, n, m);
    ref_sum(want, leaves, NULL, n, m);
    assert_memory_equal(got, want, sizeof got);
    tree_of(&t, got, leaves, present, n, m);
    ref_sum(want, leaves, present, n, m);
    assert_memory_equal(got, want, sizeof got);
  }
  ts_tree_free(&t);
  free(leaves);
  free(present);
}

// A leaf that completes a pair is added straight into its left neighbour:
// streaming n leaves allocates no more buffers than the most complete
// subtrees ever held at once, max over i <= n of popcount(i) (never a carry
// beside them): 1 for 2 leaves, 2 for the 4 microbatches of a pipeline
// stage. The sums stay the reference's.
static void test_buffers_log_n(void **state) {
  (void)state;
  const size_t m = 5;
  float leaves[64 * 5];
  fill_wide(leaves, 64 * m, 3);
  for (size_t n = 1; n <= 64; n++) {
    ts_tree t;
    ts_tree_init(&t, m);
    float got[5], want[5];
    tree_of(&t, got, leaves, NULL, n, m);
    ref_sum(want, leaves, NULL, n, m);
    assert_memory_equal(got, want, sizeof got);
    int most = 0;
    for (size_t i = 1; i <= n; i++) most = __builtin_popcountll(i) > most ? __builtin_popcountll(i) : most;
    assert_int_equal(t.nowned, most);
    ts_tree_free(&t);
  }
}

// ts_tree_window_peak counts the buffers ts_leaf_tree_sum's pattern leaves
// in the pool (the memory estimate counts them): windows of leaves taken at
// once, then pushed owned, for windows of 1 to 9 and up to 200 leaves.
static void test_window_peak_is_the_pool(void **state) {
  (void)state;
  const size_t m = 3;
  for (int w = 1; w <= 9; w++)
    for (int64_t n = 0; n <= 200; n++) {
      ts_tree t;
      ts_tree_init(&t, m);
      for (int64_t base = 0; base < n; base += w) {
        float *leaf[9];
        const int cnt = (int)(n - base < w ? n - base : w);
        for (int i = 0; i < cnt; i++) {
          leaf[i] = ts_tree_take(&t);
          assert_non_null(leaf[i]);
          for (size_t c = 0; c < m; c++) leaf[i][c] = (float)(base + i);
        }
        for (int i = 0; i < cnt; i++) ts_tree_push_owned(&t, leaf[i]);
      }
      float out[3];
      ts_tree_finish(&t, out);
      assert_int_equal(ts_tree_window_peak(n, w), t.nowned);
      ts_tree_free(&t);
    }
  // past the loop's reach, the closed form of a power-of-two window: 2^20 leaves
  // one at a time hold 20 partials before the last and the last itself
  assert_int_equal(ts_tree_window_peak((int64_t)1 << 20, 1), 21);
  assert_int_equal(ts_tree_window_peak(((int64_t)1 << 20) + 1, 4), 22);
}

// Restarting at position `start` equals pushing `start` empties first, and
// ts_tree_skip(k) equals k empty pushes: a rank holding leaves from `start`
// on builds the same (sub)tree as the serial run.
static void test_reset_and_skip(void **state) {
  const size_t m = 2, nl = 40;
  float leaves[80];
  fill_wide(leaves, nl * m, 3);
  ts_tree a, b, c;
  ts_tree_init(&a, m);
  ts_tree_init(&b, m);
  ts_tree_init(&c, m);
  for (uint64_t start = 0; start < 40; start++)
    for (size_t cnt = 0; cnt <= 24; cnt += 3) {
      float ga[2], gb[2], gc[2], want[2];
      ts_tree_reset(&a, start);
      for (size_t i = 0; i < cnt; i++) ts_tree_push(&a, leaves + i * m);
      ts_tree_finish(&a, ga);
      for (uint64_t i = 0; i < start; i++) ts_tree_push(&b, NULL);
      for (size_t i = 0; i < cnt; i++) ts_tree_push(&b, leaves + i * m);
      ts_tree_finish(&b, gb);
      ts_tree_skip(&c, start);
      for (size_t i = 0; i < cnt; i++) ts_tree_push(&c, leaves + i * m);
      ts_tree_finish(&c, gc);
      assert_memory_equal(ga, gb, sizeof ga);
      assert_memory_equal(gc, gb, sizeof gc);
      // and the reference: leaf i of the pushes sits at position start + i
      float *pos = calloc((start + cnt + 1) * m, sizeof(float));
      int *present = calloc(start + cnt + 1, sizeof(int));
      assert_non_null(pos);
      assert_non_null(present);
      for (size_t i = 0; i < cnt; i++) {
        memcpy(pos + (start + i) * m, leaves + i * m, m * sizeof(float));
        present[start + i] = 1;
      }
      ref_sum(want, pos, present, start + cnt, m);
      assert_memory_equal(ga, want, sizeof ga);
      free(pos);
      free(present);
    }
  // skip between pushes (a gap of empty positions inside the sum), against
  // one-by-one empties and the reference
  for (size_t before = 0; before <= 9; before++)
    for (uint64_t gap = 0; gap <= 9; gap++) {
      const size_t after = 5;
      float gb[2], gc[2], want[2];
      float pos[2 * 40];
      int present[40] = {0};
      memset(pos, 0, sizeof pos);
      for (size_t i = 0; i < before; i++) {
        ts_tree_push(&b, leaves + i * m);
        ts_tree_push(&c, leaves + i * m);
        memcpy(pos + i * m, leaves + i * m, m * sizeof(float));
        present[i] = 1;
      }
      for (uint64_t i = 0; i < gap; i++) ts_tree_push(&b, NULL);
      ts_tree_skip(&c, gap);
      for (size_t i = 0; i < after; i++) {
        size_t p = before + gap + i;
        ts_tree_push(&b, leaves + (20 + i) * m);
        ts_tree_push(&c, leaves + (20 + i) * m);
        memcpy(pos + p * m, leaves + (20 + i) * m, m * sizeof(float));
        present[p] = 1;
      }
      ts_tree_finish(&b, gb);
      ts_tree_finish(&c, gc);
      ref_sum(want, pos, present, before + gap + after, m);
      assert_memory_equal(gb, want, sizeof gb);
      assert_memory_equal(gc, want, sizeof gc);
    }
  // reset in the middle of a sum discards what was pushed
  ts_tree_push(&a, leaves);
  ts_tree_push(&a, leaves + m);
  ts_tree_reset(&a, 0);
  ts_tree_push(&a, leaves + 2 * m);
  float got[2];
  ts_tree_finish(&a, got);
  assert_memory_equal(got, leaves + 2 * m, sizeof got);
  ts_tree_free(&a);
  ts_tree_free(&b);
  ts_tree_free(&c);
}

// A tree is reusable after finish (it restarts at position 0), and resize to a
// smaller leaf keeps working.
static void test_reuse_and_resize(void **state) {
  float leaves[64];
  fill_wide(leaves, 64, 11);
  ts_tree t;
  ts_tree_init(&t, 8);
  float first[8], again[8];
  tree_of(&t, first, leaves, NULL, 7, 8);
  tree_of(&t, again, leaves, NULL, 7, 8);
  assert_memory_equal(first, again, sizeof first);
  ts_tree_push(&t, leaves); // left pending: resize must drop it
  ts_tree_resize(&t, 2);
  assert_int_equal(t.n, 2);
  float got[2], want[2];
  tree_of(&t, got, leaves, NULL, 13, 2);
  ref_sum(want, leaves, NULL, 13, 2);
  assert_memory_equal(got, want, sizeof got);
  // never grows past the size it was created with
  ts_tree_resize(&t, 100);
  assert_int_equal(t.n, 8);
  ts_tree_free(&t);
}

// ts_tree_sum is the scalar tree: same bits as ts_tree with one float per leaf.
static void test_tree_sum_equals_tree(void **state) {
  float x[300];
  fill_wide(x, 300, 5);
  ts_tree t;
  ts_tree_init(&t, 1);
  for (size_t n = 0; n <= 300; n++) {
    float viatree, want;
    tree_of(&t, &viatree, x, NULL, n, 1);
    ref_sum(&want, x, NULL, n, 1);
    float s = ts_tree_sum(x, n);
    assert_memory_equal(&s, &viatree, sizeof s);
    assert_memory_equal(&s, &want, sizeof s);
  }
  const float nz = -0.0f;
  float s = ts_tree_sum(&nz, 1);
  assert_memory_equal(&s, &nz, sizeof s);
  ts_tree_free(&t);
}

// Leaves large enough that ts_tree_add runs its OpenMP loop: still the
// reference bits (the addition is element-wise, so the split cannot matter).
static void test_large_leaves(void **state) {
  const size_t m = 70000, n = 5;
  float *leaves = malloc(n * m * sizeof(float));
  float *got = malloc(m * sizeof(float)), *want = malloc(m * sizeof(float));
  assert_non_null(leaves);
  assert_non_null(got);
  assert_non_null(want);
  fill_wide(leaves, n * m, 99);
  ts_tree t;
  ts_tree_init(&t, m);
  tree_of(&t, got, leaves, NULL, n, m);
  ref_sum(want, leaves, NULL, n, m);
  assert_memory_equal(got, want, m * sizeof(float));
  ts_tree_free(&t);
  free(leaves);
  free(got);
  free(want);
}

// A leaf pushed in parts (ts_tree_push_part) is the same leaf pushed whole:
// n leaves, some empty (pushed whole), the rest in parts cut at pseudo-random
// places and given in a shuffled order, the last one finished in place (as
// a pipeline stage's gradient buffer; the earlier ones' parts given back).
// Large leaves, so that the pages the parts let go are real pages.
static void test_push_in_parts(void **state) {
  (void)state;
  const size_t m = 3 * 4096 + 17;
  float *leaves = malloc(40 * m * sizeof(float)), *leaf = malloc(m * sizeof(float));
  float *got = malloc(m * sizeof(float)), *want = malloc(m * sizeof(float));
  assert_non_null(leaves);
  assert_non_null(leaf);
  assert_non_null(got);
  assert_non_null(want);
  fill_wide(leaves, 40 * m, 7);
  int present[40];
  uint32_t x = 12345;
  for (int i = 0; i < 40; i++) present[i] = (i % 7) != 3;
  for (size_t n = 1; n <= 40; n++) {
    if (!present[n - 1]) continue; // (the last leaf is pushed in parts)
    ts_tree t;
    ts_tree_init(&t, m);
    for (size_t i = 0; i < n; i++) {
      if (!present[i]) {
        assert_int_equal(ts_tree_push(&t, NULL), 0);
        continue;
      }
      memcpy(leaf, leaves + i * m, m * sizeof(float));
      size_t cut[6] = {0, 0, 0, 0, 0, m};
      for (int c = 1; c < 5; c++) cut[c] = (x = x * 1664525u + 1013904223u) % m;
      for (int c = 1; c < 5; c++) // sorted: five parts, some empty
        for (int d = c + 1; d < 5; d++)
          if (cut[d] < cut[c]) { size_t tmp = cut[c]; cut[c] = cut[d]; cut[d] = tmp; }
      const int last = i + 1 == n;
      for (int q = 0; q < 5; q++) {
        const int p = (q * 3 + (int)i) % 5; // every part once, in a shuffled order
        assert_int_equal(ts_tree_push_part(&t, leaf, cut[p], cut[p + 1], last), 0);
      }
      ts_tree_push_parts_end(&t, last);
    }
    memcpy(got, leaf, m * sizeof(float));
    ref_sum(want, leaves, present, n, m);
    assert_memory_equal(got, want, m * sizeof(float));
    assert_int_equal(t.count, 0);
    ts_tree_free(&t);
  }
  free(leaves);
  free(leaf);
  free(got);
  free(want);
}

// ts_tree1 (src/exact/tree_hd.h: the GPU's scalar tree) against the reference, with
// empty positions anywhere (the position embedding's tree keeps one leaf in nj).
static void test_scalar_tree_with_empties(void **state) {
  (void)state;
  enum { N = 70 };
  float leaves[N];
  int present[N];
  for (int trial = 0; trial < 200; trial++) {
    const size_t n = (size_t)(trial % N) + (trial >= N);
    fill_wide(leaves, n, (uint64_t)trial + 1); // magnitudes far apart: the order shows
    for (size_t i = 0; i < n; i++) {
      present[i] = trial % 3 == 0 ? 1 : (int)((i * 7 + (size_t)trial) % 3 != 0);
    }
    ts_tree1 t;
    ts_tree1_init(&t);
    for (size_t i = 0; i < n; i++) {
      if (present[i]) ts_tree1_push(&t, leaves[i]);
      else ts_tree1_skip(&t);
    }
    float got = ts_tree1_finish(&t), want;
    ref_sum(&want, leaves, present, n, 1);
    if (memcmp(&got, &want, sizeof got) != 0)
      fail_msg("trial %d (n %zu): ts_tree1 %a, the tree %a", trial, n, (double)got, (double)want);
  }
}

static void test_add(void **state) {
  float a[3] = {1.0f, 16777216.0f, -2.0f};
  const float b[3] = {0.5f, 1.0f, 2.0f};
  ts_tree_add(a, b, 3);
  const float want[3] = {1.5f, 16777216.0f, 0.0f};
  assert_memory_equal(a, want, sizeof a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_empty_tree_gives_zeros),
      cmocka_unit_test(test_one_leaf_is_itself),
      cmocka_unit_test(test_small_trees_by_hand),
      cmocka_unit_test(test_matches_reference_1_to_100),
      cmocka_unit_test(test_reset_and_skip),
      cmocka_unit_test(test_reuse_and_resize),
      cmocka_unit_test(test_tree_sum_equals_tree),
      cmocka_unit_test(test_large_leaves),
      cmocka_unit_test(test_add),
      cmocka_unit_test(test_scalar_tree_with_empties),
      cmocka_unit_test(test_push_in_parts),
      cmocka_unit_test(test_buffers_log_n),
      cmocka_unit_test(test_window_peak_is_the_pool),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
