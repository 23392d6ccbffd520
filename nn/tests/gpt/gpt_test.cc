// GPT: Hugging Face names and tying, gradients against finite differences in f64 (whole
// model and the attention layer alone), f32 against f64, bf16 autocast, dropout
// reproducibility, activation checkpointing, threads, generation, errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "braid/amp/autocast.h"
#include "braid/core/error.h"
#include "braid/core/thread_pool.h"
#include "gpt_test_util.h"

namespace braid::nn {
namespace {

using gpt_testing::expect_matches_finite_differences;
using gpt_testing::random_ids;
using gpt_testing::tiny_config;
using gpt_testing::weighted_sum;

std::shared_ptr<GPT> make_gpt(const GPTConfig& cfg, uint64_t seed = 7) {
  auto gpt = std::make_shared<GPT>(cfg);
  Generator gen(seed);
  gpt->init_weights(gen);
  return gpt;
}

std::vector<std::string> block_names(int i) {
  const std::string b = "transformer.h." + std::to_string(i) + ".";
  std::vector<std::string> out;
  for (const char* n :
       {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
        "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
        "mlp.c_proj.weight", "mlp.c_proj.bias"}) {
    out.push_back(b + n);
  }
  return out;
}

TEST(GPT, HuggingFaceNamesShapesAndTying) {
  GPTConfig cfg = tiny_config(DType::kF32);
  cfg.n_inner = 12;
  GPT gpt(cfg);
  std::vector<std::string> expect = {"transformer.wte.weight", "transformer.wpe.weight"};
  for (int i = 0; i < 2; ++i) {
    for (auto& n : block_names(i)) expect.push_back(n);
  }
  expect.push_back("transformer.ln_f.weight");
  expect.push_back("transformer.ln_f.bias");
  std::vector<std::string> names;
  for (auto& [n, p] : gpt.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, expect);

  std::vector<std::string> keys;
  std::map<std::string, Shape> shapes;
  for (auto& [n, t] : gpt.state_dict()) {
    keys.push_back(n);
    shapes[n] = t.shape();
  }
  expect.push_back("lm_head.weight");
  EXPECT_EQ(keys, expect);
  EXPECT_EQ(shapes["transformer.wte.weight"], Shape({11, 8}));
  EXPECT_EQ(shapes["transformer.wpe.weight"], Shape({8, 8}));
  EXPECT_EQ(shapes["transformer.h.0.attn.c_attn.weight"], Shape({8, 24}));  // Conv1D [in, out]
  EXPECT_EQ(shapes["transformer.h.0.attn.c_attn.bias"], Shape({24}));
  EXPECT_EQ(shapes["transformer.h.1.attn.c_proj.weight"], Shape({8, 8}));
  EXPECT_EQ(shapes["transformer.h.1.mlp.c_fc.weight"], Shape({8, 12}));
  EXPECT_EQ(shapes["transformer.h.1.mlp.c_proj.weight"], Shape({12, 8}));
  EXPECT_EQ(shapes["lm_head.weight"], Shape({11, 8}));

  const auto tied = find_tied_parameters(gpt);
  ASSERT_EQ(tied.size(), 1u);
  EXPECT_EQ(tied[0], (std::vector<std::string>{"lm_head.weight", "transformer.wte.weight"}));
  EXPECT_TRUE(gpt.get_submodule("lm_head").param("weight").is(
      gpt.get_submodule("transformer.wte").param("weight")));
  EXPECT_EQ(gpt.type_name(), "GPT2LMHeadModel");
  EXPECT_EQ(gpt.get_submodule("transformer.h.1").type_name(), "GPT2Block");
  EXPECT_EQ(&gpt.get_submodule("transformer.h.1"), &gpt.block(1));
  EXPECT_EQ(gpt.get_submodule("transformer.h.0.attn").type_name(), "GPT2Attention");
  EXPECT_EQ(gpt.get_submodule("transformer.h.0.mlp").type_name(), "GPT2MLP");
  for (const char* m : {"transformer.drop", "transformer.h.0.attn.attn_dropout",
                        "transformer.h.0.attn.resid_dropout", "transformer.h.0.mlp.act",
                        "transformer.h.0.mlp.dropout"}) {
    EXPECT_NO_THROW(gpt.get_submodule(m)) << m;
  }
  // Tied parameters count once, as torch's num_parameters.
  EXPECT_EQ(gpt.num_parameters(),
            11 * 8 + 8 * 8 + 2 * (4 * 8 + 8 * 24 + 24 + 8 * 8 + 8 + 8 * 12 + 12 + 12 * 8 + 8) + 16);
  EXPECT_THROW(gpt.block(2), Error);
}

TEST(GPT, InitWeightsFollowsGpt2) {
  GPTConfig cfg = tiny_config(DType::kF32);
  cfg.n_embd = 64;
  cfg.n_head = 4;
  cfg.vocab_size = 300;
  cfg.n_positions = 64;
  cfg.n_layer = 8;
  cfg.initializer_range = 0.02;
  auto gpt = make_gpt(cfg);
  const auto std_of = [](const Tensor& t) {
    const auto v = t.to_vector();
    double s = 0;
    for (double x : v) s += x * x;
    return std::sqrt(s / static_cast<double>(v.size()));
  };
  for (auto& [n, p] : gpt->named_parameters()) {
    const auto v = p.data().to_vector();
    if (n.ends_with(".bias")) {
      EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](double x) { return x == 0; })) << n;
    } else if (n.find(".ln_") != std::string::npos) {
      EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](double x) { return x == 1; })) << n;
    } else if (n.ends_with("c_proj.weight")) {
      EXPECT_NEAR(std_of(p.data()), 0.02 / std::sqrt(16.0), 0.0006) << n;
    } else {
      EXPECT_NEAR(std_of(p.data()), 0.02, 0.001) << n;
    }
  }
  // Same generator seed, same weights.
  auto again = make_gpt(cfg);
  EXPECT_TRUE(
      equal(gpt->named_parameters()[5].second.data(), again->named_parameters()[5].second.data()));
}

