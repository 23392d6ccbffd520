// GPT stages and the pipeline runtime in one process: chained GPTStages compute GPT's logits
// and gradients bit for bit (the tied embedding's two parts added in GPT's order);
// GPTStage::init_weights gives GPT::init_weights' values; a one-rank pipeline (one stage, or two
// chunks with local channels) trains to the bits of single-process gradient accumulation. The
// multi-rank runs are pp_worker under braid launch (run_pp.sh).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <map>

#include "braid/comm/store.h"
#include "braid/core/error.h"
#include "braid/nn/gpt.h"
#include "braid/nn/optim.h"
#include "braid/shard/pipeline.h"
#include "braid/tensor/ops.h"

namespace braid::shard {
namespace {

using ::testing::HasSubstr;

nn::GPTConfig config() {
  nn::GPTConfig c;
  c.vocab_size = 37;
  c.n_positions = 16;
  c.n_embd = 24;
  c.n_layer = 4;
  c.n_head = 4;
  c.embd_pdrop = c.attn_pdrop = c.resid_pdrop = 0.0;
  return c;
}

std::pair<Tensor, Tensor> micro_batch(int64_t step, int64_t m) {
  Generator gen(1000003 * static_cast<uint64_t>(step) + static_cast<uint64_t>(m));
  Tensor data = Tensor::empty({2, 13}, DType::kI64);
  gen.fill_randint(data.data<int64_t>(), data.numel(), 0, 37);
  return {data.narrow(1, 0, 12).contiguous(), data.narrow(1, 1, 12).contiguous()};
}

bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor x = a.contiguous(), y = b.contiguous();
  return x.shape() == y.shape() && x.dtype() == y.dtype() &&
         std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

std::shared_ptr<ProcessGroup> solo() {
  ProcessGroupOptions o;
  o.backend = "shm";
  o.store = std::make_shared<InMemoryStore>();
  o.rank = 0;
  o.size = 1;
  return ProcessGroup::create(o);
}

std::shared_ptr<nn::GPT> whole_gpt() {
  auto gpt = std::make_shared<nn::GPT>(config());
  Generator gen(42);
  gpt->init_weights(gen);
  return gpt;
}

// ---- GPTStage ----

TEST(GPTStage, ChainedStagesComputeGPTsBits) {
  auto gpt = whole_gpt();
  const nn::GPTConfig cfg = config();
  std::vector<std::shared_ptr<nn::GPTStage>> stages = {
      std::make_shared<nn::GPTStage>(cfg, nn::StageSpec{0, 2, true, false}),
      std::make_shared<nn::GPTStage>(cfg, nn::StageSpec{2, 3, false, false}),
      std::make_shared<nn::GPTStage>(cfg, nn::StageSpec{3, 4, false, true})};
  const NamedTensors whole = gpt->state_dict();
  for (auto& st : stages) {
    NamedTensors part;
    std::map<std::string, Tensor> want;
    for (auto& [n, t] : st->state_dict()) want[n] = t;
    for (auto& [n, t] : whole) {
      if (want.count(n)) part.emplace_back(n, t);
    }
    st->load_state_dict(part);  // strict: the stage's names are GPT's
  }
  EXPECT_EQ(stages[2]->named_parameters().back().first, "lm_head.weight");  // the replica

  auto [x, y] = micro_batch(0, 0);
  nn::CrossEntropyLoss ce_whole, ce_stages;
  const Tensor logits = gpt->forward(x);
  ce_whole.forward(logits, y);
  gpt->backward(ce_whole.backward());

  Tensor h = x;
  for (auto& st : stages) h = st->forward(h);
  EXPECT_TRUE(same_bits(h, logits));
  ce_stages.forward(h, y);
  Tensor g = ce_stages.backward();
  for (auto it = stages.rbegin(); it != stages.rend(); ++it) g = (*it)->backward(g);
  EXPECT_FALSE(g.defined());  // the first stage's input is token ids

  std::map<std::string, nn::Parameter> got;
  for (auto& st : stages) {
    for (auto& [n, p] : st->named_parameters()) got[n] = p;
  }
  for (auto& [n, p] : gpt->named_parameters()) {
    SCOPED_TRACE(n);
    ASSERT_TRUE(got.count(n));
    if (n == "transformer.wte.weight") continue;
    EXPECT_TRUE(same_bits(got[n].grad(), p.grad()));
  }
  // GPT adds the head's part into wte's gradient first, then the embedding's: the same two
  // accumulations on the stages' parts give its bits.
  nn::Parameter tied(Tensor::zeros(got["transformer.wte.weight"].data().shape()));
  nn::accumulate_grad(tied, got["lm_head.weight"].grad());
  nn::accumulate_grad(tied, got["transformer.wte.weight"].grad());
  EXPECT_TRUE(same_bits(tied.grad(), gpt->named_parameters().front().second.grad()));
}

TEST(GPTStage, OneStageWithEverythingTiesTheHeadAsGPTDoes) {
  nn::GPTStage all(config(), {0, 4, true, true});
  nn::GPT gpt(config());
  EXPECT_EQ(nn::find_tied_parameters(all), nn::find_tied_parameters(gpt));
  EXPECT_EQ(all.num_parameters(), gpt.num_parameters());
}

TEST(GPTStage, InitWeightsGivesGPTsValuesWithoutDrawing) {
  auto gpt = whole_gpt();
  std::map<std::string, Tensor> want;
  for (auto& [n, t] : gpt->state_dict()) want[n] = t;
  const auto before = default_generator(kCPU).get_state();
  nn::GPTStage middle(config(), {1, 3, false, false}), last(config(), {3, 4, false, true});
  const auto after_build = default_generator(kCPU).get_state();
  Generator gen(42);
  middle.init_weights(gen);
  last.init_weights(gen);
  EXPECT_EQ(default_generator(kCPU).get_state(), after_build);  // init draws nothing from it
  EXPECT_NE(before, after_build);  // (building layers does, as GPT's constructor)
  EXPECT_EQ(gen.offset(), 0u);
  for (nn::GPTStage* st : {&middle, &last}) {
    for (auto& [n, t] : st->state_dict()) {
      SCOPED_TRACE(n);
      EXPECT_TRUE(same_bits(t, want.at(n)));
    }
  }
}

TEST(GPTStage, ChecksItsInput) {
  nn::GPTStage middle(config(), {1, 2, false, false});
  try {
    middle.forward(Tensor::zeros({2, 3, 5}));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("hidden states [batch, seq, n_embd 24]"));
  }
  EXPECT_THROW(nn::GPTStage(config(), {2, 2, false, false}), Error);  // holds nothing
  EXPECT_THROW(nn::GPTStage(config(), {3, 5, false, false}), Error);  // past n_layer
  nn::GPTStage first(config(), {0, 1, true, false});
  try {
    first.forward(Tensor::full({1, 2}, 40, DType::kI64));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("GPTStage: token id 40"));
  }
}

