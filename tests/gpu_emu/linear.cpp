// src/gpu/linear.cu compiled by g++ against the emulator (cuda_emu.h).
#include "gpu/linear.cu"
