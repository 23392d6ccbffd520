// SPDX-License-Identifier: Apache-2.0
// DeviceMesh: the ranks of a group laid out as an N-d grid with named dimensions, one
// ProcessGroup per dimension, and DTensor-style placements (Shard / Replicate / Partial) that
// say how a global tensor lives on the grid (docs/device-mesh.md). Modelled on
// torch.distributed.device_mesh.DeviceMesh and torch.distributed.tensor.
//
//   auto world = braid::ProcessGroup::create({});                  // 4 ranks
//   braid::shard::DeviceMesh mesh(world, {2, 2}, {"dp_replicate", "dp_shard"});
//   auto shard_pg = mesh.group("dp_shard");                         // 2 ranks, rank = coordinate
//   auto dp_pg = mesh.flatten({"dp_replicate", "dp_shard"}, "dp");  // collective: every rank
//   using braid::shard::Shard;  using braid::shard::Replicate;
//   Tensor local = distribute_tensor(weight, mesh, {Replicate{}, Shard{0}});
//   Tensor whole = full_tensor(local, mesh, {Replicate{}, Shard{0}}, weight.shape());
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "braid/comm/process_group.h"
#include "braid/shard/units.h"
#include "braid/tensor/tensor.h"

namespace braid::shard {

class DeviceMesh {
 public:
  // Collective over every rank of `world` (each passes the same shape and names; a mismatch
  // is kInvalidArgument on every rank, listing each rank's mesh). Ranks of `world` are laid
  // out row-major over `shape`: rank r has the coordinate whose row-major index is r. The
  // product of `shape` must equal world->size(), names must be unique and non-empty, one per
  // dimension. Creates this rank's group for every dimension (new_group on `world`, called
  // for every subgroup of every dimension in the same order on every rank); a dimension whose
  // group is the whole of `world` (a 1-d mesh) uses `world` itself.
  DeviceMesh(std::shared_ptr<ProcessGroup> world, std::vector<int64_t> shape,
             std::vector<std::string> names);

  int ndim() const { return static_cast<int>(shape_.size()); }
  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<std::string>& names() const { return names_; }
  // Number of ranks (the product of shape()).
  int64_t numel() const;

  // The index of a mesh dimension; kInvalidArgument naming `name` and the known dimensions.
  int dim_index(const std::string& name) const;
  // Size, coordinate and group of a dimension or of a flattened name (flatten()). A flattened
  // name's size is the product of its dimensions' sizes, its coordinate their row-major index.
  int64_t size(const std::string& dim) const;
  int64_t local_rank(const std::string& dim) const;
  // The ranks that differ from this one only along `dim` (for a flattened name: only along
  // its dimensions); the group's rank() is local_rank(dim).
  std::shared_ptr<ProcessGroup> group(const std::string& dim) const;
  // One dimension: group(dim). Several: the group an earlier flatten() of exactly these
  // dimensions created (not collective; kInvalidArgument when there is none).
  std::shared_ptr<ProcessGroup> group(const std::vector<std::string>& dims) const;
  // Collective over `world` (every rank, same arguments, same order of calls), as torch's
  // DeviceMesh._flatten: creates the group of the ranks that differ only along `dims` (mesh
  // dimensions, listed in mesh order, at least one), ranked row-major over them, and stores
  // it under `name` ("" joins the names with "_"; it must not name a dimension or an earlier
  // flattened group). Returns the group. One dimension under a new name is an alias of that
  // dimension's group (no new group).
  std::shared_ptr<ProcessGroup> flatten(const std::vector<std::string>& dims,
                                        const std::string& name = "");

  std::shared_ptr<ProcessGroup> world() const { return world_; }
  // This rank's coordinate (its rank in world(), laid out row-major).
  const std::vector<int64_t>& coordinate() const { return coordinate_; }
  // The coordinate of rank `rank` of world() (kOutOfRange outside [0, numel())).
  std::vector<int64_t> coordinate_of(int rank) const;
  // The rank in world() at `coordinate` (kInvalidArgument for the wrong length, kOutOfRange
  // for a component outside its dimension).
  int rank_at(const std::vector<int64_t>& coordinate) const;

  // "DeviceMesh(dp_replicate=2, dp_shard=2)".
  std::string str() const;

 private:
  struct Flat {
    std::string name;
    std::vector<int> dims;  // mesh dimensions, increasing
    std::shared_ptr<ProcessGroup> group;
  };
  // Every rank of world() calls this with the same dims: one group per setting of the other
  // dimensions, in row-major order of those; returns this rank's.
  std::shared_ptr<ProcessGroup> make_group(const std::vector<int>& dims) const;
  const Flat* find_flat(const std::string& name) const;
  std::vector<int> dims_of(const std::string& name) const;  // a dimension or a flattened name

