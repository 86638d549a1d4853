// src/gpu/elementwise.cu compiled by g++ against the emulator (cuda_emu.h).
#include "gpu/elementwise.cu"
