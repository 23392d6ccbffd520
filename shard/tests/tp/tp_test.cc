// Tensor parallelism in one process (docs/parallelism.md, "Tests"): slice arithmetic (global
// runs of local elements, even splits, vocabulary padding) and its errors; the layer checks of
// tp_scenarios.h on 2 and 3 thread ranks; parallelize's requirements; a parallelized GPT's
// logits and gradients against the whole model's on 2 thread ranks, with and without sequence
// parallelism; construction on the meta device; parallelize (TP x PP) against
// parallelize, and on the meta device; CausalLMPipeline with a tp group on one pp rank; the
// attention's dropout masks for a rank's heads. Training, DP x TP and checkpoints run as processes:
// tp_worker / run_tp.sh.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "braid/comm/store.h"
#include "braid/core/error.h"
#include "braid/nn/gpt.h"
#include "braid/nn/llama.h"
#include "braid/shard/pipeline.h"
#include "braid/shard/tensor_parallel.h"
#include "braid/tensor/ops.h"
#include "comm_test_util.h"
#include "tp_scenarios.h"

namespace braid::shard {
namespace {

template <typename Fn>
void expect_error(Fn&& fn, ErrorKind kind, const std::string& part) {
  try {
    fn();
    ADD_FAILURE() << "expected an error of kind " << to_string(kind) << " with '" << part << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.message();
    EXPECT_NE(e.message().find(part), std::string::npos)
        << "'" << part << "' not in: " << e.message();
  }
}

void on_ranks(int n, const std::function<void(std::shared_ptr<ProcessGroup>)>& fn) {
  auto result = braid::testing::run_threads(n, [&](int rank, int size, auto store) {
    fn(braid::testing::make_group(rank, size, store));
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

// ---- slices ----

TEST(GlobalRuns, DimZeroIsOneRunPerSegment) {
  // Rows 2..4 of a [6, 3] tensor held as a [3, 3] local tensor.
  const TensorSlice s{{6, 3}, 0, {{0, 2, 3}}};
  EXPECT_EQ(global_runs(s, {3, 3}, 0, 9), (std::vector<ElementRun>{{0, 6, 9}}));
  EXPECT_EQ(global_runs(s, {3, 3}, 4, 7), (std::vector<ElementRun>{{4, 10, 3}}));
  EXPECT_TRUE(global_runs(s, {3, 3}, 5, 5).empty());
}

TEST(GlobalRuns, OtherDimIsOneRunPerRowAndSegment) {
  // Columns 2, 3 of a [2, 6] matrix, and q | k | v blocks of width 1 at 1, 3, 5.
  const TensorSlice cols{{2, 6}, 1, {{0, 2, 2}}};
  EXPECT_EQ(global_runs(cols, {2, 2}, 0, 4), (std::vector<ElementRun>{{0, 2, 2}, {2, 8, 2}}));
  EXPECT_EQ(global_runs(cols, {2, 2}, 1, 3), (std::vector<ElementRun>{{1, 3, 1}, {2, 8, 1}}));
  const TensorSlice qkv{{2, 6}, 1, {{0, 1, 1}, {1, 3, 1}, {2, 5, 1}}};
  EXPECT_EQ(
      global_runs(qkv, {2, 3}, 0, 6),
      (std::vector<ElementRun>{{0, 1, 1}, {1, 3, 1}, {2, 5, 1}, {3, 7, 1}, {4, 9, 1}, {5, 11, 1}}));
  // A whole-width slice merges into one run.
  const TensorSlice whole{{2, 3}, 1, {{0, 0, 3}}};
  EXPECT_EQ(global_runs(whole, {2, 3}, 1, 6), (std::vector<ElementRun>{{1, 1, 5}}));
}

TEST(GlobalRuns, PaddingBelongsToNoRun) {
  // The last of 3 ranks of a 7-row vocabulary padded to 9: rows 6 (real), 7 and 8 (padding).
  const TensorSlice s{{7, 2}, 0, split_segments(7, 3, 2, 9)};
  EXPECT_EQ(global_runs(s, {3, 2}, 0, 6), (std::vector<ElementRun>{{0, 12, 2}}));
  EXPECT_TRUE(global_runs(s, {3, 2}, 2, 6).empty());
}

TEST(GlobalRuns, RejectsAShapeThatDoesNotFit) {
  const TensorSlice s{{6, 3}, 0, {{0, 2, 3}}};
  expect_error(
      [&] {
        global_runs(s, {3, 4}, 0, 1);
      },
      ErrorKind::kInvalidArgument, "outside the split");
  expect_error([&] { global_runs(s, {2, 3}, 0, 1); }, ErrorKind::kInvalidArgument, "does not fit");
  expect_error([&] { global_runs(s, {3, 3}, 0, 10); }, ErrorKind::kOutOfRange, "elements [0, 10)");
}

TEST(SplitSegments, EvenPaddedAndBlocks) {
  EXPECT_EQ(split_segments(8, 2, 1), (std::vector<SliceSegment>{{0, 4, 4}}));
  EXPECT_EQ(split_segments(37, 4, 3), (std::vector<SliceSegment>{{0, 30, 7}}));  // 10 rows, 7 real
  EXPECT_EQ(split_segments(37, 4, 3, 48), (std::vector<SliceSegment>{{0, 36, 1}}));
  EXPECT_TRUE(split_segments(5, 4, 3, 8).empty());  // only padding
  EXPECT_EQ(split_segments(12, 2, 1, 0, 3),
            (std::vector<SliceSegment>{{0, 2, 2}, {2, 6, 2}, {4, 10, 2}}));
  expect_error([] { split_segments(12, 8, 0, 0, 3); }, ErrorKind::kInvalidArgument, "3 blocks");
  expect_error([] { split_segments(8, 3, 0, 10); }, ErrorKind::kInvalidArgument, "multiple of 3");
}

TEST(PadVocabSize, MegatronsRule) {
  EXPECT_EQ(pad_vocab_size(50257, 1, 128), 50304);
  EXPECT_EQ(pad_vocab_size(50257, 2, 128), 50432);
  EXPECT_EQ(pad_vocab_size(37, 4), 40);
  EXPECT_EQ(pad_vocab_size(36, 4), 36);
  expect_error([] { pad_vocab_size(37, 0); }, ErrorKind::kInvalidArgument, "tp size 0");
}

// ---- layers on thread ranks ----

TEST(TensorParallelLayers, MatchTheWholeLayersOnTwoAndThreeRanks) {
  for (int n : {2, 3}) {
    on_ranks(n, [](std::shared_ptr<ProcessGroup> tp) {
      tp_testing::Failures f;
      tp_testing::check_all_layers(tp, f);
      for (const auto& line : f.lines) ADD_FAILURE() << "rank " << tp->rank() << ": " << line;
      EXPECT_GT(f.checks, 100);
    });
  }
}

TEST(TensorParallelLayers, ArgumentErrors) {
  on_ranks(2, [](std::shared_ptr<ProcessGroup> tp) {
    expect_error([&] { RowParallelLinear(5, 4, tp); }, ErrorKind::kInvalidArgument,
                 "multiple of the tensor-parallel size 2");
    expect_error([&] { ColumnParallelLinear(4, 9, tp, {.blocks = 3}); },
                 ErrorKind::kInvalidArgument, "3 blocks");
    expect_error([&] { ColumnParallelLinear(4, 6, nullptr); }, ErrorKind::kInvalidArgument, "null");
    ColumnParallelLinear col(4, 6, tp, {.sequence_parallel = true});
    expect_error([&] { col.forward(Tensor::zeros({6})); }, ErrorKind::kInvalidArgument, "seq / tp");
  });
}

// Module::replace_module, which parallelize swaps layers with.
TEST(ReplaceModule, KeepsTheNameAndPlace) {
  nn::Module seq("M");
  seq.register_module("a", std::make_shared<nn::Linear>(2, 3));
  seq.register_module("b", std::make_shared<nn::Linear>(3, 4));
  auto c = std::make_shared<nn::Linear>(2, 3, nn::Bias::kNo);
  auto old = seq.replace_module("a", c);
  EXPECT_EQ(seq.child("a").get(), c.get());
  EXPECT_NE(old.get(), c.get());
  std::vector<std::string> names;
  for (auto& [name, p] : seq.named_parameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"a.weight", "b.weight", "b.bias"}));
  expect_error([&] { seq.replace_module("z", c); }, ErrorKind::kOutOfRange, "no child module 'z'");
  expect_error([&] { seq.replace_module("a", nullptr); }, ErrorKind::kInvalidArgument, "null");
}

// ---- the GPT ----

nn::GPTConfig small_config() {
  nn::GPTConfig c;
  c.vocab_size = 37;
  c.n_positions = 16;
  c.n_embd = 24;
  c.n_layer = 2;
  c.n_head = 4;
  c.embd_pdrop = c.attn_pdrop = c.resid_pdrop = 0.0;
  c.dtype = DType::kF64;
  return c;
}

struct StepCheck {
  int64_t seq = 6;
  double tol = 1e-11;  // normalized per tensor (Failures::close)
  int64_t pad = -1;    // >= 0: some ids are this one (the embedding's padding_idx)
};

// One cross-entropy step of a TP-split causal LM against the whole model on the same ids:
// the logits (this rank's vocabulary columns), the loss, and every parameter's gradient against
// its slice of the whole one.
void expect_tp_matches_whole(nn::CausalLM& whole, nn::CausalLM& split,
                             const TensorParallelPlan& plan,
                             const std::shared_ptr<ProcessGroup>& tp, int64_t vocab_size,
                             const StepCheck& c = {}) {
  Tensor ids = Tensor::empty({2, c.seq}, DType::kI64);
  Tensor labels = Tensor::empty({2, c.seq}, DType::kI64);
  Generator data(4);
  data.fill_randint(ids.data<int64_t>(), ids.numel(), 0, vocab_size);
  data.fill_randint(labels.data<int64_t>(), labels.numel(), 0, vocab_size);
  if (c.pad >= 0) ids.data<int64_t>()[1] = ids.data<int64_t>()[c.seq + 2] = c.pad;
  nn::CrossEntropyLoss ce;
  VocabParallelCrossEntropy vce(tp, {.vocab_size = vocab_size});
  const Tensor logits = whole.forward(ids);
  const Tensor loss = ce.forward(logits, labels);
  whole.backward(ce.backward());
  const Tensor logits_tp = split.forward(ids);
  const Tensor loss_tp = vce.forward(logits_tp, labels);
  split.backward(vce.backward());
  tp_testing::Failures f;
  const int64_t local = logits_tp.size(2);
  f.close(
      "logits", logits_tp,
      tp_testing::local_of(
          logits, 2, split_segments(vocab_size, tp->size(), tp->rank(), local * tp->size()), local),
      c.tol);
  f.close("loss", loss_tp, loss, c.tol);
  const auto want = whole.named_parameters();
  const auto got = split.named_parameters();
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].first, want[i].first);
    const nn::Parameter& p = got[i].second;
    Tensor expected = want[i].second.grad();
    if (const TensorSlice* s = plan.slice(p)) {
      expected = tp_testing::local_of(expected, static_cast<int>(s->dim), s->segments,
                                      p.data().size(static_cast<int>(s->dim)));
    }
    f.close(got[i].first + " gradient", p.grad(), expected, c.tol);
  }
  for (const auto& line : f.lines) ADD_FAILURE() << "rank " << tp->rank() << ": " << line;
}

