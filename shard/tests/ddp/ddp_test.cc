// Stage 0 (DDP) of ShardedModel: buckets, DistributedDataParallelKwargs and stage-0 mixed
// precision. The multi-process equivalence runs in run_fsdp_equivalence.sh (variant ddp).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "braid/comm/store.h"
#include "braid/core/error.h"
#include "braid/nn/gpt.h"
#include "braid/nn/layers.h"
#include "braid/nn/optim.h"
#include "braid/shard/fsdp.h"
#include "braid/tensor/ops.h"
#include "comm_test_util.h"

namespace braid::shard {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<ProcessGroup> one_rank_group() {
  return braid::testing::make_group(0, 1, std::make_shared<InMemoryStore>());
}

std::shared_ptr<nn::GPT> tiny_gpt() {
  nn::GPTConfig c;
  c.vocab_size = 11;
  c.n_positions = 8;
  c.n_embd = 8;
  c.n_layer = 2;
  c.n_head = 2;
  c.embd_pdrop = c.attn_pdrop = c.resid_pdrop = 0.0;
  auto gpt = std::make_shared<nn::GPT>(c);
  Generator gen(3);
  gpt->init_weights(gen);
  return gpt;
}

Tensor tiny_ids() {
  return Tensor::from_vector({1, 2, 3, 4, 5, 6}, {1, 6}, DType::kI64);
}

// Two linear branches of which forward uses only the first (unless told otherwise), and a
// buffer added to the output (for broadcast_buffers).
class TwoBranches : public nn::Layer {
 public:
  TwoBranches() : Layer("TwoBranches") {
    Generator gen(5);
    a_ = register_module(
        "a", std::make_shared<nn::Linear>(3, 3, nn::Bias::kYes, nn::WeightLayout::kOutIn,
                                          DType::kF32, &gen));
    b_ = register_module(
        "b", std::make_shared<nn::Linear>(3, 3, nn::Bias::kYes, nn::WeightLayout::kOutIn,
                                          DType::kF32, &gen));
    register_buffer("shift", Tensor::zeros({3}, DType::kF32));
  }
  bool use_b = false;

 protected:
  Tensor forward_impl(const Tensor& x) override {
    Tensor y = a_->forward(x);
    if (use_b) y = add(y, b_->forward(x));
    return add(y, buffer("shift"));
  }
  Tensor backward_impl(const Tensor& g) override {
    Tensor gx = a_->backward(g);
    if (use_b) gx = add(gx, b_->backward(g));
    return gx;
  }

 private:
  std::shared_ptr<nn::Linear> a_, b_;
};

std::vector<std::string> reversed_unit_order(const ShardedModel& sm) {
  std::vector<std::string> names;
  for (const auto& u : sm.units()) {
    for (const auto& up : u.params) names.push_back(up.name);
  }
  std::reverse(names.begin(), names.end());
  return names;
}

TEST(DdpBuckets, ReverseRegistrationOrderCutAtTheCapWithASmallFirstBucket) {
  // Default 25 MB: the tiny model fits the 1 MiB first bucket.
  {
    auto gpt = tiny_gpt();
    ShardedModel sm(gpt, one_rank_group(), {.stage = ZeroStage::k0});
    const auto buckets = sm.bucket_parameter_names();
    ASSERT_EQ(buckets.size(), 1u);
    EXPECT_EQ(buckets[0], reversed_unit_order(sm));
  }
  // A 200-byte cap (50 f32): every bucket but those of a larger single parameter stays under.
  auto gpt = tiny_gpt();
  const double cap_mb = 200.0 / (1024.0 * 1024.0);
  ShardedModel sm(gpt, one_rank_group(),
                  {.stage = ZeroStage::k0, .ddp = {.bucket_cap_mb = cap_mb}});
  const auto buckets = sm.bucket_parameter_names();
  EXPECT_GT(buckets.size(), 5u);
  std::map<std::string, int64_t> numel;
  for (const auto& u : sm.units()) {
    for (const auto& up : u.params) numel[up.name] = up.numel;
  }
  std::vector<std::string> flat;
  for (const auto& b : buckets) {
    ASSERT_FALSE(b.empty());
    int64_t n = 0;
    for (const auto& name : b) n += numel.at(name);
    if (b.size() > 1) {
      EXPECT_LE(n * 4, 200) << b.front();
    }
    flat.insert(flat.end(), b.begin(), b.end());
  }
  EXPECT_EQ(flat, reversed_unit_order(sm));
}

TEST(DdpBuckets, TheBackwardReducesEveryBucketAndNoSyncKeepsLocalGradients) {
  auto gpt = tiny_gpt();
  const double cap_mb = 200.0 / (1024.0 * 1024.0);
  ShardedModel sm(gpt, one_rank_group(),
                  {.stage = ZeroStage::k0, .ddp = {.bucket_cap_mb = cap_mb}});
  // no_sync: the gradients stay in the parameters, accumulating.
  sm.set_gradient_sync(false);
  Tensor logits = sm.forward(tiny_ids());
  sm.backward(Tensor::ones(logits.shape()));
  for (auto& p : gpt->parameters()) EXPECT_TRUE(p.grad().defined());
  // With sync, each bucket took its gradients as the backward produced them.
  sm.set_gradient_sync(true);
  logits = sm.forward(tiny_ids());
  sm.backward(Tensor::ones(logits.shape()));
  for (auto& p : gpt->parameters()) EXPECT_FALSE(p.grad().defined());
  sm.finish_gradients(0.5);
  // Two identical micro-batches, scaled by 1/2: the gradient of one.
  auto ref = tiny_gpt();
  logits = ref->forward(tiny_ids());
  ref->backward(Tensor::ones(logits.shape()));
  const auto got = gpt->named_parameters();
  const auto want = ref->named_parameters();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i].second.grad().defined()) << got[i].first;
    EXPECT_LE(amax(abs(sub(got[i].second.grad(), want[i].second.grad()))).item(), 1e-6)
        << got[i].first;
  }
}

