// The JSON reader and escaper: the tree of a valid document, every kind of
// malformed input refused at the byte where it goes wrong, escapes that decode
// to the right UTF-8 and survive a write/read round trip, and numbers that keep
// their text exactly.
// cmocka.h needs these four first.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/json.h"

// Parses s (NUL-terminated) or fails the test with the reader's message.
static void parse_ok(json_value *v, const char *s, int flags) {
  json_error err;
  if (json_parse(v, s, strlen(s), flags, &err) != 0)
    fail_msg("refused %s: %s at byte %zu", s, err.msg, err.pos);
}

static void test_document(void **state) {
  const char *doc = " {\"a\": [1, -2.5e3, \"x\", true, false, null, {}, []],\n"
                    "\t\"b\": {\"c\": \"d\"}, \"a\": 0}\r\n";
  json_value v;
  parse_ok(&v, doc, 0);
  assert_int_equal(v.type, JSON_OBJECT);
  assert_int_equal(v.pos, 1);
  assert_null(v.key);
  assert_int_equal(v.n, 3);
  // members in document order, the duplicate kept; json_get finds the first
  assert_string_equal(v.items[0].key, "a");
  assert_string_equal(v.items[1].key, "b");
  assert_string_equal(v.items[2].key, "a");
  assert_ptr_equal(json_get(&v, "a"), &v.items[0]);
  assert_null(json_get(&v, "c"));
  const json_value *a = &v.items[0];
  assert_int_equal(a->type, JSON_ARRAY);
  assert_int_equal(a->pos, strchr(doc, '[') - doc);
  assert_int_equal(a->n, 8);
  static const json_type types[] = {JSON_NUMBER, JSON_NUMBER, JSON_STRING, JSON_TRUE,
                                    JSON_FALSE,  JSON_NULL,   JSON_OBJECT, JSON_ARRAY};
  for (int i = 0; i < 8; i++) {
    assert_int_equal(a->items[i].type, types[i]);
    assert_null(a->items[i].key);
  }
  assert_true(a->items[1].num == -2500.0);
  assert_string_equal(a->items[1].str, "-2.5e3");
  assert_int_equal(a->items[1].pos, strstr(doc, "-2.5e3") - doc);
  assert_string_equal(a->items[2].str, "x");
  assert_int_equal(a->items[6].n, 0);
  assert_int_equal(a->items[7].n, 0);
  const json_value *c = json_get(&v.items[1], "c");
  assert_non_null(c);
  assert_string_equal(c->str, "d");
  assert_null(json_get(a, "x")); // not an object
  json_free(&v);
  assert_int_equal(v.type, JSON_NULL);
  assert_null(v.items);

  // scalars on their own, and arrays of many items (the item arrays grow)
  parse_ok(&v, "\"only\"", 0);
  assert_int_equal(v.type, JSON_STRING);
  json_free(&v);
  char big[4096] = "[";
  for (int i = 0; i < 1000; i++) snprintf(big + strlen(big), 8, "%s%d", i ? "," : "", i % 10);
  strcat(big, "]");
  parse_ok(&v, big, 0);
  assert_int_equal(v.n, 1000);
  for (int i = 0; i < 1000; i++) assert_true(v.items[i].num == i % 10);
  json_free(&v);
}

