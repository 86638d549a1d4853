// src/gpu/crossentropy.cu compiled by g++ against the emulator (cuda_emu.h).
#include "gpu/crossentropy.cu"
