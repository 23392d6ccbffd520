// Llama: Hugging Face names and tying, the attention against a plain f64 transcription of
// transformers' LlamaAttention, every layer's backward and the whole model's against finite
// differences in f64 (grouped and plain multi-head attention), f32 against f64, bf16 autocast,
// checkpointing, initialization, the pad row, generation, errors, the config's JSON.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "../layers/finite_diff.h"
#include "braid/amp/autocast.h"
#include "braid/core/error.h"
#include "braid/nn/loss.h"
#include "llama_test_util.h"

namespace braid::nn {
namespace {

using llama_testing::random_ids;
using llama_testing::randomize;
using llama_testing::tiny_config;
using testing::check_layer_gradients;
using testing::expect_grad_close;
using testing::numeric_grad;

std::shared_ptr<Llama> make_llama(const LlamaConfig& cfg, uint64_t seed = 7) {
  auto m = std::make_shared<Llama>(cfg);
  Generator gen(seed);
  m->init_weights(gen);
  return m;
}

std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.message();
  }
  return "no error";
}

TEST(Llama, HuggingFaceNamesShapesAndTying) {
  LlamaConfig cfg = tiny_config(DType::kF32);
  Llama m(cfg);
  std::vector<std::string> expect = {"model.embed_tokens.weight"};
  for (int i = 0; i < 2; ++i) {
    const std::string l = "model.layers." + std::to_string(i) + ".";
    for (const char* n :
         {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
          "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
          "mlp.down_proj.weight", "input_layernorm.weight", "post_attention_layernorm.weight"}) {
      expect.push_back(l + n);
    }
  }
  expect.push_back("model.norm.weight");
  expect.push_back("lm_head.weight");
  std::vector<std::string> names;
  std::map<std::string, Shape> shapes;
  for (auto& [n, p] : m.named_parameters()) {
    names.push_back(n);
    shapes[n] = p.data().shape();
  }
  EXPECT_EQ(names, expect);
  EXPECT_EQ(shapes["model.embed_tokens.weight"], Shape({13, 16}));
  EXPECT_EQ(shapes["model.layers.0.self_attn.q_proj.weight"], Shape({16, 16}));  // [out, in]
  EXPECT_EQ(shapes["model.layers.0.self_attn.k_proj.weight"], Shape({8, 16}));   // 2 kv heads
  EXPECT_EQ(shapes["model.layers.0.self_attn.v_proj.weight"], Shape({8, 16}));
  EXPECT_EQ(shapes["model.layers.1.mlp.gate_proj.weight"], Shape({20, 16}));
  EXPECT_EQ(shapes["model.layers.1.mlp.down_proj.weight"], Shape({16, 20}));
  EXPECT_EQ(shapes["lm_head.weight"], Shape({13, 16}));
  EXPECT_TRUE(find_tied_parameters(m).empty());
  EXPECT_EQ(m.type_name(), "LlamaForCausalLM");
  EXPECT_EQ(m.get_submodule("model.layers.1").type_name(), "LlamaDecoderLayer");
  EXPECT_EQ(&m.get_submodule("model.layers.1"), &m.layer(1));
  EXPECT_EQ(m.get_submodule("model.layers.0.self_attn").type_name(), "LlamaAttention");
  EXPECT_EQ(m.get_submodule("model.layers.0.mlp").type_name(), "LlamaMLP");
  EXPECT_THROW(m.layer(2), Error);

  cfg.tie_word_embeddings = true;
  cfg.attention_bias = true;
  cfg.mlp_bias = true;
  Llama tied(cfg);
  const auto groups = find_tied_parameters(tied);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0], (std::vector<std::string>{"lm_head.weight", "model.embed_tokens.weight"}));
  EXPECT_EQ(tied.parallel_plan().tied_embedding, "model.embed_tokens");
  EXPECT_TRUE(m.parallel_plan().tied_embedding.empty());
  const auto sd = tied.state_dict();
  const auto has = [&](const std::string& k) {
    return std::any_of(sd.begin(), sd.end(), [&](const auto& kv) { return kv.first == k; });
  };
  for (const char* k :
       {"model.layers.0.self_attn.q_proj.bias", "model.layers.0.self_attn.o_proj.bias",
        "model.layers.1.mlp.up_proj.bias", "lm_head.weight"}) {
    EXPECT_TRUE(has(k)) << k;
  }
  EXPECT_EQ(tied.num_parameters(),
            m.num_parameters() - 13 * 16 + 2 * (16 + 8 + 8 + 16 + 20 + 20 + 16));
}

