// The Accelerator in one process: accumulation windows, the lazy finish, and bad use. The
// multi-process behaviour is run_accelerator.sh's (label "accel;launch").
#include "braid/accel/accelerator.h"

#include <cmath>
#include <set>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "braid/comm/store.h"
#include "braid/core/error.h"
#include "braid/nn/data_text.h"
#include "braid/nn/gpt.h"
#include "braid/nn/layers.h"
#include "braid/nn/optim.h"

namespace braid::accel {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::shared_ptr<ProcessGroup> one_rank() {
  ProcessGroupOptions o;
  o.backend = "shm";
  o.store = std::make_shared<InMemoryStore>();
  o.rank = 0;
  o.size = 1;
  return ProcessGroup::create(o);
}

std::shared_ptr<nn::Linear> tiny_model() {
  Generator gen(1);
  return std::make_shared<nn::Linear>(4, 2, nn::Bias::kYes, nn::WeightLayout::kOutIn, DType::kF32,
                                      &gen);
}

TEST(Accelerator, OneProcessIsNoAndMainEverywhere) {
  Accelerator acc({}, one_rank());
  EXPECT_EQ(acc.distributed_type(), DistributedType::kNo);
  EXPECT_EQ(acc.num_processes(), 1);
  EXPECT_TRUE(acc.is_main_process());
  EXPECT_TRUE(acc.is_local_main_process());
  EXPECT_TRUE(acc.is_last_process());
  EXPECT_EQ(acc.gradient_accumulation_steps(), 1);
}

TEST(Accelerator, AccumulationWindowsEndEveryNStepsAndAtTheLoadersEnd) {
  AcceleratorConfig cfg;
  cfg.gradient_accumulation_steps = 3;
  Accelerator acc(cfg, one_rank());
  auto model = acc.prepare_model(tiny_model());
  // 8 samples in batches of 1: windows of 3, 3, then 2 closed by the loader's end.
  nn::DataLoader loader(std::make_shared<nn::SyntheticDataset>(nn::SyntheticOptions{.size = 8}),
                        {.batch_size = 1});
  nn::DataLoader data = acc.prepare_data_loader(loader);
  std::string pattern;
  for (const Tree& batch : data) {
    auto scope = acc.accumulate(data);
    pattern += acc.sync_gradients() ? 'S' : '.';
    // sync_each_batch (braid's default) keeps the model syncing every micro-batch.
    EXPECT_TRUE(model->gradient_sync());
    (void)batch;
  }
  EXPECT_EQ(pattern, "..S..S.S");
}

TEST(Accelerator, SyncEachBatchFalseRunsTheWindowWithoutSync) {
  AcceleratorConfig cfg;
  GradientAccumulationPlugin plugin;
  plugin.num_steps = 2;
  plugin.sync_each_batch = false;
  cfg.gradient_accumulation_plugin = plugin;
  Accelerator acc(cfg, one_rank());
  auto model = acc.prepare_model(tiny_model());
  std::string pattern;
  for (int i = 0; i < 4; ++i) {
    auto scope = acc.accumulate();
    pattern += model->gradient_sync() ? 'S' : '.';
  }
  EXPECT_EQ(pattern, ".S.S");
}

TEST(Accelerator, TheStepAveragesTheWindowAndSkipsInsideIt) {
  AcceleratorConfig cfg;
  cfg.gradient_accumulation_steps = 2;
  Accelerator acc(cfg, one_rank());
  auto model = acc.prepare_model(tiny_model());
  nn::SGD opt(model->optimizer_parameters(), {.lr = 1.0});
  acc.prepare_optimizer(opt);
  const Tensor before = model->full_state_dict()[0].second.clone();
  Tensor x = Tensor::ones({1, 4}, DType::kF32);
  for (int i = 0; i < 2; ++i) {
    auto scope = acc.accumulate();
    Tensor y = model->forward(x);
    acc.backward(*model, Tensor::ones(y.shape(), DType::kF32));
    if (i == 0) {
      EXPECT_FALSE(acc.step(opt));  // inside the window: nothing
      EXPECT_THAT([&] { acc.clip_grad_norm_(*model, 1.0); },
                  ::testing::ThrowsMessage<Error>(HasSubstr("end of an accumulation window")));
    } else {
      EXPECT_TRUE(acc.step(opt));
    }
  }
  // Two identical micro-batches averaged: d(sum y)/dW = x = 1 for every weight: W -= 1.
  const Tensor after = model->full_state_dict()[0].second;
  for (int64_t i = 0; i < after.numel(); ++i) {
    EXPECT_FLOAT_EQ(after.data<float>()[i], before.data<float>()[i] - 1.0f);
  }
}

TEST(Accelerator, BadUseIsAnError) {
  Accelerator acc({}, one_rank());
  EXPECT_THAT([&] { acc.save_state(); },
              ::testing::ThrowsMessage<Error>(HasSubstr("prepare a model first")));
  acc.prepare_model(tiny_model());
  EXPECT_THAT([&] { acc.save_state(); },
              ::testing::ThrowsMessage<Error>(HasSubstr("automatic_checkpoint_naming")));
  EXPECT_THAT([&] { acc.load_state(std::filesystem::temp_directory_path() / "braid_no_such"); },
              ::testing::ThrowsMessage<Error>(HasSubstr("is not a saved state")));
  EXPECT_THAT([&] { acc.register_for_checkpointing({}); },
              ::testing::ThrowsMessage<Error>(HasSubstr("needs state_json")));
  auto scope = acc.accumulate();
  EXPECT_THAT([&] { acc.accumulate(); }, ::testing::ThrowsMessage<Error>(HasSubstr("do not nest")));
}

// MULTI_GPU is never run silently on the CPU: it is refused with why (here, where no GPU is
// visible, CUDA's reason; on a GPU machine, that GPU training is not available yet).
TEST(Accelerator, MultiGpuIsRefusedNotRunOnTheCpu) {
  AcceleratorConfig c;
  c.distributed_type = DistributedType::kMultiGpu;
  EXPECT_THAT([&] { Accelerator acc(c, one_rank()); },
              ::testing::ThrowsMessage<Error>(
                  AllOf(HasSubstr("distributed_type MULTI_GPU"), HasSubstr("use MULTI_CPU"))));
  try {
    Accelerator acc(c, one_rank());
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotSupported);
  }
}

