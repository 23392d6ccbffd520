// The C ABI's shared parts (docs/embedding.md): version, result strings, this thread's last
// error, the guard helpers, DLPack <-> Tensor conversion and the tensor-list handle.
#include <cstdint>
#include <cstring>
#include <limits>
#include <new>
#include <optional>
#include <sstream>
#include <vector>

#include "braid/core/config.h"
#include "braid/core/device_runtime.h"
#include "braid/core/error.h"
#include "c_api_internal.h"

static_assert(BRAID_MAJOR == BRAID_VERSION_MAJOR && BRAID_MINOR == BRAID_VERSION_MINOR &&
                  BRAID_PATCH == BRAID_VERSION_PATCH,
              "braid.h's BRAID_MAJOR / MINOR / PATCH must equal the project's version "
              "(CMakeLists.txt, project(braid VERSION ...))");

namespace braid::capi {
namespace {

thread_local std::string t_last_error;

// Note [DLPack bool]: DLPack 0.6 (the header braid.h includes) has no code for booleans;
// DLPack 0.8 added kDLBool = 6 (bits 8), which torch 2, numpy and JAX use. braid's bool goes
// out and comes in as that code, so a bool tensor round-trips as bool and a kDLUInt 8 tensor
// stays u8. The fp8 codes came with DLPack 1.1 alongside an ABI change (versioned tensors),
// so fp8 is refused both ways rather than half-supported.
constexpr uint8_t kDLBoolCode = 6;

std::string dl_dtype_str(DLDataType t) {
  std::ostringstream out;
  const char* names[] = {"int", "uint", "float", "opaque handle", "bfloat", "complex", "bool"};
  out << "{code " << int(t.code);
  if (t.code < sizeof(names) / sizeof(names[0])) out << " (" << names[t.code] << ")";
  out << ", bits " << int(t.bits) << ", lanes " << t.lanes << "}";
  return out.str();
}

std::optional<DType> dtype_from_dl(DLDataType t) {
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

DType dtype_from_dl_checked(DLDataType t, const char* what) {
  const std::optional<DType> d = dtype_from_dl(t);
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

// kDLCPU and page-locked host memory are braid's cpu; kDLCUDA is cuda:<id> where this build
// has the CUDA runtime. Everything else has no braid device.
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

// What a DLManagedTensor from to_dlpack owns: the tensor (so its storage lives) and the
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

braidResult_t record_failure(braidResult_t result, const char* function,
                             std::string_view message) noexcept {
  try {
    std::string text;
    text.reserve(std::strlen(function) + 2 + message.size());
    text.append(function).append(": ").append(message);
    t_last_error = std::move(text);
  } catch (...) {
    t_last_error.clear();  // never allocates; the message is lost, the result is not
  }
  return result;
}

braidResult_t fail(braidResult_t result, std::string message) {
  t_last_error = std::move(message);
  return result;
}

braidResult_t result_of(ErrorKind kind) {
  static_assert(braidInvalidArgument == 1 + int(ErrorKind::kInvalidArgument) &&
                    braidOutOfRange == 1 + int(ErrorKind::kOutOfRange) &&
                    braidNotSupported == 1 + int(ErrorKind::kNotSupported) &&
                    braidIoError == 1 + int(ErrorKind::kIo) &&
                    braidCorruptData == 1 + int(ErrorKind::kCorruptData) &&
                    braidTimeout == 1 + int(ErrorKind::kTimeout) &&
                    braidPeerLost == 1 + int(ErrorKind::kPeerLost) &&
                    braidOutOfMemory == 1 + int(ErrorKind::kOutOfMemory) &&
                    braidInternalError == 1 + int(ErrorKind::kInternal),
                "braidResult_t follows braid::ErrorKind's order");
  const int k = 1 + static_cast<int>(kind);
  return k >= braidInvalidArgument && k <= braidInternalError ? static_cast<braidResult_t>(k)
                                                              : braidInternalError;
}

void require(const void* p, const char* what) {
  BRAID_CHECK(p != nullptr, kInvalidArgument, what, " is NULL");
}

void check_struct_size(size_t size, size_t expected, const char* what) {
  BRAID_CHECK(size >= expected, kInvalidArgument, what, "->size is ", size, ", expected ", expected,
              " (start from its _INITIALIZER macro, which sets it)");
  BRAID_CHECK(size == expected, kInvalidArgument, what, "->size is ", size,
              ": the struct comes from a newer braid.h than this library (", BRAID_VERSION_STRING,
              ") knows, whose struct has ", expected, " bytes");
}

DType dtype_of(braidDataType_t dt, const char* what) {
#define BRAID_CAPI_SAME_DTYPE(e, n, st, T, sz, fl) static_cast<int>(DType::e),
  constexpr int order[] = {BRAID_FOR_EACH_DTYPE(BRAID_CAPI_SAME_DTYPE)};
#undef BRAID_CAPI_SAME_DTYPE
  static_assert(braidFloat64 == order[0] && braidFloat32 == order[1] && braidFloat16 == order[2] &&
                    braidBfloat16 == order[3] && braidFloat8e4m3 == order[4] &&
                    braidFloat8e5m2 == order[5] && braidInt64 == order[6] &&
                    braidInt32 == order[7] && braidInt16 == order[8] && braidInt8 == order[9] &&
                    braidUint8 == order[10] && braidBool == order[11] && kNumDTypes == 12,
                "braidDataType_t follows braid::DType's order");
  const int v = static_cast<int>(dt);
  BRAID_CHECK(v >= 0 && v < kNumDTypes, kInvalidArgument, what, " ", v,
              " is not a braidDataType_t; expected braidFloat64 (0) .. braidBool (11)");
  return static_cast<DType>(v);
}

ReduceOp reduce_op_of(braidRedOp_t op, const char* what) {
  static_assert(braidSum == int(ReduceOp::kSum) && braidProd == int(ReduceOp::kProd) &&
                    braidMin == int(ReduceOp::kMin) && braidMax == int(ReduceOp::kMax) &&
                    braidAvg == int(ReduceOp::kAvg),
                "braidRedOp_t follows braid::ReduceOp's order");
  const int v = static_cast<int>(op);
  BRAID_CHECK(v >= braidSum && v <= braidAvg, kInvalidArgument, what, " ", v,
              " is not a braidRedOp_t; expected braidSum (0), braidProd, braidMin, braidMax or "
              "braidAvg (4)");
  return static_cast<ReduceOp>(v);
}

Tensor tensor_from_dlpack(const DLTensor* t, const char* what) {
  require(t, what);
  BRAID_CHECK(t->ndim >= 0, kInvalidArgument, what, "->ndim is ", t->ndim, "; expected >= 0");
  BRAID_CHECK(t->ndim == 0 || t->shape != nullptr, kInvalidArgument, what,
              "->shape is NULL for ndim ", t->ndim);
  const DType dtype = dtype_from_dl_checked(t->dtype, what);
  const Device device = device_from_dl(t->device, what);
  Shape shape(t->shape, t->shape + t->ndim);
  for (int d = 0; d < t->ndim; ++d) {
    BRAID_CHECK(shape[d] >= 0, kInvalidArgument, what, "->shape[", d, "] is ", shape[d],
                "; expected >= 0");
  }
  std::optional<Strides> strides;
  if (t->strides != nullptr) {
    strides.emplace(t->strides, t->strides + t->ndim);
    for (int d = 0; d < t->ndim; ++d) {
      BRAID_CHECK((*strides)[d] >= 0, kInvalidArgument, what, "->strides[", d, "] is ",
                  (*strides)[d], "; braid views need strides >= 0 (elements)");
    }
  }
  const int64_t numel = shape_numel(shape);
  BRAID_CHECK(t->data != nullptr || numel == 0, kInvalidArgument, what, "->data is NULL for shape ",
              shape_str(shape));
  char* base = static_cast<char*>(t->data);
  char* first = base == nullptr ? nullptr : base + t->byte_offset;
  const size_t elem = dtype_size(dtype);
  BRAID_CHECK(reinterpret_cast<uintptr_t>(first) % elem == 0, kInvalidArgument, what,
              "->data + byte_offset (", static_cast<void*>(first), ", byte_offset ", t->byte_offset,
              ") is not aligned to the ", elem, "-byte elements of dtype ", dtype_name(dtype));
  return Tensor::from_blob(first, std::move(shape), dtype, device, {}, std::move(strides));
}

DLManagedTensor* to_dlpack(Tensor t) {
  BRAID_CHECK(t.defined(), kInvalidArgument, "to_dlpack: the tensor is undefined");
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

}  // namespace braid::capi

using braid::capi::guard;
using braid::capi::require;

extern "C" {

BRAID_API int braidGetVersion(void) {
  return BRAID_VERSION_CODE(BRAID_VERSION_MAJOR, BRAID_VERSION_MINOR, BRAID_VERSION_PATCH);
}

BRAID_API const char* braidGetErrorString(braidResult_t result) {
  switch (result) {
    case braidSuccess:
      return "success";
    case braidInvalidArgument:
      return "invalid argument";
    case braidOutOfRange:
      return "out of range";
    case braidNotSupported:
      return "not supported";
    case braidIoError:
      return "I/O error";
    case braidCorruptData:
      return "corrupt data";
    case braidTimeout:
      return "timeout";
    case braidPeerLost:
      return "peer lost";
    case braidOutOfMemory:
      return "out of memory";
    case braidInternalError:
      return "internal error";
    case braidInProgress:
      return "in progress";
  }
  return "unknown braidResult_t";
}

BRAID_API const char* braidGetLastError(void) {
  return braid::capi::t_last_error.c_str();
}

BRAID_API braidResult_t braidDataTypeFromDLPack(DLDataType dtype, braidDataType_t* out) {
  return guard("braidDataTypeFromDLPack", [&] {
    require(out, "out");
    const braid::DType d = braid::capi::dtype_from_dl_checked(dtype, "dtype");
    *out = static_cast<braidDataType_t>(d);
  });
}

BRAID_API braidResult_t braidTensorListSize(braidTensorList_t list, size_t* size) {
  return guard("braidTensorListSize", [&] {
    require(list, "list");
    require(size, "size");
    *size = list->tensors.size();
  });
}

BRAID_API braidResult_t braidTensorListGet(braidTensorList_t list, size_t i, const char** name,
                                           DLManagedTensor** tensor) {
  return guard("braidTensorListGet", [&] {
    require(list, "list");
    BRAID_CHECK(name != nullptr || tensor != nullptr, kInvalidArgument,
                "name and tensor are both NULL; expected at least one output");
    BRAID_CHECK(i < list->tensors.size(), kOutOfRange, "i ", i, " is outside the list's ",
                list->tensors.size(), " entries");
    const auto& [entry_name, entry] = list->tensors[i];
    DLManagedTensor* managed = tensor != nullptr ? braid::capi::to_dlpack(entry) : nullptr;
    if (name != nullptr) *name = entry_name.c_str();
    if (tensor != nullptr) *tensor = managed;
  });
}

BRAID_API braidResult_t braidTensorListFree(braidTensorList_t list) {
  return guard("braidTensorListFree", [&] { delete list; });
}

}  // extern "C"