// Every rule of the plan names modules that exist and of the kind its style splits; the
// sequence split at embed_tokens, the three RMSNorms on the rank's positions.
TEST(Llama, ParallelPlanNamesItsModules) {
  Llama m(tiny_config(DType::kF32));
  const ParallelPlan& plan = m.parallel_plan();
  EXPECT_EQ(plan.blocks, "model.layers");
  std::vector<TensorParallelRule> rules = plan.tensor_parallel;
  rules.insert(rules.end(), plan.sequence_parallel.begin(), plan.sequence_parallel.end());
  for (const auto& rule : rules) {
    std::string path = rule.path;
    if (const auto star = path.find('*'); star != std::string::npos) path.replace(star, 1, "1");
    EXPECT_NO_THROW(m.get_submodule(path)) << rule.path;
    Module& target = m.get_submodule(path);
    if (rule.style == TensorParallelStyle::kHeads) {
      EXPECT_NE(dynamic_cast<AttentionHeads*>(&target), nullptr) << rule.path;
    }
    if (rule.style == TensorParallelStyle::kSequenceNorm) {
      EXPECT_NE(dynamic_cast<RMSNorm*>(&target), nullptr) << rule.path;
    }
    if (rule.style == TensorParallelStyle::kSequenceScatter) {
      EXPECT_NE(dynamic_cast<Embedding*>(&target), nullptr) << rule.path;
    }
  }
  EXPECT_EQ(plan.tensor_parallel.size(), 10u);
  EXPECT_EQ(plan.sequence_parallel.size(), 4u);
}

// ---- the attention against a plain transcription of transformers' LlamaAttention -------------

// x [B, T, d] f64 -> o_proj input [B, T, H hd], with loops: q/k/v projections, rotate_half
// rotary in f64 (angles from f32 inv_freq, as transformers), repeat_kv, causal softmax.
std::vector<double> reference_attention(const LlamaConfig& cfg, Module& attn, const Tensor& x) {
  const int64_t b = x.size(0), t = x.size(1), d = cfg.hidden_size, h = cfg.num_attention_heads,
                kv = cfg.kv_heads(), hd = cfg.head_dim();
  const auto xv = x.to_vector();
  const auto proj = [&](const char* name, int64_t out) {
    const auto w = attn.get_submodule(name).param("weight").data().to_vector();
    std::vector<double> y(static_cast<size_t>(b * t * out));
    for (int64_t r = 0; r < b * t; ++r)
      for (int64_t o = 0; o < out; ++o) {
        double s = 0;
        for (int64_t i = 0; i < d; ++i) s += xv[r * d + i] * w[o * d + i];
        y[r * out + o] = s;
      }
    return y;
  };
  auto q = proj("q_proj", h * hd), k = proj("k_proj", kv * hd), v = proj("v_proj", kv * hd);
  const auto rope = [&](std::vector<double>& y, int64_t n) {
    for (int64_t r = 0; r < b * t; ++r) {
      const int64_t pos = r % t;
      for (int64_t head = 0; head < n; ++head) {
        double* p = &y[(r * n + head) * hd];
        std::vector<double> out(hd);
        for (int64_t i = 0; i < hd; ++i) {
          const float inv = 1.0f / std::pow(static_cast<float>(cfg.rope_theta),
                                            static_cast<float>(2 * (i % (hd / 2))) / float(hd));
          const double ang = static_cast<float>(pos) * inv;
          const double rot = i < hd / 2 ? -p[i + hd / 2] : p[i - hd / 2];
          out[i] = p[i] * std::cos(ang) + rot * std::sin(ang);
        }
        std::copy(out.begin(), out.end(), p);
      }
    }
  };
  rope(q, h);
  rope(k, kv);
  std::vector<double> y(static_cast<size_t>(b * t * h * hd), 0.0);
  for (int64_t bb = 0; bb < b; ++bb)
    for (int64_t head = 0; head < h; ++head) {
      const int64_t g = head / (h / kv);
      for (int64_t i = 0; i < t; ++i) {
        std::vector<double> s(i + 1);
        double mx = -1e300;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < hd; ++e)
            dot += q[((bb * t + i) * h + head) * hd + e] * k[((bb * t + j) * kv + g) * hd + e];
          s[j] = dot / std::sqrt(double(hd));
          mx = std::max(mx, s[j]);
        }
        double z = 0;
        for (double& e : s) z += (e = std::exp(e - mx));
        for (int64_t j = 0; j <= i; ++j)
          for (int64_t e = 0; e < hd; ++e)
            y[((bb * t + i) * h + head) * hd + e] += s[j] / z * v[((bb * t + j) * kv + g) * hd + e];
      }
    }
  return y;
}

