// dispatch_model and load_checkpoint_and_dispatch: a GPT-2 and a Llama saved with
// save_pretrained, rebuilt under InitEmptyWeights and loaded with a CPU limit that sends most
// blocks to disk, generate the same tokens and the same logits, bit for bit, as the whole model
// in memory, while the CPU allocator's peak stays under the limit (half the model); the prefetch
// order; hooks removed with the handle; errors naming what is wrong.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <iostream>
#include <thread>

#include "bigmodel_test_util.h"
#include "braid/accel/big_model.h"
#include "braid/core/allocator.h"
#include "braid/core/file_util.h"
#include "braid/nn/gpt.h"
#include "braid/nn/llama.h"
#include "braid/tensor/ops.h"

namespace braid::accel {
namespace {

namespace fs = std::filesystem;
using testing::expect_error;
using testing::TempDir;

// 8 blocks of ~50 KB (d 32, inner 128), wte 8 KB, wpe 4 KB: ~419 KB of f32 parameters.
nn::GPTConfig gpt_config() {
  nn::GPTConfig cfg;
  cfg.vocab_size = 64;
  cfg.n_positions = 32;
  cfg.n_embd = 32;
  cfg.n_layer = 8;
  cfg.n_head = 4;
  return cfg;
}

// 8 decoder layers of ~41 KB (hidden 32, intermediate 96, 4 heads, 2 kv heads), untied head.
nn::LlamaConfig llama_config() {
  nn::LlamaConfig cfg;
  cfg.vocab_size = 64;
  cfg.hidden_size = 32;
  cfg.intermediate_size = 96;
  cfg.num_hidden_layers = 8;
  cfg.num_attention_heads = 4;
  cfg.num_key_value_heads = 2;
  cfg.max_position_embeddings = 32;
  return cfg;
}

int64_t param_bytes(const nn::Module& m) {
  int64_t total = 0;
  for (auto& [name, p] : m.named_parameters()) total += static_cast<int64_t>(p.data().nbytes());
  return total;
}

Tensor prompt() {
  return Tensor::from_vector({3, 14, 15, 9, 26, 5}, {1, 6}, DType::kI64);
}

// What the whole model in memory gives: greedy tokens and the logits of the generated sequence.
struct Reference {
  Tensor tokens;
  Tensor logits;
};

Reference run(nn::CausalLM& model) {
  Generator gen(1);
  Reference r;
  r.tokens = model.generate(prompt(), 10, 0.0, 0, gen);
  nn::NoGradGuard no_grad;
  model.eval();
  r.logits = model.forward(r.tokens);
  return r;
}

void expect_bitwise(const Tensor& a, const Tensor& b) {
  ASSERT_EQ(a.shape(), b.shape());
  ASSERT_EQ(a.dtype(), b.dtype());
  const Tensor x = a.contiguous(), y = b.contiguous();
  EXPECT_EQ(std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()), 0);
}

bool no_hooks(nn::Module& model) {
  for (auto& [name, m] : model.named_modules()) {
    const nn::ModuleHooks& h = m->hooks();
    if (h.pre_forward || h.post_forward || h.pre_backward || h.post_backward) return false;
  }
  return true;
}

bool on_meta(nn::Module& model, const std::string& module) {
  for (auto& [name, p] : model.get_submodule(module).named_parameters()) {
    if (!p.data().device().is_meta()) return false;
  }
  return true;
}

// Saves `model`, measures the reference, frees it, then loads a meta-built copy with a CPU
// limit of 40% of the model and generates: same tokens and logits, and the allocator's peak
// (weights, the block read ahead, activations) under half the model.
template <typename Model, typename Config, typename SaveFn>
void generate_under_half_the_model(const Config& cfg, const std::string& block_class,
                                   const std::string& blocks, SaveFn save,
                                   bool from_checkpoint = false) {
  TempDir dir;
  Reference ref;
  int64_t model_bytes = 0;
  {
    auto whole = std::make_shared<Model>(cfg);
    Generator gen(42);
    whole->init_weights(gen);
    model_bytes = param_bytes(*whole);
    save(*whole, dir.path() / "model");
    ref = run(*whole);
  }
  Allocator& cpu = get_allocator(kCPU);
  const int64_t before = static_cast<int64_t>(cpu.stats().current_bytes);
  // The cap: half the model. max_memory (weights only, as Accelerate's) leaves a fifth of it
  // for what generation allocates besides the weights (activations, logits).
  const int64_t cap = model_bytes / 2;
  const int64_t max_memory = cap * 4 / 5;

  std::shared_ptr<Model> model;
  {
    nn::InitEmptyWeights empty;
    model = std::make_shared<Model>(
        Config::from_hf_json(read_file(dir.path() / "model" / "config.json")));
  }
  DispatchedModel dispatched =
      load_checkpoint_and_dispatch(*model, dir.path() / "model",
                                   {.device_map = "auto",
                                    .max_memory = MaxMemory{{"cpu", max_memory}, {"disk", 0}},
                                    .no_split_module_classes = {block_class},
                                    .offload_folder = dir.path() / "offload",
                                    .offload_from_checkpoint = from_checkpoint});
  // Streaming from the checkpoint's memory map: no .dat copy is written.
  EXPECT_EQ(fs::exists(dir.path() / "offload" / "index.json"), !from_checkpoint);
  const std::vector<std::string> offloaded = dispatched.offloaded_modules();
  ASSERT_GE(offloaded.size(), 4u);
  EXPECT_EQ(offloaded.front().rfind(blocks, 0), 0u) << offloaded.front();  // blocks go first
  for (const std::string& m : offloaded) EXPECT_TRUE(on_meta(*model, m)) << m;
  EXPECT_EQ(dispatched.loaded_bytes(), 0);

  const int64_t resident = static_cast<int64_t>(cpu.stats().current_bytes) - before;
  cpu.reset_peak();
  const Reference got = run(*model);
  const int64_t peak = static_cast<int64_t>(cpu.stats().peak_bytes) - before;
  std::cout << "[ measured ] " << model->type_name() << ": parameters " << model_bytes
            << " B, max_memory cpu " << max_memory << " B, " << offloaded.size()
            << " modules on disk, resident " << resident << " B, peak during generation " << peak
            << " B (cap " << cap << " B = half the model)\n";
  EXPECT_LT(peak, cap);
  // max_memory holds the weights: what stays plus two units (the one running, the one read
  // ahead), as load_checkpoint_and_dispatch planned it.
  int64_t largest_unit = 0;
  for (const std::string& m : offloaded) {
    largest_unit = std::max(largest_unit, param_bytes(model->get_submodule(m)));
  }
  EXPECT_LE(resident + 2 * largest_unit, max_memory);

  expect_bitwise(got.tokens, ref.tokens);
  expect_bitwise(got.logits, ref.logits);
  EXPECT_EQ(dispatched.loaded_bytes(), 0);  // between forwards every disk tensor is on meta
  for (const std::string& m : offloaded) EXPECT_TRUE(on_meta(*model, m)) << m;
  EXPECT_EQ(dispatched.execution_order(), offloaded);
  const DispatchStats s = dispatched.stats();
  EXPECT_GT(s.prefetch_hits, 0);
  EXPECT_EQ(s.prefetch_hits, s.prefetches);
  EXPECT_EQ(s.prefetch_dropped, 0);
}

TEST(Dispatch, GptGeneratesUnderHalfItsSizeBitForBit) {
  generate_under_half_the_model<nn::GPT>(
      gpt_config(), "GPT2Block", "transformer.h.",
      [](const nn::GPT& m, const fs::path& p) { nn::save_pretrained(m, p); });
}

TEST(Dispatch, GptStreamsFromItsSafetensorsCheckpoint) {
  generate_under_half_the_model<nn::GPT>(
      gpt_config(), "GPT2Block", "transformer.h.",
      [](const nn::GPT& m, const fs::path& p) { nn::save_pretrained(m, p, "100KB"); },
      /*from_checkpoint=*/true);
}

TEST(Dispatch, LlamaGeneratesUnderHalfItsSizeBitForBit) {
  generate_under_half_the_model<nn::Llama>(
      llama_config(), "LlamaDecoderLayer", "model.layers.",
      [](const nn::Llama& m, const fs::path& p) { nn::save_pretrained(m, p); });
}

// ---- a whole GPT in memory, dispatched with an explicit map --------------------------------

std::shared_ptr<nn::GPT> whole_gpt() {
  auto gpt = std::make_shared<nn::GPT>(gpt_config());
  Generator gen(3);
  gpt->init_weights(gen);
  gpt->eval();
  return gpt;
}

// Blocks on disk (through their container), the rest on the CPU.
DeviceMap blocks_on_disk() {
  return {{"transformer.wte", "cpu"}, {"transformer.wpe", "cpu"},  {"transformer.drop", "cpu"},
          {"transformer.h", "disk"},  {"transformer.ln_f", "cpu"}, {"lm_head", "cpu"}};
}

Tensor forward(nn::GPT& gpt) {
  nn::NoGradGuard no_grad;
  return gpt.forward(prompt());
}

TEST(Dispatch, PrefetchFollowsTheFirstPassOrder) {
  TempDir dir;
  auto gpt = whole_gpt();
  const Tensor expected = forward(*gpt);
  // A model holding values: dispatch writes the disk tensors into the folder itself.
  DispatchedModel d = dispatch_model(
      *gpt, blocks_on_disk(), {.offload_dir = dir.path(), .preload_module_classes = {"GPT2Block"}});
  std::vector<std::string> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back("transformer.h." + std::to_string(i));
  EXPECT_EQ(d.offloaded_modules(), blocks);
  EXPECT_TRUE(fs::exists(dir.path() / "transformer.h.3.mlp.c_fc.weight.dat"));
  EXPECT_TRUE(d.execution_order().empty());

  // A probe inside block 3 sees what is loaded and what was read ahead while block 3 runs.
  const int64_t block_bytes = param_bytes(gpt->get_submodule("transformer.h.3"));
  std::vector<std::pair<int64_t, int64_t>> seen;  // (loaded bytes, prefetches so far)
  nn::ModuleHooks probe;
  probe.pre_forward = [&](nn::Module&) {
    seen.emplace_back(d.loaded_bytes(), d.stats().prefetches);
  };
  gpt->get_submodule("transformer.h.3.attn").set_hooks(probe);

  expect_bitwise(forward(*gpt), expected);  // the first pass: every block read on demand
  EXPECT_EQ(d.execution_order(), blocks);
  DispatchStats s = d.stats();
  EXPECT_EQ(s.loads, 8);
  EXPECT_EQ(s.prefetches, 0);

  expect_bitwise(forward(*gpt), expected);  // then block i + 1 is read while block i runs
  s = d.stats();
  EXPECT_EQ(s.loads, 9);  // block 0 again
  EXPECT_EQ(s.prefetches, 7);
  EXPECT_EQ(s.prefetch_hits, 7);
  EXPECT_EQ(s.prefetch_dropped, 0);
  EXPECT_EQ(s.bytes_read, 16 * block_bytes);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], std::make_pair(block_bytes, int64_t{0}));
  EXPECT_EQ(seen[1], std::make_pair(block_bytes, int64_t{4}));  // blocks 1..4 requested
  EXPECT_EQ(d.loaded_bytes(), 0);
  gpt->get_submodule("transformer.h.3.attn").set_hooks({});

  // Without the prefetch: the same bits, every block read on demand.
  d.remove_hooks();
  DispatchedModel plain = dispatch_model(
      *gpt, blocks_on_disk(),
      {.offload_dir = dir.path(), .preload_module_classes = {"GPT2Block"}, .prefetch = false});
  expect_bitwise(forward(*gpt), expected);
  expect_bitwise(forward(*gpt), expected);
  EXPECT_EQ(plain.stats().loads, 16);
  EXPECT_EQ(plain.stats().prefetches, 0);

  // Without preload classes, every leaf layer streams its own tensors (Accelerate's default):
  // ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj of each block.
  plain.remove_hooks();
  DispatchedModel leaves = dispatch_model(*gpt, blocks_on_disk(), {.offload_dir = dir.path()});
  ASSERT_EQ(leaves.offloaded_modules().size(), 48u);
  EXPECT_EQ(leaves.offloaded_modules()[0], "transformer.h.0.ln_1");
  EXPECT_EQ(leaves.offloaded_modules()[1], "transformer.h.0.attn.c_attn");
  expect_bitwise(forward(*gpt), expected);
  expect_bitwise(forward(*gpt), expected);
  EXPECT_EQ(leaves.execution_order(), leaves.offloaded_modules());
  EXPECT_EQ(leaves.stats().prefetch_hits, 47);
}

