// run_conformance: the grid on the world group, then on subgroups made with new_group (the even
// ranks; three ranks passed in reverse order), plus the checks that need no peer: dtypes and
// kinds the backend does not list, the front's argument checks, a non-member's placeholder.
// GroupRun's shared helpers live here too; the cases are in reducing.cc and moving.cc.
#include "conformance.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "suite.h"

namespace braid::conformance {
namespace detail {
namespace {

// The dtypes counts above kLargeCount run in (when selected): the formats whose paths differ
// most (f32, the two 16-bit floats folded in f32, an integer, fp8).
const std::vector<DType> kLargeDtypes = {DType::kF32, DType::kBF16, DType::kF16, DType::kI32,
                                         DType::kF8E4M3};

template <class T>
bool contains(const std::vector<T>& v, const T& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < ranks.size(); ++i) out << (i ? ", " : "") << ranks[i];
  out << ']';
  return out.str();
}

}  // namespace

GroupRun::GroupRun(ProcessGroup& pg, std::string label, const Options& options, uint64_t salt,
                   bool large_counts, std::vector<std::string>& failures)
    : pg_(pg),
      label_(std::move(label)),
      options_(options),
      salt_(salt),
      large_counts_(large_counts),
      me_(pg.rank()),
      n_(pg.size()),
      failures_(failures) {
  dtypes_ = options.dtypes.empty() ? pg.backend().capabilities().dtypes : options.dtypes;
}

Source GroupRun::source(DType dtype, Values values) {
  return {dtype, salt_ ^ (++cases_ * 0x9e3779b97f4a7c15ull), n_, values};
}

std::vector<int> GroupRun::roots(int64_t count) const {
  if (large(count)) return {n_ - 1};
  if (count <= 7) {
    std::vector<int> all(n_);
    for (int r = 0; r < n_; ++r) all[r] = r;
    return all;
  }
  return n_ == 1 ? std::vector<int>{0} : std::vector<int>{0, n_ - 1};
}

std::vector<ReduceOp> GroupRun::ops(DType dtype, int64_t count) const {
  if (large(count)) return {ReduceOp::kSum};
  std::vector<ReduceOp> out;
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax,
                      ReduceOp::kAvg, ReduceOp::kPremulSum}) {
    if (op_allowed(op, dtype)) out.push_back(op);
  }
  return out;
}

bool GroupRun::supports(CollectiveKind kind) const {
  const BackendCapabilities& caps = pg_.backend().capabilities();
  if (!contains(caps.collectives, kind)) return false;
  return (kind != CollectiveKind::kSend && kind != CollectiveKind::kRecv) || caps.point_to_point;
}

bool GroupRun::wants(std::string_view collective) const {
  return options_.only.empty() || collective.find(options_.only) != std::string_view::npos;
}

bool GroupRun::selected(CollectiveKind kind, DType dtype, int64_t count) const {
  if (!large(count)) return true;
  if (!large_counts_) return false;
  // all_reduce, the collective training leans on, in every dtype.
  if (kind == CollectiveKind::kAllReduce || contains(kLargeDtypes, dtype)) return true;
  // A selection without any of kLargeDtypes runs its first dtype at large counts.
  return std::none_of(dtypes_.begin(), dtypes_.end(),
                      [](DType d) { return contains(kLargeDtypes, d); }) &&
         dtype == dtypes_.front();
}

std::string GroupRun::describe(const Case& c) const {
  std::ostringstream out;
  out << c.collective << " (" << c.form << ") dtype=" << dtype_name(c.dtype)
      << " count=" << c.count;
  if (c.op) out << " op=" << reduce_op_name(*c.op);
  if (c.root >= 0) out << " root=" << c.root;
  out << " on group " << label_ << " as rank " << me_ << " of " << n_;
  return out.str();
}

void GroupRun::fail(const Case& c, const std::string& what) {
  failures_.push_back(describe(c) + ": " + what);
}

void GroupRun::call(const Case& c, const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    fail(c, "threw [" + std::string(to_string(e.kind())) + "] " + e.message());
    throw Stop{};
  } catch (const std::exception& e) {
    fail(c, std::string("threw ") + e.what());
    throw Stop{};
  }
}

void GroupRun::expect_error(const Case& c, ErrorKind kind, std::string_view names,
                            const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    if (e.kind() != kind) {
      fail(c, "threw [" + std::string(to_string(e.kind())) + "], expected [" +
                  std::string(to_string(kind)) + "]: " + e.message());
    } else if (e.message().find(names) == std::string::npos) {
      fail(c, "the error does not name '" + std::string(names) + "': " + e.message());
    }
    return;
  }
  fail(c, "did not throw, expected [" + std::string(to_string(kind)) + "]");
}

