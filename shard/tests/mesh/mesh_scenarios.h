// Multi-rank checks of DeviceMesh and placements, shared by device_mesh_test.cc (ranks as
// threads) and mesh_worker.cc (ranks as processes under `braid launch`). Every rank of the
// world calls the same function with the same arguments; failures are collected per rank and
// thrown together at the end. Values are small integers in f32, so every result is exact.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "braid/shard/device_mesh.h"
#include "braid/tensor/ops.h"

namespace braid::shard::mesh_testing {

using Placements = std::vector<Placement>;

struct Failures {
  std::vector<std::string> lines;
  int64_t checks = 0;
  void expect(bool ok, const std::string& what) {
    ++checks;
    if (!ok) lines.push_back(what);
  }
  // Throws every failure as one message (the harness names the rank).
  void throw_if_any() const {
    if (lines.empty()) return;
    std::string all = std::to_string(lines.size()) + " failure(s):";
    for (size_t i = 0; i < lines.size() && i < 20; ++i) all += "\n    " + lines[i];
    throw std::runtime_error(all);
  }
};

template <typename T>
std::string vec_str(const std::vector<T>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

// Row-major coordinate of `rank`, computed here rather than by the mesh.
inline std::vector<int64_t> decode(int64_t rank, const std::vector<int64_t>& shape) {
  std::vector<int64_t> c(shape.size());
  for (size_t i = shape.size(); i-- > 0;) {
    c[i] = rank % shape[i];
    rank /= shape[i];
  }
  return c;
}

// The global test tensor: 1, 2, 3, ... row-major.
inline Tensor iota(const Shape& shape) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i + 1);
  return Tensor::from_vector(v, shape, DType::kF32);
}

// A pattern with negative and positive entries, the noise that Partial pieces carry.
inline Tensor pattern(const Shape& shape) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<double>(static_cast<int64_t>(i * 7 % 11) - 5);
  return Tensor::from_vector(v, shape, DType::kF32);
}

inline bool same(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.shape() == b.shape() && a.dtype() == b.dtype() &&
         a.to_vector() == b.to_vector();
}

inline std::string values(const Tensor& t) {
  std::vector<double> v = t.to_vector();
  std::string out = shape_str(t.shape());
  out += " {";
  for (size_t i = 0; i < v.size() && i < 24; ++i) {
    if (i > 0) out += ' ';
    out += std::to_string(static_cast<int64_t>(v[i]));
  }
  out += v.size() > 24 ? " ...}" : "}";
  return out;
}

// `t` cut to a piece (offset and shape per tensor dimension).
inline Tensor cut(const Tensor& t, const LocalPiece& piece) {
  Tensor out = t;
  for (size_t d = 0; d < piece.shape.size(); ++d) {
    out = out.narrow(static_cast<int>(d), piece.offset[d], piece.shape[d]);
  }
  return out.contiguous();
}

// Whether the Partial ops of a list may be combined (all sum / avg, or all one op).
inline bool combinable(const Placements& p) {
  int family = -1;
  for (const Placement& x : p) {
    const auto* partial = std::get_if<Partial>(&x);
    if (partial == nullptr) continue;
    const int f = partial->op == ReduceOp::kAvg ? static_cast<int>(ReduceOp::kSum)
                                                : static_cast<int>(partial->op);
    if (family >= 0 && f != family) return false;
    family = f;
  }
  return true;
}

// Every combinable list of ndim placements drawn from `options`, the first mesh dimension
// slowest.
inline std::vector<Placements> all_lists(int ndim, const Placements& options) {
  std::vector<Placements> out = {{}};
  for (int i = 0; i < ndim; ++i) {
    std::vector<Placements> next;
    for (const Placements& p : out) {
      for (const Placement& o : options) {
        next.push_back(p);
        next.back().push_back(o);
      }
    }
    out = std::move(next);
  }
  std::erase_if(out, [](const Placements& p) { return !combinable(p); });
  return out;
}

// ---- layout ----

