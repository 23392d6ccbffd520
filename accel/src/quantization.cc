// load_and_quantize_model and bitsandbytes-format quantized state dicts
// (braid/accel/quantization.h). The checkpoint is memory-mapped; each tensor is converted or
// quantized as it is reached, so at most one layer's full-precision weight is materialized.
#include "braid/accel/quantization.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <map>
#include <set>
#include <string_view>

#include <nlohmann/json.hpp>

#include "big_model_internal.h"
#include "braid/core/error.h"
#include "braid/core/file_util.h"

namespace braid::accel {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr std::string_view kQuantStateKey = ".quant_state.bitsandbytes__";

std::vector<fs::path> checkpoint_files(const fs::path& location) {
  auto from_index = [](const fs::path& index) {
    std::set<std::string> names;
    for (const auto& [tensor, file] :
         parse_safetensors_index(read_file(index), index.string()).weight_map) {
      names.insert(file);
    }
    std::vector<fs::path> out;
    for (const std::string& f : names) out.push_back(index.parent_path() / f);
    return out;
  };
  if (fs::is_regular_file(location)) {
    return location.extension() == ".json" ? from_index(location) : std::vector{location};
  }
  BRAID_CHECK(fs::is_directory(location), kIo, "load_and_quantize_model: weights_location '",
              location.string(),
              "' does not exist (expected a .safetensors file, an index .json or a folder)");
  if (fs::is_regular_file(location / "model.safetensors")) return {location / "model.safetensors"};
  std::vector<fs::path> indexes;
  for (const auto& entry : fs::directory_iterator(location)) {
    if (entry.path().filename().string().ends_with(".safetensors.index.json")) {
      indexes.push_back(entry.path());
    }
  }
  BRAID_CHECK(indexes.size() == 1, kInvalidArgument, "load_and_quantize_model: folder '",
              location.string(), "' has no model.safetensors and ", indexes.size(),
              " *.safetensors.index.json files (expected exactly one)");
  return from_index(indexes.front());
}

std::string torch_dtype_name(DType t) {
  switch (t) {
    case DType::kF64:
      return "float64";
    case DType::kF32:
      return "float32";
    case DType::kF16:
      return "float16";
    case DType::kBF16:
      return "bfloat16";
    default:
      BRAID_FAIL(kInvalidArgument, "quantized weight of dtype ", t, " (expected floating)");
  }
}

DType parse_torch_dtype(const std::string& name) {
  if (name == "float64") return DType::kF64;
  if (name == "float32") return DType::kF32;
  if (name == "float16") return DType::kF16;
  if (name == "bfloat16") return DType::kBF16;
  BRAID_FAIL(kCorruptData, "bitsandbytes quant state: dtype '", name,
             "' (expected float32, float16, bfloat16 or float64)");
}

// Python's repr of a float: the shortest round trip, fixed unless the exponent is below -4
// (%g's rule; Python also keeps fixed notation up to 1e16, where %g switches at the digit count,
// which an absmax mean never reaches), always with a '.' or an exponent.
std::string python_float(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::general);
  std::string s(buf, r.ptr);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

// pack_dict_to_tensor(json.dumps(non-tensor fields)): the key order of QuantState.as_dict.
Tensor pack_quant_state(const Quant4State& s) {
  std::string j = "{\"quant_type\": \"" + std::string(quant4_type_name(s.type)) +
                  "\", \"blocksize\": " + std::to_string(s.blocksize) + ", \"dtype\": \"" +
                  torch_dtype_name(s.dtype) + "\", \"shape\": [";
  for (size_t i = 0; i < s.shape.size(); ++i) {
    j += (i ? ", " : "") + std::to_string(s.shape[i]);
  }
  j += "]";
  if (s.nested) {
    j += ", \"nested_blocksize\": " + std::to_string(s.nested_blocksize) +
         ", \"nested_dtype\": \"float32\", \"nested_offset\": " + python_float(s.offset);
  }
  j += "}";
  Tensor t = Tensor::empty({static_cast<int64_t>(j.size())}, DType::kU8);
  std::memcpy(t.data_ptr(), j.data(), j.size());
  return t;
}

Quant4State unpack_quant_state(const Tensor& packed, const std::string& key) {
  const Tensor c = packed.contiguous();
  const std::string text(static_cast<const char*>(c.data_ptr()), static_cast<size_t>(c.numel()));
  Quant4State s;
  try {
    const json j = json::parse(text);
    s.type = parse_quant4_type(j.at("quant_type").get<std::string>());
    s.blocksize = j.at("blocksize").get<int64_t>();
    s.dtype = parse_torch_dtype(j.at("dtype").get<std::string>());
    s.shape = j.at("shape").get<Shape>();
    if (j.contains("nested_offset")) {
      s.nested = true;
      s.offset = j.at("nested_offset").get<float>();
      s.nested_blocksize = j.at("nested_blocksize").get<int64_t>();
    }
  } catch (const json::exception& e) {
    BRAID_FAIL(kCorruptData, "bitsandbytes quant state '", key, "': ", e.what());
  }
  return s;
}

std::string module_of(const std::string& name) {
  const size_t dot = name.rfind('.');
  return dot == std::string::npos ? std::string() : name.substr(0, dot);
}

// Where each checkpoint tensor lives.
struct Checkpoint {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::map<std::string, size_t> where;  // name -> file index
  std::vector<std::string> order;       // names in file order

