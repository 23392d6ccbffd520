#include "braid/nn/lr_scheduler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "braid/core/error.h"

namespace braid::nn {
namespace {

SGD make_sgd(double lr = 0.1) {
  return SGD(make_parameters({Tensor::zeros({1})}), {.lr = lr});
}

TEST(LRScheduler, NamesRoundTrip) {
  for (auto t :
       {SchedulerType::kConstant, SchedulerType::kConstantWithWarmup, SchedulerType::kLinear,
        SchedulerType::kCosine, SchedulerType::kCosineWithRestarts, SchedulerType::kPolynomial}) {
    EXPECT_EQ(parse_scheduler_type(scheduler_type_name(t)), t);
  }
  EXPECT_THROW(parse_scheduler_type("onecycle"), Error);
}

TEST(LRScheduler, WarmupThenLinearDecayToZero) {
  SGD opt = make_sgd(1.0);
  LRScheduler s(opt, SchedulerType::kLinear, {.num_warmup_steps = 4, .num_training_steps = 12});
  std::vector<double> lrs = {s.get_last_lr()[0]};
  for (int i = 0; i < 14; ++i) {
    s.step();
    lrs.push_back(s.get_last_lr()[0]);
  }
  EXPECT_EQ(lrs[0], 0.0);
  EXPECT_EQ(lrs[2], 0.5);
  EXPECT_EQ(lrs[4], 1.0);
  EXPECT_EQ(lrs[8], 0.5);
  EXPECT_EQ(lrs[12], 0.0);
  EXPECT_EQ(lrs[14], 0.0);  // clamped past the end
}

TEST(LRScheduler, StateRoundTripsAndValidates) {
  SGD a = make_sgd();
  LRScheduler sa(a, SchedulerType::kCosine, {.num_warmup_steps = 2, .num_training_steps = 20});
  for (int i = 0; i < 7; ++i) sa.step();
  SGD b = make_sgd(0.7);
  LRScheduler sb(b, SchedulerType::kCosine, {.num_warmup_steps = 1, .num_training_steps = 5});
  sb.load_state_json(sa.state_json());
  EXPECT_EQ(sb.last_step(), 7);
  EXPECT_EQ(sb.get_last_lr(), sa.get_last_lr());
  sa.step();
  sb.step();
  EXPECT_EQ(sb.get_last_lr(), sa.get_last_lr());
  SGD c = make_sgd();
  LRScheduler sc(c, SchedulerType::kLinear, {.num_training_steps = 5});
  EXPECT_THROW(sc.load_state_json(sa.state_json()), Error);  // another type
  EXPECT_THROW(sc.load_state_json("[]"), Error);
  EXPECT_THROW(LRScheduler(c, SchedulerType::kCosine, {}), Error);  // no num_training_steps
  SGD tiny = make_sgd(1e-8);
  EXPECT_THROW(LRScheduler(tiny, SchedulerType::kPolynomial, {.num_training_steps = 5}), Error);
}

// Found by tests/fuzz/training_state_fuzz (docs/fuzzing.md): an integer field written as a
// float too large for int64 (1e48) went through nlohmann's get<int64_t>, undefined behaviour.
TEST(LRScheduler, StateWithFloatIntegersIsCorruptData) {
  SGD a = make_sgd();
  LRScheduler sa(a, SchedulerType::kLinear, {.num_warmup_steps = 2, .num_training_steps = 20});
  std::string state = sa.state_json();
  const std::string key = "\"num_training_steps\":20";
  ASSERT_NE(state.find(key), std::string::npos) << state;
  for (const char* value : {"1e48", "20.5"}) {
    std::string bad = state;
    bad.replace(bad.find(key), key.size(), "\"num_training_steps\":" + std::string(value));
    try {
      sa.load_state_json(bad);
      ADD_FAILURE() << "loaded " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kCorruptData) << e.message();
      EXPECT_NE(e.message().find("num_training_steps"), std::string::npos) << e.message();
    }
  }
}

TEST(LRScheduler, AcceleratedStepFollowsAccelerate) {
  SGD opt = make_sgd();
  LRScheduler s(opt, SchedulerType::kConstant, {});
  // Several processes without split_batches: num_processes steps per optimizer step.
  EXPECT_EQ(accelerated_scheduler_step(s, {.num_processes = 4}), 4);
  EXPECT_EQ(s.last_step(), 4);
  EXPECT_EQ(accelerated_scheduler_step(s, {.split_batches = true, .num_processes = 4}), 1);
  EXPECT_EQ(s.last_step(), 5);
  // Inside an accumulation window: no step, but _step_count moves when adjust_scheduler.
  const int64_t count = s.step_count();
  EXPECT_EQ(accelerated_scheduler_step(s, {.sync_gradients = false}), 0);
  EXPECT_EQ(s.step_count(), count + 1);
  EXPECT_EQ(accelerated_scheduler_step(s, {.sync_gradients = false, .adjust_scheduler = false}), 0);
  EXPECT_EQ(s.step_count(), count + 1);
  EXPECT_EQ(s.last_step(), 5);
  // A step the GradScaler skipped does not advance the schedule.
  EXPECT_EQ(accelerated_scheduler_step(s, {.num_processes = 2, .optimizer_step_was_skipped = true}),
            0);
  // Not tied to the optimizer: exactly one step, whatever else is said.
  EXPECT_EQ(accelerated_scheduler_step(s, {.step_with_optimizer = false, .sync_gradients = false}),
            1);
  EXPECT_EQ(s.last_step(), 6);
}

}  // namespace
}  // namespace braid::nn
