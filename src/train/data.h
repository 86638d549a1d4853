// Token data: a file of token ids, held whole in memory, split into a training
// part and a held-out validation tail (or a second file for validation).
// Windows are sampled by a pure function of (seed, step, sequence index) so
// that every layout reads the same windows (docs/EXACTNESS.md R4).
//
// Formats (docs/DATA.md), ts_data_format in tessera.h:
//   bytes  any file, each byte a token 0..255 (the default for text)
//   u16    raw little-endian uint16 token ids, no header (nanoGPT's .bin)
//   u32    raw little-endian uint32 token ids, no header
//   llmc   llm.c's .bin: 256 little-endian int32 (magic 20240520, version 1,
//          the token count), then that many little-endian uint16 ids
#ifndef TS_DATA_H
#define TS_DATA_H
#include <stddef.h>
#include <stdint.h>

enum { TS_SPLIT_TRAIN = 0, TS_SPLIT_VAL = 1 };

// llm.c's token-file header (llm.c dev/data): 256 int32, the first three used.
#define TS_LLMC_MAGIC 20240520
#define TS_LLMC_VERSION 1 // uint16 tokens
#define TS_LLMC_HEADER_BYTES 1024

typedef struct ts_data ts_data;

// What a file says it is, from its first bytes and its name: TS_DATA_LLMC
// when it starts with the llm.c magic, TS_DATA_DETECT for any other .bin
// (uint16 or uint32 ids, nothing in the file tells which), TS_DATA_BYTES for
// anything else. TS_ERUNTIME naming the file when it cannot be read.
int ts_data_detect(const char *path, int *format);
// Whether a .bin without a header, read as uint16 ids, looks like uint32 ids
// instead: its size a multiple of 4, and of its first 4096 16-bit words every
// second one (the high half of a little-endian id below 65536) is zero and
// some other one is not. Read as uint16, such a file is a valid stream of ids
// every second one 0, and no range check would notice.
int ts_data_looks_u32(const char *path);
// The one format the files are read in: `format` unless TS_DATA_DETECT, else
// what ts_data_detect says of each (val_path NULL or "": path alone; path
// NULL: val_path alone). TS_EUSAGE asking for --data-format for a .bin that
// does not say, and for two files that say different things.
int ts_data_resolve(const char *path, const char *val_path, int format, int *out);
// TS_EUSAGE naming --vocab when a vocabulary cannot hold the ids of a
// resolved format (bytes: 0..255) of the file at path.
int ts_data_check_vocab(int format, int vocab, const char *path);

typedef struct {
  const char *path;     // training tokens, and the validation tail unless val_path;
                        // NULL with a val_path: no training split (evaluation)
  const char *val_path; // NULL or "": validation is the last val_frac of path
  int format;           // a ts_data_format; TS_DATA_DETECT: ts_data_resolve
  int vocab;            // every token id must be below it
  double val_frac;      // without val_path; 0 means no validation split
  size_t min_len;       // tokens each split needs (a window of T needs T + 1)
} ts_data_spec;

// Reads the files whole and checks them before any window is drawn: the
// format's rules (a llm.c header's version and count, a whole number of
// tokens), every token id below vocab (the first one that is not named by
// its byte offset), and each split's length. TS_ERUNTIME naming the file, or
// TS_EUSAGE naming the flag (--val-frac, --vocab, --data-format).
int ts_data_open_spec(const ts_data_spec *spec, ts_data **out);
// The byte-level reader: ts_data_open_spec of path in the bytes format, vocab
// 256, no validation file. The last val_frac of the bytes (rounded down) is
// the validation split, the rest training.
int ts_data_open(const char *path, double val_frac, size_t min_len, ts_data **out);
void ts_data_close(ts_data *data);
// The format the data was read in (never TS_DATA_DETECT).
int ts_data_format_of(const ts_data *data);
// FNV-1a of the format and of both splits' tokens (their lengths first):
// what two ranks compare to know they read the same data.
uint64_t ts_data_digest(const ts_data *data);
// Tokens in a split.
size_t ts_data_split_len(const ts_data *data, int split);

// Window for (step, index) of length T+1 from a split: inputs[t] = token at
// start+t, targets[t] = token at start+t+1, t < T, with
// start = ts_rng_below(seed, TS_RNG_DATA, step, index, len - T), positions
// and len counted in tokens of the split.
// Validation windows use the same rule (callers pass a fixed step).
int ts_data_window(const ts_data *data, int split, uint64_t seed, uint64_t step,
                   uint64_t index, int T, int *inputs, int *targets);
// The window of T+1 tokens of a split from token `start` (ts_data_window's
// after it has drawn the start; tessera eval --whole-split's at k·T).
int ts_data_window_at(const ts_data *data, int split, size_t start, int T, int *inputs,
                      int *targets);
// Start offset of that window, in tokens (for logs and checkpoints).
size_t ts_data_window_start(const ts_data *data, int split, uint64_t seed, uint64_t step,
                            uint64_t index, int T);
#endif
