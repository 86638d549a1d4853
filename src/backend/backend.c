// Picks the backend for --device (backend.h).
#include "config.h"

#ifdef TS_HAVE_CUDA
#include <mpi.h> // (configure: CUDA builds have MPI)
#endif
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "tessera.h"

static const ts_backend *current = &ts_backend_cpu;

#ifdef TS_HAVE_CUDA
int ts_backend_cuda_init(int local_rank, int local_size, ts_precision precision, int fast,
                         const ts_backend **out);
int ts_backend_cuda_share(void);

// Whether every rank of the job has a GPU of its own, agreed by all of them
// (MPI_MIN over the world, when MPI runs): the communicator of a group must
// be the same kind on all its ranks, and a group may span nodes with
// different numbers of GPUs. `mine` is this rank's answer.
static int all_have_own_gpu(int mine) {
  int init = 0, fin = 0, all = mine;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all;
}

static int nccl; // set by ts_backend_get for the CUDA backend

// This process's index among the MPI ranks on its node and their number (0
// and 1 without MPI), so that the ranks of a node take different GPUs.
static void local_ranks(int *rank, int *size) {
  int init = 0, fin = 0;
  MPI_Comm node;
  *rank = 0;
  *size = 1;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (!init || fin ||
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) !=
          MPI_SUCCESS)
    return;
  MPI_Comm_rank(node, rank);
  MPI_Comm_size(node, size);
  MPI_Comm_free(&node);
}
#else
int ts_backend_cuda_describe(char *buf, size_t cap) {
  snprintf(buf, cap, "not built (configure --enable-cuda)");
  return 0;
}
#endif

int ts_backend_uses_nccl(void) {
#ifdef TS_HAVE_CUDA
  return current != &ts_backend_cpu && nccl;
#else
  return 0;
#endif
}

void ts_backend_set(const ts_backend *be) { current = be ? be : &ts_backend_cpu; }
const ts_backend *ts_backend_current(void) { return current; }

static ts_precision chosen = TS_PRECISION_FP32;

const char *ts_backend_precision_name(void) {
  return chosen == TS_PRECISION_BF16 ? "bf16" : "fp32";
}

int ts_backend_get(const char *device, ts_precision precision, int fast, const ts_backend **out) {
  if (device == NULL || device[0] == '\0' || strcmp(device, "cpu") == 0) {
    if (precision != TS_PRECISION_FP32)
      return ts_fail(TS_EUSAGE, "--precision bf16: needs --device cuda (the CPU computes in fp32)");
    *out = &ts_backend_cpu;
    chosen = TS_PRECISION_FP32;
    return TS_OK;
  }
  if (strcmp(device, "cuda") != 0)
    return ts_fail(TS_EUSAGE, "--device %s: must be cpu or cuda", device);
#ifdef TS_HAVE_CUDA
  int rank, size;
  local_ranks(&rank, &size);
  int rc = ts_backend_cuda_init(rank, size, precision, fast, out);
  // every rank calls this once, at the same point: agree even when this
  // rank failed, so that none waits for it
  nccl = all_have_own_gpu(rc == TS_OK && ts_backend_cuda_share() == 1);
  if (rc == TS_OK) chosen = precision;
  return rc;
#else
  (void)fast;
  return ts_fail(TS_EUSAGE, "--device cuda: this build has no CUDA backend (configure --enable-cuda)");
#endif
}
