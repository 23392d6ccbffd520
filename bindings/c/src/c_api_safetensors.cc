// safetensors files through the C ABI (docs/embedding.md, "Checkpoints"; the format and its
// checks are docs/files.md's): DLPack tensors in, a braidTensorList of zero-copy views out.
#include <string>

#include "braid/core/error.h"
#include "c_api_internal.h"

namespace braid::capi {
namespace {

// "names[3]". (Built by appending: GCC 12 warns falsely (-Wrestrict) on "[" + std::string.)
std::string indexed(const char* name, size_t i) {
  std::string out(name);
  out += '[';
  out += std::to_string(i);
  out += ']';
  return out;
}

// n named DLPack tensors as braid views (borrowed for the call).
NamedTensors named_tensors(size_t n, const char* const* names, const DLTensor* const* tensors) {
  NamedTensors out;
  if (n == 0) return out;
  require(names, "names");
  require(tensors, "tensors");
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    require(names[i], indexed("names", i).c_str());
    out.emplace_back(names[i], tensor_from_dlpack(tensors[i], indexed("tensors", i).c_str()));
  }
  return out;
}

StringMap metadata(size_t n, const char* const* keys, const char* const* values) {
  StringMap out;
  if (n == 0) return out;
  require(keys, "meta_keys");
  require(values, "meta_values");
  for (size_t i = 0; i < n; ++i) {
    require(keys[i], indexed("meta_keys", i).c_str());
    require(values[i], indexed("meta_values", i).c_str());
    BRAID_CHECK(out.emplace(keys[i], values[i]).second, kInvalidArgument, indexed("meta_keys", i),
                " '", keys[i], "' repeats an earlier key; expected distinct keys");
  }
  return out;
}

}  // namespace
}  // namespace braid::capi

using braid::capi::guard;
using braid::capi::require;

extern "C" {

BRAID_API braidResult_t braidSafetensorsSave(const char* path, size_t n, const char* const* names,
                                             const DLTensor* const* tensors, size_t nmeta,
                                             const char* const* meta_keys,
                                             const char* const* meta_values) {
  return guard("braidSafetensorsSave", [&] {
    require(path, "path");
    const braid::NamedTensors named = braid::capi::named_tensors(n, names, tensors);
    braid::save_safetensors(path, named, braid::capi::metadata(nmeta, meta_keys, meta_values));
  });
}

BRAID_API braidResult_t braidSafetensorsSaveSharded(const char* folder, size_t n,
                                                    const char* const* names,
                                                    const DLTensor* const* tensors,
                                                    const char* max_shard_size) {
  return guard("braidSafetensorsSaveSharded", [&] {
    require(folder, "folder");
    require(max_shard_size, "max_shard_size");
    const braid::NamedTensors named = braid::capi::named_tensors(n, names, tensors);
    braid::save_sharded(folder, named, std::string_view(max_shard_size));
  });
}

BRAID_API braidResult_t braidSafetensorsLoad(const char* path, braidTensorList_t* list) {
  return guard("braidSafetensorsLoad", [&] {
    require(list, "list");
    *list = nullptr;
    require(path, "path");
    auto loaded = std::make_unique<braidTensorList>();
    loaded->tensors = braid::load_safetensors(path);
    *list = loaded.release();
  });
}

}  // extern "C"
