// DeviceMesh and placements (docs/device-mesh.md). The mesh is a row-major grid over the
// ranks of a group with one subgroup per dimension; placements move tensors over it with the
// group's collectives, one mesh dimension at a time.
#include "braid/shard/device_mesh.h"

#include <algorithm>
#include <sstream>

#include "braid/comm/object.h"
#include "braid/core/error.h"

namespace braid::shard {
namespace {

std::string join(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i];
  return out + "]";
}

template <typename T>
std::string list_str(const std::vector<T>& values) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < values.size(); ++i) out << (i ? ", " : "") << values[i];
  out << ']';
  return out.str();
}

// "dp_replicate=2, dp_shard=2"
std::string dims_str(const std::vector<int64_t>& shape, const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < shape.size(); ++i) {
    out += (i ? ", " : "") + (i < names.size() ? names[i] : "?") + "=" + std::to_string(shape[i]);
  }
  return out;
}

// Every rank must build the same mesh: compare the arguments across the ranks of `world`
// (one all_gather_object) and fail alike everywhere, listing each rank's mesh.
void check_same_on_every_rank(ProcessGroup& world, const std::vector<int64_t>& shape,
                              const std::vector<std::string>& names) {
  if (world.size() == 1) return;
  const std::string mine = shape.size() == names.size()
                               ? "DeviceMesh(" + dims_str(shape, names) + ")"
                               : "shape " + list_str(shape) + " names " + join(names);
  const std::vector<Tree> all = all_gather_object(world, Tree(mine));
  bool same = true;
  for (const Tree& t : all) same = same && t.as_string() == all[0].as_string();
  if (same) return;
  std::string lines;
  for (size_t r = 0; r < all.size(); ++r) {
    lines += "\n  rank " + std::to_string(r) + ": " + all[r].as_string();
    if (all[r].as_string() != all[0].as_string()) lines += "   <- differs from rank 0";
  }
  BRAID_FAIL(kInvalidArgument, "DeviceMesh: every rank must pass the same shape and names:", lines);
}

}  // namespace

// ---- DeviceMesh ----

DeviceMesh::DeviceMesh(std::shared_ptr<ProcessGroup> world, std::vector<int64_t> shape,
                       std::vector<std::string> names)
    : world_(std::move(world)), shape_(std::move(shape)), names_(std::move(names)) {
  BRAID_CHECK(world_ != nullptr, kInvalidArgument, "DeviceMesh: the world group is null");
  BRAID_CHECK(world_->rank() >= 0, kInvalidArgument,
              "DeviceMesh: this process is not a member of the group passed as world (its "
              "rank there is -1); only members build a mesh over it");
  // First, so that ranks given different arguments all fail alike, before any local check.
  check_same_on_every_rank(*world_, shape_, names_);
  BRAID_CHECK(!shape_.empty(), kInvalidArgument, "DeviceMesh: the shape has no dimensions");
  BRAID_CHECK(shape_.size() == names_.size(), kInvalidArgument, "DeviceMesh: shape ",
              list_str(shape_), " has ", shape_.size(), " dimensions but ", names_.size(),
              " names were given ", join(names_), "; expected one name per dimension");
  int64_t n = 1;
  for (size_t i = 0; i < shape_.size(); ++i) {
    BRAID_CHECK(shape_[i] >= 1, kInvalidArgument, "DeviceMesh: dimension '", names_[i],
                "' has size ", shape_[i], "; expected at least 1");
    n *= shape_[i];
  }
  BRAID_CHECK(n == world_->size(), kInvalidArgument, "DeviceMesh: shape ", list_str(shape_),
              " holds ", n, " ranks, but the world group has ", world_->size(),
              "; expected the product of the shape to equal the group's size");
  for (size_t i = 0; i < names_.size(); ++i) {
    BRAID_CHECK(!names_[i].empty(), kInvalidArgument, "DeviceMesh: the name of dimension ", i,
                " is empty; names: ", join(names_));
    for (size_t j = 0; j < i; ++j) {
      BRAID_CHECK(names_[i] != names_[j], kInvalidArgument, "DeviceMesh: the name '", names_[i],
                  "' is used by dimensions ", j, " and ", i, "; expected unique names");
    }
  }
  coordinate_ = coordinate_of(world_->rank());
  for (int i = 0; i < ndim(); ++i) groups_.push_back(make_group({i}));
}

