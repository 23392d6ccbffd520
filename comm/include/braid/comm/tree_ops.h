// SPDX-License-Identifier: Apache-2.0
// Collectives over Trees: Accelerate's data-operation utilities (the seed page: gather,
// gather_object, broadcast, reduce, pad_across_processes, wait_for_everyone, concatenate) with
// the ProcessGroup passed explicitly. broadcast_object_list lives in object.h.
//
//   Tree batch = Tree::map({{"logits", logits}, {"labels", labels}});
//   Tree padded = pad_across_processes(*pg, batch, /*dim=*/0);   // same length everywhere
//   Tree all = gather(*pg, padded);                               // ranks stacked on dim 0
//   Tree loss = reduce(*pg, Tree(local_loss), "mean");
//
// Each function walks the tree depth first and runs one or more collectives per tensor, so
// every member must pass trees of the same structure (BRAID_DEBUG_MODE=1 reports a mismatch
// with each rank's shapes). A non-tensor leaf where a tensor is needed throws
// kInvalidArgument. Tensors must be on a device the group's backend serves.
#pragma once

#include <string_view>

#include "braid/comm/object.h"
#include "braid/comm/process_group.h"
#include "braid/tensor/tree.h"

namespace braid {

// Every tensor all-gathered and concatenated along dimension 0 in rank order (a 0-d tensor
// becomes a [size()] tensor). Shapes must match across ranks; pad_across_processes first
// when dimension 0 differs, or use concatenate() below.
Tree gather(ProcessGroup& pg, const Tree& data);

// Every rank's object, on every rank. Lists are flattened in rank order (Accelerate's
// gather_object: [x for y in per_rank for x in y]); any other object becomes one element.
// (object.h's three-argument gather_object(pg, object, root) is torch's: root only, unflattened.)
Tree gather_object(ProcessGroup& pg, const Tree& object);

// Every tensor overwritten, in place, by rank `from_process`'s (shapes must match); the
// returned tree holds the same tensors. Non-contiguous tensors are staged and copied back.
Tree broadcast(ProcessGroup& pg, const Tree& data, int from_process = 0);

// Every tensor reduced across ranks into a new tensor, then multiplied by `scale` when it is
// not 1: "sum", "mean" (ReduceOp::kAvg), "max", or "none" (no communication: a copy of the
// local tensor). Other names throw kInvalidArgument listing these.
Tree reduce(ProcessGroup& pg, const Tree& data, std::string_view reduction = "mean",
            double scale = 1.0);

// Every tensor padded along `dim` (negative counts from the end) to the largest size any rank
// has there, with `pad_index`, at the end or, with pad_first, at the start. Tensors with fewer
// than dim + 1 dimensions are returned as they are; ranks whose tensors differ in their
// number of dimensions throw kInvalidArgument naming each rank's.
Tree pad_across_processes(ProcessGroup& pg, const Tree& data, int dim = 0, double pad_index = 0,
                          bool pad_first = false);

// Blocks until every member reached this point (a barrier).
void wait_for_everyone(ProcessGroup& pg);

// Every tensor concatenated along `dim` across ranks in rank order; sizes along `dim` may
// differ between ranks, every other dimension must match (kInvalidArgument naming the ranks
// otherwise). A 0-d tensor counts as [1]. The local form, for a list of trees, is tree.h's
// concatenate(std::vector<Tree>, dim).
Tree concatenate(ProcessGroup& pg, const Tree& data, int dim = 0);

}  // namespace braid
