// How much of a collective an async call hides behind the caller's computation (docs/comm.md,
// "Async calls"; docs/performance.md, "Async calls overlap"). Each rank of `braid launch`
// alternates four ways of spending one iteration:
//   comm      a blocking all_reduce of `bytes` (f32, sum)
//   compute   `passes` passes of y = a x + y over two 1 MiB f32 vectors of its own (fixed work),
//             or, given as "<N>ms", N ms of sleep: a host thread idle while a device computes
//   serial    compute, then the blocking all_reduce
//   overlap   the all_reduce with AsyncOp::kYes, compute, then wait on its Work
// and rank 0 prints the median per-iteration time of each (over `repeats` loops of `iters`
// iterations, every rank's loop ending in a barrier), and the share of the shorter of comm and
// compute that the overlap hid: (serial - overlap) / min(comm, compute). The peer is the
// serial form, in the same run. Every all_reduce's result is checked.
//
//   braid launch --nproc-per-node N braid_bench_overlap [backend (auto)] [bytes (4194304)]
//                [passes (200) | idle time ("5ms")] [iters (10)] [repeats (5)]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "braid/comm/process_group.h"
#include "braid/core/error.h"

namespace {

using namespace braid;
using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// `passes` passes of y = a x + y; returns a value that depends on every element, so the work
// cannot be dropped.
float compute(std::vector<float>& x, std::vector<float>& y, int passes) {
  for (int p = 0; p < passes; ++p) {
    const float a = 1.0f / static_cast<float>(p + 2);
    for (size_t i = 0; i < y.size(); ++i) y[i] = a * x[i] + y[i] * 0.5f;
  }
  return y[y.size() / 3];
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string backend = argc > 1 ? argv[1] : "auto";
    const int64_t bytes = argc > 2 ? std::atoll(argv[2]) : int64_t{4} << 20;
    const std::string work = argc > 3 ? argv[3] : "200";
    const bool idle = work.size() > 2 && work.compare(work.size() - 2, 2, "ms") == 0;
    const int passes = idle ? 0 : std::atoi(work.c_str());
    const std::chrono::duration<double, std::milli> idle_time(idle ? std::atof(work.c_str()) : 0);
    const int iters = argc > 4 ? std::atoi(argv[4]) : 10;
    const int repeats = argc > 5 ? std::atoi(argv[5]) : 5;
    ProcessGroupOptions po;
    po.backend = backend;
    auto pg = ProcessGroup::create(po);
    const int rank = pg->rank(), size = pg->size();
    const int64_t count = bytes / 4;
    Tensor t = Tensor::empty({count}, DType::kF32);
    std::vector<float> x(1 << 18, 1.0f), y(1 << 18, 0.0f);
    float sink = 0;
    int64_t wrong = 0;
    auto fill = [&] {
      auto* p = static_cast<float*>(t.data_ptr());
      for (int64_t i = 0; i < count; ++i) p[i] = static_cast<float>(rank + 1);
    };
    auto check = [&] {
      const auto* p = static_cast<const float*>(t.data_ptr());
      const float want = static_cast<float>(size * (size + 1) / 2);
      for (int64_t i = 0; i < count; i += 997) wrong += p[i] != want;
    };
    CallOptions async;
    async.async = AsyncOp::kYes;
    const char* names[] = {"comm", "compute", "serial", "overlap"};
    auto one = [&](int mode) {
      fill();
      if (mode == 0) {
        pg->all_reduce(t);
      } else if (mode == 1) {
        sink += idle ? (std::this_thread::sleep_for(idle_time), 0.0f) : compute(x, y, passes);
        return;
      } else if (mode == 2) {
        sink += idle ? (std::this_thread::sleep_for(idle_time), 0.0f) : compute(x, y, passes);
        pg->all_reduce(t);
      } else {
        auto work = pg->all_reduce(t, async);
        sink += idle ? (std::this_thread::sleep_for(idle_time), 0.0f) : compute(x, y, passes);
        work->wait();
      }
      check();
    };
    std::vector<std::vector<double>> ms(4);
    for (int mode = 0; mode < 4; ++mode) one(mode);  // warm-up
    for (int r = 0; r < repeats; ++r) {
      for (int k = 0; k < 4; ++k) {
        const int mode = (k + r) % 4;  // the order rotates from loop to loop
        pg->barrier();
        const auto start = Clock::now();
        for (int i = 0; i < iters; ++i) one(mode);
        pg->barrier();
        ms[mode].push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count() /
                           iters);
      }
    }
    if (rank == 0) {
      const std::string what = idle ? work + " idle" : work + " compute passes";
      std::printf(
          "# %d ranks, backend %s, all_reduce of %lld bytes, %s, %d x %d iterations; wrong "
          "elements %lld (sink %g)\n",
          size, std::string(pg->backend().name()).c_str(), static_cast<long long>(bytes),
          what.c_str(), repeats, iters, static_cast<long long>(wrong), sink);
      for (int m = 0; m < 4; ++m) std::printf("%-8s %8.3f ms\n", names[m], median(ms[m]));
      const double comm = median(ms[0]), comp = median(ms[1]);
      const double hidden = (median(ms[2]) - median(ms[3])) / std::min(comm, comp);
      std::printf("hidden   %8.2f of min(comm, compute)\n", hidden);
    }
    std::printf("done\n");  // tests/multinode/run_netns.sh's "ok" looks for it on every rank
    return wrong == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "braid_bench_overlap: %s\n", e.what());
    return 2;
  }
}
