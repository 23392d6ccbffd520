// The C ABI in one process (the multi-rank runs are comm_test.c and friends under braid
// launch): version, result strings, the last error, NULL handles, the dtype and DLPack
// mappings, and that a bad argument anywhere comes back as a result, never an exception.
#include <braid.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "braid/core/config.h"
#include "braid/core/device_runtime.h"
#include "braid/core/error.h"
#include "c_api_internal.h"

namespace {

using braid::DType;
using braid::Tensor;

std::string last_error() {
  return braidGetLastError();
}

TEST(CApiVersion, EqualsTheHeaderAndTheProjectVersion) {
  EXPECT_EQ(braidGetVersion(), BRAID_VERSION);
  EXPECT_EQ(braidGetVersion(),
            BRAID_VERSION_CODE(BRAID_VERSION_MAJOR, BRAID_VERSION_MINOR, BRAID_VERSION_PATCH));
  EXPECT_EQ(std::to_string(BRAID_MAJOR) + "." + std::to_string(BRAID_MINOR) + "." +
                std::to_string(BRAID_PATCH),
            BRAID_VERSION_STRING);
  EXPECT_EQ(BRAID_VERSION_CODE(1, 2, 3), 10203);
}

TEST(CApiErrors, EveryResultHasItsString) {
  const std::vector<std::pair<braidResult_t, std::string>> want = {
      {braidSuccess, "success"},           {braidInvalidArgument, "invalid argument"},
      {braidOutOfRange, "out of range"},   {braidNotSupported, "not supported"},
      {braidIoError, "I/O error"},         {braidCorruptData, "corrupt data"},
      {braidTimeout, "timeout"},           {braidPeerLost, "peer lost"},
      {braidOutOfMemory, "out of memory"}, {braidInternalError, "internal error"},
      {braidInProgress, "in progress"}};
  for (const auto& [result, text] : want) EXPECT_EQ(braidGetErrorString(result), text);
  EXPECT_STREQ(braidGetErrorString(static_cast<braidResult_t>(77)), "unknown braidResult_t");
}

TEST(CApiErrors, ResultsFollowErrorKinds) {
  using braid::ErrorKind;
  EXPECT_EQ(braid::capi::result_of(ErrorKind::kInvalidArgument), braidInvalidArgument);
  EXPECT_EQ(braid::capi::result_of(ErrorKind::kIo), braidIoError);
  EXPECT_EQ(braid::capi::result_of(ErrorKind::kPeerLost), braidPeerLost);
  EXPECT_EQ(braid::capi::result_of(ErrorKind::kInternal), braidInternalError);
}

TEST(CApiErrors, TheLastErrorIsPerThreadAndNamesTheCallAndArgument) {
  std::string other_before, other_after;
  std::thread([&] { other_before = last_error(); }).join();
  EXPECT_EQ(other_before, "");  // a thread that made no failed call
  EXPECT_EQ(braidCommCount(nullptr, nullptr), braidInvalidArgument);
  EXPECT_EQ(last_error(), "braidCommCount: comm is NULL");
  std::thread([&] { other_after = last_error(); }).join();
  EXPECT_EQ(other_after, "");
  // A successful call leaves the message of the last failed one.
  EXPECT_EQ(braidGetVersion(), BRAID_VERSION);
  EXPECT_EQ(last_error(), "braidCommCount: comm is NULL");
}

TEST(CApiErrors, GuardTurnsEveryExceptionIntoAResult) {
  using braid::capi::guard;
  EXPECT_EQ(guard("f", [] { BRAID_FAIL(kCorruptData, "bad bytes at 3"); }), braidCorruptData);
  EXPECT_EQ(last_error(), "f: bad bytes at 3");
  EXPECT_EQ(guard("g", [] { throw std::bad_alloc(); }), braidOutOfMemory);
  EXPECT_NE(last_error().find("g: out of memory"), std::string::npos);
  EXPECT_EQ(guard("h", [] { throw std::runtime_error("boom"); }), braidInternalError);
  EXPECT_EQ(last_error(), "h: boom");
  EXPECT_EQ(guard("i", [] { throw 42; }), braidInternalError);
  EXPECT_EQ(last_error(), "i: unknown exception");
  EXPECT_EQ(guard("j", [] {}), braidSuccess);
}

TEST(CApiHandles, NullHandlesAreInvalidArgumentsAndFreeingNullIsANoOp) {
  int i = 0;
  const char* s = nullptr;
  size_t n = 0;
  float x = 0;
  // Each call, and the message it must leave: checked right after the call.
  const std::vector<std::pair<std::function<braidResult_t()>, std::string>> cases = {
      {[&] { return braidCommCount(nullptr, &i); }, "braidCommCount: comm is NULL"},
      {[&] { return braidCommUserRank(nullptr, &i); }, "braidCommUserRank: comm is NULL"},
      {[&] { return braidCommGetBackend(nullptr, &s); }, "braidCommGetBackend: comm is NULL"},
      {[&] { return braidCommSplit(nullptr, 0, 0, nullptr); }, "braidCommSplit: comm is NULL"},
      {[&] { return braidAllReduce(&x, &x, 1, braidFloat32, braidSum, nullptr, nullptr, nullptr); },
       "braidAllReduce: comm is NULL"},
      {[&] { return braidBarrier(nullptr, nullptr, nullptr); }, "braidBarrier: comm is NULL"},
      {[&] { return braidRequestTest(nullptr, &i); }, "braidRequestTest: request is NULL"},
      {[&] { return braidRequestWait(nullptr); }, "braidRequestWait: request is NULL"},
      {[&] { return braidTensorListSize(nullptr, &n); }, "braidTensorListSize: list is NULL"},
      {[&] { return braidTensorListGet(nullptr, 0, &s, nullptr); },
       "braidTensorListGet: list is NULL"},
      {[&] { return braidCommInitFromEnv(nullptr, nullptr); },
       "braidCommInitFromEnv: comm is NULL"},
      {[&] { return braidGetUniqueId(nullptr); }, "braidGetUniqueId: unique_id is NULL"},
      {[&] {
         return braidDataTypeFromDLPack(DLDataType{kDLFloat, 32, 1}, nullptr);
       },
       "braidDataTypeFromDLPack: out is NULL"},
  };
  for (const auto& [call, message] : cases) {
    EXPECT_EQ(call(), braidInvalidArgument) << message;
    EXPECT_EQ(last_error(), message);
  }
  EXPECT_EQ(braidCommDestroy(nullptr), braidSuccess);
  EXPECT_EQ(braidCommAbort(nullptr), braidSuccess);
  EXPECT_EQ(braidRequestFree(nullptr), braidSuccess);
  EXPECT_EQ(braidTensorListFree(nullptr), braidSuccess);
}

// ---- data types ----------------------------------------------------------------------------

TEST(CApiDTypes, DLPackCodesMapToBraidDataTypes) {
  struct Case {
    DLDataType dl;
    braidDataType_t want;
  };
  const std::vector<Case> cases = {
      {{kDLFloat, 64, 1}, braidFloat64}, {{kDLFloat, 32, 1}, braidFloat32},
      {{kDLFloat, 16, 1}, braidFloat16}, {{kDLBfloat, 16, 1}, braidBfloat16},
      {{kDLInt, 64, 1}, braidInt64},     {{kDLInt, 32, 1}, braidInt32},
      {{kDLInt, 16, 1}, braidInt16},     {{kDLInt, 8, 1}, braidInt8},
      {{kDLUInt, 8, 1}, braidUint8},     {{6, 8, 1}, braidBool},  // DLPack 0.8's kDLBool
  };
  for (const Case& c : cases) {
    braidDataType_t got = braidFloat64;
    EXPECT_EQ(braidDataTypeFromDLPack(c.dl, &got), braidSuccess) << last_error();
    EXPECT_EQ(got, c.want) << int(c.dl.code) << "/" << int(c.dl.bits);
  }
  const std::vector<DLDataType> refused = {
      {kDLFloat, 8, 1},    {kDLUInt, 16, 1},         {kDLUInt, 32, 1},   {kDLFloat, 32, 4},
      {kDLComplex, 64, 1}, {kDLOpaqueHandle, 64, 1}, {kDLBfloat, 32, 1}, {6, 1, 1}};
  for (const DLDataType& dl : refused) {
    braidDataType_t got = braidFloat64;
    EXPECT_EQ(braidDataTypeFromDLPack(dl, &got), braidNotSupported);
    EXPECT_NE(last_error().find("braidDataTypeFromDLPack: dtype: DLPack data type {code " +
                                std::to_string(dl.code)),
              std::string::npos)
        << last_error();
    EXPECT_EQ(got, braidFloat64);  // untouched
  }
}

TEST(CApiDTypes, BraidDataTypesAndOpsFollowTheCppEnums) {
  EXPECT_EQ(braid::capi::dtype_of(braidBfloat16, "d"), DType::kBF16);
  EXPECT_EQ(braid::capi::dtype_of(braidBool, "d"), DType::kBool);
  EXPECT_EQ(braid::capi::dtype_of(braidFloat8e5m2, "d"), DType::kF8E5M2);
  EXPECT_THROW(braid::capi::dtype_of(static_cast<braidDataType_t>(12), "d"), braid::Error);
  EXPECT_THROW(braid::capi::dtype_of(static_cast<braidDataType_t>(-1), "d"), braid::Error);
  EXPECT_EQ(braid::capi::reduce_op_of(braidAvg, "op"), braid::ReduceOp::kAvg);
  EXPECT_THROW(braid::capi::reduce_op_of(static_cast<braidRedOp_t>(5), "op"), braid::Error);
}

// ---- DLPack views ---------------------------------------------------------------------------

DLTensor dl_view(void* data, int ndim, int64_t* shape, int64_t* strides, DLDataType dtype,
                 uint64_t byte_offset = 0) {
  DLTensor t{};
  t.data = data;
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = ndim;
  t.dtype = dtype;
  t.shape = shape;
  t.strides = strides;
  t.byte_offset = byte_offset;
  return t;
}

TEST(CApiDLPack, AStridedViewWithAByteOffsetRoundTrips) {
  std::vector<float> base(20);
  for (int i = 0; i < 20; ++i) base[i] = static_cast<float>(i);
  // [3, 2] with strides [1, 5] from element 2: (a, b) -> base[2 + a + 5 b]
  int64_t shape[2] = {3, 2}, strides[2] = {1, 5};
  DLTensor in = dl_view(base.data(), 2, shape, strides, {kDLFloat, 32, 1}, 2 * sizeof(float));
  Tensor t = braid::capi::tensor_from_dlpack(&in, "in");
  EXPECT_EQ(t.shape(), (braid::Shape{3, 2}));
  EXPECT_EQ(t.strides(), (braid::Strides{1, 5}));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.data_ptr(), base.data() + 2);  // zero-copy
  EXPECT_EQ(t.to_vector(), (std::vector<double>{2, 7, 3, 8, 4, 9}));

