// src/gpu/attention.cu compiled by g++ against the emulator (cuda_emu.h).
#include "gpu/attention.cu"
