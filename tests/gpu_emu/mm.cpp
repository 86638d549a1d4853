// src/gpu/mm.cu compiled by g++ against the emulator (cuda_emu.h).
#include "gpu/mm.cu"
