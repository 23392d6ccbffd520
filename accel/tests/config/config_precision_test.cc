// The one precision policy (docs/config.md, "Precision"): a table over distributed type x
// mixed_precision x the FSDP plugin's explicit mixed_precision_policy, checking the resolved
// policy field by field, that the sharding plan carries it whole into ShardingOptions::precision,
// and what the Accelerator built on it does: its autocast dtype, whether its GradScaler is on,
// and keep_in_fp32_modules through param_dtype_for.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "braid/accel/accelerator.h"
#include "braid/accel/config.h"
#include "braid/amp/autocast.h"
#include "braid/amp/fp8.h"
#include "braid/comm/store.h"
#include "braid/nn/layers.h"
#include "config_test_util.h"

namespace braid::accel {
namespace {

using amp::PrecisionType;

std::shared_ptr<ProcessGroup> one_rank() {
  ProcessGroupOptions o;
  o.backend = "shm";
  o.store = std::make_shared<InMemoryStore>();
  o.rank = 0;
  o.size = 1;
  return ProcessGroup::create(o);
}

struct Layout {
  std::string name;
  DistributedType type;
  std::optional<FsdpShardingStrategy> strategy;  // FSDP only
};

std::vector<Layout> layouts() {
  std::vector<Layout> out = {{"NO", DistributedType::kNo, {}},
                             {"MULTI_CPU", DistributedType::kMultiCpu, {}},
                             {"DEEPSPEED", DistributedType::kDeepSpeed, {}}};
  for (auto s : {FsdpShardingStrategy::kFullShard, FsdpShardingStrategy::kShardGradOp,
                 FsdpShardingStrategy::kNoShard, FsdpShardingStrategy::kHybridShard,
                 FsdpShardingStrategy::kHybridShardZero2}) {
    out.push_back(
        {"FSDP " + std::string(fsdp_sharding_strategy_name(s)), DistributedType::kFsdp, s});
  }
  return out;
}

// The explicit plugin policy of the table: bf16 parameters, f32 reductions and buffers.
const FsdpMixedPrecisionPolicy kExplicit{DType::kBF16, DType::kF32, DType::kF32};

DType low_dtype(PrecisionType t) {
  switch (t) {
    case PrecisionType::kFp16:
      return DType::kF16;
    case PrecisionType::kBf16:
    case PrecisionType::kFp8:
      return DType::kBF16;
    default:
      return DType::kF32;
  }
}

// What the table expects, written out rather than derived from PrecisionPolicy::from.
amp::PrecisionPolicy expected(const Layout& l, PrecisionType mp, bool explicit_policy) {
  const DType low = low_dtype(mp);
  amp::PrecisionPolicy p;
  p.type = mp;
  p.compute_dtype = low;  // autocast follows mixed_precision under every layout
  p.master_dtype = p.state_dtype = DType::kF32;
  p.keep_in_fp32_modules = {"ln_f"};
  if (l.type == DistributedType::kFsdp && explicit_policy) {
    p.param_dtype = kExplicit.param_dtype;
    p.reduce_dtype = kExplicit.reduce_dtype;
    p.buffer_dtype = kExplicit.buffer_dtype;
  } else if (l.type == DistributedType::kFsdp || l.type == DistributedType::kDeepSpeed) {
    p.param_dtype = p.reduce_dtype = p.buffer_dtype = low;
  } else {
    // DDP: autocast over f32 parameters; the plugin (if any) is ignored.
    p.param_dtype = p.reduce_dtype = p.buffer_dtype = DType::kF32;
  }
  return p;
}

AcceleratorConfig config_for(const Layout& l, PrecisionType mp, bool explicit_policy) {
  AcceleratorConfig c;
  c.distributed_type = l.type;
  c.mixed_precision = mp;
  c.keep_in_fp32_modules = {"ln_f"};
  if (l.strategy || explicit_policy) {
    FullyShardedDataParallelPlugin f;
    if (l.strategy) f.sharding_strategy = *l.strategy;
    if (explicit_policy) f.mixed_precision_policy = kExplicit;
    c.fsdp_plugin = f;
  }
  return c;
}

std::string describe(const amp::PrecisionPolicy& p) {
  std::string s = std::string(amp::precision_type_name(p.type)) + " param " +
                  std::string(dtype_name(p.param_dtype)) + " compute " +
                  std::string(dtype_name(p.compute_dtype)) + " reduce " +
                  std::string(dtype_name(p.reduce_dtype)) + " buffer " +
                  std::string(dtype_name(p.buffer_dtype)) + " master " +
                  std::string(dtype_name(p.master_dtype)) + " state " +
                  std::string(dtype_name(p.state_dtype)) + " keep [";
  for (const auto& m : p.keep_in_fp32_modules) s += m + " ";
  return s + "]";
}

TEST(PrecisionPolicyTable, ResolvedOnceAndCarriedEverywhere) {
  int rows = 0;
  for (const Layout& l : layouts()) {
    for (PrecisionType mp :
         {PrecisionType::kNo, PrecisionType::kFp16, PrecisionType::kBf16, PrecisionType::kFp8}) {
      for (bool explicit_policy : {false, true}) {
        SCOPED_TRACE(l.name + ", mixed_precision " + std::string(amp::precision_type_name(mp)) +
                     (explicit_policy ? ", explicit plugin policy" : ", no plugin policy"));
        ++rows;
        const AcceleratorConfig c = config_for(l, mp, explicit_policy);
        const amp::PrecisionPolicy want = expected(l, mp, explicit_policy);

        // The resolution, field by field (describe() shows the whole policy on a mismatch).
        const amp::PrecisionPolicy got = precision_policy(c);
        EXPECT_EQ(got, want) << "got " << describe(got) << "\nwant " << describe(want);

        // The sharding plan carries it whole.
        const ShardingPlan plan = sharding_plan(c);
        EXPECT_EQ(plan.options.precision, want) << describe(plan.options.precision);
        const bool warned =
            std::any_of(plan.warnings.begin(), plan.warnings.end(),
                        [](const std::string& w) { return w.find("fsdp_config is ignored") == 0; });
        EXPECT_EQ(warned, c.fsdp_plugin.has_value() && l.type != DistributedType::kFsdp);

        // The Accelerator reads the same policy: autocast, GradScaler, param_dtype_for.
        Accelerator acc(c, one_rank());
        EXPECT_EQ(acc.precision(), want);
        {
          auto scope = acc.autocast();
          EXPECT_EQ(amp::autocast_enabled(), mp != PrecisionType::kNo);
          EXPECT_EQ(amp::autocast_low_dtype(), low_dtype(mp));
          EXPECT_EQ(amp::fp8_training() != nullptr, mp == PrecisionType::kFp8);
        }
        EXPECT_FALSE(amp::autocast_enabled());
        const bool scaled = mp == PrecisionType::kFp16;
        EXPECT_EQ(acc.scaler() != nullptr && acc.scaler()->is_enabled(), scaled);
        EXPECT_EQ(amp::GradScaler::for_policy(acc.precision()).is_enabled(), scaled);
        const bool narrow = dtype_size(want.param_dtype) < 4;
        EXPECT_EQ(acc.precision().param_dtype_for("transformer.ln_f.weight"),
                  narrow ? DType::kF32 : want.param_dtype);
        EXPECT_EQ(acc.precision().param_dtype_for("transformer.h.0.mlp.c_fc.weight"),
                  want.param_dtype);
      }
    }
  }
  EXPECT_EQ(rows, 8 * 4 * 2);
}

// The explicit plugin policy's buffer_dtype: braid does not cast buffers, so anything but f32
// is refused by the resolution itself (not only by sharding_plan).
TEST(PrecisionPolicyTable, ExplicitBufferDtypeMustBeF32) {
  AcceleratorConfig c =
      config_for({"FSDP", DistributedType::kFsdp, FsdpShardingStrategy::kFullShard},
                 PrecisionType::kBf16, true);
  c.fsdp_plugin->mixed_precision_policy->buffer_dtype = DType::kBF16;
  const Error e = testing::error_of([&] { precision_policy(c); });
  EXPECT_EQ(e.kind(), ErrorKind::kNotSupported);
  EXPECT_NE(e.message().find("buffer_dtype bf16"), std::string::npos) << e.message();
}

// prepare_optimizer reads the policy's master dtype: an optimizer without masters over 16-bit
// parameters is refused, one with masters (or over f32 parameters) is fine.
TEST(PrecisionPolicyTable, PrepareOptimizerChecksMasterWeights) {
  AcceleratorConfig c;
  c.mixed_precision = PrecisionType::kBf16;
  Generator gen(1);
  nn::Linear lin(4, 2, nn::Bias::kYes, nn::WeightLayout::kOutIn, DType::kBF16, &gen);
  {
    Accelerator acc(c, one_rank());
    nn::SGD none(lin.parameters(), {.lr = 0.1}, nn::MasterWeights::kNone);
    const Error e = testing::error_of([&] { acc.prepare_optimizer(none); });
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(e.message().find("parameter 0 is bf16"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("MasterWeights::kAuto"), std::string::npos) << e.message();
  }
  {
    Accelerator acc(c, one_rank());
    nn::SGD with_masters(lin.parameters(), {.lr = 0.1});
    EXPECT_NO_THROW(acc.prepare_optimizer(with_masters));
  }
}

}  // namespace
}  // namespace braid::accel
