// The CUDA backend: the device, its stream and cuBLAS handle, the managed
// allocator, and the table of kernels (backend.h). One GPU per process.
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "gpu.h"

static struct {
  int ready;
  int device;
  int share; // the node's ranks on this device, this one included
  size_t memory; // the device's, in bytes
  ts_precision precision;
  int fast; // --fast: cuBLAS's products (the fast tier) in fp32 too
  cudaStream_t stream;
  cublasHandle_t cublas;
  void *scratch;
  size_t scratch_bytes;
  size_t live, peak; // bytes from cuda_alloc
} g;

cudaStream_t ts_cuda_stream(void) { return g.stream; }
cublasHandle_t ts_cuda_cublas(void) { return g.cublas; }
int ts_cuda_bf16(void) { return g.precision == TS_PRECISION_BF16; }
int ts_cuda_exact(void) { return g.precision == TS_PRECISION_FP32 && !g.fast; }

// One line, then every rank goes down: a kernel failure has no error path
// back through the kernels.h signatures, and a rank that stopped alone would
// leave the others waiting in a collective.
static void die(const char *what, const char *why) {
  fprintf(stderr, "tessera: CUDA error in %s: %s\n", what, why);
  fflush(stderr);
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);
}

void ts_cuda_check(cudaError_t e, const char *what) {
  if (e != cudaSuccess) die(what, cudaGetErrorString(e));
}

void ts_cublas_check(cublasStatus_t s, const char *what) {
  if (s != CUBLAS_STATUS_SUCCESS) die(what, cublasGetStatusString(s));
}

void ts_cuda_finish(const char *what) {
  ts_cuda_check(cudaGetLastError(), what);
  ts_cuda_check(cudaStreamSynchronize(g.stream), what);
}

void *ts_cuda_scratch(size_t bytes) {
  if (bytes <= g.scratch_bytes) return g.scratch;
  // cudaFree waits for the work that may still use the old buffer
  if (g.scratch) ts_cuda_check(cudaFree(g.scratch), "scratch");
  size_t want = bytes + bytes / 4;
  ts_cuda_check(cudaMalloc(&g.scratch, want), "scratch (device memory)");
  g.scratch_bytes = want;
  return g.scratch;
}

// ---- allocation ----------------------------------------------------------------------------
// Managed memory, so the host code around the kernels reads and writes the same
// buffers. A 256-byte header holds the size, for the live/peak counts.
// Zeroed on the device: the pages start there, where the kernels use them.
#define HEADER 256

static void *cuda_alloc(size_t bytes) {
  char *p = NULL;
  if (cudaMallocManaged((void **)&p, bytes + HEADER, cudaMemAttachGlobal) != cudaSuccess) {
    cudaGetLastError(); // clear it: out of memory is reported by the caller
    return NULL;
  }
  // zeroed, like the CPU allocator: gradients and optimizer state start at 0
  if (cudaMemset(p + HEADER, 0, bytes) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
    cudaGetLastError();
    cudaFree(p);
    return NULL;
  }
  *(size_t *)p = bytes;
  g.live += bytes;
  if (g.live > g.peak) g.peak = g.live;
  return p + HEADER;
}

static void cuda_free(void *ptr) {
  if (!ptr) return;
  char *p = (char *)ptr - HEADER;
  g.live -= *(size_t *)p;
  ts_cuda_check(cudaFree(p), "free");
}

static size_t cuda_peak_bytes(void) { return g.peak; }

static size_t cuda_memory_bytes(void) { return g.memory / (size_t)g.share; }

// ---- the table --------------------------------------------------------------------------------
// The kernels are cuda_<op> for every operation of the list, declared in gpu.h
// and defined one file each.
static const ts_backend cuda_backend = {
    .name = "cuda",
    .alloc = cuda_alloc,
    .free = cuda_free,
#define TS_OP(op, cpu, ret, params) .op = cuda_##op,
#include "backend/backend_ops.def"
    .memory_bytes = cuda_memory_bytes,
    .peak_bytes = cuda_peak_bytes,
    .leaf_slots = 1, // leaf_sum runs the leaves one after another (leaves.cu)
};

// ---- setup -----------------------------------------------------------------------------------
extern "C" int ts_backend_cuda_init(int local_rank, int local_size, ts_precision precision,
                                    int fast, const ts_backend **out) {
  if (g.ready) { // set up already: only the precision and tier may change (tests switch them)
    g.precision = precision;
    g.fast = fast;
    *out = &cuda_backend;
    return TS_OK;
  }
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    const char *why = e != cudaSuccess ? cudaGetErrorString(e) : "no device";
    cudaGetLastError();
    return ts_fail(TS_ERUNTIME, "--device cuda: no usable CUDA device (%s)", why);
  }
  g.device = local_rank % n;
  // ranks r < local_size with r % n == device
  g.share = local_size > g.device ? (local_size - 1 - g.device) / n + 1 : 1;
  cudaDeviceProp props;
  if ((e = cudaGetDeviceProperties(&props, g.device)) != cudaSuccess)
    return ts_fail(TS_ERUNTIME, "--device cuda: cannot query device %d (%s)", g.device,
                   cudaGetErrorString(e));
  g.memory = props.totalGlobalMem;
  if ((e = cudaSetDevice(g.device)) != cudaSuccess ||
      (e = cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking)) != cudaSuccess)
    return ts_fail(TS_ERUNTIME, "--device cuda: cannot use device %d (%s)", g.device,
                   cudaGetErrorString(e));
  cublasStatus_t s = cublasCreate(&g.cublas);
  if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetStream(g.cublas, g.stream);
  // no atomics inside cuBLAS either: the same product gives the same bits
  if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetAtomicsMode(g.cublas, CUBLAS_ATOMICS_NOT_ALLOWED);
  if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetMathMode(g.cublas, CUBLAS_DEFAULT_MATH);
  if (s != CUBLAS_STATUS_SUCCESS)
    return ts_fail(TS_ERUNTIME, "--device cuda: cuBLAS: %s", cublasGetStatusString(s));
  g.precision = precision;
  g.fast = fast;
  g.ready = 1;
  *out = &cuda_backend;
  return TS_OK;
}

extern "C" int ts_backend_cuda_device(void) { return g.ready ? g.device : -1; }

extern "C" int ts_backend_cuda_share(void) { return g.ready ? g.share : 0; }

extern "C" int ts_backend_cuda_describe(char *buf, size_t cap) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    snprintf(buf, cap, "no usable device (%s)",
             e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    cudaGetLastError();
    return 0;
  }
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && used < cap; i++) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    used += (size_t)snprintf(buf + used, cap - used, "%s%d: %s, %.1f GiB, sm_%d%d", i ? "; " : "",
                             i, p.name, (double)p.totalGlobalMem / (1u << 30), p.major, p.minor);
  }
  return n;
}
