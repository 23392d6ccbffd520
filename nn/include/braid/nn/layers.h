// SPDX-License-Identifier: Apache-2.0
// Layers with hand-written backward (docs/nn.md). Each follows the precision policy through
// the autocast scope (amp/autocast.h): matmuls compute in the scope's low dtype, norms and
// softmax in f32; parameters keep their own dtype and gradients are accumulated in the
// parameter's dtype (accumulate_grad). Every backward is checked against finite differences
// in f64 (nn/tests/layers_test.cc).
//
//   auto mlp = std::make_shared<Sequential>();
//   mlp->append("fc", std::make_shared<Linear>(16, 64));
//   mlp->append("act", std::make_shared<Gelu>(GeluApproximate::kTanh));
//   Tensor y = mlp->forward(x);  Tensor dx = mlp->backward(dy);
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "braid/core/rng.h"
#include "braid/nn/module.h"
#include "braid/tensor/ops.h"

namespace braid::nn {

// ---- containers ----------------------------------------------------------------------------

// Children named "0", "1", ... (torch.nn.ModuleList); no forward of its own.
class ModuleList : public Module {
 public:
  ModuleList() : Module("ModuleList") {}
  void push_back(std::shared_ptr<Module> m);
  size_t size() const { return items_.size(); }
  Module& operator[](size_t i) const { return *items_.at(i); }
  template <typename M>
  M& at(size_t i) const {
    return dynamic_cast<M&>(*items_.at(i));
  }

 private:
  std::vector<std::shared_ptr<Module>> items_;
};

// Layers run in order; backward runs them in reverse.
class Sequential : public Layer {
 public:
  Sequential() : Layer("Sequential") {}
  void append(const std::string& name, std::shared_ptr<Layer> layer);
  size_t size() const { return layers_.size(); }

 protected:
  Tensor forward_impl(const Tensor& x) override;
  Tensor backward_impl(const Tensor& grad_output) override;

 private:
  std::vector<std::shared_ptr<Layer>> layers_;
};

// ---- Linear --------------------------------------------------------------------------------

// How the weight is stored: kOutIn is torch.nn.Linear's [out, in]; kInOut is Hugging Face's
// Conv1D [in, out] (GPT-2's c_attn, c_proj, c_fc), so GPT-2 checkpoints load unchanged.
enum class WeightLayout : uint8_t { kOutIn, kInOut };
enum class Bias : uint8_t { kNo, kYes };

// y = x W^T + b over the last dimension of x ([..., in] -> [..., out]).
// Initialized as torch.nn.Linear (kaiming-uniform bounds 1/sqrt(in)) from `gen` (the default
// generator when null); dtype f32 unless given.
class Linear : public Layer {
 public:
  Linear(int64_t in_features, int64_t out_features, Bias bias = Bias::kYes,
         WeightLayout layout = WeightLayout::kOutIn, DType dtype = DType::kF32,
         Generator* gen = nullptr);
  Parameter& weight() { return param("weight"); }
  Parameter& bias() { return param("bias"); }  // throws when built with Bias::kNo
  bool has_bias() const { return has_bias_; }
  WeightLayout layout() const { return layout_; }
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

 protected:
  Tensor forward_impl(const Tensor& x) override;
  Tensor backward_impl(const Tensor& grad_output) override;

 private:
  int64_t in_, out_;
  bool has_bias_;
  WeightLayout layout_;
};

// ---- Embedding -----------------------------------------------------------------------------

// ids (i64 or i32, any shape, values in [0, num_embeddings)) -> [..., dim]. Out-of-range ids
// throw kOutOfRange naming the id and the table size. backward() adds rows into the weight's
// gradient in a fixed order and returns an undefined Tensor. Initialized N(0, 1) as torch.
class Embedding : public Layer {
 public:
  Embedding(int64_t num_embeddings, int64_t dim, DType dtype = DType::kF32,
            Generator* gen = nullptr);
  Parameter& weight() { return param("weight"); }
  int64_t num_embeddings() const { return num_; }
  int64_t dim() const { return dim_; }
  // torch's padding_idx: positions holding this id add nothing to the weight's gradient (its
  // row is still looked up; the caller zeroes it at initialization). -1: none. kOutOfRange
  // outside [-1, num_embeddings).
  void set_padding_idx(int64_t id);
  int64_t padding_idx() const { return padding_idx_; }

