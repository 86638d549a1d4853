// Prints src/exact/rng.c's draws for a fixed set of keys, one line per key:
// seed purpose step index u32 uniform(%a) normal(%a). check_rng.py compares
// them with its own Philox so the oracle's dropout masks are known to match.
#include <inttypes.h>
#include <stdio.h>

#include "exact/rng.h"

// With arguments "SEED PURPOSE STEP BASE N P": prints the dropout keep-mask
// (1 = kept: uniform >= p, both float) for indices BASE .. BASE+N-1, one line.
static int print_mask(char **argv) {
  uint64_t seed, step, base, n;
  uint32_t purpose;
  float p;
  if (sscanf(argv[1], "%" SCNu64, &seed) != 1 || sscanf(argv[2], "%" SCNu32, &purpose) != 1 ||
      sscanf(argv[3], "%" SCNu64, &step) != 1 || sscanf(argv[4], "%" SCNu64, &base) != 1 ||
      sscanf(argv[5], "%" SCNu64, &n) != 1 || sscanf(argv[6], "%f", &p) != 1)
    return 2;
  for (uint64_t i = 0; i < n; i++)
    putchar(ts_rng_uniform(seed, purpose, step, base + i) >= p ? '1' : '0');
  putchar('\n');
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 7) return print_mask(argv);
  static const uint64_t seeds[] = {0, 1, 1337, 0x123456789abcdefull, 0xffffffffffffffffull};
  static const uint64_t steps[] = {0, 1, 2, 7, 0xffffffffull, 0x12345678901ull};
  static const uint64_t indices[] = {0, 1, 2, 255, 65535, 4294967295ull, 4294967296ull,
                                     0x0123456789abcdefull, 0xfffffffffffffffeull};
  for (size_t a = 0; a < sizeof seeds / sizeof *seeds; a++)
    for (uint32_t purpose = 1; purpose <= 5; purpose++)
      for (size_t b = 0; b < sizeof steps / sizeof *steps; b++)
        for (size_t c = 0; c < sizeof indices / sizeof *indices; c++) {
          uint64_t s = seeds[a], st = steps[b], i = indices[c];
          printf("%" PRIu64 " %" PRIu32 " %" PRIu64 " %" PRIu64 " %" PRIu32 " %a %a\n", s,
                 purpose, st, i, ts_rng_u32(s, purpose, st, i),
                 (double)ts_rng_uniform(s, purpose, st, i),
                 (double)ts_rng_normal(s, purpose, st, i));
        }
  return 0;
}
