// The learning-rate schedules (--lr-schedule, src/train/optim.c; docs/MODEL.md):
// each shape at steps of the warmup, of its middle and of its end, against
// the documented formula evaluated here, bit for bit; and what holds of the
// shapes whatever the formula's rounding (constant and wsd's stable phase
// are --lr exactly, wsd with --decay-frac 1 is linear, every one falls
// monotonically and none reaches the minimum).
// cmocka.h needs these four first.
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>

#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "train/optim.h"
#include "tessera.h"

#define W 4  // warmup
#define N 24 // steps: 20 after the warmup

static ts_config schedule(int which, float decay_frac) {
  ts_config c;
  memset(&c, 0, sizeof c);
  assert_int_equal(ts_config_preset(&c, "tiny"), TS_OK);
  ts_config_defaults(&c);
  c.lr = 3e-4f, c.min_lr_frac = 0.1f, c.warmup = W, c.steps = N;
  c.lr_schedule = which;
  c.decay_frac = decay_frac;
  assert_int_equal(ts_config_finalize(&c), TS_OK);
  return c;
}

// The formula of docs/MODEL.md for 0-based step s, in double, rounded once.
static float expected(const ts_config *c, int64_t s) {
  const double lr = c->lr, lo = c->lr * c->min_lr_frac;
  if (s < c->warmup) return (float)(lr * (double)(s + 1) / c->warmup);
  double p = (double)(s - c->warmup) / (double)(c->steps - c->warmup);
  if (p > 1.0) p = 1.0;
  const double pi = 3.141592653589793;
  switch (c->lr_schedule) {
  case TS_LR_COSINE: return (float)(lo + 0.5 * (lr - lo) * (1.0 + cos(pi * p)));
  case TS_LR_LINEAR: return (float)(lr - (lr - lo) * p);
  case TS_LR_CONSTANT: return (float)lr;
  default: {
    const double f = c->decay_frac;
    return p < 1.0 - f ? (float)lr : (float)(lr - (lr - lo) * ((p - (1.0 - f)) / f));
  }
  }
}

static void assert_bits(float got, float want, const char *what, int64_t s) {
  if (memcmp(&got, &want, sizeof got) != 0)
    fail_msg("%s, step %lld: %a, expected %a", what, (long long)s, (double)got, (double)want);
}

static const int64_t steps_checked[] = {0, 2, 3, 4, 5, 9, 14, 18, 19, 20, 21, 23, 30};

static void test_shapes_against_formula(void **state) {
  (void)state;
  for (int which = 0; which < TS_LR_NSCHEDULES; which++) {
    const ts_config c = schedule(which, which == TS_LR_WSD ? 0.25f : 0.0f);
    for (size_t i = 0; i < sizeof steps_checked / sizeof steps_checked[0]; i++) {
      const int64_t s = steps_checked[i];
      assert_bits(ts_lr_at(&c, s), expected(&c, s), ts_lr_schedule_names[which], s);
    }
  }
}

static void test_shape_properties(void **state) {
  (void)state;
  const ts_config cos_ = schedule(TS_LR_COSINE, 0.0f), lin = schedule(TS_LR_LINEAR, 0.0f);
  const ts_config con = schedule(TS_LR_CONSTANT, 0.0f), wsd = schedule(TS_LR_WSD, 0.25f);
  const ts_config wsd1 = schedule(TS_LR_WSD, 1.0f);
  const float lo = cos_.lr * cos_.min_lr_frac;
  for (int64_t s = 0; s < N; s++) {
    // the warmup is the same for every shape
    if (s < W) {
      assert_bits(ts_lr_at(&lin, s), ts_lr_at(&cos_, s), "linear's warmup", s);
      assert_bits(ts_lr_at(&con, s), ts_lr_at(&cos_, s), "constant's warmup", s);
      assert_bits(ts_lr_at(&wsd, s), ts_lr_at(&cos_, s), "wsd's warmup", s);
      continue;
    }
    assert_bits(ts_lr_at(&con, s), con.lr, "constant", s);
    // wsd: stable for the first 75% of the 20 steps after the warmup (the
    // decay starts from lr at progress 0.75 exactly, step W + 15)
    if (s <= W + 15) assert_bits(ts_lr_at(&wsd, s), wsd.lr, "wsd's stable phase", s);
    else assert_true(ts_lr_at(&wsd, s) < wsd.lr);
    assert_bits(ts_lr_at(&wsd1, s), ts_lr_at(&lin, s), "wsd with --decay-frac 1", s);
    const ts_config *falling[] = {&cos_, &lin, &wsd};
    for (int k = 0; k < 3; k++) {
      assert_true(ts_lr_at(falling[k], s) > lo); // none reaches the minimum
      if (s > W) assert_true(ts_lr_at(falling[k], s) <= ts_lr_at(falling[k], s - 1));
    }
  }
  // linear halfway: the midpoint of lr and lr_min, to a float's rounding
  const float mid = ts_lr_at(&lin, W + 10), want = (lin.lr + lo) / 2.0f;
  assert_true(fabsf(mid - want) <= 2.0f * (nextafterf(want, 1.0f) - want));
  // past the last step the schedules hold their end (p is capped at 1)
  assert_bits(ts_lr_at(&lin, 2 * N), lo, "linear past the end", 2 * N);
  assert_bits(ts_lr_at(&wsd, 2 * N), lo, "wsd past the end", 2 * N);
}

// The defaults and the validation of the two fields.
static void test_schedule_config(void **state) {
  (void)state;
  ts_config c;
  memset(&c, 0, sizeof c);
  ts_config_preset(&c, "tiny");
  ts_config_defaults(&c);
  assert_int_equal(c.lr_schedule, TS_LR_COSINE); // the default, and cosine's bits unchanged:
  assert_true(c.decay_frac == 0.0f);
  assert_int_equal(ts_config_finalize(&c), TS_OK);
  assert_true(c.decay_frac == 0.0f); // only wsd has one (so the others' JSON stays as it was)
  char json[TS_CONFIG_JSON_MAX];
  assert_int_equal(ts_config_to_json(&c, json, sizeof json), TS_OK);
  assert_null(strstr(json, "lr_schedule"));
  assert_null(strstr(json, "decay_frac"));
  c.lr_schedule = TS_LR_WSD;
  assert_int_equal(ts_config_finalize(&c), TS_OK);
  assert_true(c.decay_frac == TS_WSD_DECAY_FRAC);
  assert_int_equal(ts_config_to_json(&c, json, sizeof json), TS_OK);
  assert_non_null(strstr(json, "\"lr_schedule\":\"wsd\""));
  assert_non_null(strstr(json, "\"decay_frac\":0.200000003"));
  c.decay_frac = 1.5f;
  assert_int_equal(ts_config_finalize(&c), TS_EUSAGE);
  assert_non_null(strstr(ts_errmsg(), "--decay-frac 1.5: must be in (0, 1]"));
  c.lr_schedule = TS_LR_LINEAR, c.decay_frac = 0.5f;
  assert_int_equal(ts_config_finalize(&c), TS_EUSAGE);
  assert_non_null(strstr(ts_errmsg(), "--decay-frac 0.5: only with --lr-schedule wsd"));
  c.lr_schedule = TS_LR_NSCHEDULES, c.decay_frac = 0.0f;
  assert_int_equal(ts_config_finalize(&c), TS_EUSAGE);
  assert_non_null(strstr(ts_errmsg(), "lr_schedule 4: unknown"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shapes_against_formula),
      cmocka_unit_test(test_shape_properties),
      cmocka_unit_test(test_schedule_config),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