  DLManagedTensor* out = braid::capi::to_dlpack(t);
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(out->dl_tensor.data, base.data() + 2);
  EXPECT_EQ(out->dl_tensor.byte_offset, 0u);
  EXPECT_EQ(out->dl_tensor.ndim, 2);
  EXPECT_EQ(out->dl_tensor.shape[0], 3);
  EXPECT_EQ(out->dl_tensor.shape[1], 2);
  EXPECT_EQ(out->dl_tensor.strides[0], 1);
  EXPECT_EQ(out->dl_tensor.strides[1], 5);
  EXPECT_EQ(out->dl_tensor.device.device_type, kDLCPU);
  EXPECT_EQ(out->dl_tensor.dtype.code, kDLFloat);
  EXPECT_EQ(out->dl_tensor.dtype.bits, 32);
  Tensor back = braid::capi::tensor_from_dlpack(&out->dl_tensor, "out");
  EXPECT_EQ(back.to_vector(), t.to_vector());
  out->deleter(out);
}

TEST(CApiDLPack, AManagedTensorKeepsItsStorageAlive) {
  DLManagedTensor* out = nullptr;
  {
    Tensor t = Tensor::from_vector({1, 0, 1, 1}, {2, 2}, DType::kBool);
    out = braid::capi::to_dlpack(t);
  }                                         // the only other reference is gone
  EXPECT_EQ(out->dl_tensor.dtype.code, 6);  // bool goes out as DLPack 0.8's kDLBool
  EXPECT_EQ(out->dl_tensor.dtype.bits, 8);
  const auto* bytes = static_cast<const uint8_t*>(out->dl_tensor.data);
  EXPECT_EQ((std::vector<int>{bytes[0], bytes[1], bytes[2], bytes[3]}),
            (std::vector<int>{1, 0, 1, 1}));
  Tensor back = braid::capi::tensor_from_dlpack(&out->dl_tensor, "out");
  EXPECT_EQ(back.dtype(), DType::kBool);
  out->deleter(out);
}

