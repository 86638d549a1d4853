// The communicator and the process grid, run under mpiexec (tests/mpi_comm.sh;
// any number of ranks: the exact reductions' tree pads a group that is not a
// power of two with empty positions, as the serial tree pads its leaves).
//
// Every rank generates every rank's input (seeded by the rank), so each can
// compute the canonical tree over ranks locally with a plain recursive
// reference and compare the collective's result bit for bit (memcmp). The
// naive sequential order is shown to give other bits, so the comparison can
// fail. Counters are checked against the byte formulas of comm.h.
//
// Built a second time as tests/test_comm_nccl_emu (TS_TEST_NCCL): the same
// tests on the NCCL communicator (src/comm/comm_nccl.cu) between emulated GPUs
// (tests/gpu_emu/nccl.h), with the buffers the collectives get in host memory
// (the communicator's MPI and staging paths) or, with TS_TEST_BUFFERS=device,
// in the backend's managed memory (NCCL itself).
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "testdata.h"

#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "comm/comm.h"
#include "dist/grid.h"
#include "tessera.h"

static int P, R; // world size and rank

// Where the collectives' buffers live: host memory, or the allocator of the
// backend in `device` (the emulated GPU's, in the NCCL build).
static const ts_backend *device;
static void *buf_alloc(size_t bytes) { return device ? device->alloc(bytes) : calloc(1, bytes); }
static void buf_free(void *p) {
  if (device) device->free(p);
  else free(p);
}

// all[r*n + i] = element i of rank r's input
static float *inputs_of_all(size_t n, uint64_t seed) {
  float *all = malloc((size_t)P * n * sizeof(float) + 1);
  assert_non_null(all);
  for (int r = 0; r < P; r++) fill_wide(all + (size_t)r * n, n, seed * 1000003u + (uint64_t)r);
  return all;
}

// The canonical tree's width over p ranks: the power of two at or above p
// (its positions past the last rank are empty).
static size_t tree_width(int p) {
  size_t w = 1;
  while (w < (size_t)p) w *= 2;
  return w;
}

static float ref_sequential(const float *all, size_t n, size_t i) {
  float s = all[i];
  for (int r = 1; r < P; r++) s = s + all[(size_t)r * n + i];
  return s;
}

static ts_comm *world_comm(void) {
  ts_comm *c = NULL;
  MPI_Comm w = MPI_COMM_WORLD;
#ifdef TS_TEST_NCCL
  assert_int_equal(ts_comm_nccl_create(&w, &c), TS_OK);
#else
  assert_int_equal(ts_comm_mpi_create(&w, &c), TS_OK);
#endif
  assert_int_equal(c->size, P);
  assert_int_equal(c->rank, R);
  return c;
}

// (the last: several of the MPI communicator's swaps of 2^20 floats a round)
static const size_t sizes[] = {1, 3, 4, 7, 64, 1000, 4099, (1u << 16) + 5, (3u << 20) + 7};
#define NSIZES (sizeof sizes / sizeof sizes[0])

// ---- exact reductions --------------------------------------------------------------
static void test_allreduce_tree_is_the_canonical_tree(void **state) {
  (void)state;
  ts_comm *c = world_comm();
  size_t differ_from_naive = 0;
  for (size_t k = 0; k < NSIZES; k++) {
    size_t n = sizes[k];
    float *all = inputs_of_all(n, 11 + k);
    float *buf = buf_alloc(n * sizeof(float)), *ref = malloc(n * sizeof(float));
    assert_non_null(buf);
    assert_non_null(ref);
    memcpy(buf, all + (size_t)R * n, n * sizeof(float));
    assert_int_equal(ts_comm_allreduce_tree(c, buf, n, -1), TS_OK);
    ref_tree(ref, all, NULL, (size_t)P, n, 0, tree_width(P)); // ranks are the leaves
    for (size_t i = 0; i < n; i++) {
      float naive = ref_sequential(all, n, i);
      differ_from_naive += memcmp(&naive, &ref[i], sizeof(float)) != 0;
    }
    assert_memory_equal(buf, ref, n * sizeof(float));
    free(all);
    buf_free(buf);
    free(ref);
  }
  // With 4 or more ranks the sequential order is another association, and
  // the data makes it round differently: the memcmp above can fail.
  if (P >= 4) assert_true(differ_from_naive > 1000);
  ts_comm_free(c);
}

