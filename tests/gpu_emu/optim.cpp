// src/gpu/optim.cu compiled by g++ against the emulator (cuda_emu.h).
#include "gpu/optim.cu"