TEST(CApiDLPack, RefusesWhatBraidCannotView) {
  float data[8] = {};
  int64_t shape[1] = {4}, neg[1] = {-1};
  auto refused = [&](DLTensor t, braid::ErrorKind kind, const std::string& needle) {
    try {
      braid::capi::tensor_from_dlpack(&t, "tensor");
      ADD_FAILURE() << "accepted; expected " << needle;
    } catch (const braid::Error& e) {
      EXPECT_EQ(e.kind(), kind) << e.message();
      EXPECT_NE(e.message().find(needle), std::string::npos) << e.message();
    }
  };
  refused(dl_view(nullptr, 1, shape, nullptr, {kDLFloat, 32, 1}),
          braid::ErrorKind::kInvalidArgument, "tensor->data is NULL for shape [4]");
  refused(dl_view(data, 1, shape, neg, {kDLFloat, 32, 1}), braid::ErrorKind::kInvalidArgument,
          "tensor->strides[0] is -1");
  refused(dl_view(data, 1, shape, nullptr, {kDLFloat, 32, 1}, 2),
          braid::ErrorKind::kInvalidArgument, "not aligned to the 4-byte elements");
  refused(dl_view(data, 1, nullptr, nullptr, {kDLFloat, 32, 1}), braid::ErrorKind::kInvalidArgument,
          "tensor->shape is NULL for ndim 1");
  refused(dl_view(data, 1, shape, nullptr, {kDLComplex, 64, 1}), braid::ErrorKind::kNotSupported,
          "code 5 (complex)");
  DLTensor opencl = dl_view(data, 1, shape, nullptr, {kDLFloat, 32, 1});
  opencl.device = DLDevice{kDLOpenCL, 0};
  refused(opencl, braid::ErrorKind::kNotSupported, "device kDLOpenCL");
  try {
    braid::capi::tensor_from_dlpack(nullptr, "tensor");
    ADD_FAILURE() << "a NULL DLTensor was accepted";
  } catch (const braid::Error& e) {
    EXPECT_EQ(e.message(), "tensor is NULL");
  }
  // An empty tensor may have no data.
  int64_t empty[1] = {0};
  DLTensor none = dl_view(nullptr, 1, empty, nullptr, {kDLFloat, 32, 1});
  EXPECT_EQ(braid::capi::tensor_from_dlpack(&none, "tensor").numel(), 0);
}

