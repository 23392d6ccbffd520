// SPDX-License-Identifier: Apache-2.0
// Object collectives: Trees (braid/tensor/tree.h) sent whole between ranks, as
// torch.distributed's broadcast_object_list / gather_object / all_gather_object, with a small
// documented binary format instead of pickle (docs/comm.md, "Object serialization").
//
//   std::vector<Tree> config = {Tree::map({{"lr", 0.1}, {"steps", 100}})};
//   broadcast_object_list(*pg, config, /*root=*/0);      // every rank now holds rank 0's list
//   std::vector<Tree> all = all_gather_object(*pg, Tree(my_metric));  // all[r]: rank r's
//
// Each call is a few collectives on the group (sizes first, then the padded bytes as u8
// tensors), so every member must make the same calls in the same order, like any collective.
// Tensors travel as host bytes and arrive as contiguous cpu tensors.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "braid/comm/process_group.h"
#include "braid/tensor/tree.h"

namespace braid {

// Format version written by serialize_tree; deserialize_tree reads this version only.
inline constexpr uint8_t kTreeFormatVersion = 1;

// The binary form of a Tree (docs/comm.md, "Object serialization"). Tensors on other devices
// are copied to the host; a meta tensor (no data) throws kInvalidArgument.
std::vector<uint8_t> serialize_tree(const Tree& tree);
// The inverse. A buffer that is not a well-formed version-1 Tree (bad magic, unknown version
// or tag, truncated, trailing bytes, unknown dtype, sizes that disagree, nesting deeper than
// 512) throws kCorruptData naming the offset and what was expected there.
Tree deserialize_tree(std::span<const uint8_t> bytes);

// Replaces `objects` on every rank with the root's list (the lists may differ in length
// before the call).
void broadcast_object_list(ProcessGroup& pg, std::vector<Tree>& objects, int root = 0);
// On the root: one Tree per rank, in rank order. Elsewhere: an empty vector. The root has no
// default: the two-argument gather_object(pg, object) is Accelerate's (tree_ops.h), which
// delivers to every rank and flattens lists.
std::vector<Tree> gather_object(ProcessGroup& pg, const Tree& object, int root);
// On every rank: one Tree per rank, in rank order.
std::vector<Tree> all_gather_object(ProcessGroup& pg, const Tree& object);
// On a group of the 'meta' backend (one process standing for every rank, each running the same
// program) the three move nothing: every rank's object is taken to be this rank's.

}  // namespace braid
