// The Llama as the parallelism layers use it: init_weights_range against init_weights, a model
// built on meta, chained LlamaStages against the whole model (bit for bit), and keep_heads with
// q/k/v/o split by hand over "ranks" in one process against the unsplit attention.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "braid/core/allocator.h"
#include "braid/core/error.h"
#include "braid/nn/loss.h"
#include "llama_test_util.h"

namespace braid::nn {
namespace {

using llama_testing::random_ids;
using llama_testing::randomize;
using llama_testing::tiny_config;

LlamaConfig init_config(bool tie) {
  LlamaConfig c = tiny_config(DType::kF32);
  c.hidden_size = 12;  // odd element counts somewhere: 12 x 13 = 156, 20 x 12 = 240, 6 x 12 = 72
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.intermediate_size = 19;
  c.tie_word_embeddings = tie;
  c.pad_token_id = 4;
  c.attention_bias = true;
  return c;
}

TEST(LlamaInitRange, EveryRangeOfEveryParameterMatchesTheWholeInitialization) {
  for (bool tie : {false, true}) {
    Llama whole(init_config(tie));
    Generator gen(77);
    gen.set_offset(40);  // not a fresh generator: the ranges must start from its state
    Generator before(77);
    before.set_offset(40);
    whole.init_weights(gen);
    std::shared_ptr<Llama> empty;
    {
      InitEmptyWeights scope;
      empty = std::make_shared<Llama>(init_config(tie));
    }
    int checked = 0;
    for (auto& [name, p] : whole.named_parameters()) {
      const Tensor ref = p.data().contiguous();
      const int64_t n = ref.numel();
      for (int64_t offset : {int64_t{0}, int64_t{1}, int64_t{3}, int64_t{5}, n / 2, n - 1}) {
        for (int64_t count : {int64_t{1}, int64_t{2}, int64_t{7}, int64_t{13}, n}) {
          if (offset < 0 || offset + count > n) continue;
          std::vector<float> got(static_cast<size_t>(count));
          empty->init_weights_range(before, name, offset, count, got.data());
          ASSERT_EQ(0, std::memcmp(got.data(), ref.data<float>() + offset, got.size() * 4))
              << name << " [" << offset << ", " << offset + count << ")";
          ++checked;
        }
      }
      // Random ranges.
      Generator pick(static_cast<uint64_t>(n));
      for (int k = 0; k < 10; ++k) {
        const int64_t offset = pick.randint(0, n);
        const int64_t count = pick.randint(0, n - offset + 1);
        std::vector<float> got(static_cast<size_t>(count));
        empty->init_weights_range(before, name, offset, count, got.data());
        if (count == 0) continue;  // an empty range: nothing to compare (memcmp of null is UB)
        ASSERT_EQ(0, std::memcmp(got.data(), ref.data<float>() + offset, got.size() * 4))
            << name << " [" << offset << ", " << offset + count << ")";
      }
    }
    EXPECT_GT(checked, 100);
    EXPECT_EQ(before.offset(), 40u);  // not advanced
    float x;
    EXPECT_THROW(empty->init_weights_range(before, "nope", 0, 1, &x), Error);
    EXPECT_THROW(empty->init_weights_range(before, "model.norm.weight", 12, 1, &x), Error);
  }
}

TEST(LlamaOnMeta, SameShapesAndAForwardBackwardOnMeta) {
  const LlamaConfig cfg = init_config(false);
  Llama real(cfg);
  std::shared_ptr<Llama> model;
  {
    InitEmptyWeights empty;
    model = std::make_shared<Llama>(cfg);
  }
  const auto real_params = real.named_parameters();
  const auto meta_params = model->named_parameters();
  ASSERT_EQ(real_params.size(), meta_params.size());
  for (size_t i = 0; i < real_params.size(); ++i) {
    EXPECT_EQ(meta_params[i].first, real_params[i].first);
    EXPECT_EQ(meta_params[i].second.data().device(), kMeta) << meta_params[i].first;
    EXPECT_EQ(meta_params[i].second.data().shape(), real_params[i].second.data().shape());
    EXPECT_EQ(meta_params[i].second.data().dtype(), real_params[i].second.data().dtype());
  }
  const Tensor ids = Tensor::empty({3, 10}, DType::kI64, kMeta);
  const Tensor logits = model->forward(ids);
  EXPECT_EQ(logits.device(), kMeta);
  EXPECT_EQ(logits.shape(), (Shape{3, 10, 13}));
  model->backward(Tensor::empty(logits.shape(), logits.dtype(), kMeta));
  for (const auto& [name, p] : model->named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_EQ(p.grad().device(), kMeta) << name;
    EXPECT_EQ(p.grad().shape(), p.data().shape()) << name;
  }
}

// ---- pipeline stages -------------------------------------------------------------------------

struct Pass {
  Tensor logits;
  std::map<std::string, Tensor> grads;  // by parameter name
};

TEST(LlamaStage, ChainedStagesComputeTheWholeModelsBits) {
  for (bool tie : {false, true}) {
    LlamaConfig cfg = tiny_config(DType::kF32);
    cfg.num_hidden_layers = 3;
    cfg.tie_word_embeddings = tie;
    cfg.pad_token_id = 0;
    Llama whole(cfg);
    Generator gen(21);
    whole.init_weights(gen);
    const Tensor ids = random_ids(2, 7, cfg.vocab_size, 22);
    const Tensor targets = random_ids(2, 7, cfg.vocab_size, 23);

    Pass ref;
    ref.logits = whole.forward(ids);
    CrossEntropyLoss ce;
    ce.forward(ref.logits, targets);
    const Tensor dlogits = ce.backward();
    whole.backward(dlogits);
    for (auto& [n, p] : whole.named_parameters()) ref.grads[n] = p.grad();

    // Embedding + layer 0 | layers 1, 2 | the head alone.
    const std::vector<StageSpec> specs = {
        {0, 1, true, false}, {1, 3, false, false}, {3, 3, false, true}};
    std::vector<std::shared_ptr<CausalLMStage>> stages;
    for (const StageSpec& s : specs) {
      stages.push_back(whole.make_stage(s));
      EXPECT_EQ(stages.back()->type_name(), "LlamaStage");
      EXPECT_EQ(stages.back()->spec(), s);
      // From the same generator state, init_weights gives the whole model's values; then the
      // state dict (equal anyway) is loaded non-strictly.
      stages.back()->init_weights(Generator(21));
      for (auto& [n, p] : stages.back()->named_parameters()) {
        const std::string src = n == "lm_head.weight" && tie ? "model.embed_tokens.weight" : n;
        EXPECT_TRUE(equal(p.data(), whole.get_submodule(src.substr(0, src.rfind('.')))
                                        .param(src.substr(src.rfind('.') + 1))
                                        .data()))
            << n;
      }
    }
    Tensor h = ids;
    for (auto& s : stages) h = s->forward(h);
    EXPECT_TRUE(equal(h, ref.logits)) << "tie " << tie;
    Tensor g = dlogits;
    for (size_t i = stages.size(); i-- > 0;) g = stages[i]->backward(g);
    EXPECT_FALSE(g.defined());
    std::map<std::string, Tensor> got;
    for (auto& s : stages) {
      for (auto& [n, p] : s->named_parameters()) {
        if (n == "lm_head.weight" && tie) {
          // The replica's gradient is the head's part; the pipeline adds it to the embedding's.
          got["model.embed_tokens.weight"] = add(p.grad(), got["model.embed_tokens.weight"]);
        } else if (got.count(n)) {
          got[n] = add(got[n], p.grad());
        } else {
          got[n] = p.grad();
        }
      }
    }
    ASSERT_EQ(got.size(), ref.grads.size());
    for (auto& [n, r] : ref.grads) EXPECT_TRUE(equal(got[n], r)) << n << " tie " << tie;
  }
}

TEST(LlamaStage, RefusesEmptyAndOutOfRangeSpecs) {
  Llama m(tiny_config(DType::kF32));
  EXPECT_THROW(m.make_stage({1, 1, false, false}), Error);
  EXPECT_THROW(m.make_stage({1, 3, false, false}), Error);
  EXPECT_THROW(m.make_stage({2, 1, true, false}), Error);
  auto s = m.make_stage({0, 2, true, true});
  EXPECT_EQ(s->named_parameters().size(), m.named_parameters().size());
}

// ---- tensor parallelism by hand --------------------------------------------------------------

// A Linear holding rows [first, first + count) (kRows: output features) or columns (kCols:
// input features) of `src`'s [out, in] weight; the bias sliced with the rows, or kept whole on
// `keep_bias` (a row-parallel layer adds its bias once).
enum class Split { kRows, kCols };
std::shared_ptr<Linear> slice_linear(Linear& src, Split split, int64_t first, int64_t count,
                                     bool keep_bias) {
  const Tensor w = src.weight().data();
  const bool rows = split == Split::kRows;
  const int64_t in = rows ? src.in_features() : count, out = rows ? count : src.out_features();
  auto dst = std::make_shared<Linear>(in, out, src.has_bias() ? Bias::kYes : Bias::kNo,
                                      WeightLayout::kOutIn, w.dtype());
  dst->weight().data().copy_(rows ? w.narrow(0, first, count) : w.narrow(1, first, count));
  if (src.has_bias()) {
    const Tensor b = src.bias().data();
    if (rows) {
      dst->bias().data().copy_(b.narrow(0, first, count));
    } else if (keep_bias) {
      dst->bias().data().copy_(b);
    } else {
      dst->bias().data().zero_();
    }
  }
  return dst;
}

TEST(LlamaAttentionTensorParallel, KeptHeadsSumToTheWholeAttention) {
  for (const auto& [heads, kv, parts] :
       std::vector<std::tuple<int64_t, int64_t, int>>{{4, 2, 2}, {4, 4, 2}, {4, 4, 4}, {8, 2, 2}}) {
    LlamaConfig cfg = tiny_config(DType::kF32, kv);
    cfg.num_attention_heads = heads;
    cfg.hidden_size = 4 * heads;  // head_dim 4
    cfg.attention_bias = true;
    LlamaAttention whole(cfg);
    randomize(whole, 31);
    Generator gen(32);
    const Tensor x = Tensor::randn({2, 6, cfg.hidden_size}, DType::kF32, &gen);
    const Tensor dy = Tensor::randn({2, 6, cfg.hidden_size}, DType::kF32, &gen);
    const Tensor y = whole.forward(x);
    const Tensor dx = whole.backward(dy);

    const int64_t hd = cfg.head_dim(), qw = heads / parts * hd, kvw = kv / parts * hd;
    Tensor y_sum, dx_sum;
    for (int r = 0; r < parts; ++r) {
      LlamaAttention local(cfg);
      local.keep_heads(r, parts);
      EXPECT_EQ(local.local_heads(), heads / parts);
      EXPECT_EQ(local.local_kv_heads(), kv / parts);
      auto lin = [&](const char* n) -> Linear& {
        return dynamic_cast<Linear&>(whole.get_submodule(n));
      };
      local.replace_module("q_proj", slice_linear(lin("q_proj"), Split::kRows, r * qw, qw, false));
      local.replace_module("k_proj",
                           slice_linear(lin("k_proj"), Split::kRows, r * kvw, kvw, false));
      local.replace_module("v_proj",
                           slice_linear(lin("v_proj"), Split::kRows, r * kvw, kvw, false));
      local.replace_module("o_proj", slice_linear(lin("o_proj"), Split::kCols, r * qw, qw, r == 0));
      const Tensor yr = local.forward(x);
      const Tensor dxr = local.backward(dy);
      y_sum = r == 0 ? yr : add(y_sum, yr);
      dx_sum = r == 0 ? dxr : add(dx_sum, dxr);
      // Each rank's weight gradients are the slices of the whole ones (within f32 rounding:
      // the GEMMs have other shapes, so other blockings).
      const auto expect_slice = [&](const char* n, int dim, int64_t first, int64_t count) {
        const Tensor whole_grad = whole.get_submodule(n).param("weight").grad();
        const Tensor got = local.get_submodule(n).param("weight").grad();
        const double err = amax(abs(sub(got, whole_grad.narrow(dim, first, count)))).item();
        EXPECT_LE(err, 2e-6 * amax(abs(whole_grad)).item()) << n << " rank " << r;
      };
      expect_slice("q_proj", 0, r * qw, qw);
      expect_slice("k_proj", 0, r * kvw, kvw);
      expect_slice("v_proj", 0, r * kvw, kvw);
      expect_slice("o_proj", 1, r * qw, qw);
    }
    // Within f32 rounding: the partial products are summed in another order than one GEMM.
    const double scale = amax(abs(y)).item();
    EXPECT_LE(amax(abs(sub(y_sum, y))).item(), 2e-6 * scale) << heads << " " << kv << " " << parts;
    EXPECT_LE(amax(abs(sub(dx_sum, dx))).item(), 2e-6 * amax(abs(dx)).item());
    EXPECT_GT(scale, 0.1);
  }
}

TEST(LlamaAttentionTensorParallel, KeepHeadsRefusesUnevenSplits) {
  LlamaAttention attn(tiny_config(DType::kF32, 2));  // 4 heads, 2 kv heads
  std::string msg;
  try {
    attn.keep_heads(0, 4);
  } catch (const Error& e) {
    msg = e.message();
  }
  EXPECT_NE(msg.find("num_key_value_heads = 2"), std::string::npos) << msg;
  EXPECT_THROW(attn.keep_heads(0, 3), Error);
  EXPECT_THROW(attn.keep_heads(2, 2), Error);
  // Unsplit projections with kept heads: a shape error naming q_proj, not garbage.
  attn.keep_heads(1, 2);
  EXPECT_THROW(attn.forward(Tensor::zeros({1, 3, 16})), Error);
}

}  // namespace
}  // namespace braid::nn
