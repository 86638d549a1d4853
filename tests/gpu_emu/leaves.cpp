// src/gpu/leaves.cu compiled by g++ against the emulator (cuda_emu.h).
#include "gpu/leaves.cu"
