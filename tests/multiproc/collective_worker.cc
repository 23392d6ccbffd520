// One rank of a fault-injection job (docs/faults.md). Started by `braid launch`, it creates
// the world ProcessGroup from the environment and runs the scenario named on its command line:
//
//   ok             a few all_reduce / all_gather / broadcast, each result checked
//   die-before K   rank K SIGKILLs itself before collective #3
//   die-during K   rank K SIGKILLs itself inside collective #kDuringKillAt of a long run of
//                  large all_reduces
//   long           the die-during run of large all_reduces without a death (tests/multinode
//                  kills a whole node from outside while it runs)
//   die-after K    every rank completes 3 collectives; rank K then exits 0 while the others
//                  call a barrier (which must fail: K never arrives)
//   stop K         rank K SIGSTOPs itself before collective #3 (the others time out)
//   mismatch K     collective #2: rank K calls broadcast, the others all_reduce
//
// Output (relayed by the launcher with a [rank N] prefix): "job <prefix> pid <pid>" first, so
// the driver can check /dev/shm and the stopped process; "completed <op> #<seq>" after each
// collective; on a braid error "error: <what()>" on stderr and exit code 3; a wrong result is
// exit code 4; a usage error 2.
//
// SIGTERM is caught (it only sets a flag): when one rank fails, the launcher SIGTERMs the
// others, and each survivor must still report its own error, which it does within one futex
// slice (50 ms) of the failure. The launcher's SIGKILL after --grace-period bounds it.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <thread>

#include "braid/comm/process_group.h"
#include "braid/core/error.h"
#include "braid/tensor/tensor.h"

