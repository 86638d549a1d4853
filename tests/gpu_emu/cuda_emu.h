// Just enough of CUDA to compile the kernels of src/gpu/ with g++ and run
// them on the host, for tests/test_gpu_emu: the CUDA backend checked against
// the CPU reference on every build, GPU or not. src/gpu/gpu.h includes this
// instead of the CUDA headers when TS_CUDA_EMULATE is defined.
//
// How a launch runs (emu_grid.cpp): blocks one after another; inside a block
// each CUDA thread is a fiber (its own stack, switched on one host thread),
// run until it reaches a barrier or ends. So:
//  - `__shared__` is `static`: one copy that the fibers of a block share, and
//    because blocks never overlap, each block has it to itself;
//  - __syncthreads waits for every thread of the block that has not ended;
//  - a warp is 32 consecutive threads (x fastest, then y, z), and a shuffle
//    waits for every lane its mask names, then reads the lane it asked for;
//  - what is undefined on the GPU stops the run with a message: a mask
//    naming an ended or missing lane, lanes disagreeing on the mask, threads
//    waiting at different __syncthreads or lanes at different shuffles (a
//    barrier under a condition that differs between them);
//  - waiting for something that can never come (threads at __syncthreads
//    while lanes they wait for sit at a shuffle) stops the run with a
//    message instead of hanging.
// Threads run in index order (or reversed: ts_cuda_emu_schedule), each as
// far as it can: one legal schedule of the GPU's, deterministic, and a
// missing barrier shows up as a wrong result.
//
// Memory (emu_runtime.cpp) is host memory. Device allocations are recorded,
// so a launch whose pointer argument lies outside them (host memory that the
// GPU could not read) fails; fresh device memory holds NaN bytes, so reading
// it before writing shows. The stream is a queue that runs when the host
// synchronizes, so a result read without waiting is stale. cuBLAS
// (emu_cublas.cpp) is plain loops with cuBLAS's argument checks.
//
// Not modelled: timing, and blocks or warps running at the same time: a race
// that the two schedules above (index order, reversed; tests/test_gpu.c runs
// every op in both) happen to order benignly goes unseen; shared memory
// keeps the previous block's values instead of garbage; nvcc's FMA
// contraction and the device's expf/logf (here g++ with -ffp-contract=off
// and the host's libm); cuBLAS's own summation order; the device's limits on
// registers, shared memory and __launch_bounds__; managed memory's page
// migration; streams other than the backend's one.
#ifndef TS_CUDA_EMU_H
#define TS_CUDA_EMU_H
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>

// ---- the language ------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static // per block: blocks run one at a time

struct dim3 {
  unsigned x, y, z;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint3 {
  unsigned x, y, z;
};
struct alignas(16) float4 {
  float x, y, z, w;
};

// The built-in variables of the running thread (set by the grid runner).
extern uint3 ts_emu_thread_idx, ts_emu_block_idx;
extern dim3 ts_emu_block_dim, ts_emu_grid_dim;
#define threadIdx ts_emu_thread_idx
#define blockIdx ts_emu_block_idx
#define blockDim ts_emu_block_dim
#define gridDim ts_emu_grid_dim

void __syncthreads(void);

// Lane (lane ^ lane_mask)'s value of v; every lane in mask must call it.
// Whole warps only (no width argument: a kernel that uses one does not compile).
uint32_t ts_emu_shfl_xor(unsigned mask, uint32_t bits, int lane_mask);
template <typename T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask) {
  static_assert(sizeof(T) == 4, "the emulator shuffles 4-byte values");
  uint32_t b;
  memcpy(&b, &v, 4);
  b = ts_emu_shfl_xor(mask, b, lane_mask);
  memcpy(&v, &b, 4);
  return v;
}

template <typename T>
inline T min(T a, T b) {
  return b < a ? b : a;
}
template <typename T>
inline T max(T a, T b) {
  return a < b ? b : a;
}

// IEEE operations, never fused (the emulator is built with -ffp-contract=off;
// these are the device's explicit non-fusing forms).
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }

// bf16: the top 16 bits of a float, rounded to nearest even; NaN becomes
// 0x7fff as on the device.
struct __nv_bfloat16 {
  unsigned short x;
};
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  __nv_bfloat16 r;
  if ((u & 0x7fffffffu) > 0x7f800000u) r.x = 0x7fff;
  else r.x = (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  return r;
}
inline float __bfloat162float(__nv_bfloat16 h) {
  uint32_t u = (uint32_t)h.x << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// ---- the runtime ---------------------------------------------------------------------------
typedef enum {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorIllegalAddress = 700,
} cudaError_t;
typedef enum {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
} cudaMemcpyKind;
typedef struct ts_emu_stream *cudaStream_t;
#define cudaMemAttachGlobal 0x01
#define cudaStreamNonBlocking 0x01
struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  int major, minor;
};