// In pieces (ts_comm_allreduce_piece, here a few floats instead of 2^24):
// the same bits as the canonical tree of the whole vector, the same bytes.
static void test_allreduce_tree_in_pieces(void **state) {
  (void)state;
  ts_comm *c = world_comm();
  const size_t n = 1000, saved = ts_comm_allreduce_piece;
  float *all = inputs_of_all(n, 29);
  float *buf = buf_alloc(n * sizeof(float)), *ref = malloc(n * sizeof(float));
  assert_non_null(buf);
  assert_non_null(ref);
  ref_tree(ref, all, NULL, (size_t)P, n, 0, tree_width(P));
  for (size_t piece = 7; piece <= 256; piece *= 6) {
    memcpy(buf, all + (size_t)R * n, n * sizeof(float));
    ts_comm_allreduce_piece = piece;
    ts_comm_reset_counts(c);
    int rc = ts_comm_allreduce_tree(c, buf, n, -1);
    ts_comm_allreduce_piece = saved;
    assert_int_equal(rc, TS_OK);
    assert_memory_equal(buf, ref, n * sizeof(float));
    ts_comm_count k = ts_comm_total(c, TS_COMM_ALLREDUCE);
    assert_int_equal(k.calls, 1);
    uint64_t want = 0;
    for (size_t o = 0; o < n; o += piece)
      want += 2 * ts_comm_tree_bytes(n - o < piece ? n - o : piece, P, R);
    assert_int_equal(k.bytes, want);
  }
  free(all);
  buf_free(buf);
  free(ref);
  ts_comm_free(c);
}

static void test_reduce_scatter_tree_gives_each_rank_its_chunk(void **state) {
  (void)state;
  ts_comm *c = world_comm();
  for (size_t k = 0; k < NSIZES; k++) {
    size_t n = sizes[k], off, len;
    float *all = inputs_of_all(n, 101 + k);
    float *buf = buf_alloc(n * sizeof(float));
    assert_non_null(buf);
    memcpy(buf, all + (size_t)R * n, n * sizeof(float));
    assert_int_equal(ts_comm_reduce_scatter_tree(c, buf, n, -1), TS_OK);
    ts_comm_chunk(n, P, R, &off, &len);
    float *want = malloc(n * sizeof(float));
    assert_non_null(want);
    ref_tree(want, all, NULL, (size_t)P, n, 0, tree_width(P)); // ranks are the leaves
    assert_memory_equal(buf + off, want + off, len * sizeof(float));
    free(want);
    free(all);
    buf_free(buf);
  }
  ts_comm_free(c);
}

static void test_chunks_cover_in_rank_order(void **state) {
  (void)state;
  for (int p = 1; p <= 8; p++)
    for (size_t n = 0; n < 40; n++) {
      size_t next = 0;
      for (int r = 0; r < p; r++) {
        size_t off, len;
        ts_comm_chunk(n, p, r, &off, &len);
        assert_int_equal(off, next);
        assert_true(len == n / p || len == n / p + 1);
        next = off + len;
      }
      assert_int_equal(next, n);
    }
}

