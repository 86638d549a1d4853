// src/comm/comm_nccl.cu compiled by g++ against the emulator (cuda_emu.h, nccl.h).
#include "comm/comm_nccl.cu"
