#pragma once
// HG_HD marks functions compiled for both host and device: the math of every elementwise op,
// conversion and optimizer update is written once and called by the CPU loops and CUDA kernels.
#if defined(__CUDACC__)
#define HG_HD __host__ __device__ __forceinline__
#else
#define HG_HD inline
#endif