static void test_fast_allreduce_within_tolerance(void **state) {
  (void)state;
  ts_comm *c = world_comm();
  size_t n = 4099;
  float *all = inputs_of_all(n, 7);
  float *buf = buf_alloc(n * sizeof(float));
  assert_non_null(buf);
  memcpy(buf, all + (size_t)R * n, n * sizeof(float));
  assert_int_equal(ts_comm_allreduce_fast(c, buf, n, -1), TS_OK);
  for (size_t i = 0; i < n; i++) {
    double exact = 0.0, mag = 0.0;
    for (int r = 0; r < P; r++) {
      exact += all[(size_t)r * n + i];
      mag += fabs(all[(size_t)r * n + i]);
    }
    assert_true(fabs(buf[i] - exact) <= 4.0 * P * 6e-8 * mag);
  }
  assert_int_equal(ts_comm_total(c, TS_COMM_ALLREDUCE).calls, 1);
  free(all);
  buf_free(buf);
  ts_comm_free(c);
}

// A group of three (ranks 0..2; the rest another group): the all-reduce and
// the reduce-scatter give the canonical tree over its ranks, (R0 + R1) + R2,
// bit for bit, and count the bytes their swaps move.
static void test_groups_of_any_size(void **state) {
  (void)state;
  if (P < 3) skip();
  MPI_Comm sub;
  assert_int_equal(MPI_Comm_split(MPI_COMM_WORLD, R < 3, R, &sub), MPI_SUCCESS);
  ts_comm *c = NULL;
  assert_int_equal(ts_comm_mpi_create(&sub, &c), TS_OK);
  MPI_Comm_free(&sub);
  const int g = c->size, me = c->rank;
  const size_t n = 4099;
  float *all = malloc((size_t)g * n * sizeof(float)), *ref = malloc(n * sizeof(float));
  float *buf = malloc(n * sizeof(float));
  assert_non_null(all);
  assert_non_null(ref);
  assert_non_null(buf);
  for (int r = 0; r < g; r++) fill_wide(all + (size_t)r * n, n, 31 * 1000003u + (uint64_t)r + 100 * (R < 3));
  ref_tree(ref, all, NULL, (size_t)g, n, 0, tree_width(g));
  memcpy(buf, all + (size_t)me * n, n * sizeof(float));
  assert_int_equal(ts_comm_allreduce_tree(c, buf, n, -1), TS_OK);
  assert_memory_equal(buf, ref, n * sizeof(float));
  assert_int_equal(ts_comm_total(c, TS_COMM_ALLREDUCE).bytes, 2 * ts_comm_tree_bytes(n, g, me));
  memcpy(buf, all + (size_t)me * n, n * sizeof(float));
  assert_int_equal(ts_comm_reduce_scatter_tree(c, buf, n, -1), TS_OK);
  size_t off, len;
  ts_comm_chunk(n, g, me, &off, &len);
  assert_memory_equal(buf + off, ref + off, len * sizeof(float));
  free(all);
  free(ref);
  free(buf);
  ts_comm_free(c);
}