  std::shared_ptr<ProcessGroup> world_;
  std::vector<int64_t> shape_;
  std::vector<std::string> names_;
  std::vector<int64_t> coordinate_;
  std::vector<std::shared_ptr<ProcessGroup>> groups_;  // per dimension
  std::vector<Flat> flats_;
};

// ---- placements (torch.distributed.tensor's Shard, Replicate, Partial) ----

// The tensor dimension `dim` is split over the mesh dimension in torch.chunk pieces
// (shard_range); a negative dim counts from the end.
struct Shard {
  int64_t dim = 0;
  friend bool operator==(const Shard&, const Shard&) = default;
};
// Every rank of the mesh dimension holds the whole (of what earlier dimensions left).
struct Replicate {
  friend bool operator==(const Replicate&, const Replicate&) = default;
};
// The value is `op` over the local tensors of the mesh dimension's ranks. kSum, kAvg, kProd,
// kMin, kMax (kPremulSum has no factor here: kInvalidArgument). The Partial placements of one
// list must agree on how they combine: all kSum / kAvg (which commute), or all one other op.
struct Partial {
  ReduceOp op = ReduceOp::kSum;
  friend bool operator==(const Partial&, const Partial&) = default;
};
using Placement = std::variant<Shard, Replicate, Partial>;

// "Shard(0)", "Replicate()", "Partial(sum)"; a list as "[Shard(0), Replicate()]".
std::string placement_str(const Placement& placement);
std::string placements_str(const std::vector<Placement>& placements);

// Piece `index` of `num_chunks` of a dimension of `dim_size` elements, as torch.chunk and
// DTensor's Shard split it: pieces of ceil(dim_size / num_chunks) elements, the last ones
// shorter or empty (5 in 4: 2, 2, 1, 0; 4 in 3: 2, 2, 0). kInvalidArgument for a negative
// size or num_chunks < 1, kOutOfRange for an index outside [0, num_chunks).
ShardInfo shard_range(int64_t dim_size, int64_t num_chunks, int64_t index);

// Where the local piece of a global tensor sits for a mesh coordinate: its shape and the
// global index of its first element, per tensor dimension. Shards nest in mesh-dimension
// order: Shard(d) on mesh dimension i splits what mesh dimensions before i left of d.
// Replicate and Partial cover the whole of what is left.
struct LocalPiece {
  Shape shape;
  std::vector<int64_t> offset;
};
LocalPiece local_piece(const Shape& global_shape, const std::vector<int64_t>& mesh_shape,
                       const std::vector<Placement>& placements,
                       const std::vector<int64_t>& coordinate);
// This rank's piece on `mesh`.
LocalPiece local_piece(const Shape& global_shape, const DeviceMesh& mesh,
                       const std::vector<Placement>& placements);

// This rank's local tensor of `global` (the same on every rank; nothing is communicated):
// Shard pieces as local_piece() says; Partial(kSum) keeps the value on coordinate 0 of its
// mesh dimension and zeros elsewhere, Partial(kProd) ones elsewhere, Partial(kAvg / kMin /
// kMax) the value everywhere, so the reduction gives it back exactly. One placement per mesh
// dimension (kInvalidArgument otherwise; a Shard dim outside the tensor is kOutOfRange).
// Always a new tensor, contiguous, on global's device.
Tensor distribute_tensor(const Tensor& global, const DeviceMesh& mesh,
                         const std::vector<Placement>& placements);

// The whole tensor on every rank from the local pieces: all_gather along Shard dimensions,
// all_reduce along Partial ones. Collective over the mesh (every rank, same arguments).
// `local` must have the shape local_piece() gives (kInvalidArgument naming both otherwise).
Tensor full_tensor(const Tensor& local, const DeviceMesh& mesh,
                   const std::vector<Placement>& placements, const Shape& global_shape);

// This rank's local tensor under `to`, from its local tensor under `from` (collective over
// the mesh). Per mesh dimension: Shard -> Replicate all_gather, Partial -> Replicate
// all_reduce, Partial -> Shard reduce_scatter, Shard(i) -> Shard(j) all_to_all, Replicate ->
// Shard a local narrow, Replicate -> Partial a local mask (as distribute_tensor). Nested
// shards that no longer line up go through Replicate first (docs/device-mesh.md,
// "Redistribute"). Uneven pieces travel padded to the largest. Always a new tensor.
Tensor redistribute(const Tensor& local, const DeviceMesh& mesh, const std::vector<Placement>& from,
                    const std::vector<Placement>& to, const Shape& global_shape);

}  // namespace braid::shard
