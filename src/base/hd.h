// Code compiled both by the C compiler (the CPU backend) and by nvcc (the
// CUDA kernels): the same source for the bits that must agree on both, such
// as the random masks.
#ifndef TS_HD_H
#define TS_HD_H
#ifdef __CUDACC__
#define TS_HD __host__ __device__
#else
#define TS_HD
#endif
#endif