class LlamaAttentionHeads : public ::testing::TestWithParam<int64_t> {};

TEST_P(LlamaAttentionHeads, ForwardMatchesAPlainTranscription) {
  const LlamaConfig cfg = tiny_config(DType::kF64, GetParam());
  LlamaAttention attn(cfg);
  randomize(attn, 3);
  // Replace o_proj by the identity, so the output is the attention core's.
  auto eye = std::make_shared<Linear>(16, 16, Bias::kNo, WeightLayout::kOutIn, DType::kF64);
  eye->weight().data().copy_(Tensor::from_vector(
      [] {
        std::vector<double> e(256, 0.0);
        for (int i = 0; i < 16; ++i) e[i * 17] = 1.0;
        return e;
      }(),
      {16, 16}, DType::kF64));
  attn.replace_module("o_proj", eye);
  Generator gen(4);
  const Tensor x = Tensor::randn({2, 7, 16}, DType::kF64, &gen);
  NoGradGuard no_grad;
  const std::vector<double> got = attn.forward(x).to_vector();
  const std::vector<double> ref = reference_attention(cfg, attn, x);
  ASSERT_EQ(got.size(), ref.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - ref[i]));
  // cos / sin go through f32 in both (transformers' rule) but braid rounds them to f32, the
  // reference does not: a few f32 ulps.
  EXPECT_LT(worst, 1e-6);
  EXPECT_GT(std::abs(ref[5]), 1e-3);  // not all zeros
}

TEST_P(LlamaAttentionHeads, BackwardMatchesFiniteDifferencesF64) {
  LlamaConfig cfg = tiny_config(DType::kF64, GetParam());
  for (bool bias : {false, true}) {
    cfg.attention_bias = bias;
    LlamaAttention attn(cfg);
    randomize(attn, 5);
    Generator gen(6);
    check_layer_gradients(attn, Tensor::randn({2, 6, 16}, DType::kF64, &gen));
  }
}

// 1 and 2 key / value heads (grouped), 4 (plain multi-head).
INSTANTIATE_TEST_SUITE_P(KvHeads, LlamaAttentionHeads, ::testing::Values(1, 2, 4));

TEST(LlamaLayers, MlpAndDecoderLayerBackwardMatchFiniteDifferencesF64) {
  LlamaConfig cfg = tiny_config();
  for (bool bias : {false, true}) {
    cfg.mlp_bias = bias;
    LlamaMLP mlp(cfg);
    randomize(mlp, 7);
    Generator gen(8);
    check_layer_gradients(mlp, Tensor::randn({2, 5, 16}, DType::kF64, &gen));
  }
  LlamaDecoderLayer layer(tiny_config());
  randomize(layer, 9);
  Generator gen(10);
  check_layer_gradients(layer, Tensor::randn({2, 6, 16}, DType::kF64, &gen));
  RMSNorm norm(16, 1e-5, DType::kF64);
  randomize(norm, 11);
  check_layer_gradients(norm, Tensor::randn({3, 16}, DType::kF64, &gen));
}

