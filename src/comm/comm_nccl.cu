// The communicator over NCCL (GPU), one GPU per process: the same operations
// with the same meaning as src/comm/comm_mpi.c, with NCCL moving the bytes
// between the GPUs' buffers (device-accessible: managed or device memory).
//
// Exactness (docs/EXACTNESS.md R3, R6) is kept the way comm_mpi.c keeps it: the tree
// reductions run the same rounds (src/comm/comm_tree.h), use NCCL only to move
// bytes (ncclSend/ncclRecv) and do their additions with the kernel below in
// the same operand order (ours + theirs, as ts_tree_add), so their bits
// equal the MPI version's. Only allreduce_fast lets NCCL reduce.
//
// Everything is queued on the backend's stream (ts_cuda_stream) and each
// operation waits for it before returning: the host may read the result next.
// The group keeps a duplicate of its MPI communicator for the barrier and for
// agreeing on failures that would otherwise leave the other ranks waiting.
//
// Host memory cannot go through NCCL, and the trainer's host code passes
// some (a loss on the stack, per-rank statistics): a collective with a host
// buffer goes through the MPI communicator of the same ranks (comm_mpi.c),
// whose results these equal bit for bit. Every rank takes the same path at
// a collective, because every rank calls it from the same line with the
// same kind of buffer. A send or receive (sendrecv) stages host memory on
// the device instead: its two ends are different lines.
#define MPICH_SKIP_MPICXX 1 // the C interface only
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu.h"
extern "C" {
#include "comm.h"
#include "comm_tree.h"
}

// A device staging buffer, grown on demand (never shrunk).
typedef struct {
  float *p;
  size_t cap; // floats
} dev_buf;

typedef struct {
  MPI_Comm mpi;    // duplicate of the caller's communicator
  ncclComm_t nccl; // the same ranks, same order
  ts_comm *host;   // MPI over the same ranks, for host buffers
  dev_buf send, recv; // the collectives' staging: grown on every rank at once
  dev_buf p2p_send, p2p_recv; // sendrecv's, for host sides: grown by this rank alone
} nccl_state;

#define THREADS 256
#define MAX_BLOCKS 8192 // grid-stride loops cover the rest

static nccl_state *state_of(ts_comm *c) { return (nccl_state *)c->state; }

// ---- errors ----------------------------------------------------------------------------
static int nccl_error(ncclResult_t r, const char *what) {
  return ts_fail(TS_ERUNTIME, "nccl %s: %s", what, ncclGetErrorString(r));
}

static int cuda_error(cudaError_t e, const char *what) {
  return ts_fail(TS_ERUNTIME, "CUDA %s: %s", what, cudaGetErrorString(e));
}

static int mpi_error(int rc, const char *what) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return ts_fail(TS_ERUNTIME, "MPI %s failed: %s", what, msg);
}

// Ends a group of NCCL calls. It must run even when a call inside the group
// failed (NCCL's group depth is per thread and would stay open otherwise);
// the first error wins.
static ncclResult_t group_end(ncclResult_t r) {
  ncclResult_t e = ncclGroupEnd();
  return r != ncclSuccess ? r : e;
}

// Waits for everything queued on the stream: the operation's result is then
// readable by the host.
static int finish(const char *what) {
  cudaError_t e = cudaStreamSynchronize(ts_cuda_stream());
  return e == cudaSuccess ? TS_OK : cuda_error(e, what);
}

// Checks that the kernels just queued were accepted.
static int launched(const char *what) {
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? TS_OK : cuda_error(e, what);
}

