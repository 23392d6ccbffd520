// The C ABI's shared parts (docs/embedding.md): version, result strings, this thread's last
// error, the guard helpers, DLPack <-> Tensor (through bindings/dlpack) and the tensor-list
// handle.
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
#include "dlpack_tensor.h"

static_assert(BRAID_MAJOR == BRAID_VERSION_MAJOR && BRAID_MINOR == BRAID_VERSION_MINOR &&
                  BRAID_PATCH == BRAID_VERSION_PATCH,
              "braid.h's BRAID_MAJOR / MINOR / PATCH must equal the project's version "
              "(CMakeLists.txt, project(braid VERSION ...))");

namespace braid::capi {
namespace {

thread_local std::string t_last_error;

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
  return dlpack::view_of(*t, what);
}

DLManagedTensor* to_dlpack(Tensor t) {
  return dlpack::to_managed(std::move(t));
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
    const braid::DType d = braid::dlpack::dtype_from_dl(dtype, "dtype");
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
