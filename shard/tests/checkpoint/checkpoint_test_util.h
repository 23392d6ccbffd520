// Shared by the checkpoint tests and checkpoint_worker: a small model with one tensor of
// each kind a checkpoint must carry (several dtypes, a 0-d and an empty tensor), values that
// depend on a seed, and FSDP's cut of it across ranks (all tensors flattened end to end,
// split into equal runs, so pieces start and stop at arbitrary elements).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "braid/shard/checkpoint.h"

namespace braid::shard::testing {

// Element j of the tensor numbered t: quarter steps in [-31.25, 31.5], exact in f32 (the
// python check in apps/tests recomputes them).
inline double model_value(int seed, int t, int64_t j) {
  return static_cast<double>((seed * 7 + t * 13 + j) % 251 - 125) / 4.0;
}

inline NamedTensors make_model(int seed) {
  struct Spec {
    const char* name;
    Shape shape;
    DType dtype;
  };
  const std::vector<Spec> specs = {
      {"embed.weight", {13, 7}, DType::kF32},  {"layers.0.attn.w", {5, 9}, DType::kBF16},
      {"layers.0.attn.b", {9}, DType::kF32},   {"layers.0.ids", {2, 3}, DType::kI64},
      {"layers.1.mask", {11}, DType::kBool},   {"layers.1.scale", {}, DType::kF64},
      {"layers.1.empty", {0, 4}, DType::kF16}, {"lm_head.weight", {7, 13}, DType::kF32},
  };
  NamedTensors out;
  for (size_t t = 0; t < specs.size(); ++t) {
    int64_t n = 1;
    for (int64_t d : specs[t].shape) n *= d;
    std::vector<double> values(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) values[j] = model_value(seed, static_cast<int>(t), j);
    if (specs[t].dtype == DType::kBool) {
      for (auto& v : values) v = v > 0 ? 1 : 0;
    }
    out.emplace_back(specs[t].name, Tensor::from_vector(values, specs[t].shape, specs[t].dtype));
  }
  return out;
}

// Rank `rank`'s pieces of `model` cut FSDP-style into `world` equal runs (the last shorter).
// Empty tensors go to rank 0 as a piece of count 0.
inline std::vector<Piece> cut(const NamedTensors& model, int rank, int world) {
  int64_t total = 0;
  for (const auto& [name, t] : model) total += t.numel();
  const int64_t per = (total + world - 1) / world;
  const int64_t lo = std::min(total, per * rank), hi = std::min(total, per * (rank + 1));
  std::vector<Piece> out;
  int64_t start = 0;
  for (const auto& [name, t] : model) {
    const int64_t a = std::max(lo, start), b = std::min(hi, start + t.numel());
    const Tensor flat = t.contiguous().reshape({t.numel()});
    if (a < b) out.push_back({name, t.shape(), a - start, flat.slice(0, a - start, b - start)});
    if (t.numel() == 0 && rank == 0) out.push_back({name, t.shape(), 0, flat});
    start += t.numel();
  }
  return out;
}

inline bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return ca.nbytes() == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

}  // namespace braid::shard::testing
