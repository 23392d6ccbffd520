// ShardedModel's reading of its precision policy (ShardingOptions::precision; docs/sharding.md,
// "Precision"): the policy's checks, done once at construction, and the dtypes each unit is
// gathered, held and reduced in, with keep_in_fp32_modules applied per unit.
#include <string>

#include "braid/core/error.h"
#include "fsdp_impl.h"

namespace braid::shard {
namespace {

bool is_sharding_dtype(DType d) {
  return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16;
}

}  // namespace

void check_sharding_precision(const amp::PrecisionPolicy& p) {
  BRAID_CHECK(is_sharding_dtype(p.param_dtype), kInvalidArgument,
              "ShardingOptions: precision.param_dtype is ", dtype_name(p.param_dtype),
              "; expected f32, bf16 or f16");
  BRAID_CHECK(is_sharding_dtype(p.reduce_dtype), kInvalidArgument,
              "ShardingOptions: precision.reduce_dtype is ", dtype_name(p.reduce_dtype),
              "; expected f32, bf16 or f16");
  BRAID_CHECK(p.master_dtype == DType::kF32, kInvalidArgument,
              "ShardingOptions: precision.master_dtype is ", dtype_name(p.master_dtype),
              "; expected f32 (the optimizer steps f32 master shards)");
  BRAID_CHECK(p.state_dtype == DType::kF32, kInvalidArgument,
              "ShardingOptions: precision.state_dtype is ", dtype_name(p.state_dtype),
              "; expected f32 (braid's optimizers keep their state in f32)");
}

// Stages 1-3. A unit is gathered and reduced whole, so its parameters share one dtype: the
// policy's, or f32 for a unit whose every parameter is kept (FSDP gives such a module an f32
// MixedPrecision of its own). A unit mixing both is refused: its flat buffer cannot hold two
// dtypes, and silently keeping (or not keeping) half of it would surprise either way.
UnitDtypes unit_dtypes(const Unit& unit, const amp::PrecisionPolicy& p) {
  const UnitDtypes policy{p.param_dtype, p.reduce_dtype};
  if (p.keep_in_fp32_modules.empty() ||
      (p.param_dtype == DType::kF32 && p.reduce_dtype == DType::kF32)) {
    return policy;
  }
  const UnitParam* kept = nullptr;
  const UnitParam* other = nullptr;
  for (const UnitParam& up : unit.params) {
    // keep_in_fp32 itself, not keeps_in_fp32: with f32 parameters but a 16-bit reduce_dtype a
    // kept module still reduces in f32.
    const UnitParam*& slot = amp::keep_in_fp32(up.name, p.keep_in_fp32_modules) ? kept : other;
    if (slot == nullptr) slot = &up;  // the first of each, in the unit's order
  }
  if (kept == nullptr) return policy;
  BRAID_CHECK(other == nullptr, kInvalidArgument, "ShardedModel: unit '",
              unit.name.empty() ? std::string("<root>") : unit.name, "' holds parameter '",
              kept->name, "' of precision.keep_in_fp32_modules and parameter '", other->name,
              "' that is not kept; a unit is gathered and reduced in one dtype. Wrap the kept "
              "module as its own unit (e.g. add its type to "
              "WrapPolicy::transformer_cls_names_to_wrap), or leave it out of "
              "keep_in_fp32_modules");
  return {DType::kF32, DType::kF32};
}

}  // namespace braid::shard
