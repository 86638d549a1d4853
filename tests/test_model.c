// Whole-model properties of the serial reference that the exactness contract
// promises: training steps do not depend on the thread count, a sequence's
// results do not depend on which other sequences share the batch, and
// activation memory grows linearly in T (no T x T buffer).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "train/optim.h"
#include "exact/rng.h"
#include "tessera.h"
#include "base/util.h"

static ts_config preset_config(const char *preset, int B, int T, float dropout, int tied) {
  ts_config c;
  memset(&c, 0, sizeof c);
  assert_int_equal(ts_config_preset(&c, preset), TS_OK);
  ts_config_defaults(&c);
  c.batch = B;
  c.seq = T;
  c.dropout = dropout;
  c.tied = tied;
  c.steps = 3;
  c.warmup = 1;
  c.tile = 0;
  c.leaf = 0;
  assert_int_equal(ts_config_finalize(&c), TS_OK);
  return c;
}

static ts_config tiny_config(int B, int T, float dropout, int tied) {
  return preset_config("tiny", B, T, dropout, tied);
}

// Both variants: GPT, and LLaMA with grouped-query attention (H 4, Hkv 2).
static const char *const variants[] = {"tiny", "llama-tiny"};

static void random_tokens(int *x, size_t n, uint64_t key) {
  for (size_t i = 0; i < n; i++) x[i] = (int)ts_rng_below(99, 7, key, i, 256);
}

// Runs `steps` full training steps and returns a copy of the parameters.
static float *train_steps(const ts_config *c, int steps, const int *inp, const int *tgt) {
  ts_model *m;
  assert_int_equal(ts_model_create(c, &m), TS_OK);
  ts_model_init(m, c->seed);
  size_t np = ts_model_num_params(m);
  int nt = ts_model_num_tensors(m);
  ts_tensor *pt = calloc((size_t)nt, sizeof *pt), *gt = calloc((size_t)nt, sizeof *gt);
  ts_model_tensors(m, pt, gt);
  ts_adamw opt;
  assert_int_equal(ts_adamw_init(&opt, np), TS_OK);
  for (int s = 0; s < steps; s++) {
    ts_model_forward(m, inp, tgt, (uint64_t)s + 1, 1);
    assert_int_equal(ts_model_backward(m, (uint64_t)s + 1), TS_OK);
    float n = ts_grad_norm(ts_model_grads(m), np);
    ts_clip(ts_model_grads(m), np, n, c->grad_clip);
    ts_adamw_update(&opt, pt, gt, nt, ts_lr_at(c, s), c->weight_decay, c->beta1, c->beta2, c->eps,
                    NULL);
  }
  float *out = malloc(np * sizeof(float));
  memcpy(out, ts_model_params(m), np * sizeof(float));
  ts_adamw_free(&opt);
  free(pt);
  free(gt);
  ts_model_free(m);
  return out;
}

static void test_thread_count_invariance(void **state) {
  (void)state;
  for (int k = 0; k < 4; k++) {
    int tied = k & 1;
    ts_config c = preset_config(variants[k / 2], 2, 64, 0.1f, tied);
    size_t n = (size_t)c.batch * c.seq;
    int *inp = malloc(n * sizeof(int)), *tgt = malloc(n * sizeof(int));
    random_tokens(inp, n, 1);
    random_tokens(tgt, n, 2);
    omp_set_num_threads(1);
    float *a = train_steps(&c, 3, inp, tgt);
    omp_set_num_threads(2);
    float *b = train_steps(&c, 3, inp, tgt);
    omp_set_num_threads(3);
    float *d = train_steps(&c, 3, inp, tgt);
    ts_model *m;
    assert_int_equal(ts_model_create(&c, &m), TS_OK);
    size_t np = ts_model_num_params(m);
    ts_model_free(m);
    assert_memory_equal(a, b, np * sizeof(float));
    assert_memory_equal(a, d, np * sizeof(float));
    free(a); free(b); free(d); free(inp); free(tgt);
  }
  omp_set_num_threads(2);
}

