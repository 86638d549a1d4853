// src/gpu/backend_cuda.cu compiled by g++ against the emulator (cuda_emu.h):
// the real table of kernels, allocator and device setup. libtessera.a of a
// build without --enable-cuda has its own ts_backend_cuda_describe ("not
// built"); tests/test_gpu_emu links beside it, so this one takes another
// name there. tests/tessera_emu brings its own src/backend/backend.c, built as with
// CUDA (TS_HAVE_CUDA), which calls this one by its name.
#ifndef TS_HAVE_CUDA
#define ts_backend_cuda_describe ts_emu_backend_cuda_describe
#endif
#include "gpu/backend_cuda.cu"