// ---- a one-rank pipeline against single-process gradient accumulation ----

const nn::OptimizerOptions kAdam{.lr = 1e-2, .weight_decay = 0.1};

// Ordinary accumulation over M micro-batches, gradients scaled by 1 / M, AdamW.
std::map<std::string, Tensor> plain(int64_t M, int64_t steps) {
  auto gpt = whole_gpt();
  nn::AdamW opt(gpt->parameters(), kAdam);
  nn::CrossEntropyLoss ce;
  for (int64_t s = 0; s < steps; ++s) {
    for (int64_t m = 0; m < M; ++m) {
      auto [x, y] = micro_batch(s, m);
      ce.forward(gpt->forward(x), y);
      gpt->backward(ce.backward());
    }
    for (auto& p : gpt->parameters()) p.grad() = scale(p.grad(), 1.0 / static_cast<double>(M));
    opt.step();
    opt.zero_grad();
  }
  std::map<std::string, Tensor> out;
  for (auto& [n, p] : gpt->named_parameters()) out[n] = p.data().clone();
  return out;
}

std::map<std::string, Tensor> piped(PipelineOptions o, int64_t steps, double* loss = nullptr) {
  CausalLMPipeline pipe(nn::make_meta<nn::GPT>(config()), solo(), o);
  pipe.init_weights(Generator(42));
  nn::AdamW opt(pipe.parameters(), kAdam);
  for (int64_t s = 0; s < steps; ++s) {
    std::vector<Tensor> xs, ys;
    for (int64_t m = 0; m < o.num_micro_batches; ++m) {
      auto [x, y] = micro_batch(s, m);
      xs.push_back(x);
      ys.push_back(y);
    }
    const double l = pipe.step(xs, ys);
    if (loss) *loss = l;
    opt.step();
    opt.zero_grad();
    pipe.after_step();
  }
  std::map<std::string, Tensor> out;
  for (auto& [n, t] : pipe.state_dict()) out[n] = t;
  return out;
}

