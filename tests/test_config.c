// Configuration: presets, tile/leaf defaults, validation messages and the
// JSON round trip (which must give back every field bit for bit, because a
// resumed run rebuilds its configuration from the checkpoint).
// cmocka.h needs these four first.
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tessera.h"

static void base(ts_config *c, const char *preset) {
  memset(c, 0, sizeof *c);
  assert_int_equal(ts_config_preset(c, preset), TS_OK);
  ts_config_defaults(c);
}

static void test_presets(void **state) {
  ts_config c;
  int n = 0;
  for (const char *const *p = ts_preset_names; *p; p++, n++) {
    base(&c, *p);
    assert_string_equal(c.preset, *p);
    assert_int_equal(c.vocab, 256);
    int llama = strncmp(*p, "llama-", 6) == 0;
    assert_int_equal(c.variant, llama ? TS_LLAMA : TS_GPT);
    assert_int_equal(c.tied, !llama); // LLaMA: untied head
    assert_true(c.dropout == 0.0f);
    if (llama) { // grouped-query attention, SwiGLU width 8d/3 rounded up to 64
      assert_true(c.n_kv_head >= 1 && c.n_kv_head < c.n_head && c.n_head % c.n_kv_head == 0);
      assert_int_equal(c.d_ff, (8 * c.d / 3 + 63) / 64 * 64);
      assert_true(c.rope_theta == 10000.0f);
    }
    assert_int_equal(ts_config_finalize(&c), TS_OK); // every preset is valid as is
  }
  assert_int_equal(n, 7);
  base(&c, "small"); // the LSS paper's 20M model
  assert_int_equal(c.d, 512);
  assert_int_equal(c.n_layer, 6);
  assert_int_equal(c.n_head, 8);
  assert_int_equal(c.d_ff, 2048);
  assert_int_equal(c.seq, 1024);
  assert_int_equal(c.batch, 4);
  base(&c, "large");
  assert_int_equal(c.d, 2048);
  assert_int_equal(c.n_layer, 24);
  assert_int_equal(c.n_head, 16);
  assert_int_equal(c.batch, 1);
  base(&c, "mini");
  assert_int_equal(c.d, 128);
  assert_int_equal(c.seq, 256);
  assert_int_equal(ts_config_preset(&c, "huge"), TS_EUSAGE);
  assert_non_null(strstr(ts_errmsg(), "--model huge"));
}

static void test_defaults(void **state) {
  ts_config c;
  base(&c, "tiny");
  assert_int_equal(c.seed, 1337);
  assert_int_equal(c.steps, 100);
  assert_true(c.lr == 1e-3f && c.min_lr_frac == 0.1f && c.weight_decay == 0.1f);
  assert_true(c.beta1 == 0.9f && c.beta2 == 0.95f && c.eps == 1e-8f && c.grad_clip == 1.0f);
  assert_int_equal(c.warmup, 10);
  assert_true(c.val_frac == 0.1f);
  assert_int_equal(c.eval_batches, 4);
  // the bundled corpus: data/corpus.txt of the working directory when there
  // is one (a checkout), else the installed or the source tree's copy, which
  // this test's build always has
  const char *suffix = "corpus.txt";
  const size_t n = strlen(c.data_path), k = strlen(suffix);
  assert_true(n >= k && strcmp(c.data_path + n - k, suffix) == 0);
  assert_int_equal(access(c.data_path, R_OK), 0);
  if (access("data/corpus.txt", R_OK) != 0) assert_true(c.data_path[0] == '/');
  assert_int_equal(ts_config_finalize(&c), TS_OK);
  assert_int_equal(c.tile, 8); // T = 64: T/8
  assert_int_equal(c.leaf, 8);
}

static void test_tile_leaf_rule(void **state) {
  // T -> (tile, leaf): min(64, pow2 <= T/8), min(256, pow2 <= T/8), leaf >= tile
  static const int table[][3] = {
      {8, 1, 1},       {64, 8, 8},      {100, 8, 8},     {256, 32, 32},  {512, 64, 64},
      {1024, 64, 128}, {2048, 64, 256}, {4096, 64, 256}, {1000, 64, 64}, {1 << 20, 64, 256},
  };
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    assert_int_equal(ts_default_tile(table[i][0]), table[i][1]);
    assert_int_equal(ts_default_leaf(table[i][0]), table[i][2]);
  }
}

// finalize on a tiny config with one change must fail naming `flag`.
static void expect_usage(void (*change)(ts_config *), const char *want) {
  ts_config c;
  base(&c, "tiny");
  change(&c);
  assert_int_equal(ts_config_finalize(&c), TS_EUSAGE);
  if (strstr(ts_errmsg(), want) == NULL) fail_msg("want \"%s\", got \"%s\"", want, ts_errmsg());
}

static void seq100(ts_config *c) { c->seq = 100; }
static void heads3(ts_config *c) { c->n_head = 3; }
static void seq4(ts_config *c) { c->seq = 4; }
static void tile3(ts_config *c) { c->tile = 3; }
static void leaf_small(ts_config *c) { c->tile = 8, c->leaf = 4; }
static void leaf_big(ts_config *c) { c->leaf = 128; }
static void drop(ts_config *c) { c->dropout = 1.5f; }
static void drop1(ts_config *c) { c->dropout = 1.0f; }
static void lr0(ts_config *c) { c->lr = 0.0f; }
static void lrnan(ts_config *c) { c->lr = NAN; }
static void steps0(ts_config *c) { c->steps = -3; }
static void batch0(ts_config *c) { c->batch = 0; }
static void warm(ts_config *c) { c->warmup = -1; }
static void eps0(ts_config *c) { c->eps = 0.0f; }
static void beta1_1(ts_config *c) { c->beta1 = 1.0f; }
static void beta2_neg(ts_config *c) { c->beta2 = -0.5f; }
static void eps_inf(ts_config *c) { c->eps = INFINITY; }
static void keep_neg(ts_config *c) { c->keep_last = -1; }
static void keep_nodir(ts_config *c) { c->keep_last = 3; }
static void log_neg(ts_config *c) { c->log_every = -2; }
static void clip(ts_config *c) { c->grad_clip = -1.0f; }
static void vf0(ts_config *c) { c->val_frac = 0.0f; }
static void vf1(ts_config *c) { c->val_frac = 1.0f; }
static void thr(ts_config *c) { c->threads = -1; }
static void thr_big(ts_config *c) { c->threads = 100000; }
static void thr_max(ts_config *c) { c->threads = TS_MAX_THREADS + 1; }
static void sw_ckpt(ts_config *c) { c->checkpoint = 2; }
static void sw_quiet(ts_config *c) { c->quiet = -1; }
static void eb(ts_config *c) { c->eval_batches = 0; }
static void ck(ts_config *c) { c->ckpt_every = -1; }
static void ckdir(ts_config *c) { c->ckpt_every = 5; }
static void resume(ts_config *c) { c->resume = 1; }
static void vocab1(ts_config *c) { c->vocab = 1; }
static void vocab_bytes(ts_config *c) { c->vocab = 255, c->data_format = TS_DATA_BYTES; }
static void fmt_bad(ts_config *c) { c->data_format = TS_DATA_NFORMATS; }