// ---- moving bytes --------------------------------------------------------------------
static void test_allgather_alltoall_sendrecv_bcast(void **state) {
  (void)state;
  ts_comm *c = world_comm();
  int mine[3] = {R, 10 * R, 100 * R}, *got = buf_alloc((size_t)3 * P * sizeof(int));
  assert_non_null(got);
  assert_int_equal(ts_comm_allgather(c, mine, got, sizeof mine, -1), TS_OK);
  for (int r = 0; r < P; r++) {
    assert_int_equal(got[3 * r], r);
    assert_int_equal(got[3 * r + 2], 100 * r);
  }
  // in place: our block already sits in the output
  memset(got, 0, (size_t)3 * P * sizeof(int));
  memcpy(got + 3 * R, mine, sizeof mine);
  assert_int_equal(ts_comm_allgather(c, got + 3 * R, got, sizeof mine, -1), TS_OK);
  for (int r = 0; r < P; r++) assert_int_equal(got[3 * r + 1], 10 * r);

  // block j to rank j: rank R receives j*1000 + R from every j
  int *send = buf_alloc((size_t)P * sizeof(int)), *recv = buf_alloc((size_t)P * sizeof(int));
  assert_non_null(send);
  assert_non_null(recv);
  for (int j = 0; j < P; j++) send[j] = R * 1000 + j;
  assert_int_equal(ts_comm_alltoall(c, send, recv, sizeof(int), -1), TS_OK);
  for (int j = 0; j < P; j++) assert_int_equal(recv[j], j * 1000 + R);

  // a ring: send right, receive from the left
  int token = 7 * R + 1, left = -1;
  assert_int_equal(ts_comm_sendrecv(c, &token, sizeof token, (R + 1) % P, &left, sizeof left,
                                    (R + P - 1) % P, -1),
                   TS_OK);
  assert_int_equal(left, 7 * ((R + P - 1) % P) + 1);
  // the same ring with buffers of different kinds on neighbouring ranks: the
  // two ends of a transfer decide their paths apart (comm_nccl.cu stages a
  // host side through the device)
  int *tok = R % 2 ? malloc(sizeof(int)) : buf_alloc(sizeof(int));
  int *from_left = R % 2 ? buf_alloc(sizeof(int)) : malloc(sizeof(int));
  assert_non_null(tok);
  assert_non_null(from_left);
  *tok = 5 * R + 3;
  *from_left = -1;
  assert_int_equal(ts_comm_sendrecv(c, tok, sizeof *tok, (R + 1) % P, from_left,
                                    sizeof *from_left, (R + P - 1) % P, -1),
                   TS_OK);
  assert_int_equal(*from_left, 5 * ((R + P - 1) % P) + 3);
  if (R % 2) {
    free(tok);
    buf_free(from_left);
  } else {
    buf_free(tok);
    free(from_left);
  }
  // one-sided halves: rank 0 sends to the last rank
  int v = R == 0 ? 42 : 0;
  if (R == 0) assert_int_equal(ts_comm_send(c, &v, sizeof v, P - 1, -1), TS_OK);
  if (R == P - 1 && P > 1) {
    assert_int_equal(ts_comm_recv(c, &v, sizeof v, 0, -1), TS_OK);
    assert_int_equal(v, 42);
  }

  double b = R == P - 1 ? 3.25 : 0.0;
  assert_int_equal(ts_comm_bcast(c, &b, sizeof b, P - 1, -1), TS_OK);
  assert_true(b == 3.25);
  assert_int_equal(ts_comm_barrier(c), TS_OK);
  buf_free(got);
  buf_free(send);
  buf_free(recv);
  ts_comm_free(c);
}

