// sweep(): buffers sized once per collective for the largest message (as nccl-tests), warm-up
// at the largest and smallest size, then per size the timed loops and the check.
#include "bench/sweep.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "bench/check.h"
#include "bench/device_memory.h"
#include "braid/core/allocator.h"
#include "braid/core/error.h"

namespace braid::bench {
namespace {

// Frees through braid's cpu allocator (the block's DataPtr), through the library that
// handed the block out (-R 1), or on the GPU a GPU backend works on.
struct BufferDeleter {
  Collectives* lib = nullptr;
  std::shared_ptr<DataPtr> block;  // -R 0: released with the deleter
  Device device = kCPU;            // not the host: device memory (device_memory.h)
  void operator()(unsigned char* p) const {
    if (!device.is_host()) {
      device_free(device, p);
    } else if (lib) {
      lib->release_shared(p);
    }
  }
};
using Buffer = std::unique_ptr<unsigned char, BufferDeleter>;

// From braid's cpu allocator, as a tensor's storage (64-byte aligned; 4 MiB and more on
// transparent huge pages, docs/environment.md "cpu allocator"), or from the library's shared
// allocator with -R 1 where it has one; touched, so no page fault lands inside a timed loop.
Buffer make_buffer(int64_t bytes, Collectives& lib, bool shared) {
  const size_t size = (static_cast<size_t>(std::max<int64_t>(bytes, 1)) + 4095) / 4096 * 4096;
  if (const Device device = lib.memory_device(); !device.is_host()) {
    auto* p = static_cast<unsigned char*>(device_allocate(device, size));  // zeroed
    return Buffer(p, BufferDeleter{nullptr, nullptr, device});
  }
  if (shared) {
    if (void* p = lib.allocate_shared(size)) {
      std::memset(p, 0, size);
      return Buffer(static_cast<unsigned char*>(p), BufferDeleter{&lib, nullptr});
    }
  }
  auto block = std::make_shared<DataPtr>(get_allocator(Device(DeviceType::kCPU)).allocate(size));
  auto* p = static_cast<unsigned char*>(block->get());
  std::memset(p, 0, size);
  return Buffer(p, BufferDeleter{nullptr, std::move(block)});
}

// nccl-tests' per-rank count for a message of `bytes` (setupArgs / getCollByteCount).
int64_t count_for(Op op, int64_t bytes, DType dtype, int nranks) {
  const int64_t base = bytes / static_cast<int64_t>(dtype_size(dtype));
  const bool split =
      op == Op::kAllGather || op == Op::kReduceScatter || op == Op::kAllToAll || op == Op::kScatter;
  return split ? base / nranks : base;
}

struct Buffers {
  Buffer send, recv;
  CallBuffers call(Op op, int64_t count, bool in_place, int rank, size_t elem) const {
    CallBuffers b;
    b.count = count;
    b.in_place = in_place;
    b.recv = recv.get();
    b.send = send.get();
    if (!in_place) return b;
    const size_t block = static_cast<size_t>(count) * elem * static_cast<size_t>(rank);
    if (op == Op::kAllGather) {
      b.send = recv.get() + block;
    } else if (op == Op::kReduceScatter || op == Op::kScatter) {
      b.recv = send.get() + block;
    } else {
      b.send = b.recv;
    }
    return b;
  }
};

class Runner {
 public:
  Runner(Collectives& lib, const BenchOptions& o, Op op) : lib_(lib), o_(o), op_(op) {
    n_ = lib.size();
    elem_ = dtype_size(o.dtype);
    const int64_t max_count = count_for(op, o.max_bytes, o.dtype, n_);
    const bool shared = o.shared_buffers;
    send_bytes_ = static_cast<size_t>(input_elements(op, max_count, n_)) * elem_;
    recv_bytes_ = static_cast<size_t>(result_elements(op, max_count, n_)) * elem_;
    bufs_.send = make_buffer(static_cast<int64_t>(send_bytes_), lib, shared);
    bufs_.recv = make_buffer(static_cast<int64_t>(recv_bytes_), lib, shared);
  }
  ~Runner() { write_loop_times(); }
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  void warmup(int64_t bytes) {
    const int64_t count = count_for(op_, bytes, o_.dtype, n_);
    CallBuffers b = bufs_.call(op_, count, false, lib_.rank(), elem_);
    for (int i = 0; i < o_.warmup; ++i) call(b);
  }

  // The row's size columns, before any measurement.
  Row start_row(int64_t bytes) const {
    Row r;
    r.count = count_for(op_, bytes, o_.dtype, n_);
    r.bytes = std::max(input_elements(op_, r.count, n_), result_elements(op_, r.count, n_)) *
              static_cast<int64_t>(elem_);
    return r;
  }

  Row row(int64_t bytes) {
    Row r = start_row(bytes);
    r.out_of_place = measure(r, false);
    r.in_place = measure(r, true);
    return r;
  }

