// Helpers of the point-to-point collectives' tests (p2p_collectives_test.cc,
// p2p_fused_check_test.cc): ranks as threads over the thread transport (p2p_test_transport.h),
// a call's descriptor, and the error of a call.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../src/p2p_collectives.h"
#include "braid/core/error.h"
#include "p2p_test_transport.h"

namespace braid::p2p::testing {

using std::chrono::milliseconds;

// How on_ranks makes each rank's backend: its options and its transport over the shared
// fabric (default: the thread transport itself).
struct RankSetup {
  std::function<Options(int rank)> options = [](int) { return Options{}; };
  std::function<std::unique_ptr<Transport>(std::shared_ptr<Fabric>, int rank)> transport =
      [](std::shared_ptr<Fabric> fabric, int rank) {
        return std::make_unique<ThreadTransport>(std::move(fabric), rank);
      };
  milliseconds timeout{5000};
};

// Runs fn(rank, backend) on n threads over one fabric; returns each rank's exception.
template <class Fn>
inline std::vector<std::exception_ptr> on_ranks(int n, const RankSetup& setup, Fn fn) {
  auto fabric = std::make_shared<Fabric>(n);
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        BackendContext ctx;
        ctx.rank = r;
        ctx.size = n;
        ctx.timeout = setup.timeout;
        auto b = make_p2p_backend("p2p", ctx, setup.transport(fabric, r), setup.options(r));
        fn(r, *b);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// The same, every rank with `options`.
template <class Fn>
inline std::vector<std::exception_ptr> on_ranks(int n, Options options, Fn fn,
                                                milliseconds timeout = milliseconds(5000)) {
  RankSetup setup;
  setup.options = [options](int) { return options; };
  setup.timeout = timeout;
  return on_ranks(n, setup, fn);
}

inline void expect_ok(const std::vector<std::exception_ptr>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) {
    if (!errors[r]) continue;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << r << ": " << e.what();
    }
  }
}

// Runs `d` and throws its error, if any.
inline void run(Backend& b, const CollectiveDesc& d) {
  auto w = b.run(d);
  ASSERT_TRUE(w->test());
  if (w->error()) std::rethrow_exception(w->error());
}

inline CollectiveDesc desc(CollectiveKind kind, DType dtype, int64_t count, uint64_t seq) {
  CollectiveDesc d;
  d.kind = kind;
  d.dtype = dtype;
  d.count = count;
  d.seq = seq;
  d.signature = seq * 131 + static_cast<uint64_t>(kind);
  return d;
}

inline Options with(Algo algo) {
  Options o;
  o.algo = algo;
  return o;
}

inline std::string message(const std::exception_ptr& e, ErrorKind* kind) {
  try {
    std::rethrow_exception(e);
  } catch (const Error& err) {
    *kind = err.kind();
    return err.what();
  }
}

}  // namespace braid::p2p::testing
