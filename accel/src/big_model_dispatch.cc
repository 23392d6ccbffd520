// dispatch_model and load_checkpoint_and_dispatch (Accelerate's big_modeling.py): the plan —
// which tensors stay on the CPU, which are streamed from disk by which layer, and where each
// one's values are — checked whole before the model is touched. The run-time side is
// big_model_dispatch_hooks.cc.
#include <algorithm>
#include <map>
#include <set>

#include "big_model_dispatch_internal.h"
#include "big_model_internal.h"
#include "braid/core/env_checks.h"
#include "braid/core/error.h"
#include "braid/core/file_util.h"
#include "braid/tensor/checkpoint_names.h"

namespace braid::accel {

namespace fs = std::filesystem;

// ---- the handle --------------------------------------------------------------------------

DispatchedModel::DispatchedModel() : impl_(std::make_shared<Impl>()) {}
DispatchedModel::DispatchedModel(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
DispatchedModel::~DispatchedModel() {
  if (impl_) impl_->remove();
}
DispatchedModel::DispatchedModel(DispatchedModel&&) noexcept = default;
DispatchedModel& DispatchedModel::operator=(DispatchedModel&& other) noexcept {
  if (this != &other) {
    if (impl_) impl_->remove();
    impl_ = std::move(other.impl_);
  }
  return *this;
}

const DeviceMap& DispatchedModel::device_map() const {
  static const DeviceMap kEmpty;
  return impl_ ? impl_->device_map : kEmpty;
}

std::vector<std::string> DispatchedModel::offloaded_modules() const {
  std::vector<std::string> out;
  if (impl_) {
    for (const DispatchUnit& u : impl_->units) out.push_back(u.name);
  }
  return out;
}

std::vector<std::string> DispatchedModel::execution_order() const {
  return impl_ ? impl_->order_names() : std::vector<std::string>{};
}

DispatchStats DispatchedModel::stats() const {
  return impl_ ? impl_->stats_copy() : DispatchStats{};
}

int64_t DispatchedModel::loaded_bytes() const {
  return impl_ ? impl_->loaded_bytes() : 0;
}

void DispatchedModel::remove_hooks() {
  if (impl_) impl_->remove();
}

namespace {

using detail::is_within;

std::string parent_of(const std::string& name) {
  const size_t dot = name.rfind('.');
  return dot == std::string::npos ? "" : name.substr(0, dot);
}

// The map's devices: "cpu" and "disk" run; anything else is refused, naming the entry.
DeviceMap checked_map(nn::Module& model, const DeviceMap& device_map) {
  BRAID_CHECK(!device_map.empty(), kInvalidArgument,
              "dispatch_model: the device map is empty (expected entries such as {\"\", "
              "\"cpu\"} or infer_auto_device_map's result)");
  DeviceMap map;
  for (const auto& [name, device] : device_map) {
    const std::string d = normalize_device(device);
    BRAID_CHECK(d != "meta", kInvalidArgument, "dispatch_model: '", name,
                "' is mapped to 'meta': a module on meta has no values to run with (map it to "
                "'cpu' or 'disk')");
    if (detail::is_gpu_device(d)) {
      const Device dev = Device::parse(d);
      BRAID_FAIL(kNotSupported, "dispatch_model: '", name, "' is mapped to ", d,
                 "; braid's dispatch runs modules on the CPU only (its hooks see a layer, not "
                 "its input, so they cannot move activations between devices), and this "
                 "process sees ",
                 device_count(dev.type), " ", device_type_name(dev.type),
                 " devices. Map it to 'cpu' or 'disk'");
    }
    map.emplace_back(name, d);
  }
  check_device_map(model, map);
  return map;
}

// The Layer whose forward brings tensor `name` in (Note [Dispatch units]).
// `owner` is the module holding the tensor (a quantized layer's "<m>.weight.absmax" is <m>'s).
std::pair<std::string, nn::Layer*> unit_layer(nn::Module& model, const DeviceMap& map,
                                              const std::string& name, const std::string& owner,
                                              const std::vector<std::string>& preload) {
  std::string entry;
  for (const auto& e : map) {
    if (is_within(name, e.first) && (e.first.size() >= entry.size())) entry = e.first;
  }
  if (entry.size() > owner.size()) entry = owner;  // an entry naming the tensor itself
  // Down from the entry along the tensor's path: a preloaded class takes everything below it.
  for (std::string path = entry;;) {
    nn::Module& m = model.get_submodule(path);
    auto* layer = dynamic_cast<nn::Layer*>(&m);
    if (layer && std::find(preload.begin(), preload.end(), m.type_name()) != preload.end()) {
      return {path, layer};
    }
    if (path == owner) break;
    const std::string rest = owner.substr(path.empty() ? 0 : path.size() + 1);
    const std::string next = rest.substr(0, rest.find('.'));
    path = path.empty() ? next : path + "." + next;
  }
  // Else the layer holding it, or its nearest Layer ancestor.
  for (std::string path = owner;; path = parent_of(path)) {
    if (auto* layer = dynamic_cast<nn::Layer*>(&model.get_submodule(path))) return {path, layer};
    if (path.empty()) break;
  }
  BRAID_FAIL(kInvalidArgument, "dispatch_model: '", name,
             "' is mapped to disk, but no nn::Layer holds it (hooks run around a Layer's "
             "forward; ",
             model.type_name(), " is a plain Module)");
}

// DispatchOptions::checkpoint: every safetensors file of it, open (memory-mapped).
std::vector<std::unique_ptr<SafetensorsFile>> open_checkpoint(const fs::path& checkpoint) {
  std::vector<fs::path> files;
  auto from_index = [&](const fs::path& index) {
    std::set<std::string> names;
    for (const auto& [tensor, file] :
         parse_safetensors_index(read_file(index), index.string()).weight_map) {
      names.insert(file);
    }
    for (const std::string& f : names) files.push_back(index.parent_path() / f);
  };
  if (fs::is_regular_file(checkpoint)) {
    if (checkpoint.extension() == ".json") {
      from_index(checkpoint);
    } else {
      files.push_back(checkpoint);
    }
  } else {
    BRAID_CHECK(fs::is_directory(checkpoint), kIo, "dispatch_model: checkpoint '",
                checkpoint.string(),
                "' does not exist (expected a .safetensors file, an index .json or a folder)");
    if (fs::is_regular_file(checkpoint / kSafeWeightsName)) {
      files.push_back(checkpoint / kSafeWeightsName);
    } else {
      std::vector<fs::path> indexes;
      for (const auto& entry : fs::directory_iterator(checkpoint)) {
        if (entry.path().filename().string().ends_with(".index.json")) {
          indexes.push_back(entry.path());
        }
      }
      BRAID_CHECK(indexes.size() == 1, kInvalidArgument, "dispatch_model: checkpoint folder '",
                  checkpoint.string(), "' holds no ", kSafeWeightsName, " and ", indexes.size(),
                  " *.index.json files (expected exactly one)");
      from_index(indexes[0]);
    }
  }
  std::vector<std::unique_ptr<SafetensorsFile>> out;
  for (const fs::path& f : files) {
    auto file = std::make_unique<SafetensorsFile>(SafetensorsFile::open(f));
    auto format = file->metadata().find("format");
    BRAID_CHECK(format == file->metadata().end() || format->second == "pt", kInvalidArgument,
                "dispatch_model: '", f.string(), "' was saved with format '",
                format == file->metadata().end() ? "" : format->second,
                "'; braid needs the pt layout");
    out.push_back(std::move(file));
  }
  return out;
}

// Tensor name -> the checkpoint file holding it.
using CheckpointTensors = std::map<std::string, const SafetensorsFile*>;

struct Plan {
  std::vector<DispatchSlot> slots;
  std::vector<bool> on_disk;  // per slot
};

// Every parameter handle (tied names together) and buffer, with the device the map gives it.
Plan collect(nn::Module& model, const DeviceMap& map, bool offload_buffers) {
  Plan plan;
  auto device_of = [&](const std::string& name) { return device_for(map, name); };
  for (auto& named : model.named_parameters(/*remove_duplicate=*/false)) {
    // Not a structured binding: clang 15 (the fuzz build) cannot capture one in a lambda.
    auto& name = named.first;
    auto& p = named.second;
    auto it = std::find_if(plan.slots.begin(), plan.slots.end(),
                           [&](const DispatchSlot& s) { return s.param.is(p); });
    if (it != plan.slots.end()) {
      it->names.push_back(name);
      plan.on_disk[static_cast<size_t>(it - plan.slots.begin())] =
          plan.on_disk[static_cast<size_t>(it - plan.slots.begin())] && device_of(name) == "disk";
      continue;
    }
    DispatchSlot slot;
    slot.names = {name};
    slot.param = p;
    slot.dtype = p.data().dtype();
    slot.shape = p.data().shape();
    plan.slots.push_back(std::move(slot));
    plan.on_disk.push_back(device_of(name) == "disk");
  }
  for (auto& [name, t] : model.named_buffers()) {
    std::string device = "cpu";  // a non-persistent buffer no entry covers stays where it is
    try {
      device = device_of(name);
    } catch (const Error&) {
    }
    DispatchSlot slot;
    slot.names = {name};
    slot.owner = &model.get_submodule(parent_of(name));
    slot.leaf = name.substr(name.rfind('.') == std::string::npos ? 0 : name.rfind('.') + 1);
    slot.dtype = t.dtype();
    slot.shape = t.shape();
    plan.slots.push_back(std::move(slot));
    plan.on_disk.push_back(offload_buffers && device == "disk");
  }
  // Quantized layers' weights (packed codes, absmax, ... / CB, SCB) go where their layer goes.
  for (const detail::QuantizedTensorRef& q : detail::quantized_tensors(model)) {
    DispatchSlot slot;
    slot.names = {q.name};
    slot.external = q.tensor;
    slot.module = q.module;
    slot.dtype = q.tensor->dtype();
    slot.shape = q.tensor->shape();
    plan.slots.push_back(std::move(slot));
    plan.on_disk.push_back(device_of(q.name) == "disk");
  }
  return plan;
}

// Where each slot's values are: the state_dict, else the offload index. False when neither.
bool find_source(DispatchSlot& slot, const std::map<std::string, Tensor>& memory,
                 const OffloadIndex& index, const fs::path& folder,
                 const CheckpointTensors& checkpoint) {
  for (const std::string& n : slot.names) {
    auto it = memory.find(n);
    if (it == memory.end()) continue;
    BRAID_CHECK(it->second.shape() == slot.shape && !it->second.device().is_meta(),
                kInvalidArgument, "dispatch_model: state_dict tensor '", n, "' is ",
                shape_str(it->second.shape()), " on ", it->second.device().str(),
                "; the model's is ", shape_str(slot.shape), " (expected values of that shape)");
    slot.memory = it->second.device().is_cpu() ? it->second : it->second.to(kCPU);
    return true;
  }
  for (const std::string& n : slot.names) {
    auto it = index.find(n);
    if (it == index.end()) continue;
    const OffloadedWeight& w = it->second;
    BRAID_CHECK(w.shape == slot.shape, kInvalidArgument, "dispatch_model: offload index entry '", n,
                "' in '", folder.string(), "' has shape ", shape_str(w.shape),
                " but the model's tensor has shape ", shape_str(slot.shape));
    slot.file = folder / (n + ".dat");
    slot.info = w;
    std::error_code ec;
    const auto size = fs::file_size(slot.file, ec);
    BRAID_CHECK(!ec, kIo, "dispatch_model: '", slot.names[0], "' is read from offload file '",
                slot.file.string(), "', which cannot be read (", ec.message(), ")");
    const auto need = static_cast<uintmax_t>(shape_numel(w.shape)) * dtype_size(w.dtype);
    BRAID_CHECK(size == need, kCorruptData, "dispatch_model: offload file '", slot.file.string(),
                "' holds ", size, " bytes, but its index entry (", w.dtype, " ", shape_str(w.shape),
                ") needs ", need);
    return true;
  }
  for (const std::string& n : slot.names) {
    auto it = checkpoint.find(n);
    if (it == checkpoint.end()) continue;
    const SafetensorsEntry& e = it->second->info(n);
    BRAID_CHECK(e.shape == slot.shape, kInvalidArgument, "dispatch_model: checkpoint tensor '", n,
                "' in '", it->second->path().string(), "' has shape ", shape_str(e.shape),
                " but the model's tensor has shape ", shape_str(slot.shape));
    slot.safetensors = it->second;
    slot.safetensors_name = n;
    return true;
  }
  return false;
}

}  // namespace

// ---- dispatch_model ----------------------------------------------------------------------

namespace {

// Where values come from (DispatchOptions: state_dict, offload folder, checkpoint).
struct Sources {
  std::map<std::string, Tensor> memory;
  OffloadIndex index;
  CheckpointTensors checkpoint;
};

Sources open_sources(const DispatchOptions& options, DispatchedModel::Impl& impl) {
  Sources out;
  for (const auto& [name, t] : options.state_dict) out.memory.emplace(name, t);
  if (options.offload_index) {
    out.index = *options.offload_index;
  } else if (!options.offload_dir.empty()) {
    out.index = load_offload_index(options.offload_dir);
  }
  if (!options.checkpoint.empty()) impl.checkpoint_files = open_checkpoint(options.checkpoint);
  for (const auto& file : impl.checkpoint_files) {
    for (const SafetensorsEntry& e : file->entries()) out.checkpoint.emplace(e.name, file.get());
  }
  return out;
}

// What dispatch will change: disk tensors holding values (written to the folder) and CPU
// tensors still on meta (read once). Finds every other slot that needs one its source.
struct Changes {
  std::vector<size_t> to_write, to_load;
};

Changes plan_sources(Plan& plan, const Sources& sources, const DispatchOptions& options) {
  Changes out;
  for (size_t i = 0; i < plan.slots.size(); ++i) {
    DispatchSlot& slot = plan.slots[i];
    const bool meta = slot.data().device().is_meta();
    if (!meta && !plan.on_disk[i]) continue;  // a CPU tensor that runs in place
    if (!meta) {
      // Values in the module: written to the folder (the model is the truth), unless the
      // state_dict holds them.
      if (find_source(slot, sources.memory, {}, {}, {})) continue;
      BRAID_CHECK(!options.offload_dir.empty(), kInvalidArgument, "dispatch_model: '",
                  slot.names[0],
                  "' is mapped to disk and holds values; pass offload_dir (where they are "
                  "written) or a state_dict holding them");
      out.to_write.push_back(i);
      continue;
    }
    const bool found =
        find_source(slot, sources.memory, sources.index, options.offload_dir, sources.checkpoint);
    BRAID_CHECK(
        found, kInvalidArgument, "dispatch_model: '", slot.names[0], "' is mapped to ",
        plan.on_disk[i] ? "disk" : "cpu",
        " and still on the meta device, but no source holds it (not in the state_dict, ",
        options.offload_dir.empty() ? std::string("no offload_dir")
                                    : "not in the index of '" + options.offload_dir.string() + "'",
        options.checkpoint.empty() ? std::string(", no checkpoint")
                                   : ", not in checkpoint '" + options.checkpoint.string() + "'",
        "); load it first (load_checkpoint_in_model)");
    if (!plan.on_disk[i]) out.to_load.push_back(i);
  }
  return out;
}

// The units (Note [Dispatch units]): for each name of each disk slot, its layer; slot indexes
// are the plan's.
std::vector<DispatchUnit> find_units(nn::Module& model, const DeviceMap& map, const Plan& plan,
                                     const std::vector<std::string>& preload) {
  std::vector<DispatchUnit> units;
  std::map<nn::Layer*, size_t> unit_of;
  for (size_t i = 0; i < plan.slots.size(); ++i) {
    if (!plan.on_disk[i]) continue;
    for (const std::string& n : plan.slots[i].names) {
      const DispatchSlot& slot = plan.slots[i];
      auto [path, layer] =
          unit_layer(model, map, n, slot.module.empty() ? parent_of(n) : slot.module, preload);
      auto [it, added] = unit_of.emplace(layer, units.size());
      if (added) units.push_back(DispatchUnit{path, layer, {}, 0});
      std::vector<size_t>& slots = units[it->second].slots;
      if (std::find(slots.begin(), slots.end(), i) == slots.end()) slots.push_back(i);
    }
  }
  // In model order (named_modules), so offloaded_modules() reads like the map.
  std::map<nn::Module*, size_t> rank;
  for (auto& [name, m] : model.named_modules()) rank.emplace(m, rank.size());
  std::stable_sort(units.begin(), units.end(),
                   [&](const auto& a, const auto& b) { return rank[a.layer] < rank[b.layer]; });
  return units;
}

// Changes the model: disk values written out and put on meta, CPU tensors on meta loaded; the
// disk slots move into `impl` (units renumbered).
void apply(Plan& plan, const Changes& changes, const DispatchOptions& options,
           DispatchedModel::Impl& impl) {
  if (!changes.to_write.empty()) {
    fs::create_directories(options.offload_dir);
    OffloadIndex written;
    for (size_t i : changes.to_write) {
      DispatchSlot& slot = plan.slots[i];
      offload_weight(slot.data(), slot.names[0], options.offload_dir, &written);
      slot.file = options.offload_dir / (slot.names[0] + ".dat");
      slot.info = written.at(slot.names[0]);
    }
    save_offload_index(written, options.offload_dir);
  }
  for (size_t i : changes.to_load) plan.slots[i].data() = plan.slots[i].read();
  std::vector<size_t> kept(plan.slots.size(), SIZE_MAX);  // plan index -> impl index
  for (size_t i = 0; i < plan.slots.size(); ++i) {
    if (!plan.on_disk[i]) continue;
    DispatchSlot& slot = plan.slots[i];
    slot.data() = Tensor::empty(slot.shape, slot.dtype, kMeta);
    kept[i] = impl.slots.size();
    impl.slots.push_back(std::move(slot));
  }
  for (DispatchUnit& unit : impl.units) {
    for (size_t& s : unit.slots) {
      s = kept[s];
      const DispatchSlot& slot = impl.slots[s];
      unit.bytes += shape_numel(slot.shape) * static_cast<int64_t>(dtype_size(slot.dtype));
    }
  }
}

}  // namespace

DispatchedModel dispatch_model(nn::Module& model, const DeviceMap& device_map,
                               DispatchOptions options) {
  if (!options.main_device.empty()) {
    BRAID_CHECK(normalize_device(options.main_device) == "cpu", kNotSupported,
                "dispatch_model: main_device '", options.main_device,
                "': braid's dispatch runs modules on the CPU only (expected 'cpu' or empty)");
  }
  auto impl = std::make_shared<DispatchedModel::Impl>();
  impl->device_map = checked_map(model, device_map);
  impl->prefetch = options.prefetch;
  impl->timeout = options.timeout;
  impl->root = dynamic_cast<nn::Layer*>(&model);

  // Everything is checked before apply() changes the model.
  Plan plan = collect(model, impl->device_map, options.offload_buffers);
  const Sources sources = open_sources(options, *impl);
  const Changes changes = plan_sources(plan, sources, options);
  impl->units = find_units(model, impl->device_map, plan, options.preload_module_classes);
  if (!impl->units.empty()) impl->check_hooks_free();

  apply(plan, changes, options, *impl);
  if (!impl->units.empty()) impl->install();
  return DispatchedModel(std::move(impl));
}

// ---- load_checkpoint_and_dispatch --------------------------------------------------------

namespace {

bool uses_disk(const DeviceMap& map) {
  return std::any_of(map.begin(), map.end(),
                     [](const auto& e) { return normalize_device(e.second) == "disk"; });
}

}  // namespace

DeviceMap detail::infer_dispatch_map(nn::Module& model, const std::string& strategy,
                                     const LoadAndDispatchOptions& options) {
  static const std::set<std::string> kStrategies = {"auto", "balanced", "balanced_low_0",
                                                    "sequential"};
  BRAID_CHECK(kStrategies.count(strategy) > 0, kInvalidArgument,
              "load_checkpoint_and_dispatch: device_map '", strategy,
              "' is not a map or one of 'auto', 'balanced', 'balanced_low_0', 'sequential'");
  auto infer = [&](const std::optional<MaxMemory>& limits) {
    std::optional<MaxMemory> budget = limits;
    if (strategy != "sequential") {
      budget = get_balanced_memory(model, budget,
                                   {.no_split_module_classes = options.no_split_module_classes,
                                    .dtype = options.dtype,
                                    .low_zero = strategy == "balanced_low_0"});
    }
    return infer_auto_device_map(model, budget,
                                 {.no_split_module_classes = options.no_split_module_classes,
                                  .dtype = options.dtype,
                                  .offload_buffers = options.offload_buffers});
  };
  DeviceMap map = infer(options.max_memory);
  if (!options.prefetch || !uses_disk(map)) return map;
  // The layer read ahead needs room too: the CPU limit loses the largest layer.
  const int64_t largest =
      calculate_maximum_sizes(model, options.no_split_module_classes).largest_layer.size;
  MaxMemory limits;
  for (const DeviceBudget& b : get_max_memory(options.max_memory)) {
    limits.emplace(b.device, b.device == "cpu" ? std::max<int64_t>(0, b.bytes - largest) : b.bytes);
  }
  return infer(limits);
}

DispatchedModel load_checkpoint_and_dispatch(nn::Module& model, const fs::path& checkpoint,
                                             const LoadAndDispatchOptions& options) {
  DeviceMap map;
  if (const auto* strategy = std::get_if<std::string>(&options.device_map)) {
    map = detail::infer_dispatch_map(model, *strategy, options);
  } else {
    map = std::get<DeviceMap>(options.device_map);
  }
  const bool disk = uses_disk(map);
  DeviceMap load_map = map;
  if (options.offload_from_checkpoint) {
    open_checkpoint(checkpoint);  // a safetensors checkpoint, checked before anything loads
    for (auto& [name, device] : load_map) {
      if (normalize_device(device) == "disk") device = "meta";  // read at each forward instead
    }
  }
  load_checkpoint_in_model(model, checkpoint,
                           {.device_map = load_map,
                            .offload_folder = options.offload_folder,
                            .dtype = options.dtype,
                            .offload_state_dict = options.offload_state_dict.value_or(disk),
                            .offload_buffers = options.offload_buffers,
                            .strict = options.strict});
  if (map.empty()) return DispatchedModel();
  return dispatch_model(model, map,
                        {.offload_dir = options.offload_folder,
                         .checkpoint = options.offload_from_checkpoint ? checkpoint : fs::path(),
                         .offload_buffers = options.offload_buffers,
                         .preload_module_classes = options.preload_module_classes.value_or(
                             options.no_split_module_classes),
                         .prefetch = options.prefetch,
                         .timeout = options.timeout});
}

}  // namespace braid::accel
