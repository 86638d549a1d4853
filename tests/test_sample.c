// tessera sample's pieces: the incremental decoder (src/model/decode.c) gives
// the training forward's logits bit for bit, for the prompt and for every
// token fed after it, however the tokens are fed; and the sampler
// (src/text/sampler.h) is greedy at temperature 0, deterministic for a seed,
// filters as top-k and top-p say, draws in proportion to the probabilities,
// and refuses out-of-range settings naming the flag.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exact/rng.h"
#include "text/sampler.h"
#include "tessera.h"

// A model of one sequence: GPT (tied) or LLaMA (GQA: 4 heads, 2 key/value
// heads; untied), T 64, with the tile and leaf given (0: the defaults, 8
// and 8) so that a leaf of several tiles is covered too. Its weights are
// the initialisation's times 4, so that attention is far from uniform.
static ts_model *make_model(const char *preset, int tile, int leaf) {
  ts_config c;
  memset(&c, 0, sizeof c);
  assert_int_equal(ts_config_preset(&c, preset), TS_OK);
  ts_config_defaults(&c);
  c.batch = 1;
  c.seq = 64;
  c.tile = tile;
  c.leaf = leaf;
  c.dropout = 0.0f;
  assert_int_equal(ts_config_finalize(&c), TS_OK);
  ts_model *m;
  assert_int_equal(ts_model_create(&c, &m), TS_OK);
  ts_model_init(m, 21);
  float *p = ts_model_params(m);
  for (size_t i = 0; i < ts_model_num_params(m); i++) p[i] *= 4.0f;
  return m;
}

static void random_tokens(int *x, int n, uint64_t key, int V) {
  for (int i = 0; i < n; i++) x[i] = (int)ts_rng_below(5, 9, key, (uint64_t)i, (uint64_t)V);
}

// The training forward's logits (T, V) of tokens[0, n) followed by filler
// tokens that differ from call to call: a position's logits may depend only
// on the tokens up to it (causal attention).
static const float *forward_logits(ts_model *m, const int *tokens, int n, uint64_t filler) {
  const ts_config *c = ts_model_config(m);
  int *in = malloc((size_t)c->seq * sizeof(int));
  memcpy(in, tokens, (size_t)n * sizeof(int));
  random_tokens(in + n, c->seq - n, 1000 + filler, c->vocab);
  ts_model_forward(m, in, in, 0, 0);
  free(in);
  return ts_model_logits(m);
}

static const struct {
  const char *preset;
  int tile, leaf;
} models[] = {{"tiny", 0, 0}, {"tiny", 8, 32}, {"llama-tiny", 0, 0}, {"llama-tiny", 8, 32}};
#define NMODELS (sizeof models / sizeof models[0])

// The prompt's logits, fed at once, are the forward's rows bit for bit; then
// each token fed alone gives the logits of a forward over the tokens up to it.
static void test_decoder_equals_forward(void **state) {
  (void)state;
  for (size_t k = 0; k < NMODELS; k++) {
    ts_model *m = make_model(models[k].preset, models[k].tile, models[k].leaf);
    const int T = ts_model_config(m)->seq, V = ts_model_config(m)->vocab, P = 21;
    int *tok = malloc((size_t)T * sizeof(int));
    random_tokens(tok, T, k, V);
    float *got = malloc((size_t)T * V * sizeof(float));
    ts_decoder *d;
    assert_int_equal(ts_decoder_create(m, &d), TS_OK);
    assert_int_equal(ts_decoder_feed(d, tok, P, got, 1), TS_OK);
    assert_int_equal(ts_decoder_pos(d), P);
    const float *want = forward_logits(m, tok, P, 0);
    assert_memory_equal(got, want, (size_t)P * V * sizeof(float));
    for (int t = P; t < T; t++) {
      assert_int_equal(ts_decoder_feed(d, tok + t, 1, got, 0), TS_OK);
      want = forward_logits(m, tok, t + 1, (uint64_t)t);
      if (memcmp(got, want + (size_t)t * V, (size_t)V * sizeof(float)) != 0)
        fail_msg("%s tile %d leaf %d: position %d differs from the forward (%a vs %a)",
                 models[k].preset, models[k].tile, models[k].leaf, t, (double)got[0],
                 (double)want[(size_t)t * V]);
    }
    // the context is full: one more is refused
    assert_int_equal(ts_decoder_feed(d, tok, 1, got, 0), TS_EUSAGE);
    ts_decoder_free(d);
    free(tok);
    free(got);
    ts_model_free(m);
  }
}

