// Offload folders in Accelerate's layout (utils/offload.py): "<name>.dat" holds a tensor's raw
// bytes, index.json its numpy dtype name and shape. Also set_module_tensor_to_device, which
// both the loader and load_offloaded_weights use to put a tensor into a module.
#include <algorithm>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "big_model_internal.h"
#include "braid/accel/big_model.h"
#include "braid/core/error.h"
#include "braid/core/file_util.h"

namespace braid::accel {

// ---- set_module_tensor_to_device ---------------------------------------------------------

void set_module_tensor_to_device(nn::Module& module, const std::string& tensor_name, Device device,
                                 const Tensor& value, std::optional<DType> dtype) {
  const size_t dot = tensor_name.rfind('.');
  const std::string owner_path = dot == std::string::npos ? "" : tensor_name.substr(0, dot);
  const std::string leaf = dot == std::string::npos ? tensor_name : tensor_name.substr(dot + 1);
  nn::Module* owner = nullptr;
  try {
    owner = &module.get_submodule(owner_path);
  } catch (const Error& e) {
    BRAID_FAIL(kInvalidArgument, "set_module_tensor_to_device: no module '", owner_path,
               "' for tensor '", tensor_name, "': ", e.message());
  }
  Tensor* slot = nullptr;
  for (auto& [n, p] : owner->named_parameters(/*remove_duplicate=*/false)) {
    if (n == leaf) slot = &owner->param(leaf).data();
  }
  if (!slot) {
    for (auto& [n, t] : owner->named_buffers()) {
      if (n == leaf) slot = &owner->buffer(leaf);
    }
  }
  BRAID_CHECK(slot != nullptr, kInvalidArgument,
              "set_module_tensor_to_device: ", owner->type_name(), " '", owner_path,
              "' has no parameter or buffer named '", leaf, "'");
  const Tensor old = *slot;
  BRAID_CHECK(value.defined() || !old.defined() || !old.device().is_meta() || device.is_meta(),
              kInvalidArgument, "set_module_tensor_to_device: '", tensor_name,
              "' is on the meta device; a value is needed to put it on ", device.str());

  Tensor next;
  if (value.defined()) {
    BRAID_CHECK(!old.defined() || old.shape() == value.shape(), kInvalidArgument,
                "set_module_tensor_to_device: a value of shape ", shape_str(value.shape()),
                " for '", tensor_name, "', which has shape ", shape_str(old.shape()));
    DType target = value.dtype();
    if (!dtype) {
      if (old.defined()) target = old.dtype();  // as torch's load_state_dict converts
    } else if (is_floating(value.dtype())) {
      target = *dtype;
    }
    next = value.to(device, target);
  } else {
    BRAID_CHECK(old.defined(), kInvalidArgument, "set_module_tensor_to_device: '", tensor_name,
                "' is undefined and no value was given");
    DType target = old.dtype();
    if (dtype && device.is_meta() && is_floating(old.dtype())) target = *dtype;
    next = old.to(device, target);
  }
  *slot = std::move(next);
}

// ---- offload files -----------------------------------------------------------------------

namespace {

// numpy's dtype names, which Accelerate writes (bf16 as "bfloat16": numpy has no bf16; fp8 as
// ml_dtypes names them).
struct NumpyName {
  DType dtype;
  const char* name;
};
constexpr NumpyName kNumpyNames[] = {
    {DType::kF64, "float64"},
    {DType::kF32, "float32"},
    {DType::kF16, "float16"},
    {DType::kBF16, "bfloat16"},
    {DType::kF8E4M3, "float8_e4m3fn"},
    {DType::kF8E5M2, "float8_e5m2"},
    {DType::kI64, "int64"},
    {DType::kI32, "int32"},
    {DType::kI16, "int16"},
    {DType::kI8, "int8"},
    {DType::kU8, "uint8"},
    {DType::kBool, "bool"},
};

const char* numpy_name(DType t) {
  for (const NumpyName& n : kNumpyNames) {
    if (n.dtype == t) return n.name;
  }
  BRAID_ASSERT(false, "dtype without a numpy name");
  return "";
}

std::optional<DType> from_numpy_name(std::string_view name) {
  for (const NumpyName& n : kNumpyNames) {
    if (name == n.name) return n.dtype;
  }
  return std::nullopt;
}

void check_file_name(const std::string& name) {
  BRAID_CHECK(!name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
                  name.find('\0') == std::string::npos,
              kInvalidArgument, "offload: tensor name '", name,
              "' cannot be a file name in the offload folder (it must be non-empty, not '.' or "
              "'..', and contain no '/')");
}

nlohmann::json index_to_json(const OffloadIndex& index) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, w] : index) {
    j[name] = {{"dtype", numpy_name(w.dtype)}, {"shape", w.shape}};
  }
  return j;
}

}  // namespace