TEST(Dispatch, HandleRemovesItsHooks) {
  TempDir dir;
  auto gpt = whole_gpt();
  const Tensor expected = forward(*gpt);
  {
    DispatchedModel d = dispatch_model(*gpt, blocks_on_disk(), {.offload_dir = dir.path()});
    EXPECT_FALSE(no_hooks(*gpt));
    // One set of hooks per layer: a second dispatch is refused while the first is alive.
    expect_error([&] { dispatch_model(*gpt, blocks_on_disk(), {.offload_dir = dir.path()}); },
                 ErrorKind::kInvalidArgument, "already has hooks");
    DispatchedModel moved = std::move(d);  // the hooks follow the handle
    expect_bitwise(forward(*gpt), expected);
  }
  EXPECT_TRUE(no_hooks(*gpt));
  EXPECT_TRUE(on_meta(*gpt, "transformer.h"));
  // The folder now holds the blocks: a new handle streams them from there.
  DispatchedModel again = dispatch_model(*gpt, blocks_on_disk(), {.offload_dir = dir.path()});
  expect_bitwise(forward(*gpt), expected);
}

TEST(Dispatch, TiedHeadAndEmbeddingOnDisk) {
  // wte and lm_head share one tensor; both on disk, each brings it in for its own forward.
  TempDir dir;
  auto gpt = whole_gpt();
  const Tensor expected = forward(*gpt);
  DispatchedModel d =
      dispatch_model(*gpt, {{"transformer.wte", "disk"}, {"lm_head", "disk"}, {"", "cpu"}},
                     {.offload_dir = dir.path()});
  EXPECT_EQ(d.offloaded_modules(), (std::vector<std::string>{"transformer.wte", "lm_head"}));
  EXPECT_TRUE(gpt->get_submodule("lm_head").param("weight").data().device().is_meta());
  expect_bitwise(forward(*gpt), expected);
  expect_bitwise(forward(*gpt), expected);
  // Tied to a CPU name, the tensor stays loaded: nothing to stream.
  d.remove_hooks();
  DispatchedModel cpu =
      dispatch_model(*gpt, {{"lm_head", "disk"}, {"", "cpu"}}, {.offload_dir = dir.path()});
  EXPECT_TRUE(cpu.offloaded_modules().empty());
  EXPECT_TRUE(gpt->get_submodule("lm_head").param("weight").data().device().is_cpu());
  expect_bitwise(forward(*gpt), expected);
}

