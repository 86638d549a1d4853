// The communicator over MPI (CPU). MPI moves bytes; the exact reductions do
// their own additions (ts_tree_add) in the canonical tree order (docs/EXACTNESS.md
// R3, R6; docs/ALGORITHMS.md §2): the rounds of src/comm/comm_tree.h, recursive
// halving with pair distance d = 1, 2, 4, ... for the reduce-scatter, then
// the mirror-image all-gather (d = P/2 ... 1) for an all-reduce. In each
// round the rank swaps its packed chunks with its partner's (mpi_sendrecv).
//
// Messages over 1 GiB go in pieces: MPI counts are ints.
#include <limits.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "comm_tree.h"
#include "exact/tree.h"
#include "tessera.h"

typedef struct {
  MPI_Comm comm;
  float *sendbuf, *recvbuf; // packing space of the tree reductions
  size_t cap;               // floats in each
} mpi_state;

#define PIECE ((size_t)1 << 30) // bytes per MPI call

static int mpi_error(int rc, const char *what) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return ts_fail(TS_ERUNTIME, "MPI %s failed: %s", what, msg);
}

static MPI_Comm comm_of(ts_comm *c) { return ((mpi_state *)c->state)->comm; }

static int reserve(mpi_state *s, size_t n) {
  if (n <= s->cap) return TS_OK;
  float *a = realloc(s->sendbuf, n * sizeof(float));
  if (a) s->sendbuf = a;
  float *b = a ? realloc(s->recvbuf, n * sizeof(float)) : NULL;
  if (b) s->recvbuf = b;
  if (!a || !b) return ts_fail(TS_ERUNTIME, "out of memory (%zu floats of reduction buffers)", n);
  s->cap = n;
  return TS_OK;
}

