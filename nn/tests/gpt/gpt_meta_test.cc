// A whole GPT forward and backward on the meta device: every layer reaches its kernels through
// the kernel table of its input's device (docs/kernels.md, "Kernel tables"), so a model built
// under InitEmptyWeights runs on meta with the same code as on cpu, allocating nothing, and
// every activation and gradient has the shape and device the cpu run gives.
#include <gtest/gtest.h>

#include "braid/core/allocator.h"
#include "braid/nn/gpt.h"
#include "braid/nn/module.h"

namespace braid::nn {
namespace {

GPTConfig tiny() {
  GPTConfig c;
  c.vocab_size = 97;
  c.n_positions = 32;
  c.n_embd = 48;
  c.n_layer = 2;
  c.n_head = 4;
  return c;
}

TEST(GPTOnMeta, ForwardAndBackwardRunOnTheMetaTable) {
  std::shared_ptr<GPT> model;
  {
    InitEmptyWeights empty;
    model = std::make_shared<GPT>(tiny());
  }
  for (const auto& [name, p] : model->named_parameters()) {
    ASSERT_EQ(p.data().device(), kMeta) << name;
  }
  model->train(true);  // dropout on: the mask travels to the input's device
  const Tensor ids = Tensor::empty({3, 16}, DType::kI64, kMeta);
  const size_t cpu_before = get_allocator(kCPU).stats().current_bytes;
  const Tensor logits = model->forward(ids);
  EXPECT_EQ(logits.device(), kMeta);
  EXPECT_EQ(logits.shape(), (Shape{3, 16, 97}));
  const Tensor dlogits = Tensor::empty(logits.shape(), logits.dtype(), kMeta);
  model->backward(dlogits);
  for (const auto& [name, p] : model->named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_EQ(p.grad().device(), kMeta) << name;
    EXPECT_EQ(p.grad().shape(), p.data().shape()) << name;
  }
  // Only the dropout masks' host draws (freed again) touched cpu memory.
  EXPECT_EQ(get_allocator(kCPU).stats().current_bytes, cpu_before);
}

}  // namespace
}  // namespace braid::nn