  bool has(const std::string& name) const { return where.count(name) != 0; }
  Tensor get(const std::string& name) const { return files[where.at(name)]->get(name); }
};

Checkpoint open_checkpoint(const fs::path& location) {
  Checkpoint c;
  for (const fs::path& p : checkpoint_files(location)) {
    c.files.push_back(std::make_unique<SafetensorsFile>(SafetensorsFile::open(p)));
    for (const std::string& n : c.files.back()->names()) {
      c.where[n] = c.files.size() - 1;
      c.order.push_back(n);
    }
  }
  return c;
}

// A bitsandbytes 4-bit weight: the packed data and its quant-state tensors.
QuantizedTensor4bit read_4bit(const Checkpoint& c, const std::string& weight,
                              const std::string& state_key, std::set<std::string>& used) {
  QuantizedTensor4bit q;
  q.state = unpack_quant_state(c.get(state_key), state_key);
  auto take = [&](const std::string& name) {
    BRAID_CHECK(c.has(name), kCorruptData, "load_and_quantize_model: '", state_key, "' without '",
                name, "'");
    used.insert(name);
    return c.get(name).clone();
  };
  q.packed = take(weight);
  BRAID_CHECK(q.packed.dtype() == DType::kU8, kNotSupported, "load_and_quantize_model: '", weight,
              "' is ", q.packed.dtype(), " (bnb_4bit_quant_storage other than uint8 is not read)");
  q.state.absmax = take(weight + ".absmax");
  q.state.code = take(weight + ".quant_map");
  if (q.state.nested) {
    q.state.nested_absmax = take(weight + ".nested_absmax");
    q.state.nested_code = take(weight + ".nested_quant_map");
  }
  used.insert(state_key);
  return q;
}

}  // namespace

namespace detail {

std::vector<QuantizedTensorRef> quantized_tensors_of(nn::Module& layer, const std::string& path) {
  const std::string p = path.empty() ? "" : path + ".";
  std::vector<QuantizedTensorRef> out;
  auto add = [&](const std::string& name, Tensor& t) {
    if (t.defined()) out.push_back({p + name, path, &t});
  };
  if (auto* l4 = dynamic_cast<nn::Linear4bit*>(&layer)) {
    QuantizedTensor4bit& q = l4->mutable_quantized();
    add("weight", q.packed);
    add("weight.absmax", q.state.absmax);
    add("weight.quant_map", q.state.code);
    add("weight.nested_absmax", q.state.nested_absmax);
    add("weight.nested_quant_map", q.state.nested_code);
  } else if (auto* l8 = dynamic_cast<nn::Linear8bitLt*>(&layer)) {
    add("weight", l8->mutable_quantized().cb);
    add("SCB", l8->mutable_quantized().scb);
  }
  return out;
}

std::vector<QuantizedTensorRef> quantized_tensors(nn::Module& model) {
  std::vector<QuantizedTensorRef> out;
  for (auto& [path, m] : model.named_modules()) {
    for (QuantizedTensorRef& r : quantized_tensors_of(*m, path)) out.push_back(std::move(r));
  }
  return out;
}

}  // namespace detail

