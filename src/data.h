// Byte-level corpus: any file is a stream of tokens 0..255 (vocab 256), split
// into a training part and a held-out validation tail. Windows are sampled by
// a pure function of (seed, step, sequence index) so that every layout reads
// the same windows (docs/EXACTNESS.md R4).
#ifndef TS_DATA_H
#define TS_DATA_H
#include <stddef.h>
#include <stdint.h>

enum { TS_SPLIT_TRAIN = 0, TS_SPLIT_VAL = 1 };

typedef struct ts_data ts_data;

// Reads the whole file. The last val_frac of the bytes (rounded down) is the
// validation split, the rest training. Fails (TS_ERUNTIME, message names the
// file) when the file cannot be read or a split is shorter than min_len bytes.
int ts_data_open(const char *path, double val_frac, size_t min_len, ts_data **out);
void ts_data_close(ts_data *data);
size_t ts_data_split_len(const ts_data *data, int split);

// Window for (step, index) of length T+1 from a split: inputs[t] = byte at
// start+t, targets[t] = byte at start+t+1, t < T, with
// start = ts_rng_below(seed, TS_RNG_DATA, step, index, len - T).
// Validation windows use the same rule (callers pass a fixed step).
int ts_data_window(const ts_data *data, int split, uint64_t seed, uint64_t step,
                   uint64_t index, int T, int *inputs, int *targets);
// Start offset of that window (for logs and checkpoints).
size_t ts_data_window_start(const ts_data *data, int split, uint64_t seed, uint64_t step,
                            uint64_t index, int T);
#endif
