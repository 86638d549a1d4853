// The SentencePiece side of src/text/tokenizer.c: a C interface to the C++
// library (libsentencepiece), compiled only when configure finds it
// (TS_HAVE_SENTENCEPIECE). Nothing here throws: every C++ exception, and
// every status the library returns, comes back as -1 with a message in err.
#ifndef TS_TOKENIZER_SPM_H
#define TS_TOKENIZER_SPM_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ts_spm ts_spm;

// A model from the n bytes of a model file (what spm_train writes); NULL
// with the library's reason in err when they are not one.
ts_spm *ts_spm_load(const void *bytes, size_t n, char *err, size_t cap);
void ts_spm_free(ts_spm *spm);
int ts_spm_vocab(const ts_spm *spm);
// The id of a line break: the byte piece <0x0A> of a model trained with
// --byte_fallback, else a piece "\n" (a user-defined symbol); -1 when the
// model has neither.
int ts_spm_newline_id(const ts_spm *spm);
// Appends the ids of len bytes of text (one line, no line break in it) to
// (*ids)[*n ..], growing the malloc'd array (capacity *cap) as needed.
int ts_spm_encode(const ts_spm *spm, const char *text, size_t len, int32_t **ids, size_t *n,
                  size_t *cap, char *err, size_t errcap);
// Appends the text of n ids (each inside the vocabulary) to (*text)[*len ..],
// growing the malloc'd buffer (capacity *cap, room kept for a NUL).
int ts_spm_decode(const ts_spm *spm, const int32_t *ids, size_t n, char **text, size_t *len,
                  size_t *cap, char *err, size_t errcap);

#ifdef __cplusplus
}
#endif
#endif
