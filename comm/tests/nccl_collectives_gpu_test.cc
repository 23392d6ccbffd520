// The nccl backend's collectives on CUDA device memory (label gpu; each test skips with the
// reason where no GPU is visible). Every collective of the conformance grid runs through the
// ProcessGroup front (raw descriptors: braid's tensors have no CUDA runtime yet) on one rank and,
// with two GPUs, on two ranks as forked processes; each result is checked exactly on the host.
// Values are small integers, exact in every dtype used, so NCCL's reduction order does not
// matter.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include "braid/comm/rank_info.h"
#include "braid/core/error.h"
#include "braid/core/float_types.h"
#include "comm_test_util.h"
#include "nccl_test_util.h"

namespace braid {
namespace {

using std::chrono::milliseconds;
using testing::DeviceArray;
using testing::expect_equal;

// Rank r's element i of a case: small, distinct per rank.
float value(int r, int64_t i) {
  return static_cast<float>(r * 16 + i % 13 + 1);
}

struct Ranks {
  int me, n;
  Device device;
  ProcessGroup& pg;

  void run(CollectiveDesc d, const CallOptions& o = {}) {
    d.device = device;
    d.dtype = d.kind == CollectiveKind::kBarrier ? DType::kU8 : d.dtype;
    pg.run(std::move(d), o);  // blocking: waits for the GPU, throws the call's error
  }
  std::vector<float> input(int r, int64_t count, int64_t offset = 0) const {
    std::vector<float> v(count);
    for (int64_t i = 0; i < count; ++i) v[i] = value(r, offset + i);
    return v;
  }
};

void reductions(Ranks& k, int64_t count) {
  const std::string at = " (count " + std::to_string(count) + ")";
  DeviceArray<float> in(k.input(k.me, count));
  struct OpCase {
    ReduceOp op;
    const char* name;
  };
  for (OpCase oc :
       {OpCase{ReduceOp::kSum, "sum"}, OpCase{ReduceOp::kMax, "max"}, OpCase{ReduceOp::kMin, "min"},
        OpCase{ReduceOp::kAvg, "avg"}, OpCase{ReduceOp::kPremulSum, "premul_sum"}}) {
    std::vector<float> want(count);
    for (int64_t i = 0; i < count; ++i) {
      float acc = oc.op == ReduceOp::kMin ? 1e30f : oc.op == ReduceOp::kMax ? -1e30f : 0.0f;
      for (int r = 0; r < k.n; ++r) {
        const float x = value(r, i);
        if (oc.op == ReduceOp::kMin) acc = std::min(acc, x);
        if (oc.op == ReduceOp::kMax) acc = std::max(acc, x);
        if (oc.op == ReduceOp::kSum || oc.op == ReduceOp::kAvg) acc += x;
        if (oc.op == ReduceOp::kPremulSum) acc += 0.5f * static_cast<float>(r + 1) * x;
      }
      want[i] = oc.op == ReduceOp::kAvg ? acc / static_cast<float>(k.n) : acc;
    }
    DeviceArray<float> out(count);
    CollectiveDesc d;
    d.kind = CollectiveKind::kAllReduce;
    d.send = in.ptr;
    d.recv = out.ptr;
    d.count = count;
    d.op = oc.op;
    d.premul_factor = 0.5 * (k.me + 1);
    k.run(d);
    expect_equal(out.host(), want, std::string("all_reduce ") + oc.name + at);
    d.kind = CollectiveKind::kReduce;
    d.root = k.n - 1;
    DeviceArray<float> rout(count);
    d.recv = rout.ptr;
    k.run(d);
    if (k.me == d.root) expect_equal(rout.host(), want, std::string("reduce ") + oc.name + at);
  }
  // reduce_scatter: rank r's input holds n blocks; block p goes to rank p.
  DeviceArray<float> rs_in(k.input(k.me, count * k.n));
  DeviceArray<float> rs_out(count);
  CollectiveDesc d;
  d.kind = CollectiveKind::kReduceScatter;
  d.send = rs_in.ptr;
  d.recv = rs_out.ptr;
  d.count = count;
  k.run(d);
  std::vector<float> want(count, 0.0f);
  for (int64_t i = 0; i < count; ++i) {
    for (int r = 0; r < k.n; ++r) want[i] += value(r, k.me * count + i);
  }
  expect_equal(rs_out.host(), want, "reduce_scatter" + at);
  // In place: the result at this rank's block of the input.
  d.recv = rs_in.ptr + k.me * count;
  k.run(d);
  std::vector<float> all = rs_in.host();
  expect_equal(std::vector<float>(all.begin() + k.me * count, all.begin() + (k.me + 1) * count),
               want, "reduce_scatter in place" + at);
}

void moves(Ranks& k, int64_t count) {
  const std::string at = " (count " + std::to_string(count) + ")";
  const int root = k.n - 1;
  DeviceArray<float> in(k.input(k.me, count));
  {  // broadcast, in place
    DeviceArray<float> buf(k.input(k.me, count));
    CollectiveDesc d;
    d.kind = CollectiveKind::kBroadcast;
    d.send = d.recv = buf.ptr;
    d.count = count;
    d.root = root;
    k.run(d);
    expect_equal(buf.host(), k.input(root, count), "broadcast" + at);
  }
  std::vector<float> gathered;
  for (int r = 0; r < k.n; ++r) {
    auto v = k.input(r, count);
    gathered.insert(gathered.end(), v.begin(), v.end());
  }
  {  // all_gather, out of place and in place
    DeviceArray<float> out(count * k.n);
    CollectiveDesc d;
    d.kind = CollectiveKind::kAllGather;
    d.send = in.ptr;
    d.recv = out.ptr;
    d.count = count;
    k.run(d);
    expect_equal(out.host(), gathered, "all_gather" + at);
    DeviceArray<float> buf(count * k.n);
    cudaMemcpy(buf.ptr + k.me * count, in.ptr, count * sizeof(float), cudaMemcpyDeviceToDevice);
    d.send = buf.ptr + k.me * count;
    d.recv = buf.ptr;
    k.run(d);
    expect_equal(buf.host(), gathered, "all_gather in place" + at);
  }
  {  // gather to the root, scatter from it
    DeviceArray<float> out(count * k.n);
    CollectiveDesc d;
    d.kind = CollectiveKind::kGather;
    d.send = in.ptr;
    d.recv = k.me == root ? out.ptr : nullptr;
    d.count = count;
    d.root = root;
    k.run(d);
    if (k.me == root) expect_equal(out.host(), gathered, "gather" + at);
    DeviceArray<float> src(gathered);
    DeviceArray<float> mine(count);
    d.kind = CollectiveKind::kScatter;
    d.send = k.me == root ? src.ptr : nullptr;
    d.recv = mine.ptr;
    k.run(d);
    expect_equal(mine.host(), k.input(k.me, count), "scatter" + at);
  }
  {  // all_to_all: block p of rank r is value(r, p * count + i); out of place, then in place
    DeviceArray<float> send(k.input(k.me, count * k.n));
    DeviceArray<float> recv(count * k.n);
    std::vector<float> want;
    for (int p = 0; p < k.n; ++p) {
      auto v = k.input(p, count, k.me * count);
      want.insert(want.end(), v.begin(), v.end());
    }
    CollectiveDesc d;
    d.kind = CollectiveKind::kAllToAll;
    d.send = send.ptr;
    d.recv = recv.ptr;
    d.count = count;
    k.run(d);
    expect_equal(recv.host(), want, "all_to_all" + at);
    d.recv = send.ptr;
    k.run(d);
    expect_equal(send.host(), want, "all_to_all in place" + at);
  }
  {  // all_to_all_v: rank r sends p + r + 1 elements to p (from offset p * 8 of its value run)
    CollectiveDesc d;
    d.kind = CollectiveKind::kAllToAllV;
    d.count = 1;
    int64_t send_total = 0, recv_total = 0;
    for (int p = 0; p < k.n; ++p) {
      d.send_counts.push_back(p + k.me + 1);
      d.send_offsets.push_back(send_total);
      send_total += p + k.me + 1;
      d.recv_counts.push_back(k.me + p + 1);
      d.recv_offsets.push_back(recv_total + 1);  // a gap of one element before each block
      recv_total += k.me + p + 2;
    }
    std::vector<float> src;
    for (int p = 0; p < k.n; ++p) {
      auto v = k.input(k.me, p + k.me + 1, p * 8);
      src.insert(src.end(), v.begin(), v.end());
    }
    DeviceArray<float> send(src);
    DeviceArray<float> recv(recv_total);
    d.send = send.ptr;
    d.recv = recv.ptr;
    k.run(d);
    const std::vector<float> got = recv.host();
    for (int p = 0; p < k.n; ++p) {
      const auto block = std::vector<float>(got.begin() + d.recv_offsets[p],
                                            got.begin() + d.recv_offsets[p] + d.recv_counts[p]);
      expect_equal(block, k.input(p, k.me + p + 1, k.me * 8),
                   "all_to_all_v block from rank " + std::to_string(p));
    }
  }
  if (k.n >= 2) {  // send / recv around a ring
    DeviceArray<float> got(count);
    const int next = (k.me + 1) % k.n, prev = (k.me + k.n - 1) % k.n;
    CollectiveDesc s;
    s.kind = CollectiveKind::kSend;
    s.send = in.ptr;
    s.count = count;
    s.peer = next;
    CollectiveDesc r = s;
    r.kind = CollectiveKind::kRecv;
    r.send = nullptr;
    r.recv = got.ptr;
    r.peer = prev;
    if (k.me % 2 == 0) {
      k.run(s);
      k.run(r);
    } else {
      k.run(r);
      k.run(s);
    }
    expect_equal(got.host(), k.input(prev, count), "send / recv" + at);
  }
  CollectiveDesc b;
  b.kind = CollectiveKind::kBarrier;
  k.run(b);
}

// Integer and narrow dtypes: all_reduce sum of rank + 1 in i32, u8 (max), bf16.
void other_dtypes(Ranks& k) {
  DeviceArray<int32_t> i32(std::vector<int32_t>(5, k.me + 1));
  CollectiveDesc d;
  d.kind = CollectiveKind::kAllReduce;
  d.send = d.recv = i32.ptr;
  d.count = 5;
  d.dtype = DType::kI32;
  k.run(d);
  expect_equal(i32.host(), std::vector<int32_t>(5, k.n * (k.n + 1) / 2), "all_reduce i32");
  DeviceArray<uint8_t> u8(std::vector<uint8_t>(3, static_cast<uint8_t>(k.me + 1)));
  d.send = d.recv = u8.ptr;
  d.count = 3;
  d.dtype = DType::kU8;
  d.op = ReduceOp::kMax;
  k.run(d);
  expect_equal(u8.host(), std::vector<uint8_t>(3, static_cast<uint8_t>(k.n)), "all_reduce u8 max");
  DeviceArray<uint16_t> bf(std::vector<uint16_t>(4, bfloat16(static_cast<float>(k.me + 1)).bits));
  d.send = d.recv = bf.ptr;
  d.count = 4;
  d.dtype = DType::kBF16;
  d.op = ReduceOp::kSum;
  k.run(d);
  const uint16_t want = bfloat16(static_cast<float>(k.n * (k.n + 1) / 2)).bits;
  expect_equal(bf.host(), std::vector<uint16_t>(4, want), "all_reduce bf16");
}

// The caller's stream orders the call: input copied in, collective, result copied out, all
// queued on one stream without a host wait in between, then one synchronize.
void stream_order(Ranks& k) {
  cudaStream_t stream = nullptr;
  testing::cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  const int64_t count = 1 << 20;
  std::vector<float> host_in = k.input(k.me, count), host_out(count, -1.0f);
  DeviceArray<float> buf(count);
  testing::cuda_ok(cudaMemcpyAsync(buf.ptr, host_in.data(), count * sizeof(float),
                                   cudaMemcpyHostToDevice, stream),
                   "cudaMemcpyAsync");
  CollectiveDesc d;
  d.kind = CollectiveKind::kAllReduce;
  d.send = d.recv = buf.ptr;
  d.count = count;
  CallOptions o;
  o.async = AsyncOp::kYes;
  o.stream = Stream{k.device, stream};
  d.device = k.device;
  auto work = k.pg.run(d, o);
  testing::cuda_ok(cudaMemcpyAsync(host_out.data(), buf.ptr, count * sizeof(float),
                                   cudaMemcpyDeviceToHost, stream),
                   "cudaMemcpyAsync");
  testing::cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  work->wait();
  std::vector<float> want(count, 0.0f);
  for (int64_t i = 0; i < count; ++i) {
    for (int r = 0; r < k.n; ++r) want[i] += value(r, i);
  }
  expect_equal(host_out, want, "all_reduce ordered on the caller's stream");
  cudaStreamDestroy(stream);
}

void every_collective(int rank, int n, std::shared_ptr<Store> store) {
  ::setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
  auto pg = testing::make_group(rank, n, std::move(store), "nccl", milliseconds(60000));
  int count = 0;
  testing::cuda_ok(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  Ranks k{rank, n, Device(DeviceType::kCUDA, default_device_index(rank, count)), *pg};
  testing::cuda_ok(cudaSetDevice(k.device.index), "cudaSetDevice");
  for (int64_t c : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{4099}}) {
    reductions(k, c);
    moves(k, c);
  }
  other_dtypes(k);
  stream_order(k);
}

TEST(NcclCollectives, EveryCollectiveOnOneRank) {
  BRAID_REQUIRE_GPUS(1);
  const auto result = testing::run_processes(1, every_collective, testing::StoreKind::kTcp);
  EXPECT_TRUE(result.ok()) << result.summary();
}

TEST(NcclCollectives, EveryCollectiveOnTwoRanks) {
  BRAID_REQUIRE_GPUS(2);
  const auto result = testing::run_processes(2, every_collective, testing::StoreKind::kTcp);
  EXPECT_TRUE(result.ok()) << result.summary();
}

// Calls the backend refuses keep the group usable: a buffer on another device, a dtype NCCL
// lacks (i16), memory on the host.
TEST(NcclCollectives, RefusedCallsNameTheReasonAndLeaveTheGroupUsable) {
  BRAID_REQUIRE_GPUS(1);
  const auto result = testing::run_processes(
      1,
      [](int rank, int n, std::shared_ptr<Store> store) {
        auto pg = testing::make_group(rank, n, std::move(store), "nccl", milliseconds(60000));
        DeviceArray<float> buf(std::vector<float>(4, 1.0f));
        CollectiveDesc d;
        d.kind = CollectiveKind::kAllReduce;
        d.send = d.recv = buf.ptr;
        d.count = 4;
        auto refused = [&](Device device, DType dtype, ErrorKind kind, const std::string& part) {
          CollectiveDesc e = d;
          e.device = device;
          e.dtype = dtype;
          try {
            pg->run(e);
          } catch (const Error& err) {
            if (err.kind() == kind && err.message().find(part) != std::string::npos) return;
            throw;
          }
          throw std::runtime_error("accepted a call on " + device.str() + ": " + part);
        };
        refused(Device(DeviceType::kCUDA, 7), DType::kF32, ErrorKind::kInvalidArgument,
                "this group's communicator is on cuda:0");
        refused(Device(DeviceType::kCUDA, 0), DType::kI16, ErrorKind::kNotSupported,
                "does not support dtype i16");
        refused(kCPU, DType::kF32, ErrorKind::kNotSupported, "cannot use memory on device cpu");
        d.device = Device(DeviceType::kCUDA, 0);
        pg->run(d);
        expect_equal(buf.host(), std::vector<float>(4, 1.0f), "all_reduce after refusals");
      },
      testing::StoreKind::kTcp);
  EXPECT_TRUE(result.ok()) << result.summary();
}

}  // namespace
}  // namespace braid
