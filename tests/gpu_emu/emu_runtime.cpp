// The CUDA runtime calls of src/gpu/ on host memory (cuda_emu.h): one
// emulated device per process and one stream, whose work waits in a queue until the host
// synchronizes, as on the device: host code that reads a result it did not
// wait for gets stale data here too. Device allocations are recorded so that
// launches and cuBLAS calls can refuse pointers the GPU could not use, and
// fresh ones are filled with NaN bytes: on the device they hold whatever was
// there, so code that reads a buffer before writing it must show up here as
// NaN, not as a lucky zero.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <map>
#include <vector>

#include "cuda_emu.h"

struct ts_emu_stream {
  int unused;
};

namespace {
struct allocation {
  size_t bytes;
  bool managed;
};
std::map<uintptr_t, allocation> allocations; // by base
cudaError_t last_error = cudaSuccess;
ts_emu_stream the_stream;
std::vector<std::function<void()>> queue; // the stream's work, in order

cudaError_t allocate(void **p, size_t bytes, bool managed) {
  if (!p) return cudaErrorInvalidValue;
  *p = nullptr;
  if (bytes == 0) return cudaSuccess;
  void *m = nullptr;
  if (posix_memalign(&m, 256, bytes) != 0) return cudaErrorMemoryAllocation;
  memset(m, 0xff, bytes); // NaN in every float
  allocations[(uintptr_t)m] = {bytes, managed};
  *p = m;
  return cudaSuccess;
}
} // namespace

void ts_emu_enqueue(std::function<void()> work) { queue.push_back(std::move(work)); }

void ts_emu_drain(void) {
  // one item at a time: work may not queue more, but keep the order if it did
  for (size_t i = 0; i < queue.size(); i++) {
    std::function<void()> w = std::move(queue[i]);
    w();
  }
  queue.clear();
}

// The live allocation holding [p, p + bytes), or NULL.
static const allocation *find(const void *p, size_t bytes) {
  uintptr_t a = (uintptr_t)p;
  auto it = allocations.upper_bound(a);
  if (it == allocations.begin()) return nullptr;
  --it;
  // one past the end is a valid pointer for an empty range
  const allocation &m = it->second;
  return a >= it->first && bytes <= m.bytes && a - it->first <= m.bytes - bytes ? &m : nullptr;
}

bool ts_emu_is_device(const void *p, size_t bytes) { return find(p, bytes) != nullptr; }

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *a, const void *p) {
  if (!a) return cudaErrorInvalidValue;
  memset(a, 0, sizeof *a);
  const allocation *m = find(p, 0);
  a->type = !m ? cudaMemoryTypeUnregistered : m->managed ? cudaMemoryTypeManaged : cudaMemoryTypeDevice;
  a->devicePointer = m ? (void *)p : nullptr;
  a->hostPointer = !m || m->managed ? (void *)p : nullptr;
  return cudaSuccess;
}

void ts_emu_fail(cudaError_t e, const char *why) {
  fprintf(stderr, "tessera CUDA emulator: %s: %s\n", why, cudaGetErrorString(e));
  if (last_error == cudaSuccess) last_error = e;
}

bool ts_emu_check_arg(const void *p, int i) {
  if (!p || ts_emu_is_device(p, 0)) return true;
  char why[96];
  snprintf(why, sizeof why, "kernel argument %d (%p) is not device memory", i, p);
  ts_emu_fail(cudaErrorIllegalAddress, why);
  return false;
}

cudaError_t cudaMalloc(void **p, size_t bytes) { return allocate(p, bytes, false); }

cudaError_t cudaMallocManaged(void **p, size_t bytes, unsigned flags) {
  (void)flags;
  return allocate(p, bytes, true);
}

// Waits for the device first, as cudaFree does: queued work may use p.
cudaError_t cudaFree(void *p) {
  ts_emu_drain();
  if (!p) return cudaSuccess;
  auto it = allocations.find((uintptr_t)p);
  if (it == allocations.end()) return cudaErrorInvalidDevicePointer;
  allocations.erase(it);
  free(p);
  return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int value, size_t bytes) {
  if (!ts_emu_is_device(p, bytes)) return cudaErrorInvalidValue;
  ts_emu_enqueue([p, value, bytes] { memset(p, value, bytes); });
  return cudaSuccess;
}

// cudaMemcpyDefault works out the direction from the pointers: host memory on
// either side is allowed; the other kinds say which side is the device's.
// Overlapping ranges are undefined on the device. A copy between device
// buffers is queued; one with host memory on a side waits for the queue and
// is done when the call returns (pageable host memory: the device's rules).
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s) {
  (void)s;
  if (!dst || !src) return cudaErrorInvalidValue;
  if (!bytes) return cudaSuccess;
  const bool dev_src = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  const bool dev_dst = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  if ((dev_src && !ts_emu_is_device(src, bytes)) || (dev_dst && !ts_emu_is_device(dst, bytes))) {
    ts_emu_fail(cudaErrorInvalidValue, "cudaMemcpyAsync: a device side is not device memory");
    return cudaErrorInvalidValue;
  }
  const char *d = (const char *)dst, *c = (const char *)src;
  if (d < c + bytes && c < d + bytes) {
    ts_emu_fail(cudaErrorInvalidValue, "cudaMemcpyAsync between overlapping ranges");
    return cudaErrorInvalidValue;
  }
  if (ts_emu_is_device(dst, bytes) && ts_emu_is_device(src, bytes)) {
    ts_emu_enqueue([dst, src, bytes] { memcpy(dst, src, bytes); });
  } else {
    ts_emu_drain();
    memcpy(dst, src, bytes);
  }
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}

const char *cudaGetErrorString(cudaError_t e) {
  switch (e) {
  case cudaSuccess: return "no error";
  case cudaErrorInvalidValue: return "invalid argument";
  case cudaErrorMemoryAllocation: return "out of memory";
  case cudaErrorInvalidConfiguration: return "invalid configuration argument";
  case cudaErrorInvalidDevicePointer: return "invalid device pointer";
  case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
  }
  return "unknown error";
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  (void)s;
  ts_emu_drain();
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  ts_emu_drain();
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
  (void)flags;
  *s = &the_stream;
  return cudaSuccess;
}

// TS_EMU_DEVICES (1 to 64, default 1): how many devices the host appears to
// have. Each process still emulates one device of its own; more than one lets
// the ranks of one host take a device each, so the backend picks the NCCL
// communicator (nccl.h) instead of MPI over managed memory.
static int device_count(void) {
  const char *s = getenv("TS_EMU_DEVICES");
  int n = s ? atoi(s) : 1;
  return n >= 1 && n <= 64 ? n : 1;
}

// TS_EMU_DEVICE_MIB (default 16384): the memory each device reports, for the
// trainer's check that a model fits. Nothing enforces it.
static size_t device_memory(void) {
  const char *s = getenv("TS_EMU_DEVICE_MIB");
  long long mib = s ? atoll(s) : 16384;
  return (size_t)(mib > 0 ? mib : 16384) << 20;
}

cudaError_t cudaGetDeviceCount(int *n) {
  *n = device_count();
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  return device >= 0 && device < device_count() ? cudaSuccess : cudaErrorInvalidValue;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int device) {
  if (device < 0 || device >= device_count()) return cudaErrorInvalidValue;
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "emulated device (tests/gpu_emu)");
  p->totalGlobalMem = device_memory();
  p->major = 9; // the warp rules of sm_70 and later (independent thread scheduling)
  p->minor = 0;
  return cudaSuccess;
}