namespace {

// A layer built on meta gets meta tensors of the shapes quantizing its weight will give
// (blocks of 64, the config's double quantization), so that sizes and device maps see the
// quantized size before anything is read.
void give_meta_placeholder(nn::Module& m, const BnbQuantizationConfig& config) {
  if (auto* l4 = dynamic_cast<nn::Linear4bit*>(&m)) {
    if (l4->has_weight()) return;
    const int64_t n = l4->in_features() * l4->out_features();
    const int64_t blocks = (n + 63) / 64;
    QuantizedTensor4bit q;
    q.packed = Tensor::empty({(n + 1) / 2, 1}, DType::kU8, kMeta);
    q.state.type = config.quant_type();
    q.state.shape = {l4->out_features(), l4->in_features()};
    q.state.code = Tensor::empty({16}, DType::kF32, kMeta);
    q.state.nested = config.bnb_4bit_use_double_quant;
    if (q.state.nested) {
      q.state.absmax = Tensor::empty({blocks}, DType::kU8, kMeta);
      q.state.nested_absmax = Tensor::empty({(blocks + 255) / 256}, DType::kF32, kMeta);
      q.state.nested_code = Tensor::empty({256}, DType::kF32, kMeta);
    } else {
      q.state.absmax = Tensor::empty({blocks}, DType::kF32, kMeta);
    }
    l4->set_quantized(std::move(q));
  } else if (auto* l8 = dynamic_cast<nn::Linear8bitLt*>(&m)) {
    if (l8->has_weight()) return;
    l8->set_quantized({Tensor::empty({l8->out_features(), l8->in_features()}, DType::kI8, kMeta),
                       Tensor::empty({l8->out_features()}, DType::kF32, kMeta)});
  }
}

bool uses_disk(const DeviceMap& map) {
  return std::any_of(map.begin(), map.end(),
                     [](const auto& e) { return normalize_device(e.second) == "disk"; });
}

// The map to use (a strategy inferred as load_checkpoint_and_dispatch infers it), checked:
// only "cpu" and "disk", a folder when disk is named.
DeviceMap resolve_map(nn::Module& model, const BnbQuantizationConfig& config,
                      const LoadAndQuantizeOptions& options) {
  DeviceMap map;
  if (const auto* strategy = std::get_if<std::string>(&options.device_map)) {
    map = detail::infer_dispatch_map(model, *strategy,
                                     {.max_memory = options.max_memory,
                                      .no_split_module_classes = options.no_split_module_classes,
                                      .dtype = config.torch_dtype,
                                      .prefetch = options.prefetch});
  } else {
    map = std::get<DeviceMap>(options.device_map);
  }
  for (const auto& [name, device] : map) {
    const std::string d = normalize_device(device);
    BRAID_CHECK(d == "cpu" || d == "disk", kNotSupported,
                "load_and_quantize_model: device_map sends '", name, "' to '", device,
                "'; quantized models run on the cpu, with modules streamed from 'disk'");
  }
  if (!map.empty()) check_device_map(model, map);
  BRAID_CHECK(!uses_disk(map) || !options.offload_folder.empty(), kInvalidArgument,
              "load_and_quantize_model: the device map sends modules to disk; pass "
              "offload_folder (where their quantized tensors are written)");
  return map;
}

// Writes `t` to the offload folder under `name` and leaves a meta tensor of its shape.
void offload_to_disk(Tensor& t, const std::string& name, const fs::path& folder,
                     OffloadIndex& index) {
  offload_weight(t, name, folder, &index);
  t = Tensor::empty(t.shape(), t.dtype(), kMeta);
}

}  // namespace

