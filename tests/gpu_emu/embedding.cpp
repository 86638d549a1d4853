// src/gpu/embedding.cu compiled by g++ against the emulator (cuda_emu.h).
#include "gpu/embedding.cu"