enum cudaMemoryType {
  cudaMemoryTypeUnregistered = 0,
  cudaMemoryTypeHost = 1,
  cudaMemoryTypeDevice = 2,
  cudaMemoryTypeManaged = 3,
};
struct cudaPointerAttributes {
  enum cudaMemoryType type;
  int device;
  void *devicePointer, *hostPointer;
};

cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaMallocManaged(void **p, size_t bytes, unsigned flags = cudaMemAttachGlobal);
cudaError_t cudaFree(void *p);
cudaError_t cudaMemset(void *p, int value, size_t bytes);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s = nullptr);
// Plain host memory is cudaMemoryTypeUnregistered (CUDA 11 and later).
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *a, const void *p);
cudaError_t cudaGetLastError(void);
const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int device);

// Whether [p, p + bytes) lies inside one live device allocation.
bool ts_emu_is_device(const void *p, size_t bytes);
// Records a failure as the device would report it: cudaGetLastError returns
// it next. `why` goes to stderr at once (the caller names the operation).
void ts_emu_fail(cudaError_t e, const char *why);
// The stream: work (launches, device-to-device copies, memsets, cuBLAS) is
// queued and runs, in order, when the host synchronizes (cudaStreamSynchronize,
// cudaDeviceSynchronize, cudaFree, a copy to or from host memory). Host code
// that reads a result without waiting for it reads what was there before.
void ts_emu_enqueue(std::function<void()> work);
void ts_emu_drain(void);

// ---- cuBLAS: one GEMM ------------------------------------------------------------------------
typedef struct ts_emu_cublas *cublasHandle_t;
typedef enum {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUDA_R_32F = 0 } cudaDataType;
typedef enum { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_16BF = 75 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;
typedef enum { CUBLAS_ATOMICS_NOT_ALLOWED = 0, CUBLAS_ATOMICS_ALLOWED = 1 } cublasAtomicsMode_t;
typedef enum { CUBLAS_DEFAULT_MATH = 0 } cublasMath_t;

cublasStatus_t cublasCreate(cublasHandle_t *h);
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s);
cublasStatus_t cublasSetAtomicsMode(cublasHandle_t h, cublasAtomicsMode_t mode);
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode);
const char *cublasGetStatusString(cublasStatus_t s);
// Column-major C (m, n) = alpha·op(A)·op(B) + beta·C, fp32 storage; FAST_16BF
// rounds the elements of A and B to bf16. Sums run over k in order, in fp32.
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void *alpha, const void *A, cudaDataType Atype,
                            int lda, const void *B, cudaDataType Btype, int ldb, const void *beta,
                            void *C, cudaDataType Ctype, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo);
// C (m, n) = alpha·op(A) + beta·op(B); a zero coefficient's matrix is not read.
cublasStatus_t cublasSgeam(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, const float *alpha, const float *A, int lda, const float *beta,
                           const float *B, int ldb, float *C, int ldc);

// ---- launches --------------------------------------------------------------------------------
// Whether the device would take the configuration; if not, the launch fails
// as on the device (cudaGetLastError).
bool ts_emu_check_launch(dim3 grid, dim3 block, size_t shmem);
// A pointer argument outside device memory fails the launch (argument i).
bool ts_emu_check_arg(const void *p, int i);
// Runs body(ctx) as every thread of every block of the grid.
void ts_emu_run_grid(dim3 grid, dim3 block, void (*body)(void *), void *ctx);

// The kernel and a copy of its arguments; every thread calls the kernel with
// its own copies, as each CUDA thread gets its own parameters.
template <typename... K>
struct ts_emu_call {
  ts_emu_call(void (*k)(K...), std::tuple<K...> a) : kernel(k), args(a) {}
  void (*kernel)(K...);
  std::tuple<K...> args;
  static void run(void *self) {
    ts_emu_call *c = (ts_emu_call *)self;
    std::tuple<K...> mine = c->args;
    std::apply(c->kernel, mine);
  }
};

template <typename... K>
void ts_emu_launch(void (*kernel)(K...), dim3 grid, dim3 block, size_t shmem,
                   std::type_identity_t<K>... args) {
  int i = 0;
  bool ok = true;
  auto check = [&](const auto &a) {
    if constexpr (std::is_pointer_v<std::decay_t<decltype(a)>>) ok = ts_emu_check_arg(a, i) && ok;
    i++;
  };
  (check(args), ...);
  // a failed launch runs nothing: cudaGetLastError says why
  if (!ok || !ts_emu_check_launch(grid, block, shmem)) return;
  auto c = std::make_shared<ts_emu_call<K...>>(kernel, std::tuple<K...>(args...));
  ts_emu_enqueue(
      [c, grid, block] { ts_emu_run_grid(grid, block, &ts_emu_call<K...>::run, c.get()); });
}

// The order the emulator runs threads and blocks in (0: by index, 1:
// reversed); results must not depend on it. Returns the previous order.
extern "C" int ts_cuda_emu_schedule(int reversed);
#endif
