// GPT::init_weights_range gives, for any range of any parameter, the bits init_weights writes
// there (the Philox stream is positional), also for a model built under InitEmptyWeights.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "braid/core/rng.h"
#include "braid/nn/gpt.h"

namespace braid::nn {
namespace {

GPTConfig cfg() {
  GPTConfig c;
  c.vocab_size = 13;
  c.n_positions = 9;
  c.n_embd = 12;
  c.n_layer = 2;
  c.n_head = 3;
  return c;
}

TEST(GPTInitRange, EveryRangeOfEveryParameterMatchesTheWholeInitialization) {
  GPT whole(cfg());
  Generator gen(77);
  gen.set_offset(40);  // not a fresh generator: the ranges must start from its state
  Generator before(77);
  before.set_offset(40);
  whole.init_weights(gen);

  std::shared_ptr<GPT> empty;
  {
    InitEmptyWeights scope;
    empty = std::make_shared<GPT>(cfg());
  }
  int checked = 0;
  for (auto& [name, p] : whole.named_parameters()) {
    const Tensor ref = p.data().contiguous();
    const int64_t n = ref.numel();
    for (int64_t offset : {int64_t{0}, int64_t{1}, int64_t{3}, int64_t{5}, n / 2, n - 1}) {
      for (int64_t count : {int64_t{1}, int64_t{2}, int64_t{7}, n}) {
        if (offset < 0 || offset + count > n) continue;
        std::vector<float> got(static_cast<size_t>(count));
        empty->init_weights_range(before, name, offset, count, got.data());
        ASSERT_EQ(0, std::memcmp(got.data(), ref.data<float>() + offset, got.size() * 4))
            << name << " [" << offset << ", " << offset + count << ")";
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 100);
  EXPECT_EQ(before.offset(), 40u);  // not advanced
  float x;
  EXPECT_THROW(empty->init_weights_range(before, "nope", 0, 1, &x), Error);
  EXPECT_THROW(empty->init_weights_range(before, "transformer.wte.weight", 13 * 12, 1, &x), Error);
}

}  // namespace
}  // namespace braid::nn