static void test_validation(void **state) {
  expect_usage(seq100, "--seq 100: must be a multiple of the tile (8)");
  expect_usage(heads3, "--heads 3: must divide --d (64)");
  expect_usage(seq4, "--seq 4");
  expect_usage(tile3, "--tile 3: must be a power of two");
  expect_usage(leaf_small, "--leaf 4: must be a multiple of the tile (8)");
  expect_usage(leaf_big, "--seq 64: must be a multiple of the leaf (128)");
  expect_usage(drop, "--dropout 1.5");
  expect_usage(drop1, "--dropout 1");
  expect_usage(lr0, "--lr 0");
  expect_usage(lrnan, "--lr");
  expect_usage(steps0, "--steps -3");
  expect_usage(batch0, "--batch 0");
  expect_usage(warm, "--warmup -1");
  expect_usage(eps0, "--eps 0: must be > 0");
  expect_usage(beta1_1, "--beta1 1: must be in [0, 1)");
  expect_usage(beta2_neg, "--beta2 -0.5: must be in [0, 1)");
  expect_usage(eps_inf, "--eps inf");
  expect_usage(keep_neg, "--keep-last -1: must be >= 0");
  expect_usage(keep_nodir, "--keep-last 3: needs --ckpt-dir");
  expect_usage(log_neg, "--log-every -2: must be >= 1");
  expect_usage(clip, "--grad-clip -1");
  expect_usage(vf0, "--val-frac 0");
  expect_usage(vf1, "--val-frac 1");
  expect_usage(thr, "--threads -1");
  expect_usage(thr_big, "--threads 100000: must be in [0, 1024]");
  expect_usage(thr_max, "--threads 1025");
  expect_usage(sw_ckpt, "--checkpoint 2: a switch");
  expect_usage(sw_quiet, "--quiet -1: a switch");
  expect_usage(eb, "--eval-batches 0");
  expect_usage(ck, "--ckpt-every -1");
  expect_usage(ckdir, "--ckpt-every 5: needs --ckpt-dir");
  expect_usage(resume, "--resume: needs --ckpt-dir");
  expect_usage(vocab1, "--vocab 1: must be >= 2");
  expect_usage(vocab_bytes, "--vocab 255: --data-format bytes has token ids 0..255");
  expect_usage(fmt_bad, "--data-format 4: unknown");

  // an explicit tile larger than the default leaf pulls the leaf up with it
  ts_config c;
  base(&c, "tiny");
  c.tile = 16;
  assert_int_equal(ts_config_finalize(&c), TS_OK);
  assert_int_equal(c.leaf, 16);
  // the largest thread count is valid
  base(&c, "tiny");
  c.threads = TS_MAX_THREADS;
  assert_int_equal(ts_config_finalize(&c), TS_OK);
  // grad_clip 0 turns clipping off and is valid
  base(&c, "tiny");
  c.grad_clip = 0.0f;
  assert_int_equal(ts_config_finalize(&c), TS_OK);
  // any vocabulary of two or more: a token file's ids need not be bytes, and
  // a detected format is checked against it when the run resolves it
  base(&c, "tiny");
  c.vocab = 2;
  assert_int_equal(c.data_format, TS_DATA_DETECT);
  assert_int_equal(ts_config_finalize(&c), TS_OK);
  c.data_format = TS_DATA_U16;
  assert_int_equal(ts_config_finalize(&c), TS_OK);
}

// Fills every field with a value unlike the defaults, including floats that
// "%.9g" alone would not survive if parsed carelessly (subnormal, -0, odd bits).
static void awkward(ts_config *c) {
  memset(c, 0, sizeof *c);
  snprintf(c->preset, sizeof c->preset, "we\"ird\\name");
  c->variant = TS_GPT;
  c->vocab = 257;
  c->d = 96;
  c->n_layer = 3;
  c->n_head = 6;
  c->d_ff = 384;
  c->seq = 4096;
  c->tied = 0;
  c->dropout = nextafterf(0.1f, 1.0f);
  c->batch = 3;
  c->steps = 123456;
  c->seed = 0xfedcba9876543210ull; // above 2^53: must not pass through a double
  c->tile = 32;
  c->leaf = 512;
  c->lr = 3.0e-4f;
  c->min_lr_frac = 1e-40f; // subnormal
  c->weight_decay = -0.0f;
  c->beta1 = nextafterf(0.9f, 0.0f);
  c->beta2 = 0.999f;
  c->eps = 1.17549435e-38f;
  c->grad_clip = 3.40282347e+38f;
  c->warmup = 7;
  c->lr_schedule = TS_LR_WSD;
  c->decay_frac = 1.0f / 3.0f;
  c->val_frac = 1.0f / 3.0f;
  c->eval_every = 11;
  c->eval_batches = 13;
  c->threads = 2;
  c->fast = 1;
  c->optimizer = TS_OPT_MUON_PE;
  c->muon_lr = 0.03f;
  c->checkpoint = 1; // written only when set: one set, one not
  c->fused_ce = 1;
  c->compress = TS_COMPRESS_MAPL_VQ;
  c->compress_rank = 24;
  c->compress_stages = 3;
  c->proj_lr = 1.0f / 7.0f;
  c->vq_groups = 3, c->vq_rounds = 2, c->vq_codes = 200, c->vq_sync_codes = 9;
  c->vq_gamma = 0.97f, c->vq_commit = 0.1f;
  c->mapl_anchor = TS_ANCHOR_STATIC;
  c->data_format = TS_DATA_U32;
  snprintf(c->data_path, sizeof c->data_path, "/tmp/dir with spaces/\t\"quoted\"\n\x01.txt");
  snprintf(c->val_path, sizeof c->val_path, "val\\\x02 \"x\".bin");
  snprintf(c->log_path, sizeof c->log_path, "caf\xc3\xa9/run.jsonl");
  snprintf(c->ckpt_dir, sizeof c->ckpt_dir, "ckpt\\dir");
  snprintf(c->init_from, sizeof c->init_from, "base/\"step\"-00000100.safetensors");
  c->ckpt_every = 17;
  c->resume = 1;
  c->quiet = 1;
}

