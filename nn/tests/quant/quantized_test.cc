// Quantized Linear layers (braid/nn/quantized.h): forward against the dequantized weight and
// against the f32 Linear within the error the format allows, backward (input and bias only),
// replace_with_quantized_linear on GPT-2 (skip / keep-in-fp32 / torch_dtype rules), greedy
// generation of a small trained GPT-2 in 8 and 4 bits against f32, training what stays in
// floating point, and the bytes per parameter measured with the cpu allocator.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "braid/core/allocator.h"
#include "braid/core/error.h"
#include "braid/nn/gpt.h"
#include "braid/nn/loss.h"
#include "braid/nn/optim.h"
#include "braid/nn/quantized.h"

namespace braid::nn {
namespace {

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const auto va = a.to(DType::kF64).to_vector(), vb = b.to(DType::kF64).to_vector();
  EXPECT_EQ(va.size(), vb.size());
  double m = 0;
  for (size_t i = 0; i < va.size(); ++i) m = std::max(m, std::fabs(va[i] - vb[i]));
  return m;
}

double max_abs(const Tensor& a) {
  double m = 0;
  for (double v : a.to(DType::kF64).to_vector()) m = std::max(m, std::fabs(v));
  return m;
}

TEST(Linear4bit, ForwardIsTheDequantizedGemmAndBackwardFreezesTheWeight) {
  for (WeightLayout layout : {WeightLayout::kOutIn, WeightLayout::kInOut}) {
    Generator gen(3);
    Linear lin(96, 40, Bias::kYes, layout, DType::kF32, &gen);
    const Tensor x = Tensor::randn({2, 5, 96}, DType::kF32, &gen);
    const Tensor y_ref = lin.forward(x);
    lin.clear_saved();
    auto q = Linear4bit::from_linear(lin, Quant4Type::kNf4, DType::kF32, /*double_quant=*/true);
    EXPECT_EQ(q->named_parameters().size(), 1u);                    // the bias only
    const Tensor w = dequantize_4bit(q->quantized(), DType::kF32);  // [out, in]
    EXPECT_EQ(w.shape(), (Shape{40, 96}));
    const Tensor y = q->forward(x);
    EXPECT_EQ(y.shape(), (Shape{2, 5, 40}));
    const Tensor y_dq = add(matmul(x, w.t()), lin.bias().data());
    EXPECT_LT(max_abs_diff(y, y_dq), 1e-5);
    // Against the f32 layer: every weight moves by at most half of NF4's widest gap (0.16)
    // times its block's absmax (at most 1/sqrt(96) = 0.102) plus the double quantization's
    // error on the absmax; |dy| <= sum |x| * that.
    double bound = 0;
    for (double v : x.to_vector()) bound = std::max(bound, std::fabs(v));
    bound *= 96 * 0.5 * 0.1628 * 0.1021 * 1.01;
    EXPECT_LT(max_abs_diff(y, y_ref), bound);
    const Tensor dy = Tensor::randn({2, 5, 40}, DType::kF32, &gen);
    const Tensor dx = q->backward(dy);
    EXPECT_LT(max_abs_diff(dx, matmul(dy, w)), 1e-5);
    EXPECT_LT(max_abs_diff(q->bias().grad(), sum(dy.reshape({10, 40}), 0)), 1e-5);
  }
}

TEST(Linear4bit, ComputeDtypeAndErrors) {
  Generator gen(4);
  Linear lin(64, 8, Bias::kNo, WeightLayout::kOutIn, DType::kF32, &gen);
  auto q = Linear4bit::from_linear(lin, Quant4Type::kFp4, DType::kBF16, false);
  const Tensor x = Tensor::randn({3, 64}, DType::kF32, &gen);
  const Tensor y = q->forward(x);
  EXPECT_EQ(y.dtype(), DType::kF32);  // the input's dtype
  // The fused kernel: x rounded to bf16, the f32 products of the f32 dequantized weight, the sum
  // rounded once to bf16 (the weight itself is not rounded to bf16 as the old dequantize-then-
  // matmul path rounded it).
  EXPECT_TRUE(equal(y, linear_4bit(x, q->quantized(), DType::kBF16).to(DType::kF32)));
  const Tensor w = dequantize_4bit(q->quantized(), DType::kF32);
  const Tensor ref = matmul(x.to(DType::kBF16).to(DType::kF32), w.t());
  const auto vy = y.to_vector(), vr = ref.to(DType::kF64).to_vector();
  for (size_t i = 0; i < vy.size(); ++i) {
    EXPECT_LE(std::fabs(vy[i] - vr[i]), std::ldexp(std::fabs(vr[i]), -8) + 1e-5) << i;
  }
  Linear4bit empty(64, 8, Bias::kNo, Quant4Type::kNf4, DType::kF32, false);
  EXPECT_THROW(empty.forward(x), Error);
  EXPECT_THROW(empty.set_weight(Tensor::zeros({64, 8})), Error);
}

// The fused forward and backward never hold the dequantized weight: the cpu allocator's peak during
// either stays far below the f32 weight (out * in * 4 bytes), while the old path's dequantize_4bit
// alone allocates all of it.
TEST(Linear4bit, ForwardAndBackwardDoNotMaterializeTheWeight) {
  Generator gen(6);
  const int64_t in = 512, out = 1024;
  Linear lin(in, out, Bias::kYes, WeightLayout::kOutIn, DType::kF32, &gen);
  auto q = Linear4bit::from_linear(lin, Quant4Type::kNf4, DType::kF32, /*double_quant=*/true);
  const Tensor x = Tensor::randn({4, in}, DType::kF32, &gen);
  Allocator& alloc = get_allocator(kCPU);
  const double weight_f32 = static_cast<double>(in * out * 4);
  alloc.reset_peak();
  size_t base = alloc.stats().current_bytes;
  Tensor y = q->forward(x);
  const double fused = static_cast<double>(alloc.stats().peak_bytes - base);
  const Tensor dy = Tensor::randn({4, out}, DType::kF32, &gen);
  alloc.reset_peak();
  base = alloc.stats().current_bytes;
  const Tensor dx = q->backward(dy);
  const double fused_backward = static_cast<double>(alloc.stats().peak_bytes - base);
  alloc.reset_peak();
  base = alloc.stats().current_bytes;
  const Tensor w = dequantize_4bit(q->quantized(), DType::kF32);
  const double dequant = static_cast<double>(alloc.stats().peak_bytes - base);
  std::printf(
      "[ quantized ] Linear4bit peak above the start: forward %.0f, backward %.0f bytes; f32 "
      "weight %.0f\n",
      fused, fused_backward, weight_f32);
  // Output (16 KB) and the f32 absmax (32 KB); the kernel's 64 KiB tile is a std::vector the
  // allocator does not see, so the bound leaves room for it too.
  EXPECT_LT(fused, 0.1 * weight_f32);
  EXPECT_LT(fused_backward, 0.1 * weight_f32);
  EXPECT_GE(dequant, weight_f32);
  EXPECT_LT(max_abs_diff(y, add(matmul(x, w.t()), lin.bias().data())), 1e-5);
  EXPECT_LT(max_abs_diff(dx, matmul(dy, w)), 1e-5);
}

TEST(Linear8bitLt, ForwardMatchesTheKernelAndBackward) {
  Generator gen(5);
  Linear lin(128, 24, Bias::kYes, WeightLayout::kOutIn, DType::kF32, &gen);
  Tensor x = Tensor::randn({4, 128}, DType::kF32, &gen);
  x.data<float>()[2 * 128 + 17] = 30.0f;  // an outlier column
  const Tensor y_ref = lin.forward(x);
  lin.clear_saved();
  auto q = Linear8bitLt::from_linear(lin, 6.0);
  const Tensor y = q->forward(x);
  EXPECT_TRUE(equal(y, add(int8_linear(x, q->quantized(), 6.0), lin.bias().data())));
  // The kernel test states the int8 bound; here the layer is within 1% of the output's scale.
  EXPECT_LT(max_abs_diff(y, y_ref), 0.01 * max_abs(y_ref));
  const Tensor dy = Tensor::randn({4, 24}, DType::kF32, &gen);
  const Tensor dx = q->backward(dy);
  EXPECT_LT(max_abs_diff(dx, matmul(dy, dequantize_int8(q->quantized(), DType::kF32))), 1e-5);
}

TEST(BnbQuantizationConfig, Validation) {
  BnbQuantizationConfig c;
  EXPECT_THROW(c.validate(), Error);  // neither 8 nor 4 bit
  c.load_in_4bit = true;
  c.validate();
  c.bnb_4bit_quant_type = "np4";
  EXPECT_THROW(c.validate(), Error);
  c.bnb_4bit_quant_type = "nf4";
  c.bnb_4bit_compute_dtype = "fp8";
  EXPECT_THROW(c.validate(), Error);
  c.bnb_4bit_compute_dtype = "bf16";
  c.load_in_8bit = true;
  EXPECT_THROW(c.validate(), Error);  // both
  c.load_in_4bit = false;
  c.llm_int8_has_fp16_weight = true;
  try {
    c.validate();
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotSupported);
    EXPECT_NE(e.message().find("llm_int8_has_fp16_weight"), std::string::npos);
  }
}

