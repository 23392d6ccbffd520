// transformers' schedules as factors of the initial lr, LambdaLR-style stepping, and
// Accelerate's AcceleratedScheduler rules (docs/mixed-precision.md, "LR schedules").
#include "braid/nn/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numbers>

#include "braid/core/error.h"

namespace braid::nn {
namespace {

constexpr std::pair<SchedulerType, std::string_view> kNames[] = {
    {SchedulerType::kConstant, "constant"},
    {SchedulerType::kConstantWithWarmup, "constant_with_warmup"},
    {SchedulerType::kLinear, "linear"},
    {SchedulerType::kCosine, "cosine"},
    {SchedulerType::kCosineWithRestarts, "cosine_with_restarts"},
    {SchedulerType::kPolynomial, "polynomial"},
};

double warmup_factor(int64_t step, int64_t warmup) {
  return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup));
}

void check_options(SchedulerType type, const ScheduleOptions& o) {
  BRAID_CHECK(o.num_warmup_steps >= 0, kInvalidArgument, "LR schedule num_warmup_steps ",
              o.num_warmup_steps, ": expected >= 0");
  const bool needs_total =
      type != SchedulerType::kConstant && type != SchedulerType::kConstantWithWarmup;
  BRAID_CHECK(!needs_total || o.num_training_steps > 0, kInvalidArgument, "LR schedule '",
              scheduler_type_name(type), "' needs num_training_steps > 0, got ",
              o.num_training_steps);
}

}  // namespace

SchedulerType parse_scheduler_type(std::string_view name) {
  for (const auto& [t, n] : kNames) {
    if (n == name) return t;
  }
  BRAID_FAIL(kInvalidArgument, "LR scheduler type '", name,
             "': expected constant, constant_with_warmup, linear, cosine, cosine_with_restarts "
             "or polynomial");
}

std::string_view scheduler_type_name(SchedulerType type) {
  for (const auto& [t, n] : kNames) {
    if (t == type) return n;
  }
  return "?";
}

double schedule_factor(SchedulerType type, const ScheduleOptions& o, int64_t step,
                       double initial_lr) {
  const int64_t warmup = o.num_warmup_steps;
  const int64_t total = o.num_training_steps;
  switch (type) {
    case SchedulerType::kConstant:
      return 1.0;
    case SchedulerType::kConstantWithWarmup:
      return step < warmup ? warmup_factor(step, warmup) : 1.0;
    case SchedulerType::kLinear:
      if (step < warmup) return warmup_factor(step, warmup);
      return std::max(0.0, static_cast<double>(total - step) /
                               static_cast<double>(std::max<int64_t>(1, total - warmup)));
    case SchedulerType::kCosine: {
      if (step < warmup) return warmup_factor(step, warmup);
      const double cycles = o.num_cycles < 0 ? 0.5 : o.num_cycles;
      const double progress = static_cast<double>(step - warmup) /
                              static_cast<double>(std::max<int64_t>(1, total - warmup));
      return std::max(0.0, 0.5 * (1.0 + std::cos(std::numbers::pi * cycles * 2.0 * progress)));
    }
    case SchedulerType::kCosineWithRestarts: {
      if (step < warmup) return warmup_factor(step, warmup);
      const double cycles = o.num_cycles < 0 ? 1.0 : o.num_cycles;
      const double progress = static_cast<double>(step - warmup) /
                              static_cast<double>(std::max<int64_t>(1, total - warmup));
      if (progress >= 1.0) return 0.0;
      return std::max(0.0,
                      0.5 * (1.0 + std::cos(std::numbers::pi * std::fmod(cycles * progress, 1.0))));
    }
    case SchedulerType::kPolynomial: {
      BRAID_CHECK(initial_lr > o.lr_end, kInvalidArgument, "polynomial LR schedule: lr_end (",
                  o.lr_end, ") must be smaller than the initial lr (", initial_lr, ")");
      if (step < warmup) return warmup_factor(step, warmup);
      if (step > total) return o.lr_end / initial_lr;
      const double range = initial_lr - o.lr_end;
      const double decay_steps = static_cast<double>(total - warmup);
      const double remaining = 1.0 - static_cast<double>(step - warmup) / decay_steps;
      return (range * std::pow(remaining, o.power) + o.lr_end) / initial_lr;
    }
  }
  return 1.0;
}

