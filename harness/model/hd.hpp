// Host/device annotation so that mask and score-mod semantics are written once
// and compiled into CPU code, the reference and CUDA kernels alike.
#pragma once

#if defined(__CUDACC__)
#define ATTNBENCH_HD __host__ __device__ __forceinline__
#else
#define ATTNBENCH_HD inline
#endif