// The whole model in f64: a sample of every parameter tensor against central differences.
TEST(GPT, GradientsMatchFiniteDifferencesF64) {
  const GPTConfig cfg = tiny_config();
  auto gpt = make_gpt(cfg);
  const Tensor ids = random_ids(2, 7, cfg.vocab_size, 3);
  const Tensor w = Tensor::randn({2, 7, cfg.vocab_size}, DType::kF64, nullptr);
  gpt->zero_grad();
  gpt->forward(ids);
  EXPECT_FALSE(gpt->backward(w).defined());
  const auto loss = [&] {
    NoGradGuard no_grad;
    return weighted_sum(gpt->forward(ids), w);
  };
  for (auto& [name, p] : gpt->named_parameters()) {
    expect_matches_finite_differences(p.data(), p.grad(), loss, name);
  }
  EXPECT_EQ(gpt->saved_count(), 0u);
}

// The attention layer alone: input gradient (every element) and its parameters.
TEST(GPT, AttentionGradientsMatchFiniteDifferencesF64) {
  GPTConfig cfg = tiny_config();
  CausalSelfAttention attn(cfg);
  Generator gen(5);
  for (auto& [n, p] : attn.named_parameters())
    p.data().copy_(Tensor::randn(p.data().shape(), DType::kF64, &gen));
  Tensor x = Tensor::randn({2, 6, 8}, DType::kF64, &gen);
  const Tensor w = Tensor::randn({2, 6, 8}, DType::kF64, &gen);
  attn.forward(x);
  const Tensor dx = attn.backward(w);
  const auto loss = [&] {
    NoGradGuard no_grad;
    return weighted_sum(attn.forward(x), w);
  };
  expect_matches_finite_differences(x, dx, loss, "input", x.numel());
  for (auto& [name, p] : attn.named_parameters()) {
    expect_matches_finite_differences(p.data(), p.grad(), loss, name);
  }
}

