// SPDX-License-Identifier: Apache-2.0
// Sharding units (FSDP's wrapped modules): groups of parameters that are gathered, freed and
// reduced together, each laid out in one flat buffer that splits evenly over the ranks
// (docs/sharding.md, "Units").
//
//   WrapPolicy policy{.kind = WrapKind::kTransformerBased,
//                     .transformer_cls_names_to_wrap = {"GPT2Block"}};
//   std::vector<Unit> units = make_units(*gpt, policy, /*world_size=*/4);
//   ShardInfo mine = units[0].shard(rank);   // this rank's [offset, offset + count)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "braid/nn/module.h"

namespace braid::shard {

// A contiguous slice of a flat buffer: elements [offset, offset + count).
struct ShardInfo {
  int64_t offset = 0;
  int64_t count = 0;
  int64_t end() const { return offset + count; }
};

// The norm grid: flat buffers are padded to a multiple of kChunk x world_size, so a rank's
// shard is whole chunks and a chunk-by-chunk reduction (sharded gradient norms) does not
// depend on the world size.
inline constexpr int64_t kChunk = 64;
int64_t padded_numel(int64_t numel, int world_size);
// Rank r's equal part of a padded buffer (padded % world_size == 0, else kInvalidArgument).
ShardInfo shard_info(int64_t padded, int world_size, int rank);

// The seed's FullyShardedDataParallelPlugin auto_wrap_policy values.
enum class WrapKind : uint8_t {
  kTransformerBased,  // "transformer_based_wrap": every module of a listed type name is a unit
  kSizeBased,         // "size_based_wrap": a Layer subtree with >= min_num_params unwrapped
                      // elements (containers such as ModuleList are never wrapped)
  kNoWrap             // "no_wrap": one unit, the whole model
};
WrapKind parse_wrap_kind(std::string_view name);  // kInvalidArgument lists the names

struct WrapPolicy {
  WrapKind kind = WrapKind::kNoWrap;
  std::vector<std::string> transformer_cls_names_to_wrap{};  // Module::type_name() values
  int64_t min_num_params = 100'000'000;                      // Accelerate's default (1e8)
  // Dotted module paths whose parameters no unit takes: they stay whole on every rank and
  // are neither gathered nor reduced (FSDP's ignored_modules); the caller owns them.
  std::vector<std::string> ignored_modules{};
};

struct UnitParam {
  std::string name;  // full dotted name in the model ("transformer.h.0.ln_1.weight")
  nn::Parameter param;
  Shape shape;
  int64_t offset = 0;  // first element in the unit's flat buffer
  int64_t numel = 0;
};

struct Unit {
  std::string name;            // the module's dotted path; "" for the root
  nn::Layer* layer = nullptr;  // whose hooks gather, free and reduce the unit
  std::vector<UnitParam> params;
  int64_t numel = 0;   // sum of the parameters' elements
  int64_t padded = 0;  // padded_numel(numel, world_size)
  ShardInfo shard(int rank, int world_size) const { return shard_info(padded, world_size, rank); }
};

// The units of `root`, inner units first in post-order (as FSDP's auto-wrap visits modules),
// the root unit last with every parameter no inner unit took. Every parameter handle is in
// exactly one unit: a parameter used under two units (tied weights) goes to the root unit,
// which stays gathered for the whole forward and backward. A module chosen as a unit must be
// a Layer (its forward / backward hooks drive the unit), and so must the root; otherwise
// kInvalidArgument naming it. Inner units without parameters are dropped. Parameters keep
// named_parameters() order inside a unit.
std::vector<Unit> make_units(nn::Module& root, const WrapPolicy& policy, int world_size);

}  // namespace braid::shard