// Whether the GPU can address p: device or managed memory (NULL: an absent
// side, nothing to move).
static int device_accessible(const void *p) {
  if (!p) return 1;
  cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError(); // older runtimes fail on plain host pointers: not sticky
    return 0;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

// The MPI group when a or b is host memory, else NULL (NCCL moves the data).
static ts_comm *host_path(ts_comm *c, const void *a, const void *b) {
  return device_accessible(a) && device_accessible(b) ? NULL : state_of(c)->host;
}

static unsigned grid_for(size_t n) {
  unsigned b = ts_blocks((int64_t)n, THREADS);
  return b < MAX_BLOCKS ? (b ? b : 1) : MAX_BLOCKS;
}

// ---- staging buffers --------------------------------------------------------------------
// Grows b to n floats, on this rank alone.
static cudaError_t grow(dev_buf *b, size_t n) {
  if (n <= b->cap) return cudaSuccess;
  // The old contents are never needed: the buffers are idle between operations.
  cudaFree(b->p);
  b->p = NULL;
  b->cap = 0;
  cudaError_t e = cudaMalloc((void **)&b->p, n * sizeof(float));
  if (e != cudaSuccess) {
    b->p = NULL;
    cudaGetLastError(); // out of memory is not sticky: clear it for later checks
    return e;
  }
  b->cap = n;
  return cudaSuccess;
}

// Grows b to n floats in a collective operation. Every rank grows at the same
// call (the sizes asked for depend only on n and the group size, the same
// everywhere), so the ranks agree on the outcome here: one rank out of memory
// fails the operation on all of them instead of leaving the others waiting
// inside NCCL.
static int reserve(nccl_state *st, dev_buf *b, size_t n) {
  if (n <= b->cap) return TS_OK;
  cudaError_t e = grow(b, n);
  int ok = e == cudaSuccess, all = 0;
  int rc = MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, st->mpi);
  if (rc != MPI_SUCCESS || !all) {
    cudaFree(b->p);
    b->p = NULL;
    b->cap = 0;
    if (rc != MPI_SUCCESS) return mpi_error(rc, "agreement on a staging buffer");
    if (!ok) return cuda_error(e, "staging buffer");
    return ts_fail(TS_ERUNTIME, "CUDA staging buffer: %zu floats failed on another rank", n);
  }
  return TS_OK;
}

// ---- kernels -------------------------------------------------------------------------------
// a[i] = a[i] + b[i]: the one addition of the exact reductions, the device
// twin of ts_tree_add. __fadd_rn is IEEE round-to-nearest and is never fused
// into an FMA, so the bits equal the CPU's.
static __global__ void add_kernel(float *a, const float *b, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    a[i] = __fadd_rn(a[i], b[i]);
}

// The device twin of ts_block2d_at (comm.h): the offset of a block's i-th float.
static __device__ size_t block_at(const ts_block2d b, size_t i) {
  size_t per_row = (b.chunks > 1 ? b.chunks : 1) * b.width;
  size_t row = i / per_row, j = i % per_row;
  return row * b.ld + (j / b.width) * b.cstride + j % b.width;
}

// out[j·n + i] = float i of block j (blocks P, each of n floats in layout s).
static __global__ void pack_kernel(float *out, const float *in, ts_block2d s, size_t n,
                                   size_t total) {
  for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < total;
       k += (size_t)gridDim.x * blockDim.x) {
    size_t j = k / n, i = k - j * n;
    out[k] = in[j * s.block + block_at(s, i)];
  }
}

// The inverse: float i of block j (layout r) = in[j·n + i].
static __global__ void unpack_kernel(float *out, const float *in, ts_block2d r, size_t n,
                                     size_t total) {
  for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < total;
       k += (size_t)gridDim.x * blockDim.x) {
    size_t j = k / n, i = k - j * n;
    out[j * r.block + block_at(r, i)] = in[k];
  }
}

// ---- moving bytes --------------------------------------------------------------------------
static int nccl_barrier(ts_comm *c) {
  // Our own GPU work first, so that passing the barrier means it is done.
  int rc = finish("barrier");
  if (rc) return rc;
  rc = MPI_Barrier(state_of(c)->mpi);
  return rc == MPI_SUCCESS ? TS_OK : mpi_error(rc, "barrier");
}