// transformers' LlamaRMSNorm with bf16 data: x * rstd rounded to bf16, then times the weight in
// bf16; RmsNormWeight::kFused rounds once. f32 data: both the same bits.
TEST(LlamaLayers, RmsNormAppliesTheWeightAfterTheCastBack) {
  Generator gen(17);
  const Tensor x32 = Tensor::randn({5, 16}, DType::kF32, &gen);
  const Tensor w32 = add(mul(Tensor::randn({16}, DType::kF32, &gen), 0.5), 1.0);
  RMSNorm fused(16, 1e-5, DType::kBF16), after(16, 1e-5, DType::kBF16, RmsNormWeight::kAfterCast);
  fused.weight().data().copy_(w32.to(DType::kBF16));
  after.weight().data().copy_(w32.to(DType::kBF16));
  const Tensor x = x32.to(DType::kBF16);
  NoGradGuard no_grad;
  const Tensor ya = after.forward(x);
  ASSERT_EQ(ya.dtype(), DType::kBF16);
  RMSNorm plain(16, 1e-5, DType::kF32);  // weight 1: x * rstd in f32
  const Tensor expect =
      mul(plain.forward(x.to(DType::kF32)).to(DType::kBF16), fused.weight().data());
  EXPECT_TRUE(equal(ya, expect));
  EXPECT_FALSE(equal(ya, fused.forward(x)));  // one rounding fewer differs somewhere
  RMSNorm f32_fused(16, 1e-5), f32_after(16, 1e-5, DType::kF32, RmsNormWeight::kAfterCast);
  f32_fused.weight().data().copy_(w32);
  f32_after.weight().data().copy_(w32);
  EXPECT_TRUE(equal(f32_fused.forward(x32), f32_after.forward(x32)));
}

// The whole model in f64, every element of every parameter, tied and untied, grouped and not.
TEST(Llama, GradientsMatchFiniteDifferencesF64) {
  for (bool tie : {false, true}) {
    for (int64_t kv : {2, 4}) {
      LlamaConfig cfg = tiny_config(DType::kF64, kv);
      cfg.tie_word_embeddings = tie;
      auto m = make_llama(cfg);
      randomize(*m, 12);
      const Tensor ids = random_ids(2, 6, cfg.vocab_size, 3);
      Generator gen(13);
      const Tensor w = Tensor::randn({2, 6, cfg.vocab_size}, DType::kF64, &gen);
      m->zero_grad();
      m->forward(ids);
      EXPECT_FALSE(m->backward(w).defined());
      EXPECT_EQ(m->saved_count(), 0u);
      const auto loss = [&] {
        NoGradGuard no_grad;
        return testing::project(m->forward(ids), w);
      };
      for (auto& [name, p] : m->named_parameters()) {
        expect_grad_close(p.grad(), numeric_grad(loss, p.data()),
                          name + (tie ? " (tied)" : "") + " kv " + std::to_string(kv));
      }
    }
  }
}

TEST(Llama, CrossEntropyTrainingStepF32MatchesF64) {
  auto m64 = make_llama(tiny_config(DType::kF64));
  Llama m32(tiny_config(DType::kF32));
  m32.load_state_dict(m64->state_dict());
  const Tensor ids = random_ids(3, 9, 13, 6);
  const Tensor targets = random_ids(3, 9, 13, 16);
  CrossEntropyLoss ce64, ce32;
  const Tensor l64 = m64->forward(ids);
  const Tensor l32 = m32.forward(ids);
  EXPECT_EQ(l32.dtype(), DType::kF32);
  EXPECT_TRUE(allclose(l32.to(DType::kF64), l64, 1e-5, 1e-5));
  ce64.forward(l64, targets);
  ce32.forward(l32, targets);
  m64->backward(ce64.backward());
  m32.backward(ce32.backward());
  for (auto& [n, p] : m64->named_parameters()) {
    const Parameter& q =
        m32.get_submodule(n.substr(0, n.rfind('.'))).param(n.substr(n.rfind('.') + 1));
    const double diff = amax(abs(sub(q.grad().to(DType::kF64), p.grad()))).item();
    EXPECT_LE(diff, 1e-5 * amax(abs(p.grad())).item()) << n;
  }
}