void offload_weight(const Tensor& weight, const std::string& name,
                    const std::filesystem::path& offload_folder, OffloadIndex* index) {
  check_file_name(name);
  BRAID_CHECK(weight.defined() && !weight.device().is_meta(), kInvalidArgument, "offload_weight '",
              name, "': the tensor is ", weight.defined() ? "on the meta device" : "undefined",
              " and has no data to write");
  const Tensor host = weight.to(kCPU).contiguous();
  AtomicFile out(offload_folder / (name + ".dat"));
  out.write(host.data_ptr(), host.nbytes());
  out.commit();
  if (index) (*index)[name] = OffloadedWeight{host.dtype(), host.shape()};
}

Tensor load_offloaded_weight(const std::filesystem::path& weight_file,
                             const OffloadedWeight& info) {
  Tensor out = Tensor::empty(info.shape, info.dtype);
  std::ifstream in(weight_file, std::ios::binary);
  BRAID_CHECK(in.good(), kIo, "load_offloaded_weight: cannot open '", weight_file.string(),
              "': ", std::strerror(errno));
  in.seekg(0, std::ios::end);
  const auto size = static_cast<uint64_t>(in.tellg());
  BRAID_CHECK(size == out.nbytes(), kCorruptData, "offload file '", weight_file.string(),
              "' holds ", size, " bytes, but its index entry (", numpy_name(info.dtype), " ",
              shape_str(info.shape), ") needs ", out.nbytes());
  in.seekg(0);
  in.read(static_cast<char*>(out.data_ptr()), static_cast<std::streamsize>(out.nbytes()));
  BRAID_CHECK(in.good() || out.nbytes() == 0, kIo, "load_offloaded_weight: cannot read '",
              weight_file.string(), "'");
  return out;
}

void save_offload_index(const OffloadIndex& index, const std::filesystem::path& offload_folder) {
  if (index.empty()) return;
  OffloadIndex merged = load_offload_index(offload_folder);
  for (const auto& [name, w] : index) merged[name] = w;
  write_file_atomic(offload_folder / "index.json", index_to_json(merged).dump(2) + "\n");
}

OffloadIndex load_offload_index(const std::filesystem::path& offload_folder) {
  const std::filesystem::path file = offload_folder / "index.json";
  OffloadIndex out;
  if (!std::filesystem::exists(file)) return out;
  const std::string what = file.string();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(file));
  } catch (const nlohmann::json::exception& e) {
    BRAID_FAIL(kCorruptData, "offload index '", what, "' is not valid JSON: ", e.what());
  }
  BRAID_CHECK(j.is_object(), kCorruptData, "offload index '", what, "' is not a JSON object");
  for (auto& [name, entry] : j.items()) {
    BRAID_CHECK(entry.is_object() && entry.contains("dtype") && entry["dtype"].is_string() &&
                    entry.contains("shape") && entry["shape"].is_array(),
                kCorruptData, "offload index '", what, "' entry '", name,
                "' needs a \"dtype\" string and a \"shape\" list");
    const auto dtype = from_numpy_name(entry["dtype"].get<std::string>());
    BRAID_CHECK(dtype.has_value(), kCorruptData, "offload index '", what, "' entry '", name,
                "' has dtype '", entry["dtype"].get<std::string>(),
                "', which braid does not store");
    Shape shape;
    for (const auto& d : entry["shape"]) {
      BRAID_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0, kCorruptData, "offload index '",
                  what, "' entry '", name, "' has a shape that is not a list of sizes >= 0");
      shape.push_back(d.get<int64_t>());
    }
    check_file_name(name);
    out[name] = OffloadedWeight{*dtype, std::move(shape)};
  }
  return out;
}

void offload_state_dict(const std::filesystem::path& save_dir, const NamedTensors& state_dict) {
  std::filesystem::create_directories(save_dir);
  OffloadIndex index;
  for (const auto& [name, t] : state_dict) offload_weight(t, name, save_dir, &index);
  save_offload_index(index, save_dir);
}

void load_offloaded_weights(nn::Module& model, const OffloadIndex& index,
                            const std::filesystem::path& offload_folder) {
  for (const auto& [name, info] : index) {
    check_file_name(name);
    Tensor weight = load_offloaded_weight(offload_folder / (name + ".dat"), info);
    set_module_tensor_to_device(model, name, kCPU, weight);
  }
}

}  // namespace braid::accel
