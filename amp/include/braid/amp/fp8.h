// SPDX-License-Identifier: Apache-2.0
// fp8 tensors with per-tensor scales and delayed scaling (docs/mixed-precision.md, "fp8"),
// after Transformer Engine's DelayedScaling recipe and the seed's FP8RecipeKwargs: each
// tensor that is cast to fp8 keeps an amax history; its scale for the next steps comes from
// the history's max (or the most recent amax): scale = (fp8_max / amax) / 2^margin.
//
//   braid::amp::DelayedScaling w_scaling({}, DType::kF8E4M3);
//   Fp8Tensor w8 = w_scaling.quantize(weight);     // cast with the current scale, record amax
//   Tensor y = fp8_matmul(x8, w8, Trans::kYes);    // CPU: dequantize + f32 GEMM
//   w_scaling.update(group);                        // once per step: new scale from history
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "braid/core/dtype.h"
#include "braid/tensor/tensor.h"

namespace braid {
class ProcessGroup;
}

namespace braid::amp {

// TE's recipe.Format: E4M3 everywhere, or HYBRID (E4M3 forward, E5M2 gradients).
enum class Fp8Format : uint8_t { kE4M3, kHybrid };
enum class AmaxComputeAlgo : uint8_t { kMax, kMostRecent };

// The seed's FP8RecipeKwargs / TE's DelayedScaling (defaults as TE's).
struct Fp8RecipeKwargs {
  int margin = 0;    // >= 0
  int interval = 1;  // scales are recomputed every `interval` updates (>= 1)
  Fp8Format fp8_format = Fp8Format::kHybrid;
  int amax_history_len = 1024;  // >= 1
  AmaxComputeAlgo amax_compute_algo = AmaxComputeAlgo::kMax;
};
// "E4M3" / "HYBRID" and "max" / "most_recent" (kInvalidArgument otherwise).
Fp8Format parse_fp8_format(std::string_view name);
AmaxComputeAlgo parse_amax_compute_algo(std::string_view name);

// The fp8 dtype a tensor role uses under a format (E5M2 only for gradients under HYBRID).
enum class Fp8Role : uint8_t { kForward, kGradient };
DType fp8_dtype(Fp8Format format, Fp8Role role);
// Largest finite value: 448 for e4m3 (fn), 57344 for e5m2.
double fp8_max(DType fp8_dtype);

// An fp8 tensor and its scale: real value = data / scale (scale_inv = 1 / scale).
struct Fp8Tensor {
  Tensor data;  // f8e4m3 or f8e5m2
  float scale = 1.0f;
  float scale_inv = 1.0f;
};

// data = saturate_cast(x * scale): values beyond fp8_max clamp to +-fp8_max instead of
// becoming NaN / Inf (as TE casts); NaN stays NaN. x: a float dtype, any device that
// kernels support (CPU here).
Fp8Tensor quantize_fp8(const Tensor& x, DType fp8_dtype, float scale);
// data * scale_inv in `out_dtype` (f32 default).
Tensor dequantize_fp8(const Fp8Tensor& x, DType out_dtype = DType::kF32);

// y = op(a) x op(b) for 2-d fp8 operands with per-tensor scales, accumulated in f32 and
// returned in out_dtype (f32 or bf16). CPU: dequantize both, then the f32 GEMM of
// the cpu kernels (documented: same result as an fp8 tensor core up to accumulation order).
enum class Fp8Trans : uint8_t { kNo, kYes };
Tensor fp8_matmul(const Fp8Tensor& a, const Fp8Tensor& b, Fp8Trans trans_b = Fp8Trans::kNo,
                  DType out_dtype = DType::kF32);

// One tensor's delayed-scaling state.
class DelayedScaling {
 public:
  DelayedScaling(Fp8RecipeKwargs recipe, DType fp8_dtype);

  float scale() const { return scale_; }
  DType dtype() const { return dtype_; }
  const std::vector<float>& amax_history() const { return history_; }  // [0]: this step

