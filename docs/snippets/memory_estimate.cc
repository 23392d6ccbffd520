// docs/memory.md's example: the peak memory of a Llama-2-7B training step on 8 ranks at ZeRO-3,
// measured on the meta device (no memory). Exits 1 unless the estimate prints its table and is
// below the same step's at stage 0 (DDP: every rank holds everything).
#include <cstdio>
#include <string>

#include "braid/nn/llama.h"
#include "braid/nn/optim.h"
// [snippet]
#include "braid/shard/memory.h"
// [end snippet]

using namespace braid;

int main() {
  nn::LlamaConfig config;  // transformers' defaults: Llama-2-7B's shapes
  shard::ShardingOptions sharding_options{
      .stage = shard::ZeroStage::k3,
      .wrap = {.kind = shard::WrapKind::kTransformerBased,
               .transformer_cls_names_to_wrap = {"LlamaDecoderLayer"}}};
  sharding_options.precision.param_dtype = sharding_options.precision.reduce_dtype = DType::kBF16;
  // [snippet]
  shard::MemoryEstimate e = shard::estimate_memory(
      [&] { return std::make_shared<nn::Llama>(config); },  // built on meta for you
      sharding_options, /*world_size=*/8, {.batch = 1, .seq = 2048},
      {kernels::OptimAlgo::kAdamW, {.lr = 3e-4, .weight_decay = 0.1}});
  std::printf("%s", e.str().c_str());  // the table below
  // [end snippet]

  shard::ShardingOptions ddp = sharding_options;
  ddp.stage = shard::ZeroStage::k0;
  const int64_t ddp_peak =
      shard::estimate_memory([&] { return std::make_shared<nn::Llama>(config); }, ddp, 8,
                             {.batch = 1, .seq = 2048})
          .peak_bytes;
  const bool ok =
      e.str().rfind("peak per rank: ", 0) == 0 && e.peak_bytes > 0 && e.peak_bytes < ddp_peak;
  if (!ok)
    std::fprintf(stderr, "FAIL: ZeRO-3's estimate (%lld) is not below DDP's (%lld)\n",
                 static_cast<long long>(e.peak_bytes), static_cast<long long>(ddp_peak));
  return ok ? 0 : 1;
}