TEST(Llama, Bf16AutocastIsCloseToF32) {
  LlamaConfig cfg = tiny_config(DType::kF32);
  cfg.initializer_range = 0.1;
  auto m = make_llama(cfg);
  const Tensor ids = random_ids(2, 8, cfg.vocab_size, 8);
  Generator gen(14);
  const Tensor w = Tensor::randn({2, 8, cfg.vocab_size}, DType::kF32, &gen);
  const Tensor ref = m->forward(ids);
  m->backward(w);
  std::vector<Tensor> ref_grads;
  for (auto& [n, p] : m->named_parameters()) ref_grads.push_back(p.grad().clone());
  m->zero_grad();
  Tensor low;
  {
    amp::AutocastScope scope(DType::kBF16);
    low = m->forward(ids);
    m->backward(w.to(low.dtype()));
  }
  EXPECT_EQ(low.dtype(), DType::kBF16);
  EXPECT_TRUE(allclose(low.to(DType::kF32), ref, 0.0, 0.03 * amax(abs(ref)).item()));
  size_t i = 0;
  for (auto& [n, p] : m->named_parameters()) {
    ASSERT_EQ(p.grad().dtype(), DType::kF32) << n;
    const Tensor& r = ref_grads[i++];
    EXPECT_TRUE(allclose(p.grad(), r, 0.0, 0.05 * amax(abs(r)).item() + 1e-6)) << n;
  }
}

std::vector<Tensor> step(Llama& m, const Tensor& ids, Tensor* logits) {
  m.zero_grad();
  *logits = m.forward(ids);
  CrossEntropyLoss ce;
  ce.forward(*logits, random_ids(ids.size(0), ids.size(1), m.vocab_size(), 99));
  m.backward(ce.backward());
  std::vector<Tensor> grads;
  for (auto& [n, p] : m.named_parameters()) grads.push_back(p.grad().clone());
  return grads;
}

TEST(Llama, CheckpointingGivesTheSameGradientsBitwise) {
  LlamaConfig cfg = tiny_config(DType::kF32);
  auto plain = make_llama(cfg);
  cfg.activation_checkpointing = true;
  auto ckpt = make_llama(cfg);
  for (int64_t i = 0; i < ckpt->num_blocks(); ++i) EXPECT_TRUE(ckpt->layer(i).checkpointing());
  const Tensor ids = random_ids(3, 8, 13, 10);
  Tensor la, lb;
  const auto a = step(*plain, ids, &la);
  const auto b = step(*ckpt, ids, &lb);
  EXPECT_TRUE(equal(la, lb));
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(equal(a[i], b[i])) << i;
  EXPECT_EQ(ckpt->saved_count(), 0u);
}

TEST(Llama, InitWeightsFollowsTransformers) {
  LlamaConfig cfg = tiny_config(DType::kF32);
  cfg.hidden_size = 64;
  cfg.intermediate_size = 96;
  cfg.vocab_size = 300;
  cfg.initializer_range = 0.02;
  cfg.pad_token_id = 5;
  auto m = make_llama(cfg);
  for (auto& [n, p] : m->named_parameters()) {
    const auto v = p.data().to_vector();
    if (n.ends_with("norm.weight")) {
      EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](double x) { return x == 1; })) << n;
      continue;
    }
    double s = 0;
    for (double x : v) s += x * x;
    EXPECT_NEAR(std::sqrt(s / double(v.size())), 0.02, 0.0015) << n;
  }
  const Tensor pad_row = m->get_submodule("model.embed_tokens").param("weight").data().select(0, 5);
  EXPECT_EQ(amax(abs(pad_row)).item(), 0.0);
  auto again = make_llama(cfg);
  for (size_t i = 0; i < m->named_parameters().size(); ++i) {
    EXPECT_TRUE(
        equal(m->named_parameters()[i].second.data(), again->named_parameters()[i].second.data()));
  }
}

// torch's padding_idx: the embedding adds nothing into the pad row; a tied head still does.
TEST(Llama, PadTokenPositionsAddNothingToTheEmbeddingGradient) {
  for (bool tie : {false, true}) {
    LlamaConfig cfg = tiny_config(DType::kF64);
    cfg.pad_token_id = 3;
    cfg.tie_word_embeddings = tie;
    auto m = make_llama(cfg);
    const Tensor ids = Tensor::from_vector({3, 1, 3, 7, 2, 3}, {2, 3}, DType::kI64);
    Generator gen(15);
    const Tensor w = Tensor::randn({2, 3, 13}, DType::kF64, &gen);
    m->forward(ids);
    m->backward(w);
    const Tensor g = m->get_submodule("model.embed_tokens").param("weight").grad();
    const double pad_row = amax(abs(g.select(0, 3))).item();
    if (tie) {
      // Only lm_head's part: sum over positions of w[..., 3] * h.
      EXPECT_GT(pad_row, 0.0);
    } else {
      EXPECT_EQ(pad_row, 0.0);
    }
    EXPECT_GT(amax(abs(g.select(0, 7))).item(), 0.0);
  }
}