TEST(Dispatch, InMemoryWeightsMap) {
  // A meta model, its disk tensors from a state_dict (Accelerate's weights_map in memory) and
  // its CPU tensors loaded once from it too.
  auto source = whole_gpt();
  const Tensor expected = forward(*source);
  std::shared_ptr<nn::GPT> gpt;
  {
    nn::InitEmptyWeights empty;
    gpt = std::make_shared<nn::GPT>(gpt_config());
  }
  gpt->eval();
  DispatchedModel d = dispatch_model(*gpt, blocks_on_disk(), {.state_dict = source->state_dict()});
  EXPECT_TRUE(gpt->get_submodule("transformer.wpe").param("weight").data().device().is_cpu());
  EXPECT_TRUE(on_meta(*gpt, "transformer.h"));
  expect_bitwise(forward(*gpt), expected);
  expect_bitwise(forward(*gpt), expected);
  EXPECT_EQ(d.stats().bytes_read, 0);  // shared with the state_dict, never read
}

TEST(Dispatch, SplitBlockAndTensorEntries) {
  // Entries below a block (its mlp) and a single tensor: the layer holding them streams them.
  TempDir dir;
  auto gpt = whole_gpt();
  const Tensor expected = forward(*gpt);
  DispatchedModel d = dispatch_model(
      *gpt,
      {{"transformer.h.2.mlp", "disk"}, {"transformer.h.5.attn.c_attn.bias", "disk"}, {"", "cpu"}},
      {.offload_dir = dir.path()});
  EXPECT_EQ(d.offloaded_modules(),
            (std::vector<std::string>{"transformer.h.2.mlp.c_fc", "transformer.h.2.mlp.c_proj",
                                      "transformer.h.5.attn.c_attn"}));
  EXPECT_TRUE(
      gpt->get_submodule("transformer.h.5.attn.c_attn").param("bias").data().device().is_meta());
  EXPECT_TRUE(
      gpt->get_submodule("transformer.h.5.attn.c_attn").param("weight").data().device().is_cpu());
  expect_bitwise(forward(*gpt), expected);
  expect_bitwise(forward(*gpt), expected);
  // A preloaded class below the entry loads whole; one above it (the block) does not count.
  d.remove_hooks();
  DispatchedModel mlp = dispatch_model(
      *gpt,
      {{"transformer.h.2.mlp", "disk"}, {"transformer.h.5.attn.c_attn.bias", "disk"}, {"", "cpu"}},
      {.offload_dir = dir.path(), .preload_module_classes = {"GPT2MLP", "GPT2Block"}});
  EXPECT_EQ(mlp.offloaded_modules(),
            (std::vector<std::string>{"transformer.h.2.mlp", "transformer.h.5.attn.c_attn"}));
  expect_bitwise(forward(*gpt), expected);
}