// The ranks that agree with `mine` outside `dims` (sorted), and this rank's row-major index
// over `dims`.
inline std::pair<std::vector<int>, int64_t> expected_group(const std::vector<int64_t>& shape,
                                                           const std::vector<int>& dims,
                                                           int64_t me) {
  const std::vector<int64_t> mine = decode(me, shape);
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<int> ranks;
  for (int64_t q = 0; q < n; ++q) {
    const std::vector<int64_t> c = decode(q, shape);
    bool member = true;
    for (size_t i = 0; i < shape.size(); ++i) {
      if (std::find(dims.begin(), dims.end(), static_cast<int>(i)) == dims.end()) {
        member = member && c[i] == mine[i];
      }
    }
    if (member) ranks.push_back(static_cast<int>(q));
  }
  int64_t index = 0;
  for (int d : dims) index = index * shape[d] + mine[d];
  return {ranks, index};
}

// A group holds `ranks` with this rank at `index`, and a sum over it adds exactly those.
inline void check_group(ProcessGroup& g, const std::vector<int>& ranks, int64_t index,
                        const std::string& what, Failures& f) {
  f.expect(
      g.size() == static_cast<int>(ranks.size()),
      what + ": size " + std::to_string(g.size()) + ", expected " + std::to_string(ranks.size()));
  f.expect(g.rank() == index,
           what + ": rank " + std::to_string(g.rank()) + ", expected " + std::to_string(index));
  f.expect(g.global_ranks() == ranks,
           what + ": world ranks " + vec_str(g.global_ranks()) + ", expected " + vec_str(ranks));
  Tensor t = Tensor::full({1}, static_cast<double>(g.global_ranks()[g.rank()] + 1));
  g.all_reduce(t);
  double expected = 0;
  for (int r : ranks) expected += r + 1;
  f.expect(t.item() == expected, what + ": all_reduce of world rank + 1 gave " +
                                     std::to_string(t.item()) + ", expected " +
                                     std::to_string(expected));
}

// Coordinates, rank_at, str and every dimension's group on `mesh` (world: the whole world).
inline void check_layout(const DeviceMesh& mesh, Failures& f) {
  const int me = mesh.world()->rank();
  const std::vector<int64_t>& shape = mesh.shape();
  f.expect(mesh.coordinate() == decode(me, shape),
           "coordinate " + vec_str(mesh.coordinate()) + ", expected " + vec_str(decode(me, shape)));
  for (int q = 0; q < mesh.numel(); ++q) {
    f.expect(mesh.rank_at(decode(q, shape)) == q, "rank_at(" + vec_str(decode(q, shape)) + ")");
    f.expect(mesh.coordinate_of(q) == decode(q, shape), "coordinate_of(" + std::to_string(q) + ")");
  }
  std::string str = "DeviceMesh(";
  for (int i = 0; i < mesh.ndim(); ++i) {
    str += (i ? ", " : "") + mesh.names()[i] + "=" + std::to_string(shape[i]);
  }
  f.expect(mesh.str() == str + ")", "str() is " + mesh.str());
  for (int i = 0; i < mesh.ndim(); ++i) {
    const std::string& name = mesh.names()[i];
    const auto [ranks, index] = expected_group(shape, {i}, me);
    f.expect(mesh.dim_index(name) == i, "dim_index(" + name + ")");
    f.expect(mesh.size(name) == shape[i], "size(" + name + ")");
    f.expect(mesh.local_rank(name) == mesh.coordinate()[i], "local_rank(" + name + ")");
    f.expect(mesh.group(std::vector<std::string>{name}) == mesh.group(name),
             "group({" + name + "})");
    check_group(*mesh.group(name), ranks, index, "group(" + name + ")", f);
  }
}

