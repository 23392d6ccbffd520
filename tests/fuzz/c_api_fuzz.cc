// libFuzzer target: the C ABI's functions that take bytes or text from the caller
// (bindings/c, braid.h). The first input byte picks the function, the rest is its input:
//   0  braidCommInitRank's braidUniqueId (128 bytes, zero-padded): parsed, then refused
//      before any connection by a config with a negative timeout, so no socket is opened
//   1  braidSafetensorsLoad of a file holding the rest: every tensor is fetched as DLPack
//   2  braidSafetensorsSaveSharded's max_shard_size text, with no tensors
//   3  braidDataTypeFromDLPack of a DLDataType
// Every call must return a result code (no exception crosses the ABI), and each failure one of
// the codes the header documents for it, with a message from braidGetLastError.
#include <braid.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>

#include "fuzz_util.h"

namespace {

void expect(braidResult_t got, std::initializer_list<braidResult_t> allowed, const char* call) {
  if (got == braidSuccess) return;
  if (std::find(allowed.begin(), allowed.end(), got) == allowed.end()) {
    braid::fuzz::fail(std::string(call) + " returned " + braidGetErrorString(got),
                      braidGetLastError());
  }
  if (*braidGetLastError() == '\0') braid::fuzz::fail(call, "failed without a message");
}

void unique_id(const uint8_t* data, size_t size) {
  braidUniqueId id;
  std::memset(id.internal, 0, sizeof(id.internal));
  std::memcpy(id.internal, data, std::min(size, sizeof(id.internal)));
  braidConfig_t config = BRAID_CONFIG_INITIALIZER;
  config.timeout_ms = -1;  // refused after the id is parsed: nothing connects
  braidComm_t comm = nullptr;
  const braidResult_t r = braidCommInitRank(&comm, 1, id, 0, &config);
  braid::fuzz::check(r == braidInvalidArgument && comm == nullptr,
                     "a unique id or the config is refused");
}

void load(const uint8_t* data, size_t size) {
  static const std::string path = (braid::fuzz::temp_dir() / "c_api.safetensors").string();
  braid::fuzz::write_file(path, {data, size});
  braidTensorList_t list = nullptr;
  const braidResult_t r = braidSafetensorsLoad(path.c_str(), &list);
  expect(r, {braidCorruptData, braidNotSupported}, "braidSafetensorsLoad");
  if (r != braidSuccess) return;
  size_t n = 0;
  braid::fuzz::check(braidTensorListSize(list, &n) == braidSuccess, "braidTensorListSize");
  for (size_t i = 0; i < n; ++i) {
    const char* name = nullptr;
    DLManagedTensor* t = nullptr;
    braid::fuzz::check(braidTensorListGet(list, i, &name, &t) == braidSuccess && name && t,
                       "braidTensorListGet of an entry that exists");
    t->deleter(t);
  }
  const char* name = nullptr;
  DLManagedTensor* t = nullptr;
  expect(braidTensorListGet(list, n, &name, &t), {braidOutOfRange}, "braidTensorListGet");
  braidTensorListFree(list);
}

void max_shard_size(const uint8_t* data, size_t size) {
  static const std::string folder = (braid::fuzz::temp_dir() / "c_api_sharded").string();
  const std::string text(reinterpret_cast<const char*>(data), size);  // up to the first NUL
  expect(braidSafetensorsSaveSharded(folder.c_str(), 0, nullptr, nullptr, text.c_str()),
         {braidInvalidArgument}, "braidSafetensorsSaveSharded");
}

void dlpack_dtype(const uint8_t* data, size_t size) {
  uint8_t b[4] = {};
  std::memcpy(b, data, std::min(size, sizeof(b)));
  const DLDataType dt{b[0], b[1], static_cast<uint16_t>(b[2] | b[3] << 8)};
  braidDataType_t out;
  expect(braidDataTypeFromDLPack(dt, &out), {braidNotSupported}, "braidDataTypeFromDLPack");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  switch (data[0] % 4) {
    case 0:
      unique_id(data + 1, size - 1);
      break;
    case 1:
      load(data + 1, size - 1);
      break;
    case 2:
      max_shard_size(data + 1, size - 1);
      break;
    case 3:
      dlpack_dtype(data + 1, size - 1);
      break;
  }
  return 0;
}