// A plan is data: a style on the wrong kind of layer, and sequence parallelism for a plan
// without a sequence form, are errors naming the module and the style; a rule that matches
// nothing is skipped; "*" matches one name only.
TEST(ParallelPlan, BadPlansAreErrorsAndPatternsMatchOneNamePerStar) {
  on_ranks(2, [](std::shared_ptr<ProcessGroup> tp) {
    nn::ParallelPlan wrong = nn::gpt_parallel_plan();
    wrong.tensor_parallel.insert(wrong.tensor_parallel.begin(),
                                 {"transformer.wte", nn::TensorParallelStyle::kColumnwise});
    nn::GPT a(small_config());
    expect_error([&] { parallelize(a, tp, wrong); }, ErrorKind::kInvalidArgument,
                 "'transformer.wte' is a Embedding; the style 'colwise'");
    nn::ParallelPlan no_sp = nn::gpt_parallel_plan();
    no_sp.sequence_parallel.clear();
    nn::GPT b(small_config());
    expect_error([&] { parallelize(b, tp, no_sp, {.sequence_parallel = true}); },
                 ErrorKind::kNotSupported, "has no sequence-parallel form");
    // "transformer.*.c_attn" names nothing ('*' is one name: c_attn sits deeper) and a rule for
    // a module the tree lacks is skipped: only the MLPs split.
    nn::ParallelPlan narrow;
    narrow.tensor_parallel = {{"transformer.*.c_attn", nn::TensorParallelStyle::kColumnwise},
                              {"no.such.module", nn::TensorParallelStyle::kRowwise},
                              {"transformer.h.*.mlp.c_fc", nn::TensorParallelStyle::kColumnwise},
                              {"transformer.h.*.mlp.c_proj", nn::TensorParallelStyle::kRowwise}};
    nn::GPT c(small_config());
    auto plan = parallelize(c, tp, narrow);
    EXPECT_EQ(plan->num_split(), 2u * 3u);  // 2 blocks: c_fc weight and bias, c_proj weight
    EXPECT_EQ(dynamic_cast<TensorParallelLayer*>(
                  c.get_submodule("transformer.h.0.attn").child("c_attn").get()),
              nullptr);
  });
}