// Logits of sequence b are the same bits whether it is computed alone or in a
// batch: tiles never mix sequences and every call has a fixed shape (R1).
static void test_batch_composition_invariance(void **state) {
  (void)state;
  for (int k = 0; k < 2; k++) {
    ts_config c2 = preset_config(variants[k], 2, 64, 0.0f, 1);
    ts_config c1 = preset_config(variants[k], 1, 64, 0.0f, 1);
    size_t n = 2 * 64;
    int *inp = malloc(n * sizeof(int)), *tgt = malloc(n * sizeof(int));
    random_tokens(inp, n, 3);
    random_tokens(tgt, n, 4);
    ts_model *m2, *m1;
    assert_int_equal(ts_model_create(&c2, &m2), TS_OK);
    assert_int_equal(ts_model_create(&c1, &m1), TS_OK);
    ts_model_init(m2, 5);
    ts_model_init(m1, 5);
    ts_model_forward(m2, inp, tgt, 1, 0);
    for (int b = 0; b < 2; b++) {
      ts_model_forward(m1, inp + b * 64, tgt + b * 64, 1, 0);
      assert_memory_equal(ts_model_logits(m1), ts_model_logits(m2) + (size_t)b * 64 * 256,
                          64 * 256 * sizeof(float));
    }
    ts_model_free(m1);
    ts_model_free(m2);
    free(inp);
    free(tgt);
  }
}

static void test_activation_memory_linear_in_T(void **state) {
  (void)state;
  for (int k = 0; k < 2; k++) {
    size_t bytes[3], ws[3];
    int Ts[3] = {256, 512, 1024};
    for (int i = 0; i < 3; i++) {
      ts_config c = preset_config(variants[k], 1, Ts[i], 0.0f, 1);
      c.tile = 64; // same tile for all three so only T changes
      c.leaf = 64;
      ts_model *m;
      assert_int_equal(ts_model_create(&c, &m), TS_OK);
      ws[i] = ts_model_workspace_bytes(m);
      bytes[i] = ts_model_activation_bytes(m) - ws[i];
      ts_model_free(m);
    }
    // exactly linear: doubling T doubles the activation bytes
    assert_int_equal(bytes[1] - bytes[0], bytes[0]);
    assert_int_equal(bytes[2] - bytes[1], 2 * bytes[0]);
    // but the kernels' workspace, whose tree over the rows' leaves holds a
    // partial more at each doubling (more than one while the threads' window
    // of leaves is not full): it grows, and less than doubles
    assert_true(ws[0] > 0 && ws[1] > ws[0] && ws[2] > ws[1]);
    assert_true(ws[1] - ws[0] < ws[0] && ws[2] - ws[1] < ws[1]);
  }
}

// The memory-saving options (docs/ALGORITHMS.md §5) change no bit: three training
// steps with each of them, and with all three, give the parameters of the
// plain run; and each takes less activation memory.
static void test_memory_options_change_no_bit(void **state) {
  (void)state;
  for (int k = 0; k < 4; k++) {
    ts_config c = preset_config(variants[k / 2], 2, 64, 0.1f, k & 1);
    size_t n = (size_t)c.batch * c.seq;
    int *inp = malloc(n * sizeof(int)), *tgt = malloc(n * sizeof(int));
    random_tokens(inp, n, 5);
    random_tokens(tgt, n, 6);
    float *base = train_steps(&c, 3, inp, tgt);
    ts_model *m;
    assert_int_equal(ts_model_create(&c, &m), TS_OK);
    size_t np = ts_model_num_params(m), bytes0 = ts_model_activation_bytes(m);
    ts_model_free(m);
    for (int opt = 1; opt < 16; opt <<= 1) {
      ts_config o = c;
      o.checkpoint = (opt & 1) || opt == 8;
      o.fused_ce = (opt & 2) || opt == 8;
      o.tiled_mlp = (opt & 4) || opt == 8;
      float *p = train_steps(&o, 3, inp, tgt);
      assert_memory_equal(base, p, np * sizeof(float));
      free(p);
      assert_int_equal(ts_model_create(&o, &m), TS_OK);
      assert_true(ts_model_activation_bytes(m) < bytes0);
      if (o.fused_ce) assert_null(ts_model_logits(m));
      ts_model_free(m);
    }
    free(base); free(inp); free(tgt);
  }
}