static int nccl_allgather(ts_comm *c, const void *send, void *recv, size_t bytes) {
  if (!bytes) return TS_OK;
  ts_comm *h = host_path(c, send, recv);
  if (h) return h->ops->allgather(h, send, recv, bytes);
  // NCCL takes send == recv + rank·bytes as in place, like MPI_IN_PLACE.
  ncclResult_t r = ncclAllGather(send, recv, bytes, ncclChar, state_of(c)->nccl, ts_cuda_stream());
  if (r != ncclSuccess) return nccl_error(r, "all-gather");
  return finish("all-gather");
}

// Queues the exchange of `bytes`-sized blocks with every rank (oneself
// included: NCCL pairs a send and a receive to self within a group).
static ncclResult_t exchange_blocks(ts_comm *c, const void *send, void *recv, size_t bytes) {
  ncclComm_t comm = state_of(c)->nccl;
  cudaStream_t s = ts_cuda_stream();
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) return r;
  for (int j = 0; j < c->size && r == ncclSuccess; j++) {
    r = ncclSend((const char *)send + (size_t)j * bytes, bytes, ncclChar, j, comm, s);
    if (r == ncclSuccess)
      r = ncclRecv((char *)recv + (size_t)j * bytes, bytes, ncclChar, j, comm, s);
  }
  return group_end(r);
}

static int nccl_alltoall(ts_comm *c, const void *send, void *recv, size_t bytes) {
  if (!bytes) return TS_OK;
  ts_comm *h = host_path(c, send, recv);
  if (h) return h->ops->alltoall(h, send, recv, bytes);
  ncclResult_t r = exchange_blocks(c, send, recv, bytes);
  if (r != ncclSuccess) return nccl_error(r, "all-to-all");
  return finish("all-to-all");
}

// As comm_mpi.c: pack the strided blocks into contiguous staging, one plain
// all-to-all, unpack into the receiving layout.
static int nccl_alltoall_2d(ts_comm *c, const float *send, const ts_block2d *s, float *recv,
                            const ts_block2d *r) {
  nccl_state *st = state_of(c);
  const size_t n = ts_block2d_floats(s), total = (size_t)c->size * n;
  if (!n) return TS_OK;
  ts_comm *h = host_path(c, send, recv);
  if (h) return h->ops->alltoall_2d(h, send, s, recv, r);
  int rc = reserve(st, &st->send, total);
  if (!rc) rc = reserve(st, &st->recv, total);
  if (rc) return rc;
  ts_launch(pack_kernel, grid_for(total), THREADS, 0, st->send.p, send, *s, n, total);
  if ((rc = launched("all-to-all packing"))) return rc;
  ncclResult_t x = exchange_blocks(c, st->send.p, st->recv.p, n * sizeof(float));
  if (x != ncclSuccess) return nccl_error(x, "all-to-all");
  ts_launch(unpack_kernel, grid_for(total), THREADS, 0, recv, st->recv.p, *r, n, total);
  if ((rc = launched("all-to-all unpacking"))) return rc;
  return finish("all-to-all");
}