TEST(ParallelizeGpt, Requirements) {
  on_ranks(3, [](std::shared_ptr<ProcessGroup> tp) {
    nn::GPT gpt(small_config());  // 4 heads
    expect_error([&] { parallelize(gpt, tp, gpt.parallel_plan()); }, ErrorKind::kInvalidArgument,
                 "n_head = 4 must be a multiple of the tensor-parallel size 3");
  });
  on_ranks(2, [](std::shared_ptr<ProcessGroup> tp) {
    nn::GPT gpt(small_config());
    parallelize(gpt, tp, gpt.parallel_plan());
    expect_error([&] { parallelize(gpt, tp, gpt.parallel_plan()); }, ErrorKind::kInvalidArgument,
                 "parallelized already");
  });
}

// Logits and every parameter's gradient of a TP=2 GPT equal the whole model's (f64).
TEST(ParallelizeGpt, LogitsAndGradientsMatchTheWholeModel) {
  for (bool sp : {false, true}) {
    on_ranks(2, [sp](std::shared_ptr<ProcessGroup> tp) {
      const nn::GPTConfig cfg = small_config();
      Generator g1(3), g2(3);
      nn::GPT whole(cfg), gpt(cfg);
      whole.init_weights(g1);
      gpt.init_weights(g2);
      auto plan = parallelize(gpt, tp, gpt.parallel_plan(), {.sequence_parallel = sp});
      // wte (with the tied head), and per block c_attn w, b, c_proj w, c_fc w, b, c_proj w.
      EXPECT_EQ(plan->num_split(), 1u + 2u * 6u);
      expect_tp_matches_whole(whole, gpt, *plan, tp, cfg.vocab_size);
    });
  }
}

