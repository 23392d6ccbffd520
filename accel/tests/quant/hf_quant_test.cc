// transformers' own checkpoints loaded into braid quantized (issue 34): the GPT2LMHeadModel and
// LlamaForCausalLM folders of tests/reference/hf_quant (written by save_pretrained with
// safe_serialization, gen_hf_quant_models.py; trained on a token cycle so that greedy choices
// have margins) are loaded in f32, 8-bit, NF4 with double quantization and FP4, in memory and
// with their blocks streamed from disk, and compared with the tokens and logits transformers
// computed in f32.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include "braid/accel/quantization.h"
#include "braid/core/file_util.h"
#include "braid/nn/models.h"
#include "braid/tensor/ops.h"

namespace braid::accel {
namespace {

namespace fs = std::filesystem;

const fs::path kRoot = BRAID_SOURCE_DIR "/tests/reference/hf_quant";

std::shared_ptr<nn::CausalLM> meta_model(const fs::path& folder) {
  nn::InitEmptyWeights empty;
  auto m = nn::causal_lm_from_hf_config(read_file(folder / "config.json"));
  m->eval();
  return m;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const auto x = a.to(DType::kF64).to_vector(), y = b.to(DType::kF64).to_vector();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

double max_abs(const Tensor& a) {
  double m = 0;
  for (double v : a.to(DType::kF64).to_vector()) m = std::max(m, std::abs(v));
  return m;
}

struct Case {
  const char* name;
  double bound;  // max |logit - transformers' f32 logit| / max |transformers' logit|
};

void check_family(const std::string& family, const std::string& block_class,
                  const std::string& blocks) {
  const fs::path folder = kRoot / family;
  const SafetensorsFile gen = SafetensorsFile::open(folder / "generation.safetensors");
  const Tensor prompt = gen.get("prompt").clone();
  const Tensor want_tokens = gen.get("tokens").clone();
  const Tensor want_logits = gen.get("logits").clone();
  const int64_t new_tokens = want_tokens.shape()[1] - prompt.shape()[1];
  const double scale = max_abs(want_logits);
  // f32: transformers' own numbers, up to summation order.
  {
    auto m = meta_model(folder);
    const LoadCheckpointResult r = load_checkpoint_in_model(*m, folder);
    EXPECT_TRUE(r.unexpected_keys.empty()) << r.unexpected_keys.front();
    Generator g(0);
    EXPECT_EQ(m->generate(prompt, new_tokens, 0.0, 0, g).to_vector(), want_tokens.to_vector());
    nn::NoGradGuard no_grad;
    const double err = max_abs_diff(m->forward(want_tokens), want_logits) / scale;
    std::printf("[ measured ] %s f32: max |logit - transformers| / max |logit| = %.2e\n",
                family.c_str(), err);
    EXPECT_LT(err, 1e-5);
  }
  for (const Case& k : {Case{"int8", 0.02}, Case{"nf4-dq", 0.08}, Case{"fp4", 0.1}}) {
    SCOPED_TRACE(k.name);
    BnbQuantizationConfig c;
    c.load_in_8bit = std::string(k.name) == "int8";
    c.load_in_4bit = !c.load_in_8bit;
    c.bnb_4bit_quant_type = std::string(k.name) == "fp4" ? "fp4" : "nf4";
    c.bnb_4bit_use_double_quant = std::string(k.name) == "nf4-dq";
    c.bnb_4bit_compute_dtype = "fp32";
    // In memory, then with every block streamed from disk.
    for (const bool disk : {false, true}) {
      const fs::path offload =
          fs::temp_directory_path() /
          ("braid-hf-quant-" + std::to_string(::getpid()) + "-" + family + "-" + k.name);
      fs::remove_all(offload);
      auto m = meta_model(folder);
      LoadAndQuantizeResult r =
          disk ? load_and_quantize_model(*m, c, folder,
                                         {.device_map = DeviceMap{{"", "cpu"}, {blocks, "disk"}},
                                          .no_split_module_classes = {block_class},
                                          .offload_folder = offload})
               : load_and_quantize_model(*m, c, folder);
      EXPECT_TRUE(r.missing_keys.empty()) << r.missing_keys.front();
      EXPECT_TRUE(r.unexpected_keys.empty()) << r.unexpected_keys.front();
      EXPECT_FALSE(r.quantized_modules.empty());
      EXPECT_EQ(r.dispatched.offloaded_modules().size(), disk ? 2u : 0u);
      Generator g(0);
      EXPECT_EQ(m->generate(prompt, new_tokens, 0.0, 0, g).to_vector(), want_tokens.to_vector())
          << (disk ? "disk" : "memory");
      nn::NoGradGuard no_grad;
      const double err = max_abs_diff(m->forward(want_tokens), want_logits) / scale;
      if (!disk) {
        std::printf("[ measured ] %s %s: max |logit - transformers f32| / max |logit| = %.4f\n",
                    family.c_str(), k.name, err);
      }
      EXPECT_LT(err, k.bound) << (disk ? "disk" : "memory");
      r.dispatched.remove_hooks();
      fs::remove_all(offload);
    }
  }
}

TEST(HfQuant, Gpt2FromTransformersSafetensors) {
  check_family("gpt2", "GPT2Block", "transformer.h");
}

TEST(HfQuant, LlamaFromTransformersSafetensors) {
  check_family("llama", "LlamaDecoderLayer", "model.layers");
}

}  // namespace
}  // namespace braid::accel