// The two sides may differ in size; a side that is absent or empty posts
// nothing (its peer posts nothing either: the byte counts must match, as NCCL
// pairs a send with a receive of exactly the same count).
//
// Unlike a collective, the two ends of a transfer are different call sites
// (a stage's output sent, the next stage's input received) whose buffers
// may be of different kinds, so the MPI path for host memory could pair an
// NCCL send with an MPI receive. A host side goes through device staging
// instead, and the transfer is NCCL's whatever the peer holds.
static int nccl_sendrecv(ts_comm *c, const void *send, size_t sbytes, int dst, void *recv,
                         size_t rbytes, int src) {
  nccl_state *st = state_of(c);
  cudaStream_t s = ts_cuda_stream();
  const bool sending = dst >= 0 && sbytes, receiving = src >= 0 && rbytes;
  const void *from = send;
  void *into = recv;
  if (sending && !device_accessible(send)) {
    cudaError_t e = grow(&st->p2p_send, (sbytes + sizeof(float) - 1) / sizeof(float));
    if (e == cudaSuccess)
      e = cudaMemcpyAsync(st->p2p_send.p, send, sbytes, cudaMemcpyHostToDevice, s);
    if (e != cudaSuccess) return cuda_error(e, "sendrecv staging");
    from = st->p2p_send.p;
  }
  if (receiving && !device_accessible(recv)) {
    cudaError_t e = grow(&st->p2p_recv, (rbytes + sizeof(float) - 1) / sizeof(float));
    if (e != cudaSuccess) return cuda_error(e, "sendrecv staging");
    into = st->p2p_recv.p;
  }
  ncclResult_t r = ncclGroupStart();
  if (r == ncclSuccess) {
    if (sending) r = ncclSend(from, sbytes, ncclChar, dst, st->nccl, s);
    if (r == ncclSuccess && receiving) r = ncclRecv(into, rbytes, ncclChar, src, st->nccl, s);
    r = group_end(r);
  }
  if (r != ncclSuccess) return nccl_error(r, "sendrecv");
  if (into != recv) {
    cudaError_t e = cudaMemcpyAsync(recv, into, rbytes, cudaMemcpyDeviceToHost, s);
    if (e != cudaSuccess) return cuda_error(e, "sendrecv staging");
  }
  return finish("sendrecv");
}

static int nccl_bcast(ts_comm *c, void *buf, size_t bytes, int root) {
  if (!bytes) return TS_OK;
  ts_comm *h = host_path(c, buf, NULL);
  if (h) return h->ops->bcast(h, buf, bytes, root);
  ncclResult_t r =
      ncclBroadcast(buf, buf, bytes, ncclChar, root, state_of(c)->nccl, ts_cuda_stream());
  if (r != ncclSuccess) return nccl_error(r, "broadcast");
  return finish("broadcast");
}

// ---- exact reductions ----------------------------------------------------------------------
// The rounds of comm_tree.h. Instead of packing the sent chunks, each chunk
// goes as its own message: NCCL keeps the order of the messages between two
// ranks within a group, so chunk k sent pairs with chunk k received. Empty
// chunks (n < P) are skipped on both sides alike.

// Queues sends of the chunks c = first (mod stride) of buf to peer, in chunk order.
static ncclResult_t send_chunks(const float *buf, size_t n, int P, int first, int stride,
                                int peer, ncclComm_t comm) {
  ncclResult_t r = ncclSuccess;
  for (int ch = first; ch < P && r == ncclSuccess; ch += stride) {
    size_t off, len;
    ts_comm_chunk(n, P, ch, &off, &len);
    if (len) r = ncclSend(buf + off, len, ncclFloat, peer, comm, ts_cuda_stream());
  }
  return r;
}

// Queues receives of the chunks c = first (mod stride) from peer, in chunk
// order: into their places in buf, or (staging non-NULL) one after another
// into staging.
static ncclResult_t recv_chunks(float *buf, float *staging, size_t n, int P, int first,
                                int stride, int peer, ncclComm_t comm) {
  ncclResult_t r = ncclSuccess;
  size_t k = 0;
  for (int ch = first; ch < P && r == ncclSuccess; ch += stride) {
    size_t off, len;
    ts_comm_chunk(n, P, ch, &off, &len);
    float *at = staging ? staging + k : buf + off;
    if (len) r = ncclRecv(at, len, ncclFloat, peer, comm, ts_cuda_stream());
    k += len;
  }
  return r;
}

