// `tessera compare` on hand-written logs: what counts as a divergence, where
// it is reported, and what is rejected as a broken log.
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

#include "tools/compare.h"
#include "tessera.h"

static char tmpdir[256];

static int setup(void **state) {
  snprintf(tmpdir, sizeof tmpdir, "%s/tessera-compare-XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  return system(cmd) == 0 ? 0 : -1;
}

// Writes text into tmpdir/name and returns the full path (static buffer per slot).
static const char *write_file(int slot, const char *name, const char *text) {
  static char paths[4][512];
  snprintf(paths[slot], sizeof paths[slot], "%s/%s", tmpdir, name);
  FILE *f = fopen(paths[slot], "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  return paths[slot];
}

// Runs the comparison and captures what it prints.
static int run(const char *a, const char *b, double rtol, char *out, size_t cap) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  assert_non_null(f);
  int rc = ts_compare_logs(a, b, rtol, f);
  fclose(f);
  snprintf(out, cap, "%s", buf ? buf : "");
  free(buf);
  return rc;
}

// One step record; loss given as a C float so the hex and decimal agree.
static void step_line(char *buf, size_t cap, int step, float loss, double tokens_per_s, int calls) {
  snprintf(buf, cap,
           "{\"type\":\"step\",\"step\":%d,\"loss\":%.9g,\"loss_hex\":\"%a\","
           "\"grad_norm\":%.9g,\"grad_norm_hex\":\"%a\",\"lr\":%.9g,\"lr_hex\":\"%a\","
           "\"tokens_per_s\":%.1f,\"step_ms\":%.3f,\"mfu\":0.1,\"peak_rss_mb\":%.1f,"
           "\"comm\":{\"calls\":{\"allgather\":%d},\"bytes\":{\"allgather\":%d}}}\n",
           step, (double)loss, (double)loss, 1.5, 1.5, 1e-3, 1e-3, tokens_per_s,
           1000.0 / tokens_per_s, 100.0 + step, calls, calls * 4096);
}

// A log of n steps with an eval record and a final hash. perturb_step (1-based,
// 0 = none) gets its loss nudged by one unit in the last place.
static char *make_log(int n, int perturb_step, double tokens_per_s, int calls, const char *hash) {
  size_t cap = 4096 + (size_t)n * 512;
  char *log = malloc(cap), line[512];
  assert_non_null(log);
  snprintf(log, cap,
           "{\"type\":\"config\",\"version\":\"0.1.0\",\"model\":{\"d\":64},\"world\":%d,"
           "\"layout\":\"serial\"}\n",
           calls + 1);
  for (int s = 1; s <= n; s++) {
    float loss = 5.5f - 0.25f * (float)s / 3.0f;
    if (s == perturb_step) loss = nextafterf(loss, 100.0f);
    step_line(line, sizeof line, s, loss, tokens_per_s, calls);
    strcat(log, line);
    if (s == n / 2) {
      snprintf(line, sizeof line,
               "{\"type\":\"eval\",\"step\":%d,\"val_loss\":%.9g,\"val_loss_hex\":\"%a\"}\n", s,
               4.75, 4.75);
      strcat(log, line);
    }
  }
  snprintf(line, sizeof line, "{\"type\":\"final\",\"step\":%d,\"param_hash\":\"%s\"}\n", n, hash);
  strcat(log, line);
  return log;
}

static void test_identical(void **state) {
  char *log = make_log(10, 0, 1000.0, 0, "0123456789abcdef");
  const char *a = write_file(0, "a.jsonl", log), *b = write_file(1, "b.jsonl", log);
  char out[1024];
  assert_int_equal(run(a, b, 0.0, out, sizeof out), 0);
  assert_string_equal(out, "identical\n");
  free(log);
}

static void test_last_hex_digit_found_at_its_step(void **state) {
  for (int k = 1; k <= 10; k += 3) {
    char *la = make_log(10, 0, 1000.0, 0, "0123456789abcdef");
    char *lb = make_log(10, k, 1000.0, 0, "0123456789abcdef");
    const char *a = write_file(0, "a.jsonl", la), *b = write_file(1, "b.jsonl", lb);
    char out[1024], want[64];
    assert_int_equal(run(a, b, 0.0, out, sizeof out), 1);
    snprintf(want, sizeof want, "first divergence: step %d, loss: 0x", k);
    assert_non_null(strstr(out, want));
    assert_non_null(strstr(out, "relative difference"));
    // one line, nothing after it
    assert_ptr_equal(strchr(out, '\n'), out + strlen(out) - 1);
    free(la);
    free(lb);
  }
}

static void test_timing_and_comm_ignored(void **state) {
  char *la = make_log(8, 0, 1000.0, 0, "0123456789abcdef");
  char *lb = make_log(8, 0, 2345.6, 17, "0123456789abcdef");
  const char *a = write_file(0, "a.jsonl", la), *b = write_file(1, "b.jsonl", lb);
  char out[1024];
  assert_int_equal(run(a, b, 0.0, out, sizeof out), 0);
  assert_string_equal(out, "identical\n");
  free(la);
  free(lb);
}

static void test_message_format(void **state) {
  const char *a = write_file(
      0, "a.jsonl", "{\"type\":\"step\",\"step\":7,\"loss\":2.25,\"loss_hex\":\"0x1.2p+1\"}\n");
  const char *b = write_file(
      1, "b.jsonl", "{\"type\":\"step\",\"step\":7,\"loss\":2.375,\"loss_hex\":\"0x1.3p+1\"}\n");
  char out[1024];
  assert_int_equal(run(a, b, 0.0, out, sizeof out), 1);
  assert_string_equal(out, "first divergence: step 7, loss: 0x1.2p+1 (2.25) vs 0x1.3p+1 "
                           "(2.375), relative difference 5.6e-02\n");
}

static void test_rtol(void **state) {
  char *la = make_log(10, 0, 1000.0, 0, "0123456789abcdef");
  char *lb = make_log(10, 4, 1000.0, 0, "fedcba9876543210"); // hash ignored with --rtol
  const char *a = write_file(0, "a.jsonl", la), *b = write_file(1, "b.jsonl", lb);
  char out[1024];
  assert_int_equal(run(a, b, 0.0, out, sizeof out), 1);
  assert_int_equal(run(a, b, 1e-5, out, sizeof out), 0);
  assert_non_null(strstr(out, "equal within rtol"));
  assert_non_null(strstr(out, "step 4, loss"));
  assert_int_equal(run(a, b, 1e-9, out, sizeof out), 1);
  assert_non_null(strstr(out, "first divergence: step 4, loss"));
  free(la);
  free(lb);
}

static void test_hash_and_eval(void **state) {
  char *la = make_log(6, 0, 1000.0, 0, "0123456789abcdef");
  char *lb = make_log(6, 0, 1000.0, 0, "0123456789abcdee");
  const char *a = write_file(0, "a.jsonl", la), *b = write_file(1, "b.jsonl", lb);
  char out[1024];
  assert_int_equal(run(a, b, 0.0, out, sizeof out), 1);
  assert_string_equal(out, "first divergence: step 6 final, param_hash: 0123456789abcdef vs "
                           "0123456789abcdee\n");
  // an eval that differs in the last bit
  char *lc = make_log(6, 0, 1000.0, 0, "0123456789abcdef");
  char *p = strstr(lc, "\"val_loss_hex\":\"0x1.3p+2\"");
  assert_non_null(p);
  memcpy(p, "\"val_loss_hex\":\"0x1.4p+2\"", strlen("\"val_loss_hex\":\"0x1.4p+2\""));
  const char *c = write_file(2, "c.jsonl", lc);
  assert_int_equal(run(a, c, 0.0, out, sizeof out), 1);
  assert_non_null(strstr(out, "first divergence: step 3 eval, val_loss: 0x1.3p+2 (4.75) vs "
                              "0x1.4p+2 (5)"));
  free(la);
  free(lb);
  free(lc);
}

static void test_length_mismatch(void **state) {
  char *la = make_log(10, 0, 1000.0, 0, "0123456789abcdef");
  // b: the same run cut after step 7 (a crash): keep lines up to step 7's record
  char *lb = strdup(la);
  char *cut = strstr(lb, "\"step\":8,");
  assert_non_null(cut);
  while (cut > lb && cut[-1] != '\n')
    cut--;
  *cut = '\0';
  const char *a = write_file(0, "a.jsonl", la), *b = write_file(1, "b.jsonl", lb);
  char out[1024];
  assert_int_equal(run(a, b, 0.0, out, sizeof out), 1);
  assert_non_null(strstr(out, "first divergence: step 8:"));
  assert_non_null(strstr(out, "b.jsonl"));
  assert_non_null(strstr(out, "ends after step 7"));
  // the other way round names the same place
  assert_int_equal(run(b, a, 0.0, out, sizeof out), 1);
  assert_non_null(strstr(out, "first divergence: step 8:"));
  assert_non_null(strstr(out, "ends after step 7"));
  // with --rtol too
  assert_int_equal(run(a, b, 1e-3, out, sizeof out), 1);
  free(la);
  free(lb);
}

static void test_different_steps(void **state) {
  const char *a =
      write_file(0, "a.jsonl", "{\"type\":\"step\",\"step\":1,\"loss_hex\":\"0x1p+0\"}\n");
  const char *b =
      write_file(1, "b.jsonl", "{\"type\":\"step\",\"step\":2,\"loss_hex\":\"0x1p+0\"}\n");
  char out[1024];
  assert_int_equal(run(a, b, 0.0, out, sizeof out), 1);
  assert_string_equal(out, "first divergence: record 1: step 1 vs step 2\n");
}

static void test_malformed_line(void **state) {
  char *la = make_log(5, 0, 1000.0, 0, "0123456789abcdef");
  const char *a = write_file(0, "a.jsonl", la);
  static const char *bad[] = {
      "{\"type\":\"step\",\"step\":1,\"loss\":}\n",
      "{\"type\":\"step\",\"step\":1,\"loss\":1.0\n",
      "{\"type\":\"step\",\"step\":1} trailing\n",
      "[1,2,3]\n",
      "{\"step\":1}\n",
      "{\"type\":\"step\",\"loss\":1}\n",
      "{\"type\":\"step\",\"step\":1,\"x\":\"unterminated}\n",
      "{\"type\":\"step\",\"step\":01}\n",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char text[1024];
    // two good lines first (config + blank), so the bad one is line 3
    snprintf(text, sizeof text, "{\"type\":\"config\"}\n\n%s", bad[i]);
    const char *b = write_file(1, "b.jsonl", text);
    char out[1024], want[600];
    assert_int_equal(run(a, b, 0.0, out, sizeof out), TS_EUSAGE);
    snprintf(want, sizeof want, "%s:3:", b);
    if (strstr(ts_errmsg(), want) == NULL) fail_msg("case %zu: %s", i, ts_errmsg());
    assert_string_equal(out, ""); // nothing printed as a result
  }
  free(la);
}

// A record that parses but cannot be trusted is a broken log (2), not a
// divergence (1): a key given twice (which copy counts?), a result field of
// the wrong form. Each case differs from the good line in that one thing, and
// the good line itself compares identical.
static void test_damaged_record(void **state) {
  static const char good[] = "{\"type\":\"step\",\"step\":1,\"loss\":1,\"loss_hex\":\"0x1p+0\","
                             "\"comm\":{\"a\":1,\"b\":2}}\n";
  static const char *const bad[] = {
      "{\"type\":\"step\",\"step\":1,\"loss\":1,\"loss_hex\":\"0x1p+0\",\"loss_hex\":\"0x1p+1\"}\n",
      "{\"type\":\"step\",\"step\":1,\"step\":2,\"loss\":1,\"loss_hex\":\"0x1p+0\"}\n",
      "{\"type\":\"step\",\"type\":\"eval\",\"step\":1,\"loss\":1,\"loss_hex\":\"0x1p+0\"}\n",
      "{\"type\":\"step\",\"step\":1,\"loss\":1,\"loss_hex\":\"0x1p+0\",\"comm\":{\"a\":1,\"a\":2}}\n",
      "{\"type\":\"step\",\"step\":1,\"loss\":1,\"loss_hex\":\"0x1q+0\"}\n",
      "{\"type\":\"step\",\"step\":1,\"loss\":1,\"loss_hex\":\"1.0\"}\n",
      "{\"type\":\"step\",\"step\":1,\"loss\":1,\"loss_hex\":\"0x1p\"}\n",
      "{\"type\":\"step\",\"step\":1,\"loss\":1,\"loss_hex\":\"\"}\n",
      "{\"type\":\"step\",\"step\":1,\"loss\":1,\"loss_hex\":1}\n",
      "{\"type\":\"step\",\"step\":1,\"loss\":\"1\",\"loss_hex\":\"0x1p+0\"}\n",
      "{\"type\":\"step\",\"step\":1,\"loss\":1,\"loss_hex\":\"0x1p+0\",\"grad_norm_hex\":\"0x\"}\n",
      "{\"type\":\"final\",\"step\":1,\"param_hash\":\"0123456789abcdeg\"}\n",
      "{\"type\":\"final\",\"step\":1,\"param_hash\":\"0123\"}\n",
  };
  const char *words[] = {"loss_hex", "step", "type", "\"a\"", "loss_hex", "loss_hex", "loss_hex",
                         "loss_hex", "loss_hex", "loss", "grad_norm_hex", "param_hash",
                         "param_hash"};
  const char *a = write_file(0, "a.jsonl", good);
  char out[1024];
  assert_int_equal(run(a, a, 0.0, out, sizeof out), 0);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    const char *b = write_file(1, "b.jsonl", bad[i]);
    for (int k = 0; k < 2; k++) { // either side, bitwise or with --rtol
      int rc = k ? run(b, a, 1e-3, out, sizeof out) : run(a, b, 0.0, out, sizeof out);
      if (rc != TS_EUSAGE) fail_msg("case %zu (%s): exit %d, output %s", i, bad[i], rc, out);
      char want[600];
      snprintf(want, sizeof want, "%s:1:", b);
      if (!strstr(ts_errmsg(), want) || !strstr(ts_errmsg(), words[i]))
        fail_msg("case %zu: message '%s' lacks '%s' or '%s'", i, ts_errmsg(), want, words[i]);
      assert_string_equal(out, "");
    }
  }
  // the forms a writer may use are fine: printf's, Python's float.hex, non-finite
  static const char *const hexes[] = {"0x1.8p+1", "-0x0p+0", "0x1.8000000000000p+1", "0X1.8P+1",
                                      "inf", "-inf", "nan", "-nan"};
  for (size_t i = 0; i < sizeof hexes / sizeof hexes[0]; i++) {
    char line[256];
    snprintf(line, sizeof line, "{\"type\":\"step\",\"step\":1,\"loss_hex\":\"%s\"}\n", hexes[i]);
    const char *c = write_file(2, "c.jsonl", line);
    if (run(c, c, 0.0, out, sizeof out) != 0) fail_msg("'%s' refused: %s", hexes[i], ts_errmsg());
  }
}