nn::LlamaConfig small_llama(bool tied, DType dtype) {
  nn::LlamaConfig cfg;
  cfg.vocab_size = 37;  // padded at TP 2 and 4
  cfg.hidden_size = 32;
  cfg.intermediate_size = 40;
  cfg.num_hidden_layers = 2;
  cfg.num_attention_heads = 8;
  cfg.num_key_value_heads = 4;  // grouped: 2 query heads per key / value head on every rank
  cfg.max_position_embeddings = 16;
  cfg.tie_word_embeddings = tied;
  cfg.pad_token_id = 5;
  cfg.dtype = dtype;
  return cfg;
}

// The second family through the same parallelize: a Llama at TP = 2 and 4 (grouped-query
// attention, untied and tied heads, a padding id among the ids), with and without sequence
// parallelism (the sequence split at embed_tokens, RMSNorms on T / tp positions), gives the
// whole model's logits and every gradient, in f64 and in f32.
TEST(ParallelizeLlama, LogitsAndGradientsMatchTheWholeModel) {
  for (int parts : {2, 4}) {
    for (DType dtype : {DType::kF64, DType::kF32}) {
      on_ranks(parts, [dtype](std::shared_ptr<ProcessGroup> tp) {
        for (bool sp : {false, true}) {
          for (bool tied : {false, true}) {
            SCOPED_TRACE(std::string("tp ") + std::to_string(tp->size()) + " " +
                         std::string(dtype_name(dtype)) + (sp ? " sp" : "") +
                         (tied ? " tied" : " untied"));
            const nn::LlamaConfig cfg = small_llama(tied, dtype);
            Generator g1(3), g2(3);
            nn::Llama whole(cfg), model(cfg);
            whole.init_weights(g1);
            model.init_weights(g2);
            auto plan = parallelize(model, tp, model.parallel_plan(), {.sequence_parallel = sp});
            // embed_tokens (+ lm_head untied), per layer q, k, v, o, gate, up, down.
            EXPECT_EQ(plan->num_split(), (tied ? 1u : 2u) + 2u * 7u);
            EXPECT_EQ(plan->sequence_parallel(), sp);
            const bool f64 = dtype == DType::kF64;
            expect_tp_matches_whole(whole, model, *plan, tp, cfg.vocab_size,
                                    {.seq = 8, .tol = f64 ? 1e-11 : 1e-5, .pad = cfg.pad_token_id});
          }
        }
      });
    }
  }
}

// Under sequence parallelism the Llama's split layers are the ones its plan names: the
// embedding reduce-scatters, the RMSNorms are sequence-parallel; a hidden state is [B, T/tp, d]
// between the layers. A plan whose sequence_scatter names an embedding that is not vocab
// parallel is an error naming it; a plan without sequence rules is refused naming the model.
TEST(ParallelizeLlama, SequenceParallelLayersAndErrors) {
  on_ranks(2, [](std::shared_ptr<ProcessGroup> tp) {
    const nn::LlamaConfig cfg = small_llama(false, DType::kF64);
    nn::Llama model(cfg);
    parallelize(model, tp, model.parallel_plan(), {.sequence_parallel = true});
    auto* emb = dynamic_cast<VocabParallelEmbedding*>(
        model.get_submodule("model").child("embed_tokens").get());
    ASSERT_NE(emb, nullptr);
    EXPECT_TRUE(emb->sequence_parallel());
    EXPECT_EQ(emb->padding_idx(), tp->rank() == 0 ? cfg.pad_token_id : -1);
    for (const char* norm : {"model.layers.0.input_layernorm",
                             "model.layers.1.post_attention_layernorm", "model.norm"}) {
      EXPECT_NE(dynamic_cast<SequenceParallelRMSNorm*>(&model.get_submodule(norm)), nullptr)
          << norm;
    }
    const Tensor ids = Tensor::zeros({2, 8}, DType::kI64);
    EXPECT_EQ(emb->forward(ids).shape(), (Shape{2, 4, cfg.hidden_size}));
    expect_error(
        [&] {
          emb->forward(Tensor::zeros({2, 7}, DType::kI64));
        },
        ErrorKind::kInvalidArgument, "VocabParallelEmbedding");

    nn::ParallelPlan no_vocab = model.parallel_plan();
    std::erase_if(no_vocab.tensor_parallel, [](const nn::TensorParallelRule& r) {
      return r.style == nn::TensorParallelStyle::kVocabEmbedding;
    });
    nn::Llama other(cfg);
    expect_error([&] { parallelize(other, tp, no_vocab, {.sequence_parallel = true}); },
                 ErrorKind::kInvalidArgument,
                 "'model.embed_tokens' is an Embedding without a vocab_embedding rule");
    nn::ParallelPlan no_sp = model.parallel_plan();
    no_sp.sequence_parallel.clear();
    nn::Llama third(cfg);
    expect_error([&] { parallelize(third, tp, no_sp, {.sequence_parallel = true}); },
                 ErrorKind::kNotSupported, "LlamaForCausalLM's plan has no sequence-parallel form");
  });
}