TEST(Dispatch, WholeModelOnDiskStreamsLayerByLayer) {
  // {"": "disk"} (what clean_result gives when nothing fits): the model's own forward is not
  // a unit; its leaf layers are, so at most two of them are loaded at a time.
  TempDir dir;
  auto gpt = whole_gpt();
  const Tensor expected = forward(*gpt);
  DispatchedModel d = dispatch_model(*gpt, {{"", "disk"}}, {.offload_dir = dir.path()});
  const auto units = d.offloaded_modules();
  ASSERT_EQ(units.size(), 2u + 8u * 6u + 1u + 1u);  // wte, wpe, the blocks, ln_f, lm_head
  EXPECT_EQ(units.front(), "transformer.wte");
  EXPECT_EQ(units.back(), "lm_head");
  EXPECT_TRUE(on_meta(*gpt, ""));
  expect_bitwise(forward(*gpt), expected);
  expect_bitwise(forward(*gpt), expected);
  EXPECT_EQ(d.loaded_bytes(), 0);
}

TEST(Dispatch, EverythingOnTheCpuSetsNoHooks) {
  auto gpt = whole_gpt();
  const Tensor expected = forward(*gpt);
  DispatchedModel d = dispatch_model(*gpt, {{"", "cpu"}}, {.main_device = "cpu"});
  EXPECT_TRUE(no_hooks(*gpt));
  EXPECT_TRUE(d.offloaded_modules().empty());
  EXPECT_EQ(d.device_map(), (DeviceMap{{"", "cpu"}}));
  expect_bitwise(forward(*gpt), expected);
}

