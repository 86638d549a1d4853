// Text <-> token ids. Two kinds behind one interface:
//   bytes          each byte is a token 0..255 (the default, what data/corpus.txt
//                  trains on); decoding writes the bytes back unchanged
//   sentencepiece  a trained SentencePiece model file (the LLaMA family's
//                  tokenizer), when tessera is built with it
// The sampler encodes prompts and decodes what it generates with the same
// tokenizer the training data was made with (docs/TOKENIZER.md).
//
// SentencePiece sees text one line at a time, as spm_train trained on it and
// as spm_encode encodes it: each line is encoded on its own, and the line
// break after it becomes the model's id for a line break (the byte piece
// <0x0A> of a model trained with --byte_fallback) or, in a model without
// one, nothing, so that encoding a file gives spm_encode's ids line after
// line. Decoding splits at those ids the same way, so text the model's
// normalisation leaves unchanged decodes back to itself, line breaks
// included.
#ifndef TS_TOKENIZER_H
#define TS_TOKENIZER_H
#include <stddef.h>
#include <stdint.h>

typedef struct ts_tokenizer ts_tokenizer;

// path NULL or "": the bytes tokenizer. Otherwise a tokenizer model file;
// TS_ERUNTIME naming the file when it cannot be read or is not a model this
// build can load.
int ts_tokenizer_open(const char *path, ts_tokenizer **out);
void ts_tokenizer_free(ts_tokenizer *tok);
// Ids are 0 .. vocab-1.
int ts_tokenizer_vocab(const ts_tokenizer *tok);
// "bytes" or "sentencepiece".
const char *ts_tokenizer_kind(const ts_tokenizer *tok);
// The model file as opened ("" for bytes), and the FNV-1a (64-bit) digest of
// the bytes the model was loaded from (0 for bytes): what a checkpoint
// records, so that decoding later can tell it has the same tokenizer.
const char *ts_tokenizer_path(const ts_tokenizer *tok);
uint64_t ts_tokenizer_digest(const ts_tokenizer *tok);
// Encodes len bytes of text into a malloc'd array *ids of *n ids (the caller
// frees it). TS_ERUNTIME on allocation failure.
int ts_tokenizer_encode(const ts_tokenizer *tok, const char *text, size_t len, int32_t **ids,
                        size_t *n);
// Decodes n ids into a malloc'd, NUL-terminated *text of *len bytes (the
// caller frees it). TS_ERUNTIME naming the id when one is outside the
// vocabulary.
int ts_tokenizer_decode(const ts_tokenizer *tok, const int32_t *ids, size_t n, char **text,
                        size_t *len);
#endif