// TP x PP for the Llama under sequence parallelism: two LlamaStages split by parallelize compute
// the split Llama's logits and gradients bit for bit; the hidden state between them is this
// rank's T / tp positions (the first stage's embedding reduce-scatters).
TEST(ParallelizeLlama, TwoStagesMatchTheParallelizedLlama) {
  for (bool tied : {false, true}) {
    on_ranks(2, [tied](std::shared_ptr<ProcessGroup> tp) {
      const nn::LlamaConfig cfg = small_llama(tied, DType::kF64);
      nn::Llama model(cfg);
      Generator g1(3);
      model.init_weights(g1);
      const NamedTensors whole_state = model.state_dict();
      auto s0 = model.make_stage({.first_block = 0, .end_block = 1, .embedding = true});
      auto s1 = model.make_stage({.first_block = 1, .end_block = 2, .head = true});
      for (auto* st : {s0.get(), s1.get()}) {
        NamedTensors part;
        for (auto& [name, t] : whole_state) {
          for (auto& [mine, u] : st->state_dict()) {
            if (mine == name) part.emplace_back(name, t);
          }
        }
        // The tied head's replica takes the embedding's values.
        if (tied && st == s1.get())
          part.emplace_back("lm_head.weight",
                            model.get_submodule("model.embed_tokens").param("weight").data());
        st->load_state_dict(part);
      }
      parallelize(model, tp, model.parallel_plan(), {.sequence_parallel = true});
      parallelize(*s0, tp, model.parallel_plan(), {.sequence_parallel = true});
      parallelize(*s1, tp, model.parallel_plan(), {.sequence_parallel = true});
      Tensor ids = Tensor::empty({2, 8}, DType::kI64), labels = Tensor::empty({2, 8}, DType::kI64);
      Generator data(4);
      data.fill_randint(ids.data<int64_t>(), ids.numel(), 0, cfg.vocab_size);
      data.fill_randint(labels.data<int64_t>(), labels.numel(), 0, cfg.vocab_size);
      ids.data<int64_t>()[3] = cfg.pad_token_id;
      VocabParallelCrossEntropy vce(tp, {.vocab_size = cfg.vocab_size});
      const Tensor loss = vce.forward(model.forward(ids), labels);
      model.backward(vce.backward());
      const Tensor h = s0->forward(ids);
      EXPECT_EQ(h.shape(), (Shape{2, 4, cfg.hidden_size}));
      const Tensor loss_pp = vce.forward(s1->forward(h), labels);
      s0->backward(s1->backward(vce.backward()));
      tp_testing::Failures f;
      f.close("loss", loss_pp, loss, 0.0);
      std::map<std::string, Tensor> grads;
      for (auto* st : {s0.get(), s1.get()}) {
        for (auto& [name, prm] : st->named_parameters()) grads[name] = prm.grad();
      }
      // The Llama adds the head's part, then the embedding's.
      if (tied) {
        grads["model.embed_tokens.weight"] =
            add(grads.at("lm_head.weight"), grads.at("model.embed_tokens.weight"));
      }
      for (auto& [name, prm] : model.named_parameters()) {
        ASSERT_TRUE(grads.count(name)) << name;
        f.close(name + " gradient", grads.at(name), prm.grad(), 0.0);
      }
      for (const auto& line : f.lines) ADD_FAILURE() << "rank " << tp->rank() << ": " << line;
    });
  }
}

