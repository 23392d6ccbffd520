// SPDX-License-Identifier: Apache-2.0
// bitsandbytes-style quantized Linear layers for inference (docs/quantization.md):
// Linear4bit (NF4 / FP4, block-wise absmax, optional double quantization) and Linear8bitLt
// (LLM.int8 with outlier columns), and replace_with_quantized_linear, which swaps the Linear
// layers of a model for them, honouring skip_modules and keep_in_fp32_modules.
//
//   BnbQuantizationConfig cfg;
//   cfg.load_in_4bit = true;
//   cfg.bnb_4bit_quant_type = "nf4";
//   cfg.bnb_4bit_compute_dtype = "bf16";
//   replace_with_quantized_linear(model, cfg);     // quantizes the weights in place
//   Tensor logits = model.forward(ids);
//
// The quantized weight is frozen: backward returns the gradient of the input (through the
// dequantized weight) and the bias gradient, never a weight gradient, so the layers around a
// quantized Linear (norms, embeddings, a bias) can still be trained. Weights are stored
// [out, in] as bitsandbytes stores them, also for a Conv1D-layout (kInOut) Linear.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "braid/nn/layers.h"
#include "braid/tensor/quant.h"

namespace braid::nn {

// accelerate.utils.BnbQuantizationConfig (the seed's fields), plus transformers'
// llm_int8_has_fp16_weight. Exactly one of load_in_8bit / load_in_4bit must be set.
struct BnbQuantizationConfig {
  bool load_in_8bit = false;
  double llm_int8_threshold = 6.0;  // outlier threshold (>= 0; 0 turns the decomposition off)
  // true would keep a 16-bit weight for training and quantize it on every forward
  // (bitsandbytes' has_fp16_weights); braid quantizes once and keeps only int8: false only.
  bool llm_int8_has_fp16_weight = false;
  bool load_in_4bit = false;
  std::string bnb_4bit_quant_type = "fp4";  // "nf4" or "fp4"
  bool bnb_4bit_use_double_quant = false;
  std::string bnb_4bit_compute_dtype = "fp16";  // "fp32", "fp16" or "bf16"
  // dtype of the layers that are not quantized (null: leave them as they are; keep_in_fp32
  // modules stay f32 regardless).
  std::optional<DType> torch_dtype;
  // Modules not quantized (keep their dtype, torch_dtype when set). nullopt: the default of
  // accelerate's get_keys_to_not_convert, every module holding a tied parameter (GPT-2's
  // lm_head and wte) and the module of the last parameter. Matched as keep_in_fp32 does (a run
  // of dotted components).
  std::optional<std::vector<std::string>> skip_modules;
  // Modules not quantized and kept in f32.
  std::vector<std::string> keep_in_fp32_modules;

  // Throws kInvalidArgument / kNotSupported naming the field and the accepted values.
  void validate() const;
  DType compute_dtype() const;  // bnb_4bit_compute_dtype parsed
  Quant4Type quant_type() const;
};

// y = x W^T + b with W held in 4 bits; computed as dequantize(W) in the compute dtype, then a
// GEMM through the tensor ops; the output is in the input's dtype.
class Linear4bit : public Layer {
 public:
  // A layer with no weight yet (set_weight / set_quantized fill it); bias f32 zeros of [out]
  // (meta under InitEmptyWeights) when bias is kYes.
  Linear4bit(int64_t in_features, int64_t out_features, Bias bias, Quant4Type type,
             DType compute_dtype, bool double_quant, int64_t blocksize = 64);
  // Quantizes `linear`'s weight (transposed first for kInOut) and takes its bias Parameter.
  static std::shared_ptr<Linear4bit> from_linear(const Linear& linear, Quant4Type type,
                                                 DType compute_dtype, bool double_quant);

