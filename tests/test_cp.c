// The context-parallel strategy registry (src/cp/cp.h): every entry is a
// complete strategy, its name is its --sp-mode name, the positions of any
// layout it accepts cover each position of the sequence exactly once, and the
// strategy's layout rules are reached through ts_layout_check. The strategies'
// results against the serial run are checked by tests/mpi_sp.sh and
// tests/mpi_cp.sh; this is what can be checked without MPI.
// cmocka.h needs these four first.
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>

#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "cp/cp.h"
#include "cp/ring.h"
#include "tessera.h"
#include "exact/tree.h"

static void test_registry_complete(void **state) {
  (void)state;
  for (int i = 0; i < TS_SP_NMODES; i++) {
    const ts_cp *cp = ts_cp_get((ts_sp_mode)i);
    assert_non_null(cp);
    assert_string_equal(cp->name, ts_sp_mode_names[i]);
    ts_sp_mode back = TS_SP_NMODES;
    assert_int_equal(ts_sp_mode_parse(cp->name, &back), TS_OK);
    assert_int_equal(back, i);
    assert_non_null(cp->summary);
    assert_true(cp->summary[0] != '\0');
    assert_non_null(cp->sizes);
    // either the attention seam or whole layers, both directions
    const int seam = cp->attn_forward && cp->attn_backward;
    const int layer = cp->layer_forward && cp->layer_backward;
    assert_true(seam || layer);
    assert_true(!cp->attn_forward == !cp->attn_backward);
    assert_true(!cp->layer_forward == !cp->layer_backward);
    assert_true(!cp->create || cp->destroy); // what it makes it frees
  }
  assert_null(ts_cp_get(TS_SP_NMODES));
  assert_null(ts_cp_get((ts_sp_mode)-1));
  // the serial strategy is not a --sp-mode but is complete too
  assert_non_null(ts_cp_local.sizes);
  assert_non_null(ts_cp_local.attn_forward);
  assert_true(ts_cp_local.exact);
}

// Every position of a sequence of T is held by exactly one rank, runs are
// of equal length, and a rank's runs sum to T/N positions.
static void check_partition(const ts_cp *cp, int N, int T) {
  int *owner = malloc((size_t)T * sizeof(int));
  assert_non_null(owner);
  for (int t = 0; t < T; t++) owner[t] = -1;
  for (int r = 0; r < N; r++) {
    ts_cp_runs runs;
    memset(&runs, 0xff, sizeof runs);
    ts_cp_positions(cp, N, r, T, &runs);
    assert_true(runs.n >= 1 && runs.n <= 2);
    assert_int_equal(runs.n * runs.len, T / N);
    for (int k = 0; k < runs.n; k++) {
      assert_true(runs.pos[k] >= 0 && runs.pos[k] + runs.len <= T);
      for (int t = runs.pos[k]; t < runs.pos[k] + runs.len; t++) {
        if (owner[t] != -1)
          fail_msg("%s N=%d T=%d: position %d held by ranks %d and %d", cp->name, N, T, t,
                   owner[t], r);
        owner[t] = r;
      }
    }
  }
  for (int t = 0; t < T; t++)
    if (owner[t] < 0) fail_msg("%s N=%d T=%d: position %d held by no rank", cp->name, N, T, t);
  free(owner);
}

static void test_positions_partition(void **state) {
  (void)state;
  for (int i = 0; i < TS_SP_NMODES; i++)
    for (int N = 2; N <= 8; N *= 2) check_partition(ts_cp_get((ts_sp_mode)i), N, 64 * N);
  check_partition(&ts_cp_local, 1, 256);
}

// zig-zag: rank r holds chunks r and 2N-1-r of 2N, so every rank gets the
// same causal work: the sum of its positions is the same on every rank.
static void test_zigzag_balanced(void **state) {
  (void)state;
  const ts_cp *cp = ts_cp_get(TS_SP_RING_ZIGZAG);
  const int N = 4, T = 256;
  long long first = -1;
  for (int r = 0; r < N; r++) {
    ts_cp_runs runs;
    ts_cp_positions(cp, N, r, T, &runs);
    assert_int_equal(runs.n, 2);
    assert_int_equal(runs.pos[0], r * (T / (2 * N)));
    assert_int_equal(runs.pos[1], (2 * N - 1 - r) * (T / (2 * N)));
    long long work = 0;
    for (int k = 0; k < 2; k++)
      for (int t = runs.pos[k]; t < runs.pos[k] + runs.len; t++) work += t + 1; // keys seen
    if (first < 0) first = work;
    assert_true(work == first);
  }
}

