// SPDX-License-Identifier: Apache-2.0
// Learning-rate schedules (docs/mixed-precision.md, "LR schedules"): Hugging Face
// transformers' get_scheduler family, driven like torch's LambdaLR (lr = initial_lr *
// factor(step)), and AcceleratedScheduler's stepping rules under gradient accumulation and
// several processes.
//
//   braid::nn::LRScheduler sched(opt, braid::nn::SchedulerType::kCosine,
//                                {.num_warmup_steps = 100, .num_training_steps = 10000});
//   ... opt.step(); sched.step();
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "braid/nn/optim.h"

namespace braid::nn {

// transformers.SchedulerType names: "constant", "constant_with_warmup", "linear", "cosine",
// "cosine_with_restarts", "polynomial".
enum class SchedulerType : uint8_t {
  kConstant,
  kConstantWithWarmup,
  kLinear,
  kCosine,
  kCosineWithRestarts,
  kPolynomial
};
SchedulerType parse_scheduler_type(std::string_view name);  // kInvalidArgument lists names
std::string_view scheduler_type_name(SchedulerType type);

struct ScheduleOptions {
  int64_t num_warmup_steps = 0;
  int64_t num_training_steps = 0;  // needed by linear, cosine*, polynomial (> 0)
  double num_cycles = -1;          // cosine: 0.5, cosine_with_restarts: 1 when left at -1
  double lr_end = 1e-7;            // polynomial
  double power = 1.0;              // polynomial
};

// The multiplier of initial_lr at `step` (transformers' lr_lambda), in double.
double schedule_factor(SchedulerType type, const ScheduleOptions& options, int64_t step,
                       double initial_lr);

class LRScheduler {
 public:
  // Sets every group's lr to initial_lr * factor(0) (torch's LambdaLR constructor).
  LRScheduler(Optimizer& optimizer, SchedulerType type, ScheduleOptions options);
  // Advances one step and sets every group's lr.
  void step();
  int64_t last_step() const { return last_step_; }  // torch's last_epoch
  std::vector<double> get_last_lr() const;

  // {"type", "options", "last_epoch", "step_count", "base_lrs"} as JSON text.
  std::string state_json() const;
  void load_state_json(const std::string& json);

  // torch's _step_count (AcceleratedScheduler counts skipped accumulation steps in it).
  int64_t step_count() const { return step_count_; }
  void bump_step_count() { ++step_count_; }

 private:
  void apply();
  Optimizer& optimizer_;
  SchedulerType type_;
  ScheduleOptions options_;
  int64_t last_step_ = 0;
  int64_t step_count_ = 1;
};

// Accelerate's AcceleratedScheduler.step, with its inputs explicit instead of global state.
struct AcceleratedStepContext {
  bool step_with_optimizer = true;  // false: step exactly once per call
  bool sync_gradients = true;       // false inside a gradient-accumulation window
  bool adjust_scheduler = true;     // GradientAccumulationPlugin.adjust_scheduler
  bool split_batches = false;       // true: one step per call; false: num_processes steps
  int num_processes = 1;
  bool optimizer_step_was_skipped = false;  // GradScaler skipped the step (Inf/NaN)
};
// Returns how many times `scheduler.step()` ran.
int accelerated_scheduler_step(LRScheduler& scheduler, const AcceleratedStepContext& context);

}  // namespace braid::nn