namespace braid {
namespace {

constexpr int kExitBraidError = 3;
constexpr int kExitWrongResult = 4;
constexpr int kExitUsage = 2;

// die-during: 40 all_reduces of 4 Mi floats (16 MiB, several slot-sized chunks each); rank K
// dies inside #20.
constexpr int kDuringCalls = 40;
constexpr int kDuringKillAt = 20;
constexpr int64_t kDuringElements = int64_t{4} << 20;

volatile sig_atomic_t g_terminate_requested = 0;
void on_sigterm(int) {
  g_terminate_requested = 1;
}

struct Job {
  std::shared_ptr<ProcessGroup> pg;
  int rank = 0;
  int size = 0;
  int seq = 0;  // collectives completed, mirrors the front's sequence numbers
};

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

[[noreturn]] void wrong(const std::string& what) {
  std::fprintf(stderr, "wrong result: %s\n", what.c_str());
  std::fflush(stderr);
  std::exit(kExitWrongResult);
}

void completed(Job& job, const char* op) {
  say("completed " + std::string(op) + " #" + std::to_string(++job.seq));
}

// Rank r contributes r + 1 + i at element i: the sum is n (n + 1) / 2 + n i.
Tensor rank_values(int rank, int64_t count) {
  Tensor t = Tensor::empty({count});
  float* p = t.data<float>();
  for (int64_t i = 0; i < count; ++i) p[i] = float(rank + 1 + i % 1000);
  return t;
}

void all_reduce_checked(Job& job, int64_t count) {
  Tensor t = rank_values(job.rank, count);
  job.pg->all_reduce(t);
  const float* p = t.data<float>();
  const double n = job.size;
  for (int64_t i = 0; i < count; ++i) {
    const double expected = n * (n + 1) / 2 + n * double(i % 1000);
    if (p[i] != expected) {
      wrong("all_reduce element " + std::to_string(i) + " = " + std::to_string(p[i]) +
            ", expected " + std::to_string(expected));
    }
  }
  completed(job, "all_reduce");
}

void all_gather_checked(Job& job) {
  const int64_t count = 257;
  Tensor in = rank_values(job.rank, count);
  Tensor out = Tensor::zeros({job.size * count});
  job.pg->all_gather_into(out, in);
  const float* p = out.data<float>();
  for (int r = 0; r < job.size; ++r) {
    for (int64_t i = 0; i < count; ++i) {
      if (p[r * count + i] != float(r + 1 + i)) {
        wrong("all_gather block " + std::to_string(r) + " element " + std::to_string(i));
      }
    }
  }
  completed(job, "all_gather");
}

void broadcast_checked(Job& job, int root) {
  Tensor t = job.rank == root ? rank_values(root, 1000) : Tensor::zeros({1000});
  job.pg->broadcast(t, root);
  const float* p = t.data<float>();
  for (int64_t i = 0; i < 1000; ++i) {
    if (p[i] != float(root + 1 + i)) wrong("broadcast element " + std::to_string(i));
  }
  completed(job, "broadcast");
}

void scenario_ok(Job& job) {
  all_reduce_checked(job, 1000);
  all_gather_checked(job);
  broadcast_checked(job, job.size - 1);
  all_reduce_checked(job, int64_t{1} << 18);  // above the one-shot threshold: striped
}

void scenario_die_before(Job& job, int k) {
  all_reduce_checked(job, 1000);
  all_gather_checked(job);
  if (job.rank == k) {
    say("SIGKILL myself before collective #3");
    raise(SIGKILL);
  }
  all_reduce_checked(job, 1000);
}

void scenario_die_during(Job& job, int k) {
  for (int call = 1; call <= kDuringCalls; ++call) {
    if (job.rank == k && call == kDuringKillAt) {
      say("SIGKILL myself during collective #" + std::to_string(call));
      // The killer races this thread into the collective, so the kill lands inside it (or,
      // rarely, just after its last step: the others then fail in the next call).
      std::thread([] { raise(SIGKILL); }).detach();
    }
    all_reduce_checked(job, kDuringElements);
  }
}

// The die-during run with nobody dying: a test kills ranks from outside while it runs.
void scenario_long(Job& job) {
  for (int call = 1; call <= kDuringCalls; ++call) all_reduce_checked(job, kDuringElements);
}

void scenario_die_after(Job& job, int k) {
  all_reduce_checked(job, 1000);
  all_gather_checked(job);
  broadcast_checked(job, 0);
  if (job.rank == k) {
    say("exiting with 0 after the last collective");
    std::exit(0);
  }
  job.pg->barrier();  // K never arrives
  completed(job, "barrier");
}

void scenario_stop(Job& job, int k) {
  all_reduce_checked(job, 1000);
  all_gather_checked(job);
  if (job.rank == k) {
    say("SIGSTOP myself before collective #3");
    raise(SIGSTOP);
  }
  all_reduce_checked(job, 1000);
}

void scenario_mismatch(Job& job, int k) {
  all_reduce_checked(job, 1000);
  Tensor t = rank_values(job.rank, 1000);
  if (job.rank == k) {
    job.pg->broadcast(t, 0);
    completed(job, "broadcast");
  } else {
    job.pg->all_reduce(t);
    completed(job, "all_reduce");
  }
}

int run(const std::string& scenario, int k) {
  ProcessGroupOptions options;  // store_from_env, detect_rank_info, BRAID_TIMEOUT
  Job job;
  job.pg = ProcessGroup::create(options);
  job.rank = job.pg->rank();
  job.size = job.pg->size();
  if (scenario != "ok" && scenario != "long" && (k < 0 || k >= job.size)) {
    std::fprintf(stderr, "usage: rank K=%d outside [0, %d)\n", k, job.size);
    return kExitUsage;
  }
  if (scenario == "ok") {
    scenario_ok(job);
  } else if (scenario == "long") {
    scenario_long(job);
  } else if (scenario == "die-before") {
    scenario_die_before(job, k);
  } else if (scenario == "die-during") {
    scenario_die_during(job, k);
  } else if (scenario == "die-after") {
    scenario_die_after(job, k);
  } else if (scenario == "stop") {
    scenario_stop(job, k);
  } else if (scenario == "mismatch") {
    scenario_mismatch(job, k);
  } else {
    std::fprintf(stderr, "usage: unknown scenario '%s'\n", scenario.c_str());
    return kExitUsage;
  }
  say("done");
  return 0;
}

}  // namespace
}  // namespace braid

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: collective_worker ok | long | die-before K | die-during K | die-after K | "
                 "stop K | mismatch K\n");
    return 2;
  }
  struct sigaction sa {};
  sa.sa_handler = braid::on_sigterm;
  sigaction(SIGTERM, &sa, nullptr);
  const char* token = std::getenv("BRAID_STORE_TOKEN");
  std::printf("job %.12s pid %d\n", token ? token : "none", int(getpid()));
  std::fflush(stdout);
  try {
    return braid::run(argv[1], argc > 2 ? std::atoi(argv[2]) : -1);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    std::fflush(stderr);
    return 3;
  }
}