TEST(Llama, GenerateIsDeterministicAndGreedyTakesTheArgmax) {
  auto m = make_llama(tiny_config(DType::kF32));
  const Tensor prompt = Tensor::from_vector({1, 2, 3}, {1, 3}, DType::kI64);
  Generator g1(42), g2(42);
  const Tensor a = m->generate(prompt, 6, 1.0, 4, g1);
  const Tensor b = m->generate(prompt, 6, 1.0, 4, g2);
  EXPECT_EQ(a.shape(), Shape({1, 9}));
  EXPECT_TRUE(equal(a, b));
  EXPECT_TRUE(m->is_training());  // restored
  Generator g3(1);
  const Tensor greedy = m->generate(prompt, 1, 0.0, 0, g3);
  NoGradGuard no_grad;
  const std::vector<double> last = m->forward(prompt).select(1, 2).to_vector();
  EXPECT_EQ(greedy.to_vector()[3],
            double(std::max_element(last.begin(), last.end()) - last.begin()));
  EXPECT_THROW(m->generate(prompt, 1, -1.0, 0, g3), Error);
}

TEST(Llama, BadIdsAreClearErrors) {
  Llama m(tiny_config(DType::kF32));
  const auto msg = [&](const Tensor& ids) { return message_of([&] { m.forward(ids); }); };
  EXPECT_NE(msg(Tensor::zeros({1, 4}, DType::kF32)).find("i64 or i32"), std::string::npos);
  EXPECT_NE(msg(Tensor::zeros({4}, DType::kI64)).find("[batch, seq]"), std::string::npos);
  EXPECT_NE(msg(Tensor::from_vector({1, 13}, {1, 2}, DType::kI32)).find("vocab_size 13"),
            std::string::npos);
  m.clear_saved();
}

// ---- LlamaConfig ---------------------------------------------------------------------------

TEST(LlamaConfig, HuggingFaceJsonRoundTrip) {
  LlamaConfig cfg = tiny_config(DType::kBF16);
  cfg.tie_word_embeddings = true;
  cfg.attention_bias = true;
  cfg.pad_token_id = 0;
  cfg.rope_theta = 500000.0;
  const std::string json = cfg.to_hf_json();
  for (const char* key :
       {"\"model_type\": \"llama\"", "\"LlamaForCausalLM\"", "\"tie_word_embeddings\": true",
        "\"hidden_act\": \"silu\"", "\"num_key_value_heads\": 2", "\"rope_scaling\": null",
        "\"torch_dtype\": \"bfloat16\"", "\"pad_token_id\": 0"}) {
    EXPECT_NE(json.find(key), std::string::npos) << key << " in " << json;
  }
  const LlamaConfig back = LlamaConfig::from_hf_json(json);
  EXPECT_EQ(back.vocab_size, 13);
  EXPECT_EQ(back.hidden_size, 16);
  EXPECT_EQ(back.intermediate_size, 20);
  EXPECT_EQ(back.num_hidden_layers, 2);
  EXPECT_EQ(back.num_attention_heads, 4);
  EXPECT_EQ(back.num_key_value_heads, 2);
  EXPECT_EQ(back.max_position_embeddings, 16);
  EXPECT_EQ(back.rope_theta, 500000.0);
  EXPECT_EQ(back.rms_norm_eps, 1e-5);
  EXPECT_EQ(back.initializer_range, 0.3);
  EXPECT_TRUE(back.tie_word_embeddings);
  EXPECT_TRUE(back.attention_bias);
  EXPECT_FALSE(back.mlp_bias);
  EXPECT_EQ(back.pad_token_id, 0);
  EXPECT_EQ(back.dtype, DType::kBF16);
  EXPECT_EQ(back.to_hf_json(), json);
  // Defaults: transformers' LlamaConfig.
  const LlamaConfig d = LlamaConfig::from_hf_json(R"({"model_type": "llama"})");
  EXPECT_EQ(d.vocab_size, 32000);
  EXPECT_EQ(d.hidden_size, 4096);
  EXPECT_EQ(d.intermediate_size, 11008);
  EXPECT_EQ(d.kv_heads(), 32);
  EXPECT_EQ(d.max_position_embeddings, 2048);
  EXPECT_EQ(d.rms_norm_eps, 1e-6);
  EXPECT_EQ(d.rope_theta, 10000.0);
  EXPECT_FALSE(d.tie_word_embeddings);
  EXPECT_EQ(d.pad_token_id, -1);
}

