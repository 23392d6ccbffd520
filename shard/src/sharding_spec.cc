// shard::resolve (fsdp.h): ShardingOptions over a world size -> ShardingSpec, the one place the
// options are validated and the ZeRO stage is read.
#include <string>

#include "braid/core/error.h"
#include "braid/shard/fsdp.h"
#include "fsdp_impl.h"

namespace braid::shard {

std::string_view ShardingSpec::strategy_name() const {
  if (!shard_optimizer_state) return "NO_SHARD";
  if (hybrid()) return shard_parameters ? "HYBRID_SHARD" : "_HYBRID_SHARD_ZERO2";
  return shard_parameters && reshard_after_forward ? "FULL_SHARD" : "SHARD_GRAD_OP";
}

std::string ShardingSpec::str() const {
  std::string out = "ZeRO-" + std::to_string(static_cast<int>(stage)) + " (" +
                    std::string(strategy_name()) + ") over dp_replicate " +
                    std::to_string(dp_replicate) + " x dp_shard " + std::to_string(dp_shard);
  out += ordered_reduction ? ", ordered reduction" : ", unordered reduction";
  if (overlap) out += ", communication thread";
  if (forward_prefetch || backward_prefetch) {
    out +=
        std::string(", prefetch ") + (forward_prefetch && backward_prefetch ? "forward and backward"
                                      : forward_prefetch                    ? "forward"
                                                                            : "backward");
  }
  if (offload_param) out += ", master shards offloaded to nvme";
  return out;
}

ShardingSpec resolve(const ShardingOptions& o, int world_size) {
  BRAID_CHECK(world_size >= 1, kInvalidArgument,
              "ShardingOptions: the world size must be >= 1, got ", world_size);
  ShardingSpec s;
  s.stage = o.stage;
  const int stage = static_cast<int>(o.stage);
  BRAID_CHECK(stage >= 0 && stage <= 3, kInvalidArgument, "ShardingOptions::stage ", stage,
              " is not a ZeRO stage (0, 1, 2 or 3)");
  s.shard_optimizer_state = stage >= 1;
  s.shard_gradients = stage >= 1;
  s.shard_parameters = stage == 3;
  s.reshard_after_forward = s.shard_parameters && o.reshard_after_forward;

  const int64_t W = world_size;
  BRAID_CHECK(o.shard_group_size >= 0 && (o.shard_group_size == 0 || W % o.shard_group_size == 0),
              kInvalidArgument, "ShardingOptions::shard_group_size ", o.shard_group_size,
              " must divide the world size ", W, " (0: shard over every rank)");
  const int64_t S = o.shard_group_size == 0 ? W : o.shard_group_size;
  BRAID_CHECK(S == W || s.shard_optimizer_state, kInvalidArgument,
              "ShardingOptions::shard_group_size (HSDP) needs stage 1-3; stage 0 replicates "
              "everything on every rank");
  if (s.shard_optimizer_state) {
    s.dp_replicate = W / S;
    s.dp_shard = S;
  } else {
    s.dp_replicate = W;
    s.dp_shard = 1;
  }
  BRAID_CHECK(o.deterministic || !s.shard_optimizer_state || s.hybrid(), kInvalidArgument,
              "ShardingOptions::deterministic = false applies to stage 0 and to HSDP "
              "(shard_group_size) only; stages 1-3 otherwise always use the ordered reduction");
  s.ordered_reduction = o.deterministic;

  s.offload_param = o.offload_param.device == nn::OffloadDevice::kNvme;
  BRAID_CHECK(!s.offload_param || s.shard_parameters, kInvalidArgument,
              "ShardingOptions: offload_param_device = nvme applies to ZeRO stage 3 only (as in "
              "DeepSpeed); use the optimizer's offload (offload_optimizer_device) at stages 1-2");
  BRAID_CHECK(!s.offload_param || !o.offload_param.nvme_path.empty(), kInvalidArgument,
              "ShardingOptions: offload_param_device = nvme needs offload_param_nvme_path");
  check_sharding_precision(o.precision);

  s.overlap = resolve_overlap(o);
  s.forward_prefetch = s.overlap && s.shard_parameters && o.forward_prefetch;
  s.backward_prefetch = s.overlap && s.shard_parameters && o.backward_prefetch;
  return s;
}

}  // namespace braid::shard
