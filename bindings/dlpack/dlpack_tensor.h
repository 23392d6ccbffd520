// DLPack 0.6 (/usr/include/dlpack/dlpack.h) <-> braid::Tensor, shared by the C ABI
// (bindings/c) and the Python module (bindings/python), which each compile dlpack_tensor.cc.
// Not installed: both callers keep these symbols to themselves (hidden visibility).
#pragma once

#include <dlpack/dlpack.h>

#include <functional>

#include "braid/tensor/tensor.h"

namespace braid::dlpack {

// Note [DLPack bool]: DLPack 0.6 has no code for booleans; DLPack 0.8 added kDLBool = 6 (bits
// 8), which torch 2, numpy and JAX use. braid's bool goes out and comes in as that code, so a
// bool tensor round-trips as bool and a kDLUInt 8 tensor stays u8. The fp8 codes came with
// DLPack 1.1 alongside an ABI change (versioned tensors), so fp8 is refused both ways.
inline constexpr uint8_t kDLBoolCode = 6;

// kNotSupported naming `what` and the data type when braid has no equivalent.
DType dtype_from_dl(DLDataType t, const char* what);
// kNotSupported for fp8.
DLDataType dl_from_dtype(DType d);
// kDLCPU and kDLCUDAHost are cpu; kDLCUDA is cuda:<id> where this build has the CUDA runtime;
// anything else kNotSupported naming `what`.
Device device_from_dl(DLDevice d, const char* what);
DLDevice dl_from_device(Device d);

// A Tensor viewing t's memory (no copy; strides in elements, NULL = contiguous; byte_offset
// honoured). Checks everything first (ndim, shape, dtype, device, strides >= 0, data present
// and aligned): kInvalidArgument / kNotSupported naming `what`. `deleter` runs when the last
// view goes (empty: borrowed memory).
Tensor view_of(const DLTensor& t, const char* what, std::function<void(void*)> deleter = {});
// A new DLManagedTensor that holds `t` (and so its storage) until its deleter runs.
DLManagedTensor* to_managed(Tensor t);

}  // namespace braid::dlpack
