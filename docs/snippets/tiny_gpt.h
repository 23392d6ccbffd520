// What the GPT snippets (docs/parallelism.md, docs/sharding.md) train: a GPT small enough for
// 2-8 ranks on 2 cores, and a fixed set of token batches, the same on every rank.
#pragma once
#include <cstdint>
#include <cstdio>
#include <vector>

#include "braid/core/rng.h"
#include "braid/nn/gpt.h"

inline braid::nn::GPTConfig tiny_gpt_config() {
  braid::nn::GPTConfig c;
  c.vocab_size = 37;
  c.n_positions = 16;
  c.n_embd = 24;
  c.n_layer = 4;
  c.n_head = 4;
  c.embd_pdrop = c.attn_pdrop = c.resid_pdrop = 0.0;
  return c;
}

// `count` batches of token ids [batch, seq] and their labels (the ids shifted by one).
struct TokenBatches {
  std::vector<braid::Tensor> ids, labels;
};
inline TokenBatches token_batches(int64_t count, int64_t batch, int64_t seq, int64_t vocab) {
  TokenBatches out;
  braid::Generator gen(1234);
  for (int64_t i = 0; i < count; ++i) {
    braid::Tensor t = braid::Tensor::empty({batch, seq + 1}, braid::DType::kI64);
    gen.fill_randint(t.data<int64_t>(), t.numel(), 0, vocab);
    out.ids.push_back(t.narrow(1, 0, seq).contiguous());
    out.labels.push_back(t.narrow(1, 1, seq).contiguous());
  }
  return out;
}

// Whether the loss fell below `factor` times its first value, printed by rank `rank`.
inline bool loss_fell(const char* what, int rank, double first, double last, double factor = 0.9) {
  std::printf("%s rank %d: loss %.5f -> %.5f\n", what, rank, first, last);
  if (last < factor * first) return true;
  std::fprintf(stderr, "FAIL: %s rank %d: the loss did not fall\n", what, rank);
  return false;
}
