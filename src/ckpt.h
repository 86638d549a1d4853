// Checkpoints in the safetensors format (little-endian u64 header length,
// JSON header, raw little-endian F32 data), with tessera's metadata in the
// header's "__metadata__" map (string -> string). Writes are atomic: temp file
// in the same directory, fsync, rename, fsync of the directory. Damage
// (truncation, a bad header, flipped data bytes) is detected on open: the
// metadata carries a checksum of the data section ("tessera.data_crc32").
#ifndef TS_CKPT_H
#define TS_CKPT_H
#include "tessera.h"

typedef struct {
  const char *key;
  const char *value;
} ts_meta;

// Writes n tensors (dtype F32) in the given order plus n_meta metadata pairs.
int ts_ckpt_write(const char *path, const ts_tensor *tensors, int n, const ts_meta *meta,
                  int n_meta);

typedef struct ts_ckpt ts_ckpt;
// Opens and fully validates a checkpoint (size, header, offsets, checksum).
// Errors are TS_ERUNTIME with a message naming the file and the damage.
int ts_ckpt_open(const char *path, ts_ckpt **out);
void ts_ckpt_close(ts_ckpt *ck);
// Metadata value or NULL when absent.
const char *ts_ckpt_meta(const ts_ckpt *ck, const char *key);
int ts_ckpt_num_tensors(const ts_ckpt *ck);
// Copies tensor t->name into t->data; its shape must equal t->shape (error otherwise).
int ts_ckpt_load(const ts_ckpt *ck, ts_tensor *t);
#endif