GPTConfig small_config() {
  GPTConfig cfg;
  cfg.vocab_size = 48;
  cfg.n_positions = 32;
  cfg.n_embd = 64;
  cfg.n_layer = 2;
  cfg.n_head = 4;
  cfg.embd_pdrop = cfg.attn_pdrop = cfg.resid_pdrop = 0.0;
  return cfg;
}

TEST(ReplaceWithQuantizedLinear, GptNamesAndRules) {
  GPT gpt(small_config());
  Generator gen(1);
  gpt.init_weights(gen);
  BnbQuantizationConfig c;
  c.load_in_8bit = true;
  c.skip_modules = std::vector<std::string>{"lm_head", "h.1.mlp"};
  c.keep_in_fp32_modules = {"ln_f"};
  c.torch_dtype = DType::kBF16;
  const auto replaced = replace_with_quantized_linear(gpt, c);
  EXPECT_EQ(replaced, (std::vector<std::string>{
                          "transformer.h.0.attn.c_attn", "transformer.h.0.attn.c_proj",
                          "transformer.h.0.mlp.c_fc", "transformer.h.0.mlp.c_proj",
                          "transformer.h.1.attn.c_attn", "transformer.h.1.attn.c_proj"}));
  EXPECT_EQ(gpt.get_submodule("transformer.h.1.mlp.c_fc").type_name(), "Linear");
  EXPECT_EQ(gpt.get_submodule("transformer.h.0.mlp.c_fc").type_name(), "Linear8bitLt");
  for (auto& [name, p] : gpt.named_parameters()) {
    const bool fp32 = name.rfind("transformer.ln_f.", 0) == 0;
    EXPECT_EQ(p.data().dtype(), fp32 ? DType::kF32 : DType::kBF16) << name;
  }
  // The default skip list is the tied head.
  GPT other(small_config());
  other.init_weights(gen);
  BnbQuantizationConfig d;
  d.load_in_4bit = true;
  EXPECT_EQ(modules_not_to_convert(other, d),
            (std::vector<std::string>{"lm_head", "transformer.wte", "transformer.ln_f"}));
  EXPECT_EQ(replace_with_quantized_linear(other, d).size(), 8u);
}