 protected:
  Tensor forward_impl(const Tensor& ids) override;
  Tensor backward_impl(const Tensor& grad_output) override;

 private:
  int64_t num_, dim_;
  int64_t padding_idx_ = -1;
};

// ---- normalization -------------------------------------------------------------------------

// Over the last dimension, computed in f32 (f64 for f64 input); output in f32 for 16-bit
// inputs under autocast, else in the input's dtype. weight = 1, bias = 0 initially.
class LayerNorm : public Layer {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5, Bias bias = Bias::kYes,
                     DType dtype = DType::kF32);
  Parameter& weight() { return param("weight"); }
  Parameter& bias() { return param("bias"); }
  int64_t dim() const { return dim_; }
  double eps() const { return eps_; }
  bool has_bias() const { return has_bias_; }

 protected:
  Tensor forward_impl(const Tensor& x) override;
  Tensor backward_impl(const Tensor& grad_output) override;

 private:
  int64_t dim_;
  double eps_;
  bool has_bias_;
};

// Where RMSNorm's output meets the weight for a 16-bit input (outside autocast) and a weight of
// the same dtype: kFused computes x * rstd * w in f32 and rounds once; kAfterCast rounds
// x * rstd to the input's dtype first and multiplies by the weight in it (transformers'
// LlamaRMSNorm: weight * hidden_states.to(input_dtype)). The same bits for f32 and f64 inputs.
enum class RmsNormWeight : uint8_t { kFused, kAfterCast };

// y = x / sqrt(mean(x^2) + eps) * weight (LLaMA's RMSNorm).
class RMSNorm : public Layer {
 public:
  explicit RMSNorm(int64_t dim, double eps = 1e-6, DType dtype = DType::kF32,
                   RmsNormWeight weight_mode = RmsNormWeight::kFused);
  Parameter& weight() { return param("weight"); }
  int64_t dim() const { return dim_; }
  double eps() const { return eps_; }
  RmsNormWeight weight_mode() const { return weight_mode_; }

 protected:
  Tensor forward_impl(const Tensor& x) override;
  Tensor backward_impl(const Tensor& grad_output) override;

 private:
  int64_t dim_;
  double eps_;
  RmsNormWeight weight_mode_;
};

// ---- activations and dropout ---------------------------------------------------------------

class Gelu : public Layer {
 public:
  explicit Gelu(GeluApproximate approximate = GeluApproximate::kNone)
      : Layer("GELU"), approximate_(approximate) {}

 protected:
  Tensor forward_impl(const Tensor& x) override;
  Tensor backward_impl(const Tensor& grad_output) override;

 private:
  GeluApproximate approximate_;
};

class Relu : public Layer {
 public:
  Relu() : Layer("ReLU") {}

 protected:
  Tensor forward_impl(const Tensor& x) override;
  Tensor backward_impl(const Tensor& grad_output) override;
};

class Silu : public Layer {
 public:
  Silu() : Layer("SiLU") {}

 protected:
  Tensor forward_impl(const Tensor& x) override;
  Tensor backward_impl(const Tensor& grad_output) override;
};

// Zeroes each element with probability p in training mode and scales the rest by 1/(1-p);
// the identity in eval mode or when p == 0. The mask comes from `gen` (the default CPU
// generator when null): element i of a call keeps when uniform word i of the draw is >= p,
// so the same generator state gives the same mask on every machine and SIMD level.
class Dropout : public Layer {
 public:
  explicit Dropout(double p = 0.5, Generator* gen = nullptr);
  double p() const { return p_; }

 protected:
  Tensor forward_impl(const Tensor& x) override;
  Tensor backward_impl(const Tensor& grad_output) override;

 private:
  double p_;
  Generator* gen_;
};

}  // namespace braid::nn
