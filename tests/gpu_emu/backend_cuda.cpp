// src/gpu/backend_cuda.cu compiled by g++ against the emulator (cuda_emu.h):
// the real table of kernels, allocator and device setup. libtessera.a of a
// build without --enable-cuda has its own ts_backend_cuda_describe ("not
// built"), so this one takes another name to link beside it.
#define ts_backend_cuda_describe ts_emu_backend_cuda_describe
#include "gpu/backend_cuda.cu"