static void test_json_round_trip(void **state) {
  ts_config a, b;
  char json[16384];
  awkward(&a);
  assert_int_equal(ts_config_to_json(&a, json, sizeof json), TS_OK);
  assert_int_equal(json[0], '{');
  assert_null(strchr(json, '\n'));                        // one line in the log
  assert_non_null(strstr(json, "\"lr\":0.000300000014")); // "%.9g" for people
  assert_non_null(strstr(json, "\"seed\":18364758544493064720"));
  memset(&b, 0, sizeof b);
  assert_int_equal(ts_config_from_json(&b, json), TS_OK);
  // every field, every bit (both structs were zeroed, so padding and string
  // tails compare too)
  assert_memory_equal(&a, &b, sizeof a);

  // a default configuration survives as well
  ts_config c, d;
  base(&c, "small");
  assert_int_equal(ts_config_finalize(&c), TS_OK);
  assert_int_equal(ts_config_to_json(&c, json, sizeof json), TS_OK);
  memset(&d, 0, sizeof d);
  assert_int_equal(ts_config_from_json(&d, json), TS_OK);
  assert_memory_equal(&c, &d, sizeof c);
  assert_non_null(strstr(json, "\"data_format\":\"detect\"")); // a config no run resolved

  // bytes and no validation file write nothing new (golden files stay as
  // they were); every other format is written by its flag's name
  c.data_format = TS_DATA_BYTES;
  assert_int_equal(ts_config_to_json(&c, json, sizeof json), TS_OK);
  assert_null(strstr(json, "data_format"));
  assert_null(strstr(json, "val_path"));
  for (int f = TS_DATA_U16; f < TS_DATA_NFORMATS; f++) {
    c.data_format = f;
    assert_int_equal(ts_config_to_json(&c, json, sizeof json), TS_OK);
    char want[64];
    snprintf(want, sizeof want, "\"data_format\":\"%s\"", ts_data_format_names[f]);
    assert_non_null(strstr(json, want));
    memset(&d, 0, sizeof d);
    assert_int_equal(ts_config_from_json(&d, json), TS_OK);
    assert_int_equal(d.data_format, f);
  }
  // the MAPL anchor: factorised (the default) is left out, and a file
  // without the field (every one before it) reads factorised; the others
  // are written by name and read back
  c.data_format = TS_DATA_BYTES;
  assert_int_equal(c.mapl_anchor, TS_ANCHOR_FACTORISED);
  assert_int_equal(ts_config_to_json(&c, json, sizeof json), TS_OK);
  assert_null(strstr(json, "mapl_anchor"));
  for (int k = 0; k < TS_ANCHOR_NKINDS; k++) {
    c.mapl_anchor = k;
    assert_int_equal(ts_config_to_json(&c, json, sizeof json), TS_OK);
    char want[64];
    snprintf(want, sizeof want, "\"mapl_anchor\":\"%s\"", ts_mapl_anchor_names[k]);
    assert_true(k == TS_ANCHOR_FACTORISED ? !strstr(json, want) : !!strstr(json, want));
    memset(&d, 0, sizeof d);
    assert_int_equal(ts_config_from_json(&d, json), TS_OK);
    assert_int_equal(d.mapl_anchor, k);
  }
  assert_int_equal(ts_config_to_json(&c, json, sizeof json), TS_OK);
  char *at = strstr(json, "\"full\"");
  assert_non_null(at);
  memcpy(at, "\"fuul\"", 6); // an unknown kind is refused, not read as another
  memset(&d, 0, sizeof d);
  assert_int_not_equal(ts_config_from_json(&d, json), TS_OK);
  c.mapl_anchor = TS_ANCHOR_FACTORISED;
}

// A checkpoint's configuration is two records: the computation and the run's
// own settings. Read back one over the other they are the whole
// configuration, bit for bit; the computation is the same whatever the run
// settings and memory options are (ts_config_drop_run_settings' fields, the
// memory options: the two lists agree); the run record refuses anything else.
static void test_json_parts(void **state) {
  ts_config a, b, c;
  char comp[16384], run[16384], comp2[16384];
  awkward(&a);
  a.tiled_mlp = 1;
  assert_int_equal(ts_config_computation_json(&a, 0, comp, sizeof comp), TS_OK);
  assert_int_equal(ts_config_run_json(&a, "dp2-sp2-lss-zero3", "0123456789abcdef", run, sizeof run),
                   TS_OK);
  assert_null(strstr(comp, "threads"));
  assert_null(strstr(comp, "data_path"));
  assert_null(strstr(comp, "fused_ce"));
  assert_non_null(
      strstr(run, "\"layout\":\"dp2-sp2-lss-zero3\",\"run_id\":\"0123456789abcdef\""));
  assert_null(strstr(run, "\"seed\""));
  memset(&b, 0, sizeof b);
  assert_int_equal(ts_config_from_json(&b, comp), TS_OK);
  assert_int_equal(ts_config_run_from_json(&b, run), TS_OK);
  assert_memory_equal(&a, &b, sizeof a);
  c = a;
  ts_config_drop_run_settings(&c);
  c.checkpoint = c.fused_ce = c.tiled_mlp = 0;
  assert_int_equal(ts_config_computation_json(&c, 0, comp2, sizeof comp2), TS_OK);
  assert_string_equal(comp, comp2);
  assert_int_equal(ts_config_run_from_json(&b, "{\"threads\":2,\"d\":128}"), TS_ERUNTIME);
  assert_non_null(strstr(ts_errmsg(), "\"d\""));
  assert_int_equal(ts_config_run_from_json(&b, "{\"threads\":2,\"lr_hex\":\"0x1p-3\"}"),
                   TS_ERUNTIME);
}