// A GPT built on the meta device and parallelized with TensorParallelOptions::init holds the
// slices of a whole init_weights, bit for bit.
TEST(ParallelizeGpt, MetaInitGivesTheSlicesOfAWholeInit) {
  on_ranks(2, [](std::shared_ptr<ProcessGroup> tp) {
    nn::GPTConfig cfg = small_config();
    cfg.dtype = DType::kF32;
    Generator g1(5);
    const Generator g2(5);
    nn::GPT whole(cfg);
    whole.init_weights(g1);
    std::shared_ptr<nn::GPT> gpt;
    {
      nn::InitEmptyWeights empty;
      gpt = std::make_shared<nn::GPT>(cfg);
    }
    auto plan = parallelize(
        *gpt, tp, gpt->parallel_plan(),
        {.sequence_parallel = true, .init = nn::weights_init(nn::make_meta<nn::GPT>(cfg), g2)});
    const auto want = whole.named_parameters();
    const auto got = gpt->named_parameters();
    ASSERT_EQ(want.size(), got.size());
    for (size_t i = 0; i < got.size(); ++i) {
      const nn::Parameter& p = got[i].second;
      Tensor expected = want[i].second.data();
      if (const TensorSlice* sl = plan->slice(p)) {
        expected = tp_testing::local_of(expected, static_cast<int>(sl->dim), sl->segments,
                                        p.data().size(static_cast<int>(sl->dim)));
      }
      EXPECT_TRUE(equal(p.data(), expected)) << got[i].first;
    }
  });
}

// TP x PP: a GPT cut into two GPTStages (the head's weight a replica of wte on the second),
// each split by parallelize, computes the TP GPT's logits and gradients (f64); the
// replica's gradient plus the first stage's wte gradient is the tied weight's. Under sequence
// parallelism the hidden state between the stages is this rank's T / tp positions.
TEST(ParallelizeGptStage, TwoStagesMatchTheParallelizedGpt) {
  for (bool sp : {false, true}) {
    on_ranks(2, [sp](std::shared_ptr<ProcessGroup> tp) {
      const nn::GPTConfig cfg = small_config();
      Generator g1(3);
      nn::GPT gpt(cfg);
      gpt.init_weights(g1);
      const NamedTensors whole_state = gpt.state_dict();
      nn::GPTStage s0(cfg, {.first_block = 0, .end_block = 1, .embedding = true});
      nn::GPTStage s1(cfg, {.first_block = 1, .end_block = 2, .head = true});
      for (nn::GPTStage* st : {&s0, &s1}) {
        NamedTensors part;
        for (auto& [name, t] : whole_state) {
          for (auto& [mine, u] : st->state_dict()) {
            if (mine == name) part.emplace_back(name, t);
          }
        }
        st->load_state_dict(part);
      }
      auto plan = parallelize(gpt, tp, gpt.parallel_plan(), {.sequence_parallel = sp});
      auto p0 = parallelize(s0, tp, nn::gpt_parallel_plan(), {.sequence_parallel = sp});
      auto p1 = parallelize(s1, tp, nn::gpt_parallel_plan(), {.sequence_parallel = sp});
      EXPECT_EQ(p0->num_split(), 1u + 6u);  // wte and one block
      EXPECT_EQ(p1->num_split(), 6u + 1u);  // one block and the head's replica
      expect_error([&] { parallelize(s1, tp, nn::gpt_parallel_plan()); },
                   ErrorKind::kInvalidArgument, "parallelized already");
      Tensor ids = Tensor::empty({2, 6}, DType::kI64), labels = Tensor::empty({2, 6}, DType::kI64);
      Generator data(4);
      data.fill_randint(ids.data<int64_t>(), ids.numel(), 0, cfg.vocab_size);
      data.fill_randint(labels.data<int64_t>(), labels.numel(), 0, cfg.vocab_size);
      VocabParallelCrossEntropy vce(tp, {.vocab_size = cfg.vocab_size});
      const Tensor loss = vce.forward(gpt.forward(ids), labels);
      gpt.backward(vce.backward());
      const Tensor h = s0.forward(ids);
      EXPECT_EQ(h.shape(), (Shape{2, sp ? 3 : 6, cfg.n_embd}));
      const Tensor loss_pp = vce.forward(s1.forward(h), labels);
      s0.backward(s1.backward(vce.backward()));
      tp_testing::Failures f;
      f.close("loss", loss_pp, loss, 0.0);
      std::map<std::string, Tensor> grads;
      for (nn::GPTStage* st : {&s0, &s1}) {
        for (auto& [name, prm] : st->named_parameters()) grads[name] = prm.grad();
      }
      // The GPT adds the head's part, then the embedding's.
      grads["transformer.wte.weight"] =
          add(grads.at("lm_head.weight"), grads.at("transformer.wte.weight"));
      for (auto& [name, prm] : gpt.named_parameters()) {
        ASSERT_TRUE(grads.count(name)) << name;
        f.close(name + " gradient", grads.at(name), prm.grad(), 0.0);
      }
      for (const auto& line : f.lines) ADD_FAILURE() << "rank " << tp->rank() << ": " << line;
    });
  }
}

