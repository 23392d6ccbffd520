// Quantized Linear layers (braid/nn/quantized.h): Linear4bit's forward and backward run the fused
// 4-bit kernels (linear_4bit, linear_4bit_input_grad: tiles of the weight dequantized inside the
// kernel); nothing is cached, so memory stays at the 4-bit size between calls and adds a tile
// during them; Linear8bitLt runs LLM.int8 through braid/tensor/quant.h. Both
// freeze the weight: backward gives the input's and the bias's gradients.
#include "braid/nn/quantized.h"

#include <algorithm>

#include "braid/amp/precision.h"
#include "braid/tensor/ops.h"
#include "layer_util.h"

namespace braid::nn {
namespace {

struct QuantLinearCtx {
  Shape in_shape;
  DType in_dtype;
};

// [..., out] gradient summed over every leading dimension, for the bias.
Tensor bias_grad(const Tensor& g, int64_t out) {
  return sum(g.reshape({-1, out}).to(DType::kF32), 0);
}

Parameter make_bias(int64_t out) {
  if (empty_weights_active()) return Parameter(Tensor::empty({out}, DType::kF32, kMeta));
  return Parameter(Tensor::zeros({out}, DType::kF32));
}

// The weight as [out, in] whatever the Linear's layout.
Tensor weight_out_in(const Linear& linear) {
  Linear& l = const_cast<Linear&>(linear);
  const Tensor& w = l.weight().data();
  BRAID_CHECK(w.device() != kMeta, kInvalidArgument,
              "replace_with_quantized_linear: the weight of a Linear is on meta; load or "
              "materialize it first (load_and_quantize_model fills meta layers)");
  return l.layout() == WeightLayout::kInOut ? w.t().contiguous() : w;
}

DType parse_compute(const std::string& name) {
  if (name == "fp32" || name == "float32") return DType::kF32;
  if (name == "fp16" || name == "float16") return DType::kF16;
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  BRAID_FAIL(kInvalidArgument, "bnb_4bit_compute_dtype '", name,
             "' is not supported (expected fp32, fp16 or bf16)");
}

}  // namespace

// ---- BnbQuantizationConfig -----------------------------------------------------------------

void BnbQuantizationConfig::validate() const {
  BRAID_CHECK(load_in_8bit != load_in_4bit, kInvalidArgument,
              "BnbQuantizationConfig: set exactly one of load_in_8bit and load_in_4bit (got ",
              load_in_8bit, " and ", load_in_4bit, ")");
  BRAID_CHECK(llm_int8_threshold >= 0, kInvalidArgument,
              "BnbQuantizationConfig: llm_int8_threshold ", llm_int8_threshold,
              " is negative (0 turns the outlier decomposition off)");
  BRAID_CHECK(!llm_int8_has_fp16_weight, kNotSupported,
              "BnbQuantizationConfig: llm_int8_has_fp16_weight = true (a 16-bit weight trained "
              "and re-quantized every forward) is not supported; braid keeps int8 weights frozen");
  (void)compute_dtype();
  (void)quant_type();
  if (torch_dtype) {
    BRAID_CHECK(detail::is_float_dtype(*torch_dtype), kInvalidArgument,
                "BnbQuantizationConfig: torch_dtype ", *torch_dtype, " is not floating");
  }
}

DType BnbQuantizationConfig::compute_dtype() const {
  return parse_compute(bnb_4bit_compute_dtype);
}

Quant4Type BnbQuantizationConfig::quant_type() const {
  return parse_quant4_type(bnb_4bit_quant_type);
}

// ---- Linear4bit ----------------------------------------------------------------------------

Linear4bit::Linear4bit(int64_t in_features, int64_t out_features, Bias bias, Quant4Type type,
                       DType compute_dtype, bool double_quant, int64_t blocksize)
    : Layer("Linear4bit"),
      in_(in_features),
      out_(out_features),
      has_bias_(bias == Bias::kYes),
      type_(type),
      compute_(compute_dtype),
      double_quant_(double_quant),
      blocksize_(blocksize) {
  BRAID_CHECK(in_features > 0 && out_features > 0, kInvalidArgument, "Linear4bit: in_features (",
              in_features, ") and out_features (", out_features, ") must be positive");
  BRAID_CHECK(detail::is_float_dtype(compute_dtype), kInvalidArgument,
              "Linear4bit: compute dtype must be floating, got ", compute_dtype);
  if (has_bias_) register_parameter("bias", make_bias(out_features));
}

std::shared_ptr<Linear4bit> Linear4bit::from_linear(const Linear& linear, Quant4Type type,
                                                    DType compute_dtype, bool double_quant) {
  auto q = std::make_shared<Linear4bit>(linear.in_features(), linear.out_features(),
                                        linear.has_bias() ? Bias::kYes : Bias::kNo, type,
                                        compute_dtype, double_quant);
  q->set_weight(weight_out_in(linear));
  if (linear.has_bias()) q->set_parameter("bias", const_cast<Linear&>(linear).bias());
  return q;
}

void Linear4bit::set_weight(const Tensor& weight) {
  BRAID_CHECK(weight.shape() == (Shape{out_, in_}), kInvalidArgument, "Linear4bit: weight shape ",
              shape_str(weight.shape()), " (expected [", out_, ", ", in_, "])");
  q_ = quantize_4bit(weight, type_, blocksize_, double_quant_);
}

void Linear4bit::set_quantized(QuantizedTensor4bit q) {
  BRAID_CHECK(q.state.shape == (Shape{out_, in_}), kInvalidArgument,
              "Linear4bit: quantized weight of shape ", shape_str(q.state.shape), " (expected [",
              out_, ", ", in_, "])");
  q_ = std::move(q);
}

Tensor Linear4bit::forward_impl(const Tensor& x) {
  detail::check_float_input("Linear4bit", "input", x);
  detail::check_last_dim("Linear4bit", x, in_, "in_features");
  BRAID_CHECK(has_weight(), kInvalidArgument, "Linear4bit: forward before the weight was set");
  // The fused dequant-GEMM: the weight is dequantized tile by tile inside the kernel, so the
  // layer's memory during the call is its 4-bit size plus a tile (braid/tensor/quant.h).
  Tensor y = linear_4bit(x, q_, compute_);  // [..., out] in compute_
  if (has_bias_) y = add(y, bias().data().to(compute_));
  save_for_backward(QuantLinearCtx{x.shape(), x.dtype()});
  return y.to(x.dtype());
}

Tensor Linear4bit::backward_impl(const Tensor& grad_output) {
  const auto ctx = pop_saved<QuantLinearCtx>();
  if (has_bias_ && bias().requires_grad()) accumulate_grad(bias(), bias_grad(grad_output, out_));
  // dy · W through the fused kernel: the weight is never dequantized as a whole here either.
  return linear_4bit_input_grad(grad_output, q_, compute_).to(ctx.in_dtype).reshape(ctx.in_shape);
}

// ---- Linear8bitLt --------------------------------------------------------------------------

Linear8bitLt::Linear8bitLt(int64_t in_features, int64_t out_features, Bias bias, double threshold)
    : Layer("Linear8bitLt"),
      in_(in_features),
      out_(out_features),
      has_bias_(bias == Bias::kYes),
      threshold_(threshold) {
  BRAID_CHECK(in_features > 0 && out_features > 0, kInvalidArgument, "Linear8bitLt: in_features (",
              in_features, ") and out_features (", out_features, ") must be positive");
  BRAID_CHECK(threshold >= 0, kInvalidArgument, "Linear8bitLt: threshold ", threshold,
              " is negative");
  if (has_bias_) register_parameter("bias", make_bias(out_features));
}

std::shared_ptr<Linear8bitLt> Linear8bitLt::from_linear(const Linear& linear, double threshold) {
  auto q = std::make_shared<Linear8bitLt>(linear.in_features(), linear.out_features(),
                                          linear.has_bias() ? Bias::kYes : Bias::kNo, threshold);
  q->set_weight(weight_out_in(linear));
  if (linear.has_bias()) q->set_parameter("bias", const_cast<Linear&>(linear).bias());
  return q;
}

void Linear8bitLt::set_weight(const Tensor& weight) {
  BRAID_CHECK(weight.shape() == (Shape{out_, in_}), kInvalidArgument, "Linear8bitLt: weight shape ",
              shape_str(weight.shape()), " (expected [", out_, ", ", in_, "])");
  q_ = quantize_int8(weight);
}

void Linear8bitLt::set_quantized(QuantizedInt8 q) {
  BRAID_CHECK(q.cb.shape() == (Shape{out_, in_}) && q.scb.numel() == out_, kInvalidArgument,
              "Linear8bitLt: quantized weight of shape ", shape_str(q.cb.shape()), " with ",
              q.scb.numel(), " scales (expected [", out_, ", ", in_, "] and ", out_, ")");
  q_ = std::move(q);
}

Tensor Linear8bitLt::forward_impl(const Tensor& x) {
  detail::check_float_input("Linear8bitLt", "input", x);
  detail::check_last_dim("Linear8bitLt", x, in_, "in_features");
  BRAID_CHECK(has_weight(), kInvalidArgument, "Linear8bitLt: forward before the weight was set");
  Tensor y = int8_linear(x, q_, threshold_);  // f32
  if (has_bias_) y = add(y, bias().data().to(DType::kF32));
  save_for_backward(QuantLinearCtx{x.shape(), x.dtype()});
  return y.to(x.dtype());
}

Tensor Linear8bitLt::backward_impl(const Tensor& grad_output) {
  const auto ctx = pop_saved<QuantLinearCtx>();
  if (has_bias_ && bias().requires_grad()) accumulate_grad(bias(), bias_grad(grad_output, out_));
  const Tensor w = dequantize_int8(q_, DType::kF32);
  return matmul(grad_output.to(DType::kF32), w).to(ctx.in_dtype).reshape(ctx.in_shape);
}

// ---- replace_with_quantized_linear ---------------------------------------------------------

std::vector<std::string> modules_not_to_convert(Module& model,
                                                const BnbQuantizationConfig& config) {
  std::vector<std::string> out;
  if (config.skip_modules) {
    out = *config.skip_modules;
  } else {
    // accelerate's get_keys_to_not_convert: every module holding a tied parameter (the head
    // tied to the embedding) and the module of the last parameter.
    auto module_of = [](const std::string& name) { return name.substr(0, name.rfind('.')); };
    for (const auto& group : find_tied_parameters(model)) {
      for (const std::string& name : group) out.push_back(module_of(name));
    }
    const auto params = model.named_parameters();
    if (!params.empty()) {
      const std::string last = module_of(params.back().first);
      if (std::find(out.begin(), out.end(), last) == out.end()) out.push_back(last);
    }
  }
  out.insert(out.end(), config.keep_in_fp32_modules.begin(), config.keep_in_fp32_modules.end());
  return out;
}

std::vector<std::string> replace_with_quantized_linear(Module& model,
                                                       const BnbQuantizationConfig& config) {
  config.validate();
  const std::vector<std::string> skip = modules_not_to_convert(model, config);
  // Collected first, replaced after: a replaced Linear is destroyed, and named_modules() holds
  // raw pointers.
  struct Swap {
    Module* parent;
    std::string name, full;
    Linear* linear;
  };
  std::vector<Swap> swaps;
  for (auto& [path, module] : model.named_modules()) {
    for (auto& [name, child] : module->named_children()) {
      const std::string full = path.empty() ? name : path + "." + name;
      auto* linear = dynamic_cast<Linear*>(child.get());
      if (linear != nullptr && !amp::keep_in_fp32(full, skip)) {
        swaps.push_back({module, name, full, linear});
      }
    }
  }
  std::vector<std::string> replaced;
  for (const Swap& s : swaps) {
    Linear* linear = s.linear;
    const bool meta = linear->weight().data().device() == kMeta;
    const Bias bias = linear->has_bias() ? Bias::kYes : Bias::kNo;
    std::shared_ptr<Layer> q;
    if (config.load_in_4bit) {
      q = meta ? std::make_shared<Linear4bit>(linear->in_features(), linear->out_features(), bias,
                                              config.quant_type(), config.compute_dtype(),
                                              config.bnb_4bit_use_double_quant)
               : Linear4bit::from_linear(*linear, config.quant_type(), config.compute_dtype(),
                                         config.bnb_4bit_use_double_quant);
    } else {
      q = meta ? std::make_shared<Linear8bitLt>(linear->in_features(), linear->out_features(), bias,
                                                config.llm_int8_threshold)
               : Linear8bitLt::from_linear(*linear, config.llm_int8_threshold);
    }
    if (auto* l4 = dynamic_cast<Linear4bit*>(q.get())) l4->set_checkpoint_layout(linear->layout());
    if (auto* l8 = dynamic_cast<Linear8bitLt*>(q.get())) {
      l8->set_checkpoint_layout(linear->layout());
    }
    if (meta && linear->has_bias()) q->set_parameter("bias", linear->bias());
    q->train(linear->is_training());
    s.parent->replace_module(s.name, q);
    replaced.push_back(s.full);
  }
  // The layers that stay in floating point: torch_dtype, keep_in_fp32_modules in f32.
  for (auto& [name, p] : model.named_parameters()) {
    Tensor& t = p.data();
    if (!detail::is_float_dtype(t.dtype())) continue;
    if (amp::keep_in_fp32(name, config.keep_in_fp32_modules)) {
      if (t.dtype() != DType::kF32) t = t.to(DType::kF32);
    } else if (config.torch_dtype && t.dtype() != *config.torch_dtype) {
      t = t.to(*config.torch_dtype);
    }
  }
  return replaced;
}

}  // namespace braid::nn
