// The collectives of the conformance grid that move data without reducing it: broadcast,
// all_gather, all_to_all (equal and variable splits, with zero-length blocks), gather,
// scatter, send / recv in a ring with two tags, and barrier. Each in the placements the front
// offers: tensor calls, list and one-buffer forms, raw descriptors for in-place and
// out-of-place where the tensor calls have only one of them.
#include <algorithm>
#include <cstring>

#include "suite.h"

namespace braid::conformance::detail {
namespace {

CallOptions async_call() {
  CallOptions o;
  o.async = AsyncOp::kYes;
  return o;
}

uint8_t* bytes_at(const Tensor& t, int64_t element) {
  return static_cast<uint8_t*>(t.data_ptr()) + bytes_of(t.dtype(), element);
}

CollectiveDesc raw_desc(CollectiveKind kind, DType dtype, int64_t count, const void* send,
                        void* recv, int root) {
  CollectiveDesc d;
  d.kind = kind;
  d.dtype = dtype;
  d.count = count;
  d.send = send;
  d.recv = recv;
  d.root = root;
  return d;
}

// Elements rank s sends to rank d in the all_to_all_v cases (at most `count`); every pair with
// (s + 2d) % 4 == 1 sends nothing, so each group size has zero-length blocks.
int64_t v_count(int s, int d, int64_t count) {
  if ((s + 2 * d) % 4 == 1) return 0;
  return (count * (s + 1) + 3 * d) % (count + 1);
}

// The same, symmetric in s and d: in place, a rank receives from d what it sends to d.
int64_t sym_count(int s, int d, int64_t count) {
  if ((s + d) % 3 == 1) return 0;
  return (count * (s + d + 1) + s * d) % (count + 1);
}

struct Layout {
  std::vector<int64_t> counts, offsets;
  int64_t extent = 0;
};

// Blocks of `counts` one after another with `gap` unused elements after each.
Layout layout(std::vector<int64_t> counts, int64_t gap) {
  Layout l;
  l.counts = std::move(counts);
  for (int64_t c : l.counts) {
    l.offsets.push_back(l.extent);
    l.extent += c + gap;
  }
  return l;
}

Layout send_layout(int s, int n, int64_t count, int64_t gap, bool symmetric) {
  std::vector<int64_t> counts;
  for (int d = 0; d < n; ++d)
    counts.push_back(symmetric ? sym_count(s, d, count) : v_count(s, d, count));
  return layout(counts, gap);
}

Layout recv_layout(int d, int n, int64_t count, int64_t gap) {
  std::vector<int64_t> counts;
  for (int s = 0; s < n; ++s) counts.push_back(v_count(s, d, count));
  return layout(counts, gap);
}

}  // namespace

void GroupRun::broadcast(DType dtype, int64_t count) {
  for (int root : roots(count)) {
    const Source s = source(dtype);
    const Bytes want = input_bytes(s, root, 0, count);
    Case c{"broadcast", "tensor, in-place", dtype, count, {}, root};
    Tensor t = me_ == root ? input_tensor(s, root, 0, {count}) : sentinel_tensor(dtype, {count});
    call(c, [&] { pg_.broadcast(t, root); });
    expect(c, t.data_ptr(), want);
    if (large(count)) continue;  // one placement at large counts

    c.form = "raw, out-of-place";
    Tensor in = me_ == root ? input_tensor(s, root, 0, {count}) : Tensor();
    Tensor out = sentinel_tensor(dtype, {count});
    call(c, [&] {
      pg_.run(raw_desc(CollectiveKind::kBroadcast, dtype, count,
                       me_ == root ? in.data_ptr() : nullptr, out.data_ptr(), root));
    });
    expect(c, out.data_ptr(), want);
    if (me_ == root) expect_unchanged(c, in.data_ptr(), s, 0, count);
  }
}

void GroupRun::all_gather(DType dtype, int64_t count) {
  const Source s = source(dtype);
  Bytes want;
  for (int r = 0; r < n_; ++r) {
    const Bytes block = input_bytes(s, r, 0, count);
    want.insert(want.end(), block.begin(), block.end());
  }

  Case c{"all_gather", "one buffer [size, count], out-of-place", dtype, count};
  const Tensor in = input_tensor(s, me_, 0, {count});
  Tensor out = sentinel_tensor(dtype, {n_, count});
  call(c, [&] { pg_.all_gather_into(out, in); });
  expect(c, out.data_ptr(), want);
  expect_unchanged(c, in.data_ptr(), s, 0, count);
  if (large(count)) return;  // one placement at large counts

  c.form = "list, async";
  const Tensor in2 = input_tensor(s, me_, 0, {count});
  std::vector<Tensor> outputs;
  for (int r = 0; r < n_; ++r) outputs.push_back(sentinel_tensor(dtype, {count}));
  call(c, [&] { pg_.all_gather(outputs, in2, async_call())->wait(); });
  for (int r = 0; r < n_; ++r) {
    expect(c, outputs[r].data_ptr(), input_bytes(s, r, 0, count),
           "outputs[" + std::to_string(r) + "]");
  }
  expect_unchanged(c, in2.data_ptr(), s, 0, count);

  c.form = "one buffer, in-place (input is this rank's block of the output)";
  Tensor buf = sentinel_tensor(dtype, {n_ * count});
  fill_input(s, me_, 0, count, bytes_at(buf, me_ * count));
  const Tensor block = buf.narrow(0, me_ * count, count);
  call(c, [&] { pg_.all_gather_into(buf, block); });
  expect(c, buf.data_ptr(), want);
}

void GroupRun::all_to_all(DType dtype, int64_t count) {
  const Source s = source(dtype);
  Bytes want;  // block r: what rank r's input holds for this rank
  for (int r = 0; r < n_; ++r) {
    const Bytes block = input_bytes(s, r, me_ * count, count);
    want.insert(want.end(), block.begin(), block.end());
  }
  Case c{"all_to_all", "out-of-place", dtype, count};
  const Tensor in = input_tensor(s, me_, 0, {n_ * count});
  Tensor out = sentinel_tensor(dtype, {n_ * count});
  call(c, [&] { pg_.all_to_all(out, in); });
  expect(c, out.data_ptr(), want);
  expect_unchanged(c, in.data_ptr(), s, 0, n_ * count);
  if (large(count)) return;

  c.form = "in-place";
  Tensor t = input_tensor(s, me_, 0, {n_ * count});
  call(c, [&] { pg_.all_to_all(t, t); });
  expect(c, t.data_ptr(), want);
}

void GroupRun::all_to_all_v(DType dtype, int64_t count) {
  const Source s = source(dtype);
  const size_t es = dtype_size(dtype);
  if (!large(count)) {
    // Tensor call: rows of 2 elements, splits in rows.
    const Layout sl = send_layout(me_, n_, count, 0, false);
    const Layout rl = recv_layout(me_, n_, count, 0);
    Bytes want;
    for (int r = 0; r < n_; ++r) {
      const int64_t row = send_layout(r, n_, count, 0, false).offsets[me_];
      const Bytes block = input_bytes(s, r, 2 * row, 2 * rl.counts[r]);
      want.insert(want.end(), block.begin(), block.end());
    }
    Case c{"all_to_all_v", "tensor [rows, 2] with splits", dtype, count};
    const Tensor in = input_tensor(s, me_, 0, {sl.extent, 2});
    Tensor out = sentinel_tensor(dtype, {rl.extent, 2});
    call(c, [&] { pg_.all_to_all(out, in, rl.counts, sl.counts); });
    expect(c, out.data_ptr(), want);
    expect_unchanged(c, in.data_ptr(), s, 0, 2 * sl.extent);
  }
  {
    // Raw, out-of-place, a gap after every block: offsets matter, and the gaps stay untouched.
    const Layout sl = send_layout(me_, n_, count, 1, false);
    const Layout rl = recv_layout(me_, n_, count, 2);
    Bytes want(bytes_of(dtype, rl.extent), 0xA5);
    for (int r = 0; r < n_; ++r) {
      const int64_t from = send_layout(r, n_, count, 1, false).offsets[me_];
      const Bytes block = input_bytes(s, r, from, rl.counts[r]);
      if (!block.empty()) std::memcpy(want.data() + rl.offsets[r] * es, block.data(), block.size());
    }
    Case c{"all_to_all_v", "raw with gaps between blocks, out-of-place", dtype, count};
    const Tensor in = input_tensor(s, me_, 0, {sl.extent});
    Tensor out = sentinel_tensor(dtype, {rl.extent});
    CollectiveDesc d =
        raw_desc(CollectiveKind::kAllToAllV, dtype, 1, in.data_ptr(), out.data_ptr(), 0);
    d.send_counts = sl.counts;
    d.send_offsets = sl.offsets;
    d.recv_counts = rl.counts;
    d.recv_offsets = rl.offsets;
    call(c, [&] { pg_.run(d); });
    expect(c, out.data_ptr(), want);
    expect_unchanged(c, in.data_ptr(), s, 0, sl.extent);
  }
  if (!large(count)) {
    // Raw, in place: one layout for both sides (counts symmetric between each pair).
    const Layout l = send_layout(me_, n_, count, 1, true);
    Bytes want = input_bytes(s, me_, 0, l.extent);  // the gaps keep this rank's input
    for (int r = 0; r < n_; ++r) {
      const int64_t from = send_layout(r, n_, count, 1, true).offsets[me_];
      const Bytes block = input_bytes(s, r, from, l.counts[r]);
      if (!block.empty()) std::memcpy(want.data() + l.offsets[r] * es, block.data(), block.size());
    }
    Case c{"all_to_all_v", "raw, in-place", dtype, count};
    Tensor buf = input_tensor(s, me_, 0, {l.extent});
    CollectiveDesc d =
        raw_desc(CollectiveKind::kAllToAllV, dtype, 1, buf.data_ptr(), buf.data_ptr(), 0);
    d.send_counts = d.recv_counts = l.counts;
    d.send_offsets = d.recv_offsets = l.offsets;
    call(c, [&] { pg_.run(d); });
    expect(c, buf.data_ptr(), want);
  }
}

void GroupRun::gather(DType dtype, int64_t count) {
  for (int root : roots(count)) {
    const Source s = source(dtype);
    const Tensor in = input_tensor(s, me_, 0, {count});
    Case c{"gather", "list, async", dtype, count, {}, root};
    std::vector<Tensor> outputs;
    if (me_ == root) {
      for (int r = 0; r < n_; ++r) outputs.push_back(sentinel_tensor(dtype, {count}));
    }
    call(c, [&] { pg_.gather(outputs, in, root, async_call())->wait(); });
    for (size_t r = 0; r < outputs.size(); ++r) {
      expect(c, outputs[r].data_ptr(), input_bytes(s, static_cast<int>(r), 0, count),
             "outputs[" + std::to_string(r) + "]");
    }
    expect_unchanged(c, in.data_ptr(), s, 0, count);
    if (large(count)) continue;

    // In place at the root (its input already in its block); the others name no recv buffer.
    c.form = "raw, in-place at the root";
    Tensor buf = sentinel_tensor(dtype, {me_ == root ? n_ * count : 0});
    if (me_ == root) fill_input(s, me_, 0, count, bytes_at(buf, root * count));
    CollectiveDesc d =
        me_ == root ? raw_desc(CollectiveKind::kGather, dtype, count, bytes_at(buf, root * count),
                               buf.data_ptr(), root)
                    : raw_desc(CollectiveKind::kGather, dtype, count, in.data_ptr(), nullptr, root);
    call(c, [&] { pg_.run(d); });
    if (me_ != root) continue;
    Bytes want;
    for (int r = 0; r < n_; ++r) {
      const Bytes block = input_bytes(s, r, 0, count);
      want.insert(want.end(), block.begin(), block.end());
    }
    expect(c, buf.data_ptr(), want);
  }
}

void GroupRun::scatter(DType dtype, int64_t count) {
  for (int root : roots(count)) {
    const Source s = source(dtype);
    const Bytes want = input_bytes(s, root, me_ * count, count);
    Case c{"scatter", "list", dtype, count, {}, root};
    std::vector<Tensor> inputs;
    if (me_ == root) {
      for (int r = 0; r < n_; ++r) inputs.push_back(input_tensor(s, root, r * count, {count}));
    }
    Tensor out = sentinel_tensor(dtype, {count});
    call(c, [&] { pg_.scatter(out, inputs, root); });
    expect(c, out.data_ptr(), want);
    if (large(count)) continue;

    // In place at the root (its block stays where it is); the others name no send buffer.
    c.form = "raw, in-place at the root";
    Tensor buf = me_ == root ? input_tensor(s, root, 0, {n_ * count}) : Tensor();
    Tensor out2 = sentinel_tensor(dtype, {count});
    CollectiveDesc d = me_ == root ? raw_desc(CollectiveKind::kScatter, dtype, count,
                                              buf.data_ptr(), bytes_at(buf, root * count), root)
                                   : raw_desc(CollectiveKind::kScatter, dtype, count, nullptr,
                                              out2.data_ptr(), root);
    call(c, [&] { pg_.run(d); });
    if (me_ == root) {
      expect_unchanged(c, buf.data_ptr(), s, 0, n_ * count);
    } else {
      expect(c, out2.data_ptr(), want);
    }
  }
}

void GroupRun::send_recv(DType dtype, int64_t count) {
  if (n_ == 1) return;  // no peer but itself
  const Source s = source(dtype);
  const int next = (me_ + 1) % n_, prev = (me_ + n_ - 1) % n_;
  const int64_t second = count / 2 + 1;  // another size, so sizes cannot be swapped unseen
  const Tensor out1 = input_tensor(s, me_, 0, {count});
  const Tensor out2 = input_tensor(s, me_, count, {second});
  Tensor in1 = sentinel_tensor(dtype, {count});
  Tensor in2 = sentinel_tensor(dtype, {second});
  Case c{"send_recv", "ring to rank + 1, tags 1 then 2", dtype, count};
  auto sends = [&] {
    pg_.send(out1, next, 1);
    pg_.send(out2, next, 2);
  };
  auto recvs = [&] {
    pg_.recv(in1, prev, 1);
    pg_.recv(in2, prev, 2);
  };
  // Even ranks send first, odd ranks receive first: a blocking ring cannot deadlock, since
  // every cycle of waits passes an odd rank that receives before it sends.
  call(c, [&] {
    if (me_ % 2 == 0) {
      sends();
      recvs();
    } else {
      recvs();
      sends();
    }
  });
  expect(c, in1.data_ptr(), input_bytes(s, prev, 0, count), "tag 1");
  expect(c, in2.data_ptr(), input_bytes(s, prev, count, second), "tag 2");
}

// Async calls queued back to back, then a blocking one (docs/comm.md, "Async calls"): on a
// backend that runs_on_any_thread the async ones run on the group's communication thread and
// the blocking one waits for them; every result exact, every Work waited on only at the end.
void GroupRun::async_queue() {
  auto summable = std::find_if(dtypes_.begin(), dtypes_.end(),
                               [](DType d) { return op_allowed(ReduceOp::kSum, d); });
  if (summable == dtypes_.end()) return;
  const DType dtype = *summable;
  const int64_t count = 4099;
  const int root = n_ - 1;
  const Source s = source(dtype);
  Case c{"async",        "all_reduce, broadcast, all_gather list async, then a blocking barrier",
         dtype,          count,
         ReduceOp::kSum, root};
  Tensor reduced = input_tensor(s, me_, 0, {count});
  Tensor broadcasted =
      me_ == root ? input_tensor(s, root, count, {count}) : sentinel_tensor(dtype, {count});
  const Tensor in = input_tensor(s, me_, 2 * count, {count});
  std::vector<Tensor> gathered;
  for (int r = 0; r < n_; ++r) gathered.push_back(sentinel_tensor(dtype, {count}));
  call(c, [&] {
    auto a = pg_.all_reduce(reduced, async_call());  // the default op: sum
    auto b = pg_.broadcast(broadcasted, root, async_call());
    auto g = pg_.all_gather(gathered, in, async_call());
    pg_.barrier();
    a->wait();
    b->wait();
    g->wait();
  });
  expect(c, reduced.data_ptr(), reduce_reference(s, ReduceOp::kSum, 0, count), "all_reduce");
  expect(c, broadcasted.data_ptr(), input_bytes(s, root, count, count), "broadcast");
  for (int r = 0; r < n_; ++r) {
    expect(c, gathered[r].data_ptr(), input_bytes(s, r, 2 * count, count),
           "all_gather outputs[" + std::to_string(r) + "]");
  }
}

void GroupRun::barrier() {
  const Case c{"barrier", "twice", DType::kU8, 0};
  call(c, [&] {
    pg_.barrier();
    pg_.barrier(async_call())->wait();
  });
}

}  // namespace braid::conformance::detail