// A stage built on the meta device and split with TensorParallelOptions::init holds the slices
// of GPTStage::init_weights (the replica: wte's rows), bit for bit.
TEST(ParallelizeGptStage, MetaInitGivesTheSlicesOfAWholeInit) {
  on_ranks(2, [](std::shared_ptr<ProcessGroup> tp) {
    nn::GPTConfig cfg = small_config();
    cfg.dtype = DType::kF32;
    const nn::StageSpec spec{.first_block = 1, .end_block = 2, .head = true};
    const Generator gen(5);
    nn::GPTStage whole(cfg, spec);
    whole.init_weights(gen);
    std::shared_ptr<nn::GPTStage> stage;
    {
      nn::InitEmptyWeights empty;
      stage = std::make_shared<nn::GPTStage>(cfg, spec);
    }
    auto plan = parallelize(
        *stage, tp, nn::gpt_parallel_plan(),
        {.sequence_parallel = true, .init = nn::weights_init(nn::make_meta<nn::GPT>(cfg), gen)});
    const auto want = whole.named_parameters();
    const auto got = stage->named_parameters();
    ASSERT_EQ(want.size(), got.size());
    for (size_t i = 0; i < got.size(); ++i) {
      const nn::Parameter& p = got[i].second;
      Tensor expected = want[i].second.data();
      if (const TensorSlice* sl = plan->slice(p)) {
        expected = tp_testing::local_of(expected, static_cast<int>(sl->dim), sl->segments,
                                        p.data().size(static_cast<int>(sl->dim)));
      }
      EXPECT_TRUE(equal(p.data(), expected)) << got[i].first;
    }
  });
}

// CausalLMPipeline with tp_group on a one-rank pipeline of two chunks (local channels), on 2 tp
// thread ranks: init_weights and load_state_dict give the slices of the whole GPT (read back
// whole by global_state_dict), and a step gives the gradients of the TP GPT's gradient
// accumulation, bit for bit (the head's gradient per micro-batch).
TEST(ParallelizeGptStage, CausalLMPipelineMatchesTheParallelizedGpt) {
  on_ranks(2, [](std::shared_ptr<ProcessGroup> tp) {
    std::shared_ptr<ProcessGroup> pp;
    for (int r = 0; r < tp->size(); ++r) {
      auto g = tp->new_group({r});
      if (r == tp->rank()) pp = g;
    }
    nn::GPTConfig cfg = small_config();
    cfg.dtype = DType::kF32;
    Generator g1(7);
    nn::GPT gpt(cfg);
    gpt.init_weights(g1);
    const NamedTensors whole = gpt.state_dict();
    PipelineOptions opt{.schedule = PipelineSchedule::kInterleaved1F1B,
                        .num_micro_batches = 2,
                        .virtual_stages = 2,
                        .tied_grad_sync = TiedGradSync::kPerMicroBatch};
    opt.tp_group = tp;
    CausalLMPipeline pipe(nn::make_meta<nn::GPT>(cfg), pp, opt);
    ASSERT_NE(pipe.plan(0), nullptr);
    tp_testing::Failures f;
    const auto check_whole = [&](const std::string& when) {
      const NamedTensors got = pipe.global_state_dict();
      EXPECT_EQ(got.size(), whole.size() - 1) << when;  // the replica left out
      for (auto& [name, t] : got) {
        for (auto& [wname, w] : whole) {
          if (wname == name) f.close(when + ": " + name, t, w, 0.0);
        }
      }
    };
    pipe.init_weights(Generator(7));
    check_whole("init_weights");
    pipe.load_state_dict(whole);
    check_whole("load_state_dict");

    parallelize(gpt, tp, gpt.parallel_plan());
    VocabParallelCrossEntropy vce(tp, {.vocab_size = cfg.vocab_size});
    std::vector<Tensor> xs, ys;
    double loss = 0;
    for (int m = 0; m < 2; ++m) {
      Tensor ids = Tensor::empty({2, 6}, DType::kI64), labels = Tensor::empty({2, 6}, DType::kI64);
      Generator data(40 + static_cast<uint64_t>(m));
      data.fill_randint(ids.data<int64_t>(), ids.numel(), 0, cfg.vocab_size);
      data.fill_randint(labels.data<int64_t>(), labels.numel(), 0, cfg.vocab_size);
      loss += vce.forward(gpt.forward(ids), labels).item();
      gpt.backward(vce.backward());
      xs.push_back(ids);
      ys.push_back(labels);
    }
    for (auto& prm : gpt.parameters()) prm.grad() = scale(prm.grad(), 0.5);
    const double loss_pp = pipe.step(xs, ys);
    EXPECT_EQ(loss_pp, loss / 2);
    std::map<std::string, Tensor> grads;
    for (auto& stage : pipe.stages()) {
      for (auto& [name, prm] : stage->named_parameters()) {
        if (name != "lm_head.weight") grads[name] = prm.grad();
      }
    }
    for (auto& [name, prm] : gpt.named_parameters()) {
      if (name == "lm_head.weight") continue;  // tied: wte's
      ASSERT_TRUE(grads.count(name)) << name;
      f.close(name + " gradient", grads.at(name), prm.grad(), 0.0);
    }
    for (const auto& line : f.lines) ADD_FAILURE() << "rank " << tp->rank() << ": " << line;
  });
}

