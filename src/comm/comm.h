// The communicator: one process group (the data group, the sequence group,
// the world) behind a table of operations, so the MPI version here and an
// NCCL version later are interchangeable (a backend is a struct of function
// pointers plus its state).
//
// Every operation goes through the ts_comm_* wrappers below, which count it:
// calls and bytes this rank sent plus received, per kind, and per layer when
// the caller passes a layer tag (>= 0; -1 = not a layer's). A group of one
// rank moves nothing and counts nothing.
//
// Exactness (docs/EXACTNESS.md R6): the float reductions come in two kinds.
//   *_tree  the canonical tree over ranks (R3), done with this library's own
//           additions in the rounds of comm_tree.h; MPI (or NCCL) only moves
//           bytes. Any group size: past the last rank the tree's positions
//           are empty, as the serial tree pads its leaves.
//   *_fast  MPI's own reduction (--fast): unspecified association, checked
//           within a tolerance only.
#ifndef TS_COMM_H
#define TS_COMM_H
#include <stddef.h>
#include <stdint.h>

typedef enum {
  TS_COMM_ALLREDUCE = 0,
  TS_COMM_REDUCE_SCATTER,
  TS_COMM_ALLGATHER,
  TS_COMM_ALLTOALL,
  TS_COMM_SENDRECV,
  TS_COMM_BCAST,
  TS_COMM_BARRIER,
  TS_COMM_NKINDS
} ts_comm_kind;

// JSON names of the kinds: "allreduce", "reduce_scatter", ...
extern const char *const ts_comm_kind_names[TS_COMM_NKINDS];

typedef struct {
  uint64_t calls;
  uint64_t bytes; // sent + received by this rank
} ts_comm_count;

typedef struct ts_comm ts_comm;

// A block of an all-to-all laid out as a float matrix (ts_comm_alltoall_2d):
// `rows` rows `ld` floats apart, each made of `chunks` runs of `width` floats
// `cstride` apart (chunks 0 or 1: one run). Blocks are `block` floats apart.
typedef struct {
  size_t rows, width, ld, block;
  size_t chunks, cstride;
} ts_block2d;

// Floats in one block, and the offset of its i-th float in its layout.
static inline size_t ts_block2d_floats(const ts_block2d *b) {
  return b->rows * (b->chunks > 1 ? b->chunks : 1) * b->width;
}
static inline size_t ts_block2d_at(const ts_block2d *b, size_t i) {
  size_t per_row = (b->chunks > 1 ? b->chunks : 1) * b->width;
  size_t row = i / per_row, j = i % per_row;
  return row * b->ld + (j / b->width) * b->cstride + j % b->width;
}

// What a backend implements. The wrappers handle size 1 and counting, so a
// backend only ever sees groups of two or more ranks. Each returns TS_OK or
// an error code with a message (ts_fail).
typedef struct {
  const char *name;
  int (*barrier)(ts_comm *c);
  // recv (size * bytes) = every rank's send (bytes), in rank order.
  int (*allgather)(ts_comm *c, const void *send, void *recv, size_t bytes);
  // send and recv hold size blocks of `bytes`; block j of send goes to rank j,
  // block j of recv comes from rank j.
  int (*alltoall)(ts_comm *c, const void *send, void *recv, size_t bytes);
  // The same with every block a strided float matrix (ts_block2d): block j
  // of send starts at send + j·s->block, block j of recv at recv + j·r->block.
  int (*alltoall_2d)(ts_comm *c, const float *send, const ts_block2d *s, float *recv,
                     const ts_block2d *r);
  // Sends sbytes to dst and receives rbytes from src at once; dst or src < 0
  // means no such side.
  int (*sendrecv)(ts_comm *c, const void *send, size_t sbytes, int dst, void *recv,
                  size_t rbytes, int src);
  int (*bcast)(ts_comm *c, void *buf, size_t bytes, int root);
  // In place on buf (n floats, the same n on every rank): on return this
  // rank's chunk (ts_comm_chunk) holds the canonical tree sum over ranks; the
  // rest of buf is scratch.
  int (*reduce_scatter_tree)(ts_comm *c, float *buf, size_t n);
  // In place: every element becomes the canonical tree sum over ranks.
  int (*allreduce_tree)(ts_comm *c, float *buf, size_t n);
  // In place, MPI's own sum (--fast).
  int (*allreduce_fast)(ts_comm *c, float *buf, size_t n);
  // Bytes of its packing buffers (NULL: none).
  size_t (*buffer_bytes)(const ts_comm *c);
  void (*destroy)(ts_comm *c);
} ts_comm_ops;

struct ts_comm {
  const ts_comm_ops *ops;
  void *state; // the backend's
  const void *mpi; // the group's MPI_Comm (a pointer to it), for MPI-IO; NULL: a group of one
  int rank, size;
  ts_comm_count total[TS_COMM_NKINDS];
  ts_comm_count *layer; // nlayer * TS_COMM_NKINDS, grown on demand
  int nlayer;
  double seconds;       // wall time inside the backend's operations
};

