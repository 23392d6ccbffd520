// One rank of a conformance or fault job on any backend (docs/multinode.md). Started by
// `braid launch` or by mpirun, it creates the world ProcessGroup with the named backend from the
// environment (store, rank and size as every braid program gets them) and runs a scenario:
//
//   conformance_worker --backend NAME [--counts 0,1,7,4099,70001] [--dtypes f32,bf16,...]
//                      [--only COLLECTIVE] [conformance | long]
//
//   conformance  (default) the conformance suite (comm/tests/conformance): each failure line is
//                printed as "FAIL: <line>" on stderr and the exit code is 1; "done" and exit 0
//                when every case passed on this rank
//   long         40 all_reduces of 4 Mi floats (16 MiB), each result checked, each printed as
//                "completed all_reduce #N": the run a test kills a whole node during
//
// A braid error is printed as "error: <what()>" on stderr with exit code 3 (as
// collective_worker), a wrong result in `long` is exit code 4, a usage error 2. SIGTERM only sets
// a flag: when a launcher stops a node's ranks after the first failure, every rank still reports
// its own error (the launcher's SIGKILL after --grace-period bounds that).
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "braid/comm/process_group.h"
#include "braid/core/dtype.h"
#include "braid/core/error.h"
#include "braid/tensor/tensor.h"
#include "conformance.h"

namespace braid {
namespace {

constexpr int kExitFailures = 1;
constexpr int kExitUsage = 2;
constexpr int kExitBraidError = 3;
constexpr int kExitWrongResult = 4;

// long: as collective_worker's, large enough that every all_reduce is many transport messages.
constexpr int kLongCalls = 40;
constexpr int64_t kLongElements = int64_t{4} << 20;

volatile sig_atomic_t g_terminate_requested = 0;
void on_sigterm(int) {
  g_terminate_requested = 1;
}

struct Args {
  std::string backend;
  std::string scenario = "conformance";
  conformance::Options options;
};

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

// "0,1,7" -> {0, 1, 7}; throws kInvalidArgument naming the flag and the bad item.
std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> items;
  size_t begin = 0;
  while (begin <= list.size()) {
    size_t end = list.find(',', begin);
    if (end == std::string::npos) end = list.size();
    items.push_back(list.substr(begin, end - begin));
    begin = end + 1;
  }
  return items;
}

std::vector<int64_t> parse_counts(const std::string& list) {
  std::vector<int64_t> counts;
  for (const std::string& item : split(list)) {
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    BRAID_CHECK(!item.empty() && *end == '\0' && v >= 0, kInvalidArgument, "--counts item '", item,
                "' in '", list, "'; expected non-negative integers separated by commas");
    counts.push_back(v);
  }
  return counts;
}

Args parse_args(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--backend" && has_value) {
      args.backend = argv[++i];
    } else if (a == "--counts" && has_value) {
      args.options.counts = parse_counts(argv[++i]);
    } else if (a == "--dtypes" && has_value) {
      for (const std::string& name : split(argv[++i])) {
        args.options.dtypes.push_back(parse_dtype(name));
      }
    } else if (a == "--only" && has_value) {
      args.options.only = argv[++i];
    } else if (a == "conformance" || a == "long") {
      args.scenario = a;
    } else {
      BRAID_FAIL(kInvalidArgument, "argument '", a,
                 "'; expected --backend NAME, --counts LIST, --dtypes LIST, --only NAME, and the "
                 "scenario conformance or long");
    }
  }
  BRAID_CHECK(!args.backend.empty(), kInvalidArgument,
              "--backend is missing; expected one of this build's backends: ", [] {
                std::string names;
                for (const auto& n : backend_names()) names += (names.empty() ? "" : ", ") + n;
                return names;
              }());
  return args;
}

// Rank r contributes r + 1 + (i mod 1000) at element i: the sum over n ranks is
// n (n + 1) / 2 + n (i mod 1000), exact in f32 for these sizes.
void long_all_reduce(ProcessGroup& pg, int call) {
  Tensor t = Tensor::empty({kLongElements});
  float* p = t.data<float>();
  for (int64_t i = 0; i < kLongElements; ++i) p[i] = float(pg.rank() + 1 + i % 1000);
  pg.all_reduce(t);
  const double n = pg.size();
  for (int64_t i = 0; i < kLongElements; ++i) {
    const double expected = n * (n + 1) / 2 + n * double(i % 1000);
    if (p[i] != expected) {
      std::fprintf(stderr, "wrong result: all_reduce #%d element %lld = %g, expected %g\n", call,
                   static_cast<long long>(i), double(p[i]), expected);
      std::exit(kExitWrongResult);
    }
  }
  say("completed all_reduce #" + std::to_string(call));
}

int run(const Args& args) {
  ProcessGroupOptions options;  // store_from_env, detect_rank_info, BRAID_TIMEOUT
  options.backend = args.backend;
  std::shared_ptr<ProcessGroup> pg = ProcessGroup::create(options);
  int code = 0;
  if (args.scenario == "long") {
    for (int call = 1; call <= kLongCalls; ++call) long_all_reduce(*pg, call);
  } else {
    const std::vector<std::string> failures = conformance::run_conformance(*pg, args.options);
    for (const std::string& line : failures) std::fprintf(stderr, "FAIL: %s\n", line.c_str());
    std::fflush(stderr);
    code = failures.empty() ? 0 : kExitFailures;
  }
  if (code != 0) return code;  // a case that threw may have left the group unusable
  // Under mpirun rank 0 serves the store in-process, and transports close their connections at
  // exit: nobody leaves before every rank is done.
  pg->barrier();
  say("done");
  return 0;
}

}  // namespace
}  // namespace braid

int main(int argc, char** argv) {
  struct sigaction sa {};
  sa.sa_handler = braid::on_sigterm;
  sigaction(SIGTERM, &sa, nullptr);
  braid::Args args;
  try {
    args = braid::parse_args(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "usage: %s\n", e.what());
    return braid::kExitUsage;
  }
  try {
    return braid::run(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    std::fflush(stderr);
    return braid::kExitBraidError;
  }
}