// Adds the partner's copies (packed in staging, in chunk order) into the
// chunks c = first (mod stride) of buf: ours + theirs, as ts_tree_add.
static int add_chunks(float *buf, const float *staging, size_t n, int P, int first, int stride) {
  size_t k = 0;
  for (int ch = first; ch < P; ch += stride) {
    size_t off, len;
    ts_comm_chunk(n, P, ch, &off, &len);
    if (len)
      ts_launch(add_kernel, grid_for(len), THREADS, 0, buf + off, staging + k, len);
    k += len;
  }
  return launched("reduction additions");
}

// Rounds 0 .. nrounds-1 of the schedule on buf (n,). A round that adds
// receives the partner's chunks into staging and then adds them; the chunks
// sent and received differ, so the sends read buf meanwhile. A round that
// stores (the all-gather) receives straight into buf: nothing is added. The
// rounds follow one another on the stream, so a round's sends read the sums
// the previous round's additions wrote.
static int tree_rounds(ts_comm *c, float *buf, size_t n, int nrounds) {
  nccl_state *st = state_of(c);
  const int P = c->size, r = c->rank;
  // staging for a round's receives that are added, all its swaps' side by
  // side: half the chunks at most when P is a power of two (one swap a
  // round), else up to all of them on the rank that plays several
  // positions. The same size on every rank: reserve agrees on it.
  const size_t staging = (P & (P - 1)) == 0 ? ts_comm_tree_max_floats(n, P) : n;
  int rc = reserve(st, &st->recv, staging);
  if (rc) return rc;
  for (int k = 0; k < nrounds; k++) {
    const int add = k < ts_comm_tree_levels(P);
    ts_comm_swap q;
    size_t at_staging = 0;
    ncclResult_t x = ncclGroupStart();
    for (int at = 0; x == ncclSuccess && ts_comm_tree_next(P, r, k, &at, &q);) {
      x = send_chunks(buf, n, P, q.send, q.stride, q.partner, st->nccl);
      if (x == ncclSuccess)
        x = recv_chunks(buf, add ? st->recv.p + at_staging : NULL, n, P, q.recv, q.stride,
                        q.partner, st->nccl);
      at_staging += ts_comm_tree_floats(n, P, q.recv, q.stride);
    }
    x = group_end(x);
    if (x != ncclSuccess) return nccl_error(x, add ? "reduce-scatter" : "all-reduce (gather)");
    at_staging = 0;
    for (int at = 0; add && ts_comm_tree_next(P, r, k, &at, &q);) {
      if ((rc = add_chunks(buf, st->recv.p + at_staging, n, P, q.recv, q.stride))) return rc;
      at_staging += ts_comm_tree_floats(n, P, q.recv, q.stride);
    }
  }
  return TS_OK;
}

static int nccl_reduce_scatter_tree(ts_comm *c, float *buf, size_t n) {
  ts_comm *h = host_path(c, buf, NULL);
  if (h) return h->ops->reduce_scatter_tree(h, buf, n);
  int rc = tree_rounds(c, buf, n, ts_comm_tree_nrounds(c->size, 0));
  return rc ? rc : finish("reduce-scatter");
}

static int nccl_allreduce_tree(ts_comm *c, float *buf, size_t n) {
  ts_comm *h = host_path(c, buf, NULL);
  if (h) return h->ops->allreduce_tree(h, buf, n);
  int rc = tree_rounds(c, buf, n, ts_comm_tree_nrounds(c->size, 1));
  return rc ? rc : finish("all-reduce");
}

static int nccl_allreduce_fast(ts_comm *c, float *buf, size_t n) {
  if (!n) return TS_OK;
  ts_comm *h = host_path(c, buf, NULL);
  if (h) return h->ops->allreduce_fast(h, buf, n);
  ncclResult_t r =
      ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, state_of(c)->nccl, ts_cuda_stream());
  if (r != ncclSuccess) return nccl_error(r, "all-reduce");
  return finish("all-reduce");
}