static void test_json_errors(void **state) {
  ts_config a, b;
  char json[16384];
  awkward(&a);
  assert_int_equal(ts_config_to_json(&a, json, 64), TS_ERUNTIME); // too small
  assert_int_equal(ts_config_to_json(&a, json, sizeof json), TS_OK);
  // truncation anywhere is an error, never a silently partial config
  size_t n = strlen(json);
  for (size_t cut = 0; cut < n; cut += 37) {
    char *t = strndup(json, cut);
    memset(&b, 0, sizeof b);
    assert_int_not_equal(ts_config_from_json(&b, t), TS_OK);
    free(t);
  }
  memset(&b, 0, sizeof b);
  assert_int_equal(ts_config_from_json(&b, "{\"d\":64}"), TS_ERUNTIME);
  assert_non_null(strstr(ts_errmsg(), "missing"));
  assert_int_equal(ts_config_from_json(&b, "{\"d\":\"64\"}"), TS_ERUNTIME);
  assert_non_null(strstr(ts_errmsg(), "\"d\""));
  assert_int_equal(ts_config_from_json(&b, "{\"d\":6.5}"), TS_ERUNTIME);
  assert_int_equal(ts_config_from_json(&b, "{\"seed\":-1}"), TS_ERUNTIME);
  assert_int_equal(ts_config_from_json(&b, "{\"variant\":\"rnn\"}"), TS_ERUNTIME);
  assert_int_equal(ts_config_from_json(&b, "{\"data_format\":\"u8\"}"), TS_ERUNTIME);
  assert_non_null(strstr(ts_errmsg(), "\"data_format\""));
  assert_int_equal(ts_config_from_json(&b, "{\"data_format\":1}"), TS_ERUNTIME);
  assert_int_equal(ts_config_from_json(&b, "[1]"), TS_ERUNTIME);
  // order, whitespace, unknown and nested keys do not matter; hex wins
  const char *ok = " { \"extra\": {\"a\": [1, \"}\"]}, \"seq\": 64, \"vocab\": 256, \"d\": 64,"
                   " \"n_layer\": 2, \"n_head\": 4, \"d_ff\": 256, \"tied\": 1,"
                   " \"dropout_hex\": \"0x1p-3\", \"dropout\": 0.2, \"variant\": \"gpt\" } ";
  memset(&b, 0, sizeof b);
  assert_int_equal(ts_config_from_json(&b, ok), TS_OK);
  assert_true(b.dropout == 0.125f);
  assert_int_equal(b.d_ff, 256);
}

// --init-from's comparison: training settings may differ, not the tensors
// nor what they compute; GPT's seq sizes wpe, LLaMA's seq no tensor.
static void test_architecture_json(void **state) {
  (void)state;
  ts_config a, b;
  char ja[TS_CONFIG_JSON_MAX], jb[TS_CONFIG_JSON_MAX], key[64];
  const char *presets[] = {"tiny", "llama-tiny"};
  for (int k = 0; k < 2; k++) {
    base(&a, presets[k]);
    assert_int_equal(ts_config_finalize(&a), TS_OK);
    b = a;
    b.lr = 0.5f, b.steps = 7, b.seed = 3, b.dropout = 0.25f, b.batch = 2, b.warmup = 0;
    b.beta2 = 0.99f, b.lr_schedule = TS_LR_WSD, b.decay_frac = 0.5f, b.tile = 4, b.leaf = 16;
    b.optimizer = TS_OPT_MUON, b.fast = 1, b.weight_decay = 0.0f;
    snprintf(b.data_path, sizeof b.data_path, "other.bin");
    b.data_format = TS_DATA_U16;
    assert_int_equal(ts_config_architecture_json(&a, ja, sizeof ja), TS_OK);
    assert_int_equal(ts_config_architecture_json(&b, jb, sizeof jb), TS_OK);
    ts_config_json_difference(ja, jb, key, sizeof key);
    assert_string_equal(key, "");
    b.seq = 2 * a.seq;
    assert_int_equal(ts_config_architecture_json(&b, jb, sizeof jb), TS_OK);
    ts_config_json_difference(ja, jb, key, sizeof key);
    assert_string_equal(key, k == 0 ? "seq" : ""); // GPT's wpe has seq rows
    b.d_ff = a.d_ff + 64;
    assert_int_equal(ts_config_architecture_json(&b, jb, sizeof jb), TS_OK);
    ts_config_json_difference(ja, jb, key, sizeof key);
    assert_string_equal(key, "d_ff"); // the first that differs, in the JSON's order
    b = a;
    b.tied = !a.tied;
    assert_int_equal(ts_config_architecture_json(&b, jb, sizeof jb), TS_OK);
    ts_config_json_difference(ja, jb, key, sizeof key);
    assert_string_equal(key, "tied");
  }
  base(&a, "llama-tiny");
  assert_int_equal(ts_config_finalize(&a), TS_OK);
  b = a;
  b.rope_theta = 500000.0f; // no shape shows it
  assert_int_equal(ts_config_architecture_json(&a, ja, sizeof ja), TS_OK);
  assert_int_equal(ts_config_architecture_json(&b, jb, sizeof jb), TS_OK);
  ts_config_json_difference(ja, jb, key, sizeof key);
  assert_string_equal(key, "rope_theta");
  b = a;
  b.n_kv_head = 1; // neither does the grouping of the heads
  assert_int_equal(ts_config_architecture_json(&b, jb, sizeof jb), TS_OK);
  ts_config_json_difference(ja, jb, key, sizeof key);
  assert_string_equal(key, "n_kv_head");
  b = a;
  b.mapl_anchor = TS_ANCHOR_FULL; // the anchor's tensors are the model's
  assert_int_equal(ts_config_architecture_json(&b, jb, sizeof jb), TS_OK);
  ts_config_json_difference(ja, jb, key, sizeof key);
  assert_string_equal(key, "mapl_anchor");
}

