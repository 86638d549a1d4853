// Double gradient averaging (docs/ALGORITHMS.md §2, shard.h), run under mpiexec
// on 4 ranks as dp 2 × sp 2 (tests/mpi_shard.sh).
//
// Each rank writes known gradients straight into the shard's buffer, calls
// ts_shard_sync_grads and checks every element exactly. The values are small
// integers times a rank factor, so every sum of them is exact in fp32 in any
// association (tree or MPI's own under --fast), and no proper subset of the
// ranks sums to the whole: a gradient that missed the sequence group or the
// data group is caught. The positional embedding's rows are owned: a rank
// holds only its rows [t0, t0 + Tl), the last of its owned tensors, with
// values that depend on the sequence rank, so summing wpe over the sequence
// group mixes two segments' rows, and leaving wpe out of the data all-reduce
// leaves one rank's value where the data group's sum belongs.
//
// All collectives run before any assertion that can fail, so a failing check
// on one rank cannot leave the others waiting in a collective.
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "dist/grid.h"
#include "dist/shard.h"
#include "tessera.h"

#define DP 2
#define SP 2
#define SEQ 64

static int P, R; // world size and rank
static ts_grid *grid;

// Rank q's j-th sequence scales its gradient by f(q, j): distinct positive
// integers, so only the sum over every (rank, sequence) gives the total.
static float factor(int q, int j) { return (float)(1 + q + 4 * j); }
// The element pattern: small integers, different from one element to the next.
static float base(size_t i) { return (float)(1 + i % 97); }
static float wpe_base(size_t k) { return (float)(1 + k % 89); }
// Rows a rank does not own: large, nonzero, rank-distinct, still an integer
// exactly representable, so a leak shows as a wrong value, not as NaN.
static float poison(int q) { return (float)(1 << 20) + (float)q; }

static ts_config tiny_config(int batch, int fast) {
  ts_config c;
  memset(&c, 0, sizeof c);
  assert_int_equal(ts_config_preset(&c, "tiny"), TS_OK);
  ts_config_defaults(&c);
  c.batch = batch;
  c.seq = SEQ;
  c.fast = fast;
  c.tile = 0;
  c.leaf = 0;
  c.threads = 1;
  assert_int_equal(ts_config_finalize(&c), TS_OK);
  ts_layout lay = {DP, SP, 1, TS_SP_LSS, 0, -1, 1, 1};
  assert_int_equal(ts_layout_check(&c, &lay, NULL), TS_OK);
  return c;
}

typedef struct {
  size_t bad;                 // elements that differ from the expectation
  char first[256];            // the first of them
} mismatches;

static void note(mismatches *mm, const char *what, size_t i, float got, float want) {
  if (mm->bad++ == 0)
    snprintf(mm->first, sizeof mm->first, "rank %d: %s[%zu] = %.9g, want %.9g", R, what, i,
             (double)got, (double)want);
}