// Fed in pieces of any length (across tiles and leaves), the same bits as fed
// whole; a token outside the vocabulary is refused and changes nothing.
static void test_decoder_feeds_in_pieces(void **state) {
  (void)state;
  for (size_t k = 0; k < NMODELS; k++) {
    ts_model *m = make_model(models[k].preset, models[k].tile, models[k].leaf);
    const int T = ts_model_config(m)->seq, V = ts_model_config(m)->vocab;
    int *tok = malloc((size_t)T * sizeof(int));
    random_tokens(tok, T, 50 + k, V);
    float *whole = malloc((size_t)T * V * sizeof(float)), *piece = malloc((size_t)T * V * sizeof(float));
    float *last = malloc((size_t)V * sizeof(float));
    ts_decoder *a, *b;
    assert_int_equal(ts_decoder_create(m, &a), TS_OK);
    assert_int_equal(ts_decoder_create(m, &b), TS_OK);
    assert_int_equal(ts_decoder_feed(a, tok, T, whole, 1), TS_OK);
    const int bad = V;
    for (int at = 0, len = 1; at < T; at += len, len = len % 23 + 5) {
      if (len > T - at) len = T - at;
      assert_int_equal(ts_decoder_feed(b, &bad, 1, last, 0), TS_EUSAGE);
      assert_int_equal(ts_decoder_feed(b, tok + at, len, piece + (size_t)at * V, 1), TS_OK);
    }
    assert_memory_equal(whole, piece, (size_t)T * V * sizeof(float));
    ts_decoder_free(a);
    ts_decoder_free(b);
    free(tok);
    free(whole);
    free(piece);
    free(last);
    ts_model_free(m);
  }
}

// ---- the sampler ---------------------------------------------------------------------
static const ts_sampling plain = {1.0f, 0, 1.0f, 7};

static int draw(ts_sampler *sm, ts_sampling s, const float *logits, uint64_t pos, double *lp) {
  int tok;
  double scratch;
  assert_int_equal(ts_sample_next(sm, &s, logits, pos, &tok, lp ? lp : &scratch), TS_OK);
  return tok;
}

static void test_sampler_settings_are_checked(void **state) {
  (void)state;
  ts_sampling s = plain;
  assert_int_equal(ts_sampling_check(&s), TS_OK);
  s.temperature = -0.5f;
  assert_int_equal(ts_sampling_check(&s), TS_EUSAGE);
  assert_non_null(strstr(ts_errmsg(), "--temperature"));
  s = plain, s.top_k = -1;
  assert_int_equal(ts_sampling_check(&s), TS_EUSAGE);
  assert_non_null(strstr(ts_errmsg(), "--top-k"));
  s = plain, s.top_p = 0.0f;
  assert_int_equal(ts_sampling_check(&s), TS_EUSAGE);
  assert_non_null(strstr(ts_errmsg(), "--top-p"));
  s.top_p = 1.01f;
  assert_int_equal(ts_sampling_check(&s), TS_EUSAGE);
  s.top_p = NAN;
  assert_int_equal(ts_sampling_check(&s), TS_EUSAGE);
}

// Temperature 0 is the argmax (the lower id on a tie), whatever the seed;
// its log-probability is the model's log softmax.
static void test_sampler_greedy(void **state) {
  (void)state;
  ts_sampler sm;
  assert_int_equal(ts_sampler_init(&sm, 6), TS_OK);
  const float logits[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f, 0.0f};
  double Z = 0.0, lp;
  for (int i = 0; i < 6; i++) Z += exp((double)logits[i] - 2.0);
  for (uint64_t seed = 0; seed < 20; seed++) {
    ts_sampling s = {0.0f, 0, 1.0f, seed};
    assert_int_equal(draw(&sm, s, logits, seed, &lp), 1);
    assert_true(fabs(lp - (0.0 - log(Z))) < 1e-12);
    s.top_k = 3, s.top_p = 0.2f; // filters do not change the argmax
    assert_int_equal(draw(&sm, s, logits, seed, NULL), 1);
  }
  // top-k 1 at any temperature is greedy too
  for (uint64_t pos = 0; pos < 50; pos++)
    assert_int_equal(draw(&sm, (ts_sampling){1.5f, 1, 1.0f, 3}, logits, pos, NULL), 1);
  float bad[6] = {0, 0, NAN, 0, 0, 0};
  int tok;
  assert_int_equal(ts_sample_next(&sm, &plain, bad, 0, &tok, &lp), TS_ERUNTIME);
  ts_sampler_free(&sm);
}