// The table behind the JSON form and the ranks' agreement has every field of
// ts_config: sorted by offset the fields tile the struct exactly, with no
// padding between them or at the end (the struct is laid out so, its 8-byte
// seed first). A field added to the struct and not to the table then moves
// an offset or the size and fails here, so that no field escapes the ranks'
// agreement unsaid: not even one slipped into what would have been padding.
static void test_fields_cover_config(void **state) {
  (void)state;
  ts_config_field f[128];
  int n = 0;
  while (n < 128 && ts_config_field_at(n, &f[n])) n++;
  assert_true(n > 0 && n < 128);
  for (int i = 1; i < n; i++) // insertion sort by offset
    for (int j = i; j > 0 && f[j].offset < f[j - 1].offset; j--) {
      ts_config_field t = f[j];
      f[j] = f[j - 1], f[j - 1] = t;
    }
  size_t end = 0;
  for (int i = 0; i < n; i++) {
    if (f[i].offset < end) fail_msg("\"%s\" overlaps the field before it", f[i].key);
    if (f[i].offset != end)
      fail_msg("ts_config: %zu bytes at offset %zu, before \"%s\", are no field of config_json.c's "
               "table: add the new field there (or, if they are padding, order the struct's "
               "fields so that there is none)", f[i].offset - end, end, f[i].key);
    assert_true(f[i].size > 0 && f[i].flag[0] == '-' && f[i].flag[1] == '-');
    end = f[i].offset + f[i].size;
  }
  if (sizeof(ts_config) != end)
    fail_msg("ts_config: its last %zu bytes are no field of config_json.c's table (or padding: "
             "order the fields so that there is none)", sizeof(ts_config) - end);
}

// The ranks' agreement: a change of any field is named by its flag, with both
// values, but for the fields each rank holds its own; an input path counts as
// given or not (what it holds is compared apart).
static void test_agreement(void **state) {
  (void)state;
  static char ja[TS_CONFIG_JSON_MAX], jb[TS_CONFIG_JSON_MAX];
  ts_config a, b;
  ts_config_difference d;
  ts_config_field f;
  base(&a, "tiny");
  assert_int_equal(ts_config_finalize(&a), TS_OK);
  assert_int_equal(ts_config_agreement_json(&a, ja, sizeof ja), TS_OK);
  assert_int_equal(ts_config_agreement_difference(ja, ja, &d), 0);
  for (int i = 0; ts_config_field_at(i, &f); i++) {
    b = a;
    unsigned char *p = (unsigned char *)&b + f.offset;
    if (f.align == 1) // a string: another one, or (an input's) a path given against none
      snprintf((char *)p, f.size, "%s", p[0] ? "" : "x");
    else
      p[0] ^= 1; // an int's, a float's lowest bit; a seed's
    assert_int_equal(ts_config_agreement_json(&b, jb, sizeof jb), TS_OK);
    const int differ = ts_config_agreement_difference(ja, jb, &d);
    if (f.agree == TS_AGREE_PER_RANK) {
      if (differ) fail_msg("\"%s\" is each rank's own, yet %s is said to differ", f.key, d.flag);
      continue;
    }
    if (!differ) fail_msg("a different \"%s\" (%s) goes unnoticed", f.key, f.flag);
    assert_string_equal(d.flag, f.flag);
    assert_string_not_equal(d.a, d.b);
  }
  // the values as people read them
  b = a;
  b.eval_every = 1;
  assert_int_equal(ts_config_agreement_json(&b, jb, sizeof jb), TS_OK);
  assert_int_equal(ts_config_agreement_difference(ja, jb, &d), 1);
  assert_string_equal(d.flag, "--eval-every");
  assert_string_equal(d.a, "0");
  assert_string_equal(d.b, "1");
  b = a;
  b.lr = nextafterf(a.lr, 1.0f); // one ulp: the decimal form tells them apart
  assert_int_equal(ts_config_agreement_json(&b, jb, sizeof jb), TS_OK);
  assert_int_equal(ts_config_agreement_difference(ja, jb, &d), 1);
  assert_string_equal(d.flag, "--lr");
  assert_true(strtof(d.a, NULL) == a.lr && strtof(d.b, NULL) == b.lr);
  b = a;
  snprintf(b.ckpt_dir, sizeof b.ckpt_dir, "ck");
  assert_int_equal(ts_config_agreement_json(&b, jb, sizeof jb), TS_OK);
  assert_int_equal(ts_config_agreement_difference(ja, jb, &d), 1);
  assert_string_equal(d.flag, "--ckpt-dir");
  assert_string_equal(d.a, "\"\"");
  assert_string_equal(d.b, "\"ck\"");
  // a copy of the data elsewhere is the same data (its digest is compared)
  b = a;
  snprintf(b.data_path, sizeof b.data_path, "/elsewhere/corpus.txt");
  assert_int_equal(ts_config_agreement_json(&b, jb, sizeof jb), TS_OK);
  assert_int_equal(ts_config_agreement_difference(ja, jb, &d), 0);
  snprintf(b.val_path, sizeof b.val_path, "val.bin");
  assert_int_equal(ts_config_agreement_json(&b, jb, sizeof jb), TS_OK);
  assert_int_equal(ts_config_agreement_difference(ja, jb, &d), 1);
  assert_string_equal(d.flag, "--val-data");
  assert_string_equal(d.a, "not given");
  assert_string_equal(d.b, "given");
  // a path too long to show is cut, the line stays short
  b = a;
  memset(b.log_path, 'p', sizeof b.log_path - 1);
  b.log_path[sizeof b.log_path - 1] = 0;
  assert_int_equal(ts_config_agreement_json(&b, jb, sizeof jb), TS_OK);
  assert_int_equal(ts_config_agreement_difference(ja, jb, &d), 1);
  assert_string_equal(d.flag, "--log");
  assert_true(strlen(d.b) < sizeof d.b && strstr(d.b, "...\"") != NULL);
  // the JSON form of logs and checkpoints is as it was: the unwritten fields
  // stay out of it, and are not read from it
  b = a;
  b.keep_last = 3, b.log_every = 5;
  assert_int_equal(ts_config_to_json(&b, jb, sizeof jb), TS_OK);
  assert_null(strstr(jb, "keep_last"));
  assert_null(strstr(jb, "log_every"));
  assert_int_equal(ts_config_run_from_json(&b, "{\"keep_last\":7,\"threads\":2}"), TS_OK);
  assert_int_equal(b.keep_last, 3);
}