static void check_sync(int batch, int fast) {
  ts_config cfg = tiny_config(batch, fast);
  ts_shard sh;
  ts_layout lay = {DP, SP, 1, TS_SP_LSS, 0, -1, 1, 1};
  assert_int_equal(ts_shard_create(&cfg, grid, &lay, &sh), TS_OK);
  const int nb = batch / DP, T = SEQ, Tl = T / SP;
  assert_int_equal(sh.nb, nb);
  assert_int_equal(sh.fast, fast);
  assert_int_equal(sh.T, T);
  assert_int_equal(sh.Tl, Tl);
  assert_int_equal(sh.t0, grid->sp_rank * Tl);
  assert_non_null(sh.seq);

  // Find wpe through the model's named gradient views, not through the shard.
  ts_model *m = sh.m;
  const size_t np = ts_model_num_params(m);
  assert_int_equal(sh.np, np);
  float *g = ts_model_grads(m);
  const int nt = ts_model_num_tensors(m);
  ts_tensor *views = calloc((size_t)nt, sizeof *views);
  assert_non_null(views);
  ts_model_tensors(m, NULL, views);
  size_t w0 = np, wlen = 0, C = 0;
  for (int k = 0; k < nt; k++)
    if (strcmp(views[k].name, "wpe") == 0) { // this rank's rows only
      assert_int_equal(views[k].ndim, 2);
      assert_int_equal(views[k].shape[0], Tl);
      w0 = (size_t)(views[k].data - g);
      wlen = (size_t)ts_tensor_numel(&views[k]);
      C = (size_t)views[k].shape[1];
    }
  free(views);
  assert_true(w0 < np && wlen == (size_t)Tl * C && w0 + wlen == np);
  assert_int_equal(sh.wpe_off, w0);
  assert_int_equal(sh.wpe_len, wlen);
  const size_t w1 = w0 + wlen, own0 = (size_t)sh.t0 * C;

  // Each sequence's gradient in the model's buffer in turn, handed on as
  // its backward would (ts_shard_sequence_done), then the sync.
  ts_grid_reset_counts(grid);
  int rc = TS_OK;
  for (int j = 0; j < nb && !rc; j++) {
    const float f = factor(R, j);
    for (size_t i = 0; i < np; i++)
      g[i] = i < w0 ? f * base(i) : f * wpe_base(own0 + (i - w0));
    rc = ts_shard_sequence_done(&sh);
  }
  if (nb > 1) // the tree, not the buffer, holds the sum so far
    for (size_t i = 0; i < np; i++) g[i] = poison(R);
  if (!rc) rc = ts_shard_sync_grads(&sh, grid->data);
  ts_comm_count seq_ar = ts_comm_total(grid->seq, TS_COMM_ALLREDUCE);
  ts_comm_count seq_ag = ts_comm_total(grid->seq, TS_COMM_ALLGATHER);
  ts_comm_count data_ar = ts_comm_total(grid->data, TS_COMM_ALLREDUCE);
  // every rank's whole result, to show the replicas identical
  float *all = malloc((size_t)P * np * sizeof(float));
  assert_non_null(all);
  int mpi_rc = MPI_Allgather(g, (int)np, MPI_FLOAT, all, (int)np, MPI_FLOAT, MPI_COMM_WORLD);

  // ---- no collectives below this line ----
  assert_int_equal(rc, TS_OK);
  assert_int_equal(mpi_rc, MPI_SUCCESS);
  // one all-reduce over the sequence group per sequence, one over the data
  // group; the owned rows stay where they are
  assert_int_equal(seq_ar.calls, nb);
  assert_int_equal(seq_ag.calls, 0);
  assert_int_equal(data_ar.calls, 1);

  // Every replicated gradient: the sum over all ranks and sequences.
  float fsum_all = 0.0f;
  for (int q = 0; q < P; q++)
    for (int j = 0; j < nb; j++) fsum_all += factor(q, j);
  // this rank's wpe rows: the sum over the ranks with its sequence index (its
  // data group) and their sequences; world rank q has s = q % SP.
  float fsum_seg = 0.0f;
  for (int q = 0; q < P; q++)
    for (int j = 0; j < nb; j++)
      if (q % SP == grid->sp_rank) fsum_seg += factor(q, j);

  mismatches mm = {0};
  for (size_t i = 0; i < np; i++) {
    const float want = i < w0 ? fsum_all * base(i) : fsum_seg * wpe_base(own0 + (i - w0));
    if (g[i] != want) note(&mm, i < w0 || i >= w1 ? "grad" : "grad(wpe)", i, g[i], want);
  }
  if (mm.bad) print_error("%zu of %zu gradient elements wrong; first: %s\n", mm.bad, np, mm.first);
  assert_int_equal(mm.bad, 0);
  // replicas: the shared part on every rank, the rows within the data group
  for (int q = 0; q < P; q++)
    if (memcmp(all + (size_t)q * np, g, (q % SP == grid->sp_rank ? np : w0) * sizeof(float))) {
      print_error("rank %d: gradient differs from rank %d's\n", R, q);
      fail();
    }
  free(all);
  ts_shard_free(&sh);
}

// batch 2 over dp 2: one sequence per rank, steps 1, 3, 4 of shard.h
static void test_sync_exact_one_sequence(void **state) { (void)state; check_sync(2, 0); }
static void test_sync_fast_one_sequence(void **state) { (void)state; check_sync(2, 1); }
// batch 4 over dp 2: two sequences per rank, the tree over them (step 2) too
static void test_sync_exact_two_sequences(void **state) { (void)state; check_sync(4, 0); }
static void test_sync_fast_two_sequences(void **state) { (void)state; check_sync(4, 1); }

int main(int argc, char **argv) {
  if (ts_mpi_init(&argc, &argv) != TS_OK) return 99;
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  MPI_Comm_rank(MPI_COMM_WORLD, &R);
  if (R != 0 && !getenv("TESSERA_TEST_ALL_RANKS")) (void)!freopen("/dev/null", "w", stdout);
  if (P != DP * SP) {
    if (R == 0)
      fprintf(stderr, "test_shard: needs %d ranks (dp %d x sp %d), got %d\n", DP * SP, DP, SP, P);
    ts_mpi_finalize();
    return 99;
  }
  if (ts_grid_create(DP, SP, 1, &grid) != TS_OK) {
    fprintf(stderr, "test_shard: rank %d: %s\n", R, ts_errmsg());
    ts_mpi_abort(1);
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sync_exact_one_sequence),
      cmocka_unit_test(test_sync_fast_one_sequence),
      cmocka_unit_test(test_sync_exact_two_sequences),
      cmocka_unit_test(test_sync_fast_two_sequences),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  // every rank exits with the verdict of all (a failure on rank 2 fails the run)
  int any = failed;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (R == 0 && any && !failed) fprintf(stderr, "test_shard: a test failed on another rank\n");
  ts_grid_free(grid);
  ts_mpi_finalize();
  return any ? 1 : 0;
}