// A cross-entropy loss through the model: the usual training path.
TEST(GPT, CrossEntropyGradientMatchesFiniteDifferences) {
  const GPTConfig cfg = tiny_config();
  auto gpt = make_gpt(cfg, 11);
  const Tensor ids = random_ids(2, 8, cfg.vocab_size, 4);
  const Tensor targets = random_ids(2, 8, cfg.vocab_size, 5);
  CrossEntropyLoss ce;
  ce.forward(gpt->forward(ids), targets);
  gpt->backward(ce.backward());
  const auto loss = [&] {
    NoGradGuard no_grad;
    CrossEntropyLoss l;
    return l.forward(gpt->forward(ids), targets).item();
  };
  for (const char* name : {"transformer.wte.weight", "transformer.h.1.attn.c_attn.weight"}) {
    Parameter p = gpt->get_submodule(std::string(name).substr(0, std::string(name).rfind('.')))
                      .param("weight");
    expect_matches_finite_differences(p.data(), p.grad(), loss, name, 12);
  }
}

TEST(GPT, F32ForwardMatchesF64) {
  auto g64 = make_gpt(tiny_config(DType::kF64));
  GPT g32(tiny_config(DType::kF32));
  g32.load_state_dict(g64->state_dict());
  const Tensor ids = random_ids(3, 8, 11, 6);
  const Tensor l64 = g64->forward(ids);
  const Tensor l32 = g32.forward(ids);
  EXPECT_EQ(l32.dtype(), DType::kF32);
  EXPECT_TRUE(allclose(l32.to(DType::kF64), l64, 1e-5, 1e-5));
  const Tensor w = Tensor::randn(l64.shape(), DType::kF64, nullptr);
  g64->backward(w);
  g32.backward(w.to(DType::kF32));
  for (auto& [n, p] : g64->named_parameters()) {
    const Parameter& q =
        g32.get_submodule(n.substr(0, n.rfind('.'))).param(n.substr(n.rfind('.') + 1));
    // Normalized error (max |diff| / max |ref|): an element near zero after cancellation
    // carries the rounding of the large terms it came from, so no per-element bound fits.
    const double diff = amax(abs(sub(q.grad().to(DType::kF64), p.grad()))).item();
    EXPECT_LE(diff, 1e-5 * amax(abs(p.grad())).item()) << n;
  }
}

// Under bf16 autocast the matmuls run in bf16 (logits come out bf16), norms and softmax in
// f32; parameters and their gradients stay f32.
TEST(GPT, Bf16AutocastIsCloseToF32) {
  GPTConfig cfg = tiny_config(DType::kF32);
  cfg.n_embd = 32;
  cfg.n_head = 4;
  cfg.initializer_range = 0.1;
  auto gpt = make_gpt(cfg);
  const Tensor ids = random_ids(2, 8, cfg.vocab_size, 8);
  const Tensor w = Tensor::randn({2, 8, cfg.vocab_size}, DType::kF32, nullptr);
  const Tensor ref = gpt->forward(ids);
  gpt->backward(w);
  std::vector<Tensor> ref_grads;
  for (auto& [n, p] : gpt->named_parameters()) ref_grads.push_back(p.grad().clone());
  gpt->zero_grad();
  Tensor low;
  {
    amp::AutocastScope scope(DType::kBF16);
    low = gpt->forward(ids);
    gpt->backward(w.to(low.dtype()));
  }
  EXPECT_EQ(low.dtype(), DType::kBF16);
  const double scale = amax(abs(ref)).item();
  EXPECT_TRUE(allclose(low.to(DType::kF32), ref, 0.0, 0.03 * scale));
  size_t i = 0;
  for (auto& [n, p] : gpt->named_parameters()) {
    ASSERT_EQ(p.grad().dtype(), DType::kF32) << n;
    const Tensor& r = ref_grads[i++];
    const double gscale = amax(abs(r)).item();
    EXPECT_TRUE(allclose(p.grad(), r, 0.0, 0.05 * gscale + 1e-6)) << n;
  }
}

GPTConfig dropout_config(bool checkpointing) {
  GPTConfig cfg = tiny_config(DType::kF32);
  cfg.embd_pdrop = 0.1;
  cfg.attn_pdrop = 0.2;
  cfg.resid_pdrop = 0.15;
  cfg.activation_checkpointing = checkpointing;
  return cfg;
}

struct StepResult {
  Tensor logits;
  std::vector<Tensor> grads;
};