// Layouts (ts_layout_check): exact data parallelism needs every rank's
// gradient leaves to be an aligned power-of-two subtree of the serial tree.
static void test_layout_rules(void **state) {
  (void)state;
  ts_config c;
  base(&c, "tiny"); // B 4, T 64, leaf 8: 4 x 8 = 32 leaves
  assert_int_equal(ts_config_finalize(&c), TS_OK);
  ts_layout lay = {1, 1, 1, TS_SP_LSS, 0, -1, 1, 1, 0, 0};
  assert_int_equal(ts_layout_check(&c, &lay, NULL), TS_OK);
  lay.dp = 2; // 2 sequences x 8 leaves per rank
  assert_int_equal(ts_layout_check(&c, &lay, NULL), TS_OK);
  lay.dp = 4;
  assert_int_equal(ts_layout_check(&c, &lay, NULL), TS_OK);
  lay.dp = 3; // not a power of two
  assert_int_equal(ts_layout_check(&c, &lay, NULL), TS_EUSAGE);
  assert_non_null(strstr(ts_errmsg(), "--dp 3"));
  lay.dp = 8; // 4 sequences cannot be split over 8 ranks
  assert_int_equal(ts_layout_check(&c, &lay, NULL), TS_EUSAGE);
  assert_non_null(strstr(ts_errmsg(), "--batch 4"));
  c.batch = 6; // 3 sequences x 8 leaves per rank: not a subtree
  lay.dp = 2;
  assert_int_equal(ts_layout_check(&c, &lay, NULL), TS_EUSAGE);
  assert_non_null(strstr(ts_errmsg(), "power of two"));
  c.fast = 1; // fast mode sums with MPI and only needs whole sequences
  assert_int_equal(ts_layout_check(&c, &lay, NULL), TS_OK);
  c.fast = 0;
  c.batch = 4;
  ts_layout pp = {1, 1, 2, TS_SP_LSS, 0, -1, 1, 1, 0, 0}, zero = {0, 1, 1, TS_SP_LSS, 0, -1, 1, 1, 0, 0};
  assert_int_equal(ts_layout_check(&c, &pp, NULL), TS_OK); // a tied head runs in a pipeline too
  pp.pp = 3; // 2 layers
  assert_int_equal(ts_layout_check(&c, &pp, NULL), TS_EUSAGE);
  assert_non_null(strstr(ts_errmsg(), "--pp 3: the 2 layers must divide into 3 stages"));
  // fewer sequences than data ranks is named as such before the pipeline's
  // rules count them (once a division by zero in the microbatch rule)
  ts_layout grid = {2, 2, 2, TS_SP_LSS, 0, -1, 1, 1, 0, 2};
  c.batch = 1;
  assert_int_equal(ts_layout_check(&c, &grid, NULL), TS_EUSAGE);
  assert_non_null(strstr(ts_errmsg(), "--batch 1: must be divisible by --dp 2"));
  c.batch = 4;
  assert_int_equal(ts_layout_check(&c, &zero, NULL), TS_EUSAGE);
  // what a device has not built is refused here too, not only by the CLI
  ts_layout z2 = {2, 1, 1, TS_SP_LSS, 0, -1, 1, 1, 0, 0};
  z2.zero = 2;
  assert_int_equal(ts_layout_check(&c, &z2, "cpu"), TS_OK);
  assert_int_equal(ts_layout_check(&c, &z2, "cuda"), TS_EUSAGE);
  assert_non_null(strstr(ts_errmsg(), "--zero 2 with --device cuda"));
  z2.zero = 1;
  assert_int_equal(ts_layout_check(&c, &z2, "cuda"), TS_OK);
  ts_layout host = {1, 2, 1, TS_SP_LSS_ZIGZAG, 0, -1, 1, 1, 0, 0};
  assert_int_equal(ts_layout_check(&c, &host, NULL), TS_OK);
  assert_int_equal(ts_layout_check(&c, &host, "cuda"), TS_EUSAGE);
  assert_non_null(strstr(ts_errmsg(), "with --device cuda: not built"));
  host.sp_mode = TS_SP_LSS_DX; // the paper's dx backward: host memory of its own
  assert_int_equal(ts_layout_check(&c, &host, NULL), TS_OK);
  assert_int_equal(ts_layout_check(&c, &host, "cuda"), TS_EUSAGE);
  assert_non_null(strstr(ts_errmsg(), "--sp-mode lss-dx with --device cuda: not built"));
  // the LSS paper's baseline reads its T x T buffers on the host
  ts_layout base2022 = {1, 2, 1, TS_SP_MEGATRON_2022, 0, -1, 1, 1, 0, 0};
  assert_int_equal(ts_layout_check(&c, &base2022, "cuda"), TS_EUSAGE);
  assert_non_null(strstr(ts_errmsg(), "--sp-mode megatron-2022 with --device cuda: not built"));
}

// Sequence parallelism (tiny: T 64, tile 8, leaf 8): each segment must hold
// a power of two of whole tiles and leaves; any power-of-two group up to 8.
static void test_sequence_layout_rules(void **state) {
  (void)state;
  ts_config c;
  base(&c, "tiny");
  assert_int_equal(ts_config_finalize(&c), TS_OK);
  ts_layout lay = {1, 1, 1, TS_SP_LSS, 0, -1, 1, 1, 0, 0};
  for (int n = 1; n <= 8; n *= 2) {
    lay.sp = n;
    assert_int_equal(ts_layout_check(&c, &lay, NULL), TS_OK);
  }
  lay.dp = 2; // composes with data parallelism
  assert_int_equal(ts_layout_check(&c, &lay, NULL), TS_OK);
  lay.dp = 1;
  lay.sp = 3;
  assert_int_equal(ts_layout_check(&c, &lay, NULL), TS_EUSAGE);
  assert_non_null(strstr(ts_errmsg(), "--sp 3: must be a power of two"));
  lay.sp = 16; // 4 tokens per segment: less than a tile
  assert_int_equal(ts_layout_check(&c, &lay, NULL), TS_EUSAGE);
  assert_non_null(strstr(ts_errmsg(), "--sp 16 segments of whole tiles"));
  c.seq = 96; // 48 tokens per segment: 6 tiles
  lay.sp = 2;
  assert_int_equal(ts_layout_check(&c, &lay, NULL), TS_EUSAGE);
  assert_non_null(strstr(ts_errmsg(), "power of two of tiles"));
  c.fast = 1; // --fast sums with MPI: whole tiles and leaves are enough
  assert_int_equal(ts_layout_check(&c, &lay, NULL), TS_OK);
  lay.sp = 3; // 32 tokens each
  assert_int_equal(ts_layout_check(&c, &lay, NULL), TS_OK);
  lay.sp = 0;
  assert_int_equal(ts_layout_check(&c, &lay, NULL), TS_EUSAGE);
  // megatron splits heads and MLP columns: tiny's 4 heads allow up to 4 ranks
  c.fast = 0;
  c.seq = 64;
  lay.sp_mode = TS_SP_MEGATRON;
  lay.sp = 4;
  assert_int_equal(ts_layout_check(&c, &lay, NULL), TS_OK);
  lay.sp = 8;
  assert_int_equal(ts_layout_check(&c, &lay, NULL), TS_EUSAGE);
  assert_non_null(strstr(ts_errmsg(), "the 4 heads and the MLP width 256 must divide by 8"));
  // its ranks own their blocks: not sharded again, nor orthogonalised whole
  lay.sp = 2;
  lay.zero = 1;
  assert_int_equal(ts_layout_check(&c, &lay, NULL), TS_EUSAGE);
  assert_non_null(strstr(ts_errmsg(), "--zero 1 with --sp-mode megatron: not built"));
  lay.zero = 0;
  c.optimizer = TS_OPT_MUON;
  assert_int_equal(ts_layout_check(&c, &lay, NULL), TS_EUSAGE);
  assert_non_null(strstr(ts_errmsg(), "--optimizer muon with --sp-mode megatron: not built"));
  c.optimizer = TS_OPT_ADAMW;
  assert_int_equal(ts_layout_check(&c, &lay, NULL), TS_OK);
}