// A GPT-2 trained to continue a fixed cycle of tokens, so that its greedy choices have margins
// that quantization error can be compared with.
std::shared_ptr<GPT> trained_gpt(const std::vector<int64_t>& cycle) {
  auto gpt = std::make_shared<GPT>(small_config());
  Generator gen(11);
  gpt->init_weights(gen);
  AdamW opt(gpt->parameters(), {.lr = 3e-3});
  const int64_t B = 4, T = 24;
  std::vector<double> ids, tgt;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      ids.push_back(static_cast<double>(cycle[(b * 5 + t) % cycle.size()]));
      tgt.push_back(static_cast<double>(cycle[(b * 5 + t + 1) % cycle.size()]));
    }
  }
  const Tensor x = Tensor::from_vector(ids, {B, T}, DType::kI64);
  const Tensor y = Tensor::from_vector(tgt, {B, T}, DType::kI64);
  for (int step = 0; step < 150; ++step) {
    gpt->zero_grad();
    CrossEntropyLoss ce;
    ce.forward(gpt->forward(x), y);
    gpt->backward(ce.backward());
    opt.step();
  }
  gpt->eval();
  return gpt;
}

std::vector<int64_t> cycle_of(int64_t vocab) {
  std::vector<int64_t> c;
  for (int64_t i = 0; i < 20; ++i) c.push_back((i * 7 + 3) % vocab);
  return c;
}

