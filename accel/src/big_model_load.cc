// Loading checkpoints into (meta-built) models: load_checkpoint_in_model, load_state_dict, and
// the seed's save / load for state dicts (Accelerate's utils/modeling.py and utils/other.py).
// Note [Checkpoint load order]: everything the load needs is checked from the files' headers
// first (names, shapes, devices), so a bad checkpoint or map leaves the model untouched; then
// one shard file is mapped at a time and its tensors are copied out one by one, so the process
// never holds more of the checkpoint than one tensor beyond what the model itself keeps.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "big_model_internal.h"
#include "braid/accel/big_model.h"
#include "braid/amp/precision.h"
#include "braid/comm/rank_info.h"
#include "braid/core/env_checks.h"
#include "braid/core/error.h"
#include "braid/core/file_util.h"
#include "braid/core/logging.h"
#include "braid/shard/checkpoint.h"
#include "braid/shard/fsdp.h"
#include "braid/tensor/checkpoint_names.h"

namespace braid::accel {

namespace fs = std::filesystem;

// ---- small public helpers ----------------------------------------------------------------

std::vector<std::pair<std::string, nn::Module*>> get_module_children_bottom_up(nn::Module& model) {
  // Accelerate's order: a stack seeded with the model; each popped module pushes its children
  // in order and is appended; the list is reversed at the end.
  std::vector<std::pair<std::string, nn::Module*>> stack{{"", &model}};
  std::vector<std::pair<std::string, nn::Module*>> ordered;
  while (!stack.empty()) {
    auto [name, module] = stack.back();
    stack.pop_back();
    for (auto& [child, ptr] : module->named_children()) {
      stack.emplace_back(name.empty() ? child : name + "." + child, ptr.get());
    }
    ordered.emplace_back(std::move(name), module);
  }
  std::reverse(ordered.begin(), ordered.end());
  return ordered;
}

nn::Layer& extract_model_from_parallel(shard::ShardedModel& model) {
  return model.module();
}

nn::Layer& extract_model_from_parallel(nn::Module& model) {
  auto* layer = dynamic_cast<nn::Layer*>(&model);
  BRAID_CHECK(layer != nullptr, kInvalidArgument,
              "extract_model_from_parallel: ", model.type_name(),
              " is a Module without a forward (not an nn::Layer)");
  return *layer;
}

namespace {

bool is_pickle_name(const fs::path& p) {
  const std::string ext = p.extension().string();
  return ext == ".bin" || ext == ".pt" || ext == ".pth" || ext == ".ckpt" || ext == ".pkl";
}

[[noreturn]] void refuse_pickle(const fs::path& p) {
  BRAID_FAIL(kNotSupported, "'", p.string(),
             "' looks like a pickle checkpoint (torch.save); braid reads no pickle. Convert it to "
             "safetensors (e.g. safetensors.torch.save_file(torch.load(f), 'model.safetensors'))");
}

// The safetensors "format" metadata: absent means pt (braid's own files often carry none).
void check_format(const SafetensorsFile& f) {
  auto it = f.metadata().find("format");
  if (it == f.metadata().end()) return;
  BRAID_CHECK(it->second == "pt", kInvalidArgument, "'", f.path().string(),
              "' was saved with format '", it->second,
              "'; braid needs the pt layout (tf and flax store some weights transposed)");
}

// Where a checkpoint's tensors are: safetensors shard files, or braid's sharded folder.
struct Source {
  std::vector<fs::path> files;
  fs::path braid_folder;  // non-empty: a braid sharded checkpoint
};

bool is_braid_index(const fs::path& file) {
  try {
    const auto j = nlohmann::json::parse(read_file(file));
    return j.is_object() && j.contains("format") && j["format"] == "braid-sharded";
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

Source from_index_file(const fs::path& index) {
  Source out;
  if (is_braid_index(index)) {
    out.braid_folder = index.parent_path();
    return out;
  }
  const SafetensorsIndex parsed = parse_safetensors_index(read_file(index), index.string());
  std::set<std::string> names;
  for (const auto& [tensor, file] : parsed.weight_map) names.insert(file);
  for (const std::string& f : names) {
    const fs::path p = index.parent_path() / f;
    if (is_pickle_name(p)) refuse_pickle(p);
    out.files.push_back(p);
  }
  return out;
}

Source resolve(const fs::path& checkpoint) {
  if (fs::is_regular_file(checkpoint)) {
    if (checkpoint.extension() == ".json") return from_index_file(checkpoint);
    if (is_pickle_name(checkpoint)) refuse_pickle(checkpoint);
    return Source{{checkpoint}, {}};
  }
  BRAID_CHECK(fs::is_directory(checkpoint), kIo, "checkpoint '", checkpoint.string(),
              "' does not exist (expected a .safetensors file, an index .json or a folder)");
  if (fs::is_regular_file(checkpoint / kSafeWeightsName)) {
    return Source{{checkpoint / kSafeWeightsName}, {}};
  }
  std::vector<fs::path> indexes;
  for (const auto& entry : fs::directory_iterator(checkpoint)) {
    if (entry.path().filename().string().ends_with(".index.json")) indexes.push_back(entry.path());
  }
  std::sort(indexes.begin(), indexes.end());
  BRAID_CHECK(indexes.size() <= 1, kInvalidArgument, "checkpoint folder '", checkpoint.string(),
              "' holds ", indexes.size(), " *.index.json files (", indexes[0].filename().string(),
              ", ", indexes[1].filename().string(), ", ...); delete the irrelevant ones");
  if (indexes.size() == 1) return from_index_file(indexes[0]);
  if (fs::is_regular_file(checkpoint / "index.json"))
    return from_index_file(checkpoint / "index.json");
  if (fs::is_regular_file(checkpoint / kWeightsName)) refuse_pickle(checkpoint / kWeightsName);
  BRAID_FAIL(kIo, "checkpoint folder '", checkpoint.string(), "' holds no ", kSafeWeightsName,
             ", no *.index.json and no braid index.json");
}

struct Entry {
  DType dtype;
  Shape shape;
};

// Every tensor's name, dtype and shape, from headers only.
std::map<std::string, Entry> read_headers(const Source& src) {
  std::map<std::string, Entry> out;
  if (!src.braid_folder.empty()) {
    shard::ShardedCheckpoint ckpt(src.braid_folder);
    for (const std::string& n : ckpt.names()) out[n] = Entry{ckpt.dtype(n), ckpt.shape(n)};
    return out;
  }
  for (const fs::path& file : src.files) {
    const SafetensorsFile f = SafetensorsFile::open(file);
    check_format(f);
    for (const SafetensorsEntry& e : f.entries()) {
      BRAID_CHECK(out.emplace(e.name, Entry{e.dtype, e.shape}).second, kCorruptData, "tensor '",
                  e.name, "' appears in more than one file of the checkpoint (again in '",
                  file.string(), "')");
    }
  }
  return out;
}

// Calls fn(name, tensor, owned) for every tensor, one shard file mapped at a time; owned: the
// tensor is a fresh copy (braid's checkpoint reads), not a view of a file's mapping.
template <typename Fn>
void for_each_tensor(const Source& src, Fn fn) {
  if (!src.braid_folder.empty()) {
    shard::ShardedCheckpoint ckpt(src.braid_folder);
    for (const std::string& n : ckpt.names()) fn(n, ckpt.read(n), true);
    return;
  }
  for (const fs::path& file : src.files) {
    const SafetensorsFile f = SafetensorsFile::open(file);
    for (const std::string& n : f.names()) fn(n, f.get(n), false);
  }  // the mapping goes with f (tensors copied out do not keep it)
}

std::string join(const std::vector<std::string>& names) {
  std::ostringstream out;
  for (size_t i = 0; i < names.size(); ++i) out << (i ? ", " : "") << names[i];
  return out.str();
}

void check_device_usable(const std::string& device) {
  if (!detail::is_gpu_device(device)) return;
  const Device d = Device::parse(device);
  BRAID_CHECK(d.index < device_count(d.type), kNotSupported, "the device map sends tensors to ",
              device, ", but this process sees ", device_count(d.type), " ",
              device_type_name(d.type),
              " devices (a map may plan for another machine; loading needs the device)");
}

// A temporary folder removed when the scope ends (offload_state_dict's staging area).
class TempFolder {
 public:
  TempFolder() {
    std::string pattern = (fs::temp_directory_path() / "braid-offload-XXXXXX").string();
    BRAID_CHECK(::mkdtemp(pattern.data()) != nullptr, kIo, "cannot create a temporary folder '",
                pattern, "'");
    path_ = pattern;
  }
  ~TempFolder() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempFolder(const TempFolder&) = delete;
  TempFolder& operator=(const TempFolder&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

}  // namespace

// ---- load_checkpoint_in_model ------------------------------------------------------------

LoadCheckpointResult load_checkpoint_in_model(nn::Module& model, const fs::path& checkpoint,
                                              const LoadCheckpointOptions& options) {
  // The map, normalized, and its devices checked.
  DeviceMap map;
  for (const auto& [name, device] : options.device_map)
    map.emplace_back(name, normalize_device(device));
  const bool uses_disk =
      std::any_of(map.begin(), map.end(), [](const auto& e) { return e.second == "disk"; });
  BRAID_CHECK(!uses_disk || !options.offload_folder.empty(), kInvalidArgument,
              "the device map sends modules to 'disk': pass an offload_folder");
  for (const auto& [name, device] : map) check_device_usable(device);

  const auto tied = nn::find_tied_parameters(model);
  if (!map.empty()) {
    for (const auto& group : tied) {
      std::set<std::string> devices;
      for (const std::string& n : group) {
        try {
          devices.insert(device_for(map, n));
        } catch (const Error&) {
        }
      }
      if (devices.size() > 1) {
        BRAID_LOG(kWarning) << "tied parameters [" << join(group)
                            << "] are mapped to different devices; they share one tensor, which "
                               "ends where the last of their names loaded puts it";
      }
    }
  }

  // Model and checkpoint keys, checked before anything is written.
  const Source src = resolve(checkpoint);
  const std::map<std::string, Entry> ckpt = read_headers(src);
  std::map<std::string, Tensor> model_tensors;
  for (auto& [name, t] : model.state_dict()) model_tensors.emplace(name, t);
  std::set<std::string> buffer_names;
  for (auto& [name, t] : model.named_buffers()) buffer_names.insert(name);

  LoadCheckpointResult result;
  for (const auto& [name, e] : ckpt) {
    auto it = model_tensors.find(name);
    if (it == model_tensors.end()) {
      result.unexpected_keys.push_back(name);
      continue;
    }
    BRAID_CHECK(it->second.shape() == e.shape, kInvalidArgument, "checkpoint '",
                checkpoint.string(), "': tensor '", name, "' has shape ", shape_str(e.shape),
                " but the model's has shape ", shape_str(it->second.shape()));
    if (!map.empty()) device_for(map, name);  // throws naming a tensor without a device
  }
  for (const auto& entry : model_tensors) {
    const auto& name = entry.first;  // clang 15 cannot capture a structured binding
    if (ckpt.count(name)) continue;
    const auto group = std::find_if(tied.begin(), tied.end(), [&](const auto& g) {
      return std::find(g.begin(), g.end(), name) != g.end();
    });
    const bool tied_present =
        group != tied.end() && std::any_of(group->begin(), group->end(),
                                           [&](const std::string& n) { return ckpt.count(n) > 0; });
    if (!tied_present) result.missing_keys.push_back(name);
  }
  BRAID_CHECK(!options.strict || (result.missing_keys.empty() && result.unexpected_keys.empty()),
              kInvalidArgument, "load_checkpoint_in_model (strict) '", checkpoint.string(),
              "': missing keys [", join(result.missing_keys), "], unexpected keys [",
              join(result.unexpected_keys), "]");
  if (!result.unexpected_keys.empty()) {
    BRAID_LOG(kWarning) << "some weights of the checkpoint at " << checkpoint.string()
                        << " were not used by " << model.type_name() << ": ["
                        << join(result.unexpected_keys) << "]";
  }
  if (uses_disk) fs::create_directories(options.offload_folder);

  std::optional<TempFolder> staging;  // offload_state_dict: the CPU tensors wait here
  OffloadIndex staged;
  // `dtype` with keep_in_fp32_modules as a precision policy: its param_dtype_for keeps a module
  // f32 under a narrower dtype (the one rule sharding and the Accelerator use).
  amp::PrecisionPolicy policy;
  if (options.dtype) policy.param_dtype = *options.dtype;
  policy.keep_in_fp32_modules = options.keep_in_fp32_modules;
  for_each_tensor(src, [&](const std::string& name, const Tensor& value, bool owned_already) {
    auto it = model_tensors.find(name);
    if (it == model_tensors.end()) return;
    const Tensor& current = it->second;
    const bool is_buffer = buffer_names.count(name) > 0;
    std::string device;
    if (map.empty()) {
      device = current.device().is_meta() ? "cpu" : current.device().str();
    } else {
      device = device_for(map, name);
    }
    // The dtype the tensor will have in the model.
    DType target = current.dtype();
    if (options.dtype && is_floating(value.dtype())) {
      target = policy.param_dtype_for(name);
    } else if (options.dtype) {
      target = value.dtype();  // integer tensors keep the checkpoint's dtype, as set_module does
    }
    // A copy the model owns: never a view of the file's mapping.
    Tensor owned = value.dtype() != target ? value.to(target)
                   : owned_already         ? value
                                           : value.clone();

    if (device == "disk" && (options.offload_buffers || !is_buffer)) {
      offload_weight(owned, name, options.offload_folder, &result.offloaded);
      set_module_tensor_to_device(model, name, kMeta, owned, target);
    } else if (device == "cpu" && options.offload_state_dict) {
      if (!staging) staging.emplace();
      offload_weight(owned, name, staging->path(), &staged);
      set_module_tensor_to_device(model, name, kMeta, owned, target);
    } else {
      const Device where = device == "disk" ? kCPU : Device::parse(device);
      set_module_tensor_to_device(model, name, where, owned, target);
    }
  });

  save_offload_index(result.offloaded, options.offload_folder);
  if (staging) load_offloaded_weights(model, staged, staging->path());
  std::sort(result.missing_keys.begin(), result.missing_keys.end());
  std::sort(result.unexpected_keys.begin(), result.unexpected_keys.end());
  return result;
}

// ---- load_state_dict, save, load ---------------------------------------------------------

NamedTensors load_state_dict(const fs::path& checkpoint_file, const DeviceMap& device_map) {
  if (is_pickle_name(checkpoint_file)) refuse_pickle(checkpoint_file);
  const SafetensorsFile f = SafetensorsFile::open(checkpoint_file);
  check_format(f);
  if (device_map.empty()) return f.load_all();
  DeviceMap map;
  for (const auto& [name, device] : device_map) map.emplace_back(name, normalize_device(device));
  NamedTensors out;
  for (const std::string& name : f.names()) {
    std::string device = "cpu";
    try {
      device = device_for(map, name);
    } catch (const Error&) {
      // Names no entry covers are loaded on the CPU, as Accelerate does.
    }
    Tensor t = f.get(name);
    if (device != "cpu" && device != "disk") t = t.to(Device::parse(device));
    out.emplace_back(name, std::move(t));
  }
  return out;
}

bool save(const NamedTensors& state_dict, const fs::path& path, const SaveOptions& options) {
  const RankInfo me = detect_rank_info();
  const bool writer = options.save_on_each_node ? me.local_rank == 0 : me.rank == 0;
  if (writer) save_safetensors(path, state_dict, {{"format", "pt"}});
  return writer;
}

NamedTensors load(const fs::path& path, std::optional<Device> map_location) {
  NamedTensors out = load_safetensors(path);
  if (map_location) {
    for (auto& [name, t] : out) t = t.to(*map_location);
  }
  return out;
}

}  // namespace braid::accel