// Head-parallel attention (Ulysses, UPipe): whole heads and key/value heads
// per rank; UPipe's U and schedule, and their defaults.
static void test_head_parallel_rules(void **state) {
  (void)state;
  ts_config c;
  base(&c, "llama-tiny"); // H 4, Hkv 2
  assert_int_equal(ts_config_finalize(&c), TS_OK);
  ts_layout lay = {1, 2, 1, TS_SP_ULYSSES, 0, -1, 1, 1, 0, 0};
  assert_int_equal(ts_layout_check(&c, &lay, NULL), TS_OK);
  assert_int_equal(lay.upipe_u, 0); // Ulysses: all heads at once, UPipe's settings unset
  assert_int_equal(ts_layout_check(&c, &lay, NULL), TS_OK); // and checked again (train.c) the same
  lay.upipe_u = 2;                                     // UPipe's alone
  assert_int_equal(ts_layout_check(&c, &lay, NULL), TS_EUSAGE);
  assert_non_null(strstr(ts_errmsg(), "--upipe-u: only with --sp N --sp-mode upipe"));
  lay.upipe_u = 0;
  lay.sp = 4;                       // 2 key/value heads over 4 ranks
  assert_int_equal(ts_layout_check(&c, &lay, NULL), TS_EUSAGE);
  assert_non_null(strstr(ts_errmsg(), "2 key/value heads must divide by 4"));
  lay = (ts_layout){1, 2, 1, TS_SP_UPIPE, 0, -1, 1, 1, 0, 0};
  assert_int_equal(ts_layout_check(&c, &lay, NULL), TS_OK);
  assert_int_equal(lay.upipe_u, 2);     // default: U = N
  assert_int_equal(lay.upipe_sched, 1); // default with groups: gqa
  lay = (ts_layout){1, 2, 1, TS_SP_UPIPE, 3, 0, 1, 1, 0, 0};
  assert_int_equal(ts_layout_check(&c, &lay, NULL), TS_EUSAGE);
  assert_non_null(strstr(ts_errmsg(), "--upipe-u 3: must be a multiple of --sp 2"));
  lay = (ts_layout){1, 2, 1, TS_SP_UPIPE, 4, 1, 1, 1, 0, 0}; // gqa: U must divide Hkv
  assert_int_equal(ts_layout_check(&c, &lay, NULL), TS_EUSAGE);
  lay = (ts_layout){1, 2, 1, TS_SP_UPIPE, 4, 0, 1, 1, 0, 0}; // natural: fine
  assert_int_equal(ts_layout_check(&c, &lay, NULL), TS_OK);
  base(&c, "tiny"); // no groups: no gqa schedule, natural by default
  assert_int_equal(ts_config_finalize(&c), TS_OK);
  lay = (ts_layout){1, 2, 1, TS_SP_UPIPE, 0, -1, 1, 1, 0, 0};
  assert_int_equal(ts_layout_check(&c, &lay, NULL), TS_OK);
  assert_int_equal(lay.upipe_sched, 0);
  lay = (ts_layout){1, 2, 1, TS_SP_UPIPE, 2, 1, 1, 1, 0, 0};
  assert_int_equal(ts_layout_check(&c, &lay, NULL), TS_EUSAGE);
}

static void test_sp_mode_names(void **state) {
  (void)state;
  for (int i = 0; i < TS_SP_NMODES; i++) {
    ts_sp_mode m = TS_SP_NMODES;
    assert_int_equal(ts_sp_mode_parse(ts_sp_mode_names[i], &m), TS_OK);
    assert_int_equal(m, i);
  }
  ts_sp_mode m;
  assert_int_equal(ts_sp_mode_parse("lss-fast", &m), TS_EUSAGE);
  assert_non_null(strstr(ts_errmsg(), "--sp-mode lss-fast"));
}

