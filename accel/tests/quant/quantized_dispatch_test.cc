// Quantized models under a memory cap (issue 34): a GPT-2-shaped model (d 256, 4 blocks) and a
// Llama (hidden 256, 4 layers), trained to continue a token cycle (an untrained model's logits
// are nearly flat, so greedy tokens would say little), saved in f32 with save_pretrained, then
// loaded 8-bit and 4-bit by load_and_quantize_model with max_memory sending most blocks to disk.
// Checked against things computed independently: the f32 model's greedy tokens, the same
// quantized model held whole in memory (tokens and logits bit for bit: streaming changes where
// values come from, not what they are), the CPU allocator's peak while generating (under half the
// f32 model, and under the whole quantized model's own peak), and the offload folder's files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "braid/accel/quantization.h"
#include "braid/core/allocator.h"
#include "braid/core/error.h"
#include "braid/core/file_util.h"
#include "braid/nn/gpt.h"
#include "braid/nn/llama.h"
#include "braid/nn/loss.h"
#include "braid/nn/optim.h"
#include "braid/tensor/ops.h"
#include "quant_test_util.h"

namespace braid::accel {
namespace {

using quant_testing::bitwise;
using quant_testing::bnb_mode;

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("braid-qdisp-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

// GPT-2's shapes at d 256: 4 blocks of 12 d^2 weights, vocab 64, 32 positions (12.7 MB in f32).
nn::GPTConfig gpt_config() {
  nn::GPTConfig cfg;
  cfg.vocab_size = 64;
  cfg.n_positions = 32;
  cfg.n_embd = 256;
  cfg.n_layer = 4;
  cfg.n_head = 4;
  cfg.embd_pdrop = cfg.attn_pdrop = cfg.resid_pdrop = 0.0;
  return cfg;
}

// Llama at hidden 256: 4 decoder layers (intermediate 512, 4 heads, 2 kv heads), untied head.
nn::LlamaConfig llama_config() {
  nn::LlamaConfig cfg;
  cfg.vocab_size = 64;
  cfg.hidden_size = 256;
  cfg.intermediate_size = 512;
  cfg.num_hidden_layers = 4;
  cfg.num_attention_heads = 4;
  cfg.num_key_value_heads = 2;
  cfg.max_position_embeddings = 32;
  return cfg;
}

std::vector<int64_t> cycle() {
  std::vector<int64_t> c;
  for (int64_t i = 0; i < 20; ++i) c.push_back((i * 7 + 3) % 64);
  return c;
}

Tensor prompt() {
  const auto c = cycle();
  return Tensor::from_vector({double(c[0]), double(c[1]), double(c[2])}, {1, 3}, DType::kI64);
}

std::vector<double> expected_tokens(int64_t n) {
  const auto c = cycle();
  std::vector<double> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(double(c[static_cast<size_t>(i) % c.size()]));
  return out;
}

// AdamW on the cycle until the model continues it (checked by the caller).
template <typename Model>
void train(Model& model) {
  const auto c = cycle();
  nn::AdamW opt(model.parameters(), {.lr = 3e-3});
  const int64_t B = 4, T = 24;
  std::vector<double> ids, tgt;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      ids.push_back(double(c[static_cast<size_t>(b * 5 + t) % c.size()]));
      tgt.push_back(double(c[static_cast<size_t>(b * 5 + t + 1) % c.size()]));
    }
  }
  const Tensor x = Tensor::from_vector(ids, {B, T}, DType::kI64);
  const Tensor y = Tensor::from_vector(tgt, {B, T}, DType::kI64);
  model.train();
  for (int step = 0; step < 300; ++step) {
    model.zero_grad();
    nn::CrossEntropyLoss ce;
    const double loss = ce.forward(model.forward(x), y).template item<double>();
    if (loss < 0.01) break;  // the cycle is learnt: greedy margins are wide
    model.backward(ce.backward());
    opt.step();
  }
  model.eval();
}

int64_t param_bytes(nn::Module& m) {
  int64_t total = 0;
  for (auto& [name, p] : m.named_parameters()) total += static_cast<int64_t>(p.data().nbytes());
  return total;
}

constexpr int64_t kNewTokens = 16;

struct Generated {
  Tensor tokens, logits;
  int64_t resident = 0;  // allocator bytes held after loading
  int64_t peak = 0;      // allocator peak while generating, above what was held before loading
};

// Generates greedily and takes the logits of the generated sequence, measuring the allocator.
Generated generate(nn::CausalLM& model, int64_t before) {
  Allocator& cpu = get_allocator(kCPU);
  Generated r;
  r.resident = static_cast<int64_t>(cpu.stats().current_bytes) - before;
  cpu.reset_peak();
  Generator gen(0);
  r.tokens = model.generate(prompt(), kNewTokens, 0.0, 0, gen);
  {
    nn::NoGradGuard no_grad;
    r.logits = model.forward(r.tokens);
  }
  r.peak = static_cast<int64_t>(cpu.stats().peak_bytes) - before;
  return r;
}

template <typename Model, typename Config>
std::shared_ptr<Model> meta_model(const fs::path& folder) {
  nn::InitEmptyWeights empty;
  auto m = std::make_shared<Model>(Config::from_hf_json(read_file(folder / "config.json")));
  m->eval();
  return m;
}

// The whole check for one model family (see the file comment).
template <typename Model, typename Config>
void quantized_under_half(const Config& cfg, const std::string& block_class,
                          const std::string& blocks) {
  TempDir dir;
  int64_t f32_bytes = 0;
  Tensor f32_tokens;
  {
    auto whole = std::make_shared<Model>(cfg);
    Generator gen(11);
    whole->init_weights(gen);
    train(*whole);
    f32_bytes = param_bytes(*whole);
    nn::save_pretrained(*whole, dir.path / "model");
    Generator g(0);
    f32_tokens = whole->generate(prompt(), kNewTokens, 0.0, 0, g);
  }
  ASSERT_EQ(f32_tokens.to_vector(), expected_tokens(3 + kNewTokens))
      << "the f32 " << block_class << " model did not learn the cycle";
  Allocator& cpu = get_allocator(kCPU);
  for (const char* name : {"int8", "nf4-dq", "fp4"}) {
    SCOPED_TRACE(name);
    const BnbQuantizationConfig c = bnb_mode(name);
    // The same quantized model held whole in memory: the reference for streaming.
    Generated whole;
    int64_t quantized_bytes = 0;
    {
      const auto before = static_cast<int64_t>(cpu.stats().current_bytes);
      auto m = meta_model<Model, Config>(dir.path / "model");
      const LoadAndQuantizeResult r = load_and_quantize_model(*m, c, dir.path / "model");
      ASSERT_TRUE(r.missing_keys.empty()) << r.missing_keys.front();
      quantized_bytes = compute_module_sizes(*m)[""];
      whole = generate(*m, before);
    }
    // Most blocks on disk: max_memory at 60% of the quantized model (the CPU keeps room for the
    // layer running and the one read ahead, so the embeddings stay and the blocks stream).
    const auto before = static_cast<int64_t>(cpu.stats().current_bytes);
    const fs::path offload = dir.path / (std::string("offload-") + name);
    auto m = meta_model<Model, Config>(dir.path / "model");
    cpu.reset_peak();
    LoadAndQuantizeResult r = load_and_quantize_model(
        *m, c, dir.path / "model",
        {.device_map = "auto",
         .max_memory = MaxMemory{{"cpu", quantized_bytes * 6 / 10}, {"disk", 0}},
         .no_split_module_classes = {block_class},
         .offload_folder = offload});
    // Loading holds the resident part, one f32 weight being quantized and its quantized form.
    const int64_t load_peak = static_cast<int64_t>(cpu.stats().peak_bytes) - before;
    EXPECT_LE(load_peak, f32_bytes / 2);
    ASSERT_TRUE(r.missing_keys.empty()) << r.missing_keys.front();
    EXPECT_TRUE(r.unexpected_keys.empty()) << r.unexpected_keys.front();
    const std::vector<std::string> streamed = r.dispatched.offloaded_modules();
    ASSERT_GE(streamed.size(), 3u);
    EXPECT_EQ(streamed.front().rfind(blocks, 0), 0u) << streamed.front();
    // The offload folder holds the quantized tensors in bitsandbytes' names.
    const OffloadIndex index = load_offload_index(offload);
    const std::string q = streamed.back().rfind(blocks, 0) == 0 ? streamed.back() : streamed[0];
    const std::string lin =
        q + (block_class == "GPT2Block" ? ".mlp.c_fc" : ".mlp.up_proj");  // a quantized Linear
    ASSERT_TRUE(index.count(lin + ".weight")) << lin;
    if (c.load_in_8bit) {
      EXPECT_EQ(index.at(lin + ".weight").dtype, DType::kI8);
      EXPECT_TRUE(index.count(lin + ".SCB"));
    } else {
      EXPECT_EQ(index.at(lin + ".weight").dtype, DType::kU8);
      EXPECT_TRUE(index.count(lin + ".weight.absmax"));
      EXPECT_TRUE(index.count(lin + ".weight.quant_map"));
      EXPECT_EQ(index.count(lin + ".weight.nested_absmax"), c.bnb_4bit_use_double_quant ? 1u : 0u);
    }
    EXPECT_TRUE(fs::exists(offload / (lin + ".weight.dat")));

    const Generated got = generate(*m, before);
    std::printf(
        "[ measured ] %s %s: f32 %lld B, quantized %lld B (%.3f B per parameter; f32: 4), "
        "%zu modules on disk, peak loading %lld B, resident %lld B, peak generating %lld B "
        "(whole quantized in memory: %lld B; cap half f32 %lld B)\n",
        m->type_name().c_str(), name, static_cast<long long>(f32_bytes),
        static_cast<long long>(quantized_bytes),
        4.0 * static_cast<double>(quantized_bytes) / static_cast<double>(f32_bytes),
        streamed.size(), static_cast<long long>(load_peak), static_cast<long long>(got.resident),
        static_cast<long long>(got.peak), static_cast<long long>(whole.peak),
        static_cast<long long>(f32_bytes / 2));
    EXPECT_LE(got.peak, f32_bytes / 2);
    EXPECT_LT(got.peak, whole.peak);  // the disk really saves memory
    EXPECT_TRUE(bitwise(got.tokens, whole.tokens));
    EXPECT_TRUE(bitwise(got.logits, whole.logits));
    EXPECT_EQ(got.tokens.to_vector(), f32_tokens.to_vector());
    EXPECT_EQ(r.dispatched.loaded_bytes(), 0);  // between forwards the disk layers are meta
    EXPECT_GT(r.dispatched.stats().prefetch_hits, 0);
  }
}

TEST(QuantizedDispatch, GptUnderHalfItsSizeSameTokens) {
  quantized_under_half<nn::GPT>(gpt_config(), "GPT2Block", "transformer.h.");
}

TEST(QuantizedDispatch, LlamaUnderHalfItsSizeSameTokens) {
  quantized_under_half<nn::Llama>(llama_config(), "LlamaDecoderLayer", "model.layers.");
}

// GPT-2 small at its real size (124M parameters), trained first so that greedy tokens can be
// compared, and through transformers' checkpoint: QuantizedDispatch.Gpt2SmallAtFullSize in
// accel/tests/quant_large/ (its own binary, label "large").

// A materialized model quantized in place with a disk map: dispatch writes the quantized
// tensors of the disk modules and streams them; an explicit map; positional arguments.
TEST(QuantizedDispatch, MaterializedModelAndExplicitMap) {
  TempDir dir;
  nn::GPTConfig cfg = gpt_config();
  cfg.n_embd = 64;
  auto make = [&] {
    auto gpt = std::make_shared<nn::GPT>(cfg);
    Generator gen(3);
    gpt->init_weights(gen);
    gpt->eval();
    return gpt;
  };
  auto ref = make();
  nn::replace_with_quantized_linear(*ref, bnb_mode("nf4-dq"));
  nn::NoGradGuard no_grad;
  const Tensor ids = Tensor::from_vector({1, 5, 9, 2}, {1, 4}, DType::kI64);
  const Tensor want = ref->forward(ids);
  auto gpt = make();
  LoadAndQuantizeResult r = load_and_quantize_model(*gpt, bnb_mode("nf4-dq"), {},
                                                    DeviceMap{{"transformer.wte", "cpu"},
                                                              {"transformer.wpe", "cpu"},
                                                              {"transformer.h.0", "cpu"},
                                                              {"transformer.h", "disk"},
                                                              {"transformer.ln_f", "cpu"},
                                                              {"lm_head", "cpu"}},
                                                    dir.path);
  EXPECT_EQ(r.dispatched.offloaded_modules().size(), 3u * 6u);  // leaf units, no preload class
  EXPECT_TRUE(fs::exists(dir.path / "transformer.h.3.attn.c_attn.weight.absmax.dat"));
  EXPECT_TRUE(gpt->get_submodule("transformer.h.3.mlp.c_fc")
                  .named_parameters()[0]
                  .second.data()
                  .device()
                  .is_meta());
  EXPECT_TRUE(bitwise(gpt->forward(ids), want));
  EXPECT_TRUE(bitwise(gpt->forward(ids), want));  // second pass: read ahead
}

void expect_error(const std::function<void()>& fn, ErrorKind kind, const std::string& fragment) {
  try {
    fn();
    ADD_FAILURE() << "expected an error containing '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(e.message().find(fragment), std::string::npos) << e.message();
  }
}

TEST(QuantizedDispatch, Refusals) {
  TempDir dir;
  nn::GPTConfig cfg = gpt_config();
  cfg.n_embd = 64;
  nn::save_pretrained(nn::GPT(cfg), dir.path / "model");
  auto fresh = [&] { return meta_model<nn::GPT, nn::GPTConfig>(dir.path / "model"); };
  expect_error(
      [&] {
        load_and_quantize_model(*fresh(), bnb_mode("int8"), dir.path / "model",
                                DeviceMap{{"", "disk"}});
      },
      ErrorKind::kInvalidArgument, "offload_folder");
  expect_error(
      [&] {
        load_and_quantize_model(*fresh(), bnb_mode("int8"), dir.path / "model",
                                DeviceMap{{"", "cuda:0"}});
      },
      ErrorKind::kNotSupported, "cuda:0");
  expect_error(
      [&] {
        load_and_quantize_model(*fresh(), bnb_mode("int8"), dir.path / "model",
                                {.device_map = "fastest", .offload_folder = dir.path});
      },
      ErrorKind::kInvalidArgument, "fastest");
  // A map that leaves tensors out.
  expect_error(
      [&] {
        load_and_quantize_model(*fresh(), bnb_mode("int8"), dir.path / "model",
                                DeviceMap{{"transformer.h", "disk"}}, dir.path / "off");
      },
      ErrorKind::kInvalidArgument, "transformer.wte.weight");
}

// compute_module_sizes counts a quantized layer's tensors, so a map is inferred from the
// quantized size: NF4 with double quantization of mlp.c_fc at d 64 (64 -> 256, 16,384 weights,
// 256 blocks of 64): packed 8,192 B, u8 absmax 256 B, nested absmax 1 x 4 B, quant_map 16 x 4 B,
// nested_quant_map 256 x 4 B, bias 256 x 4 B. A strategy sees it before anything is read (meta
// placeholders): 400 KB hold the NF4 model (~150 KB) but not two f32 blocks (~200 KB each).
TEST(QuantizedDispatch, SizesCountQuantizedTensors) {
  TempDir dir;
  nn::GPTConfig cfg = gpt_config();
  cfg.n_embd = 64;
  nn::save_pretrained(nn::GPT(cfg), dir.path / "model");
  const int64_t want = 8192 + 256 + 4 + 64 + 1024 + 1024;
  {
    nn::GPT f32(cfg);
    EXPECT_GT(compute_module_sizes(f32).at("transformer.h.0"), 190'000);  // 199,936
  }
  auto m = meta_model<nn::GPT, nn::GPTConfig>(dir.path / "model");
  LoadAndQuantizeResult r =
      load_and_quantize_model(*m, bnb_mode("nf4-dq"), dir.path / "model",
                              {.device_map = "sequential",
                               .max_memory = MaxMemory{{"cpu", 400'000}, {"disk", 0}},
                               .no_split_module_classes = {"GPT2Block"},
                               .offload_folder = dir.path / "off"});
  EXPECT_EQ(r.device_map, (DeviceMap{{"", "cpu"}}));
  EXPECT_TRUE(r.dispatched.offloaded_modules().empty());
  EXPECT_EQ(compute_module_sizes(*m).at("transformer.h.0.mlp.c_fc"), want);
  // On disk: the offloaded (meta) tensors count the same; the files hold the bytes.
  auto d = meta_model<nn::GPT, nn::GPTConfig>(dir.path / "model");
  LoadAndQuantizeResult rd = load_and_quantize_model(*d, bnb_mode("nf4-dq"), dir.path / "model",
                                                     DeviceMap{{"", "disk"}}, dir.path / "off");
  EXPECT_EQ(compute_module_sizes(*d).at("transformer.h.0.mlp.c_fc"), want);
  EXPECT_TRUE(fs::exists(dir.path / "off" / "transformer.h.0.mlp.c_fc.weight.nested_absmax.dat"));
  EXPECT_EQ(fs::file_size(dir.path / "off" / "transformer.h.0.mlp.c_fc.weight.dat"), 8192u);
  // A model with disk modules cannot be saved while its tensors are on disk.
  EXPECT_THROW(quantized_state_dict(*d), Error);
}

// A bitsandbytes-format file written by save_quantized_model, loaded with its blocks on disk:
// the pre-quantized tensors are taken as they are, offloaded, streamed; same logits.
TEST(QuantizedDispatch, PreQuantizedFileOnDisk) {
  TempDir dir;
  nn::GPTConfig cfg = gpt_config();
  cfg.n_embd = 64;
  for (const char* name : {"int8", "nf4-dq"}) {
    SCOPED_TRACE(name);
    auto src = std::make_shared<nn::GPT>(cfg);
    Generator gen(4);
    src->init_weights(gen);
    src->eval();
    nn::replace_with_quantized_linear(*src, bnb_mode(name));
    const fs::path file = dir.path / (std::string(name) + ".safetensors");
    save_quantized_model(*src, file);
    const Tensor ids = Tensor::from_vector({1, 5, 9, 2}, {1, 4}, DType::kI64);
    nn::NoGradGuard no_grad;
    const Tensor want = src->forward(ids);
    std::shared_ptr<nn::GPT> m;
    {
      nn::InitEmptyWeights empty;
      m = std::make_shared<nn::GPT>(cfg);
    }
    m->eval();
    LoadAndQuantizeResult r =
        load_and_quantize_model(*m, bnb_mode(name), file,
                                {.device_map = DeviceMap{{"", "cpu"}, {"transformer.h", "disk"}},
                                 .no_split_module_classes = {"GPT2Block"},
                                 .offload_folder = dir.path / (std::string("off-") + name)});
    EXPECT_TRUE(r.missing_keys.empty()) << r.missing_keys.front();
    EXPECT_TRUE(r.unexpected_keys.empty()) << r.unexpected_keys.front();
    EXPECT_EQ(r.dispatched.offloaded_modules().size(), 4u);
    EXPECT_TRUE(bitwise(m->forward(ids), want));
    EXPECT_TRUE(bitwise(m->forward(ids), want));
  }
}

}  // namespace
}  // namespace braid::accel