void GroupRun::expect(const Case& c, const void* got, const Bytes& want, std::string_view where) {
  const int64_t count = static_cast<int64_t>(want.size() / dtype_size(c.dtype));
  const std::string diff = first_difference(c.dtype, got, want.data(), count);
  if (!diff.empty()) fail(c, where.empty() ? diff : std::string(where) + ": " + diff);
}

void GroupRun::expect_unchanged(const Case& c, const void* input, const Source& s, int64_t begin,
                                int64_t count) {
  expect(c, input, input_bytes(s, me_, begin, count), "the input changed");
}

namespace {

// A call the front must refuse because the backend does not list its kind or dtype.
void unsupported(GroupRun& g, CollectiveKind kind, DType dtype, std::string_view names) {
  CollectiveDesc d;
  d.kind = kind;
  d.dtype = dtype;
  d.count = 0;  // no buffer needed
  d.peer = g.size() > 1 ? (g.rank() + 1) % g.size() : 0;
  if (kind == CollectiveKind::kAllToAllV) {
    d.send_counts = d.send_offsets = d.recv_counts = d.recv_offsets =
        std::vector<int64_t>(g.size(), 0);
  }
  const Case c{collective_name(kind), "not listed by the backend", dtype, 0, {}, -1};
  if ((kind == CollectiveKind::kSend || kind == CollectiveKind::kRecv) && g.size() == 1) return;
  g.expect_error(c, ErrorKind::kNotSupported, names, [&] { g.pg().run(d); });
}

}  // namespace

void GroupRun::run() {
  const BackendCapabilities& caps = pg_.backend().capabilities();
  const std::string backend(pg_.backend().name());
  std::vector<DType> listed;
  for (DType d : dtypes_) {
    if (contains(caps.dtypes, d)) {
      listed.push_back(d);
    } else if (wants("all_reduce")) {
      unsupported(*this, CollectiveKind::kAllReduce, d, dtype_name(d));
    }
  }
  dtypes_ = listed;
  using Fn = void (GroupRun::*)(DType, int64_t);
  auto grid = [&](CollectiveKind kind, std::string_view name, Fn fn) {
    if (!wants(name) || dtypes_.empty()) return;
    if (!supports(kind)) return unsupported(*this, kind, dtypes_.front(), backend);
    for (DType dtype : dtypes_) {
      for (int64_t count : options_.counts) {
        if (selected(kind, dtype, count)) (this->*fn)(dtype, count);
      }
    }
  };
  grid(CollectiveKind::kAllReduce, "all_reduce", &GroupRun::all_reduce);
  grid(CollectiveKind::kReduce, "reduce", &GroupRun::reduce);
  grid(CollectiveKind::kReduceScatter, "reduce_scatter", &GroupRun::reduce_scatter);
  grid(CollectiveKind::kBroadcast, "broadcast", &GroupRun::broadcast);
  grid(CollectiveKind::kAllGather, "all_gather", &GroupRun::all_gather);
  grid(CollectiveKind::kAllToAll, "all_to_all", &GroupRun::all_to_all);
  grid(CollectiveKind::kAllToAllV, "all_to_all_v", &GroupRun::all_to_all_v);
  grid(CollectiveKind::kGather, "gather", &GroupRun::gather);
  grid(CollectiveKind::kScatter, "scatter", &GroupRun::scatter);
  grid(CollectiveKind::kSend, "send_recv", &GroupRun::send_recv);
  if (wants("all_reduce") && supports(CollectiveKind::kAllReduce)) {
    for (DType dtype : dtypes_) unsupported_ops(dtype);
  }
  if (wants("barrier")) {
    if (!supports(CollectiveKind::kBarrier)) {
      unsupported(*this, CollectiveKind::kBarrier, DType::kU8, backend);
    } else {
      barrier();
    }
  }
  if (wants("async") && !dtypes_.empty() && supports(CollectiveKind::kAllReduce) &&
      supports(CollectiveKind::kBroadcast) && supports(CollectiveKind::kAllGather) &&
      supports(CollectiveKind::kBarrier)) {
    async_queue();
  }
}

Tensor input_tensor(const Source& s, int rank, int64_t begin, Shape shape) {
  Tensor t = Tensor::empty(std::move(shape), s.dtype);
  fill_input(s, rank, begin, t.numel(), t.data_ptr());
  return t;
}

Tensor sentinel_tensor(DType dtype, Shape shape) {
  Tensor t = Tensor::empty(std::move(shape), dtype);
  if (t.numel() > 0) std::memset(t.data_ptr(), 0xA5, t.nbytes());
  return t;
}