// Boundary compression: its defaults, and the refusals before any work.
static void test_compress_rules(void **state) {
  (void)state;
  ts_config c;
  base(&c, "llama-mini"); // d 128, 4 layers
  c.compress = TS_COMPRESS_MAPL_VQ, c.compress_rank = 32, c.compress_stages = 4;
  assert_int_equal(ts_config_finalize(&c), TS_OK);
  assert_true(c.proj_lr == 0.1f * 0.02f); // 0.1 x the Muon rate
  assert_int_equal(c.vq_groups, 2), assert_int_equal(c.vq_rounds, 2);
  assert_int_equal(c.vq_codes, 256), assert_int_equal(c.vq_sync_codes, 1);
  assert_true(c.vq_gamma == 0.99f && c.vq_commit == 1.0f);
  // ssn learns nothing; a setting the mode does not use is refused
  base(&c, "llama-mini");
  c.compress = TS_COMPRESS_SSN, c.compress_rank = 32, c.compress_stages = 2;
  assert_int_equal(ts_config_finalize(&c), TS_OK);
  assert_true(c.proj_lr == 0.0f);
  c.vq_codes = 16;
  assert_int_equal(ts_config_finalize(&c), TS_EUSAGE);
  assert_non_null(strstr(ts_errmsg(), "--vq-codes: only with --compress mapl-vq"));
  c.vq_codes = 0, c.proj_lr = 0.01f;
  assert_int_equal(ts_config_finalize(&c), TS_EUSAGE);
  assert_non_null(strstr(ts_errmsg(), "--proj-lr 0.01: only with a learned projector"));
  struct {
    int mode, r, S, G, K;
    const char *msg;
  } bad[] = {
      {TS_COMPRESS_MAPL, 129, 2, 0, 0, "--rank 129: larger than the model width d = 128"},
      {TS_COMPRESS_MAPL, 0, 2, 0, 0, "--compress mapl: needs --rank R"},
      {TS_COMPRESS_MAPL, 32, 1, 0, 0, "needs stage boundaries"},
      {TS_COMPRESS_MAPL, 32, 3, 0, 0, "--compress-stages 3: the 4 layers must divide into 3 stages"},
      {TS_COMPRESS_MAPL_VQ, 32, 2, 3, 0, "--vq-group 3: must divide --rank 32"},
      {TS_COMPRESS_MAPL_VQ, 32, 2, 0, 300, "--vq-codes 300: must be in [2, 256]"},
      {TS_COMPRESS_NONE, 32, 0, 0, 0, "--rank 32: only with --compress"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    base(&c, "llama-mini");
    c.compress = bad[i].mode, c.compress_rank = bad[i].r, c.compress_stages = bad[i].S;
    c.vq_groups = bad[i].G, c.vq_codes = bad[i].K;
    assert_int_equal(ts_config_finalize(&c), TS_EUSAGE);
    if (!strstr(ts_errmsg(), bad[i].msg)) fail_msg("got \"%s\", want \"%s\"", ts_errmsg(), bad[i].msg);
  }
  // --mapl-anchor: any kind with mapl and mapl-vq, only factorised elsewhere
  for (int k = 0; k < TS_ANCHOR_NKINDS; k++) {
    const int modes[] = {TS_COMPRESS_MAPL, TS_COMPRESS_MAPL_VQ, TS_COMPRESS_SSN,
                         TS_COMPRESS_MAPL_FROZEN, TS_COMPRESS_MAPL_UNC, TS_COMPRESS_NONE};
    for (size_t j = 0; j < sizeof modes / sizeof modes[0]; j++) {
      base(&c, "llama-mini");
      c.compress = modes[j], c.compress_rank = modes[j] ? 32 : 0;
      c.compress_stages = modes[j] ? 2 : 0, c.mapl_anchor = k;
      const int ok = k == TS_ANCHOR_FACTORISED || j < 2;
      assert_int_equal(ts_config_finalize(&c), ok ? TS_OK : TS_EUSAGE);
      char want[96];
      snprintf(want, sizeof want, "--mapl-anchor %s: only with --compress mapl or mapl-vq",
               ts_mapl_anchor_names[k]);
      if (!ok && !strstr(ts_errmsg(), want)) fail_msg("got \"%s\", want \"%s\"", ts_errmsg(), want);
    }
  }
  base(&c, "llama-mini");
  c.compress = TS_COMPRESS_MAPL, c.compress_rank = 32, c.compress_stages = 2;
  c.mapl_anchor = TS_ANCHOR_NKINDS;
  assert_int_equal(ts_config_finalize(&c), TS_EUSAGE);
  // a layout: the pipeline's stages are the model's, and no --sp
  base(&c, "llama-mini");
  c.compress = TS_COMPRESS_MAPL, c.compress_rank = 32, c.compress_stages = 4;
  assert_int_equal(ts_config_finalize(&c), TS_OK);
  ts_layout lay = {1, 1, 2, TS_SP_LSS, 0, -1, 1, 1, 0, 0};
  assert_int_equal(ts_layout_check(&c, &lay, NULL), TS_EUSAGE);
  assert_non_null(strstr(ts_errmsg(), "--pp 2 with --compress-stages 4"));
  lay.pp = 4;
  assert_int_equal(ts_layout_check(&c, &lay, NULL), TS_OK);
  lay.pp = 1, lay.sp = 2;
  assert_int_equal(ts_layout_check(&c, &lay, NULL), TS_EUSAGE);
  assert_non_null(strstr(ts_errmsg(), "--compress mapl with --sp 2"));
}

// The parameter floor (the weight matrices alone) is a lower bound of the
// model's parameter count and a close one (biases and norms are the rest),
// for both variants, tied and untied; and it stays finite for any sizes.
static void test_param_floor(void **state) {
  static const char *const presets[] = {"tiny", "mini", "llama-tiny", "llama-mini"};
  for (int i = 0; i < 4; i++)
    for (int tied = 0; tied <= 1; tied++) {
      ts_config c;
      base(&c, presets[i]);
      c.tied = tied;
      assert_int_equal(ts_config_finalize(&c), TS_OK);
      ts_model *m = NULL;
      if (ts_model_create(&c, &m)) fail_msg("%s", ts_errmsg());
      double floor = ts_config_param_floor(&c), n = (double)ts_model_num_params(m);
      ts_model_free(m);
      if (!(floor <= n && floor >= 0.95 * n))
        fail_msg("%s tied %d: floor %.0f, parameters %.0f", presets[i], tied, floor, n);
    }
  ts_config c;
  base(&c, "tiny");
  c.n_layer = c.d = c.d_ff = c.vocab = 2147483647;
  double f = ts_config_param_floor(&c);
  assert_true(isfinite(f) && f > 1e28); // about L·6d²: no int product overflowed
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_presets),         cmocka_unit_test(test_defaults),
      cmocka_unit_test(test_tile_leaf_rule),  cmocka_unit_test(test_validation),
      cmocka_unit_test(test_json_round_trip), cmocka_unit_test(test_json_errors),
      cmocka_unit_test(test_json_parts),
      cmocka_unit_test(test_layout_rules),    cmocka_unit_test(test_sequence_layout_rules),
      cmocka_unit_test(test_sp_mode_names),   cmocka_unit_test(test_head_parallel_rules),
      cmocka_unit_test(test_compress_rules),  cmocka_unit_test(test_param_floor),
      cmocka_unit_test(test_architecture_json),
      cmocka_unit_test(test_fields_cover_config), cmocka_unit_test(test_agreement),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