LRScheduler::LRScheduler(Optimizer& optimizer, SchedulerType type, ScheduleOptions options)
    : optimizer_(optimizer), type_(type), options_(options) {
  check_options(type, options);
  apply();
}

void LRScheduler::apply() {
  for (ParamGroup& g : optimizer_.param_groups()) {
    g.options.lr = g.initial_lr * schedule_factor(type_, options_, last_step_, g.initial_lr);
  }
}

void LRScheduler::step() {
  ++step_count_;
  ++last_step_;
  apply();
}

std::vector<double> LRScheduler::get_last_lr() const {
  std::vector<double> out;
  for (const ParamGroup& g : optimizer_.param_groups()) out.push_back(g.options.lr);
  return out;
}

std::string LRScheduler::state_json() const {
  std::vector<double> base;
  for (const ParamGroup& g : optimizer_.param_groups()) base.push_back(g.initial_lr);
  nlohmann::json j{{"type", scheduler_type_name(type_)},
                   {"num_warmup_steps", options_.num_warmup_steps},
                   {"num_training_steps", options_.num_training_steps},
                   {"num_cycles", options_.num_cycles},
                   {"lr_end", options_.lr_end},
                   {"power", options_.power},
                   {"last_epoch", last_step_},
                   {"_step_count", step_count_},
                   {"base_lrs", base}};
  return j.dump();
}

void LRScheduler::load_state_json(const std::string& text) {
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    // Integers only: get<int64_t> converts a JSON float (1e48) with undefined behaviour.
    const auto integer = [&](const char* key) {
      const nlohmann::json& v = j.at(key);
      BRAID_CHECK(v.is_number_integer(), kCorruptData, "LR scheduler state: ", key, " is ",
                  v.dump(), ", expected an integer");
      return v.get<int64_t>();
    };
    const SchedulerType type = parse_scheduler_type(j.at("type").get<std::string>());
    BRAID_CHECK(type == type_, kInvalidArgument, "LR scheduler state: saved for '",
                scheduler_type_name(type), "', loading into '", scheduler_type_name(type_), "'");
    const auto base = j.at("base_lrs").get<std::vector<double>>();
    auto& groups = optimizer_.param_groups();
    BRAID_CHECK(base.size() == groups.size(), kInvalidArgument, "LR scheduler state: ", base.size(),
                " base lrs saved, the optimizer has ", groups.size(), " groups");
    options_.num_warmup_steps = integer("num_warmup_steps");
    options_.num_training_steps = integer("num_training_steps");
    options_.num_cycles = j.at("num_cycles").get<double>();
    options_.lr_end = j.at("lr_end").get<double>();
    options_.power = j.at("power").get<double>();
    check_options(type_, options_);
    last_step_ = integer("last_epoch");
    step_count_ = integer("_step_count");
    for (size_t i = 0; i < groups.size(); ++i) groups[i].initial_lr = base[i];
  } catch (const nlohmann::json::exception& e) {
    BRAID_FAIL(kCorruptData, "LR scheduler state: malformed JSON: ", e.what());
  }
  apply();
}

int accelerated_scheduler_step(LRScheduler& scheduler, const AcceleratedStepContext& c) {
  if (!c.step_with_optimizer) {
    scheduler.step();
    return 1;
  }
  if (!c.sync_gradients) {
    // Inside an accumulation window the optimizer did not step; Accelerate still counts it
    // in _step_count so torch's "scheduler before optimizer" warning stays quiet.
    if (c.adjust_scheduler) scheduler.bump_step_count();
    return 0;
  }
  if (c.optimizer_step_was_skipped) return 0;
  BRAID_CHECK(c.num_processes >= 1, kInvalidArgument, "accelerated_scheduler_step: num_processes ",
              c.num_processes, ": expected >= 1");
  // Without split_batches every process consumed its own batch: the schedule was written for
  // one batch per step, so it advances num_processes steps.
  const int steps = c.split_batches ? 1 : c.num_processes;
  for (int i = 0; i < steps; ++i) scheduler.step();
  return steps;
}

}  // namespace braid::nn