  // One timed loop: barrier, then -n back-to-back calls; seconds per call. `interleaved`
  // (another library's loop runs next): one untimed call first, because that library's
  // buffers, not this one's, are in the caches; and an untimed barrier last
  // (Note [Hand-over between libraries]).
  double loop(const Row& r, bool in_place, bool interleaved) {
    CallBuffers b = bufs_.call(op_, r.count, in_place, lib_.rank(), elem_);
    if (interleaved) call(b);
    const int iters = iters_for(o_, r.bytes);
    lib_.barrier();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) call(b);
    std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    if (interleaved) lib_.barrier();
    return dt.count() / iters;
  }

  // The figures from this rank's loops: the median loop averaged over ranks (a collective of
  // this library, so every rank calls it), then the check.
  Measure summarize(const Row& r, bool in_place, std::vector<double> per_iter) {
    if (!o_.loop_times_path.empty()) record_loops(r, in_place, per_iter);
    std::nth_element(per_iter.begin(), per_iter.begin() + per_iter.size() / 2, per_iter.end());
    const double sec = lib_.sum_across(per_iter[per_iter.size() / 2]) / n_;
    Measure m;
    m.time_us = sec * 1e6;
    m.algbw = sec > 0 ? static_cast<double>(r.bytes) / 1e9 / sec : 0;
    m.busbw = m.algbw * bus_factor(op_, n_);
    if (o_.check) m.wrong = check(bufs_.call(op_, r.count, in_place, lib_.rank(), elem_));
    lib_.barrier();  // Note [Hand-over between libraries]
    return m;
  }

 private:
  void* call(const CallBuffers& b) {
    return lib_.run(op_, b, o_.dtype, o_.redop, op_rooted(op_) ? o_.root : 0);
  }

  Measure measure(const Row& r, bool in_place) {
    std::vector<double> per_iter;
    for (int rep = 0; rep < o_.repeats; ++rep) per_iter.push_back(loop(r, in_place, false));
    return summarize(r, in_place, std::move(per_iter));
  }

  // --loop-times: one line per timed loop, kept until the Runner ends (no file I/O between
  // loops): library, op, size, placement, loop (in order), calls, microseconds per call.
  void record_loops(const Row& r, bool in_place, const std::vector<double>& per_iter) {
    for (size_t k = 0; k < per_iter.size(); ++k) {
      loop_times_ += lib_.name() + '\t' + std::string(op_name(op_)) + '\t' +
                     std::to_string(r.bytes) + '\t' + (in_place ? "in_place" : "out_of_place") +
                     '\t' + std::to_string(k) + '\t' + std::to_string(iters_for(o_, r.bytes)) +
                     '\t' + std::to_string(per_iter[k] * 1e6) + '\n';
    }
  }
  void write_loop_times() noexcept {
    if (loop_times_.empty()) return;
    const std::string path = o_.loop_times_path + ".rank" + std::to_string(lib_.rank());
    if (std::FILE* f = std::fopen(path.c_str(), "a")) {
      std::fwrite(loop_times_.data(), 1, loop_times_.size(), f);
      std::fclose(f);
    } else {
      std::fprintf(stderr, "braid bench: --loop-times: cannot append to %s\n", path.c_str());
    }
  }

  int64_t check(const CallBuffers& b) {
    CheckCall c{op_, o_.dtype, o_.redop, lib_.rank(), n_, o_.root};
    const Device device = lib_.memory_device();
    if (!device.is_host()) return check_on_device(c, b, device);
    fill_inputs(c, b);
    void* result = call(b);
    const double wrong = static_cast<double>(count_wrong(c, result, b.count));
    return static_cast<int64_t>(lib_.sum_across(wrong));
  }

  // The same on device buffers: inputs filled in host mirrors of both buffers (the same
  // offsets) and copied over, the result copied back where the call left it.
  int64_t check_on_device(const CheckCall& c, const CallBuffers& b, Device device) {
    std::vector<unsigned char> send(send_bytes_), recv(recv_bytes_);
    auto* dev_send = bufs_.send.get();
    auto* dev_recv = bufs_.recv.get();
    auto mirror = [&](const void* p) -> unsigned char* {
      auto* q = static_cast<const unsigned char*>(p);
      if (q >= dev_send && q < dev_send + send_bytes_) return send.data() + (q - dev_send);
      return recv.data() + (q - dev_recv);
    };
    CallBuffers host = b;
    host.send = mirror(b.send);
    host.recv = mirror(b.recv);
    fill_inputs(c, host);
    copy_to_device(device, dev_send, send.data(), send_bytes_);
    copy_to_device(device, dev_recv, recv.data(), recv_bytes_);
    auto* result = static_cast<unsigned char*>(call(b));
    const size_t bytes = static_cast<size_t>(result_elements(op_, b.count, n_)) * elem_;
    unsigned char* host_result = mirror(result);
    copy_to_host(device, host_result, result, bytes);
    const double wrong = static_cast<double>(count_wrong(c, host_result, b.count));
    return static_cast<int64_t>(lib_.sum_across(wrong));
  }