// json_find_duplicate: the first repeated key in document order, at any depth
// (arrays of objects included), NULL when there is none.
static void test_find_duplicate(void **state) {
  static const struct {
    const char *doc;
    const char *key; // NULL: no duplicate
    const char *at;  // the text the duplicate's value starts with
  } cases[] = {
      {"{\"a\":1,\"b\":2}", NULL, NULL},
      {"[{\"a\":1},{\"a\":2}]", NULL, NULL}, // different objects
      {"{\"a\":{\"a\":1}}", NULL, NULL},      // different depths
      {"{\"a\":1,\"b\":2,\"a\":3}", "a", "3"},
      {"{\"x\":{\"p\":1,\"p\":2},\"y\":1,\"y\":2}", "p", "2}"},
      {"{\"x\":[1,{\"q\":true,\"r\":0,\"q\":false}]}", "q", "false"},
      {"[[],[{\"\":1,\"\":2}]]", "", "2"},
      {"\"s\"", NULL, NULL},
      // the first second occurrence in the document, whatever the keys' order
      {"{\"z\":1,\"b\":2,\"z\":3,\"b\":4,\"z\":5}", "z", "3"},
      {"{\"b\":1,\"z\":2,\"z\":3,\"b\":4}", "z", "3"},
      {"{\"a\":1,\"a\":2,\"a\":3}", "a", "2"},
      // an object's own duplicate before one deeper in a later member
      {"{\"x\":1,\"x\":2,\"y\":{\"p\":1,\"p\":2}}", "x", "2"},
      {"{\"y\":{\"p\":1,\"p\":2},\"x\":1,\"x\":2}", "p", "2}"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    json_value v;
    parse_ok(&v, cases[i].doc, 0);
    const json_value *d = json_find_duplicate(&v);
    if (!cases[i].key) {
      if (d) fail_msg("%s: duplicate '%s' found", cases[i].doc, d->key);
    } else {
      if (!d) fail_msg("%s: no duplicate found", cases[i].doc);
      assert_string_equal(d->key, cases[i].key);
      assert_int_equal(d->pos, strstr(cases[i].doc, cases[i].at) - cases[i].doc);
    }
    json_free(&v);
  }
}

// An object of 300000 members, the last repeating one in the middle: found
// in well under a second. The pairwise search took minutes (a crafted log
// line or checkpoint header hung compare, eval and --resume); the alarm
// turns a return of that into a failure rather than a stalled suite.
static void test_find_duplicate_large(void **state) {
  const int n = 300000;
  char *doc = malloc((size_t)n * 24 + 64);
  assert_non_null(doc);
  size_t k = (size_t)sprintf(doc, "{");
  for (int i = 0; i < n; i++) k += (size_t)sprintf(doc + k, "%s\"k%d\":%d", i ? "," : "", i, i);
  k += (size_t)sprintf(doc + k, ",\"k%d\":-1}", n / 2);
  json_value v;
  json_error err;
  assert_int_equal(json_parse(&v, doc, k, 0, &err), 0);
  alarm(20);
  const json_value *d = json_find_duplicate(&v);
  alarm(0);
  assert_non_null(d);
  assert_ptr_equal(d, &v.items[n]);
  assert_null(json_find_duplicate(&v.items[0]));
  json_free(&v);
  free(doc);
}

// Every way to be malformed: the byte offset and the words of the message.
static void test_malformed(void **state) {
  static const struct {
    const char *in;
    int flags;
    size_t pos;
    const char *msg;
  } cases[] = {
      {"", 0, 0, "unexpected end"},
      {"   ", 0, 3, "unexpected end"},
      {"\f1", 0, 0, "unexpected character"}, // not JSON whitespace
      {"{", 0, 1, "expected a member name"},
      {"[", 0, 1, "unexpected end"},
      {"[1,]", 0, 3, "unexpected character"},
      {"{\"a\":1,}", 0, 7, "expected a member name"},
      {"{\"a\" 1}", 0, 5, "expected ':'"},
      {"{\"a\":1 \"b\":2}", 0, 7, "expected ',' or '}'"},
      {"[1 2]", 0, 3, "expected ',' or ']'"},
      {"[true false]", 0, 6, "expected ',' or ']'"},
      {"{'a':1}", 0, 1, "expected a member name"},
      {"{1:2}", 0, 1, "expected a member name"},
      {"[1] x", 0, 4, "trailing characters"},
      {"{}{}", 0, 2, "trailing characters"},
      {"\"abc", 0, 4, "unterminated string"},
      {"\"a\tb\"", 0, 2, "control character"},
      {"\"\\q\"", 0, 2, "bad escape"},
      {"\"\\u12\"", 0, 5, "bad \\u escape"},
      {"\"\\u12", 0, 5, "bad \\u escape"},
      {"\"\\udc00\"", 0, 1, "unpaired surrogate"},
      {"\"\\ud800\"", 0, 7, "unpaired surrogate"},
      {"\"\\ud800\\u0041\"", 0, 7, "unpaired surrogate"},
      {"\"\\u0000\"", 0, 1, "\\u0000"},
      {"\"\xc3\x28\"", 0, 1, "invalid UTF-8"},
      {"\"\xc0\xaf\"", 0, 1, "invalid UTF-8"},         // overlong
      {"\"\xe0\x80\xaf\"", 0, 1, "invalid UTF-8"},     // overlong, 3 bytes
      {"\"\xed\xa0\x80\"", 0, 1, "invalid UTF-8"},     // a surrogate, encoded
      {"\"\xf4\x90\x80\x80\"", 0, 1, "invalid UTF-8"}, // above U+10FFFF
      {"\"a\xe2\x82\"", 0, 2, "invalid UTF-8"},        // cut short
      {"\"\x80\"", 0, 1, "invalid UTF-8"},             // a lone continuation byte
      {"\"\x80\x01\"", JSON_ANY_BYTES, 2, "control character"},
      {"01", 0, 1, "trailing characters"},
      {"[01]", 0, 2, "expected ',' or ']'"},
      {"1.", 0, 2, "bad number"},
      {"1.e5", 0, 2, "bad number"},
      {"-", 0, 1, "bad number"},
      {"1e", 0, 2, "bad number"},
      {"1e+", 0, 3, "bad number"},
      {".5", 0, 0, "unexpected character"},
      {"+1", 0, 0, "unexpected character"},
      {"0x10", 0, 1, "trailing characters"},
      {"NaN", 0, 0, "unexpected character"},
      {"-inf", 0, 1, "bad number"},
      {"[NaN, Inf]", JSON_NONFINITE, 6, "unexpected character"},
      {"NaNa", JSON_NONFINITE, 3, "trailing characters"},
      {"tru", 0, 0, "unexpected character"},
      {"nul", 0, 0, "unexpected character"},
      {"True", 0, 0, "unexpected character"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    json_value v;
    json_error err;
    int rc = json_parse(&v, cases[i].in, strlen(cases[i].in), cases[i].flags, &err);
    if (rc == 0) fail_msg("case %zu (%s): accepted", i, cases[i].in);
    if (err.pos != cases[i].pos || !strstr(err.msg, cases[i].msg))
      fail_msg("case %zu (%s): got \"%s\" at %zu, want \"%s\" at %zu", i, cases[i].in, err.msg,
               err.pos, cases[i].msg, cases[i].pos);
    assert_int_equal(err.oom, 0);
    // nothing is left behind on failure
    assert_int_equal(v.type, JSON_NULL);
    assert_null(v.items);
    assert_null(v.str);
  }
}

// The input is n bytes, not a C string: a NUL inside it is a character, and
// nothing after n is read.
static void test_length_bounded(void **state) {
  json_value v;
  json_error err;
  assert_int_equal(json_parse(&v, "[1,\0]", 5, 0, &err), -1);
  assert_int_equal(err.pos, 3);
  assert_int_equal(json_parse(&v, "\"a\0\"", 4, 0, &err), -1);
  assert_int_equal(err.pos, 2);
  assert_non_null(strstr(err.msg, "control character"));
  assert_int_equal(json_parse(&v, "{\"a\":1}", 6, 0, &err), -1);
  assert_int_equal(err.pos, 6);
  assert_int_equal(json_parse(&v, "[12]", 3, 0, &err), -1); // "[12" ends inside the array
  assert_int_equal(err.pos, 3);
  assert_int_equal(json_parse(&v, "\"\\u00e9\"", 5, 0, &err), -1); // cut inside the escape
  assert_non_null(strstr(err.msg, "bad \\u escape"));
  assert_int_equal(json_parse(&v, "123", 2, 0, &err), 0);
  assert_string_equal(v.str, "12");
  json_free(&v);
}

static void test_nesting_limit(void **state) {
  char s[2 * JSON_MAX_DEPTH + 8];
  json_value v;
  json_error err;
  // JSON_MAX_DEPTH levels are fine, one more is refused where it opens
  for (int extra = 0; extra <= 1; extra++) {
    int d = JSON_MAX_DEPTH + extra;
    memset(s, '[', (size_t)d);
    memset(s + d, ']', (size_t)d);
    s[2 * d] = '\0';
    int rc = json_parse(&v, s, strlen(s), 0, &err);
    if (!extra) {
      assert_int_equal(rc, 0);
      json_free(&v);
    } else {
      assert_int_equal(rc, -1);
      assert_int_equal(err.pos, JSON_MAX_DEPTH);
      assert_non_null(strstr(err.msg, "nested too deeply"));
    }
  }
}

// Escapes decode to the right bytes, at every UTF-8 length boundary.
static void test_unescape(void **state) {
  static const struct {
    const char *json, *want;
  } cases[] = {
      {"\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", "\"\\/\b\f\n\r\t"},
      {"\"\\u0041\\u007f\"", "A\x7f"},
      {"\"\\u0080\\u07FF\"", "\xc2\x80\xdf\xbf"},
      {"\"\\u0800\\u20ac\\uFFFF\"", "\xe0\xa0\x80\xe2\x82\xac\xef\xbf\xbf"},
      {"\"\\ud800\\udc00\\ud834\\udd1e\\udbff\\udfff\"",
       "\xf0\x90\x80\x80\xf0\x9d\x84\x9e\xf4\x8f\xbf\xbf"},
      {"\"raw h\xc3\xa9llo \xf0\x9d\x84\x9e\"", "raw h\xc3\xa9llo \xf0\x9d\x84\x9e"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    json_value v;
    parse_ok(&v, cases[i].json, 0);
    assert_int_equal(v.type, JSON_STRING);
    assert_string_equal(v.str, cases[i].want);
    assert_true(json_utf8_valid(v.str));
    json_free(&v);
  }
  // with JSON_ANY_BYTES, bytes that are not UTF-8 pass through as they are
  json_value v;
  parse_ok(&v, "\"\xff\xfe/\xc0\"", JSON_ANY_BYTES);
  assert_string_equal(v.str, "\xff\xfe/\xc0");
  json_free(&v);
}

static void test_escape(void **state) {
  // the exact bytes: short forms where JSON has them, \u00XX for other controls
  char buf[256];
  size_t n = json_escape(buf, sizeof buf, "a\"\\\b\f\n\r\t\x01\x1f\x7f/\xc3\xa9");
  assert_string_equal(buf, "\"a\\\"\\\\\\b\\f\\n\\r\\t\\u0001\\u001f\x7f/\xc3\xa9\"");
  assert_int_equal(n, strlen(buf));
  // like snprintf: the full length comes back even when it does not fit
  assert_int_equal(json_escape(NULL, 0, "abcdef"), 8);
  memset(buf, 'x', sizeof buf);
  assert_int_equal(json_escape(buf, 4, "abcdef"), 8);
  assert_string_equal(buf, "\"ab");
  assert_int_equal(json_escape(buf, 1, "abc"), 5);
  assert_string_equal(buf, "");

  // round trip: escape, parse back, same bytes
  char all[256];
  for (int i = 1; i < 128; i++) all[i - 1] = (char)i; // every ASCII byte, controls included
  all[127] = '\0';
  const char *strings[] = {"", "plain", all, "h\xc3\xa9llo \xe2\x9c\x93 \xf0\x9d\x84\x9e",
                           "{\"nested\": \"C:\\\\x\"}"};
  for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++) {
    size_t len = json_escape(NULL, 0, strings[i]);
    char *e = malloc(len + 1);
    assert_non_null(e);
    assert_int_equal(json_escape(e, len + 1, strings[i]), len);
    assert_int_equal(strlen(e), len);
    json_value v;
    parse_ok(&v, e, 0);
    assert_int_equal(v.type, JSON_STRING);
    assert_string_equal(v.str, strings[i]);
    json_free(&v);
    free(e);
  }
}

// Numbers keep their text; json_u64 reads exact integers from it.
static void test_numbers(void **state) {
  json_value v;
  parse_ok(&v,
           "[0, -0, 1E+2, 18446744073709551615, 18446744073709551616, 1.0, -1, 0.1, 1e400,"
           " 123456789012345678, 2.5e-3]",
           0);
  static const char *const text[] = {"0",
                                     "-0",
                                     "1E+2",
                                     "18446744073709551615",
                                     "18446744073709551616",
                                     "1.0",
                                     "-1",
                                     "0.1",
                                     "1e400",
                                     "123456789012345678",
                                     "2.5e-3"};
  assert_int_equal(v.n, 11);
  for (int i = 0; i < v.n; i++) {
    assert_int_equal(v.items[i].type, JSON_NUMBER);
    assert_string_equal(v.items[i].str, text[i]);
    double want = strtod(text[i], NULL);
    assert_memory_equal(&v.items[i].num, &want, sizeof want);
  }
  assert_true(signbit(v.items[1].num));
  assert_true(isinf(v.items[8].num));
  uint64_t u = 7;
  assert_int_equal(json_u64(&v.items[0], &u), 0);
  assert_true(u == 0);
  assert_int_equal(json_u64(&v.items[3], &u), 0);
  assert_true(u == UINT64_MAX);
  assert_int_equal(json_u64(&v.items[9], &u), 0);
  assert_true(u == 123456789012345678ull); // a double would round it
  static const int not_u64[] = {1, 2, 4, 5, 6, 7, 8, 10};
  for (size_t i = 0; i < sizeof not_u64 / sizeof not_u64[0]; i++) {
    u = 7;
    if (json_u64(&v.items[not_u64[i]], &u) == 0) fail_msg("%s read as a u64", text[not_u64[i]]);
    assert_true(u == 7);
  }
  json_free(&v);
  parse_ok(&v, "\"5\"", 0);
  assert_int_equal(json_u64(&v, &u), -1); // a string is not a number
  json_free(&v);
}

static void test_nonfinite(void **state) {
  json_value v;
  parse_ok(&v, "[NaN, -NaN, nan, -nan, Infinity, -Infinity, inf, -inf, 1]", JSON_NONFINITE);
  static const char *const text[] = {"NaN",      "-NaN",      "nan", "-nan",
                                     "Infinity", "-Infinity", "inf", "-inf"};
  for (int i = 0; i < 8; i++) {
    const json_value *x = &v.items[i];
    assert_int_equal(x->type, JSON_NUMBER);
    assert_string_equal(x->str, text[i]);
    assert_true(i < 4 ? isnan(x->num) : isinf(x->num));
    assert_int_equal(!!signbit(x->num), text[i][0] == '-');
  }
  assert_true(v.items[8].num == 1.0);
  json_free(&v);
}

static void test_utf8_valid(void **state) {
  assert_true(json_utf8_valid(""));
  assert_true(json_utf8_valid("ascii \x7f"));
  assert_true(
      json_utf8_valid("\xc2\x80\xdf\xbf\xe0\xa0\x80\xef\xbf\xbf\xf0\x90\x80\x80\xf4\x8f\xbf\xbf"));
  static const char *const bad[] = {"\x80",
                                    "\xc1\xbf",
                                    "\xc2",
                                    "\xe0\x9f\xbf",
                                    "\xed\xbf\xbf",
                                    "\xf4\x90\x80\x80",
                                    "\xf5\x80\x80\x80",
                                    "\xff",
                                    "ok\xc3"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    if (json_utf8_valid(bad[i])) fail_msg("case %zu accepted", i);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_document),       cmocka_unit_test(test_malformed),
      cmocka_unit_test(test_length_bounded), cmocka_unit_test(test_nesting_limit),
      cmocka_unit_test(test_unescape),       cmocka_unit_test(test_escape),
      cmocka_unit_test(test_numbers),        cmocka_unit_test(test_nonfinite),
      cmocka_unit_test(test_utf8_valid),     cmocka_unit_test(test_find_duplicate),
      cmocka_unit_test(test_find_duplicate_large),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