  // Quantizes with the current scale and records amax(|x|) into this step's history slot
  // (the max over several calls in one step).
  Fp8Tensor quantize(const Tensor& x);
  // This step's amax so far (history[0]), and setting it (Fp8Training reduces the amaxes of
  // every scaling across ranks in one all_reduce, then updates each without a group).
  float step_amax() const { return history_[0]; }
  void set_step_amax(float amax) { history_[0] = amax; }
  // Ends a step: (every `interval`-th call) amax = max(history) or history[0]; when group is
  // given, amax is all_reduce(max)-ed over it first, so every rank keeps the same scale;
  // scale = (fp8_max / amax) / 2^margin, kept unchanged when amax is 0 or not finite; then
  // the history rolls (history[0] becomes 0 for the next step). Returns the new scale.
  float update(ProcessGroup* group = nullptr);

 private:
  Fp8RecipeKwargs recipe_;
  DType dtype_;
  float scale_ = 1.0f;
  int64_t updates_ = 0;
  std::vector<float> history_;
};

// ---- fp8 training (mixed_precision fp8; docs/mixed-precision.md, "fp8 training") -----------

// What Accelerate's fp8_config says for Transformer Engine: the recipe, and which of a
// Linear's three GEMMs stay in the compute dtype (override_linear_precision: fprop, dgrad,
// wgrad; TE's).
struct Fp8TrainingOptions {
  Fp8RecipeKwargs recipe{};
  bool keep_fprop = false;  // true: the forward GEMM in the compute dtype
  bool keep_dgrad = false;  // the input-gradient GEMM
  bool keep_wgrad = false;  // the weight-gradient GEMM
  // use_autocast_during_eval: layers in eval mode (Module::eval) use fp8 too; false
  // (Accelerate's default): they run in the compute dtype and record no amax.
  bool in_eval = false;
};

// The delayed-scaling state of every Linear trained in fp8 by one model: per layer, the input
// and weight scalings (e4m3) and the output gradient's (e5m2 under HYBRID, else e4m3). A layer
// joins on its first forward under the scope (fp8_training()); the order of first use (the
// same on every data-parallel rank) is the order of the amaxes update() reduces.
class Fp8Training {
 public:
  explicit Fp8Training(Fp8TrainingOptions options = {});
  struct LinearScaling {
    DelayedScaling input, weight, grad_output;
  };
  // The layer's scalings, or null when in_features or out_features is not a multiple of 16:
  // fp8 GEMMs need it (Transformer Engine), and Accelerate's conversion leaves such layers in
  // the compute dtype, as braid does.
  LinearScaling* linear(const void* layer, int64_t in_features, int64_t out_features);
  const Fp8TrainingOptions& options() const { return options_; }
  size_t num_layers() const { return order_.size(); }
  // Ends an optimizer step: every scaling's step amax, all_reduce(max)-ed over `group` in one
  // call (a NaN / Inf amax travels as +Inf and keeps that scale), then each scaling's update:
  // all ranks quantize with the same scales, and since a maximum does not depend on how the
  // micro-batches were split, the scales are the same for any world size.
  void update(ProcessGroup* group = nullptr);

 private:
  Fp8TrainingOptions options_;
  std::vector<std::pair<const void*, std::unique_ptr<LinearScaling>>> order_;
  std::unordered_map<const void*, LinearScaling*> by_layer_;  // order_'s entries, by layer
};

// The Fp8Training of this thread's innermost Fp8Scope; null outside one (Linear runs in the
// autocast dtype then).
Fp8Training* fp8_training();

// Sets the thread's fp8 training state and returns the previous one (Fp8Scope and
// AutocastScope restore it).
Fp8Training* exchange_fp8_training(Fp8Training* training);

// Makes `training` the thread's fp8 state for the scope (null: none), restoring the previous
// one at exit. The Accelerator opens one inside autocast() with mixed_precision fp8.
class Fp8Scope {
 public:
  explicit Fp8Scope(Fp8Training* training);
  ~Fp8Scope();
  Fp8Scope(const Fp8Scope&) = delete;
  Fp8Scope& operator=(const Fp8Scope&) = delete;

 private:
  Fp8Training* previous_;
};

}  // namespace braid::amp