StepResult train_step(GPT& gpt, const Tensor& ids, uint64_t seed) {
  set_seed(seed);
  gpt.zero_grad();
  StepResult r;
  r.logits = gpt.forward(ids);
  CrossEntropyLoss ce;
  ce.forward(r.logits, random_ids(ids.size(0), ids.size(1), gpt.config().vocab_size, 99));
  gpt.backward(ce.backward());
  for (auto& [n, p] : gpt.named_parameters()) r.grads.push_back(p.grad().clone());
  return r;
}

void expect_same(const StepResult& a, const StepResult& b) {
  EXPECT_TRUE(equal(a.logits, b.logits));
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) EXPECT_TRUE(equal(a.grads[i], b.grads[i])) << i;
}

TEST(GPT, DropoutIsReproducibleFromTheSeed) {
  auto gpt = make_gpt(dropout_config(false));
  const Tensor ids = random_ids(2, 8, 11, 9);
  const StepResult a = train_step(*gpt, ids, 1);
  const StepResult b = train_step(*gpt, ids, 1);
  expect_same(a, b);
  const StepResult c = train_step(*gpt, ids, 2);
  EXPECT_FALSE(equal(a.logits, c.logits));
  // Eval mode: no dropout, so the seed does not matter.
  gpt->eval();
  const StepResult e1 = train_step(*gpt, ids, 1);
  const StepResult e2 = train_step(*gpt, ids, 2);
  expect_same(e1, e2);
}

TEST(GPT, CheckpointingGivesTheSameGradientsBitwise) {
  auto plain = make_gpt(dropout_config(false));
  auto ckpt = make_gpt(dropout_config(true));
  for (int64_t i = 0; i < ckpt->num_blocks(); ++i) EXPECT_TRUE(ckpt->block(i).checkpointing());
  const Tensor ids = random_ids(3, 8, 11, 10);
  expect_same(train_step(*plain, ids, 5), train_step(*ckpt, ids, 5));
  // The generator ends where it would without checkpointing.
  train_step(*ckpt, ids, 6);
  const uint64_t after_ckpt = default_generator().offset();
  train_step(*plain, ids, 6);
  EXPECT_EQ(after_ckpt, default_generator().offset());
  EXPECT_EQ(ckpt->saved_count(), 0u);
}

TEST(GPT, AttentionThreadsGiveTheSameBits) {
  GPTConfig cfg = dropout_config(false);
  cfg.n_embd = 16;
  cfg.n_head = 4;
  auto gpt = make_gpt(cfg);
  const Tensor ids = random_ids(3, 8, 11, 12);
  const StepResult one = train_step(*gpt, ids, 3);
  for (int threads : {2, 3}) {
    set_num_threads(threads);
    const StepResult r = train_step(*gpt, ids, 3);
    set_num_threads(1);
    expect_same(one, r);
  }
}

TEST(GPT, GenerateIsDeterministicGivenTheGenerator) {
  GPTConfig cfg = dropout_config(false);
  auto gpt = make_gpt(cfg);
  const Tensor prompt = Tensor::from_vector({1, 2, 3}, {1, 3}, DType::kI64);
  Generator g1(42), g2(42);
  const Tensor a = gpt->generate(prompt, 10, 1.0, 5, g1);
  const Tensor b = gpt->generate(prompt, 10, 1.0, 5, g2);
  EXPECT_EQ(a.shape(), Shape({1, 13}));
  EXPECT_EQ(a.dtype(), DType::kI64);
  EXPECT_TRUE(equal(a, b));
  EXPECT_TRUE(gpt->is_training());  // restored
  EXPECT_EQ(gpt->saved_count(), 0u);
  const auto v = a.to_vector();
  EXPECT_EQ(std::vector<double>(v.begin(), v.begin() + 3), (std::vector<double>{1, 2, 3}));
  for (double t : v) EXPECT_TRUE(t >= 0 && t < cfg.vocab_size);

  // Temperature 0 and top_k 1 both take the argmax; the context is cropped to n_positions.
  Generator g3(1), g4(2);
  const Tensor greedy = gpt->generate(prompt, 9, 0.0, 0, g3);
  EXPECT_TRUE(equal(greedy, gpt->generate(prompt, 9, 0.7, 1, g4)));
  gpt->eval();
  const auto gv = greedy.to_vector();
  for (size_t t = 3; t < gv.size(); ++t) {
    const size_t start = t > 8 ? t - 8 : 0;
    std::vector<double> ctx(gv.begin() + static_cast<long>(start),
                            gv.begin() + static_cast<long>(t));
    NoGradGuard ng;
    const Tensor logits =
        gpt->forward(Tensor::from_vector(ctx, {1, static_cast<int64_t>(ctx.size())}, DType::kI64));
    const auto last = logits.select(1, logits.size(1) - 1).to_vector();
    EXPECT_EQ(gv[t], std::max_element(last.begin(), last.end()) - last.begin()) << t;
  }
  EXPECT_THROW(gpt->generate(Tensor::from_vector({1, 2}, {2, 1}, DType::kI64), 1, 1.0, 0, g1),
               Error);
  EXPECT_THROW(gpt->generate(prompt, 1, -1.0, 0, g1), Error);
}

