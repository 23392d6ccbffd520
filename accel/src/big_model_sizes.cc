// Module sizes and memory limits: compute_module_sizes, get_max_layer_size,
// calculate_maximum_sizes, get_max_memory, get_balanced_memory (Accelerate's utils/modeling.py).
#include <algorithm>
#include <charconv>
#include <fstream>
#include <limits>
#include <set>

#include "big_model_internal.h"
#include "braid/accel/big_model.h"
#include "braid/core/device_runtime.h"
#include "braid/core/env_checks.h"
#include "braid/core/error.h"
#include "braid/core/logging.h"

namespace braid::accel {
namespace detail {

bool is_within(std::string_view name, std::string_view prefix) {
  if (prefix.empty()) return true;
  return name.starts_with(prefix) && (name.size() == prefix.size() || name[prefix.size()] == '.');
}

bool is_gpu_device(const std::string& normalized) {
  return normalized != "cpu" && normalized != "disk" && normalized != "meta";
}

namespace {
std::string join_name(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// What a tensor will take once loaded (Accelerate's rule; bool is one byte in braid).
int64_t tensor_bytes(const std::string& name, const Tensor& t, std::optional<DType> dtype,
                     const SpecialDTypes& special) {
  if (auto it = special.find(name); it != special.end()) {
    return t.numel() * static_cast<int64_t>(dtype_size(it->second));
  }
  const auto own = static_cast<int64_t>(dtype_size(t.dtype()));
  if (!dtype || !is_floating(t.dtype())) return t.numel() * own;
  return t.numel() * std::min(own, static_cast<int64_t>(dtype_size(*dtype)));
}

void add_sizes(TensorSizes& out, const std::string& name, int64_t bytes) {
  const auto add = [&](const std::string& key) {
    auto [it, fresh] = out.bytes.try_emplace(key, 0);
    if (fresh) out.order.push_back(key);
    it->second += bytes;
  };
  add("");
  for (size_t dot = name.find('.'); dot != std::string::npos; dot = name.find('.', dot + 1)) {
    add(name.substr(0, dot));
  }
  add(name);
}
}  // namespace

TensorSizes tensor_sizes(nn::Module& model, std::optional<DType> dtype,
                         const SpecialDTypes& special_dtypes, bool buffers_only) {
  TensorSizes out;
  if (!buffers_only) {
    for (auto& [name, p] : model.named_parameters(/*remove_duplicate=*/true)) {
      add_sizes(out, name, tensor_bytes(name, p.data(), dtype, special_dtypes));
    }
  }
  for (auto& [name, t] : model.named_buffers()) {
    if (t.defined()) add_sizes(out, name, tensor_bytes(name, t, dtype, special_dtypes));
  }
  if (!buffers_only) {
    // Quantized weights count what they hold (meta ones too: their shapes say what a load
    // will bring); `dtype` does not apply to them.
    for (const QuantizedTensorRef& q : quantized_tensors(model)) {
      add_sizes(out, q.name,
                q.tensor->numel() * static_cast<int64_t>(dtype_size(q.tensor->dtype())));
    }
  }
  return out;
}

NamedModuleRefs direct_members(nn::Module& module, const std::string& prefix, bool with_buffers) {
  NamedModuleRefs out;
  // Own members are the names without a dot (a registered name never contains one).
  for (auto& [name, p] : module.named_parameters(/*remove_duplicate=*/true)) {
    if (name.find('.') == std::string::npos) out.emplace_back(join_name(prefix, name), nullptr);
  }
  for (auto& [name, child] : module.named_children()) {
    out.emplace_back(join_name(prefix, name), child.get());
  }
  if (with_buffers) {
    for (auto& [name, t] : module.named_buffers()) {
      if (name.find('.') == std::string::npos) out.emplace_back(join_name(prefix, name), nullptr);
    }
  }
  return out;
}

}  // namespace detail

// ---- sizes ---------------------------------------------------------------------------------

ModuleSizes compute_module_sizes(nn::Module& model, std::optional<DType> dtype,
                                 const SpecialDTypes& special_dtypes, bool buffers_only) {
  const detail::TensorSizes sizes =
      detail::tensor_sizes(model, dtype, special_dtypes, buffers_only);
  ModuleSizes out(sizes.bytes.begin(), sizes.bytes.end());
  for (auto& [path, module] : model.named_modules()) out.try_emplace(path, 0);
  return out;
}

LayerSize get_max_layer_size(const NamedModuleRefs& modules, const ModuleSizes& module_sizes,
                             const std::vector<std::string>& no_split_module_classes) {
  LayerSize best;
  std::vector<std::pair<std::string, nn::Module*>> todo(modules.rbegin(), modules.rend());
  while (!todo.empty()) {  // a stack, back = next: depth first in the given order
    auto [name, module] = std::move(todo.back());
    todo.pop_back();
    const auto children = module
                              ? module->named_children()
                              : std::vector<std::pair<std::string, std::shared_ptr<nn::Module>>>{};
    const bool no_split =
        module && std::find(no_split_module_classes.begin(), no_split_module_classes.end(),
                            module->type_name()) != no_split_module_classes.end();
    if (children.empty() || no_split) {
      auto it = module_sizes.find(name);
      const int64_t size = it == module_sizes.end() ? 0 : it->second;
      if (size > best.size) {
        best.size = size;
        best.names = {name};
      } else if (size == best.size) {
        best.names.push_back(name);
      }
      continue;
    }
    for (auto c = children.rbegin(); c != children.rend(); ++c) {
      todo.emplace_back(name + "." + c->first, c->second.get());
    }
  }
  return best;
}

MaximumSizes calculate_maximum_sizes(nn::Module& model,
                                     const std::vector<std::string>& no_split_module_classes) {
  const ModuleSizes sizes = compute_module_sizes(model);
  MaximumSizes out;
  out.total = sizes.at("");
  out.largest_layer = get_max_layer_size(detail::direct_members(model, "", /*with_buffers=*/true),
                                         sizes, no_split_module_classes);
  return out;
}

// ---- memory limits -------------------------------------------------------------------------

int64_t MemoryLimit::checked(long double bytes) {
  BRAID_CHECK(bytes >= 0 && bytes <= static_cast<long double>(std::numeric_limits<int64_t>::max()),
              kInvalidArgument, "memory limit ", static_cast<double>(bytes),
              " bytes: expected a non-negative byte count");
  return static_cast<int64_t>(bytes);
}

MemoryLimit::MemoryLimit(const char* text) : MemoryLimit(std::string_view(text ? text : "")) {}

MemoryLimit::MemoryLimit(std::string_view text)
    : bytes_(checked(static_cast<long double>(parse_size(text)))) {}

std::string normalize_device(std::string_view device) {
  if (device == "cpu" || device == "disk" || device == "meta") return std::string(device);
  BRAID_CHECK(!device.empty(), kInvalidArgument,
              "device '': expected cpu, disk, meta, cuda:N, hip:N, xpu:N or an integer");
  if (std::all_of(device.begin(), device.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    int index = -1;
    const auto [end, ec] = std::from_chars(device.data(), device.data() + device.size(), index);
    BRAID_CHECK(ec == std::errc() && end == device.data() + device.size() && index < 32768,
                kInvalidArgument, "device '", device, "': the index is too large");
    return Device(DeviceType::kCUDA, index).str();
  }
  try {
    return Device::parse(device).str();
  } catch (const Error&) {
    BRAID_FAIL(kInvalidArgument, "device '", device,
               "' is not known; expected cpu, disk, meta, cuda[:N], hip[:N], xpu[:N] or an integer "
               "(the N-th cuda device)");
  }
}

namespace {

// MemAvailable from /proc/meminfo (psutil.virtual_memory().available); 0 when unreadable.
int64_t cpu_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t value = 0;
  std::string unit;
  while (in >> key >> value) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return value * 1024;
  }
  return 0;
}

// GPUs sort by (type, index), before cpu and disk.
bool device_order(const std::string& a, const std::string& b) {
  const auto rank = [](const std::string& d) { return d == "cpu" ? 1 : d == "disk" ? 2 : 0; };
  if (rank(a) != rank(b)) return rank(a) < rank(b);
  if (rank(a) != 0) return false;
  const Device da = Device::parse(a), db = Device::parse(b);
  if (da.type != db.type) return da.type < db.type;
  return da.index < db.index;
}

}  // namespace

std::vector<DeviceBudget> get_max_memory(const std::optional<MaxMemory>& max_memory) {
  std::vector<DeviceBudget> out;
  if (!max_memory) {
    for (DeviceType type : {DeviceType::kCUDA, DeviceType::kHIP, DeviceType::kXPU}) {
      const int n = device_count(type);
      for (int i = 0; i < n; ++i) {
        try {
          out.push_back({Device(type, i).str(),
                         static_cast<int64_t>(device_runtime(type).properties(i).total_memory)});
        } catch (const Error& e) {
          BRAID_LOG(kInfo) << "device " << Device(type, i).str()
                           << " seems unavailable, proceeding with the next ones: " << e.message();
        }
      }
    }
    out.push_back({"cpu", cpu_available_bytes()});
    return out;
  }
  for (const auto& [key, limit] : *max_memory) {
    std::string device;
    try {
      device = normalize_device(key);
    } catch (const Error&) {
      device = "?";
    }
    BRAID_CHECK(device != "?" && device != "meta", kInvalidArgument, "max_memory: device '", key,
                "' is not recognized; available devices are integers and cuda:N / hip:N / xpu:N "
                "(GPUs), 'cpu' and 'disk'");
    for (const DeviceBudget& b : out) {
      BRAID_CHECK(b.device != device, kInvalidArgument, "max_memory: device '", key,
                  "' is given twice (as ", b.device, ")");
    }
    if (detail::is_gpu_device(device)) {
      const Device d = Device::parse(device);
      if (d.index >= device_count(d.type)) {
        // A plan for another machine is allowed; loading onto the device will need it.
        BRAID_LOG(kInfo) << "max_memory names " << device << ", which this process does not see ("
                         << device_count(d.type) << " " << device_type_name(d.type) << " devices)";
      }
    }
    out.push_back({device, limit.bytes()});
  }
  if (std::none_of(out.begin(), out.end(),
                   [](const DeviceBudget& b) { return b.device == "cpu"; })) {
    out.push_back({"cpu", static_cast<int64_t>(static_cast<double>(cpu_available_bytes()) * 0.8)});
    BRAID_LOG(kInfo) << "max_memory has no 'cpu': using 80% of the available CPU memory";
  }
  std::stable_sort(out.begin(), out.end(), [](const DeviceBudget& a, const DeviceBudget& b) {
    return device_order(a.device, b.device);
  });
  return out;
}

namespace {

// Module names of Accelerate's key set whose children (in that key set) are all gone: the
// "leaves" get_module_leaves returns.
std::vector<std::string> module_leaves(const std::vector<std::string>& keys) {
  std::map<std::string, int> children;
  for (const std::string& k : keys) {
    if (k.empty() || k.find('.') == std::string::npos) continue;
    ++children[k.substr(0, k.rfind('.'))];
  }
  std::vector<std::string> out;
  for (const std::string& k : keys) {
    if (!k.empty() && children.find(k) == children.end()) out.push_back(k);
  }
  return out;
}

}  // namespace

MaxMemory get_balanced_memory(nn::Module& model, const std::optional<MaxMemory>& max_memory,
                              const BalancedMemoryOptions& options) {
  const bool user_not_set = !max_memory.has_value();
  std::vector<DeviceBudget> budget = get_max_memory(max_memory);
  const auto to_map = [&] {
    MaxMemory out;
    for (const DeviceBudget& b : budget) out.emplace(b.device, b.bytes);
    return out;
  };
  std::vector<size_t> gpus;  // indices into budget, in device order, with memory > 0
  for (size_t i = 0; i < budget.size(); ++i) {
    if (detail::is_gpu_device(budget[i].device) && budget[i].bytes > 0) gpus.push_back(i);
  }
  const auto num_devices = static_cast<int64_t>(gpus.size());
  if (num_devices == 0) return to_map();
  bool low_zero = options.low_zero;
  if (num_devices == 1) {
    low_zero = false;  // one GPU: nothing to balance, but keep a margin when we chose the limit
    if (user_not_set) {
      budget[gpus[0]].bytes =
          static_cast<int64_t>(static_cast<double>(budget[gpus[0]].bytes) * 0.9);
    }
  }

  const detail::TensorSizes sizes =
      detail::tensor_sizes(model, options.dtype, options.special_dtypes, false);
  const int64_t total = sizes.at("");
  int64_t per_gpu = total / (low_zero ? num_devices - 1 : num_devices);

  // The largest no-split block: the first module of each listed class, in size-key order.
  int64_t buffer = 0;
  if (!options.no_split_module_classes.empty()) {
    std::map<std::string, nn::Module*> by_path;
    for (auto& [path, m] : model.named_modules()) by_path.emplace(path, m);
    std::map<std::string, int64_t> first_of_class;
    const std::set<std::string> wanted(options.no_split_module_classes.begin(),
                                       options.no_split_module_classes.end());
    for (const std::string& name : sizes.order) {
      auto it = by_path.find(name);
      if (name.empty() || it == by_path.end()) continue;
      const std::string& cls = it->second->type_name();
      if (wanted.count(cls)) first_of_class.try_emplace(cls, sizes.at(name));
      if (first_of_class.size() == wanted.size()) break;
    }
    for (auto& [cls, size] : first_of_class) buffer = std::max(buffer, size);
  }
  // The mean size of the last-level modules: leaves of the key set once tensors are removed.
  const std::vector<std::string> tensor_leaves = module_leaves(sizes.order);
  std::vector<std::string> module_keys;
  for (const std::string& k : sizes.order) {
    if (std::find(tensor_leaves.begin(), tensor_leaves.end(), k) == tensor_leaves.end()) {
      module_keys.push_back(k);
    }
  }
  const std::vector<std::string> leaves = module_leaves(module_keys);
  int64_t leaf_sum = 0;
  for (const std::string& l : leaves) leaf_sum += sizes.at(l);
  const auto mean_leaves = static_cast<int64_t>(
      static_cast<double>(leaf_sum) / static_cast<double>(std::max<size_t>(leaves.size(), 1)));
  buffer = static_cast<int64_t>(1.25 * static_cast<double>(std::max(buffer, mean_leaves)));
  per_gpu += buffer;

  // Every GPU but the last gets per_gpu at most; the last keeps its limit in case the buffer
  // is not enough.
  const int64_t first_limit = budget[gpus[0]].bytes;
  for (size_t k = 0; k + 1 < gpus.size(); ++k) {
    int64_t& mem = budget[gpus[k]].bytes;
    mem = std::min(low_zero && k == 0 ? first_limit : per_gpu, mem);
  }
  if (low_zero) {
    int64_t others = 0;
    for (size_t k = 1; k < gpus.size(); ++k) others += budget[gpus[k]].bytes;
    budget[gpus[0]].bytes = std::min(std::max<int64_t>(0, total - others), budget[gpus[0]].bytes);
  }
  return to_map();
}

}  // namespace braid::accel