// flatten() over every run of two or more dimensions in mesh order (contiguous or not), with
// membership, lookup by dims and by name.
inline void check_flatten(DeviceMesh& mesh, Failures& f) {
  const int me = mesh.world()->rank();
  const int n = mesh.ndim();
  for (int mask = 1; mask < (1 << n); ++mask) {
    std::vector<int> dims;
    std::vector<std::string> names;
    for (int i = 0; i < n; ++i) {
      if (mask & (1 << i)) {
        dims.push_back(i);
        names.push_back(mesh.names()[i]);
      }
    }
    if (dims.size() < 2) continue;
    std::string name = "flat";
    for (const std::string& s : names) name += "_" + s;
    auto g = mesh.flatten(names, name);
    const auto [ranks, index] = expected_group(mesh.shape(), dims, me);
    check_group(*g, ranks, index, "flatten(" + name + ")", f);
    f.expect(mesh.group(names) == g, "group(dims) after flatten(" + name + ")");
    f.expect(mesh.group(name) == g, "group(" + name + ")");
    f.expect(mesh.size(name) == static_cast<int64_t>(ranks.size()), "size(" + name + ")");
    f.expect(mesh.local_rank(name) == index, "local_rank(" + name + ")");
  }
}

// ---- placements ----

// What distribute_tensor must give for `p`, worked out from the coordinate: the piece of x,
// zeros where a Partial(sum) dimension's coordinate is not 0, ones for Partial(prod).
inline Tensor expected_local(const Tensor& x, const DeviceMesh& mesh, const Placements& p) {
  Tensor piece = cut(x, local_piece(x.shape(), mesh, p));
  for (size_t i = 0; i < p.size(); ++i) {
    const auto* partial = std::get_if<Partial>(&p[i]);
    if (partial == nullptr || mesh.coordinate()[i] == 0) continue;
    if (partial->op == ReduceOp::kSum) piece = Tensor::zeros(piece.shape());
    if (partial->op == ReduceOp::kProd) piece = Tensor::ones(piece.shape());
  }
  return piece;
}

inline void check_round_trips(const DeviceMesh& mesh, const Shape& shape,
                              const std::vector<Placements>& lists, Failures& f) {
  const Tensor x = iota(shape);
  for (const Placements& p : lists) {
    const std::string what = mesh.str() + " " + shape_str(shape) + " " + placements_str(p);
    const Tensor local = distribute_tensor(x, mesh, p);
    const Tensor expected = expected_local(x, mesh, p);
    f.expect(same(local, expected),
             "distribute_tensor " + what + ": " + values(local) + ", expected " + values(expected));
    const Tensor whole = full_tensor(local, mesh, p, shape);
    f.expect(same(whole, x), "full_tensor " + what + ": " + values(whole));
  }
}

// The local tensor under `p` with noise that the reductions cancel, so that Partial pieces
// are not the plain masks distribute_tensor makes: sum / avg add c-dependent multiples of a
// pattern that sum to zero over the mesh dimension, max subtracts 3c, min adds 3c.
inline Tensor noisy_local(const Tensor& x, const DeviceMesh& mesh, const Placements& p) {
  Tensor local = distribute_tensor(x, mesh, p);
  const Tensor noise = cut(pattern(x.shape()), local_piece(x.shape(), mesh, p));
  for (size_t i = 0; i < p.size(); ++i) {
    const auto* partial = std::get_if<Partial>(&p[i]);
    if (partial == nullptr) continue;
    const int64_t n = mesh.shape()[i], c = mesh.coordinate()[i];
    switch (partial->op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        local = local + mul(noise, Scalar(c == 0 ? -(n - 1) : int64_t{1}));
        break;
      case ReduceOp::kMax:
        local = add(local, Scalar(-3 * c));
        break;
      case ReduceOp::kMin:
        local = add(local, Scalar(3 * c));
        break;
      default:
        break;
    }
  }
  return local;
}

// Noise survives when a noisy Partial dimension stays Partial: then only the full tensor is
// determined.
inline bool noise_kept(const Placements& from, const Placements& to) {
  for (size_t i = 0; i < from.size(); ++i) {
    const auto* p = std::get_if<Partial>(&from[i]);
    if (p && p->op != ReduceOp::kProd && from[i] == to[i]) return true;
  }
  return false;
}