TEST(LlamaConfig, ReadsTransformersLlamaConfigJson) {
  // A Llama-2-style config.json (abridged; extra keys are ignored).
  const LlamaConfig cfg = LlamaConfig::from_hf_json(R"({
    "architectures": ["LlamaForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 11008, "max_position_embeddings": 4096, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": null, "tie_word_embeddings": false,
    "torch_dtype": "float16", "transformers_version": "4.31.0.dev0", "use_cache": true,
    "vocab_size": 32000})");
  EXPECT_EQ(cfg.num_key_value_heads, 8);
  EXPECT_EQ(cfg.max_position_embeddings, 4096);
  EXPECT_EQ(cfg.rms_norm_eps, 1e-5);
  EXPECT_EQ(cfg.dtype, DType::kF16);
  EXPECT_EQ(cfg.head_dim(), 128);
}

TEST(LlamaConfig, RefusalsNameTheField) {
  const auto invalid = [](LlamaConfig cfg) { return message_of([&] { cfg.validate(); }); };
  LlamaConfig cfg = tiny_config();
  EXPECT_EQ(invalid(cfg), "no error");
  cfg.num_attention_heads = 3;
  EXPECT_NE(invalid(cfg).find("hidden_size = 16 must be a multiple of num_attention_heads = 3"),
            std::string::npos);
  cfg = tiny_config();
  cfg.num_key_value_heads = 3;
  EXPECT_NE(invalid(cfg).find("num_key_value_heads = 3"), std::string::npos);
  cfg = tiny_config();
  cfg.hidden_act = "gelu";
  EXPECT_NE(invalid(cfg).find("hidden_act \"gelu\""), std::string::npos);
  cfg = tiny_config();
  cfg.attention_dropout = 0.1;
  EXPECT_NE(invalid(cfg).find("attention_dropout = 0.1"), std::string::npos);
  cfg = tiny_config();
  cfg.intermediate_size = 0;
  EXPECT_NE(invalid(cfg).find("intermediate_size"), std::string::npos);
  cfg = tiny_config();
  cfg.rms_norm_eps = 0;
  EXPECT_NE(invalid(cfg).find("rms_norm_eps"), std::string::npos);
  cfg = tiny_config();
  cfg.pad_token_id = 13;
  EXPECT_NE(invalid(cfg).find("pad_token_id"), std::string::npos);
  cfg = tiny_config();
  cfg.hidden_size = 12;  // head_dim 3: odd
  EXPECT_NE(invalid(cfg).find("must be even"), std::string::npos);
  cfg = tiny_config();
  cfg.num_attention_heads = 3;
  EXPECT_THROW(Llama{cfg}, Error);

  const auto parse = [](const char* json) {
    return message_of([&] { LlamaConfig::from_hf_json(json); });
  };
  EXPECT_NE(parse(R"({"rope_scaling": {"type": "linear", "factor": 2.0}})").find("rope_scaling"),
            std::string::npos);
  EXPECT_NE(parse(R"({"hidden_act": "gelu"})").find("hidden_act \"gelu\""), std::string::npos);
  EXPECT_NE(parse(R"({"attention_dropout": 0.1})").find("attention_dropout"), std::string::npos);
  EXPECT_NE(parse(R"({"model_type": "gpt2"})").find("model_type"), std::string::npos);
  EXPECT_NE(parse(R"({"hidden_size": "4096"})").find("hidden_size"), std::string::npos);
  EXPECT_NE(parse("{not json").find("not valid JSON"), std::string::npos);
  EXPECT_EQ(parse(R"({"rope_scaling": null})"), "no error");
}

}  // namespace
}  // namespace braid::nn