LoadAndQuantizeResult load_and_quantize_model(nn::Module& model,
                                              const BnbQuantizationConfig& config,
                                              const fs::path& weights_location,
                                              const LoadAndQuantizeOptions& options) {
  config.validate();
  LoadAndQuantizeResult result;
  result.quantized_modules = nn::replace_with_quantized_linear(model, config);
  if (!weights_location.empty() && std::holds_alternative<std::string>(options.device_map)) {
    // A map is inferred from sizes: the layers must show their quantized size before the load.
    for (auto& [path, m] : model.named_modules()) give_meta_placeholder(*m, config);
  }
  const DeviceMap map = resolve_map(model, config, options);
  const bool disk = uses_disk(map);
  result.device_map = map;
  auto on_disk = [&](const std::string& name) { return disk && device_for(map, name) == "disk"; };
  const DispatchOptions dispatch = {.offload_dir = options.offload_folder,
                                    .preload_module_classes = options.no_split_module_classes,
                                    .prefetch = options.prefetch};
  if (weights_location.empty()) {
    // The model's own values: dispatch writes what the map sends to disk.
    if (disk) result.dispatched = dispatch_model(model, map, dispatch);
    return result;
  }

  const Checkpoint ckpt = open_checkpoint(weights_location);
  if (disk) fs::create_directories(options.offload_folder);
  std::map<std::string, nn::Module*> quantized;
  for (auto& [path, m] : model.named_modules()) {
    if (dynamic_cast<nn::Linear4bit*>(m) || dynamic_cast<nn::Linear8bitLt*>(m)) {
      quantized[path] = m;
    }
  }
  // Every name of each parameter handle (tied names): it goes to disk only when all do.
  std::map<std::string, nn::Parameter> params;
  std::map<std::string, bool> param_on_disk;
  {
    const auto all = model.named_parameters(/*remove_duplicate=*/false);
    for (auto& [name, p] : all) {
      params[name] = p;
      bool d = true;
      for (auto& [other, q] : all) {
        if (q.is(p)) d = d && on_disk(other);
      }
      param_on_disk[name] = d;
    }
  }
  std::set<std::string> buffers;
  for (auto& [name, t] : model.named_buffers()) buffers.insert(name);

  OffloadIndex offloaded;
  std::set<std::string> used, filled;
  for (const std::string& name : ckpt.order) {
    if (used.count(name)) continue;
    const std::string mod = module_of(name);
    const std::string leaf = name.substr(mod.empty() ? 0 : mod.size() + 1);
    auto qit = quantized.find(mod);
    if (qit != quantized.end() && leaf == "weight") {
      used.insert(name);
      filled.insert(mod);
      if (auto* l4 = dynamic_cast<nn::Linear4bit*>(qit->second)) {
        std::string state_key;
        for (const char* t : {"nf4", "fp4"}) {
          if (ckpt.has(name + std::string(kQuantStateKey) + t)) {
            state_key = name + std::string(kQuantStateKey) + t;
          }
        }
        if (!state_key.empty()) {
          l4->set_quantized(read_4bit(ckpt, name, state_key, used));
        } else {
          l4->load_weight(ckpt.get(name));
        }
      } else {
        auto* l8 = dynamic_cast<nn::Linear8bitLt*>(qit->second);
        const Tensor w = ckpt.get(name);
        if (w.dtype() == DType::kI8) {
          BRAID_CHECK(ckpt.has(mod + ".SCB"), kCorruptData, "load_and_quantize_model: '", name,
                      "' is int8 but '", mod, ".SCB' is missing");
          used.insert(mod + ".SCB");
          if (ckpt.has(mod + ".weight_format")) {
            used.insert(mod + ".weight_format");
            const Tensor f = ckpt.get(mod + ".weight_format").to(DType::kI64);
            BRAID_CHECK(f.numel() == 1 && f.to_vector()[0] == 0, kNotSupported,
                        "load_and_quantize_model: '", mod,
                        ".weight_format' is not 0 (\"row\"), the only layout bitsandbytes saves");
          }
          l8->set_quantized({w.clone(), ckpt.get(mod + ".SCB").to(DType::kF32).clone()});
        } else {
          l8->load_weight(w);
        }
      }
      // A disk layer's quantized tensors go to the folder as soon as they exist.
      if (on_disk(name)) {
        for (detail::QuantizedTensorRef& r : detail::quantized_tensors_of(*qit->second, mod)) {
          offload_to_disk(*r.tensor, r.name, options.offload_folder, offloaded);
        }
      }
      continue;
    }
    auto pit = params.find(name);
    if (pit != params.end()) {
      Tensor& dst = pit->second.data();
      const Tensor src = ckpt.get(name);
      BRAID_CHECK(src.shape() == dst.shape(), kInvalidArgument, "load_and_quantize_model: '", name,
                  "' has shape ", shape_str(src.shape()), " in the checkpoint and ",
                  shape_str(dst.shape()), " in the model");
      if (param_on_disk.at(name)) {
        Tensor value = src.to(kCPU, dst.dtype());
        offload_to_disk(value, name, options.offload_folder, offloaded);
        dst = value;  // meta of the model's dtype
      } else {
        dst = src.to(kCPU, dst.dtype()).clone();
      }
      used.insert(name);
      continue;
    }
    if (buffers.count(name)) {  // buffers stay on the cpu (Accelerate's offload_buffers=False)
      Tensor& dst = model.get_submodule(mod).buffer(leaf);
      dst = ckpt.get(name).to(kCPU, dst.dtype()).clone();
      used.insert(name);
      continue;
    }
  }
  for (const std::string& name : ckpt.order) {
    if (!used.count(name)) result.unexpected_keys.push_back(name);
  }
  for (auto& [path, m] : quantized) {
    if (!filled.count(path))
      result.missing_keys.push_back(path.empty() ? "weight" : path + ".weight");
  }
  for (auto& [name, p] : model.named_parameters()) {
    if (p.data().device() == kMeta && !param_on_disk.at(name)) result.missing_keys.push_back(name);
  }
  if (disk) {
    save_offload_index(offloaded, options.offload_folder);
    BRAID_CHECK(result.missing_keys.empty(), kInvalidArgument, "load_and_quantize_model: '",
                result.missing_keys.front(),
                "' is not in the checkpoint; a model with modules on disk is dispatched, and "
                "every tensor needs a value");
    result.dispatched = dispatch_model(model, map, dispatch);
  }
  return result;
}