// ---- counters --------------------------------------------------------------------------
static void test_counts_and_bytes(void **state) {
  (void)state;
  ts_comm *c = world_comm();
  const size_t n = 64 * (size_t)P; // P divides n: the plain formulas apply
  float *buf = buf_alloc(n * sizeof(float));
  assert_non_null(buf);
  uint64_t q = (uint64_t)(P - 1);
  assert_int_equal(ts_comm_allreduce_tree(c, buf, n, -1), TS_OK);
  assert_int_equal(ts_comm_allreduce_tree(c, buf, n, -1), TS_OK);
  assert_int_equal(ts_comm_reduce_scatter_tree(c, buf, n, 1), TS_OK);
  ts_comm_count ar = ts_comm_total(c, TS_COMM_ALLREDUCE);
  ts_comm_count rs = ts_comm_total(c, TS_COMM_REDUCE_SCATTER);
  assert_int_equal(ar.calls, 2);
  assert_int_equal(rs.calls, 1);
  // all-reduce: 4n(P-1)/P bytes sent and as many received in each phase; in
  // a group that is not a power of two, that on average over the ranks (the
  // rank that plays several positions moves more, comm_tree.h)
  uint64_t mine[2] = {ar.bytes, rs.bytes}, sum[2];
  assert_int_equal(MPI_Allreduce(mine, sum, 2, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  assert_int_equal(sum[0], (uint64_t)P * (2 * 16 * n * q / (uint64_t)P));
  assert_int_equal(sum[1], (uint64_t)P * (8 * n * q / (uint64_t)P));
  assert_int_equal(ar.bytes, 4 * ts_comm_tree_bytes(n, P, R));
  assert_int_equal(rs.bytes, ts_comm_tree_bytes(n, P, R));
  if ((P & (P - 1)) == 0) {
    assert_int_equal(ar.bytes, 2 * 16 * n * q / (uint64_t)P);
    assert_int_equal(rs.bytes, 8 * n * q / (uint64_t)P);
  }
  assert_int_equal(ts_comm_layer(c, TS_COMM_REDUCE_SCATTER, 1).calls, 1);
  assert_int_equal(ts_comm_layer(c, TS_COMM_ALLREDUCE, 1).calls, 0);
  assert_int_equal(ts_comm_layer(c, TS_COMM_REDUCE_SCATTER, 0).calls, 0);
  // uneven chunks: rank 0 of P holds chunk 0 (n=1: the one element)
  float one = 1.0f;
  ts_comm_reset_counts(c);
  assert_int_equal(ts_comm_allreduce_tree(c, &one, 1, -1), TS_OK);
  assert_true(one == (float)P);
  assert_int_equal(ts_comm_total(c, TS_COMM_ALLREDUCE).bytes, 2 * ts_comm_tree_bytes(1, P, R));
  // collectives that only move bytes: (P-1) blocks out and (P-1) in
  int x = R, *all = buf_alloc((size_t)P * sizeof(int));
  assert_non_null(all);
  ts_comm_reset_counts(c);
  assert_int_equal(ts_comm_allgather(c, &x, all, sizeof x, 3), TS_OK);
  assert_int_equal(ts_comm_total(c, TS_COMM_ALLGATHER).bytes, 2 * q * sizeof x);
  assert_int_equal(ts_comm_layer(c, TS_COMM_ALLGATHER, 3).calls, 1);
  assert_int_equal(ts_comm_total(c, TS_COMM_ALLREDUCE).calls, 0);

  char js[1024], want[256];
  ts_comm *groups[1] = {c};
  assert_true(ts_comm_counts_json(groups, 1, js, sizeof js) > 0);
  snprintf(want, sizeof want,
           "{\"allgather\":{\"calls\":1,\"bytes\":%llu},\"layers\":{\"3\":{\"allgather\":"
           "{\"calls\":1,\"bytes\":%llu}}}}",
           (unsigned long long)(2 * q * sizeof x), (unsigned long long)(2 * q * sizeof x));
  assert_string_equal(js, want);
  assert_int_equal(ts_comm_counts_json(groups, 1, js, 8), -1); // too small: refused
  buf_free(all);
  buf_free(buf);
  ts_comm_free(c);
}

static void test_serial_comm_does_nothing_counts_nothing(void **state) {
  (void)state;
  ts_comm *c = NULL;
  assert_int_equal(ts_comm_serial(&c), TS_OK);
  float x[3] = {1.5f, -2.0f, 3.0f}, y[3];
  assert_int_equal(ts_comm_allreduce_tree(c, x, 3, -1), TS_OK);
  assert_int_equal(ts_comm_reduce_scatter_tree(c, x, 3, 0), TS_OK);
  assert_int_equal(ts_comm_allgather(c, x, y, sizeof x, -1), TS_OK);
  assert_memory_equal(x, y, sizeof x);
  assert_true(x[0] == 1.5f && x[1] == -2.0f && x[2] == 3.0f);
  assert_int_equal(ts_comm_sendrecv(c, x, sizeof x, 0, y, sizeof y, 0, -1), TS_OK);
  for (int k = 0; k < TS_COMM_NKINDS; k++)
    assert_int_equal(ts_comm_total(c, (ts_comm_kind)k).calls, 0);
  char js[64];
  assert_int_equal(ts_comm_counts_json(&c, 1, js, sizeof js), 2);
  assert_string_equal(js, "{}");
  ts_comm_free(c);
}

// ---- the grid --------------------------------------------------------------------------
static void test_grid_groups(void **state) {
  (void)state;
  ts_grid *g = NULL;
  assert_int_equal(ts_grid_create(P, 1, 1, &g), TS_OK);
  assert_int_equal(g->world_size, P);
  assert_int_equal(g->dp_rank, R);
  assert_int_equal(g->data->size, P);
  assert_int_equal(g->data->rank, R);
  assert_int_equal(g->seq->size, 1);
  ts_grid_free(g);
  // the world size must match the layout
  assert_int_equal(ts_grid_create(2 * P, 1, 1, &g), TS_EUSAGE);
  assert_non_null(strstr(ts_errmsg(), "--dp"));
  assert_non_null(strstr(ts_errmsg(), "world size"));
  if (P % 2 != 0) return;
  // dp x sp = (P/2) x 2: sequence index fastest
  assert_int_equal(ts_grid_create(P / 2, 2, 1, &g), TS_OK);
  assert_int_equal(g->sp_rank, R % 2);
  assert_int_equal(g->dp_rank, R / 2);
  assert_int_equal(g->seq->size, 2);
  assert_int_equal(g->seq->rank, R % 2);
  assert_int_equal(g->data->size, P / 2);
  assert_int_equal(g->data->rank, R / 2);
  // the sequence group is the neighbouring pair: exchange world ranks
  int other = -1;
  assert_int_equal(ts_comm_sendrecv(g->seq, &R, sizeof R, 1 - g->sp_rank, &other, sizeof other,
                                    1 - g->sp_rank, -1),
                   TS_OK);
  assert_int_equal(other, R ^ 1);
  char js[512];
  assert_true(ts_grid_counts_json(g, js, sizeof js) > 0);
  assert_non_null(strstr(js, "\"sendrecv\":{\"calls\":1,\"bytes\":8}"));
  ts_grid_free(g);
}

int main(void) {
  if (ts_mpi_init(NULL, NULL) != TS_OK) return 99;
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  MPI_Comm_rank(MPI_COMM_WORLD, &R);
  if (R != 0 && !getenv("TESSERA_TEST_ALL_RANKS")) (void)!freopen("/dev/null", "w", stdout);
#ifdef TS_TEST_NCCL
  // a GPU per rank (TS_EMU_DEVICES must give as many), as NCCL needs
  int ts_backend_cuda_init(int local_rank, int local_size, ts_precision precision, int fast,
                           const ts_backend **out);
  const ts_backend *gpu = NULL;
  if (ts_backend_cuda_init(R, P, TS_PRECISION_FP32, 0, &gpu) != TS_OK) {
    fprintf(stderr, "test_comm: %s\n", ts_errmsg());
    return 99;
  }
  const char *where = getenv("TS_TEST_BUFFERS");
  if (where && strcmp(where, "device") == 0) device = gpu;
  if (R == 0) printf("# the NCCL communicator, buffers in %s memory\n", device ? "device" : "host");
#endif
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_chunks_cover_in_rank_order),
      cmocka_unit_test(test_allreduce_tree_is_the_canonical_tree),
      cmocka_unit_test(test_allreduce_tree_in_pieces),
      cmocka_unit_test(test_reduce_scatter_tree_gives_each_rank_its_chunk),
      cmocka_unit_test(test_fast_allreduce_within_tolerance),
      cmocka_unit_test(test_groups_of_any_size),
      cmocka_unit_test(test_allgather_alltoall_sendrecv_bcast),
      cmocka_unit_test(test_counts_and_bytes),
      cmocka_unit_test(test_serial_comm_does_nothing_counts_nothing),
      cmocka_unit_test(test_grid_groups),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  // every rank exits with the verdict of all (a failure on rank 2 fails the run)
  int any = failed;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (R == 0 && any && !failed) fprintf(stderr, "test_comm: a test failed on another rank\n");
  ts_mpi_finalize();
  return any ? 1 : 0;
}