// A group of one: every operation is local (copies at most) and uncounted.
int ts_comm_serial(ts_comm **out);
// A group over an MPI communicator (src/comm/comm_mpi.c). mpi_comm points to
// an MPI_Comm; the group works on its own duplicate of it.
int ts_comm_mpi_create(const void *mpi_comm, ts_comm **out);
// The same group with NCCL moving the data between GPUs, one per process
// (src/comm/comm_nccl.cu; CUDA builds only): buffers are device-accessible,
// and the process's GPU is selected first (ts_backend_get).
int ts_comm_nccl_create(const void *mpi_comm, ts_comm **out);
void ts_comm_free(ts_comm *c);

// The chunk of n elements that rank r of P owns after a reduce-scatter:
// balanced, in rank order (the first n % P chunks have one more element).
void ts_comm_chunk(size_t n, int P, int r, size_t *off, size_t *len);
// Bytes rank r of P sends plus receives in one tree reduce-scatter of n
// floats (an all-reduce moves twice that). 4n(P-1)/P each way when P | n.
uint64_t ts_comm_tree_bytes(size_t n, int P, int r);
// Bytes a rank sends plus receives in an all-gather of `bytes` from each rank
// of P, or an all-to-all of blocks of `bytes`: 2(P−1)·bytes.
uint64_t ts_comm_gather_bytes(size_t bytes, int P);
// Bytes rank r of P sends plus receives in one tree all-reduce of n floats
// (in its pieces, ts_comm_allreduce_piece).
uint64_t ts_comm_allreduce_bytes(size_t n, int P, int r);
// Floats in each of the two packing buffers the MPI communicator keeps for a
// tree reduction of n floats over P ranks (a piece of a round, at most 2^20
// floats, whatever n), and for an all-to-all of strided blocks of n floats
// (all P blocks packed at once). The buffers grow to the largest call's and
// stay: what the fit check and `tessera plan` count for a group's packing
// (ts_comm_buffer_bytes measures it).
size_t ts_comm_pack_tree(size_t n, int P);
size_t ts_comm_pack_2d(size_t n, int P);
// Bytes the group's packing buffers hold now (0: a group of one, or a
// backend without host packing).
size_t ts_comm_buffer_bytes(const ts_comm *c);
// One call of `kind` moving `bytes` added to counts[TS_COMM_NKINDS]: how a
// strategy states its traffic (strategy.h `traffic`) with the counting above.
void ts_comm_tally(ts_comm_count *counts, ts_comm_kind kind, uint64_t bytes);

// ---- the operations (counted) -----------------------------------------------------
int ts_comm_barrier(ts_comm *c);
int ts_comm_allgather(ts_comm *c, const void *send, void *recv, size_t bytes, int layer);
int ts_comm_alltoall(ts_comm *c, const void *send, void *recv, size_t bytes, int layer);
// Counted as an all-to-all of the block's floats (rows·chunks·width).
int ts_comm_alltoall_2d(ts_comm *c, const float *send, const ts_block2d *s, float *recv,
                        const ts_block2d *r, int layer);
int ts_comm_sendrecv(ts_comm *c, const void *send, size_t sbytes, int dst, void *recv,
                     size_t rbytes, int src, int layer);
int ts_comm_send(ts_comm *c, const void *buf, size_t bytes, int dst, int layer);
int ts_comm_recv(ts_comm *c, void *buf, size_t bytes, int src, int layer);
int ts_comm_bcast(ts_comm *c, void *buf, size_t bytes, int root, int layer);
int ts_comm_reduce_scatter_tree(ts_comm *c, float *buf, size_t n, int layer);
// (in pieces of ts_comm_allreduce_piece floats, 2^24 unless a test sets it:
// the same sums, bounded scratch)
extern size_t ts_comm_allreduce_piece;
int ts_comm_allreduce_tree(ts_comm *c, float *buf, size_t n, int layer);
int ts_comm_allreduce_fast(ts_comm *c, float *buf, size_t n, int layer);

// ---- counters ------------------------------------------------------------------------
void ts_comm_reset_counts(ts_comm *c);
ts_comm_count ts_comm_total(const ts_comm *c, ts_comm_kind kind);
ts_comm_count ts_comm_layer(const ts_comm *c, ts_comm_kind kind, int layer);
// Seconds spent in this group's operations since the last reset: waiting for
// the other ranks included, so compute time = step time - this.
double ts_comm_seconds(const ts_comm *c);
// Writes the counters of groups comms[0..n) summed per kind as one JSON
// object: {"allreduce":{"calls":1,"bytes":964608},...} with only the kinds
// used, then "layers":{"0":{...},...} when any call had a layer tag; "{}"
// when nothing was counted. Returns the length, or -1 when cap is too small.
int ts_comm_counts_json(ts_comm *const *comms, int n, char *buf, size_t cap);
#endif
