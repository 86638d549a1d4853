// Just enough of NCCL for src/comm/comm_nccl.cu, over MPI (emu_nccl.cpp), so
// that tests/tessera_emu runs the NCCL communicator between emulated GPUs:
// ranks on one host, each with its own "device" (TS_EMU_DEVICES, cuda_emu.h).
//
// As on the device, every operation is queued on the stream and runs when
// the host synchronizes (cuda_emu.h); its buffers must be device memory. Send
// and receive calls between ncclGroupStart and ncclGroupEnd are posted
// together when the group's work runs, as NCCL fuses a group into one
// operation; those to one peer pair in the order they were called.
//
// Not modelled: NCCL's own reduction order in ncclAllReduce (MPI's here),
// its channels and protocols, and its requirement that every rank of a
// communicator launches the same collectives in the same order (a mismatch
// here is an MPI hang or error instead of a GPU hang).
#ifndef TS_EMU_NCCL_H
#define TS_EMU_NCCL_H
#include <stddef.h>

#include "cuda_emu.h"

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
} ncclResult_t;
typedef enum { ncclChar = 0, ncclFloat = 7 } ncclDataType_t;
typedef enum { ncclSum = 0 } ncclRedOp_t;
typedef struct {
  char internal[128];
} ncclUniqueId;
typedef struct ts_emu_nccl *ncclComm_t;

const char *ncclGetErrorString(ncclResult_t r);
ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
// Every MPI rank of the job must call it at the same point (it splits
// MPI_COMM_WORLD by the id): tessera's process grid does, as every rank
// creates its groups in the same order.
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t type, int peer,
                      ncclComm_t comm, cudaStream_t s);
ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t s);
ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t s);
ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t s);
ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t s);
#endif
