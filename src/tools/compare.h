// `tessera compare`: compares two run logs (JSONL, docs/RUN-LOG.md run contract) on
// the fields that define the result (losses, gradient norms, learning rates,
// the final parameter hash) and ignores timing and communication fields.
#ifndef TS_COMPARE_H
#define TS_COMPARE_H
#include <stdio.h>

// rtol = 0: bitwise (the *_hex fields must be equal strings). rtol > 0: numbers
// within relative tolerance. Prints "identical" (or "equal within rtol ...") or
// the first divergence to out. Returns 0 when equal, 1 when they differ, and
// TS_EUSAGE (2; message via ts_errmsg) for a log that cannot be read or is
// malformed, like diff(1).
int ts_compare_logs(const char *path_a, const char *path_b, double rtol, FILE *out);
#endif
