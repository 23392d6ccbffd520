// GradScaler (docs/mixed-precision.md, "GradScaler"): torch.amp.GradScaler's stages per
// optimizer (ready -> unscaled -> stepped) and its _amp_update_scale_ rule.
#include "braid/amp/grad_scaler.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "braid/comm/process_group.h"
#include "braid/core/error.h"
#include "braid/kernels/optim.h"
#include "braid/kernels/table.h"
#include "braid/tensor/ops.h"

namespace braid::amp {
namespace {

void check_kwargs(const GradScalerKwargs& k) {
  BRAID_CHECK(std::isfinite(k.init_scale) && k.init_scale > 0, kInvalidArgument,
              "GradScaler init_scale ", k.init_scale, ": expected a finite value > 0");
  BRAID_CHECK(k.growth_factor > 1.0, kInvalidArgument, "GradScaler growth_factor ", k.growth_factor,
              ": expected > 1.0");
  BRAID_CHECK(k.backoff_factor > 0.0 && k.backoff_factor < 1.0, kInvalidArgument,
              "GradScaler backoff_factor ", k.backoff_factor, ": expected in (0, 1)");
  BRAID_CHECK(k.growth_interval > 0, kInvalidArgument, "GradScaler growth_interval ",
              k.growth_interval, ": expected > 0");
}

// Unscales one gradient in place; returns whether it held a non-finite value.
bool unscale_one(Tensor& g, float inv_scale) {
  const DType d = g.dtype();
  BRAID_CHECK(d == DType::kF32 || d == DType::kF16 || d == DType::kBF16, kInvalidArgument,
              "GradScaler.unscale_: gradient dtype ", dtype_name(d), ": expected f32, f16 or bf16");
  Tensor dense = g.contiguous();
  void* data = dense.data_ptr();
  const int64_t n = dense.numel();
  const kernels::KernelTable& k = kernels::kernels_for(g.device());
  kernels::require_support(k, kernels::Op::kUnscaleCheckFinite, d);
  const bool found =
      k.unscale_and_check_finite(kernels::stream_for(g.device()), d, &data, &n, 1, inv_scale);
  if (!dense.shares_storage(g)) g.copy_(dense);
  return found;
}

}  // namespace

GradScaler::GradScaler(GradScalerKwargs kwargs, std::shared_ptr<ProcessGroup> group)
    : enabled_(kwargs.enabled), group_(std::move(group)) {
  check_kwargs(kwargs);
  state_ = {kwargs.init_scale, kwargs.growth_factor, kwargs.backoff_factor, kwargs.growth_interval,
            0};
}

GradScaler GradScaler::for_precision(PrecisionType precision, GradScalerKwargs kwargs,
                                     std::shared_ptr<ProcessGroup> group) {
  return for_policy(PrecisionPolicy::from(precision), kwargs, std::move(group));
}

GradScaler GradScaler::for_policy(const PrecisionPolicy& policy, GradScalerKwargs kwargs,
                                  std::shared_ptr<ProcessGroup> group) {
  if (!policy.needs_grad_scaler()) kwargs.enabled = false;
  return GradScaler(kwargs, std::move(group));
}

GradScaler::PerOptimizer& GradScaler::entry(const ScaledOptimizer& optimizer) {
  return per_optimizer_[&optimizer];
}

Tensor GradScaler::scale(const Tensor& loss) const {
  if (!enabled_) return loss;
  // torch multiplies by its f32 scale tensor: the product is f32 whatever the loss dtype.
  return mul(loss.to(DType::kF32), Scalar(static_cast<double>(static_cast<float>(state_.scale))));
}

bool GradScaler::unscale_(ScaledOptimizer& optimizer) {
  if (!enabled_) return false;
  PerOptimizer& e = entry(optimizer);
  BRAID_CHECK(e.stage == Stage::kReady, kInvalidArgument,
              e.stage == Stage::kUnscaled
                  ? "GradScaler.unscale_: already called on this optimizer since the last update()"
                  : "GradScaler.unscale_: called after step(); call update() first");
  // torch computes inv_scale = scale.double().reciprocal().float().
  const float inv_scale =
      static_cast<float>(1.0 / static_cast<double>(static_cast<float>(state_.scale)));
  bool found = false;
  for (Tensor& g : optimizer.scaled_gradients()) {
    if (g.defined()) found = unscale_one(g, inv_scale) || found;
  }
  if (group_ && group_->size() > 1) {
    // One tiny all-reduce: every rank must skip the same steps, or sharded replicas diverge.
    Tensor flag = Tensor::full({1}, found ? 1.0 : 0.0, DType::kF32);
    CallOptions o;
    o.op = ReduceOp::kMax;
    group_->all_reduce(flag, o);
    found = flag.item() != 0.0;
  }
  e.found_inf = found;
  e.stage = Stage::kUnscaled;
  return found;
}

bool GradScaler::step(ScaledOptimizer& optimizer) {
  if (!enabled_) {
    optimizer.step();
    return true;
  }
  PerOptimizer& e = entry(optimizer);
  BRAID_CHECK(e.stage != Stage::kStepped, kInvalidArgument,
              "GradScaler.step: already called on this optimizer since the last update()");
  if (e.stage == Stage::kReady) unscale_(optimizer);
  const bool stepped = !e.found_inf;
  if (stepped) optimizer.step();
  e.stage = Stage::kStepped;
  return stepped;
}

bool GradScaler::step_was_skipped(const ScaledOptimizer& optimizer) const {
  auto it = per_optimizer_.find(&optimizer);
  return enabled_ && it != per_optimizer_.end() && it->second.stage == Stage::kStepped &&
         it->second.found_inf;
}

void GradScaler::update(std::optional<double> new_scale) {
  if (!enabled_) return;
  if (new_scale) {
    BRAID_CHECK(std::isfinite(*new_scale) && *new_scale > 0, kInvalidArgument,
                "GradScaler.update: new_scale ", *new_scale, ": expected a finite value > 0");
    state_.scale = static_cast<float>(*new_scale);
  } else {
    bool any = false, found = false;
    for (const auto& [opt, e] : per_optimizer_) {
      if (e.stage == Stage::kReady) continue;
      any = true;
      found = found || e.found_inf;
    }
    BRAID_CHECK(any, kInvalidArgument,
                "GradScaler.update: no unscale_() or step() recorded since the last update()");
    // torch's _amp_update_scale_, in the f32 of its scale tensor.
    const float scale = static_cast<float>(state_.scale);
    if (found) {
      state_.scale = scale * static_cast<float>(state_.backoff_factor);
      state_.growth_tracker = 0;
    } else {
      const int64_t successful = state_.growth_tracker + 1;
      if (successful == state_.growth_interval) {
        const float grown = scale * static_cast<float>(state_.growth_factor);
        if (std::isfinite(grown)) state_.scale = grown;
        state_.growth_tracker = 0;
      } else {
        state_.growth_tracker = successful;
      }
    }
  }
  per_optimizer_.clear();
}

void GradScaler::load_state_dict(const GradScalerState& s) {
  BRAID_CHECK(enabled_, kInvalidArgument,
              "GradScaler.load_state_dict: this scaler is disabled; its state cannot be loaded");
  check_kwargs({s.scale, s.growth_factor, s.backoff_factor, s.growth_interval, true});
  BRAID_CHECK(s.growth_tracker >= 0 && s.growth_tracker < s.growth_interval, kInvalidArgument,
              "GradScaler state _growth_tracker ", s.growth_tracker, ": expected in [0, ",
              s.growth_interval, ")");
  state_ = s;
}

std::string GradScaler::state_json() const {
  if (!enabled_) return "{}";
  nlohmann::json j{{"scale", state_.scale},
                   {"growth_factor", state_.growth_factor},
                   {"backoff_factor", state_.backoff_factor},
                   {"growth_interval", state_.growth_interval},
                   {"_growth_tracker", state_.growth_tracker}};
  return j.dump();
}

void GradScaler::load_state_json(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    BRAID_FAIL(kCorruptData, "GradScaler state: not JSON: ", e.what());
  }
  GradScalerState s;
  // Integers only: get<int64_t> converts a JSON float (1e48) with undefined behaviour.
  const auto integer = [&](const char* key) {
    const nlohmann::json& v = j.at(key);
    BRAID_CHECK(v.is_number_integer(), kCorruptData, "GradScaler state: ", key, " is ", v.dump(),
                ", expected an integer");
    return v.get<int64_t>();
  };
  try {
    s.scale = j.at("scale").get<double>();
    s.growth_factor = j.at("growth_factor").get<double>();
    s.backoff_factor = j.at("backoff_factor").get<double>();
    s.growth_interval = integer("growth_interval");
    s.growth_tracker = integer("_growth_tracker");
  } catch (const nlohmann::json::exception& e) {
    BRAID_FAIL(kCorruptData, "GradScaler state: expected keys scale, growth_factor, ",
               "backoff_factor, growth_interval, _growth_tracker: ", e.what());
  }
  load_state_dict(s);
}

}  // namespace braid::amp