double max_normalized_diff(const std::map<std::string, Tensor>& a,
                           const std::map<std::string, Tensor>& b) {
  double worst = 0, scale_all = 1e-30;
  for (auto& [n, t] : a) {
    worst = std::max(worst, amax(abs(sub(t, b.at(n)))).item());
    scale_all = std::max(scale_all, amax(abs(b.at(n))).item());
  }
  return worst / scale_all;
}

void expect_same(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (auto& [n, t] : a) {
    SCOPED_TRACE(n);
    ASSERT_TRUE(b.count(n));
    EXPECT_TRUE(same_bits(t, b.at(n)));
  }
}

TEST(PipelineOneRank, EveryScheduleTrainsToTheBitsOfGradientAccumulation) {
  const auto want = plain(3, 2);
  for (auto kind : {PipelineSchedule::kGPipe, PipelineSchedule::k1F1B}) {
    SCOPED_TRACE(std::string(schedule_name(kind)));
    expect_same(piped({.schedule = kind, .num_micro_batches = 3}, 2), want);
  }
}

TEST(PipelineOneRank, TwoChunksOnOneRankPassTheTiedGradientThroughLocalChannels) {
  const PipelineOptions per_mb{.schedule = PipelineSchedule::kInterleaved1F1B,
                               .num_micro_batches = 3,
                               .virtual_stages = 2,
                               .tied_grad_sync = TiedGradSync::kPerMicroBatch};
  expect_same(piped(per_mb, 2), plain(3, 2));
  // Once per step: the embedding's gradient is the same sum in another order.
  PipelineOptions once = per_mb;
  once.tied_grad_sync = TiedGradSync::kOncePerStep;
  const double diff = max_normalized_diff(piped(once, 2), plain(3, 2));
  EXPECT_LT(diff, 1e-5);
  // With one micro-batch the two orders are one addition, which commutes.
  once.num_micro_batches = 1;
  expect_same(piped(once, 2), plain(1, 2));
}

TEST(PipelineOneRank, ReturnsTheMeanLossAndRecordsItsActions) {
  CausalLMPipeline pipe(nn::make_meta<nn::GPT>(config()), solo(),
                        {.schedule = PipelineSchedule::k1F1B, .num_micro_batches = 2});
  pipe.init_weights(Generator(42));
  auto gpt = whole_gpt();
  nn::CrossEntropyLoss ce;
  double want = 0;
  std::vector<Tensor> xs, ys;
  for (int64_t m = 0; m < 2; ++m) {
    auto [x, y] = micro_batch(0, m);
    want += ce.forward(gpt->forward(x), y).item();
    xs.push_back(x);
    ys.push_back(y);
  }
  gpt->clear_saved();
  EXPECT_EQ(pipe.step(xs, ys), want / 2);
  const PipelineStepStats& st = pipe.pipeline().last_stats();
  ASSERT_EQ(st.actions.size(), 4u);  // 0F0 0B0 0F1 0B1
  EXPECT_EQ(action_str(st.actions[1].action), "0B0");
  EXPECT_GT(st.busy_s, 0.0);
  EXPECT_LE(st.busy_s, st.total_s);
  for (auto& chunk : pipe.stages()) EXPECT_EQ(chunk->saved_count(), 0u);
}

