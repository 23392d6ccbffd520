// The one portability header of braid's GPU kernels (design.md, "Kernels"): kernels/src/cuda/
// is written against the CUDA runtime; compiled by hipcc, this header maps the names it uses
// to HIP's, as ggml-cuda/vendors/hip.h does. Only the names the sources use are mapped: add
// one here when a source starts using it, never #if in the sources.
//
// Status: the CUDA side is built and linked. The HIP side is compiled, objects only, for gfx90a
// with Debian 12's HIP 5.2 by scripts/hip_check.sh (ctest kernels.hip_compile; docs/gpu.md,
// "HIP"), except gemm_fp8.cu: cuBLASLt would need hipBLASLt, which Debian does not package.
#pragma once

#if defined(__HIPCC__)

#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>

// bf16. HIP 5.2 (Debian 12's) has no hip/hip_bf16.h, where later ROCm releases put CUDA's bf16
// intrinsics (as __hip_bfloat16). The two the sources use are written here with CUDA's results
// (round to nearest even; NaN becomes the canonical 0x7fff, as cvt.rn.bf16.f32 gives), under
// braid's own names so that a newer ROCm's declarations never clash with them.
struct braid_hip_bf16 {
  unsigned short x;
};
__device__ inline braid_hip_bf16 braid_hip_float2bfloat16_rn(float f) {
  const unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {0x7fffu};
  return {static_cast<unsigned short>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}
__device__ inline unsigned short braid_hip_bfloat16_as_ushort(braid_hip_bf16 b) {
  return b.x;
}
#define __float2bfloat16_rn braid_hip_float2bfloat16_rn
#define __bfloat16_as_ushort braid_hip_bfloat16_as_ushort

#define cudaError_t hipError_t
#define cudaSuccess hipSuccess
#define cudaErrorMemoryAllocation hipErrorOutOfMemory
#define cudaErrorNoDevice hipErrorNoDevice
#define cudaErrorInsufficientDriver hipErrorInsufficientDriver
#define cudaErrorInvalidValue hipErrorInvalidValue
#define cudaErrorInvalidDevicePointer hipErrorInvalidDevicePointer
#define cudaErrorNoKernelImageForDevice hipErrorNoBinaryForGpu
#define cudaStream_t hipStream_t
#define cudaGetErrorName hipGetErrorName
#define cudaGetErrorString hipGetErrorString
#define cudaGetDevice hipGetDevice
#define cudaDeviceGetAttribute hipDeviceGetAttribute
#define cudaDevAttrComputeCapabilityMajor hipDeviceAttributeComputeCapabilityMajor
#define cudaDevAttrComputeCapabilityMinor hipDeviceAttributeComputeCapabilityMinor
#define cudaLaunchKernel hipLaunchKernel
#define cudaMallocAsync hipMallocAsync
#define cudaFreeAsync hipFreeAsync
#define cudaMemsetAsync hipMemsetAsync
#define cudaMemcpyAsync hipMemcpyAsync
#define cudaMemcpyDeviceToHost hipMemcpyDeviceToHost
#define cudaMemcpyHostToDevice hipMemcpyHostToDevice
#define cudaStreamSynchronize hipStreamSynchronize
#define cudaMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define cudaGetLastError hipGetLastError
#define cudaFuncSetAttribute hipFuncSetAttribute
#define cudaFuncAttributeMaxDynamicSharedMemorySize hipFuncAttributeMaxDynamicSharedMemorySize
#define cudaDevAttrMaxSharedMemoryPerBlockOptin hipDeviceAttributeSharedMemPerBlockOptin
// HIP has no __grid_constant__; its kernel arguments are read from memory with a computed
// offset anyway, so a struct indexed at run time is not copied to scratch.
#define BRAID_GRID_CONSTANT
// A shuffle down within groups of `width` lanes (all lanes of the group take part). HIP's
// __shfl_down has no mask (wavefronts of 64 lanes; ROCm before 6.2 has no _sync form).
#define BRAID_SHFL_DOWN(value, delta, width) __shfl_down((value), (delta), (width))

#else  // CUDA

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

// Lets a kernel index its by-value argument block at run time without the compiler copying
// the whole block into local memory first (sm_70+, CUDA 11.7+).
#define BRAID_GRID_CONSTANT __grid_constant__
#define BRAID_SHFL_DOWN(value, delta, width) \
  __shfl_down_sync(0xffffffffu, (value), (delta), (width))

#endif