  // Quantizes a floating [out, in] weight into this layer.
  void set_weight(const Tensor& weight);
  // Takes an already quantized weight; its state's shape must be [out, in].
  void set_quantized(QuantizedTensor4bit q);
  bool has_weight() const { return q_.packed.defined(); }
  const QuantizedTensor4bit& quantized() const { return q_; }
  // The tensors in place, for dispatch (accel's disk offload swaps them with meta tensors of
  // the same shape between forwards); the state's fields must keep describing them.
  QuantizedTensor4bit& mutable_quantized() { return q_; }
  Parameter& bias() { return param("bias"); }
  bool has_bias() const { return has_bias_; }
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  DType compute_dtype() const { return compute_; }
  // How a full-precision checkpoint stores this layer's weight (kInOut: GPT-2's Conv1D);
  // load_weight() transposes such a weight before quantizing. Set by
  // replace_with_quantized_linear from the Linear it replaces.
  void set_checkpoint_layout(WeightLayout layout) { layout_ = layout; }
  WeightLayout checkpoint_layout() const { return layout_; }
  void load_weight(const Tensor& checkpoint_weight) {
    set_weight(layout_ == WeightLayout::kInOut ? checkpoint_weight.t() : checkpoint_weight);
  }

 protected:
  Tensor forward_impl(const Tensor& x) override;
  Tensor backward_impl(const Tensor& grad_output) override;

 private:
  int64_t in_, out_;
  bool has_bias_;
  Quant4Type type_;
  DType compute_;
  bool double_quant_;
  int64_t blocksize_;
  WeightLayout layout_ = WeightLayout::kOutIn;
  QuantizedTensor4bit q_;
};

// y = x W^T + b through LLM.int8 (int8 x int8 -> int32 GEMM plus the f32 outlier columns);
// output in the input's dtype.
class Linear8bitLt : public Layer {
 public:
  Linear8bitLt(int64_t in_features, int64_t out_features, Bias bias, double threshold);
  static std::shared_ptr<Linear8bitLt> from_linear(const Linear& linear, double threshold);

  void set_weight(const Tensor& weight);  // floating [out, in]
  void set_quantized(QuantizedInt8 q);    // cb i8 [out, in], scb f32 [out]
  bool has_weight() const { return q_.cb.defined(); }
  const QuantizedInt8& quantized() const { return q_; }
  QuantizedInt8& mutable_quantized() { return q_; }  // as Linear4bit's
  Parameter& bias() { return param("bias"); }
  bool has_bias() const { return has_bias_; }
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  double threshold() const { return threshold_; }
  // As Linear4bit's.
  void set_checkpoint_layout(WeightLayout layout) { layout_ = layout; }
  WeightLayout checkpoint_layout() const { return layout_; }
  void load_weight(const Tensor& checkpoint_weight) {
    set_weight(layout_ == WeightLayout::kInOut ? checkpoint_weight.t() : checkpoint_weight);
  }

 protected:
  Tensor forward_impl(const Tensor& x) override;
  Tensor backward_impl(const Tensor& grad_output) override;

 private:
  int64_t in_, out_;
  bool has_bias_;
  double threshold_;
  WeightLayout layout_ = WeightLayout::kOutIn;
  QuantizedInt8 q_;
};

// The modules replace_with_quantized_linear leaves alone for `config` (its skip_modules, or the
// tied-parameter default, plus keep_in_fp32_modules).
std::vector<std::string> modules_not_to_convert(Module& model, const BnbQuantizationConfig& config);

// Replaces every Linear of `model` whose dotted name is not matched by
// modules_not_to_convert() with a Linear4bit / Linear8bitLt holding its quantized weight (the
// weights must be materialized: kInvalidArgument names a meta one), then converts the other
// floating parameters to torch_dtype when set, keep_in_fp32_modules to f32. Returns the names
// of the replaced modules in model order.
std::vector<std::string> replace_with_quantized_linear(Module& model,
                                                       const BnbQuantizationConfig& config);

}  // namespace braid::nn
