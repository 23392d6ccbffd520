// Helpers shared by the big-model sources (big_model_*.cc); not installed.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "braid/accel/big_model.h"

namespace braid::accel::detail {

// Sizes exactly as Accelerate's compute_module_sizes builds its dict: keys are tensor names and
// their prefixes only (no module without tensors), in first-insertion order.
struct TensorSizes {
  std::vector<std::string> order;
  std::map<std::string, int64_t, std::less<>> bytes;
  int64_t at(std::string_view name) const {
    auto it = bytes.find(name);
    return it == bytes.end() ? 0 : it->second;
  }
};
TensorSizes tensor_sizes(nn::Module& model, std::optional<DType> dtype,
                         const SpecialDTypes& special_dtypes, bool buffers_only);

// The module's own parameters (torch's named_parameters(recurse=False)), children, and own
// buffers, with `prefix.` in front of the names; module is null for a tensor.
NamedModuleRefs direct_members(nn::Module& module, const std::string& prefix, bool with_buffers);

// name == prefix or name starts with prefix + '.'.
bool is_within(std::string_view name, std::string_view prefix);

bool is_gpu_device(const std::string& normalized);

}  // namespace braid::accel::detail
