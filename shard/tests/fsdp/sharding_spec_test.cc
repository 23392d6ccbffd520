// shard::resolve: ShardingOptions over a world size -> ShardingSpec, as a table over the ZeRO
// stages, HSDP, the reduction, the communication thread and offload, and every refusal.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "braid/core/error.h"
#include "braid/shard/fsdp.h"

namespace braid::shard {
namespace {

using ::testing::HasSubstr;

TEST(ShardingSpec, ResolvesEveryStageAndLayout) {
  const struct {
    ZeroStage stage;
    bool reshard;
    int64_t group;
    int world;
    // expected
    bool opt, grads, params, resharded;
    int64_t replicate, shard;
    const char* strategy;
  } rows[] = {
      {ZeroStage::k0, true, 0, 4, false, false, false, false, 4, 1, "NO_SHARD"},
      {ZeroStage::k1, true, 0, 4, true, true, false, false, 1, 4, "SHARD_GRAD_OP"},
      {ZeroStage::k2, true, 0, 4, true, true, false, false, 1, 4, "SHARD_GRAD_OP"},
      {ZeroStage::k3, true, 0, 4, true, true, true, true, 1, 4, "FULL_SHARD"},
      {ZeroStage::k3, false, 0, 4, true, true, true, false, 1, 4, "SHARD_GRAD_OP"},
      {ZeroStage::k3, true, 2, 8, true, true, true, true, 4, 2, "HYBRID_SHARD"},
      {ZeroStage::k2, true, 4, 8, true, true, false, false, 2, 4, "_HYBRID_SHARD_ZERO2"},
      {ZeroStage::k3, true, 8, 8, true, true, true, true, 1, 8, "FULL_SHARD"},  // S = W: no HSDP
      {ZeroStage::k0, false, 0, 1, false, false, false, false, 1, 1, "NO_SHARD"},
  };
  for (const auto& r : rows) {
    ShardingOptions o{.stage = r.stage};
    o.reshard_after_forward = r.reshard;
    o.shard_group_size = r.group;
    const ShardingSpec s = resolve(o, r.world);
    const std::string what = s.str();
    EXPECT_EQ(s.stage, r.stage) << what;
    EXPECT_EQ(s.shard_optimizer_state, r.opt) << what;
    EXPECT_EQ(s.shard_gradients, r.grads) << what;
    EXPECT_EQ(s.shard_parameters, r.params) << what;
    EXPECT_EQ(s.reshard_after_forward, r.resharded) << what;
    EXPECT_EQ(s.dp_replicate, r.replicate) << what;
    EXPECT_EQ(s.dp_shard, r.shard) << what;
    EXPECT_EQ(s.world(), r.world) << what;
    EXPECT_EQ(s.hybrid(), r.opt && r.replicate > 1) << what;
    EXPECT_EQ(s.strategy_name(), r.strategy) << what;
    EXPECT_THAT(what, HasSubstr(r.strategy));
  }
}

TEST(ShardingSpec, ReductionThreadAndPrefetch) {
  ShardingOptions o{.stage = ZeroStage::k3};
  o.overlap = true;
  o.backward_prefetch = false;
  ShardingSpec s = resolve(o, 2);
  EXPECT_TRUE(s.overlap);
  EXPECT_TRUE(s.forward_prefetch);
  EXPECT_FALSE(s.backward_prefetch);
  EXPECT_TRUE(s.ordered_reduction);
  EXPECT_THAT(s.str(), HasSubstr("communication thread, prefetch forward"));
  o.overlap = false;  // prefetching needs the thread
  s = resolve(o, 2);
  EXPECT_FALSE(s.forward_prefetch);
  o.stage = ZeroStage::k1;  // nothing to prefetch below stage 3
  o.overlap = true;
  EXPECT_FALSE(resolve(o, 2).forward_prefetch);
  ShardingOptions ddp{.stage = ZeroStage::k0};
  ddp.deterministic = false;
  EXPECT_FALSE(resolve(ddp, 4).ordered_reduction);
  ShardingOptions hsdp{.stage = ZeroStage::k3};
  hsdp.shard_group_size = 2;
  hsdp.deterministic = false;
  EXPECT_FALSE(resolve(hsdp, 4).ordered_reduction);
  ShardingOptions nvme{.stage = ZeroStage::k3};
  nvme.offload_param = {.device = nn::OffloadDevice::kNvme, .nvme_path = "/tmp/x"};
  EXPECT_TRUE(resolve(nvme, 1).offload_param);
  EXPECT_THAT(resolve(nvme, 1).str(), HasSubstr("offloaded"));
}

TEST(ShardingSpec, RefusalsNameTheOption) {
  const auto expect_error = [](const ShardingOptions& o, int world, const char* text) {
    try {
      resolve(o, world);
      ADD_FAILURE() << "no error; expected: " << text;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      EXPECT_THAT(e.what(), HasSubstr(text));
    }
  };
  ShardingOptions o{.stage = ZeroStage::k3};
  expect_error(o, 0, "world size must be >= 1");
  o.shard_group_size = 3;
  expect_error(o, 4, "shard_group_size 3 must divide the world size 4");
  ShardingOptions ddp{.stage = ZeroStage::k0};
  ddp.shard_group_size = 2;
  expect_error(ddp, 4, "needs stage 1-3");
  ShardingOptions nd{.stage = ZeroStage::k2};
  nd.deterministic = false;
  expect_error(nd, 4, "deterministic = false applies to stage 0 and to HSDP");
  ShardingOptions nvme{.stage = ZeroStage::k2};
  nvme.offload_param = {.device = nn::OffloadDevice::kNvme, .nvme_path = "/tmp/x"};
  expect_error(nvme, 2, "applies to ZeRO stage 3 only");
  nvme.stage = ZeroStage::k3;
  nvme.offload_param.nvme_path.clear();
  expect_error(nvme, 2, "needs offload_param_nvme_path");
  ShardingOptions bad{.stage = ZeroStage::k1};
  bad.precision.param_dtype = DType::kI32;
  expect_error(bad, 2, "precision.param_dtype is i32; expected f32, bf16 or f16");
  ShardingOptions stage{.stage = static_cast<ZeroStage>(7)};
  expect_error(stage, 2, "is not a ZeRO stage");
}

}  // namespace
}  // namespace braid::shard
