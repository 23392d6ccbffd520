// braid's GPT against transformers' GPT2LMHeadModel run by PyTorch 1.13
// (gen_torch_gpt.py -> torch_gpt.safetensors): logits, loss and every parameter gradient of
// one forward / backward in f64, f32 and under bf16 autocast, loaded through the Hugging Face
// names, and cross-entropy with label smoothing. Tolerances: docs/nn.md, "Checked against
// PyTorch".
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "braid/amp/autocast.h"
#include "braid/nn/gpt.h"
#include "braid/tensor/safetensors.h"

namespace braid::nn {
namespace {

const char* kFile = BRAID_SOURCE_DIR "/tests/reference/torch_gpt.safetensors";

class TorchGpt : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    for (auto& [name, t] : load_safetensors(kFile)) ref()[name] = t;
  }
  static std::map<std::string, Tensor>& ref() {
    static std::map<std::string, Tensor> r;
    return r;
  }
  static const Tensor& at(const std::string& name) {
    auto it = ref().find(name);
    if (it == ref().end()) throw std::runtime_error("torch_gpt.safetensors has no " + name);
    return it->second;
  }
  static GPTConfig config(DType dtype) {
    GPTConfig c;
    c.vocab_size = 32;
    c.n_positions = 16;
    c.n_embd = 16;
    c.n_layer = 2;
    c.n_head = 4;
    c.activation = GeluApproximate::kTanh;
    c.embd_pdrop = c.attn_pdrop = c.resid_pdrop = 0.0;
    c.dtype = dtype;
    return c;
  }
  // A GPT holding the reference weights (strict load through the Hugging Face names; the
  // tied lm_head.weight is absent from the file, as in save_pretrained's output).
  static std::shared_ptr<GPT> model(DType dtype) {
    auto gpt = std::make_shared<GPT>(config(dtype));
    NamedTensors sd;
    for (auto& [name, t] : ref()) {
      if (name.rfind("weight.", 0) == 0) sd.emplace_back(name.substr(7), t);
    }
    gpt->load_state_dict(sd);
    return gpt;
  }
  // max |a - b| / max(max |b|, tiny): a normalized error, as test-backend-ops reports.
  static double rel_err(const Tensor& a, const Tensor& b) {
    EXPECT_EQ(a.shape(), b.shape());
    auto va = a.to_vector(), vb = b.to_vector();
    double num = 0, den = 1e-30;
    for (size_t i = 0; i < va.size(); ++i) {
      num = std::max(num, std::abs(va[i] - vb[i]));
      den = std::max(den, std::abs(vb[i]));
    }
    return num / den;
  }
  // Forward + cross-entropy + backward; checks logits, loss and every gradient.
  static void check(const std::string& prefix, DType dtype, double tol_logits, double tol_grad) {
    auto gpt = model(dtype);
    gpt->zero_grad();
    CrossEntropyLoss ce;
    Tensor logits = gpt->forward(at("ids"));
    Tensor loss = ce.forward(logits, at("targets"));
    gpt->backward(ce.backward());
    EXPECT_LE(rel_err(logits.to(DType::kF64), at(prefix + ".logits").to(DType::kF64)), tol_logits)
        << prefix << " logits";
    EXPECT_NEAR(loss.item(), at(prefix + ".loss").item(), tol_logits * 4) << prefix << " loss";
    int checked = 0;
    for (auto& [name, p] : gpt->named_parameters()) {
      ASSERT_TRUE(p.grad().defined()) << name;
      EXPECT_LE(rel_err(p.grad().to(DType::kF64), at(prefix + ".grad." + name).to(DType::kF64)),
                tol_grad)
          << prefix << " grad of " << name;
      ++checked;
    }
    EXPECT_EQ(checked, 4 + 12 * 2);  // wte, wpe, ln_f (2) + 12 per block
  }
};

TEST_F(TorchGpt, Float64MatchesToRounding) {
  check("f64", DType::kF64, 1e-14, 1e-14);
}

TEST_F(TorchGpt, Float32MatchesWithinFloatRounding) {
  check("f32", DType::kF32, 1e-6, 2e-6);
}

TEST_F(TorchGpt, Bf16AutocastMatchesWithinBf16Rounding) {
  amp::AutocastScope scope(DType::kBF16);
  // bf16 keeps 8 bits: the two implementations round at the same places but sum in different
  // orders, so single elements may differ by a few bf16 ulps.
  check("bf16", DType::kF32, 1e-2, 2e-2);
}

TEST_F(TorchGpt, CrossEntropyWithLabelSmoothingMatches) {
  CrossEntropyLoss ce({.ignore_index = -100, .label_smoothing = 0.1});
  Tensor loss = ce.forward(at("f32.logits"), at("targets"));
  Tensor d = ce.backward();
  EXPECT_NEAR(loss.item(), at("smooth.loss").item(), 2e-6);
  EXPECT_LE(rel_err(d, at("smooth.dlogits")), 1e-5);
}

TEST_F(TorchGpt, TheTiedHeadIsReportedAndSharesTheEmbedding) {
  auto gpt = model(DType::kF32);
  auto tied = find_tied_parameters(*gpt);
  ASSERT_EQ(tied.size(), 1u);
  EXPECT_EQ(tied[0], (std::vector<std::string>{"lm_head.weight", "transformer.wte.weight"}));
}

}  // namespace
}  // namespace braid::nn
