// SPDX-License-Identifier: Apache-2.0
// Big-model utilities (the seed's "Modeling" and "Loading model weights" sections, Accelerate's
// utils/modeling.py and utils/offload.py) for braid's nn::Module: how many bytes each module
// takes, a device map that fits a model into given memory limits (GPUs first, then the CPU, then
// the disk), and loading a checkpoint into a model built on the meta device (nn::InitEmptyWeights)
// tensor by tensor, writing what the map sends to "disk" into an offload folder, and running such
// a model with its disk modules streamed in around their forward (dispatch_model,
// load_checkpoint_and_dispatch; docs/big-model.md, "Dispatch").
//
//   std::shared_ptr<nn::GPT> gpt;
//   { nn::InitEmptyWeights empty;  gpt = std::make_shared<nn::GPT>(cfg); }  // no memory
//   DeviceMap map = infer_auto_device_map(*gpt, MaxMemory{{"cpu", "2GiB"}, {"disk", 0}},
//                                         {.no_split_module_classes = {"GPT2Block"}});
//   load_checkpoint_in_model(*gpt, "gpt2/", {.device_map = map, .offload_folder = "offload"});
//   ...  // modules mapped to "disk" stay on meta; their tensors are in offload/*.dat
//   load_offloaded_weights(*gpt, load_offload_index("offload"), "offload");
//   // or, to run it without loading the disk part:
//   DispatchedModel d = dispatch_model(*gpt, map, {.offload_dir = "offload"});
//
// Devices are strings: "cpu", "disk", "meta", and GPU devices as Device::parse reads them
// ("cuda:0", "hip:1"); a bare integer "1" means "cuda:1", as Accelerate's integer keys mean the
// first accelerator type. A map may name GPUs this machine does not have (it is a plan); loading
// onto one needs it.
#pragma once

#include <chrono>
#include <concepts>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "braid/core/device.h"
#include "braid/core/dtype.h"
#include "braid/nn/module.h"
#include "braid/tensor/safetensors.h"
#include "braid/tensor/tensor.h"

namespace braid::shard {
class ShardedModel;
}

namespace braid::accel {

// ---- sizes ---------------------------------------------------------------------------------

// Bytes per module path and per tensor name ("" is the whole model).
using ModuleSizes = std::map<std::string, int64_t>;
// Tensor name -> the dtype it will be loaded in (overrides `dtype` for that tensor).
using SpecialDTypes = std::map<std::string, DType>;

// The seed's compute_module_sizes: every parameter (a tied one once, under its first name) and
// buffer adds numel * element size to its own name and to every prefix of it. With `dtype`, a
// floating tensor counts min(its size, dtype's size) per element (it will be loaded in that
// dtype); integer and bool tensors keep their size; special_dtypes name a dtype per tensor.
// buffers_only counts buffers alone. Every module path appears, with 0 when it holds nothing
// (Dropout, a tied head), so the map can be indexed by any name named_modules() gives.
ModuleSizes compute_module_sizes(nn::Module& model, std::optional<DType> dtype = {},
                                 const SpecialDTypes& special_dtypes = {},
                                 bool buffers_only = false);

// (name, module) pairs; module is null for a parameter or buffer (Accelerate lists both).
using NamedModuleRefs = std::vector<std::pair<std::string, nn::Module*>>;

struct LayerSize {
  int64_t size = 0;
  std::vector<std::string> names;  // every layer of that size, in scan order
};

// The seed's get_max_layer_size: scans `modules` depth first and returns the largest "layer" —
// a module without children, a module whose type_name() is in no_split_module_classes, or a
// parameter / buffer entry — and the names of every layer of that size.
LayerSize get_max_layer_size(const NamedModuleRefs& modules, const ModuleSizes& module_sizes,
                             const std::vector<std::string>& no_split_module_classes);

struct MaximumSizes {
  int64_t total = 0;
  LayerSize largest_layer;
};
// The seed's calculate_maximum_sizes: the model's total size and its largest layer. braid's
// modules carry no _no_split_modules attribute, so the no-split classes are an argument.
MaximumSizes calculate_maximum_sizes(nn::Module& model,
                                     const std::vector<std::string>& no_split_module_classes = {});

// ---- memory limits -------------------------------------------------------------------------

// A byte count, given as a number or as text read by parse_size ("10GiB", "500MB", "1.5GB").
class MemoryLimit {
 public:
  template <std::integral T>
  MemoryLimit(T bytes) : bytes_(checked(static_cast<long double>(bytes))) {}     // NOLINT
  MemoryLimit(const char* text);                                                 // NOLINT
  MemoryLimit(std::string_view text);                                            // NOLINT
  MemoryLimit(const std::string& text) : MemoryLimit(std::string_view(text)) {}  // NOLINT
  int64_t bytes() const { return bytes_; }
  friend bool operator==(const MemoryLimit&, const MemoryLimit&) = default;