static void test_missing_file(void **state) {
  char *la = make_log(5, 0, 1000.0, 0, "0123456789abcdef");
  const char *a = write_file(0, "a.jsonl", la);
  char missing[512], out[1024];
  snprintf(missing, sizeof missing, "%s/no-such.jsonl", tmpdir);
  assert_int_equal(run(a, missing, 0.0, out, sizeof out), TS_EUSAGE);
  assert_non_null(strstr(ts_errmsg(), missing));
  assert_int_equal(run(missing, a, 0.0, out, sizeof out), TS_EUSAGE);
  assert_non_null(strstr(ts_errmsg(), missing));
  free(la);
}

static void test_no_records_and_bad_rtol(void **state) {
  const char *a = write_file(0, "a.jsonl", "{\"type\":\"config\"}\n");
  char out[1024];
  assert_int_equal(run(a, a, 0.0, out, sizeof out), TS_EUSAGE);
  assert_non_null(strstr(ts_errmsg(), "no step"));
  assert_int_equal(run(a, a, -1.0, out, sizeof out), TS_EUSAGE);
  assert_non_null(strstr(ts_errmsg(), "--rtol"));
}

static void test_json_details(void **state) {
  // escapes, nesting, whitespace, key order, NaN written by a diverged run
  const char *a =
      write_file(0, "a.jsonl",
                 "  { \"type\" : \"step\", \"step\": 1, \"note\": \"a\\\"b\\u00e9\\ud83d\\ude00\","
                 " \"nested\": {\"x\": [1, 2.5e-3, true, false, null, {\"y\": []}]},"
                 " \"loss\": NaN, \"loss_hex\": \"nan\" }\r\n");
  const char *b = write_file(
      1, "b.jsonl", "{\"loss_hex\":\"nan\",\"loss\":nan,\"step\":1.0,\"type\":\"step\"}\n");
  char out[1024];
  assert_int_equal(run(a, b, 0.0, out, sizeof out), 0);
  assert_int_equal(run(a, b, 1e-3, out, sizeof out), 0);
  const char *c = write_file(
      2, "c.jsonl", "{\"type\":\"step\",\"step\":1,\"loss\":1.0,\"loss_hex\":\"0x1p+0\"}\n");
  assert_int_equal(run(a, c, 0.0, out, sizeof out), 1);
  assert_int_equal(run(a, c, 1e-3, out, sizeof out), 1);
  // -0 and +0 differ bitwise, but are within any tolerance
  const char *d = write_file(
      3, "d.jsonl", "{\"type\":\"step\",\"step\":1,\"loss\":-0.0,\"loss_hex\":\"-0x0p+0\"}\n");
  const char *e = write_file(2, "e.jsonl",
                             "{\"type\":\"step\",\"step\":1,\"loss\":0,\"loss_hex\":\"0x0p+0\"}\n");
  assert_int_equal(run(d, e, 0.0, out, sizeof out), 1);
  assert_int_equal(run(d, e, 1e-6, out, sizeof out), 0);
}

