// src/gpu/orthogonal.cu compiled by g++ against the emulator (cuda_emu.h).
#include "gpu/orthogonal.cu"