TEST(GPT, BadIdsAreClearErrors) {
  GPT gpt(tiny_config(DType::kF32));
  const auto message = [&](const Tensor& ids) -> std::string {
    try {
      gpt.forward(ids);
    } catch (const Error& e) {
      return e.message();
    }
    return "no error";
  };
  EXPECT_NE(message(Tensor::zeros({1, 4}, DType::kF32)).find("i64 or i32"), std::string::npos);
  EXPECT_NE(message(Tensor::zeros({4}, DType::kI64)).find("[batch, seq]"), std::string::npos);
  EXPECT_NE(message(Tensor::zeros({1, 9}, DType::kI64)).find("exceeds n_positions 8"),
            std::string::npos);
  EXPECT_NE(message(Tensor::from_vector({1, 11}, {1, 2}, DType::kI32)).find("vocab_size 11"),
            std::string::npos);
  EXPECT_NE(message(Tensor::from_vector({-1}, {1, 1}, DType::kI64)).find("token id -1"),
            std::string::npos);
  EXPECT_NO_THROW(gpt.forward(Tensor::from_vector({1, 10}, {1, 2}, DType::kI32)));
  gpt.clear_saved();
}

TEST(GPT, LoadsAStateDictWithoutTheTiedHeadKey) {
  auto src = make_gpt(tiny_config(DType::kF32), 3);
  GPT dst(tiny_config(DType::kF32));
  NamedTensors sd;
  for (auto& [n, t] : src->state_dict()) {
    if (n != "lm_head.weight") sd.emplace_back(n, t.clone());
  }
  const LoadResult r = dst.load_state_dict(sd);
  EXPECT_TRUE(r.missing_keys.empty());
  EXPECT_TRUE(r.unexpected_keys.empty());
  const Tensor ids = random_ids(1, 5, 11, 1);
  EXPECT_TRUE(equal(dst.forward(ids), src->forward(ids)));
  EXPECT_TRUE(dst.get_submodule("lm_head").param("weight").is(
      dst.get_submodule("transformer.wte").param("weight")));
}

// ---- GPTConfig -----------------------------------------------------------------------------

