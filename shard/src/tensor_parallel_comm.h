// The collectives of tensor parallelism on whole tensors (Megatron's mappings.py): each takes a
// tensor and returns a new contiguous one, and each has its dual in the other pass
// (all_reduce <-> identity, all_gather <-> reduce_scatter / split). A group of one rank
// returns the tensor itself (split: a view). Internal to shard/.
#pragma once

#include <vector>

#include "braid/comm/process_group.h"
#include "braid/shard/tensor_parallel.h"
#include "braid/tensor/tensor.h"

namespace braid::shard::tp_detail {

// The sum over the group's ranks of x (same shape on every rank).
Tensor all_reduce_sum(const Tensor& x, ProcessGroup& g);
// Every rank's x (same shape) joined along `dim` in rank order.
Tensor all_gather_dim(const Tensor& x, int dim, ProcessGroup& g);
// The sum over the ranks of x, then this rank's part of dimension `dim` (x.size(dim) must be a
// multiple of the group size; kInvalidArgument naming `what` otherwise).
Tensor reduce_scatter_dim(const Tensor& x, int dim, ProcessGroup& g, const char* what);
// This rank's part of dimension `dim` (no communication), contiguous.
Tensor split_dim(const Tensor& x, int dim, ProcessGroup& g, const char* what);

// Along `dim`, local indices of each segment get their global indices' values
// (global_to_local) or the reverse; the other dimensions must agree. Indices in no segment
// are not touched.
void global_to_local(const Tensor& global, Tensor& local, int dim,
                     const std::vector<SliceSegment>& segments);
void local_to_global(const Tensor& local, Tensor& global, int dim,
                     const std::vector<SliceSegment>& segments);

// The layer's dimension `dim` counted from the end when negative.
int wrap(int dim, const Tensor& x);

}  // namespace braid::shard::tp_detail