// Three Linear layers run a, b, c, or a, c when `skip_b`: the path changes between passes.
class Chain : public nn::Layer {
 public:
  Chain() : Layer("Chain") {
    for (const char* name : {"a", "b", "c"}) {
      register_module(name, std::make_shared<nn::Linear>(4, 4));
    }
  }
  bool skip_b = false;

 protected:
  Tensor forward_impl(const Tensor& x) override {
    Tensor h = run("a", x);
    if (!skip_b) h = run("b", h);
    return run("c", h);
  }
  Tensor backward_impl(const Tensor&) override { return {}; }

 private:
  Tensor run(const char* name, const Tensor& x) {
    return static_cast<nn::Layer&>(*child(name)).forward(x);
  }
};

TEST(Dispatch, ReadAheadDroppedWhenThePathChanges) {
  TempDir dir;
  Chain chain;
  const Tensor x = Tensor::ones({2, 4});
  nn::NoGradGuard no_grad;
  chain.skip_b = true;
  const Tensor skipped = chain.forward(x);
  chain.skip_b = false;
  const Tensor full = chain.forward(x);
  DispatchedModel d = dispatch_model(chain, {{"a", "disk"}, {"b", "disk"}, {"c", "disk"}},
                                     {.offload_dir = dir.path()});
  EXPECT_EQ(d.offloaded_modules(), (std::vector<std::string>{"a", "b", "c"}));
  expect_bitwise(chain.forward(x), full);  // records a, b, c
  chain.skip_b = true;
  // a reads b ahead; c finds b staged, drops it and reads itself.
  expect_bitwise(chain.forward(x), skipped);
  DispatchStats s = d.stats();
  EXPECT_EQ(s.prefetches, 1);
  EXPECT_EQ(s.prefetch_dropped, 1);
  EXPECT_EQ(s.loads, 3 + 2);
  EXPECT_EQ(d.loaded_bytes(), 0);
  chain.skip_b = false;
  expect_bitwise(chain.forward(x), full);
  s = d.stats();
  EXPECT_EQ(s.prefetch_hits, 2);  // b and c read ahead again
}

// y = (x W^T + b) * scale, `scale` a buffer of the Scaled layer.
class Scaled : public nn::Layer {
 public:
  Scaled() : Layer("Scaled") {
    register_module("lin", std::make_shared<nn::Linear>(4, 4));
    register_buffer("scale", Tensor::from_vector({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4}));
  }

