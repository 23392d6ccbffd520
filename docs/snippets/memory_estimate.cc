// docs/memory.md's example: the predicted peak memory of a GPT-2 small step on 8 ranks at
// ZeRO-3, built on the meta device (no memory). Exits 1 unless the estimate prints its table and
// is below the same step's at stage 0 (DDP: every rank holds everything).
#include <cstdio>
#include <string>

#include "braid/nn/gpt.h"
#include "braid/nn/optim.h"
// [snippet]
#include "braid/shard/memory.h"
// [end snippet]

using namespace braid;

int main() {
  nn::GPTConfig config;  // GPT-2 small: 124M parameters
  shard::WrapPolicy policy{.kind = shard::WrapKind::kTransformerBased,
                           .transformer_cls_names_to_wrap = {"GPT2Block"}};
  shard::ShardingOptions sharding_options{.stage = shard::ZeroStage::k3, .wrap = policy};
  nn::OptimizerOptions adamw_options{.lr = 3e-4, .weight_decay = 0.1};
  // [snippet]
  nn::InitEmptyWeights empty;  // sizes only: no memory
  auto gpt = std::make_shared<nn::GPT>(config);
  auto units = shard::unit_sizes(shard::make_units(*gpt, policy, /*world_size=*/8));
  shard::MemoryOptions mo = shard::MemoryOptions::from(
      sharding_options, /*world_size=*/8,
      shard::OptimizerMemory::of(kernels::OptimAlgo::kAdamW, adamw_options));
  shard::MemoryEstimate e =
      shard::estimate_gpt_memory(config, {.batch = 4, .seq = 1024}, units, mo);
  std::printf("%s", e.str().c_str());  // the table below
  // [end snippet]

  shard::MemoryOptions ddp = mo;
  ddp.stage = shard::ZeroStage::k0;
  const int64_t ddp_peak =
      shard::estimate_gpt_memory(config, {.batch = 4, .seq = 1024}, units, ddp).peak_bytes();
  const bool ok =
      e.str().rfind("peak per rank: ", 0) == 0 && e.peak_bytes() > 0 && e.peak_bytes() < ddp_peak;
  if (!ok)
    std::fprintf(stderr, "FAIL: ZeRO-3's estimate (%lld) is not below DDP's (%lld)\n",
                 static_cast<long long>(e.peak_bytes()), static_cast<long long>(ddp_peak));
  return ok ? 0 : 1;
}
