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

// The tensors of the model's quantized layers (nn::Linear4bit, nn::Linear8bitLt), which are
// not parameters or buffers, under bitsandbytes' names: "<m>.weight" (packed codes / CB),
// "<m>.weight.absmax", "<m>.weight.quant_map", "<m>.weight.nested_absmax",
// "<m>.weight.nested_quant_map" / "<m>.SCB"; `module` is the layer's path. Only defined
// tensors (a layer without a weight has none). Sizes count them, dispatch streams them.
struct QuantizedTensorRef {
  std::string name;
  std::string module;
  Tensor* tensor = nullptr;
};
std::vector<QuantizedTensorRef> quantized_tensors(nn::Module& model);
// The same for one layer at `path` (empty when it is not a quantized layer).
std::vector<QuantizedTensorRef> quantized_tensors_of(nn::Module& layer, const std::string& path);

// load_checkpoint_and_dispatch's map for a strategy ("auto", "balanced", "balanced_low_0",
// "sequential"): infer_auto_device_map over options.max_memory, and with the prefetch on and
// part of the map on disk, again with the CPU limit lowered by the largest layer.
DeviceMap infer_dispatch_map(nn::Module& model, const std::string& strategy,
                             const LoadAndDispatchOptions& options);

// name == prefix or name starts with prefix + '.'.
bool is_within(std::string_view name, std::string_view prefix);

bool is_gpu_device(const std::string& normalized);

}  // namespace braid::accel::detail
