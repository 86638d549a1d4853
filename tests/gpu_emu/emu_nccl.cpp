// NCCL between emulated GPUs (nccl.h): each operation is queued on the
// stream like a kernel and, when the host synchronizes, moves the bytes with
// MPI on a communicator of its own.
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include <memory>
#include <vector>

#include "nccl.h"

struct ts_emu_nccl {
  MPI_Comm mpi;
  int rank, size;
};

namespace {
// One send or receive of a group.
struct p2p {
  bool send;
  void *buf;
  int count; // bytes
  int peer;
  ncclComm_t comm;
};

int group_depth = 0;
std::vector<p2p> group; // the calls of the open group, in call order
ncclResult_t group_error = ncclSuccess;
unsigned ids_made = 0;

size_t type_bytes(ncclDataType_t t) { return t == ncclFloat ? 4 : 1; }

// Queues the posted sends and receives as one piece of stream work: all of
// them at once, then the wait, so that a group exchanging with several peers
// (or with itself) cannot deadlock.
void queue_p2p(std::vector<p2p> calls) {
  if (calls.empty()) return;
  ts_emu_enqueue([calls] {
    std::vector<MPI_Request> req(calls.size());
    for (size_t i = 0; i < calls.size(); i++) {
      const p2p &c = calls[i];
      if (c.send) MPI_Isend(c.buf, c.count, MPI_BYTE, c.peer, 0, c.comm->mpi, &req[i]);
      else MPI_Irecv(c.buf, c.count, MPI_BYTE, c.peer, 0, c.comm->mpi, &req[i]);
    }
    MPI_Waitall((int)req.size(), req.data(), MPI_STATUSES_IGNORE);
  });
}

// Device memory, a live communicator, a peer inside it.
ncclResult_t check(const void *buf, size_t bytes, ncclComm_t comm, int peer) {
  if (!comm) return ncclInvalidArgument;
  if (bytes && !ts_emu_is_device(buf, bytes)) {
    fprintf(stderr, "tessera NCCL emulator: buffer %p (%zu bytes) is not device memory\n", buf,
            bytes);
    return ncclInvalidArgument;
  }
  if (peer < 0 || peer >= comm->size || bytes > (size_t)0x7fffffff) return ncclInvalidArgument;
  return ncclSuccess;
}

ncclResult_t point_to_point(bool send, const void *buf, size_t count, ncclDataType_t type,
                            int peer, ncclComm_t comm) {
  const size_t bytes = count * type_bytes(type);
  ncclResult_t r = check(buf, bytes, comm, peer);
  if (r != ncclSuccess) {
    if (group_depth && group_error == ncclSuccess) group_error = r;
    return r;
  }
  p2p c = {send, (void *)buf, (int)bytes, peer, comm};
  if (group_depth) group.push_back(c);
  else queue_p2p({c});
  return ncclSuccess;
}
} // namespace

const char *ncclGetErrorString(ncclResult_t r) {
  switch (r) {
  case ncclSuccess: return "no error";
  case ncclUnhandledCudaError: return "unhandled cuda error";
  case ncclSystemError: return "unhandled system error";
  case ncclInternalError: return "internal error";
  case ncclInvalidArgument: return "invalid argument";
  case ncclInvalidUsage: return "invalid usage";
  }
  return "unknown result code";
}

// The maker's world rank and how many ids it has made: unique in the job.
ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  int world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world);
  memset(id, 0, sizeof *id);
  int color = world * 4096 + (int)(ids_made++ % 4096);
  memcpy(id->internal, &color, sizeof color);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
  int color;
  memcpy(&color, id.internal, sizeof color);
  auto c = std::make_unique<ts_emu_nccl>();
  if (MPI_Comm_split(MPI_COMM_WORLD, color, rank, &c->mpi) != MPI_SUCCESS) return ncclSystemError;
  MPI_Comm_rank(c->mpi, &c->rank);
  MPI_Comm_size(c->mpi, &c->size);
  if (c->size != nranks || c->rank != rank) {
    MPI_Comm_free(&c->mpi);
    return ncclInvalidUsage;
  }
  *comm = c.release();
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclInvalidArgument;
  ts_emu_drain(); // its queued work may still use it
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&comm->mpi);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) { return ncclCommDestroy(comm); }

ncclResult_t ncclGroupStart(void) {
  group_depth++;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
  if (group_depth == 0) return ncclInvalidUsage;
  if (--group_depth) return ncclSuccess;
  ncclResult_t r = group_error;
  // a group with a failed call posts nothing, as NCCL's
  if (r == ncclSuccess) queue_p2p(std::move(group));
  group.clear();
  group_error = ncclSuccess;
  return r;
}

ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t type, int peer,
                      ncclComm_t comm, cudaStream_t s) {
  (void)s;
  return point_to_point(true, buf, count, type, peer, comm);
}

ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t s) {
  (void)s;
  return point_to_point(false, buf, count, type, peer, comm);
}

// send == recv + rank·bytes is in place, as NCCL allows.
ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t s) {
  (void)s;
  if (group_depth) return ncclInvalidUsage; // tessera never groups collectives
  const size_t bytes = count * type_bytes(type);
  ncclResult_t r = check(send, bytes, comm, 0);
  if (r == ncclSuccess) r = check(recv, bytes * (size_t)(comm ? comm->size : 0), comm, 0);
  if (r != ncclSuccess) return r;
  const bool in_place = (const char *)send == (char *)recv + (size_t)comm->rank * bytes;
  ts_emu_enqueue([=] {
    MPI_Allgather(in_place ? MPI_IN_PLACE : send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE,
                  comm->mpi);
  });
  return ncclSuccess;
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t s) {
  (void)s;
  if (group_depth) return ncclInvalidUsage;
  const size_t bytes = count * type_bytes(type);
  ncclResult_t r = check(recv, bytes, comm, root);
  if (r == ncclSuccess && comm->rank == root) r = check(send, bytes, comm, root);
  if (r != ncclSuccess) return r;
  ts_emu_enqueue([=] {
    if (comm->rank == root && send != recv) memcpy(recv, send, bytes);
    MPI_Bcast(recv, (int)bytes, MPI_BYTE, root, comm->mpi);
  });
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t s) {
  (void)s;
  if (group_depth) return ncclInvalidUsage;
  if (op != ncclSum || type != ncclFloat) return ncclInvalidArgument;
  const size_t bytes = count * type_bytes(type);
  ncclResult_t r = check(send, bytes, comm, 0);
  if (r == ncclSuccess) r = check(recv, bytes, comm, 0);
  if (r != ncclSuccess) return r;
  ts_emu_enqueue([=] {
    MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, MPI_FLOAT, MPI_SUM,
                  comm->mpi);
  });
  return ncclSuccess;
}