TEST(QuantizedGpt, GreedyGenerationAndLogitsAgainstF32) {
  const auto cycle = cycle_of(48);
  const Tensor prompt = Tensor::from_vector({double(cycle[0]), double(cycle[1]), double(cycle[2])},
                                            {1, 3}, DType::kI64);
  auto ref = trained_gpt(cycle);
  Generator g(0);
  const Tensor want = ref->generate(prompt, 16, 0.0, 0, g);
  std::vector<double> expected;
  for (int i = 0; i < 19; ++i) expected.push_back(double(cycle[i % cycle.size()]));
  ASSERT_EQ(want.to_vector(), expected) << "the f32 model did not learn the cycle";
  const Tensor ids = want.narrow(1, 0, 18);
  const Tensor logits_ref = [&] {
    NoGradGuard no_grad;
    return ref->forward(ids);
  }();
  const double scale = max_abs(logits_ref);
  struct Case {
    const char* name;
    bool four;
    const char* type;
    bool dq;
    double bound;  // max |logit - f32 logit| / max |f32 logit|
  };
  for (const Case& k : {Case{"int8", false, "", false, 0.015}, Case{"nf4", true, "nf4", true, 0.08},
                        Case{"fp4", true, "fp4", false, 0.1}}) {
    auto q = trained_gpt(cycle);
    BnbQuantizationConfig c;
    c.load_in_8bit = !k.four;
    c.load_in_4bit = k.four;
    if (k.four) c.bnb_4bit_quant_type = k.type;
    c.bnb_4bit_use_double_quant = k.dq;
    c.bnb_4bit_compute_dtype = "fp32";
    replace_with_quantized_linear(*q, c);
    const double err = [&] {
      NoGradGuard no_grad;
      return max_abs_diff(q->forward(ids), logits_ref) / scale;
    }();
    std::printf("[ quantized ] %s: max |logit - f32| / max |f32 logit| = %.4f\n", k.name, err);
    EXPECT_LT(err, k.bound) << k.name;
    Generator g2(0);
    EXPECT_EQ(q->generate(prompt, 16, 0.0, 0, g2).to_vector(), expected) << k.name;
  }
}

TEST(QuantizedGpt, TrainsWhatStaysInFloatingPoint) {
  GPT gpt(small_config());
  Generator gen(2);
  gpt.init_weights(gen);
  BnbQuantizationConfig c;
  c.load_in_4bit = true;
  c.bnb_4bit_quant_type = "nf4";
  c.bnb_4bit_compute_dtype = "fp32";
  replace_with_quantized_linear(gpt, c);
  const Tensor ids = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {1, 6}, DType::kI64);
  const Tensor tgt = Tensor::from_vector({2, 3, 4, 5, 6, 7}, {1, 6}, DType::kI64);
  AdamW opt(gpt.parameters(), {.lr = 1e-2});
  double first = 0, last = 0;
  for (int step = 0; step < 20; ++step) {
    gpt.zero_grad();
    CrossEntropyLoss ce;
    const double loss = ce.forward(gpt.forward(ids), tgt).item<double>();
    gpt.backward(ce.backward());
    EXPECT_TRUE(
        gpt.get_submodule("transformer.h.0.ln_1").named_parameters()[0].second.grad().defined());
    opt.step();
    if (step == 0) first = loss;
    last = loss;
  }
  EXPECT_LT(last, first * 0.8);  // embeddings, norms and biases learn around frozen weights
}

TEST(QuantizedGpt, BytesPerParameterMeasured) {
  // GPT-2's layer shapes at reduced width: the quantized weights' bytes per weight element,
  // as the cpu allocator counts them.
  Allocator& alloc = get_allocator(kCPU);
  for (const char* mode : {"int8", "nf4", "nf4-dq"}) {
    GPTConfig cfg = small_config();
    cfg.n_embd = 256;
    cfg.n_head = 4;
    GPT gpt(cfg);
    Generator gen(3);
    gpt.init_weights(gen);
    int64_t linear_weights = 0;
    for (auto& [name, p] : gpt.named_parameters()) {
      if (p.data().dim() == 2 && name.find(".h.") != std::string::npos) {
        linear_weights += p.data().numel();
      }
    }
    BnbQuantizationConfig c;
    c.load_in_8bit = std::string(mode) == "int8";
    c.load_in_4bit = !c.load_in_8bit;
    c.bnb_4bit_quant_type = "nf4";
    c.bnb_4bit_use_double_quant = std::string(mode) == "nf4-dq";
    const size_t before = alloc.stats().current_bytes;
    replace_with_quantized_linear(gpt, c);
    const size_t after = alloc.stats().current_bytes;
    const double freed_per_weight =
        static_cast<double>(before - after) / static_cast<double>(linear_weights);
    const double bytes_per_weight = 4.0 - freed_per_weight;
    std::printf("[ quantized ] %s: %.4f bytes per quantized weight (f32: 4)\n", mode,
                bytes_per_weight);
    // Format arithmetic: int8 1 + 4 / in (SCB); NF4 0.5 + 4 / 64; with double quantization
    // 0.5 + 1 / 64 + 4 / (64 * 256), plus the 16- and 256-entry code tables per layer.
    const double want = c.load_in_8bit ? 1.0 : c.bnb_4bit_use_double_quant ? 0.516 : 0.5625;
    EXPECT_NEAR(bytes_per_weight, want, 0.03) << mode;
  }
}

}  // namespace
}  // namespace braid::nn
