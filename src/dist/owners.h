// Who owns which part of the model's state, and the sequential computations
// over all of it (docs/ALGORITHMS.md §12).
//
// The canonical model is one flat vector of parameters in canonical order
// (the serial model's; tensor views carry their offset `at`). Under a
// layout that partitions the model (a pipeline's stages) each rank of a
// group owns some runs of that vector; together the group's runs tile it.
// A few results are sequential over the whole vector and must be the serial
// run's bits: the gradient norm (a double sum over fixed chunks, in order),
// the parameter hash (FNV-1a over the bytes, in order) and a checkpoint's
// CRC-32. Each is a fold: a small state carried from the first element to the
// last. ts_owners_fold runs it over the runs in canonical order, each run on
// its owner, the state travelling from one owner to the next (a message of a
// few bytes), so every addition happens in the serial order.
#ifndef TS_OWNERS_H
#define TS_OWNERS_H
#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "tessera.h"

typedef struct {
  uint64_t at, len; // canonical elements [at, at + len)
  uint64_t local;   // its first element's offset in the owner's parameter buffer
  uint64_t mlocal;  // and in its optimizer moments
  int rank;         // the owner, in the group
} ts_owned_run;

typedef struct {
  ts_comm *group; // the ranks whose runs tile the vector (NULL: this process alone)
  int n;          // runs, by canonical offset
  ts_owned_run *run;
  uint64_t total; // the canonical vector's elements
} ts_owners;

// The group's runs from each rank's owned tensors t[0, nt) (views into the
// parameter buffer starting at base, canonical offsets in `at`; views of a
// part of a tensor have the part's), their moments at mlocal[i] (NULL: at
// their parameter offsets): one all-gather over the group. TS_ERUNTIME when
// the runs do not tile [0, total) exactly.
int ts_owners_create(ts_comm *group, const ts_tensor *t, int nt, const float *base,
                     const uint64_t *mlocal, uint64_t total, ts_owners *out);
void ts_owners_free(ts_owners *o);

// One step of a fold: the run r of the canonical vector (its elements at
// r->local, r->mlocal in the caller's buffers, ctx) into the state.
typedef void ts_fold_fn(void *state, const ts_owned_run *r, void *ctx);

// Runs fn over every run of the group in canonical order, each on its owner;
// the state (bytes) starts as given on every rank and ends, on every rank, as
// the last run left it. On a group of one (or NULL) it is a loop.
int ts_owners_fold(const ts_owners *o, void *state, size_t bytes, ts_fold_fn *fn, void *ctx);
#endif