// Note [Attention dropout under tensor parallelism]: a rank's heads draw at their global
// head's words when (H/P) T^2 is a multiple of 4, and the generator advances by the whole
// model's draw; otherwise each (row, rank) block is rounded up to whole Philox blocks. One
// process, no communication: two attentions of heads [0, 2) and [2, 4) of 4, with the whole
// layer's weights for those heads, each run from the same generator state (as two tp ranks);
// their outputs add up to the whole layer's under dropout 0.5 when T = 6, not when T = 5.
TEST(AttentionLocalHeads, DropoutOffsetsAndAdvance) {
  for (int64_t seq : {6, 5}) {
    nn::GPTConfig cfg = small_config();
    cfg.n_embd = 8;
    cfg.attn_pdrop = 0.5;
    nn::CausalSelfAttention whole(cfg), low(cfg), high(cfg);
    Generator init(9);
    for (auto& [name, p] : whole.named_parameters()) {
      p.data().copy_(Tensor::randn(p.data().shape(), DType::kF64, &init));
    }
    // Heads [2 part, 2 part + 2) of 4 (head_dim 2): 4 columns of each of q, k, v, 4 rows of
    // c_proj; c_proj's bias on the first part only, so the parts' outputs add up to the whole.
    auto& c_attn = dynamic_cast<nn::Linear&>(*whole.child("c_attn"));
    auto& c_proj = dynamic_cast<nn::Linear&>(*whole.child("c_proj"));
    for (int64_t part : {0, 1}) {
      nn::CausalSelfAttention& m = part == 0 ? low : high;
      auto q = std::make_shared<nn::Linear>(8, 12, nn::Bias::kYes, nn::WeightLayout::kInOut,
                                            DType::kF64);
      auto o =
          std::make_shared<nn::Linear>(4, 8, nn::Bias::kYes, nn::WeightLayout::kInOut, DType::kF64);
      for (int64_t b = 0; b < 3; ++b) {
        q->weight()
            .data()
            .narrow(1, 4 * b, 4)
            .copy_(c_attn.weight().data().narrow(1, 8 * b + 4 * part, 4));
        q->bias()
            .data()
            .narrow(0, 4 * b, 4)
            .copy_(c_attn.bias().data().narrow(0, 8 * b + 4 * part, 4));
      }
      o->weight().data().copy_(c_proj.weight().data().narrow(0, 4 * part, 4));
      o->bias().data().copy_(part == 0 ? c_proj.bias().data() : Tensor::zeros({8}, DType::kF64));
      m.replace_module("c_attn", q);
      m.replace_module("c_proj", o);
      m.set_local_heads(2 * part, 2);
    }
    const Tensor x = tp_testing::random({2, seq, 8}, 10);
    Generator& gen = default_generator(kCPU);
    const auto run = [&](nn::CausalSelfAttention& m) {  // as every tp rank: the same state
      gen.manual_seed(77);
      nn::NoGradGuard no_grad;
      const Tensor y = m.forward(x);
      return std::make_pair(y, gen.offset());
    };
    const auto [y_whole, advance_whole] = run(whole);
    const auto [y_low, advance_low] = run(low);
    const auto [y_high, advance_high] = run(high);
    EXPECT_TRUE(equal(y_high, run(high).first)) << "seq " << seq;  // the same masks every run
    EXPECT_EQ(advance_low, advance_high);
    const Tensor sum = add(y_low, y_high);
    const double diff = amax(abs(sub(sum, y_whole))).item();
    const uint64_t block = 2 * seq * seq;
    if (block % 4 == 0) {
      // The unsplit model's masks, and its advance.
      EXPECT_LT(diff, 1e-12 * amax(abs(y_whole)).item()) << "seq " << seq;
      EXPECT_EQ(advance_low, advance_whole);
    } else {
      // Whole Philox blocks per (row, part): other masks, another advance.
      EXPECT_GT(diff, 1e-3) << "seq " << seq;
      EXPECT_EQ(advance_low, 2 * 2 * ((block + 3) / 4 * 4));
    }
    EXPECT_THROW(high.set_local_heads(1, 2), Error);  // not one of the equal parts
  }
}

}  // namespace
}  // namespace braid::shard
