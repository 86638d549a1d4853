// src/gpu/attention_merge.cu compiled by g++ against the emulator (cuda_emu.h).
#include "gpu/attention_merge.cu"
