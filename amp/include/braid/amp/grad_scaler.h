// SPDX-License-Identifier: Apache-2.0
// GradScaler: dynamic loss scaling for fp16 with torch.amp.GradScaler's semantics and the
// seed's GradScalerKwargs defaults (docs/mixed-precision.md, "GradScaler").
//
//   braid::amp::GradScaler scaler({}, group);          // group: agree on found-inf (or null)
//   Tensor loss = ...;  backward(scaler.scale(loss));  // gradients are scaled by scale()
//   scaler.unscale_(opt);                               // optional: before clipping
//   clip_grad_norm_(grads, 1.0);
//   scaler.step(opt);                                   // skipped when any rank found Inf/NaN
//   scaler.update();
//
// Disabled (enabled = false, or made by for_precision for anything but fp16): scale()
// returns the loss, unscale_ does nothing, step() steps, update() does nothing — as torch's
// disabled scaler. bf16 needs no scaling: its exponent range is f32's.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "braid/amp/precision.h"
#include "braid/tensor/tensor.h"

namespace braid {
class ProcessGroup;
}

namespace braid::amp {

// The seed's GradScalerKwargs.
struct GradScalerKwargs {
  double init_scale = 65536.0;
  double growth_factor = 2.0;      // > 1
  double backoff_factor = 0.5;     // in (0, 1)
  int64_t growth_interval = 2000;  // > 0
  bool enabled = true;
};

// What the scaler needs of an optimizer (nn::Optimizer implements it; any framework's
// optimizer can): its gradients, and a step that reads them.
class ScaledOptimizer {
 public:
  virtual ~ScaledOptimizer() = default;
  // Every gradient the next step() reads (undefined tensors are skipped).
  virtual std::vector<Tensor> scaled_gradients() = 0;
  virtual void step() = 0;
};

struct GradScalerState {
  double scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  int64_t growth_tracker = 0;  // torch's "_growth_tracker"
};

class GradScaler {
 public:
  // group: found-inf is agreed across its ranks with one 4-byte all_reduce(max) per
  // optimizer step (null, or a one-rank group: local only). Throws kInvalidArgument for
  // out-of-range kwargs, naming the field.
  explicit GradScaler(GradScalerKwargs kwargs = {}, std::shared_ptr<ProcessGroup> group = nullptr);
  // Enabled only for fp16 (Accelerate creates a scaler only then).
  static GradScaler for_precision(PrecisionType precision, GradScalerKwargs kwargs = {},
                                  std::shared_ptr<ProcessGroup> group = nullptr);
  // Enabled exactly when policy.needs_grad_scaler() (and kwargs.enabled): the Accelerator's
  // scaler for its resolved policy.
  static GradScaler for_policy(const PrecisionPolicy& policy, GradScalerKwargs kwargs = {},
                               std::shared_ptr<ProcessGroup> group = nullptr);

  bool is_enabled() const { return enabled_; }
  // The current scale (1.0 when disabled, as torch's get_scale).
  double get_scale() const { return enabled_ ? state_.scale : 1.0; }
  int64_t growth_tracker() const { return state_.growth_tracker; }

  // loss * scale, computed in f32 and returned as f32 (torch multiplies by its f32 scale
  // tensor). Disabled: the loss itself.
  Tensor scale(const Tensor& loss) const;

  // Divides the optimizer's gradients by the scale in one fused pass that also detects NaN
  // and Inf (kernels' unscale_and_check_finite), then agrees on found-inf across the group.
  // At most once per optimizer between update() calls (kInvalidArgument otherwise, as
  // torch). Returns whether any rank found a non-finite gradient.
  bool unscale_(ScaledOptimizer& optimizer);

  // Unscales when unscale_ was not called, then steps the optimizer unless any rank found
  // Inf/NaN. Returns true when the optimizer stepped. Once per optimizer between updates.
  bool step(ScaledOptimizer& optimizer);
  // True when the last step() of `optimizer` was skipped (Accelerate's step_was_skipped).
  bool step_was_skipped(const ScaledOptimizer& optimizer) const;

  // After every optimizer has stepped: backs off when any of them found Inf/NaN, grows
  // after growth_interval clean updates (torch's _amp_update_scale_). new_scale replaces the
  // scale instead (and keeps the tracker, as torch). Needs at least one unscale_ / step
  // since the last update (kInvalidArgument otherwise) unless new_scale is given.
  void update(std::optional<double> new_scale = {});

  // torch's state_dict keys: scale, growth_factor, backoff_factor, growth_interval,
  // _growth_tracker. Disabled: an empty state, and loading one into an enabled scaler throws.
  GradScalerState state_dict() const { return state_; }
  void load_state_dict(const GradScalerState& state);
  // The same as JSON text ({"scale": 65536.0, ...}), the form checkpoints store.
  std::string state_json() const;
  void load_state_json(const std::string& json);

 private:
  enum class Stage : uint8_t { kReady, kUnscaled, kStepped };
  struct PerOptimizer {
    Stage stage = Stage::kReady;
    bool found_inf = false;
  };
  PerOptimizer& entry(const ScaledOptimizer& optimizer);

  bool enabled_;
  GradScalerState state_;
  std::shared_ptr<ProcessGroup> group_;
  std::map<const ScaledOptimizer*, PerOptimizer> per_optimizer_;
};

}  // namespace braid::amp