int64_t DeviceMesh::numel() const {
  return world_->size();
}

std::shared_ptr<ProcessGroup> DeviceMesh::make_group(const std::vector<int>& dims) const {
  int64_t span = 1;  // ranks per group
  for (int d : dims) span *= shape_[d];
  if (span == numel()) {
    // One group of every rank, in world order (the other dimensions have size 1).
    return world_;
  }
  std::shared_ptr<ProcessGroup> mine;
  for (int base = 0; base < numel(); ++base) {
    std::vector<int64_t> c = coordinate_of(base);
    if (std::any_of(dims.begin(), dims.end(), [&](int d) { return c[d] != 0; })) continue;
    std::vector<int> ranks;
    for (int64_t k = 0; k < span; ++k) {
      int64_t rest = k;  // row-major over dims: the last varies fastest
      for (auto it = dims.rbegin(); it != dims.rend(); ++it) {
        c[*it] = rest % shape_[*it];
        rest /= shape_[*it];
      }
      ranks.push_back(rank_at(c));
    }
    std::shared_ptr<ProcessGroup> g = world_->new_group(ranks);
    if (g->rank() >= 0) mine = std::move(g);
  }
  BRAID_ASSERT(mine != nullptr, "rank ", world_->rank(), " is in no group of its mesh");
  return mine;
}

int DeviceMesh::dim_index(const std::string& name) const {
  for (int i = 0; i < ndim(); ++i) {
    if (names_[i] == name) return i;
  }
  BRAID_FAIL(kInvalidArgument, str(), ": no dimension named '", name, "'; the dimensions are ",
             join(names_));
}

