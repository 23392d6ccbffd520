// The one portability header of braid's GPU kernels (design.md, "Kernels"): kernels/src/cuda/
// is written against the CUDA runtime; compiled by hipcc, this header maps the names it uses
// to HIP's, as ggml-cuda/vendors/hip.h does. Only the names the sources use are mapped: add
// one here when a source starts using it, never #if in the sources.
//
// Status: the CUDA side is built and linked; HIP is not installed on the build machines, so
// the HIP side has never been compiled (docs/gpu.md), and cuBLASLt (gemm_fp8.cu) would need
// hipBLASLt, which Debian does not package.
#pragma once

#if defined(__HIPCC__)

#include <hip/hip_bf16.h>
#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>

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
#define cudaStreamSynchronize hipStreamSynchronize
#define cudaMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define cudaGetLastError hipGetLastError
#define cudaFuncSetAttribute hipFuncSetAttribute
#define cudaFuncAttributeMaxDynamicSharedMemorySize hipFuncAttributeMaxDynamicSharedMemorySize
#define cudaDevAttrMaxSharedMemoryPerBlockOptin hipDeviceAttributeSharedMemPerBlockOptin
// HIP has no __grid_constant__; its kernel arguments are read from memory with a computed
// offset anyway, so a struct indexed at run time is not copied to scratch.
#define BRAID_GRID_CONSTANT

#else  // CUDA

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

// Lets a kernel index its by-value argument block at run time without the compiler copying
// the whole block into local memory first (sm_70+, CUDA 11.7+).
#define BRAID_GRID_CONSTANT __grid_constant__

#endif