// Exact ring attention's travelling tree (src/cp/ring.h): the block of
// place c collects the partials of places c … n−1 in that order on a stack of
// planes that moves from place to place. At every place the stack holds one
// plane per occupied level (ring_tree_levels), never more than log2 n, and
// what leaves place n−1 is one plane: the canonical tree over places with
// the places before c empty (ts_tree, started at c), bit for bit. Leaves of
// mixed magnitudes, so that another association would show (it does: the
// plain sum in place order differs somewhere).
static void test_ring_tree(void **state) {
  (void)state;
  enum { LEN = 37, MAXN = 16 };
  float *x = malloc((size_t)MAXN * LEN * sizeof(float)), *want = malloc(LEN * sizeof(float));
  float *planes = malloc((size_t)(MAXN + 1) * LEN * sizeof(float));
  assert_true(x && want && planes);
  uint64_t st = 12345;
  for (int i = 0; i < MAXN * LEN; i++) {
    st = st * 6364136223846793005ull + 1442695040888963407ull;
    const double u = (double)(st >> 11) / 9007199254740992.0 - 0.5;
    x[i] = (float)ldexp(u, (int)((st >> 5) % 24) - 12);
  }
  ts_tree tree;
  ts_tree_init(&tree, LEN);
  int differs = 0;
  for (int n = 1; n <= MAXN; n *= 2) {
    int log2n = 0;
    while ((1 << log2n) < n) log2n++;
    for (int c = 0; c < n; c++) {
      ts_tree_reset(&tree, (uint64_t)c);
      for (int p = c; p < n; p++) assert_int_equal(ts_tree_push(&tree, x + (size_t)p * LEN), 0);
      ts_tree_finish(&tree, want);
      int d = 0;
      for (int p = c; p < n; p++) {
        memcpy(planes + (size_t)d * LEN, x + (size_t)p * LEN, LEN * sizeof(float));
        d = ring_tree_push(&ts_backend_cpu, planes, LEN, c, p);
        assert_int_equal(d, __builtin_popcount(ring_tree_levels(c, p + 1)));
        assert_true(d >= 1 && d <= (log2n > 0 ? log2n : 1));
      }
      assert_int_equal(d, 1);
      assert_memory_equal(planes, want, LEN * sizeof(float));
      for (int i = 0; i < LEN && n > 2; i++) {
        float seq = x[(size_t)c * LEN + i];
        for (int p = c + 1; p < n; p++) seq += x[(size_t)p * LEN + i];
        differs |= seq != want[i];
      }
    }
  }
  assert_true(differs);
  ts_tree_free(&tree);
  free(x); free(want); free(planes);
}

// The strategies' own rules come through ts_layout_check, and a strategy
// without rules of its own accepts what the common rules accept.
static void test_rules_through_layout_check(void **state) {
  (void)state;
  ts_config c;
  memset(&c, 0, sizeof c);
  assert_int_equal(ts_config_preset(&c, "llama-tiny"), TS_OK); // 4 heads, 2 key/value heads
  ts_config_defaults(&c);
  c.batch = 1;
  assert_int_equal(ts_config_finalize(&c), TS_OK);
  ts_layout lay = {.dp = 1, .sp = 4, .pp = 1, .sp_mode = TS_SP_USP, .upipe_sched = -1,
                   .microbatches = 1, .ulysses_degree = 0};
  assert_int_equal(ts_layout_check(&c, &lay, NULL), TS_OK);
  assert_int_equal(lay.ulysses_degree, 2); // the default: the largest divisor below N
  lay.ulysses_degree = 4;                  // 2 key/value heads do not split 4 ways
  assert_int_equal(ts_layout_check(&c, &lay, NULL), TS_EUSAGE);
  assert_non_null(strstr(ts_errmsg(), "--ulysses-degree 4"));
  lay = (ts_layout){.dp = 1, .sp = 2, .pp = 1, .sp_mode = TS_SP_MEGATRON, .upipe_sched = -1,
                    .microbatches = 1};
  assert_int_equal(ts_layout_check(&c, &lay, NULL), TS_EUSAGE); // the GPT baseline only
  assert_non_null(strstr(ts_errmsg(), "megatron"));
  lay.sp_mode = TS_SP_LSS;
  assert_int_equal(ts_layout_check(&c, &lay, NULL), TS_OK);
  // a strategy's own setting is refused with another strategy, naming its owner
  lay.ulysses_degree = 2;
  assert_int_equal(ts_layout_check(&c, &lay, NULL), TS_EUSAGE);
  assert_non_null(strstr(ts_errmsg(), "--ulysses-degree: only with --sp N --sp-mode usp"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_registry_complete),
      cmocka_unit_test(test_positions_partition),
      cmocka_unit_test(test_zigzag_balanced),
      cmocka_unit_test(test_ring_tree),
      cmocka_unit_test(test_rules_through_layout_check),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