LoadAndQuantizeResult load_and_quantize_model(
    nn::Module& model, const BnbQuantizationConfig& config, const fs::path& weights_location,
    const DeviceMap& device_map, const fs::path& offload_folder, bool offload_state_dict) {
  return load_and_quantize_model(model, config, weights_location,
                                 {.device_map = device_map,
                                  .offload_folder = offload_folder,
                                  .offload_state_dict = offload_state_dict});
}

BnbQuantizationConfig bnb_config_from_hf_config(const std::string& config_json) {
  json q;
  try {
    const json j = json::parse(config_json);
    BRAID_CHECK(j.is_object() && j.contains("quantization_config"), kInvalidArgument,
                "bnb_config_from_hf_config: config.json has no \"quantization_config\" (not a "
                "quantized checkpoint)");
    q = j.at("quantization_config");
  } catch (const json::exception& e) {
    BRAID_FAIL(kInvalidArgument, "bnb_config_from_hf_config: config.json: ", e.what());
  }
  BnbQuantizationConfig c;
  try {
    const std::string method = q.value("quant_method", "");
    BRAID_CHECK(method == "bitsandbytes", kInvalidArgument,
                "bnb_config_from_hf_config: quant_method '", method,
                "' (expected \"bitsandbytes\")");
    c.load_in_8bit = q.value("load_in_8bit", false);
    c.load_in_4bit = q.value("load_in_4bit", false);
    c.llm_int8_threshold = q.value("llm_int8_threshold", 6.0);
    c.llm_int8_has_fp16_weight = q.value("llm_int8_has_fp16_weight", false);
    c.bnb_4bit_quant_type = q.value("bnb_4bit_quant_type", "fp4");
    c.bnb_4bit_use_double_quant = q.value("bnb_4bit_use_double_quant", false);
    const std::string compute = q.value("bnb_4bit_compute_dtype", "float32");
    static const std::map<std::string, std::string> kCompute = {
        {"float32", "fp32"}, {"float16", "fp16"}, {"bfloat16", "bf16"}};
    const auto it = kCompute.find(compute);
    c.bnb_4bit_compute_dtype = it == kCompute.end() ? compute : it->second;
    const std::string storage = q.value("bnb_4bit_quant_storage", "uint8");
    BRAID_CHECK(storage == "uint8", kNotSupported,
                "bnb_config_from_hf_config: bnb_4bit_quant_storage '", storage,
                "' (only \"uint8\" is read)");
    if (q.contains("llm_int8_skip_modules") && !q.at("llm_int8_skip_modules").is_null()) {
      c.skip_modules = q.at("llm_int8_skip_modules").get<std::vector<std::string>>();
    }
  } catch (const json::exception& e) {
    BRAID_FAIL(kInvalidArgument, "bnb_config_from_hf_config: quantization_config: ", e.what());
  }
  c.validate();
  return c;
}