static void test_missing_field(void **state) {
  const char *a = write_file(0, "a.jsonl",
                             "{\"type\":\"step\",\"step\":1,\"loss\":1,\"loss_hex\":\"0x1p+0\","
                             "\"grad_norm_hex\":\"0x1p-1\"}\n");
  const char *b = write_file(1, "b.jsonl",
                             "{\"type\":\"step\",\"step\":1,\"loss\":1,\"loss_hex\":\"0x1p+0\"}\n");
  char out[1024];
  assert_int_equal(run(a, b, 0.0, out, sizeof out), 1);
  assert_non_null(strstr(out, "grad_norm: 0x1p-1 (0.5) vs (missing)"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_identical),
      cmocka_unit_test(test_last_hex_digit_found_at_its_step),
      cmocka_unit_test(test_timing_and_comm_ignored),
      cmocka_unit_test(test_message_format),
      cmocka_unit_test(test_rtol),
      cmocka_unit_test(test_hash_and_eval),
      cmocka_unit_test(test_length_mismatch),
      cmocka_unit_test(test_different_steps),
      cmocka_unit_test(test_malformed_line),
      cmocka_unit_test(test_damaged_record),
      cmocka_unit_test(test_missing_file),
      cmocka_unit_test(test_no_records_and_bad_rtol),
      cmocka_unit_test(test_json_details),
      cmocka_unit_test(test_missing_field),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
