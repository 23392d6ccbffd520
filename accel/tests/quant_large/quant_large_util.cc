// The full-size quantization check of quant_large_util.h, shared by the model families.
#include "quant_large_util.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "../quant/quant_test_util.h"
#include "braid/accel/quantization.h"
#include "braid/amp/autocast.h"
#include "braid/core/allocator.h"
#include "braid/core/file_util.h"
#include "braid/core/thread_pool.h"
#include "braid/nn/clip_grad.h"
#include "braid/nn/loss.h"
#include "braid/nn/optim.h"
#include "braid/tensor/ops.h"
#include "braid/tensor/safetensors.h"

namespace braid::accel::quant_large {
namespace {

using quant_testing::bitwise;
using quant_testing::bnb_mode;

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// The text memorised: the first batch * seq + 1 bytes of the BSD licence (Debian's
// base-files), cut into `batch` windows of `seq` bytes.
const fs::path kText = "/usr/share/common-licenses/BSD";

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag) {
    path =
        fs::temp_directory_path() / ("braid-" + tag + "-quant-test-" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::vector<double> text_ids(int64_t count) {
  const std::string text = read_file(kText);
  std::vector<double> ids;
  for (size_t i = 0; i < std::min<size_t>(text.size(), static_cast<size_t>(count)); ++i) {
    ids.push_back(static_cast<unsigned char>(text[i]));
  }
  return ids;
}

struct Trained {
  int steps = 0;
  double first_loss = 0, last_loss = 0;  // bf16 autocast, before the step
  double f32_loss = 0;                   // in f32 after training
  double seconds = 0;
  std::vector<double> losses;  // every step's
};

// AdamW on the windows until the batch loss is below stop_loss: the model memorises the text,
// so the logits of what follows the prompt are peaked.
Trained memorise(nn::CausalLM& model, const std::vector<double>& text, const Training& tr) {
  std::vector<double> ids, tgt;
  for (int64_t b = 0; b < tr.batch; ++b) {
    ids.insert(ids.end(), text.begin() + b * tr.seq, text.begin() + (b + 1) * tr.seq);
    tgt.insert(tgt.end(), text.begin() + b * tr.seq + 1, text.begin() + (b + 1) * tr.seq + 1);
  }
  const Tensor x = Tensor::from_vector(ids, {tr.batch, tr.seq}, DType::kI64);
  const Tensor y = Tensor::from_vector(tgt, {tr.batch, tr.seq}, DType::kI64);
  Trained t;
  const auto t0 = Clock::now();
  nn::AdamW opt(model.parameters(), {.lr = tr.lr});
  nn::CrossEntropyLoss ce;
  model.train();
  for (; t.steps < tr.max_steps; ++t.steps) {
    opt.zero_grad();
    {
      amp::AutocastScope bf16(DType::kBF16);
      t.last_loss = ce.forward(model.forward(x), y).item<double>();
      t.losses.push_back(t.last_loss);
      if (t.steps == 0) t.first_loss = t.last_loss;
      if (t.last_loss < tr.stop_loss) break;
      model.backward(ce.backward());
    }
    // Without clipping (GPT-2 small, tried at lr 3e-4 and 1e-3) the loss spikes in the first
    // steps and then stalls at the bytes' unigram loss, about 3.1; with it, it falls steadily.
    nn::clip_grad_norm_(model.parameters(), tr.max_grad_norm);
    opt.step();
  }
  model.eval();
  t.seconds = seconds_since(t0);
  nn::NoGradGuard no_grad;
  t.f32_loss = ce.forward(model.forward(x), y).item<double>();
  return t;
}

int64_t param_bytes(nn::Module& m) {
  int64_t total = 0;
  for (auto& [name, p] : m.named_parameters()) total += static_cast<int64_t>(p.data().nbytes());
  return total;
}

// Logits [1, L, V] as doubles, and statistics over the positions whose argmax chose a generated
// token: kPrompt - 1 .. kPrompt + kNew - 2.
struct Logits {
  std::vector<double> v;
  int64_t vocab = 0;
  explicit Logits(const Tensor& t) : v(t.to(DType::kF64).to_vector()), vocab(t.shape()[2]) {}
  const double* row(int64_t pos) const { return v.data() + pos * vocab; }
};

constexpr int64_t kFirstPos = kPrompt - 1, kEndPos = kPrompt + kNew - 1;

// The smallest gap between the largest and the second largest logit.
double min_margin(const Logits& l) {
  double m = INFINITY;
  for (int64_t p = kFirstPos; p < kEndPos; ++p) {
    std::vector<double> r(l.row(p), l.row(p) + l.vocab);
    std::partial_sort(r.begin(), r.begin() + 2, r.end(), std::greater<double>());
    m = std::min(m, r[0] - r[1]);
  }
  return m;
}

double max_abs_diff(const Logits& a, const Logits& b) {
  double m = 0;
  for (int64_t p = kFirstPos; p < kEndPos; ++p) {
    for (int64_t j = 0; j < a.vocab; ++j) m = std::max(m, std::abs(a.row(p)[j] - b.row(p)[j]));
  }
  return m;
}

double max_abs(const Logits& a) {
  double m = 0;
  for (int64_t p = kFirstPos; p < kEndPos; ++p) {
    for (int64_t j = 0; j < a.vocab; ++j) m = std::max(m, std::abs(a.row(p)[j]));
  }
  return m;
}

double stddev(const Logits& a) {
  double s = 0, s2 = 0;
  const auto n = static_cast<double>((kEndPos - kFirstPos) * a.vocab);
  for (int64_t p = kFirstPos; p < kEndPos; ++p) {
    for (int64_t j = 0; j < a.vocab; ++j) {
      s += a.row(p)[j];
      s2 += a.row(p)[j] * a.row(p)[j];
    }
  }
  return std::sqrt(std::max(0.0, s2 / n - (s / n) * (s / n)));
}

struct Loaded {
  Tensor tokens, logits;
  int64_t quantized_bytes = 0;  // compute_module_sizes of the loaded model
  int64_t load_peak = 0;        // allocator peak while loading, above the start
  int64_t resident = 0;         // allocator bytes held after loading
  int64_t peak = 0;             // allocator peak while generating, above the start
  double load_s = 0, generate_s = 0;
  std::vector<std::string> streamed;  // units read from disk around their forward
  DispatchStats stats;                // of the streamed units, after generating
};

// Loads `folder` quantized (held whole, or with max_memory cpu `budget` bytes and the rest on
// disk), generates kNew greedy tokens after the prompt and takes the logits of the sequence.
// The peaks are the CPU allocator's, above what it held before the model was built.
Loaded load_and_generate(const Family& family, const fs::path& folder, const std::string& mode,
                         const Tensor& prompt, int64_t budget = 0, const fs::path& offload = {}) {
  Allocator& cpu = get_allocator(kCPU);
  Loaded r;
  const auto before = static_cast<int64_t>(cpu.stats().current_bytes);
  std::shared_ptr<nn::CausalLM> m = family.meta_from_config(read_file(folder / "config.json"));
  m->eval();
  cpu.reset_peak();
  auto t0 = Clock::now();
  LoadAndQuantizeOptions options;
  if (budget > 0) {
    options = {.device_map = "auto",
               .max_memory = MaxMemory{{"cpu", budget}, {"disk", 0}},
               .no_split_module_classes = {family.block_class},
               .offload_folder = offload};
  }
  // Declared after the model: the dispatch hooks it holds must go first.
  LoadAndQuantizeResult loaded = load_and_quantize_model(*m, bnb_mode(mode), folder, options);
  r.load_s = seconds_since(t0);
  r.load_peak = static_cast<int64_t>(cpu.stats().peak_bytes) - before;
  EXPECT_TRUE(loaded.missing_keys.empty()) << loaded.missing_keys.front();
  EXPECT_TRUE(loaded.unexpected_keys.empty()) << loaded.unexpected_keys.front();
  r.streamed = loaded.dispatched.offloaded_modules();
  r.quantized_bytes = compute_module_sizes(*m)[""];
  r.resident = static_cast<int64_t>(cpu.stats().current_bytes) - before;
  cpu.reset_peak();
  t0 = Clock::now();
  Generator gen(0);
  r.tokens = m->generate(prompt, kNew, 0.0, 0, gen);
  r.generate_s = seconds_since(t0);
  {
    nn::NoGradGuard no_grad;
    r.logits = m->forward(r.tokens);
  }
  r.peak = static_cast<int64_t>(cpu.stats().peak_bytes) - before;
  r.stats = loaded.dispatched.stats();
  return r;
}

std::string quote(const fs::path& p) {
  return "'" + p.string() + "'";
}

// What the f32 model gave, that every later step is compared with.
struct F32Reference {
  int64_t bytes = 0;  // of its parameters
  Tensor tokens, logits;
};

// 1. Initializes and trains the model, saves it to `folder`, generates in f32.
void train_save_generate(std::shared_ptr<nn::CausalLM> model, const FullSizeCheck& check,
                         const std::vector<double>& text, const Tensor& prompt,
                         const fs::path& folder, F32Reference& f32) {
  const Family& family = check.family;
  const Training& tr = check.training;
  Generator gen(1);
  model->init_weights(gen);
  const Trained t = memorise(*model, text, tr);
  std::string every4;
  for (size_t i = 0; i < t.losses.size(); i += 4) every4 += " " + std::to_string(t.losses[i]);
  std::printf(
      "[ measured ] %s trained: %d AdamW steps (lr %g, bf16 autocast, batch %lld x %lld bytes) "
      "in %.1f s, loss %.3f -> %.4f (bf16), %.4f in f32; every 4th step:%s\n",
      family.name.c_str(), t.steps, tr.lr, static_cast<long long>(tr.batch),
      static_cast<long long>(tr.seq), t.seconds, t.first_loss, t.last_loss, t.f32_loss,
      every4.c_str());
  ASSERT_LT(t.f32_loss, tr.max_f32_loss) << "the model did not memorise the text";
  f32.bytes = param_bytes(*model);
  auto t0 = Clock::now();
  family.save_pretrained(*model, folder);
  const double save_s = seconds_since(t0);
  t0 = Clock::now();
  Generator g(0);
  f32.tokens = model->generate(prompt, kNew, 0.0, 0, g);
  const double gen_s = seconds_since(t0);
  nn::NoGradGuard no_grad;
  f32.logits = model->forward(f32.tokens);
  std::printf("[ measured ] %s f32: %lld B, saved in %.1f s, %lld tokens in %.1f s\n",
              family.name.c_str(), static_cast<long long>(f32.bytes), save_s,
              static_cast<long long>(kNew), gen_s);
}

// 2. transformers loads braid's folder, generates, and saves its own checkpoint in hf_folder.
void transformers_resave(const FullSizeCheck& check, const fs::path& dir,
                         const fs::path& braid_folder, const fs::path& hf_folder,
                         const std::vector<double>& text, const F32Reference& f32) {
  const fs::path generation = dir / "transformers_generation.safetensors";
  std::string ids;
  for (int64_t i = 0; i < kPrompt; ++i) {
    ids += (i ? "," : "") + std::to_string(static_cast<int64_t>(text[static_cast<size_t>(i)]));
  }
  const fs::path log = dir / "transformers.log";
  const std::string cmd =
      quote(BRAID_TORCH_PYTHON) + " " +
      quote(BRAID_SOURCE_DIR "/accel/tests/quant_large/transformers_resave.py") + " " +
      check.family.hf_class + " " + quote(braid_folder) + " " + quote(hf_folder) + " " +
      quote(generation) + " " + ids + " " + std::to_string(kNew) + " > " + quote(log) + " 2>&1";
  const auto t0 = Clock::now();
  const int rc = std::system(cmd.c_str());
  const std::string out = fs::exists(log) ? read_file(log) : std::string();
  ASSERT_EQ(rc, 0) << cmd << "\n" << out;
  std::printf("[ measured ] transformers (%s): %.1f s: %s", BRAID_TORCH_PYTHON, seconds_since(t0),
              out.c_str());
  const SafetensorsFile gen = SafetensorsFile::open(generation);
  EXPECT_EQ(gen.get("tokens").to_vector(), f32.tokens.to_vector())
      << "transformers' greedy tokens differ from braid's f32 tokens";
  const Logits ref(f32.logits);
  const double err = max_abs_diff(Logits(gen.get("logits")), ref) / max_abs(ref);
  std::printf("[ measured ] f32: max |braid logit - transformers logit| / max |logit| = %.2e\n",
              err);
  EXPECT_LT(err, check.transformers_bound);
}

// 3. Quantized from braid's file: held whole, then under the cap with the blocks on disk. The
// cap: the CPU allocator's peak, loading and generating, at most half the f32 model. Returns
// each mode's logits held whole in `whole_logits`.
void quantized_from_braid(const FullSizeCheck& check, const fs::path& dir,
                          const fs::path& braid_folder, const Tensor& prompt,
                          const F32Reference& f32, std::map<std::string, Tensor>& whole_logits) {
  const Family& family = check.family;
  const Logits ref(f32.logits);
  const double scale = max_abs(ref), margin = min_margin(ref);
  const int64_t cap = f32.bytes / 2;
  const auto budget = static_cast<int64_t>(static_cast<double>(f32.bytes) * check.budget_fraction);
  for (const Mode& mode : check.modes) {
    SCOPED_TRACE(mode.name);
    const Loaded whole = load_and_generate(family, braid_folder, mode.name, prompt);
    const double err = max_abs_diff(Logits(whole.logits), ref);
    EXPECT_EQ(whole.tokens.to_vector(), f32.tokens.to_vector());
    EXPECT_LT(err / scale, mode.bound);
    whole_logits[mode.name] = whole.logits;
    const fs::path offload = dir / (std::string("offload-") + mode.name);
    const Loaded streamed =
        load_and_generate(family, braid_folder, mode.name, prompt, budget, offload);
    std::printf(
        "[ measured ] %s %s from braid's file: quantized %lld B (%.3f B per parameter), tokens "
        "%s the f32 model's, max |logit - f32| %.3f (%.2f%% of max |logit|, %.3f std, smallest "
        "f32 margin / error %.1f); whole: load %.1f s, generate %.1f s, peak %lld B; cap %lld B: "
        "%zu units on disk, load %.1f s (peak %lld B), resident %lld B, generate %.1f s (%.2f "
        "GB read, %lld read ahead), peak %lld B (%.1f%% of f32)\n",
        family.name.c_str(), mode.name, static_cast<long long>(whole.quantized_bytes),
        4.0 * static_cast<double>(whole.quantized_bytes) / static_cast<double>(f32.bytes),
        whole.tokens.to_vector() == f32.tokens.to_vector() ? "equal" : "DIFFER FROM", err,
        100.0 * err / scale, err / stddev(ref), margin / err, whole.load_s, whole.generate_s,
        static_cast<long long>(whole.peak), static_cast<long long>(cap), streamed.streamed.size(),
        streamed.load_s, static_cast<long long>(streamed.load_peak),
        static_cast<long long>(streamed.resident), streamed.generate_s,
        static_cast<double>(streamed.stats.bytes_read) * 1e-9,
        static_cast<long long>(streamed.stats.prefetch_hits), static_cast<long long>(streamed.peak),
        100.0 * static_cast<double>(streamed.peak) / static_cast<double>(f32.bytes));
    ASSERT_FALSE(streamed.streamed.empty());
    EXPECT_TRUE(
        std::any_of(streamed.streamed.begin(), streamed.streamed.end(),
                    [&](const std::string& u) { return u.rfind(family.block_prefix, 0) == 0; }))
        << "no block on disk";
    EXPECT_LE(streamed.peak, cap);
    EXPECT_LE(streamed.load_peak, cap);
    EXPECT_LT(streamed.peak, whole.peak);
    EXPECT_TRUE(bitwise(streamed.tokens, whole.tokens));
    EXPECT_TRUE(bitwise(streamed.logits, whole.logits));
    fs::remove_all(offload);
  }
}

// 4. Quantized from transformers' file, under the cap: the same values as braid's file.
void quantized_from_transformers(const FullSizeCheck& check, const fs::path& dir,
                                 const fs::path& hf_folder, const Tensor& prompt,
                                 const F32Reference& f32,
                                 const std::map<std::string, Tensor>& whole_logits) {
  const int64_t cap = f32.bytes / 2;
  const auto budget = static_cast<int64_t>(static_cast<double>(f32.bytes) * check.budget_fraction);
  for (const std::string& mode : check.transformers_modes) {
    SCOPED_TRACE("transformers' file, " + mode);
    const fs::path offload = dir / ("offload-hf-" + mode);
    const Loaded r = load_and_generate(check.family, hf_folder, mode, prompt, budget, offload);
    std::printf(
        "[ measured ] %s %s from transformers' file, cap %lld B: %zu units on disk, load %.1f s, "
        "generate %.1f s, peak %lld B (%.1f%% of f32), tokens %s the f32 model's\n",
        check.family.name.c_str(), mode.c_str(), static_cast<long long>(cap), r.streamed.size(),
        r.load_s, r.generate_s, static_cast<long long>(r.peak),
        100.0 * static_cast<double>(r.peak) / static_cast<double>(f32.bytes),
        r.tokens.to_vector() == f32.tokens.to_vector() ? "equal" : "DIFFER FROM");
    EXPECT_EQ(r.tokens.to_vector(), f32.tokens.to_vector());
    ASSERT_EQ(whole_logits.count(mode), 1u) << mode << " was not loaded from braid's file";
    EXPECT_TRUE(bitwise(r.logits, whole_logits.at(mode)));
    EXPECT_LE(r.peak, cap);
    EXPECT_FALSE(r.streamed.empty());
    fs::remove_all(offload);
  }
}

}  // namespace

void check_at_full_size(std::shared_ptr<nn::CausalLM> model, const FullSizeCheck& check) {
  // Two kernel threads unless told otherwise (braid's default is one; the results are the same
  // bits for every count, docs/kernels.md "Threads", only the time changes).
  if (std::getenv("BRAID_NUM_THREADS") == nullptr) set_num_threads(2);
  ASSERT_TRUE(fs::exists(kText)) << kText
                                 << " (Debian's base-files) is the text the test trains on";
  const Training& tr = check.training;
  ASSERT_GE(tr.batch * tr.seq, kPrompt + kNew) << "the memorised text is shorter than the check";
  TempDir dir(check.family.hf_class);
  const std::vector<double> text = text_ids(tr.batch * tr.seq + 1);
  ASSERT_EQ(static_cast<int64_t>(text.size()), tr.batch * tr.seq + 1);
  const Tensor prompt = Tensor::from_vector(
      std::vector<double>(text.begin(), text.begin() + kPrompt), {1, kPrompt}, DType::kI64);
  const std::vector<double> memorised(text.begin(), text.begin() + kPrompt + kNew);

  const fs::path braid_folder = dir.path / "braid";
  F32Reference f32;
  train_save_generate(std::move(model), check, text, prompt, braid_folder, f32);
  if (::testing::Test::HasFatalFailure()) return;
  ASSERT_EQ(f32.tokens.to_vector(), memorised) << "the f32 model does not continue the text";
  const Logits ref(f32.logits);
  std::printf(
      "[ measured ] f32 logits over the generated positions: max |logit| %.2f, std %.2f, "
      "smallest top-2 margin %.2f\n",
      max_abs(ref), stddev(ref), min_margin(ref));

  const fs::path hf_folder = dir.path / "transformers";
  transformers_resave(check, dir.path, braid_folder, hf_folder, text, f32);
  if (::testing::Test::HasFatalFailure()) return;
  std::map<std::string, Tensor> whole_logits;
  quantized_from_braid(check, dir.path, braid_folder, prompt, f32, whole_logits);
  if (::testing::Test::HasFatalFailure()) return;
  quantized_from_transformers(check, dir.path, hf_folder, prompt, f32, whole_logits);
}

}  // namespace braid::accel::quant_large
