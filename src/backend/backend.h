// Where the model's kernels run: a backend is a table of the kernels.h
// operations (listed in backend_ops.def) plus how to allocate the buffers they
// work in (ggml's backend struct of function pointers). The model calls its
// kernels through the table it was created with, so the same model code,
// every parallel strategy included, runs on the CPU or on a GPU.
//
// The CUDA backend allocates the model's buffers as CUDA managed memory:
// host code that touches them (the optimizer, the collectives, the
// checkpoints, the tree sums written for the CPU) stays correct, and the
// kernels in this table run on the device. Every operation returns with its
// work finished, so host code may read what it wrote.
#ifndef TS_BACKEND_H
#define TS_BACKEND_H
#include <stddef.h>
#include <stdint.h>

#include "kernels.h"
#include "orthogonal.h"

typedef enum { TS_PRECISION_FP32 = 0, TS_PRECISION_BF16 } ts_precision;

typedef struct ts_backend {
  const char *name; // "cpu", "cuda"
  void *(*alloc)(size_t bytes); // NULL when out of memory
  void (*free)(void *p);
  // The operations, one member each, in the list's order (backend_ops.def:
  // the one place to add one).
#define TS_OP(op, cpu, ret, params) ret(*op) params;
#include "backend_ops.def"
  // Optional (NULL: the buffers are in host memory, which the model measures
  // itself). This process's share of the memory its buffers live in (its
  // GPU's, divided among the ranks that share the GPU), and the peak of the
  // bytes allocated with alloc so far.
  size_t (*memory_bytes)(void);
  size_t (*peak_bytes)(void);
  // How many leaves leaf_sum computes at once, each with scratch of its
  // caller's found by omp_get_thread_num(), which is below this: 0 for one
  // per thread of the kernels' scratch (ts_ws.nthreads: the CPU's); a device
  // runs them one after another with parallel kernels (1).
  int leaf_slots;
} ts_backend;

// The CPU reference (src/cpu/backend_cpu.c): the kernels.h functions.
extern const ts_backend ts_backend_cpu;

// The backend models take when created: the CPU unless set (one device per
// process, chosen once by the command line).
void ts_backend_set(const ts_backend *be);
const ts_backend *ts_backend_current(void);

// The backend for `--device` ("cpu" or "cuda") and `--precision`. The CUDA
// one is set up on first use: it picks GPU local_rank % devices (local_rank:
// this process's index among the MPI ranks on its node, 0 without MPI), so
// with more ranks than GPUs on a node some ranks share one.
// `fast` picks the CUDA backend's tier (docs/GPU.md): 0, the exact tier, in
// which fp32 kernels compute the CPU's canonical definitions bit for bit
// (docs/EXACTNESS.md); 1 (`--fast`), cuBLAS's products, checked within a
// tolerance. bf16 is always the fast tier. The CPU ignores it.
// Errors name the flag: a build without CUDA, a machine without a GPU,
// bf16 on the CPU. Returns TS_OK or an error code with a message.
int ts_backend_get(const char *device, ts_precision precision, int fast, const ts_backend **out);

// The precision of the last backend ts_backend_get gave ("fp32", "bf16"),
// for the run log.
const char *ts_backend_precision_name(void);

// Whether the process groups move data with NCCL: the CUDA backend with a
// GPU of its own for every rank of the node. Ranks that share a GPU (more
// ranks than GPUs: NCCL refuses two ranks on one device) use MPI over the
// managed buffers instead.
int ts_backend_uses_nccl(void);

// One line per CUDA device ("0: NVIDIA H200, 139.8 GiB, sm_90"), or why there
// are none, into buf; for `tessera info`. Returns the number of devices.
int ts_backend_cuda_describe(char *buf, size_t cap);
#endif
