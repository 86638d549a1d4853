// src/gpu/norm.cu compiled by g++ against the emulator (cuda_emu.h).
#include "gpu/norm.cu"
