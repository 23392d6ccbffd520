// docs/sharding.md's checkpoint example: each rank saves its piece of one tensor; any process
// reads any range back. ctest runs it under braid launch --nproc-per-node 2; exits 1 unless a
// range across both ranks' pieces reads back as written, in f32 and in bf16.
#include <cstdio>

#include "braid/shard/checkpoint.h"

using braid::DType;

int main() {
  auto pg = braid::ProcessGroup::create({});
  const int64_t rows = 512, cols = 64, numel = rows * cols;  // wte of a small GPT
  const int64_t offset = pg->rank() * numel / pg->size(), count = numel / pg->size();
  // This rank's flat shard of the tensor whose element i is i / 64.
  std::vector<double> values(count);
  for (int64_t i = 0; i < count; ++i) values[i] = (offset + i) / 64.0;
  braid::Tensor flat_shard = braid::Tensor::from_vector(values, {count});
  const int64_t my_offset = numel / 2 - 100 + 50 * pg->rank(), my_count = 200;
  std::vector<float> dst(my_count);
  // [snippet]
  std::vector<braid::shard::Piece> mine = {{"wte.weight", {512, 64}, offset, flat_shard}};
  braid::shard::save_sharded_checkpoint("ckpt/step-100", mine, *pg, {{"step", "100"}});
  braid::shard::ShardedCheckpoint ckpt("ckpt/step-100");  // no ProcessGroup needed
  ckpt.read_range("wte.weight", my_offset, my_count, dst.data(), DType::kF32);  // any range, dtype
  // [end snippet]

  bool ok = ckpt.metadata().at("step") == "100" && ckpt.world_size() == pg->size();
  for (int64_t i = 0; i < my_count; ++i) ok = ok && dst[i] == (my_offset + i) / 64.0f;
  braid::Tensor bf16 = braid::Tensor::empty({my_count}, DType::kBF16);
  ckpt.read_range("wte.weight", my_offset, my_count, bf16.data_ptr(), DType::kBF16);
  ok = ok && bf16.to_vector() == braid::Tensor::from_vector({dst.begin(), dst.end()}, {my_count})
                                     .to(DType::kBF16)
                                     .to_vector();
  if (!ok) std::fprintf(stderr, "FAIL: rank %d read back wrong values\n", pg->rank());
  return ok ? 0 : 1;
}