namespace {

// The front's own checks, on the world group: each throws on every rank before any message.
void argument_checks(GroupRun& g) {
  const int n = g.size();
  ProcessGroup& pg = g.pg();
  auto c = [](std::string form) { return Case{"arguments", std::move(form), DType::kF32, 4, {}}; };
  Tensor t = Tensor::zeros({4});
  g.expect_error(c("broadcast from root size()"), ErrorKind::kOutOfRange, "root",
                 [&] { pg.broadcast(t, n); });
  g.expect_error(c("reduce from root -1"), ErrorKind::kOutOfRange, "root",
                 [&] { pg.reduce(t, -1); });
  std::vector<Tensor> outputs(n + 1, Tensor::zeros({4}));
  g.expect_error(c("all_gather with size() + 1 outputs"), ErrorKind::kInvalidArgument, "outputs",
                 [&] { pg.all_gather(outputs, t); });
  Tensor wrong = Tensor::zeros({n + 1, 4});
  g.expect_error(c("all_gather_into output of size() + 1 blocks"), ErrorKind::kInvalidArgument,
                 "output", [&] { pg.all_gather_into(wrong, t); });
  g.expect_error(c("reduce_scatter_from input of size() + 1 blocks"), ErrorKind::kInvalidArgument,
                 "input", [&] { pg.reduce_scatter_from(t, wrong); });
  Tensor other = Tensor::zeros({4}, DType::kI32);
  std::vector<Tensor> mixed(n, Tensor::zeros({4}));
  mixed.back() = other;
  g.expect_error(c("reduce_scatter with an i32 input among f32"), ErrorKind::kInvalidArgument,
                 "inputs[" + std::to_string(n - 1) + "]", [&] { pg.reduce_scatter(t, mixed); });
  Tensor strided = Tensor::zeros({4, 2}).t();
  g.expect_error(c("all_reduce of a non-contiguous tensor"), ErrorKind::kInvalidArgument,
                 "contiguous", [&] { pg.all_reduce(strided); });
  Tensor rows = Tensor::zeros({3, 2});
  g.expect_error(c("all_to_all splits not summing to dimension 0"), ErrorKind::kInvalidArgument,
                 "input_splits", [&] {
                   std::vector<int64_t> splits(n, 0);
                   splits[0] = 4;
                   pg.all_to_all(rows, rows, {}, splits);
                 });
  if (n > 1) {
    Tensor odd = Tensor::zeros({n + 1});
    g.expect_error(c("all_to_all of size() + 1 elements"), ErrorKind::kInvalidArgument, "split",
                   [&] { pg.all_to_all(odd, odd); });
    g.expect_error(c("send to this rank"), ErrorKind::kInvalidArgument, "peer",
                   [&] { pg.send(t, g.rank()); });
  }
}

}  // namespace
}  // namespace detail

std::vector<std::string> run_conformance(ProcessGroup& world, const Options& options) {
  using detail::GroupRun;
  std::vector<std::string> failures;
  const int n = world.size();
  try {
    GroupRun top(world, "world", options, 0x5eed0001, true, failures);
    if (options.only.empty() ||
        std::string_view("arguments").find(options.only) != std::string_view::npos) {
      detail::argument_checks(top);
    }
    top.run();
    if (options.subgroups && n >= 2) {
      std::vector<std::pair<std::vector<int>, std::string>> subs;
      std::vector<int> evens;
      for (int r = 0; r < n; r += 2) evens.push_back(r);
      subs.emplace_back(evens, "even ranks " + detail::ranks_text(evens));
      if (n >= 3) {
        // Passed in reverse order: new_group sorts the list, so group rank 0 is the lowest.
        const std::vector<int> three =
            n == 3 ? std::vector<int>{2, 1, 0} : std::vector<int>{n - 1, n / 2, 1};
        subs.emplace_back(three, "new_group(" + detail::ranks_text(three) + ")");
      }
      std::vector<std::shared_ptr<ProcessGroup>> groups;
      for (const auto& [ranks, label] : subs) {
        top.call({"new_group", label, DType::kF32, 0, {}},
                 [&] { groups.push_back(world.new_group(ranks)); });
      }
      for (size_t i = 0; i < groups.size(); ++i) {
        ProcessGroup& g = *groups[i];
        if (g.rank() >= 0) {
          GroupRun(g, subs[i].second, options, 0x5eed0002 + i, false, failures).run();
          continue;
        }
        Tensor t = Tensor::zeros({1});
        top.expect_error({"new_group", "placeholder of " + subs[i].second, DType::kF32, 1, {}},
                         ErrorKind::kInvalidArgument,
                         "world rank " + std::to_string(world.rank()) + " is not a member",
                         [&] { g.all_reduce(t); });
      }
    }
    // Every rank leaves together, after the last subgroup finished.
    if (top.supports(CollectiveKind::kBarrier)) {
      top.call({"barrier", "at the end", DType::kU8, 0, {}}, [&] { world.barrier(); });
    }
  } catch (const detail::Stop&) {
    // recorded already; peers see this rank go quiet
  }
  return failures;
}

}  // namespace braid::conformance