TEST(Ddp, AnUnusedParameterIsAnErrorUnlessFindUnusedParameters) {
  {
    auto model = std::make_shared<TwoBranches>();
    ShardedModel sm(model, one_rank_group(), {.stage = ZeroStage::k0});
    Tensor y = sm.forward(Tensor::ones({2, 3}));
    std::string message;
    try {
      sm.backward(Tensor::ones(y.shape()));
    } catch (const Error& e) {
      message = e.what();
    }
    EXPECT_THAT(message, AllOf(HasSubstr("got no gradient in this backward: 'b.bias', 'b.weight'"),
                               HasSubstr("find_unused_parameters")));
  }
  auto model = std::make_shared<TwoBranches>();
  ShardedModel sm(model, one_rank_group(),
                  {.stage = ZeroStage::k0, .ddp = {.find_unused_parameters = true}});
  Tensor y = sm.forward(Tensor::ones({2, 3}));
  sm.backward(Tensor::ones(y.shape()));
  sm.finish_gradients(1.0);
  auto& b = model->get_submodule("b");
  EXPECT_EQ(amax(abs(b.param("weight").grad())).item(), 0.0);
  EXPECT_GT(amax(abs(model->get_submodule("a").param("weight").grad())).item(), 0.0);
}

TEST(Ddp, GradientAsBucketViewLeavesGradientsInOneBuffer) {
  for (bool view : {false, true}) {
    auto gpt = tiny_gpt();
    ShardedModel sm(gpt, one_rank_group(),
                    {.stage = ZeroStage::k0, .ddp = {.gradient_as_bucket_view = view}});
    Tensor logits = sm.forward(tiny_ids());
    sm.backward(Tensor::ones(logits.shape()));
    sm.finish_gradients(1.0);
    // With views, consecutive parameters of the bucket are consecutive in one buffer.
    std::map<std::string, nn::Parameter> by_name;
    for (auto& [n, p] : gpt->named_parameters()) by_name[n] = p;
    const auto bucket = sm.bucket_parameter_names().at(0);
    bool one_buffer = true;
    for (size_t i = 0; i + 1 < bucket.size(); ++i) {
      const Tensor& a = by_name.at(bucket[i]).grad();
      const Tensor& b = by_name.at(bucket[i + 1]).grad();
      const auto* pa = static_cast<const char*>(a.data_ptr());
      const auto* pb = static_cast<const char*>(b.data_ptr());
      if (pb - pa != static_cast<std::ptrdiff_t>(a.nbytes())) one_buffer = false;
    }
    EXPECT_EQ(one_buffer, view) << "gradient_as_bucket_view " << view;
  }
}