const DeviceMesh::Flat* DeviceMesh::find_flat(const std::string& name) const {
  for (const Flat& f : flats_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

std::vector<int> DeviceMesh::dims_of(const std::string& name) const {
  if (const Flat* f = find_flat(name)) return f->dims;
  for (int i = 0; i < ndim(); ++i) {
    if (names_[i] == name) return {i};
  }
  std::vector<std::string> known = names_;
  for (const Flat& f : flats_) known.push_back(f.name + " (flattened)");
  BRAID_FAIL(kInvalidArgument, str(), ": no dimension or flattened group named '", name,
             "'; known: ", join(known));
}

int64_t DeviceMesh::size(const std::string& dim) const {
  int64_t n = 1;
  for (int d : dims_of(dim)) n *= shape_[d];
  return n;
}

int64_t DeviceMesh::local_rank(const std::string& dim) const {
  int64_t index = 0;
  for (int d : dims_of(dim)) index = index * shape_[d] + coordinate_[d];
  return index;
}

std::shared_ptr<ProcessGroup> DeviceMesh::group(const std::string& dim) const {
  if (const Flat* f = find_flat(dim)) return f->group;
  return groups_[dim_index(dim)];
}

std::shared_ptr<ProcessGroup> DeviceMesh::group(const std::vector<std::string>& dims) const {
  BRAID_CHECK(!dims.empty(), kInvalidArgument, str(), ": group() of an empty list of dimensions");
  if (dims.size() == 1) return group(dims[0]);
  std::vector<int> idx;
  for (const std::string& d : dims) idx.push_back(dim_index(d));
  for (const Flat& f : flats_) {
    if (f.dims == idx) return f.group;
  }
  BRAID_FAIL(kInvalidArgument, str(), ": no group over the dimensions ", join(dims),
             "; create it first with flatten(", join(dims),
             ", name) on every rank (it is collective)");
}

std::shared_ptr<ProcessGroup> DeviceMesh::flatten(const std::vector<std::string>& dims,
                                                  const std::string& name) {
  BRAID_CHECK(!dims.empty(), kInvalidArgument, str(), ": flatten() of an empty list of dimensions");
  std::vector<int> idx;
  for (const std::string& d : dims) {
    idx.push_back(dim_index(d));
    BRAID_CHECK(idx.size() == 1 || idx.back() > idx[idx.size() - 2], kInvalidArgument, str(),
                ": flatten(", join(dims), "): the dimensions must be listed in mesh order ",
                join(names_), ", each once");
  }
  std::string flat_name = name;
  if (flat_name.empty()) {
    for (size_t i = 0; i < dims.size(); ++i) flat_name += (i ? "_" : "") + dims[i];
  }
  const bool is_dim = std::find(names_.begin(), names_.end(), flat_name) != names_.end();
  BRAID_CHECK(!is_dim || dims == std::vector<std::string>{flat_name}, kInvalidArgument, str(),
              ": flatten(", join(dims), "): the name '", flat_name,
              "' is a mesh dimension; expected a new name");
  if (dims.size() == 1 && is_dim) return group(flat_name);
  BRAID_CHECK(find_flat(flat_name) == nullptr, kInvalidArgument, str(), ": flatten(", join(dims),
              "): the name '", flat_name, "' was already given to an earlier flatten()");
  // A single dimension under a new name is an alias of its group: no new group is made.
  flats_.push_back({flat_name, idx, idx.size() == 1 ? groups_[idx[0]] : make_group(idx)});
  return flats_.back().group;
}

std::vector<int64_t> DeviceMesh::coordinate_of(int rank) const {
  BRAID_CHECK(rank >= 0 && rank < numel(), kOutOfRange, str(), ": rank ", rank, " is outside [0, ",
              numel(), ")");
  std::vector<int64_t> c(shape_.size());
  int64_t rest = rank;
  for (int i = ndim() - 1; i >= 0; --i) {
    c[i] = rest % shape_[i];
    rest /= shape_[i];
  }
  return c;
}

int DeviceMesh::rank_at(const std::vector<int64_t>& coordinate) const {
  BRAID_CHECK(coordinate.size() == shape_.size(), kInvalidArgument, str(), ": coordinate ",
              list_str(coordinate), " has ", coordinate.size(), " components; expected ",
              shape_.size());
  int64_t r = 0;
  for (int i = 0; i < ndim(); ++i) {
    BRAID_CHECK(coordinate[i] >= 0 && coordinate[i] < shape_[i], kOutOfRange, str(),
                ": coordinate ", list_str(coordinate), " is outside dimension '", names_[i],
                "' of size ", shape_[i]);
    r = r * shape_[i] + coordinate[i];
  }
  return static_cast<int>(r);
}

std::string DeviceMesh::str() const {
  return "DeviceMesh(" + dims_str(shape_, names_) + ")";
}

// ---- placements ----

std::string placement_str(const Placement& p) {
  if (const auto* s = std::get_if<Shard>(&p)) return "Shard(" + std::to_string(s->dim) + ")";
  if (std::holds_alternative<Replicate>(p)) return "Replicate()";
  return "Partial(" + std::string(reduce_op_name(std::get<Partial>(p).op)) + ")";
}

std::string placements_str(const std::vector<Placement>& placements) {
  std::vector<std::string> parts;
  for (const Placement& p : placements) parts.push_back(placement_str(p));
  return join(parts);
}

ShardInfo shard_range(int64_t dim_size, int64_t num_chunks, int64_t index) {
  BRAID_CHECK(dim_size >= 0, kInvalidArgument, "shard_range: dimension size ", dim_size,
              " is negative");
  BRAID_CHECK(num_chunks >= 1, kInvalidArgument, "shard_range: ", num_chunks,
              " chunks; expected at least 1");
  BRAID_CHECK(index >= 0 && index < num_chunks, kOutOfRange, "shard_range: chunk ", index,
              " is outside [0, ", num_chunks, ")");
  const int64_t chunk = (dim_size + num_chunks - 1) / num_chunks;
  const int64_t offset = std::min(dim_size, chunk * index);
  return {offset, std::min(chunk, dim_size - offset)};
}

// ---- local pieces and redistribution ----

namespace {

// Partial ops that may share one placement list: the reductions along different mesh
// dimensions then commute, so the order they run in does not matter.
int partial_family(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return 0;
    case ReduceOp::kProd:
      return 1;
    case ReduceOp::kMin:
      return 2;
    case ReduceOp::kMax:
      return 3;
    case ReduceOp::kPremulSum:
      break;
  }
  return -1;
}

std::string mesh_dim_name(const std::vector<std::string>& names, size_t i) {
  return i < names.size() ? "'" + names[i] + "'" : std::to_string(i);
}

// `placements` checked against the mesh and the tensor, with negative Shard dims made
// positive. `what` names the call and the argument ("redistribute: `to`").
std::vector<Placement> checked(const std::vector<Placement>& placements,
                               const std::vector<int64_t>& mesh_shape,
                               const std::vector<std::string>& names, const Shape& global,
                               const std::string& what) {
  BRAID_CHECK(placements.size() == mesh_shape.size(), kInvalidArgument, what, " has ",
              placements.size(), " placements ", placements_str(placements), " for a mesh of ",
              mesh_shape.size(), " dimensions ", list_str(mesh_shape),
              "; expected one placement per mesh dimension");
  const int64_t nd = static_cast<int64_t>(global.size());
  std::vector<Placement> out = placements;
  const Partial* first_partial = nullptr;
  for (size_t i = 0; i < out.size(); ++i) {
    if (auto* s = std::get_if<Shard>(&out[i])) {
      BRAID_CHECK(s->dim >= -nd && s->dim < nd, kOutOfRange, what, ": Shard(", s->dim,
                  ") on mesh dimension ", mesh_dim_name(names, i), " is outside the ", nd,
                  "-d tensor of shape ", shape_str(global), "; expected a dimension in [", -nd,
                  ", ", nd, ")");
      if (s->dim < 0) s->dim += nd;
    } else if (const auto* p = std::get_if<Partial>(&placements[i])) {
      BRAID_CHECK(partial_family(p->op) >= 0, kInvalidArgument, what, ": Partial(",
                  reduce_op_name(p->op), ") on mesh dimension ", mesh_dim_name(names, i),
                  " is not supported; expected sum, avg, prod, min or max");
      if (first_partial == nullptr) first_partial = p;
      BRAID_CHECK(partial_family(p->op) == partial_family(first_partial->op), kInvalidArgument,
                  what, ": ", placements_str(placements), " mixes Partial(",
                  reduce_op_name(first_partial->op), ") and Partial(", reduce_op_name(p->op),
                  "), whose reductions do not commute; expected only sum / avg, or one op");
    }
  }
  return out;
}

const Shard* as_shard(const Placement& p) {
  return std::get_if<Shard>(&p);
}
bool is_shard_of(const Placement& p, int64_t d) {
  return as_shard(p) && as_shard(p)->dim == d;
}

LocalPiece piece_of(const Shape& global, const std::vector<int64_t>& mesh_shape,
                    const std::vector<Placement>& placements,
                    const std::vector<int64_t>& coordinate, size_t upto) {
  LocalPiece piece{global, std::vector<int64_t>(global.size(), 0)};
  for (size_t i = 0; i < upto; ++i) {
    if (const Shard* s = as_shard(placements[i])) {
      const ShardInfo r = shard_range(piece.shape[s->dim], mesh_shape[i], coordinate[i]);
      piece.offset[s->dim] += r.offset;
      piece.shape[s->dim] = r.count;
    }
  }
  return piece;
}

Shape with(Shape shape, int64_t d, int64_t size) {
  shape[d] = size;
  return shape;
}

Shape stacked(int64_t n, Shape block) {
  block.insert(block.begin(), n);
  return block;
}

// Shard(d) -> Replicate on a group of n: each member's piece of a length-L dimension, padded
// to the largest piece, all-gathered and unpadded.
Tensor gather_shards(const Tensor& local, int64_t d, int64_t L, ProcessGroup& pg) {
  const int64_t n = pg.size();
  Tensor out = Tensor::empty(with(local.shape(), d, L), local.dtype(), local.device());
  const Shape block = with(local.shape(), d, shard_range(L, n, 0).count);
  if (shape_numel(block) == 0) return out;  // the same on every member: skip the call
  Tensor send = Tensor::zeros(block, local.dtype(), local.device());
  send.narrow(static_cast<int>(d), 0, local.size(static_cast<int>(d))).copy_(local);
  Tensor recv = Tensor::empty(stacked(n, block), local.dtype(), local.device());
  pg.all_gather_into(recv, send);
  for (int64_t k = 0; k < n; ++k) {
    const ShardInfo r = shard_range(L, n, k);
    out.narrow(static_cast<int>(d), r.offset, r.count)
        .copy_(recv.select(0, k).narrow(static_cast<int>(d), 0, r.count));
  }
  return out;
}

// Partial(op) -> Shard(d): block k is the padded piece k of every member's tensor, reduced onto
// member k.
Tensor reduce_scatter_shards(const Tensor& local, int64_t d, ReduceOp op, int64_t c,
                             ProcessGroup& pg) {
  const int64_t n = pg.size(), L = local.size(static_cast<int>(d));
  const ShardInfo mine = shard_range(L, n, c);
  const Shape block = with(local.shape(), d, shard_range(L, n, 0).count);
  if (shape_numel(block) == 0) {
    return Tensor::empty(with(local.shape(), d, mine.count), local.dtype(), local.device());
  }
  Tensor send = Tensor::zeros(stacked(n, block), local.dtype(), local.device());
  for (int64_t k = 0; k < n; ++k) {
    const ShardInfo r = shard_range(L, n, k);
    send.select(0, k)
        .narrow(static_cast<int>(d), 0, r.count)
        .copy_(local.narrow(static_cast<int>(d), r.offset, r.count));
  }
  Tensor recv = Tensor::empty(block, local.dtype(), local.device());
  CallOptions options;
  options.op = op;
  pg.reduce_scatter_from(recv, send, options);
  return recv.narrow(static_cast<int>(d), 0, mine.count);
}

// Shard(d) -> Shard(e): member c sends member k its piece of d cut to piece k of e, padded to
// the largest such block; member k puts the pieces of d back together.
Tensor all_to_all_shards(const Tensor& local, int64_t d, int64_t Ld, int64_t e, int64_t c,
                         ProcessGroup& pg) {
  const int64_t n = pg.size(), Le = local.size(static_cast<int>(e));
  const int di = static_cast<int>(d), ei = static_cast<int>(e);
  const ShardInfo mine = shard_range(Le, n, c);
  Tensor out =
      Tensor::empty(with(with(local.shape(), d, Ld), e, mine.count), local.dtype(), local.device());
  const Shape block =
      with(with(local.shape(), d, shard_range(Ld, n, 0).count), e, shard_range(Le, n, 0).count);
  if (shape_numel(block) == 0) return out;
  Tensor send = Tensor::zeros(stacked(n, block), local.dtype(), local.device());
  for (int64_t k = 0; k < n; ++k) {
    const ShardInfo r = shard_range(Le, n, k);
    send.select(0, k)
        .narrow(di, 0, local.size(di))
        .narrow(ei, 0, r.count)
        .copy_(local.narrow(ei, r.offset, r.count));
  }
  Tensor recv = Tensor::empty(stacked(n, block), local.dtype(), local.device());
  pg.all_to_all(recv, send);
  for (int64_t k = 0; k < n; ++k) {
    const ShardInfo r = shard_range(Ld, n, k);
    out.narrow(di, r.offset, r.count)
        .copy_(recv.select(0, k).narrow(di, 0, r.count).narrow(ei, 0, mine.count));
  }
  return out;
}

// Replicate -> Partial(op): the reduction over the mesh dimension gives `local` back exactly.
Tensor mask_partial(const Tensor& local, ReduceOp op, int64_t c) {
  if (c == 0) return local;
  if (op == ReduceOp::kSum) return Tensor::zeros(local.shape(), local.dtype(), local.device());
  if (op == ReduceOp::kProd) return Tensor::ones(local.shape(), local.dtype(), local.device());
  return local;  // avg, min, max of copies of one value
}

// One redistribution step on mesh dimension i, from cur[i] to `target`. The caller makes sure
// no later mesh dimension shards the tensor dimensions it touches (Note [Redistribute order]).
Tensor step(const Tensor& local, const DeviceMesh& mesh, const Shape& global,
            const std::vector<Placement>& cur, size_t i, const Placement& target) {
  ProcessGroup& pg = *mesh.group(mesh.names()[i]);
  const int64_t c = mesh.coordinate()[i];
  const Placement& from = cur[i];
  const Shard* fs = as_shard(from);
  const Shard* ts = as_shard(target);
  if (fs) {
    const int64_t L = piece_of(global, mesh.shape(), cur, mesh.coordinate(), i).shape[fs->dim];
    if (std::holds_alternative<Replicate>(target)) return gather_shards(local, fs->dim, L, pg);
    BRAID_ASSERT(ts != nullptr, placement_str(from), " -> ", placement_str(target));
    return all_to_all_shards(local, fs->dim, L, ts->dim, c, pg);
  }
  if (const auto* fp = std::get_if<Partial>(&from)) {
    if (ts) return reduce_scatter_shards(local, ts->dim, fp->op, c, pg);
    BRAID_ASSERT(std::holds_alternative<Replicate>(target), placement_str(from), " -> ",
                 placement_str(target));
    Tensor out = local.clone();
    CallOptions options;
    options.op = fp->op;
    if (out.numel() > 0) pg.all_reduce(out, options);
    return out;
  }
  if (ts) {
    const ShardInfo r = shard_range(local.size(static_cast<int>(ts->dim)), pg.size(), c);
    return local.narrow(static_cast<int>(ts->dim), r.offset, r.count);
  }
  return mask_partial(local, std::get<Partial>(target).op, c);
}

// Note [Redistribute order]
// A step on mesh dimension i is one collective over group(i) only if no later mesh
// dimension shards a tensor dimension the step splits or joins: a later Shard(d) would cut
// the chunks of d that dimension i exchanges. As torch's _gen_transform_infos: first walk
// the mesh dimensions from last to first, moving each to its target, or to Replicate where
// the target is a Shard(d) whose earlier nesting (which mesh dimensions before it shard d)
// differs between now and the target; then walk first to last and finish those. Partial
// targets that are new are also left to the second walk, so every reduction of the source's
// Partial values happens before any new Partial value is made (a mask of zeros must not be
// summed by a reduction that belongs to another op).
Tensor redistribute_checked(const Tensor& input, const DeviceMesh& mesh,
                            const std::vector<Placement>& from, const std::vector<Placement>& to,
                            const Shape& global) {
  std::vector<Placement> cur = from;
  Tensor local = input;
  const size_t n = cur.size();
  for (size_t i = n; i-- > 0;) {
    Placement target = to[i];
    if (const Shard* s = as_shard(to[i])) {
      for (size_t k = 0; k < i; ++k) {
        if (is_shard_of(cur[k], s->dim) != is_shard_of(to[k], s->dim)) target = Replicate{};
      }
    } else if (std::holds_alternative<Partial>(to[i]) && cur[i] != to[i]) {
      target = Replicate{};
    }
    if (cur[i] != target) {
      local = step(local, mesh, global, cur, i, target);
      cur[i] = target;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (cur[i] != to[i]) {
      local = step(local, mesh, global, cur, i, to[i]);
      cur[i] = to[i];
    }
  }
  return local.shares_storage(input) ? local.clone() : local.contiguous();
}

void check_local(const Tensor& local, const DeviceMesh& mesh,
                 const std::vector<Placement>& placements, const Shape& global,
                 const std::string& what) {
  BRAID_CHECK(local.defined(), kInvalidArgument, what, ": the local tensor is undefined");
  const LocalPiece piece = local_piece(global, mesh, placements);
  BRAID_CHECK(local.shape() == piece.shape, kInvalidArgument, what, ": the local tensor has shape ",
              shape_str(local.shape()), ", but global shape ", shape_str(global), " with ",
              placements_str(placements), " gives this rank (coordinate ",
              list_str(mesh.coordinate()), " of ", mesh.str(), ") a piece of shape ",
              shape_str(piece.shape));
}

}  // namespace

LocalPiece local_piece(const Shape& global_shape, const std::vector<int64_t>& mesh_shape,
                       const std::vector<Placement>& placements,
                       const std::vector<int64_t>& coordinate) {
  const std::vector<Placement> p = checked(placements, mesh_shape, {}, global_shape, "local_piece");
  BRAID_CHECK(coordinate.size() == mesh_shape.size(), kInvalidArgument, "local_piece: coordinate ",
              list_str(coordinate), " has ", coordinate.size(), " components for the mesh ",
              list_str(mesh_shape));
  for (size_t i = 0; i < coordinate.size(); ++i) {
    BRAID_CHECK(coordinate[i] >= 0 && coordinate[i] < mesh_shape[i], kOutOfRange,
                "local_piece: coordinate ", list_str(coordinate), " is outside the mesh ",
                list_str(mesh_shape));
  }
  return piece_of(global_shape, mesh_shape, p, coordinate, p.size());
}

LocalPiece local_piece(const Shape& global_shape, const DeviceMesh& mesh,
                       const std::vector<Placement>& placements) {
  const std::vector<Placement> p =
      checked(placements, mesh.shape(), mesh.names(), global_shape, "local_piece");
  return piece_of(global_shape, mesh.shape(), p, mesh.coordinate(), p.size());
}

Tensor distribute_tensor(const Tensor& global, const DeviceMesh& mesh,
                         const std::vector<Placement>& placements) {
  BRAID_CHECK(global.defined(), kInvalidArgument, "distribute_tensor: the tensor is undefined");
  const std::vector<Placement> to =
      checked(placements, mesh.shape(), mesh.names(), global.shape(), "distribute_tensor");
  // From Replicate everywhere every step is local: a narrow or a mask.
  const std::vector<Placement> whole(to.size(), Replicate{});
  return redistribute_checked(global, mesh, whole, to, global.shape());
}

Tensor full_tensor(const Tensor& local, const DeviceMesh& mesh,
                   const std::vector<Placement>& placements, const Shape& global_shape) {
  const std::vector<Placement> from =
      checked(placements, mesh.shape(), mesh.names(), global_shape, "full_tensor");
  check_local(local, mesh, from, global_shape, "full_tensor");
  const std::vector<Placement> whole(from.size(), Replicate{});
  return redistribute_checked(local, mesh, from, whole, global_shape);
}

Tensor redistribute(const Tensor& local, const DeviceMesh& mesh, const std::vector<Placement>& from,
                    const std::vector<Placement>& to, const Shape& global_shape) {
  const std::vector<Placement> src =
      checked(from, mesh.shape(), mesh.names(), global_shape, "redistribute: `from`");
  const std::vector<Placement> dst =
      checked(to, mesh.shape(), mesh.names(), global_shape, "redistribute: `to`");
  check_local(local, mesh, src, global_shape, "redistribute");
  return redistribute_checked(local, mesh, src, dst, global_shape);
}

}  // namespace braid::shard
