// A strict JSON reader into a small tree, and a string escaper for writing.
// Used for checkpoint headers (ckpt.c), run logs (compare.c) and the config
// object (config_json.c), so that all three accept and refuse the same things.
#ifndef TS_JSON_H
#define TS_JSON_H
#include <stddef.h>
#include <stdint.h>

typedef enum {
  JSON_NULL, JSON_FALSE, JSON_TRUE, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT
} json_type;

typedef struct json_value json_value;
struct json_value {
  json_type type;
  size_t pos;        // byte offset of the value in the input, for messages
  char *key;         // member name when this value sits in an object, else NULL
  char *str;         // STRING: decoded UTF-8; NUMBER: the number as written
  double num;        // NUMBER: its value (strtod of str)
  int n;             // ARRAY, OBJECT: number of items
  json_value *items; // ARRAY, OBJECT: the items in document order (duplicate keys kept)
};

// Leniencies, off by default.
enum {
  JSON_NONFINITE = 1, // NaN, Infinity, nan, inf (optionally with '-') as numbers: logs of a
                      // diverged run hold them (Python and C's printf write them so)
  JSON_ANY_BYTES = 2, // string bytes >= 0x80 need not be UTF-8: file paths are any bytes
};

#define JSON_MAX_DEPTH 64 // arrays and objects nested deeper are refused

typedef struct {
  size_t pos;      // byte offset of the problem
  const char *msg; // what is wrong (a static string)
  int oom;         // 1: allocation failed, the input may be fine
} json_error;

// Parses the n bytes at s as one JSON value, optionally surrounded by
// whitespace. Returns 0, or -1 with *err set and *out empty. Strings are
// NUL-terminated, so "\u0000" is refused rather than cutting one short.
int json_parse(json_value *out, const char *s, size_t n, int flags, json_error *err);
void json_free(json_value *v);
// The first member of obj named key, or NULL (also when obj is not an object).
const json_value *json_get(const json_value *obj, const char *key);
// The first member, anywhere in the tree of v, whose key an earlier member of
// the same object already has; NULL when every object's keys are distinct.
// Readers for which a repeated key is damage (json_get would silently take
// the first) refuse the document with it.
const json_value *json_find_duplicate(const json_value *v);
// Of obj's own members (not recursing), the first whose key an earlier one
// has, into *dup (NULL when none, or obj is not an object); O(n log n).
// Returns 0, or -1 when out of memory.
int json_object_duplicate(const json_value *obj, const json_value **dup);
// 0 when v is a number written as a plain integer in 0..2^64-1 (exact, not via double).
int json_u64(const json_value *v, uint64_t *out);
// 1 when the NUL-terminated s is valid UTF-8 (no overlong forms or surrogates).
int json_utf8_valid(const char *s);
// Writes s as a JSON string literal, quotes included, into dst like snprintf:
// at most cap bytes with a NUL, and returns the full length (without the NUL).
// '"', '\\' and control characters are escaped; other bytes are copied as is.
size_t json_escape(char *dst, size_t cap, const char *s);
#endif
