// DLPack <-> braid::Tensor (dlpack_tensor.h).
#include "dlpack_tensor.h"

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "braid/core/device_runtime.h"
#include "braid/core/error.h"

namespace braid::dlpack {
namespace {

std::string dl_dtype_str(DLDataType t) {
  std::ostringstream out;
  const char* names[] = {"int", "uint", "float", "opaque handle", "bfloat", "complex", "bool"};
  out << "{code " << int(t.code);
  if (t.code < sizeof(names) / sizeof(names[0])) out << " (" << names[t.code] << ")";
  out << ", bits " << int(t.bits) << ", lanes " << t.lanes << "}";
  return out.str();
}

std::optional<DType> find_dtype(DLDataType t) {
  if (t.lanes != 1) return std::nullopt;
  switch (t.code) {
    case kDLFloat:
      if (t.bits == 64) return DType::kF64;
      if (t.bits == 32) return DType::kF32;
      if (t.bits == 16) return DType::kF16;
      return std::nullopt;
    case kDLBfloat:
      if (t.bits == 16) return DType::kBF16;
      return std::nullopt;
    case kDLInt:
      if (t.bits == 64) return DType::kI64;
      if (t.bits == 32) return DType::kI32;
      if (t.bits == 16) return DType::kI16;
      if (t.bits == 8) return DType::kI8;
      return std::nullopt;
    case kDLUInt:
      if (t.bits == 8) return DType::kU8;
      return std::nullopt;
    case kDLBoolCode:
      if (t.bits == 8) return DType::kBool;
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

std::string dl_device_str(DLDevice d) {
  const char* name = "unknown";
  switch (d.device_type) {
    case kDLCPU:
      name = "kDLCPU";
      break;
    case kDLCUDA:
      name = "kDLCUDA";
      break;
    case kDLCUDAHost:
      name = "kDLCUDAHost";
      break;
    case kDLOpenCL:
      name = "kDLOpenCL";
      break;
    case kDLVulkan:
      name = "kDLVulkan";
      break;
    case kDLMetal:
      name = "kDLMetal";
      break;
    case kDLVPI:
      name = "kDLVPI";
      break;
    case kDLROCM:
      name = "kDLROCM";
      break;
    case kDLROCMHost:
      name = "kDLROCMHost";
      break;
    case kDLExtDev:
      name = "kDLExtDev";
      break;
    case kDLCUDAManaged:
      name = "kDLCUDAManaged";
      break;
  }
  return std::string(name) + " (device_type " + std::to_string(int(d.device_type)) +
         ", device_id " + std::to_string(d.device_id) + ")";
}

// What a DLManagedTensor from to_managed owns: the tensor (so its storage lives) and the
// shape / strides arrays the DLTensor points at.
struct ManagedContext {
  Tensor tensor;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  DLManagedTensor managed{};
};

void delete_managed(DLManagedTensor* self) {
  if (self != nullptr) delete static_cast<ManagedContext*>(self->manager_ctx);
}

}  // namespace

DType dtype_from_dl(DLDataType t, const char* what) {
  const std::optional<DType> d = find_dtype(t);
  BRAID_CHECK(d.has_value(), kNotSupported, what, ": DLPack data type ", dl_dtype_str(t),
              " has no braid dtype; expected lanes 1 and float 16/32/64, bfloat 16, int "
              "8/16/32/64, uint 8 or bool (code 6) 8");
  return *d;
}

DLDataType dl_from_dtype(DType d) {
  auto make = [](uint8_t code, uint8_t bits) { return DLDataType{code, bits, 1}; };
  switch (d) {
    case DType::kF64:
      return make(kDLFloat, 64);
    case DType::kF32:
      return make(kDLFloat, 32);
    case DType::kF16:
      return make(kDLFloat, 16);
    case DType::kBF16:
      return make(kDLBfloat, 16);
    case DType::kI64:
      return make(kDLInt, 64);
    case DType::kI32:
      return make(kDLInt, 32);
    case DType::kI16:
      return make(kDLInt, 16);
    case DType::kI8:
      return make(kDLInt, 8);
    case DType::kU8:
      return make(kDLUInt, 8);
    case DType::kBool:
      return make(kDLBoolCode, 8);
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      break;
  }
  BRAID_FAIL(kNotSupported, "dtype ", dtype_name(d),
             " has no DLPack 0.6 code (fp8 came with DLPack 1.1); convert it first, e.g. to bf16 "
             "or to u8 bytes");
}

Device device_from_dl(DLDevice d, const char* what) {
  switch (d.device_type) {
    case kDLCPU:
    case kDLCUDAHost:
      return kCPU;
    case kDLCUDA:
      BRAID_CHECK(is_runtime_built(DeviceType::kCUDA), kNotSupported, what, ": device ",
                  dl_device_str(d), " is not supported: this build of braid has no CUDA runtime");
      BRAID_CHECK(d.device_id >= 0 && d.device_id <= std::numeric_limits<int16_t>::max(),
                  kInvalidArgument, what, ": device_id ", d.device_id,
                  " of a kDLCUDA tensor is not a device index (expected >= 0)");
      return Device(DeviceType::kCUDA, d.device_id);
    default:
      break;
  }
  BRAID_FAIL(kNotSupported, what, ": device ", dl_device_str(d),
             " is not supported; expected kDLCPU, kDLCUDAHost or kDLCUDA");
}

DLDevice dl_from_device(Device d) {
  switch (d.type) {
    case DeviceType::kCPU:
      return DLDevice{kDLCPU, 0};
    case DeviceType::kCUDA:
      return DLDevice{kDLCUDA, d.index};
    case DeviceType::kHIP:
      return DLDevice{kDLROCM, d.index};
    default:
      break;
  }
  BRAID_FAIL(kNotSupported, "a tensor on device ", d.str(), " has no DLPack device");
}

Tensor view_of(const DLTensor& t, const char* what, std::function<void(void*)> deleter) {
  BRAID_CHECK(t.ndim >= 0, kInvalidArgument, what, "->ndim is ", t.ndim, "; expected >= 0");
  BRAID_CHECK(t.ndim == 0 || t.shape != nullptr, kInvalidArgument, what,
              "->shape is NULL for ndim ", t.ndim);
  const DType dtype = dtype_from_dl(t.dtype, what);
  const Device device = device_from_dl(t.device, what);
  Shape shape(t.shape, t.shape + t.ndim);
  for (int d = 0; d < t.ndim; ++d) {
    BRAID_CHECK(shape[d] >= 0, kInvalidArgument, what, "->shape[", d, "] is ", shape[d],
                "; expected >= 0");
  }
  std::optional<Strides> strides;
  if (t.strides != nullptr) {
    strides.emplace(t.strides, t.strides + t.ndim);
    for (int d = 0; d < t.ndim; ++d) {
      BRAID_CHECK((*strides)[d] >= 0, kInvalidArgument, what, "->strides[", d, "] is ",
                  (*strides)[d], ", which is negative (shape ", shape_str(shape),
                  "); braid views need strides >= 0 in elements (copy it first)");
    }
  }
  const int64_t numel = shape_numel(shape);
  char* first = t.data == nullptr ? nullptr : static_cast<char*>(t.data) + t.byte_offset;
  BRAID_CHECK(first != nullptr || numel == 0, kInvalidArgument, what, "->data is NULL for shape ",
              shape_str(shape));
  const size_t elem = dtype_size(dtype);
  BRAID_CHECK(reinterpret_cast<uintptr_t>(first) % elem == 0, kInvalidArgument, what,
              "->data + byte_offset (", static_cast<void*>(first), ", byte_offset ", t.byte_offset,
              ") is not aligned to the ", elem, "-byte elements of dtype ", dtype_name(dtype));
  return Tensor::from_blob(first, std::move(shape), dtype, device, std::move(deleter),
                           std::move(strides));
}

DLManagedTensor* to_managed(Tensor t) {
  BRAID_CHECK(t.defined(), kInvalidArgument, "DLPack export: the tensor is undefined");
  auto ctx = std::make_unique<ManagedContext>();
  DLTensor& dl = ctx->managed.dl_tensor;
  dl.device = dl_from_device(t.device());
  dl.dtype = dl_from_dtype(t.dtype());
  ctx->shape = t.shape();
  ctx->strides = t.strides();
  dl.ndim = static_cast<int>(ctx->shape.size());
  dl.shape = ctx->shape.data();
  dl.strides = ctx->strides.data();
  dl.data = t.data_ptr();  // element 0 of the view: storage + offset
  dl.byte_offset = 0;
  ctx->tensor = std::move(t);
  ctx->managed.manager_ctx = ctx.get();
  ctx->managed.deleter = &delete_managed;
  return &ctx.release()->managed;
}

}  // namespace braid::dlpack