 private:
  static int64_t checked(long double bytes);
  int64_t bytes_;
};

// Device -> limit: {"cuda:0": "10GiB", "cpu": int64_t{1} << 32, "disk": 0}. "disk" has no limit
// (its value is ignored), as in Accelerate.
using MaxMemory = std::map<std::string, MemoryLimit>;

struct DeviceBudget {
  std::string device;  // normalized: "cuda:0", "cpu", "disk"
  int64_t bytes = 0;
};

// Accelerate's get_max_memory: the limits in allocation order — GPU devices sorted by type and
// index, then "cpu", then "disk" when given. Unset: every GPU's total memory and the CPU's
// available memory (MemAvailable); given without "cpu": 80% of the available CPU memory.
// kInvalidArgument naming an unknown device ("mps", "npu:0", "meta") or a negative limit.
std::vector<DeviceBudget> get_max_memory(const std::optional<MaxMemory>& max_memory = {});

struct BalancedMemoryOptions {
  std::vector<std::string> no_split_module_classes{};
  std::optional<DType> dtype{};
  SpecialDTypes special_dtypes{};
  // Minimize what goes on the first GPU (it keeps room for generation and the like).
  bool low_zero = false;
};

// The seed's get_balanced_memory: limits for infer_auto_device_map that spread the model evenly
// over the GPUs (each but the last gets total / n plus 1.25 x the larger of the largest no-split
// block and the mean size of the last-level modules). Returns the limits unchanged when there is
// no GPU.
MaxMemory get_balanced_memory(nn::Module& model, const std::optional<MaxMemory>& max_memory = {},
                              const BalancedMemoryOptions& options = {});

// ---- device maps ---------------------------------------------------------------------------

// Module (or tensor) name -> device, in the order entries were made. A tensor goes where the
// longest entry that is its name or a dotted prefix of it says; "" covers everything.
using DeviceMap = std::vector<std::pair<std::string, std::string>>;

// "cpu", "disk", "meta", "cuda:1", "hip:0"; "1" -> "cuda:1", "cuda" -> "cuda:0". kInvalidArgument
// naming the text otherwise.
std::string normalize_device(std::string_view device);
// The device of a tensor or module name (Accelerate's _get_param_device); kInvalidArgument
// naming it when no entry covers it.
std::string device_for(const DeviceMap& device_map, std::string_view name);

struct DeviceMapOptions {
  std::vector<std::string> no_split_module_classes{};  // type_name()s never split across devices
  std::optional<DType> dtype{};                        // the dtype weights will be loaded in
  SpecialDTypes special_dtypes{};
  bool verbose = false;          // print each decision to stdout (Accelerate prints)
  bool clean_result = true;      // merge entries of one device into their parent
  bool offload_buffers = false;  // buffers of offloaded layers go with them (only a warning here)
  // When nothing fits on a device, look (breadth first) for a later module that does.
  bool fallback_allocation = false;
};

// The seed's infer_auto_device_map, Accelerate's greedy algorithm: modules in order fill the
// first device; one that does not fit is split into its parameters and children (unless its type
// is in no_split_module_classes or it has no children) or moves everything after it to the next
// device. The first GPU and the CPU keep room for the largest layer (an offloaded layer must fit
// when it is brought back); "disk" takes whatever is left. Parameters tied together (one handle,
// several names) are placed on one device with the module that holds them.
DeviceMap infer_auto_device_map(nn::Module& model, const std::optional<MaxMemory>& max_memory = {},
                                const DeviceMapOptions& options = {});

// Merges entries: when every entry under a module has one device, they become one entry.
DeviceMap clean_device_map(DeviceMap device_map);
// kInvalidArgument listing every state_dict() key no entry covers.
void check_device_map(nn::Module& model, const DeviceMap& device_map);

// ---- moving tensors ------------------------------------------------------------------------

// The seed's set_module_tensor_to_device: puts the parameter or buffer `tensor_name` ("a.b.w") of
// `module` on `device`, keeping the Parameter handle (tied names and optimizers see the change).
// With `value` (same shape, else kInvalidArgument naming both shapes): the value converted to
// `dtype` when given and floating, else to the tensor's current dtype; without: the current
// tensor moved (to meta with `dtype` when given, for a tensor that will be loaded later). A meta
// tensor needs a value unless `device` is meta.
void set_module_tensor_to_device(nn::Module& module, const std::string& tensor_name, Device device,
                                 const Tensor& value = Tensor(), std::optional<DType> dtype = {});

// The seed's get_module_children_bottom_up (always with the names: the seed's return_fqns): every
// module, children before their parent, the model itself last.
std::vector<std::pair<std::string, nn::Module*>> get_module_children_bottom_up(nn::Module& model);

// The seed's extract_model_from_parallel: the nn::Layer a ShardedModel (DDP / FSDP) wraps. braid
// has no other wrappers (no compile, no mixed-precision forward hooks on the module), so a Module
// is returned as the Layer it is; kInvalidArgument when it is not a Layer.
nn::Layer& extract_model_from_parallel(shard::ShardedModel& model);
nn::Layer& extract_model_from_parallel(nn::Module& model);

// ---- offload folders (Accelerate's offload.py: one .dat file per tensor + index.json) -------

struct OffloadedWeight {
  DType dtype = DType::kF32;
  Shape shape;
};
// Tensor name -> what its "<name>.dat" holds. index.json: {"name": {"dtype": "float32",
// "shape": [2, 3]}} with numpy's dtype names ("bfloat16" for bf16, as Accelerate writes it).
using OffloadIndex = std::map<std::string, OffloadedWeight>;

// Writes `weight` (raw bytes, C order, little endian) to "<folder>/<name>.dat" through
// AtomicFile and records it in `index` when given. kInvalidArgument for a name that is not a
// plain file name (contains '/', or is "." / "..") or a meta tensor.
void offload_weight(const Tensor& weight, const std::string& name,
                    const std::filesystem::path& offload_folder, OffloadIndex* index = nullptr);
// Reads one .dat file back (a new CPU tensor). kCorruptData naming the file when its size is
// not what dtype and shape say.
Tensor load_offloaded_weight(const std::filesystem::path& weight_file, const OffloadedWeight& info);
// Merges `index` into "<folder>/index.json" (entries already there are kept unless replaced).
void save_offload_index(const OffloadIndex& index, const std::filesystem::path& offload_folder);
// "<folder>/index.json" (empty when absent); kCorruptData naming the file and the entry.
OffloadIndex load_offload_index(const std::filesystem::path& offload_folder);
// The seed's offload_state_dict: every tensor to save_dir (created) plus its index.json.
void offload_state_dict(const std::filesystem::path& save_dir, const NamedTensors& state_dict);
// The seed's load_offloaded_weights: each indexed tensor read from "<folder>/<name>.dat" and put
// on the CPU in the model (set_module_tensor_to_device).
void load_offloaded_weights(nn::Module& model, const OffloadIndex& index,
                            const std::filesystem::path& offload_folder);

// ---- loading checkpoints -------------------------------------------------------------------

struct LoadCheckpointOptions {
  // Empty: every tensor is loaded where the model's tensor is (a meta one on the CPU).
  DeviceMap device_map{};
  // Where tensors mapped to "disk" go (created); required when the map names "disk".
  std::filesystem::path offload_folder{};
  // Floating tensors are loaded in this dtype (else in the model's dtype).
  std::optional<DType> dtype{};
  // Tensors mapped to "cpu" go through a temporary offload folder and are read back at the end
  // (Accelerate's RAM-saving path; braid reads checkpoints through memory maps, so it rarely
  // needs it).
  bool offload_state_dict = false;
  // Buffers of modules mapped to "disk" are offloaded too (else they are loaded on the CPU).
  bool offload_buffers = false;
  // With a 16-bit or 8-bit `dtype`, tensors of these modules stay in f32
  // (amp::PrecisionPolicy::param_dtype_for: whole dotted components match, "ln_f" keeps
  // "transformer.ln_f.weight").
  std::vector<std::string> keep_in_fp32_modules{};
  // Missing or unexpected keys throw (before anything is loaded).
  bool strict = false;
};

struct LoadCheckpointResult {
  std::vector<std::string> missing_keys;     // in the model, not in the checkpoint (sorted)
  std::vector<std::string> unexpected_keys;  // in the checkpoint, not in the model (sorted)
  OffloadIndex offloaded;                    // written to offload_folder by this call
};

// The seed's load_checkpoint_in_model. `checkpoint` is a .safetensors file, a
// model.safetensors.index.json (or any *.index.json with a weight_map), braid's sharded
// checkpoint (its folder or its index.json, shard/checkpoint.h), or a folder holding one of
// them (model.safetensors first, then a single *.index.json, then braid's index.json). Every
// name, shape and device is checked before the model is touched (kInvalidArgument naming the
// tensor); then tensors are read one at a time, one shard file mapped at a time, so the whole
// checkpoint is never in memory. Pickle files (pytorch_model.bin) are kNotSupported.
LoadCheckpointResult load_checkpoint_in_model(nn::Module& model,
                                              const std::filesystem::path& checkpoint,
                                              const LoadCheckpointOptions& options = {});

// The seed's load_state_dict for a .safetensors file: every tensor, as CPU views of the file's
// memory map (no copy), or, with a device map, each on its module's device ("disk" entries and
// uncovered names stay on the CPU, as in Accelerate). kInvalidArgument when the file's
// "format" metadata is present and not "pt"; kNotSupported for other file types (pickle).
NamedTensors load_state_dict(const std::filesystem::path& checkpoint_file,
                             const DeviceMap& device_map = {});

// ---- save / load (the seed's utils.save / utils.load, safetensors only) -------------------

struct SaveOptions {
  // Write on every node's local main process (LOCAL_RANK 0) instead of the global main process.
  bool save_on_each_node = false;
};
// Writes `state_dict` as a safetensors file with {"format": "pt"} metadata on the process that
// should (rank from detect_rank_info(): RANK / OMPI / PMI / Slurm variables); returns whether
// this process wrote. There is no pickle path: safe_serialization is always on.
bool save(const NamedTensors& state_dict, const std::filesystem::path& path,
          const SaveOptions& options = {});
// Reads a safetensors file, index or folder (load_safetensors) and moves every tensor to
// `map_location` when given (else CPU views of the file).
NamedTensors load(const std::filesystem::path& path, std::optional<Device> map_location = {});

// ---- dispatch (Accelerate's dispatch_model / load_checkpoint_and_dispatch) -----------------

// Options of dispatch_model (Accelerate's arguments, where they mean something in braid).
struct DispatchOptions {
  // The device modules run on. Empty: "cpu" (the only one braid's dispatch runs on; another is
  // kNotSupported naming it).
  std::string main_device{};
  // Offloaded tensors held in memory (Accelerate's state_dict / in-memory weights_map), looked
  // up by name before the offload folder. A tensor found here is put in the module as it is
  // (shared, converted only when its dtype differs from the model's): no copy, no read.
  NamedTensors state_dict{};
  // The offload folder: index.json plus one <name>.dat per tensor (load_checkpoint_in_model
  // writes it). Tensors of disk modules that still hold values are written here (overwriting)
  // and their modules put on meta. Required when a disk tensor is in no other source.
  std::filesystem::path offload_dir{};
  // The index to use instead of <offload_dir>/index.json.
  std::optional<OffloadIndex> offload_index{};
  // A safetensors checkpoint (a file, an index .json, or a folder holding model.safetensors or
  // one *.index.json) that tensors found in no source above are read from, through its memory
  // map: no .dat copy (transformers' "safetensors_file" offload entries).
  std::filesystem::path checkpoint{};
  // Buffers of disk modules are streamed too (else they stay on the CPU, loaded).
  bool offload_buffers = false;
  // Layers of these type_name()s load all their disk tensors at once, before their forward
  // ("GPT2Block"); others are streamed per leaf layer (each Linear, LayerNorm, Embedding its
  // own), as Accelerate does.
  std::vector<std::string> preload_module_classes{};
  // While a disk module runs, the next one in the order recorded on the first forward is read
  // on a background thread.
  bool prefetch = true;
  // The longest wait for a read in flight (a prefetch) before kTimeout naming the module.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
};

// What a dispatched model did (for tests and diagnostics).
struct DispatchStats {
  int64_t loads = 0;             // units loaded on the forward's own thread
  int64_t prefetches = 0;        // units read ahead on the background thread
  int64_t prefetch_hits = 0;     // forwards that found their unit read ahead
  int64_t prefetch_dropped = 0;  // read-ahead units not used (the order changed)
  int64_t bytes_read = 0;        // bytes put into modules from the sources (both threads)
};

// The handle dispatch_model returns: it owns the hooks set on the model's layers and the
// prefetch thread. Destroying it (or remove_hooks()) stops the thread, removes every hook and
// leaves offloaded tensors on meta, as after loading. The model must outlive it; one forward
// at a time.
class DispatchedModel {
 public:
  DispatchedModel();  // holds nothing
  ~DispatchedModel();
  DispatchedModel(DispatchedModel&&) noexcept;
  DispatchedModel& operator=(DispatchedModel&&) noexcept;
  DispatchedModel(const DispatchedModel&) = delete;
  DispatchedModel& operator=(const DispatchedModel&) = delete;