// ---- moving bytes ------------------------------------------------------------------
static int mpi_sendrecv(ts_comm *c, const void *send, size_t sbytes, int dst, void *recv,
                        size_t rbytes, int src) {
  MPI_Comm comm = comm_of(c);
  if (dst < 0) sbytes = 0;
  if (src < 0) rbytes = 0;
  int to = dst < 0 ? MPI_PROC_NULL : dst, from = src < 0 ? MPI_PROC_NULL : src;
  // Both sides cut a message into the same pieces, so the piece counts pair up.
  size_t pieces_s = (sbytes + PIECE - 1) / PIECE, pieces_r = (rbytes + PIECE - 1) / PIECE;
  size_t pieces = pieces_s > pieces_r ? pieces_s : pieces_r;
  for (size_t i = 0; i < pieces; i++) {
    size_t so = i * PIECE, ro = i * PIECE;
    int sn = so < sbytes ? (int)(sbytes - so < PIECE ? sbytes - so : PIECE) : 0;
    int rn = ro < rbytes ? (int)(rbytes - ro < PIECE ? rbytes - ro : PIECE) : 0;
    int rc = MPI_Sendrecv(sn ? (const char *)send + so : NULL, sn, MPI_BYTE, sn ? to : MPI_PROC_NULL,
                          0, rn ? (char *)recv + ro : NULL, rn, MPI_BYTE,
                          rn ? from : MPI_PROC_NULL, 0, comm, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return mpi_error(rc, "sendrecv");
  }
  return TS_OK;
}

static int mpi_barrier(ts_comm *c) {
  int rc = MPI_Barrier(comm_of(c));
  return rc == MPI_SUCCESS ? TS_OK : mpi_error(rc, "barrier");
}

static int mpi_allgather(ts_comm *c, const void *send, void *recv, size_t bytes) {
  if (bytes > INT_MAX)
    return ts_fail(TS_ERUNTIME, "all-gather of %zu bytes per rank: over the 2 GiB MPI limit", bytes);
  const void *s = send == (char *)recv + (size_t)c->rank * bytes ? MPI_IN_PLACE : send;
  int rc = MPI_Allgather(s, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, comm_of(c));
  return rc == MPI_SUCCESS ? TS_OK : mpi_error(rc, "all-gather");
}

static int mpi_alltoall(ts_comm *c, const void *send, void *recv, size_t bytes) {
  if (bytes > INT_MAX)
    return ts_fail(TS_ERUNTIME, "all-to-all of %zu bytes per rank: over the 2 GiB MPI limit", bytes);
  int rc = MPI_Alltoall(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, comm_of(c));
  return rc == MPI_SUCCESS ? TS_OK : mpi_error(rc, "all-to-all");
}

// Packs the strided blocks into the group's contiguous buffers and makes one
// plain MPI_Alltoall. (MPI_Alltoallw with vector datatypes did the same
// without the copies, but MPICH 4.0's resident memory grew from step to step
// with it on some ranks; packing here keeps the memory ours and bounded.)
static int mpi_alltoall_2d(ts_comm *c, const float *send, const ts_block2d *s, float *recv,
                           const ts_block2d *r) {
  const int P = c->size;
  mpi_state *st = c->state;
  const size_t n = ts_block2d_floats(s);
  if (n * sizeof(float) > INT_MAX)
    return ts_fail(TS_ERUNTIME, "all-to-all of %zu floats per rank: over the MPI int limit", n);
  int rc = reserve(st, ts_comm_pack_2d(n, P));
  if (rc) return rc;
  for (int j = 0; j < P; j++) {
    const float *src = send + (size_t)j * s->block;
    float *dst = st->sendbuf + (size_t)j * n;
    for (size_t i = 0; i < n; i++) dst[i] = src[ts_block2d_at(s, i)];
  }
  int mrc = MPI_Alltoall(st->sendbuf, (int)(n * sizeof(float)), MPI_BYTE, st->recvbuf,
                         (int)(n * sizeof(float)), MPI_BYTE, st->comm);
  if (mrc != MPI_SUCCESS) return mpi_error(mrc, "all-to-all");
  for (int j = 0; j < P; j++) {
    const float *src = st->recvbuf + (size_t)j * n;
    float *dst = recv + (size_t)j * r->block;
    for (size_t i = 0; i < n; i++) dst[ts_block2d_at(r, i)] = src[i];
  }
  return TS_OK;
}

static int mpi_bcast(ts_comm *c, void *buf, size_t bytes, int root) {
  for (size_t o = 0; o < bytes; o += PIECE) {
    int k = (int)(bytes - o < PIECE ? bytes - o : PIECE);
    int rc = MPI_Bcast((char *)buf + o, k, MPI_BYTE, root, comm_of(c));
    if (rc != MPI_SUCCESS) return mpi_error(rc, "broadcast");
  }
  return TS_OK;
}

// ---- exact reductions ------------------------------------------------------------------
// A round's chunks (c = first, first + stride, ... < P) side by side are its
// stream: [o, o + k) of it is copied out of buf (store 0: into out) or, with
// store, from `in` into their places in buf (added: buf + in, when add).
static void stream_part(float *buf, size_t n, int P, int first, int stride, size_t o, size_t k,
                        float *out, const float *in, int store, int add) {
  size_t at = 0; // the stream offset of chunk c
  for (int c = first; c < P && k > 0; c += stride) {
    size_t off, len;
    ts_comm_chunk(n, P, c, &off, &len);
    if (o < at + len) {
      const size_t a = o - at, m = len - a < k ? len - a : k; // (o >= at: in order)
      if (!store) memcpy(out, buf + off + a, m * sizeof(float)), out += m;
      else if (add) ts_tree_add(buf + off + a, in, m), in += m;
      else memcpy(buf + off + a, in, m * sizeof(float)), in += m;
      o += m;
      k -= m;
    }
    at += len;
  }
}

#define TREE_PIECE TS_COMM_TREE_PIECE // (comm_tree.h)

// Rounds 0 .. nrounds-1 of the tree schedule (comm_tree.h) on buf (n,): in
// each swap, the chunks sent are packed into sendbuf, swapped with the
// partner's, and the partner's land in their places, added (ours + theirs)
// or stored; piece by piece, TREE_PIECE floats of each stream at a time (the
// partner cuts its streams the same way: ours sent is its received). A rank
// with several swaps in a round makes them one after another (the chunks
// one swap changes are never those another sends).
static int tree_rounds(ts_comm *c, float *buf, size_t n, int nrounds) {
  mpi_state *s = c->state;
  const int P = c->size, r = c->rank;
  int rc = reserve(s, ts_comm_pack_tree(n, P));
  if (rc) return rc;
  for (int k = 0; k < nrounds; k++) {
    ts_comm_swap q;
    for (int at = 0; ts_comm_tree_next(P, r, k, &at, &q);) {
      const size_t ns = ts_comm_tree_floats(n, P, q.send, q.stride);
      const size_t nr = ts_comm_tree_floats(n, P, q.recv, q.stride);
      for (size_t o = 0; o < ns || o < nr; o += TREE_PIECE) {
        const size_t ks = o < ns ? (ns - o < TREE_PIECE ? ns - o : TREE_PIECE) : 0;
        const size_t kr = o < nr ? (nr - o < TREE_PIECE ? nr - o : TREE_PIECE) : 0;
        stream_part(buf, n, P, q.send, q.stride, o, ks, s->sendbuf, NULL, 0, 0);
        if ((rc = mpi_sendrecv(c, s->sendbuf, ks * sizeof(float), q.partner, s->recvbuf,
                               kr * sizeof(float), q.partner)))
          return rc;
        stream_part(buf, n, P, q.recv, q.stride, o, kr, NULL, s->recvbuf, 1, q.add);
      }
    }
  }
  return TS_OK;
}

static int mpi_reduce_scatter_tree(ts_comm *c, float *buf, size_t n) {
  return tree_rounds(c, buf, n, ts_comm_tree_nrounds(c->size, 0));
}

static int mpi_allreduce_tree(ts_comm *c, float *buf, size_t n) {
  return tree_rounds(c, buf, n, ts_comm_tree_nrounds(c->size, 1));
}

static int mpi_allreduce_fast(ts_comm *c, float *buf, size_t n) {
  const size_t piece = PIECE / sizeof(float);
  for (size_t o = 0; o < n; o += piece) {
    int k = (int)(n - o < piece ? n - o : piece);
    int rc = MPI_Allreduce(MPI_IN_PLACE, buf + o, k, MPI_FLOAT, MPI_SUM, comm_of(c));
    if (rc != MPI_SUCCESS) return mpi_error(rc, "all-reduce");
  }
  return TS_OK;
}

static size_t mpi_buffer_bytes(const ts_comm *c) {
  return 2 * ((const mpi_state *)c->state)->cap * sizeof(float);
}

static void mpi_destroy(ts_comm *c) {
  mpi_state *s = c->state;
  if (!s) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&s->comm);
  free(s->sendbuf);
  free(s->recvbuf);
  free(s);
  c->state = NULL;
}

