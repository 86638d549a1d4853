// Checkpoints in the safetensors format (little-endian u64 header length,
// JSON header, raw little-endian F32 data), with tessera's metadata in the
// header's "__metadata__" map (string -> string). Writes are atomic: temp file
// in the same directory, fsync, rename, fsync of the directory. Damage
// (truncation, a bad header, flipped bytes) is detected on open: the metadata
// carries a checksum of the data section ("tessera.data_crc32") and, in
// format 2, of the header ("tessera.header_crc32").
#ifndef TS_CKPT_H
#define TS_CKPT_H
#include "tessera.h"

typedef struct {
  const char *key;
  const char *value;
} ts_meta;

// Writes n tensors (dtype F32) in the given order plus n_meta metadata pairs,
// in format 1: the data section checksummed ("tessera.data_crc32"). tessera
// dump writes its golden files so.
int ts_ckpt_write(const char *path, const ts_tensor *tensors, int n, const ts_meta *meta,
                  int n_meta);
// The same with the header (every metadata value, shape and offset)
// checksummed too ("tessera.header_crc32"), in the newest format (3: a
// "tessera.run" member is written last and left out of that checksum; ckpt.c).
// Training checkpoints.
int ts_ckpt_write_v2(const char *path, const ts_tensor *tensors, int n, const ts_meta *meta,
                     int n_meta);
// The same in a given format, 1 to 3 (tests: files as older builds wrote them).
int ts_ckpt_write_format(const char *path, const ts_tensor *tensors, int n, const ts_meta *meta,
                         int n_meta, int format);

// For writers that place the data themselves (the ranks of a partitioned
// model, each its own byte ranges): the file's first bytes in the newest format, the
// length word and the header, *len of them (malloc'd into *out), for tensors
// whose data (in table order, no gaps; their data pointers unused) has the
// CRC-32 data_crc. The length does not depend on data_crc.
int ts_ckpt_prefix(const char *path, const ts_tensor *tensors, int n, const ts_meta *meta,
                   int n_meta, uint32_t data_crc, unsigned char **out, size_t *len);
// The data section's CRC-32 continued over n more bytes (start with 0).
uint32_t ts_ckpt_crc32(uint32_t crc, const void *data, size_t n);
// The end of such a write: the finished temp file renamed over path and its
// directory synced (on failure tmp is removed, the old path untouched).
int ts_ckpt_commit(const char *tmp, const char *path);

// TS_ERUNTIME with the message "checkpoint <path>: <what>", as every error
// about a checkpoint file reads (its readers' too).
int ts_ckpt_fail(const char *path, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

typedef struct ts_ckpt ts_ckpt;
// Opens and fully validates a checkpoint (size, header, offsets, checksum).
// Errors are TS_ERUNTIME with a message naming the file and the damage.
int ts_ckpt_open(const char *path, ts_ckpt **out);
// The same but for the data section's checksum, which is not read: a reader
// of the metadata alone (--keep-last asking which run wrote a file) costs a
// header, not the whole file; its data, unchecked, is not to be used.
int ts_ckpt_open_header(const char *path, ts_ckpt **out);
void ts_ckpt_close(ts_ckpt *ck);
// Metadata value or NULL when absent.
const char *ts_ckpt_meta(const ts_ckpt *ck, const char *key);
int ts_ckpt_num_tensors(const ts_ckpt *ck);
// 1, 2 or 3 (tessera.format; ts_ckpt_open refuses any other).
int ts_ckpt_format(const ts_ckpt *ck);
const char *ts_ckpt_path(const ts_ckpt *ck);
// TS_OK when the file holds exactly the n tensors of t, in that order, with
// their shapes (no tensor missing or extra, none moved); else an error naming
// the first difference.
int ts_ckpt_expect(const ts_ckpt *ck, const ts_tensor *t, int n);
// n bytes of the data section from byte off into dst (a reader of part of a
// tensor: a --zero shard's moments).
int ts_ckpt_read(const ts_ckpt *ck, uint64_t off, void *dst, size_t n);
// Tensor i of the file in its order: name and shape (data NULL).
int ts_ckpt_tensor(const ts_ckpt *ck, int i, ts_tensor *out);
// Copies tensor t->name into t->data; its shape must equal t->shape (error otherwise).
int ts_ckpt_load(const ts_ckpt *ck, ts_tensor *t);
#endif