  // The map the model was dispatched with, devices normalized (Accelerate's hf_device_map).
  const DeviceMap& device_map() const;
  // The modules whose tensors are streamed from disk ("units"), in model order.
  std::vector<std::string> offloaded_modules() const;
  // The units in the order the first forward ran them (empty before it): the prefetch order.
  std::vector<std::string> execution_order() const;
  DispatchStats stats() const;
  // Bytes of offloaded tensors loaded into modules now (0 between forwards).
  int64_t loaded_bytes() const;
  // Stops the prefetch thread and removes every hook now (the destructor does it too). A read
  // still in flight after DispatchOptions::timeout (a stalled file system) is left to finish
  // on its own thread, which keeps what it needs alive: this never hangs.
  void remove_hooks();

  struct Impl;

 private:
  explicit DispatchedModel(std::shared_ptr<Impl> impl);
  friend DispatchedModel dispatch_model(nn::Module&, const DeviceMap&, DispatchOptions);
  std::shared_ptr<Impl> impl_;  // shared with the prefetch thread
};

// The seed's dispatch_model, for the CPU: modules mapped to "cpu" run in place (their tensors
// must hold values; a meta one is loaded once from the sources); each module mapped to "disk"
// keeps its tensors on meta between uses: a pre-forward hook loads them from the sources
// (state_dict, then the offload folder), the post-forward hook puts them back on meta, and the
// next disk module is read ahead (DispatchOptions::prefetch). Backward through a disk module is
// kNotSupported (inference only). Everything is checked before a hook is set: the map covers
// every tensor (kInvalidArgument listing the others), no device but "cpu" / "disk"
// (kNotSupported naming a GPU, kInvalidArgument for "meta"), every disk tensor in a source with
// its shape (kInvalidArgument naming it) and its .dat file present with its size (kIo /
// kCorruptData naming the file), no layer already hooked (sharding, another dispatch).
DispatchedModel dispatch_model(nn::Module& model, const DeviceMap& device_map,
                               DispatchOptions options = {});

struct LoadAndDispatchOptions {
  // A map, or how to infer one: "auto", "balanced", "balanced_low_0" or "sequential"
  // (infer_auto_device_map over max_memory; "balanced*" first spread over the GPUs by
  // get_balanced_memory, as Accelerate). An empty map: load in place, no hooks.
  std::variant<DeviceMap, std::string> device_map{DeviceMap{}};
  // Limits for an inferred map; unset: the CPU's available memory (and disk).
  std::optional<MaxMemory> max_memory{};
  std::vector<std::string> no_split_module_classes{};
  // DispatchOptions::preload_module_classes; unset: no_split_module_classes (a block kept
  // whole on a device is also loaded whole, and the next one read ahead whole).
  std::optional<std::vector<std::string>> preload_module_classes{};
  std::filesystem::path offload_folder{};
  bool offload_buffers = false;
  std::optional<DType> dtype{};
  // Unset: true when the map uses disk (Accelerate's default).
  std::optional<bool> offload_state_dict{};
  // Disk tensors are read from the (safetensors) checkpoint itself at each forward instead of
  // being copied into offload_folder (DispatchOptions::checkpoint); offload_folder is then not
  // needed. Off: Accelerate's .dat files.
  bool offload_from_checkpoint = false;
  bool strict = false;
  bool prefetch = true;
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
};

// The seed's load_checkpoint_and_dispatch: infers the map when a strategy is given (with the
// prefetch on, the CPU budget also keeps room for the layer read ahead: its limit is lowered by
// the largest layer), loads the checkpoint with load_checkpoint_in_model (disk modules into
// offload_folder), then dispatch_model.
DispatchedModel load_checkpoint_and_dispatch(nn::Module& model,
                                             const std::filesystem::path& checkpoint,
                                             const LoadAndDispatchOptions& options = {});

}  // namespace braid::accel
