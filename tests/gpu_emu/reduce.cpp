// src/gpu/reduce.cu compiled by g++ against the emulator (cuda_emu.h).
#include "gpu/reduce.cu"