TEST(GPTConfig, HuggingFaceJsonRoundTrip) {
  GPTConfig cfg;
  cfg.vocab_size = 256;
  cfg.n_positions = 128;
  cfg.n_embd = 64;
  cfg.n_layer = 3;
  cfg.n_head = 4;
  cfg.n_inner = 100;
  cfg.layer_norm_epsilon = 1e-6;
  cfg.activation = GeluApproximate::kNone;
  cfg.embd_pdrop = 0.0;
  cfg.attn_pdrop = 0.25;
  cfg.resid_pdrop = 0.5;
  cfg.initializer_range = 0.03;
  const std::string json = cfg.to_hf_json();
  for (const char* key :
       {"\"model_type\": \"gpt2\"", "\"GPT2LMHeadModel\"", "\"tie_word_embeddings\": true",
        "\"activation_function\": \"gelu\"", "\"bos_token_id\": 255", "\"n_inner\": 100"}) {
    EXPECT_NE(json.find(key), std::string::npos) << key << " in " << json;
  }
  const GPTConfig back = GPTConfig::from_hf_json(json);
  EXPECT_EQ(back.vocab_size, 256);
  EXPECT_EQ(back.n_positions, 128);
  EXPECT_EQ(back.n_embd, 64);
  EXPECT_EQ(back.n_layer, 3);
  EXPECT_EQ(back.n_head, 4);
  EXPECT_EQ(back.n_inner, 100);
  EXPECT_EQ(back.layer_norm_epsilon, 1e-6);
  EXPECT_EQ(back.activation, GeluApproximate::kNone);
  EXPECT_EQ(back.embd_pdrop, 0.0);
  EXPECT_EQ(back.attn_pdrop, 0.25);
  EXPECT_EQ(back.resid_pdrop, 0.5);
  EXPECT_EQ(back.initializer_range, 0.03);
  EXPECT_EQ(back.to_hf_json(), json);

  cfg.n_inner = 0;
  EXPECT_NE(cfg.to_hf_json().find("\"n_inner\": null"), std::string::npos);
  EXPECT_EQ(GPTConfig::from_hf_json(cfg.to_hf_json()).inner(), 256);
}

TEST(GPTConfig, ReadsTransformersGpt2ConfigJson) {
  // transformers' gpt2 config.json (abridged: extra keys are ignored).
  const GPTConfig cfg = GPTConfig::from_hf_json(R"({
    "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
    "attn_pdrop": 0.1, "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256,
    "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "gpt2",
    "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_inner": null, "n_layer": 12,
    "n_positions": 1024, "resid_pdrop": 0.1, "summary_type": "cls_index",
    "task_specific_params": {"text-generation": {"do_sample": true, "max_length": 50}},
    "vocab_size": 50257})");
  EXPECT_EQ(cfg.vocab_size, 50257);
  EXPECT_EQ(cfg.n_inner, 0);
  EXPECT_EQ(cfg.inner(), 3072);
  EXPECT_EQ(cfg.activation, GeluApproximate::kTanh);
  EXPECT_EQ(cfg.layer_norm_epsilon, 1e-5);
}

TEST(GPTConfig, ValidationNamesTheField) {
  const auto message = [](GPTConfig cfg) -> std::string {
    try {
      cfg.validate();
    } catch (const Error& e) {
      return e.message();
    }
    return "no error";
  };
  GPTConfig cfg = tiny_config();
  EXPECT_EQ(message(cfg), "no error");
  cfg.n_head = 3;
  EXPECT_NE(message(cfg).find("n_embd = 8 must be a multiple of n_head = 3"), std::string::npos);
  cfg = tiny_config();
  cfg.vocab_size = 0;
  EXPECT_NE(message(cfg).find("vocab_size"), std::string::npos);
  cfg = tiny_config();
  cfg.attn_pdrop = 1.0;
  EXPECT_NE(message(cfg).find("attn_pdrop"), std::string::npos);
  cfg = tiny_config();
  cfg.n_inner = -1;
  EXPECT_NE(message(cfg).find("n_inner"), std::string::npos);
  cfg = tiny_config();
  cfg.layer_norm_epsilon = 0;
  EXPECT_NE(message(cfg).find("layer_norm_epsilon"), std::string::npos);
  cfg = tiny_config();
  cfg.dtype = DType::kI32;
  EXPECT_NE(message(cfg).find("dtype"), std::string::npos);
  cfg = tiny_config();
  cfg.n_head = 3;
  EXPECT_THROW(GPT{cfg}, Error);

  EXPECT_THROW(GPTConfig::from_hf_json("{not json"), Error);
  EXPECT_THROW(GPTConfig::from_hf_json("[1, 2]"), Error);
  EXPECT_THROW(GPTConfig::from_hf_json(R"({"model_type": "llama"})"), Error);
  EXPECT_THROW(GPTConfig::from_hf_json(R"({"n_embd": "768"})"), Error);
  EXPECT_THROW(GPTConfig::from_hf_json(R"({"activation_function": "relu"})"), Error);
  EXPECT_THROW(GPTConfig::from_hf_json(R"({"n_embd": 100, "n_head": 12})"), Error);
}

}  // namespace
}  // namespace braid::nn