 protected:
  Tensor forward_impl(const Tensor& x) override {
    return mul(static_cast<nn::Layer&>(*child("lin")).forward(x), buffer("scale"));
  }
  Tensor backward_impl(const Tensor&) override { return {}; }
};

TEST(Dispatch, BuffersStayUnlessOffloadBuffers) {
  TempDir dir;
  Scaled model;
  const Tensor x = Tensor::ones({2, 4});
  nn::NoGradGuard no_grad;
  const Tensor expected = model.forward(x);
  {
    // The buffer stays on the CPU; only lin's tensors stream (lin is the unit).
    DispatchedModel d = dispatch_model(model, {{"", "disk"}}, {.offload_dir = dir.path()});
    EXPECT_EQ(d.offloaded_modules(), (std::vector<std::string>{"lin"}));
    EXPECT_TRUE(model.buffer("scale").device().is_cpu());
    EXPECT_FALSE(fs::exists(dir.path() / "scale.dat"));
    expect_bitwise(model.forward(x), expected);
  }
  // With offload_buffers the buffer goes to disk too, streamed by the model's own forward.
  DispatchedModel d =
      dispatch_model(model, {{"", "disk"}}, {.offload_dir = dir.path(), .offload_buffers = true});
  EXPECT_EQ(d.offloaded_modules(), (std::vector<std::string>{"", "lin"}));
  EXPECT_TRUE(model.buffer("scale").device().is_meta());
  EXPECT_TRUE(fs::exists(dir.path() / "scale.dat"));
  expect_bitwise(model.forward(x), expected);
  expect_bitwise(model.forward(x), expected);
  EXPECT_TRUE(model.buffer("scale").device().is_meta());
}

TEST(Dispatch, Bf16StreamedFromAnF32Checkpoint) {
  // The checkpoint is f32, the model bf16: each read converts, as the whole model's to() does.
  TempDir dir;
  auto whole = whole_gpt();
  nn::save_pretrained(*whole, dir.path());
  whole->to(DType::kBF16);
  const Tensor expected = forward(*whole);
  std::shared_ptr<nn::GPT> gpt;
  {
    nn::InitEmptyWeights empty;
    gpt = std::make_shared<nn::GPT>(gpt_config());
  }
  gpt->eval();
  DispatchedModel d = load_checkpoint_and_dispatch(
      *gpt, dir.path(),
      {.device_map = blocks_on_disk(), .dtype = DType::kBF16, .offload_from_checkpoint = true});
  EXPECT_EQ(gpt->get_submodule("transformer.h.0.mlp.c_fc").param("weight").data().dtype(),
            DType::kBF16);
  expect_bitwise(forward(*gpt), expected);
  expect_bitwise(forward(*gpt), expected);
  EXPECT_GT(d.stats().bytes_read, 0);
}

// ---- errors --------------------------------------------------------------------------------

TEST(Dispatch, BackwardIsRefused) {
  TempDir dir;
  auto gpt = whole_gpt();
  DispatchedModel d = dispatch_model(*gpt, blocks_on_disk(), {.offload_dir = dir.path()});
  gpt->train();
  const Tensor logits = gpt->forward(prompt());
  expect_error([&] { gpt->backward(Tensor::ones(logits.shape())); }, ErrorKind::kNotSupported,
               "backward through the dispatched model");
  gpt->clear_saved();
}

TEST(Dispatch, MissingOffloadFile) {
  TempDir dir;
  auto gpt = whole_gpt();
  const fs::path file = dir.path() / "transformer.h.5.mlp.c_fc.weight.dat";
  {
    DispatchedModel d = dispatch_model(*gpt, blocks_on_disk(), {.offload_dir = dir.path()});
    forward(*gpt);  // records the order
    fs::remove(file);
    // Read ahead on the worker thread: the error comes out of block 5's forward.
    expect_error([&] { forward(*gpt); }, ErrorKind::kIo, file.string());
    EXPECT_EQ(d.loaded_bytes(), 0);
  }
  // At dispatch, the check names the file before any hook is set.
  expect_error([&] { dispatch_model(*gpt, blocks_on_disk(), {.offload_dir = dir.path()}); },
               ErrorKind::kIo, file.string());
  EXPECT_TRUE(no_hooks(*gpt));
  // A wrong size is corrupt data.
  write_file_atomic(file, "abc");
  expect_error([&] { dispatch_model(*gpt, blocks_on_disk(), {.offload_dir = dir.path()}); },
               ErrorKind::kCorruptData, "holds 3 bytes");
  // No folder and no state_dict: nothing holds the meta tensors.
  expect_error([&] { dispatch_model(*gpt, blocks_on_disk()); }, ErrorKind::kInvalidArgument,
               "transformer.h.0.ln_1.weight' is mapped to disk and still on the meta device");
}