  Collectives& lib_;
  const BenchOptions& o_;
  Op op_;
  int n_ = 1;
  size_t elem_ = 4;
  size_t send_bytes_ = 0, recv_bytes_ = 0;  // as asked for (make_buffer rounds up)
  Buffers bufs_;
  std::string loop_times_;  // record_loops()
};

}  // namespace

int64_t OpResult::wrong_total() const {
  int64_t w = 0;
  for (const Row& r : rows) {
    w += std::max<int64_t>(r.out_of_place.wrong, 0) + std::max<int64_t>(r.in_place.wrong, 0);
  }
  return w;
}

double OpResult::avg_busbw() const {
  if (rows.empty()) return 0;
  double sum = 0;
  for (const Row& r : rows) sum += r.out_of_place.busbw + r.in_place.busbw;
  return sum / (2.0 * static_cast<double>(rows.size()));
}

namespace {

// The result's name columns; a Runner, warmed up, unless the library cannot run the op.
std::unique_ptr<Runner> start(Collectives& lib, const BenchOptions& o, Op op, OpResult& result) {
  result.library = lib.name();
  result.op = op;
  result.root = op_rooted(op) ? o.root : -1;
  result.skipped = lib.unsupported(op, o.dtype, o.redop);
  if (!result.skipped.empty()) return nullptr;
  BRAID_CHECK(o.root < lib.size(), kOutOfRange, "-r ", o.root, ": expected a rank below the ",
              lib.size(), " ranks of the job");
  auto runner = std::make_unique<Runner>(lib, o, op);
  runner->warmup(o.max_bytes);
  runner->warmup(o.min_bytes);
  return runner;
}

// -b, -b x -f, ... up to -e.
std::vector<int64_t> sizes(const BenchOptions& o) {
  std::vector<int64_t> out;
  for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes;
       bytes = std::max<int64_t>(bytes * o.factor, bytes + 1)) {
    out.push_back(bytes);
  }
  return out;
}

}  // namespace

// Note [Hand-over between libraries]: a library may let a rank leave a collective while
// some of its messages still wait in the library's own queues, to go out the next time that
// rank progresses it: OpenMPI's tcp btl does, and MPI progresses only inside MPI calls. In an
// interleaved sweep such a rank then enters the other library's loop, and the rank that
// waits for those messages never leaves the first library: each blocks in a different
// library until braid's deadline. Seen in bench/netns/run.sh with 2 ranks per node: node 0's
// ranks in MPI_Allgather, node 1's in braid's next call, until braid timed out (docs/bench.md).
// So in an interleaved sweep every loop ends with its own library's barrier, and so does every
// summary (in any sweep): a rank leaves it only once every rank has entered it, so every rank
// has finished the library's collectives before, and the rank waiting in it keeps progressing
// the library.
std::vector<OpResult> sweep_interleaved(const std::vector<Collectives*>& libs,
                                        const BenchOptions& o, Op op) {
  std::vector<OpResult> results(libs.size());
  std::vector<std::unique_ptr<Runner>> runners;
  for (size_t i = 0; i < libs.size(); ++i) runners.push_back(start(*libs[i], o, op, results[i]));
  for (int64_t bytes : sizes(o)) {
    std::vector<Row> rows(libs.size());
    for (size_t i = 0; i < libs.size(); ++i) {
      if (runners[i]) rows[i] = runners[i]->start_row(bytes);
    }
    for (bool in_place : {false, true}) {
      std::vector<std::vector<double>> loops(libs.size());
      for (int rep = 0; rep < o.repeats; ++rep) {
        for (size_t i = 0; i < libs.size(); ++i) {
          if (runners[i]) loops[i].push_back(runners[i]->loop(rows[i], in_place, true));
        }
      }
      for (size_t i = 0; i < libs.size(); ++i) {
        if (!runners[i]) continue;
        (in_place ? rows[i].in_place : rows[i].out_of_place) =
            runners[i]->summarize(rows[i], in_place, std::move(loops[i]));
      }
    }
    for (size_t i = 0; i < libs.size(); ++i) {
      if (runners[i]) results[i].rows.push_back(rows[i]);
    }
  }
  return results;
}

OpResult sweep(Collectives& lib, const BenchOptions& o, Op op, const RowSink& sink) {
  OpResult result;
  std::unique_ptr<Runner> runner = start(lib, o, op, result);
  if (!runner) return result;
  for (int64_t bytes : sizes(o)) {
    result.rows.push_back(runner->row(bytes));
    if (sink) sink(result, result.rows.back());
  }
  return result;
}

}  // namespace braid::bench
