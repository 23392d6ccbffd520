// SPDX-License-Identifier: Apache-2.0
// The seed's "Quantization" section (Accelerate's utils/bnb.py) for braid's nn::Module
// (docs/quantization.md): load_and_quantize_model builds quantized Linear layers into a model
// (usually made under nn::InitEmptyWeights) and fills them from a safetensors checkpoint one
// tensor at a time, so the full-precision model never exists in memory; and the quantized
// weights are saved and loaded with bitsandbytes' tensor names and quant-state keys, the
// layout of a bitsandbytes-quantized transformers checkpoint.
//
//   std::shared_ptr<nn::GPT> gpt;
//   { nn::InitEmptyWeights empty;  gpt = std::make_shared<nn::GPT>(cfg); }
//   BnbQuantizationConfig q;  q.load_in_4bit = true;  q.bnb_4bit_quant_type = "nf4";
//   load_and_quantize_model(*gpt, q, "gpt2/");              // f32 / f16 / bf16 or bnb files
//   save_quantized_model(*gpt, "gpt2-nf4/model.safetensors");
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "braid/accel/big_model.h"
#include "braid/nn/quantized.h"
#include "braid/tensor/safetensors.h"

namespace braid::accel {

using nn::BnbQuantizationConfig;

struct LoadAndQuantizeResult {
  std::vector<std::string> quantized_modules;  // replaced by Linear4bit / Linear8bitLt
  std::vector<std::string> missing_keys;       // still without values after the load
  std::vector<std::string> unexpected_keys;    // in the checkpoint, not in the model
  DeviceMap device_map;                        // the map used (inferred for a strategy)
  // With modules on disk: the dispatched model's hooks (keep it alive while the model runs;
  // docs/big-model.md, "Dispatch"). Holds nothing otherwise.
  DispatchedModel dispatched;
};

struct LoadAndQuantizeOptions {
  // A map ("cpu" and "disk" entries), or a strategy ("auto", "balanced", "balanced_low_0",
  // "sequential") inferred over max_memory from the quantized sizes, as
  // load_checkpoint_and_dispatch infers it (the CPU limit keeps room for a layer read ahead).
  // Empty: everything on the cpu, no hooks.
  std::variant<DeviceMap, std::string> device_map{DeviceMap{}};
  std::optional<MaxMemory> max_memory{};
  // Never split across devices; also loaded whole from disk (preload_module_classes).
  std::vector<std::string> no_split_module_classes{};
  // Where the quantized tensors of modules mapped to "disk" are written (Accelerate's offload
  // folder layout: <name>.dat + index.json); required when the map names disk.
  std::filesystem::path offload_folder{};
  // Accepted for Accelerate's signature; has no effect (docs/quantization.md, "Disk offload"):
  // the load already holds at most one full-precision tensor beyond the model.
  std::optional<bool> offload_state_dict{};
  bool prefetch = true;  // DispatchOptions::prefetch
};

// The seed's load_and_quantize_model(model, bnb_quantization_config, weights_location,
// device_map, no_split_module_classes, max_memory, offload_folder, offload_state_dict).
// Replaces the model's Linear layers (replace_with_quantized_linear: skip_modules,
// keep_in_fp32_modules, torch_dtype), then, when weights_location is given (a .safetensors
// file, an index .json, or a folder with model.safetensors or one *.safetensors.index.json),
// reads every tensor in turn: a quantized layer's floating weight is quantized as it arrives
// (transposed first for a Conv1D-layout layer); a weight already in bitsandbytes' format (with
// its quant-state keys) is taken as it is; every other tensor goes into its parameter or buffer
// in that one's dtype. Without weights_location the model's own (materialized) weights are
// quantized. Modules the map sends to "disk" have their tensors (quantized ones in
// bitsandbytes' names: "<m>.weight", "<m>.weight.absmax", ..., "<m>.SCB") written to
// offload_folder as they are read and left on meta; the model is then dispatched
// (dispatch_model: each disk layer streamed in before its forward, the next one read ahead,
// freed after) and the handle returned in the result. A device other than "cpu" / "disk" is
// kNotSupported.
LoadAndQuantizeResult load_and_quantize_model(nn::Module& model,
                                              const BnbQuantizationConfig& config,
                                              const std::filesystem::path& weights_location,
                                              const LoadAndQuantizeOptions& options);
// The same with Accelerate's positional arguments.
LoadAndQuantizeResult load_and_quantize_model(nn::Module& model,
                                              const BnbQuantizationConfig& config,
                                              const std::filesystem::path& weights_location = {},
                                              const DeviceMap& device_map = {},
                                              const std::filesystem::path& offload_folder = {},
                                              bool offload_state_dict = false);

// The BnbQuantizationConfig a transformers checkpoint quantized by bitsandbytes was written
// with: the "quantization_config" object of its config.json (quant_method "bitsandbytes",
// transformers' BitsAndBytesConfig.to_dict()), whose fields carry the same names;
// bnb_4bit_compute_dtype's torch names ("float32", "float16", "bfloat16") become "fp32", "fp16",
// "bf16", llm_int8_skip_modules (null: the default) becomes skip_modules. The unquantized
// layers keep the checkpoint's dtypes (torch_dtype unset). kInvalidArgument when config.json
// has no such object or another quant_method; kNotSupported for a bnb_4bit_quant_storage other
// than "uint8" (docs/quantization.md, "Not built"). The result is validate()d.
//
//   auto q = bnb_config_from_hf_config(read_file("gpt2-nf4/config.json"));
//   load_and_quantize_model(*model, q, "gpt2-nf4/");
BnbQuantizationConfig bnb_config_from_hf_config(const std::string& config_json);

// The model's state dict with quantized layers in bitsandbytes' names: 4-bit "<m>.weight" (u8
// [(n+1)/2, 1]), "<m>.weight.absmax", "<m>.weight.quant_map", with double quantization
// "<m>.weight.nested_absmax" and "<m>.weight.nested_quant_map", and
// "<m>.weight.quant_state.bitsandbytes__nf4" / "__fp4" (u8 JSON bytes: quant_type, blocksize,
// dtype, shape and the nested_* fields, as QuantState.as_dict(packed=True)); 8-bit
// "<m>.weight" (i8 [out, in]), "<m>.SCB" (f32 [out]) and "<m>.weight_format" (u8 0, "row").
// Every other parameter and persistent buffer under its own name (tied ones once).
NamedTensors quantized_state_dict(nn::Module& model);
// Writes quantized_state_dict to one safetensors file ("format": "pt" in the metadata, as
// transformers writes).
void save_quantized_model(nn::Module& model, const std::filesystem::path& file);

}  // namespace braid::accel