static const ts_comm_ops mpi_ops = {
    .name = "mpi",
    .barrier = mpi_barrier,
    .allgather = mpi_allgather,
    .alltoall = mpi_alltoall,
    .alltoall_2d = mpi_alltoall_2d,
    .sendrecv = mpi_sendrecv,
    .bcast = mpi_bcast,
    .reduce_scatter_tree = mpi_reduce_scatter_tree,
    .allreduce_tree = mpi_allreduce_tree,
    .allreduce_fast = mpi_allreduce_fast,
    .buffer_bytes = mpi_buffer_bytes,
    .destroy = mpi_destroy,
};

int ts_comm_mpi_create(const void *mpi_comm, ts_comm **out) {
  ts_comm *c = calloc(1, sizeof *c);
  mpi_state *s = calloc(1, sizeof *s);
  if (!c || !s) {
    free(c);
    free(s);
    return ts_fail(TS_ERUNTIME, "out of memory");
  }
  // A duplicate: the group's messages never meet anyone else's.
  int rc = MPI_Comm_dup(*(const MPI_Comm *)mpi_comm, &s->comm);
  if (rc != MPI_SUCCESS) {
    free(c);
    free(s);
    return mpi_error(rc, "communicator duplication");
  }
  MPI_Comm_rank(s->comm, &c->rank);
  MPI_Comm_size(s->comm, &c->size);
  c->ops = &mpi_ops;
  c->state = s;
  c->mpi = &s->comm;
  *out = c;
  return TS_OK;
}