inline void check_redistribute(const DeviceMesh& mesh, const Shape& shape,
                               const std::vector<std::pair<Placements, Placements>>& pairs,
                               Failures& f) {
  const Tensor x = iota(shape);
  for (const auto& [from, to] : pairs) {
    const std::string what = mesh.str() + " " + shape_str(shape) + " " + placements_str(from) +
                             " -> " + placements_str(to);
    const Tensor in = noisy_local(x, mesh, from);
    const Tensor before = in.clone();
    const Tensor out = redistribute(in, mesh, from, to, shape);
    f.expect(same(in, before), "redistribute " + what + " changed its input");
    if (!noise_kept(from, to)) {
      const Tensor expected = distribute_tensor(x, mesh, to);
      f.expect(same(out, expected),
               "redistribute " + what + ": " + values(out) + ", expected " + values(expected));
    }
    const Tensor whole = full_tensor(out, mesh, to, shape);
    f.expect(same(whole, x), "redistribute " + what + " then full_tensor: " + values(whole));
  }
}

// Every ordered pair of `lists`, or (stride > 1) pair (a, b) for b = a * 7 + k * stride
// mod size: a spread-out sample that still starts from every list.
inline std::vector<std::pair<Placements, Placements>> pairs_of(const std::vector<Placements>& lists,
                                                               size_t stride = 1) {
  std::vector<std::pair<Placements, Placements>> out;
  const size_t n = lists.size();
  for (size_t a = 0; a < n; ++a) {
    for (size_t k = 0; k * stride < n; ++k)
      out.emplace_back(lists[a], lists[(a * 7 + k * stride) % n]);
  }
  return out;
}

inline const Placements& basic_options() {
  static const Placements options = {Shard{0}, Shard{1}, Replicate{}, Partial{ReduceOp::kSum}};
  return options;
}

inline const Placements& all_options() {
  static const Placements options = {Shard{0},
                                     Shard{1},
                                     Replicate{},
                                     Partial{ReduceOp::kSum},
                                     Partial{ReduceOp::kAvg},
                                     Partial{ReduceOp::kMax},
                                     Partial{ReduceOp::kMin},
                                     Partial{ReduceOp::kProd}};
  return options;
}

// Nested and crossing shards, and Partial ops other than sum, on 2-d and 3-d meshes.
inline std::vector<std::pair<Placements, Placements>> special_pairs(int ndim) {
  const Placement s0 = Shard{0}, s1 = Shard{1}, r = Replicate{}, smax = Partial{ReduceOp::kMax};
  const Placement avg = Partial{ReduceOp::kAvg}, sum = Partial{ReduceOp::kSum};
  const Placement smin = Partial{ReduceOp::kMin}, neg = Shard{-1};
  if (ndim == 2) {
    return {{{s0, s0}, {r, s0}},      {{s0, s0}, {s0, r}},      {{r, s0}, {s0, s0}},
            {{s0, s1}, {s1, s0}},     {{s0, s0}, {s1, s1}},     {{s1, s1}, {s0, s0}},
            {{smax, smax}, {r, r}},   {{s1, smax}, {smax, s0}}, {{smax, r}, {s0, smax}},
            {{sum, avg}, {r, s1}},    {{avg, sum}, {sum, avg}}, {{s0, avg}, {avg, s1}},
            {{smin, s0}, {s0, smin}}, {{smax, s0}, {sum, s1}},  {{neg, s0}, {s0, neg}}};
  }
  return {{{s0, s0, s0}, {r, r, s0}},        {{s0, s0, s0}, {s1, s1, s1}},
          {{s0, s1, s0}, {s1, s0, s1}},      {{r, s0, s0}, {s0, s0, r}},
          {{s0, r, s0}, {r, s0, s0}},        {{sum, s0, sum}, {s0, sum, s0}},
          {{smax, s0, smax}, {s1, smax, r}}, {{s1, s1, s0}, {s0, s0, s1}}};
}

}  // namespace braid::shard::mesh_testing
