// src/gpu/comm_nccl.cu compiled by g++ against the emulator (cuda_emu.h, nccl.h).
#include "gpu/comm_nccl.cu"