// The fit check divides the machine among the processes that share it: a
// model that fits one process is refused when a hundred thousand share the
// machine (0.9 × memory / 100000 is a few hundred kB here; the tiny model's
// parameters, gradients and AdamW state alone are several MB).
static void test_fit_check_shares_the_machine(void **state) {
  (void)state;
  ts_config c = tiny_config(1, 64, 0.0f, 1);
  ts_model *m = NULL;
  assert_int_equal(ts_model_create(&c, &m), TS_OK);
  ts_model_free(m);
  ts_model_set_memory_share(100000);
  m = NULL;
  int rc = ts_model_create(&c, &m);
  ts_model_set_memory_share(1);
  assert_int_equal(rc, TS_ERUNTIME);
  assert_null(m);
  assert_non_null(strstr(ts_errmsg(), "its share: 1 of 100000 ranks"));
}

// Resident pages of [p, p + bytes), whole pages only (mincore).
static size_t resident_pages(void *p, size_t bytes) {
  const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)p / page * page;
  const size_t n = ((uintptr_t)p + bytes - a + page - 1) / page;
  unsigned char *v = malloc(n);
  assert_non_null(v);
  assert_int_equal(mincore((void *)a, (uintptr_t)p + bytes - a, v), 0);
  size_t k = 0;
  for (size_t i = 0; i < n; i++) k += v[i] & 1;
  free(v);
  return k;
}

// --zero 2 and 3 hold a layer's state only while it is in use by giving its
// pages back (src/dist/zero.c): a large ts_alloc block is resident only
// where written, ts_pages_discard gives back exactly the whole pages inside
// its range (they read as zeros), and the values beside them stay.
static void test_pages_given_back(void **state) {
  (void)state;
  const size_t n = (size_t)4 << 20; // floats: 16 MiB
  float *x = ts_alloc(n * sizeof(float));
  assert_non_null(x);
  const size_t pages = n * sizeof(float) / (size_t)sysconf(_SC_PAGESIZE);
  assert_true(resident_pages(x, n * sizeof(float)) <= 2); // zeroed, not yet written
  for (size_t i = 0; i < n; i++) x[i] = (float)(i % 1000) + 1.0f;
  assert_true(resident_pages(x, n * sizeof(float)) >= pages);
  const size_t lo = 1000003, hi = 3000017; // not on page boundaries
  ts_pages_discard(x + lo, (hi - lo) * sizeof(float));
  const size_t kept = resident_pages(x, n * sizeof(float));
  assert_true(kept <= pages + 1 - (hi - lo) * sizeof(float) / (size_t)sysconf(_SC_PAGESIZE) + 2);
  size_t zeros = 0;
  for (size_t i = 0; i < n; i++) {
    if (i < lo || i >= hi) assert_true(x[i] == (float)(i % 1000) + 1.0f); // outside: kept
    else zeros += x[i] == 0.0f;
  }
  // inside: zeros but for the two partial pages at the ends
  assert_true(zeros >= hi - lo - 2 * (size_t)sysconf(_SC_PAGESIZE) / sizeof(float));
  ts_free(x);
}

static void test_init_is_counter_based(void **state) {
  (void)state;
  // The same seed gives the same parameters; another seed different ones.
  ts_config c = tiny_config(1, 64, 0.0f, 1);
  ts_model *a, *b;
  assert_int_equal(ts_model_create(&c, &a), TS_OK);
  assert_int_equal(ts_model_create(&c, &b), TS_OK);
  ts_model_init(a, 11);
  ts_model_init(b, 11);
  size_t np = ts_model_num_params(a);
  assert_memory_equal(ts_model_params(a), ts_model_params(b), np * sizeof(float));
  ts_model_init(b, 12);
  assert_memory_not_equal(ts_model_params(a), ts_model_params(b), np * sizeof(float));
  ts_model_free(a);
  ts_model_free(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_thread_count_invariance),
      cmocka_unit_test(test_batch_composition_invariance),
      cmocka_unit_test(test_activation_memory_linear_in_T),
      cmocka_unit_test(test_init_is_counter_based),
      cmocka_unit_test(test_fit_check_shares_the_machine),
      cmocka_unit_test(test_pages_given_back),
      cmocka_unit_test(test_memory_options_change_no_bit),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