// ---- the group -------------------------------------------------------------------------------
static void nccl_destroy(ts_comm *c) {
  nccl_state *st = state_of(c);
  if (!st) return;
  // Nothing of ours may still be running when its buffers go. Errors are
  // ignored: there is no one left to tell.
  (void)cudaStreamSynchronize(ts_cuda_stream());
  cudaFree(st->send.p);
  cudaFree(st->recv.p);
  cudaFree(st->p2p_send.p);
  cudaFree(st->p2p_recv.p);
  // ncclCommDestroy finalizes the communicator too; every rank calls it, as
  // every rank frees its groups.
  if (st->nccl) ncclCommDestroy(st->nccl);
  if (st->host) ts_comm_free(st->host);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&st->mpi);
  free(st);
  c->state = NULL;
}

static const ts_comm_ops nccl_ops = {
    "nccl",
    nccl_barrier,
    nccl_allgather,
    nccl_alltoall,
    nccl_alltoall_2d,
    nccl_sendrecv,
    nccl_bcast,
    nccl_reduce_scatter_tree,
    nccl_allreduce_tree,
    nccl_allreduce_fast,
    NULL, // buffer_bytes: its staging is device memory, not counted here
    nccl_destroy,
};

// Rank 0 makes the NCCL id and broadcasts it over MPI, with a flag so that
// its failure reaches everyone; then all ranks join and agree on the outcome
// (a rank whose join failed must not leave the others holding a communicator
// that will wait for it).
static int nccl_connect(nccl_state *st, int rank, int size) {
  struct {
    ncclUniqueId id;
    int ok;
  } msg;
  memset(&msg, 0, sizeof msg);
  ncclResult_t r = ncclSuccess;
  if (rank == 0) {
    r = ncclGetUniqueId(&msg.id);
    msg.ok = r == ncclSuccess;
  }
  int rc = MPI_Bcast(&msg, (int)sizeof msg, MPI_BYTE, 0, st->mpi);
  if (rc != MPI_SUCCESS) return mpi_error(rc, "broadcast of the NCCL id");
  if (!msg.ok)
    return rank == 0 ? nccl_error(r, "unique id")
                     : ts_fail(TS_ERUNTIME, "nccl unique id: failed on rank 0");
  r = ncclCommInitRank(&st->nccl, size, msg.id, rank);
  int ok = r == ncclSuccess, all = 0;
  rc = MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, st->mpi);
  if (rc == MPI_SUCCESS && all) return TS_OK;
  if (ok) ncclCommAbort(st->nccl); // local: its peers may never have joined
  st->nccl = NULL;
  if (rc != MPI_SUCCESS) return mpi_error(rc, "agreement on the NCCL communicator");
  if (!ok) return nccl_error(r, "init");
  return ts_fail(TS_ERUNTIME, "nccl init: failed on another rank");
}

extern "C" int ts_comm_nccl_create(const void *mpi_comm, ts_comm **out) {
  ts_comm *c = (ts_comm *)calloc(1, sizeof *c);
  nccl_state *st = (nccl_state *)calloc(1, sizeof *st);
  if (!c || !st) {
    free(c);
    free(st);
    return ts_fail(TS_ERUNTIME, "out of memory");
  }
  // A duplicate: the group's own messages (id, barrier, agreements) never
  // meet anyone else's.
  int rc = MPI_Comm_dup(*(const MPI_Comm *)mpi_comm, &st->mpi);
  if (rc != MPI_SUCCESS) {
    free(c);
    free(st);
    return mpi_error(rc, "communicator duplication");
  }
  MPI_Comm_rank(st->mpi, &c->rank);
  MPI_Comm_size(st->mpi, &c->size);
  if ((rc = ts_comm_mpi_create(mpi_comm, &st->host)) || (rc = nccl_connect(st, c->rank, c->size))) {
    if (st->host) ts_comm_free(st->host);
    MPI_Comm_free(&st->mpi);
    free(c);
    free(st);
    return rc;
  }
  c->ops = &nccl_ops;
  c->state = st;
  c->mpi = &st->mpi;
  *out = c;
  return TS_OK;
}
