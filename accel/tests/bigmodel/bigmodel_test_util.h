// Models and helpers shared by the big-model tests: a small GPT whose module sizes are worked
// out by hand below, toy modules with parameters of chosen sizes, and a temporary folder.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "braid/core/error.h"
#include "braid/nn/gpt.h"
#include "braid/nn/module.h"
#include "braid/tensor/tensor.h"

namespace braid::accel::testing {

// vocab 16, 8 positions, d 8, 2 layers, 2 heads, f32. Sizes in bytes (4 per element):
//   transformer.wte 16x8 = 512, transformer.wpe 8x8 = 256, ln_* 8 + 8 = 64,
//   attn.c_attn 8x24 + 24 = 864, attn.c_proj 8x8 + 8 = 288, mlp.c_fc 8x32 + 32 = 1152,
//   mlp.c_proj 32x8 + 8 = 1056; a block 64 + 864 + 288 + 64 + 1152 + 1056 = 3488;
//   transformer 512 + 256 + 2 x 3488 + 64 = 7808; lm_head 0 (its weight is wte's, counted once).
inline nn::GPTConfig small_gpt_config() {
  nn::GPTConfig cfg;
  cfg.vocab_size = 16;
  cfg.n_positions = 8;
  cfg.n_embd = 8;
  cfg.n_layer = 2;
  cfg.n_head = 2;
  return cfg;
}

inline std::shared_ptr<nn::GPT> meta_gpt() {
  nn::InitEmptyWeights empty;
  return std::make_shared<nn::GPT>(small_gpt_config());
}

inline std::shared_ptr<nn::GPT> real_gpt(uint64_t seed = 7) {
  auto gpt = std::make_shared<nn::GPT>(small_gpt_config());
  Generator gen(seed);
  gpt->init_weights(gen);
  return gpt;
}

// A module with parameters of given element counts (f32 zeros unless told otherwise).
class Toy : public nn::Module {
 public:
  Toy(std::string type, const std::vector<std::pair<std::string, int64_t>>& params,
      DType dtype = DType::kF32)
      : Module(std::move(type)) {
    for (const auto& [name, n] : params) {
      register_parameter(name, nn::Parameter(Tensor::zeros({n}, dtype)));
    }
  }
};

// Root: emb {weight 100}, mid {weight 250}, head {bias 300, weight = emb's handle} (f32).
inline std::unique_ptr<nn::Module> tied_toy() {
  using Params = std::vector<std::pair<std::string, int64_t>>;
  auto root = std::make_unique<nn::Module>("Root");
  auto emb = root->register_module("emb", std::make_shared<Toy>("Emb", Params{{"weight", 100}}));
  root->register_module("mid", std::make_shared<Toy>("Mid", Params{{"weight", 250}}));
  auto head = root->register_module("head", std::make_shared<Toy>("Head", Params{{"bias", 300}}));
  head->register_parameter("weight", emb->param("weight"));
  return root;
}

// Root: big {w 1000}, small {w 100}, tiny {w 25} (f32).
inline std::unique_ptr<nn::Module> fallback_toy() {
  using Params = std::vector<std::pair<std::string, int64_t>>;
  auto root = std::make_unique<nn::Module>("Root");
  root->register_module("big", std::make_shared<Toy>("Big", Params{{"w", 1000}}));
  root->register_module("small", std::make_shared<Toy>("Small", Params{{"w", 100}}));
  root->register_module("tiny", std::make_shared<Toy>("Tiny", Params{{"w", 25}}));
  return root;
}

// A folder under the system temp folder, removed with everything in it at scope end.
class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "braid-bigmodel-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Runs fn and expects a braid::Error of `kind` whose message contains `fragment`.
inline void expect_error(const std::function<void()>& fn, ErrorKind kind,
                         const std::string& fragment) {
  try {
    fn();
    ADD_FAILURE() << "expected an error containing '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(e.message().find(fragment), std::string::npos) << e.message();
  }
}

// Same names, dtypes, shapes and bytes.
inline void expect_same_tensors(const NamedTensors& a, const NamedTensors& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE(a[i].first);
    ASSERT_EQ(a[i].first, b[i].first);
    const Tensor x = a[i].second.contiguous(), y = b[i].second.contiguous();
    ASSERT_FALSE(x.device().is_meta());
    ASSERT_FALSE(y.device().is_meta());
    ASSERT_EQ(x.dtype(), y.dtype());
    ASSERT_EQ(x.shape(), y.shape());
    if (x.nbytes() > 0) {
      EXPECT_EQ(std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()), 0);
    }
  }
}

}  // namespace braid::accel::testing