// Model parallelism's errors that one process can reach; the layouts themselves are
// run_accelerator.sh's "parallel" variant.
TEST(Accelerator, ModelParallelBadUseIsAnError) {
  AcceleratorConfig mp;
  mp.megatron_lm_plugin = MegatronLMPlugin{.tp_degree = 2};
  EXPECT_THAT([&] { Accelerator bad(mp, one_rank()); },
              ::testing::ThrowsMessage<Error>(
                  HasSubstr("1 processes are not a multiple of tp_degree x pp_degree = 2 x 1")));

  Accelerator acc({}, one_rank());
  nn::GPTConfig c;
  c.vocab_size = 11;
  c.n_positions = 8;
  c.n_embd = 8;
  c.n_layer = 1;
  c.n_head = 2;
  nn::GPT gpt(c);
  Generator gen(3);
  gpt.init_weights(gen);
  auto pipe = acc.prepare_pipeline(gpt);  // one stage on one process
  EXPECT_THAT([&] { acc.prepare_model(tiny_model()); },
              ::testing::ThrowsMessage<Error>(HasSubstr("a pipeline is already prepared")));
  EXPECT_THAT([&] { acc.prepare_pipeline(gpt); },
              ::testing::ThrowsMessage<Error>(HasSubstr("one model (or pipeline)")));
  EXPECT_THAT([&] { acc.clip_grad_norm_(*pipe, 1.0); },
              ::testing::ThrowsMessage<Error>(HasSubstr("run pipeline_step first")));
  nn::AdamW opt(pipe->parameters(), {});
  acc.prepare_optimizer(opt);
  EXPECT_THAT([&] { acc.step(opt); },
              ::testing::ThrowsMessage<Error>(HasSubstr("run pipeline_step first")));
  Tensor ids = Tensor::zeros({1, 4}, DType::kI64);
  {
    auto scope = acc.accumulate();
    EXPECT_THAT([&] { acc.pipeline_step(*pipe, {ids}, {ids}); },
                ::testing::ThrowsMessage<Error>(HasSubstr("call it outside accumulate()")));
  }
  Accelerator other({}, one_rank());
  auto foreign = other.prepare_pipeline(gpt);
  EXPECT_THAT([&] { acc.pipeline_step(*foreign, {ids}, {ids}); },
              ::testing::ThrowsMessage<Error>(HasSubstr("not prepared by this Accelerator")));
  // The right use: one window, a finite norm, a step.
  const double loss = acc.pipeline_step(*pipe, {ids}, {ids});
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_TRUE(acc.sync_gradients());
  EXPECT_TRUE(std::isfinite(acc.clip_grad_norm_(*pipe, 1.0)));
  EXPECT_TRUE(acc.step(opt));
  // get_state_dict: the whole GPT under its names.
  const NamedTensors state = acc.get_state_dict(*pipe);
  std::set<std::string> names;
  for (auto& [name, t] : state) names.insert(name);
  for (auto& [name, p] : gpt.named_parameters()) {
    EXPECT_TRUE(names.count(name)) << name;
  }
}

}  // namespace
}  // namespace braid::accel
