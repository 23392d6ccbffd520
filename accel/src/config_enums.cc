// parse_* / *_name for the enums of plugins.h: one name table per enum, the seed's spellings.
#include <cctype>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>

#include "braid/accel/plugins.h"
#include "braid/core/error.h"

namespace braid::accel {
namespace {

// A name table: an array of (value, name) pairs in the enum's order.
template <typename E, size_t N>
using NameTable = std::pair<E, std::string_view>[N];

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

template <typename E, size_t N>
std::string joined(const NameTable<E, N>& table) {
  std::string out;
  size_t i = 0;
  for (const auto& [value, name] : table) {
    if (i > 0) out += (i + 1 == N) ? " or " : ", ";
    out += name;
    ++i;
  }
  return out;
}

template <typename E, size_t N>
E parse_from(const NameTable<E, N>& table, std::string_view text, std::string_view what) {
  for (const auto& [value, name] : table) {
    if (iequals(text, name)) return value;
  }
  BRAID_FAIL(kInvalidArgument, what, " '", text, "' is not known; expected ", joined(table));
}

template <typename E, size_t N>
std::string_view name_from(const NameTable<E, N>& table, E value) {
  for (const auto& [v, name] : table) {
    if (v == value) return name;
  }
  return "?";
}

constexpr std::pair<DistributedType, std::string_view> kDistributedTypes[] = {
    {DistributedType::kNo, "NO"},
    {DistributedType::kMultiCpu, "MULTI_CPU"},
    {DistributedType::kMultiGpu, "MULTI_GPU"},
    {DistributedType::kMultiMlu, "MULTI_MLU"},
    {DistributedType::kMultiSdaa, "MULTI_SDAA"},
    {DistributedType::kMultiMusa, "MULTI_MUSA"},
    {DistributedType::kMultiNpu, "MULTI_NPU"},
    {DistributedType::kMultiXpu, "MULTI_XPU"},
    {DistributedType::kMultiHpu, "MULTI_HPU"},
    {DistributedType::kMultiNeuron, "MULTI_NEURON"},
    {DistributedType::kDeepSpeed, "DEEPSPEED"},
    {DistributedType::kFsdp, "FSDP"},
    {DistributedType::kXla, "XLA"},
    {DistributedType::kMegatronLm, "MEGATRON_LM"},
};

constexpr std::pair<ComputeEnvironment, std::string_view> kComputeEnvironments[] = {
    {ComputeEnvironment::kLocalMachine, "LOCAL_MACHINE"},
    {ComputeEnvironment::kAmazonSagemaker, "AMAZON_SAGEMAKER"},
};

constexpr std::pair<RNGType, std::string_view> kRngTypes[] = {
    {RNGType::kTorch, "torch"},
    {RNGType::kCuda, "cuda"},
    {RNGType::kMlu, "mlu"},
    {RNGType::kSdaa, "sdaa"},
    {RNGType::kMusa, "musa"},
    {RNGType::kNpu, "npu"},
    {RNGType::kXla, "xla"},
    {RNGType::kXpu, "xpu"},
    {RNGType::kHpu, "hpu"},
    {RNGType::kNeuron, "neuron"},
    {RNGType::kGenerator, "generator"},
};

constexpr std::pair<DynamoBackend, std::string_view> kDynamoBackends[] = {
    {DynamoBackend::kNo, "NO"},
    {DynamoBackend::kEager, "EAGER"},
    {DynamoBackend::kAotEager, "AOT_EAGER"},
    {DynamoBackend::kInductor, "INDUCTOR"},
    {DynamoBackend::kAotTsNvfuser, "AOT_TS_NVFUSER"},
    {DynamoBackend::kNvprimsNvfuser, "NVPRIMS_NVFUSER"},
    {DynamoBackend::kCudagraphs, "CUDAGRAPHS"},
    {DynamoBackend::kOfi, "OFI"},
    {DynamoBackend::kFx2trt, "FX2TRT"},
    {DynamoBackend::kOnnxrt, "ONNXRT"},
    {DynamoBackend::kTensorrt, "TENSORRT"},
    {DynamoBackend::kAotTorchxlaTraceOnce, "AOT_TORCHXLA_TRACE_ONCE"},
    {DynamoBackend::kTorchxlaTraceOnce, "TORCHXLA_TRACE_ONCE"},
    {DynamoBackend::kIpex, "IPEX"},
    {DynamoBackend::kTvm, "TVM"},
    {DynamoBackend::kHpuBackend, "HPU_BACKEND"},
    {DynamoBackend::kNeuron, "NEURON"},
};

constexpr std::pair<FsdpShardingStrategy, std::string_view> kShardingStrategies[] = {
    {FsdpShardingStrategy::kFullShard, "FULL_SHARD"},
    {FsdpShardingStrategy::kShardGradOp, "SHARD_GRAD_OP"},
    {FsdpShardingStrategy::kNoShard, "NO_SHARD"},
    {FsdpShardingStrategy::kHybridShard, "HYBRID_SHARD"},
    {FsdpShardingStrategy::kHybridShardZero2, "HYBRID_SHARD_ZERO2"},
};

constexpr std::pair<FsdpBackwardPrefetch, std::string_view> kBackwardPrefetch[] = {
    {FsdpBackwardPrefetch::kBackwardPre, "BACKWARD_PRE"},
    {FsdpBackwardPrefetch::kBackwardPost, "BACKWARD_POST"},
    {FsdpBackwardPrefetch::kNoPrefetch, "NO_PREFETCH"},
};

constexpr std::pair<FsdpStateDictType, std::string_view> kStateDictTypes[] = {
    {FsdpStateDictType::kFullStateDict, "FULL_STATE_DICT"},
    {FsdpStateDictType::kLocalStateDict, "LOCAL_STATE_DICT"},
    {FsdpStateDictType::kShardedStateDict, "SHARDED_STATE_DICT"},
};

constexpr std::pair<shard::WrapKind, std::string_view> kWrapPolicies[] = {
    {shard::WrapKind::kTransformerBased, "TRANSFORMER_BASED_WRAP"},
    {shard::WrapKind::kSizeBased, "SIZE_BASED_WRAP"},
    {shard::WrapKind::kNoWrap, "NO_WRAP"},
};

// torch's integer values of an enum ("1" -> the first entry), as old Accelerate files hold.
template <typename E, size_t N>
std::optional<E> from_digit(const NameTable<E, N>& table, std::string_view text) {
  if (text.size() != 1 || text[0] < '1' || text[0] > '9') return std::nullopt;
  size_t index = static_cast<size_t>(text[0] - '1');
  if (index >= N) return std::nullopt;
  return table[index].first;
}

}  // namespace

DistributedType parse_distributed_type(std::string_view name) {
  if (iequals(name, "TPU")) return DistributedType::kXla;  // Accelerate's deprecated alias
  return parse_from(kDistributedTypes, name, "distributed_type");
}
std::string_view distributed_type_name(DistributedType type) {
  return name_from(kDistributedTypes, type);
}

ComputeEnvironment parse_compute_environment(std::string_view name) {
  return parse_from(kComputeEnvironments, name, "compute_environment");
}
std::string_view compute_environment_name(ComputeEnvironment env) {
  return name_from(kComputeEnvironments, env);
}

RNGType parse_rng_type(std::string_view name) {
  return parse_from(kRngTypes, name, "rng_type");
}
std::string_view rng_type_name(RNGType type) {
  return name_from(kRngTypes, type);
}

DynamoBackend parse_dynamo_backend(std::string_view name) {
  return parse_from(kDynamoBackends, name, "dynamo_backend");
}
std::string_view dynamo_backend_name(DynamoBackend backend) {
  return name_from(kDynamoBackends, backend);
}

FsdpShardingStrategy parse_fsdp_sharding_strategy(std::string_view name) {
  if (auto v = from_digit(kShardingStrategies, name)) return *v;
  if (name.size() == 1 && std::isdigit(static_cast<unsigned char>(name[0]))) {
    BRAID_FAIL(kInvalidArgument, "sharding_strategy '", name, "' is not known; expected ",
               joined(kShardingStrategies), " (or torch's values 1-5)");
  }
  return parse_from(kShardingStrategies, name, "sharding_strategy");
}
std::string_view fsdp_sharding_strategy_name(FsdpShardingStrategy strategy) {
  return name_from(kShardingStrategies, strategy);
}

FsdpBackwardPrefetch parse_fsdp_backward_prefetch(std::string_view name) {
  return parse_from(kBackwardPrefetch, name, "backward_prefetch");
}
std::string_view fsdp_backward_prefetch_name(FsdpBackwardPrefetch prefetch) {
  return name_from(kBackwardPrefetch, prefetch);
}

FsdpStateDictType parse_fsdp_state_dict_type(std::string_view name) {
  if (auto v = from_digit(kStateDictTypes, name)) return *v;
  return parse_from(kStateDictTypes, name, "state_dict_type");
}
std::string_view fsdp_state_dict_type_name(FsdpStateDictType type) {
  return name_from(kStateDictTypes, type);
}

shard::WrapKind parse_fsdp_auto_wrap_policy(std::string_view name) {
  return parse_from(kWrapPolicies, name, "auto_wrap_policy");
}
std::string_view fsdp_auto_wrap_policy_name(shard::WrapKind kind) {
  return name_from(kWrapPolicies, kind);
}

}  // namespace braid::accel