// PipelineOptions::activation_checkpointing: every block of every stage recomputes its forward
// in backward, and the step's loss and gradients are those of the pipeline without it.
TEST(PipelineOneRank, ActivationCheckpointingRecomputesEveryBlockWithTheSameBits) {
  const auto run = [](bool checkpointing) {
    PipelineOptions o{.schedule = PipelineSchedule::k1F1B, .num_micro_batches = 2};
    o.sharding.activation_checkpointing = checkpointing;
    CausalLMPipeline pipe(nn::make_meta<nn::GPT>(config()), solo(), o);
    pipe.init_weights(Generator(42));
    int64_t blocks = 0;
    for (auto& stage : pipe.stages()) {
      for (auto& [name, m] : stage->named_modules()) {
        if (m->type_name() != "GPT2Block") continue;
        EXPECT_EQ(dynamic_cast<nn::Layer*>(m)->checkpointing(), checkpointing) << name;
        ++blocks;
      }
    }
    EXPECT_EQ(blocks, config().n_layer);
    std::vector<Tensor> xs, ys;
    for (int64_t m = 0; m < 2; ++m) {
      auto [x, y] = micro_batch(0, m);
      xs.push_back(x);
      ys.push_back(y);
    }
    const double loss = pipe.step(xs, ys);
    std::vector<Tensor> grads;
    for (auto& p : pipe.parameters()) grads.push_back(p.grad().clone());
    return std::make_pair(loss, grads);
  };
  const auto [loss, grads] = run(false);
  const auto [loss_ckpt, grads_ckpt] = run(true);
  EXPECT_EQ(loss_ckpt, loss);
  ASSERT_EQ(grads_ckpt.size(), grads.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    EXPECT_EQ(grads_ckpt[i].to_vector(), grads[i].to_vector()) << i;
  }
}

TEST(PipelineOneRank, RejectsWrongInput) {
  CausalLMPipeline pipe(nn::make_meta<nn::GPT>(config()), solo(), {.num_micro_batches = 2});
  auto [x, y] = micro_batch(0, 0);
  try {
    pipe.step(std::vector<Tensor>{x}, std::vector<Tensor>{y});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("expected num_micro_batches = 2"));
  }
  EXPECT_THROW(pipe.step(x.narrow(0, 0, 1), y.narrow(0, 0, 1)), Error);  // 1 row into 2
  std::vector<std::shared_ptr<nn::Layer>> chunks = {
      std::make_shared<nn::GPTStage>(config(), nn::StageSpec{0, 4, true, true})};
  try {
    Pipeline(chunks, solo(), {.virtual_stages = 2});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("virtual_stages = 2"));
  }
  for (double bad : {0.0, -1.0, std::numeric_limits<double>::infinity(),
                     std::numeric_limits<double>::quiet_NaN()}) {
    try {
      pipe.pipeline().set_loss_scale(bad);
      ADD_FAILURE() << "no error for loss scale " << bad;
    } catch (const Error& e) {
      EXPECT_THAT(e.message(), HasSubstr("expected a finite scale > 0"));
    }
  }
  try {
    pipe.pipeline().clip_grad_norm_(-1.0);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("max_norm must be >= 0"));
  }
}

// set_loss_scale(S) multiplies the loss gradient by S: the gradients are S times those of an
// unscaled step (S a power of two: exact), and clip_grad_norm_ reports S times the norm.
TEST(PipelineOneRank, LossScaleScalesTheGradients) {
  auto [x, y] = micro_batch(0, 0);
  const auto grads_and_norm = [&](double scale) {
    CausalLMPipeline pipe(nn::make_meta<nn::GPT>(config()), solo(), {.num_micro_batches = 2});
    pipe.init_weights(Generator(42));
    pipe.pipeline().set_loss_scale(scale);
    pipe.step(x, y);
    const double norm = pipe.pipeline().clip_grad_norm_(std::numeric_limits<double>::infinity());
    std::vector<Tensor> grads;
    for (auto& p : pipe.parameters()) grads.push_back(p.grad().clone());
    return std::make_pair(grads, norm);
  };
  const auto [plain, norm1] = grads_and_norm(1.0);
  const auto [scaled, norm8] = grads_and_norm(8.0);
  ASSERT_EQ(plain.size(), scaled.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_TRUE(equal(scale(plain[i], 8.0), scaled[i])) << "parameter " << i;
  }
  EXPECT_NEAR(norm8, 8.0 * norm1, 1e-9 * norm8);
}

}  // namespace
}  // namespace braid::shard
