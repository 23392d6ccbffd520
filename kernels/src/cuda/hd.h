// The two macros every header shared by the GPU kernels and the host tests uses: BRAID_HD marks
// a function compiled for both sides (plain C++ when the header is compiled by the host
// compiler alone, as in braid_kernels_cuda_host_test), and BRAID_DEVICE_PASS tells device code
// (where the CUDA intrinsics exist) from host code. This is the one place where the kernels
// test #if: everything else is written once for both sides.
#pragma once

#if defined(__CUDACC__) || defined(__HIPCC__)
#include "vendor.h"
#define BRAID_HD __host__ __device__
#else
#define BRAID_HD
#endif

#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define BRAID_DEVICE_PASS 1
#else
#define BRAID_DEVICE_PASS 0
#endif