TEST(CApiDLPack, CudaTensorsNeedTheCudaRuntimeAndFp8HasNoCode) {
  float data[4] = {};
  int64_t shape[1] = {4};
  DLTensor t = dl_view(data, 1, shape, nullptr, {kDLFloat, 32, 1});
  t.device = DLDevice{kDLCUDA, 1};
  if (braid::is_runtime_built(braid::DeviceType::kCUDA)) {
    EXPECT_EQ(braid::capi::tensor_from_dlpack(&t, "t").device().str(), "cuda:1");
  } else {
    EXPECT_THROW(braid::capi::tensor_from_dlpack(&t, "t"), braid::Error);
  }
  Tensor fp8 = Tensor::zeros({2}, DType::kF8E4M3);
  try {
    braid::capi::to_dlpack(fp8);
    ADD_FAILURE() << "fp8 went out as DLPack";
  } catch (const braid::Error& e) {
    EXPECT_EQ(e.kind(), braid::ErrorKind::kNotSupported);
    EXPECT_NE(e.message().find("dtype f8e4m3 has no DLPack 0.6 code"), std::string::npos)
        << e.message();
  }
}

// ---- tensor lists and files -----------------------------------------------------------------

TEST(CApiSafetensors, BadArgumentsComeBackAsResults) {
  braidTensorList_t list = nullptr;
  EXPECT_EQ(braidSafetensorsLoad("/nonexistent/braid/file.safetensors", &list), braidIoError);
  EXPECT_EQ(list, nullptr);
  EXPECT_NE(last_error().find("braidSafetensorsLoad: "), std::string::npos);
  EXPECT_EQ(braidSafetensorsLoad(nullptr, &list), braidInvalidArgument);
  EXPECT_EQ(last_error(), "braidSafetensorsLoad: path is NULL");
  EXPECT_EQ(braidSafetensorsSave(nullptr, 0, nullptr, nullptr, 0, nullptr, nullptr),
            braidInvalidArgument);
  EXPECT_EQ(braidSafetensorsSave("/tmp/x.safetensors", 1, nullptr, nullptr, 0, nullptr, nullptr),
            braidInvalidArgument);
  EXPECT_EQ(last_error(), "braidSafetensorsSave: names is NULL");
  const char* names[1] = {"a"};
  const DLTensor* tensors[1] = {nullptr};
  EXPECT_EQ(braidSafetensorsSave("/tmp/x.safetensors", 1, names, tensors, 0, nullptr, nullptr),
            braidInvalidArgument);
  EXPECT_EQ(last_error(), "braidSafetensorsSave: tensors[0] is NULL");
  EXPECT_EQ(braidSafetensorsSaveSharded("/tmp/x", 0, nullptr, nullptr, nullptr),
            braidInvalidArgument);
  EXPECT_EQ(last_error(), "braidSafetensorsSaveSharded: max_shard_size is NULL");
  EXPECT_EQ(braidSafetensorsSaveSharded("/tmp/x", 0, nullptr, nullptr, "lots"),
            braidInvalidArgument);
}

TEST(CApiSafetensors, ListEntriesOutOfRangeAndBothOutputsNull) {
  auto* list = new braidTensorList{};
  list->tensors.emplace_back("a", Tensor::zeros({2}));
  size_t n = 0;
  EXPECT_EQ(braidTensorListSize(list, &n), braidSuccess);
  EXPECT_EQ(n, 1u);
  const char* name = nullptr;
  EXPECT_EQ(braidTensorListGet(list, 0, &name, nullptr), braidSuccess);
  EXPECT_STREQ(name, "a");
  EXPECT_EQ(braidTensorListGet(list, 1, &name, nullptr), braidOutOfRange);
  EXPECT_EQ(last_error(), "braidTensorListGet: i 1 is outside the list's 1 entries");
  EXPECT_EQ(braidTensorListGet(list, 0, nullptr, nullptr), braidInvalidArgument);
  EXPECT_EQ(braidTensorListFree(list), braidSuccess);
}

}  // namespace