NamedTensors quantized_state_dict(nn::Module& model) {
  std::set<std::string> unique;
  for (auto& [name, p] : model.named_parameters()) unique.insert(name);
  std::set<std::string> all;
  for (auto& [name, p] : model.named_parameters(false)) all.insert(name);
  NamedTensors out;
  for (auto& [name, t] : model.state_dict()) {
    if (unique.count(name) || !all.count(name)) out.emplace_back(name, t);
  }
  for (auto& [path, m] : model.named_modules()) {
    const std::string p = path.empty() ? "" : path + ".";
    if (auto* l4 = dynamic_cast<nn::Linear4bit*>(m)) {
      BRAID_CHECK(l4->has_weight(), kInvalidArgument, "quantized_state_dict: '", path,
                  "' has no weight yet");
      BRAID_CHECK(!l4->quantized().packed.device().is_meta(), kInvalidArgument,
                  "quantized_state_dict: '", path,
                  "' is on meta (mapped to disk: its tensors are in the offload folder between "
                  "forwards; save before dispatching, or load without a disk map)");
      const QuantizedTensor4bit& q = l4->quantized();
      out.emplace_back(p + "weight", q.packed);
      out.emplace_back(p + "weight.absmax", q.state.absmax);
      out.emplace_back(p + "weight.quant_map", q.state.code);
      if (q.state.nested) {
        out.emplace_back(p + "weight.nested_absmax", q.state.nested_absmax);
        out.emplace_back(p + "weight.nested_quant_map", q.state.nested_code);
      }
      out.emplace_back(
          p + "weight" + std::string(kQuantStateKey) + std::string(quant4_type_name(q.state.type)),
          pack_quant_state(q.state));
    } else if (auto* l8 = dynamic_cast<nn::Linear8bitLt*>(m)) {
      BRAID_CHECK(l8->has_weight(), kInvalidArgument, "quantized_state_dict: '", path,
                  "' has no weight yet");
      BRAID_CHECK(!l8->quantized().cb.device().is_meta(), kInvalidArgument,
                  "quantized_state_dict: '", path,
                  "' is on meta (mapped to disk: its tensors are in the offload folder between "
                  "forwards; save before dispatching, or load without a disk map)");
      out.emplace_back(p + "weight", l8->quantized().cb);
      out.emplace_back(p + "SCB", l8->quantized().scb);
      out.emplace_back(p + "weight_format", Tensor::zeros({}, DType::kU8));
    }
  }
  return out;
}

void save_quantized_model(nn::Module& model, const fs::path& file) {
  save_safetensors(file, quantized_state_dict(model), {{"format", "pt"}});
}

}  // namespace braid::accel