TEST(Dispatch, StalledReadTimesOut) {
  // A .dat replaced by a FIFO nobody writes: the background read blocks in open(). The
  // forward that needs it fails with kTimeout at the deadline, and removing the hooks does not
  // wait for the stuck thread longer than that either.
  TempDir dir;
  auto gpt = whole_gpt();
  DispatchedModel d = dispatch_model(*gpt, blocks_on_disk(),
                                     {.offload_dir = dir.path(),
                                      .preload_module_classes = {"GPT2Block"},
                                      .timeout = std::chrono::milliseconds(200)});
  forward(*gpt);  // records the order
  const fs::path file = dir.path() / "transformer.h.5.mlp.c_fc.weight.dat";
  fs::remove(file);
  ASSERT_EQ(::mkfifo(file.c_str(), 0600), 0);
  expect_error([&] { forward(*gpt); }, ErrorKind::kTimeout,
               "waited 200 ms for the background read of 'transformer.h.5'");
  d.remove_hooks();  // the worker is still blocked: it is left to finish on its own
  EXPECT_TRUE(no_hooks(*gpt));
  EXPECT_TRUE(on_meta(*gpt, "transformer.h"));
  // Let it finish: a writer opens and closes the FIFO, the read fails, the thread exits.
  int fd = -1;
  for (int i = 0; i < 200 && fd < 0; ++i) {
    fd = ::open(file.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd < 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GE(fd, 0);
  ::close(fd);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // courtesy, not a check
}

TEST(Dispatch, BadMaps) {
  auto gpt = whole_gpt();
  expect_error(
      [&] {
        dispatch_model(*gpt, {{"transformer", "cpu"}});
      },
      ErrorKind::kInvalidArgument,
      "lm_head.weight");  // not covered
  expect_error([&] { dispatch_model(*gpt, {}); }, ErrorKind::kInvalidArgument,
               "the device map is empty");
  expect_error([&] { dispatch_model(*gpt, {{"", "cuda:0"}}); }, ErrorKind::kNotSupported, "cuda:0");
  expect_error([&] { dispatch_model(*gpt, {{"", "0"}}); }, ErrorKind::kNotSupported, "cuda:0");
  expect_error([&] { dispatch_model(*gpt, {{"", "mps"}}); }, ErrorKind::kInvalidArgument, "mps");
  expect_error(
      [&] {
        dispatch_model(*gpt, {{"", "meta"}});
      },
      ErrorKind::kInvalidArgument, "mapped to 'meta'");
  expect_error(
      [&] {
        dispatch_model(*gpt, {{"", "cpu"}}, {.main_device = "cuda:1"});
      },
      ErrorKind::kNotSupported, "main_device 'cuda:1'");
  expect_error([&] { dispatch_model(*gpt, blocks_on_disk()); }, ErrorKind::kInvalidArgument,
               "holds values; pass offload_dir");
  EXPECT_TRUE(no_hooks(*gpt));
  EXPECT_FALSE(on_meta(*gpt, "transformer.h.0"));  // a refused dispatch changes nothing

  TempDir dir;
  nn::save_pretrained(*gpt, dir.path());
  expect_error([&] { load_checkpoint_and_dispatch(*gpt, dir.path(), {.device_map = "fastest"}); },
               ErrorKind::kInvalidArgument, "'fastest' is not a map or one of 'auto'");
  // A meta model whose CPU part was never loaded.
  std::shared_ptr<nn::GPT> empty_gpt;
  {
    nn::InitEmptyWeights empty;
    empty_gpt = std::make_shared<nn::GPT>(gpt_config());
  }
  expect_error(
      [&] {
        dispatch_model(*empty_gpt, {{"", "cpu"}});
      },
      ErrorKind::kInvalidArgument,
      "'transformer.wte.weight' is mapped to cpu and still on the meta device");
}

}  // namespace
}  // namespace braid::accel