TEST(Ddp, Bf16ParametersAtStageZeroStepF32Masters) {
  auto gpt = tiny_gpt();
  NamedTensors before;
  for (auto& [n, t] : gpt->state_dict()) before.emplace_back(n, t.clone());
  ShardedModel sm(gpt, one_rank_group(),
                  {.stage = ZeroStage::k0, .precision = amp::PrecisionPolicy::from("bf16")});
  for (auto& p : gpt->parameters()) EXPECT_EQ(p.data().dtype(), DType::kBF16);
  const auto masters = sm.optimizer_parameters();
  ASSERT_EQ(masters.size(), gpt->parameters().size());
  for (auto& m : masters) EXPECT_EQ(m.data().dtype(), DType::kF32);
  // The state dict holds the f32 values, not their bf16 copies.
  NamedTensors full = sm.full_state_dict();
  ASSERT_EQ(full.size(), before.size());
  for (size_t i = 0; i < full.size(); ++i) {
    EXPECT_TRUE(equal(full[i].second, before[i].second)) << full[i].first;
  }
  nn::SGD opt(masters, {.lr = 0.1});
  Tensor logits = sm.forward(tiny_ids());
  sm.backward(Tensor::ones(logits.shape()));
  sm.finish_gradients(1.0);
  for (auto& m : masters) EXPECT_TRUE(m.grad().defined());
  opt.step();
  sm.after_step();
  const auto named = gpt->named_parameters();
  full = sm.full_state_dict();
  for (auto& [name, p] : named) {
    auto it = std::find_if(full.begin(), full.end(), [&](auto& e) { return e.first == name; });
    ASSERT_NE(it, full.end());
    EXPECT_TRUE(equal(p.data(), it->second.to(DType::kBF16))) << name;
    EXPECT_FALSE(equal(it->second, before[static_cast<size_t>(it - full.begin())].second)) << name;
  }
}

TEST(Ddp, BroadcastBuffersCopiesRankZerosBuffersBeforeEachForward) {
  for (bool broadcast : {true, false}) {
    auto result = braid::testing::run_threads(2, [&](int rank, int size, auto store) {
      auto pg = braid::testing::make_group(rank, size, store);
      auto model = std::make_shared<TwoBranches>();
      model->use_b = true;
      ShardedModel sm(model, pg, {.stage = ZeroStage::k0, .ddp = {.broadcast_buffers = broadcast}});
      model->buffer("shift").fill_(static_cast<double>(rank + 1));
      Tensor y = sm.forward(Tensor::ones({2, 3}));
      sm.backward(Tensor::ones(y.shape()));
      const double want = broadcast ? 1.0 : static_cast<double>(rank + 1);
      EXPECT_EQ(amax(model->buffer("shift")).item(), want) << "rank " << rank;
      sm.finish_gradients(0.5);
    });
    EXPECT_TRUE(result.ok()) << result.summary();
  }
}

TEST(Ddp, BadOptionsAreErrors) {
  auto pg = one_rank_group();
  auto gpt = tiny_gpt();
  EXPECT_THAT(
      [&] { ShardedModel sm(gpt, pg, {.stage = ZeroStage::k0, .ddp = {.bucket_cap_mb = 0}}); },
      ::testing::ThrowsMessage<Error>(HasSubstr("bucket_cap_mb must be > 0")));
  EXPECT_THAT([&] { ShardedModel sm(gpt, pg, {.stage = ZeroStage::k1, .deterministic = false}); },
              ::testing::ThrowsMessage<Error>(HasSubstr("applies to stage 0 and to HSDP")));
  EXPECT_THAT(
      [&] {
        ShardedModel sm(gpt, pg,
                        {.stage = ZeroStage::k0,
                         .precision = {.reduce_dtype = DType::kBF16},
                         .ddp = {.comm_hook = DDPCommunicationHookType::kFp16}});
      },
      ::testing::ThrowsMessage<Error>(
          HasSubstr("comm_hook asks for f16 but precision.reduce_dtype is bf16")));
  EXPECT_THAT(
      [&] {
        ShardedModel sm(gpt, pg, {.stage = ZeroStage::k0});
        sm.finish_gradients(1);
      },
      ::testing::ThrowsMessage<Error>(HasSubstr("no gradient was reduced")));
}

}  // namespace
}  // namespace braid::shard