// A draw is a function of (seed, position) alone; another seed changes the sequence.
static void test_sampler_is_counter_based(void **state) {
  (void)state;
  ts_sampler sm;
  assert_int_equal(ts_sampler_init(&sm, 64), TS_OK);
  float logits[64];
  for (int i = 0; i < 64; i++) logits[i] = 0.1f * (float)(i % 7);
  int a[200], same = 0;
  for (int p = 0; p < 200; p++) a[p] = draw(&sm, plain, logits, (uint64_t)p, NULL);
  for (int p = 199; p >= 0; p--) assert_int_equal(draw(&sm, plain, logits, (uint64_t)p, NULL), a[p]);
  ts_sampling other = plain;
  other.seed = 8;
  for (int p = 0; p < 200; p++) same += draw(&sm, other, logits, (uint64_t)p, NULL) == a[p];
  assert_true(same < 40); // ~200/64 agree by chance
  ts_sampler_free(&sm);
}

// Frequencies over n draws against the kept ids' renormalised
// probabilities, within 6 standard deviations sqrt(p(1 − p)/n) (a false
// failure has probability below 1e-8); filtered-out ids never appear.
static void expect_frequencies(ts_sampler *sm, ts_sampling s, const float *logits,
                               const double *want, int V) {
  enum { n = 20000 };
  int count[8] = {0};
  for (int p = 0; p < n; p++) count[draw(sm, s, logits, (uint64_t)p, NULL)]++;
  for (int i = 0; i < V; i++) {
    const double f = (double)count[i] / n, sd = sqrt(want[i] * (1.0 - want[i]) / n);
    if (want[i] == 0.0 ? count[i] != 0 : fabs(f - want[i]) > 6.0 * sd)
      fail_msg("T %g k %d p %g: id %d drawn %.4f of the time, expected %.4f",
               (double)s.temperature, s.top_k, (double)s.top_p, i, f, want[i]);
  }
}

static void test_sampler_filters_and_proportions(void **state) {
  (void)state;
  ts_sampler sm;
  assert_int_equal(ts_sampler_init(&sm, 4), TS_OK);
  // probabilities 0.5, 0.3, 0.15, 0.05 at temperature 1
  const float logits[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
  const double all[4] = {0.5, 0.3, 0.15, 0.05}, k2[4] = {0.625, 0.375, 0, 0};
  const double p1[4] = {1, 0, 0, 0}, p79[4] = {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0};
  expect_frequencies(&sm, plain, logits, all, 4);
  expect_frequencies(&sm, (ts_sampling){1.0f, 2, 1.0f, 7}, logits, k2, 4);
  expect_frequencies(&sm, (ts_sampling){1.0f, 0, 0.45f, 7}, logits, p1, 4);
  expect_frequencies(&sm, (ts_sampling){1.0f, 0, 0.9f, 7}, logits, p79, 4);
  // top-p on what top-k kept: 0.625 reaches 0.6 of the two ids' mass
  expect_frequencies(&sm, (ts_sampling){1.0f, 2, 0.6f, 7}, logits, p1, 4);
  // temperature 2: probabilities ∝ sqrt(p); the log-probability is of that distribution
  double t2[4], Z = 0.0, lp;
  for (int i = 0; i < 4; i++) Z += t2[i] = sqrt(all[i]);
  for (int i = 0; i < 4; i++) t2[i] /= Z;
  expect_frequencies(&sm, (ts_sampling){2.0f, 0, 1.0f, 7}, logits, t2, 4);
  int tok = draw(&sm, (ts_sampling){2.0f, 3, 0.5f, 7}, logits, 3, &lp);
  assert_true(fabs(lp - log(t2[tok])) < 1e-6); // before the filters cut it (float logits)
  ts_sampler_free(&sm);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_decoder_equals_forward),
      cmocka_unit_test(test_decoder_feeds_in_pieces),
      cmocka_unit_test(test_sampler_settings_are_checked),
      cmocka_unit_test(test_sampler_greedy),
      cmocka_unit_test(test_sampler_is_counter_based),
      cmocka_unit_test(test_sampler_filters_and_proportions),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
