// run_bench(): the two ways braid bench runs.
//   --nproc N: this process is a launcher. It starts N ranks of `braid bench` through the
//     launcher library (apps/launch, the same code as `braid launch`), passing them a
//     duplicate of its stdout (--report-fd) so rank 0's table reaches the console without
//     the launcher's "[rank 0] " prefix.
//   otherwise: this process is one rank (braid launch, mpirun, or alone). Peers start first
//     (MPI_Init), then braid's group, then the sweeps (with peers: every collective's timed
//     loops interleaved, library by library); rank 0 prints and writes -J.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "bench/collectives.h"
#include "bench/machine_probe.h"
#include "bench/report.h"
#include "bench/sweep.h"
#include "braid/comm/rank_info.h"
#include "braid/comm/store.h"
#include "braid/core/environment.h"
#include "braid/core/error.h"
#include "launch/job.h"

namespace braid::bench {
namespace {

std::string self_executable() {
  char path[4096];
  ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  BRAID_CHECK(n > 0, kIo, "braid bench --nproc: cannot read /proc/self/exe");
  return std::string(path, static_cast<size_t>(n));
}

int launch_ranks(const BenchOptions& o) {
  for (const std::string& p : o.peers) {
    BRAID_CHECK(p != "mpi", kInvalidArgument,
                "--nproc with --peer mpi: MPI needs its own launcher; run "
                "`mpirun -np N braid bench --peer mpi ...` instead");
  }
  // F_DUPFD (not F_DUPFD_CLOEXEC): the ranks inherit it across exec.
  int fd = ::fcntl(1, F_DUPFD, 3);
  BRAID_CHECK(fd >= 0, kIo, "braid bench --nproc: cannot duplicate stdout");
  launch::LaunchOptions lo;
  lo.nproc_per_node = o.nproc;
  lo.command = {self_executable(), "bench"};
  for (std::string& a : to_args(o)) lo.command.push_back(std::move(a));
  lo.command.insert(lo.command.end(), {"--report-fd", std::to_string(fd)});
  std::fflush(stdout);
  int code = 0;
  try {
    code = launch::run_job(lo);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return code;
}

// Rank 0's console: the inherited --report-fd, else stdout.
class Out {
 public:
  Out(bool active, int fd) : active_(active) {
    if (active_ && fd >= 0) file_ = ::fdopen(::dup(fd), "w");
    if (active_ && file_ == nullptr) file_ = stdout;
  }
  ~Out() {
    if (file_ != nullptr && file_ != stdout) std::fclose(file_);
  }
  void print(const std::string& s) {
    if (!active_) return;
    std::fputs(s.c_str(), file_);
    std::fflush(file_);
  }

 private:
  bool active_;
  std::FILE* file_ = nullptr;
};

std::shared_ptr<Store> braid_store(const RankInfo& me,
                                   const std::vector<std::unique_ptr<PeerSession>>& peers) {
  if (get_env_string("MASTER_PORT") && get_env_string("BRAID_STORE_TOKEN")) {
    return store_from_env();
  }
  for (const auto& p : peers) {
    if (auto s = p->bootstrap_store()) return s;
  }
  if (me.world_size == 1) return std::make_shared<InMemoryStore>();
  BRAID_FAIL(kInvalidArgument, "braid bench: rank ", me.rank, " of ", me.world_size, " (from ",
             me.source,
             ") has no store to meet the other ranks: MASTER_PORT and BRAID_STORE_TOKEN are not "
             "set. Use `braid bench --nproc N`, `braid launch`, or under mpirun `--peer mpi` "
             "(or export both variables with mpirun -x)");
}

// One collective's finished table: heading, header, rows and footer (or why it was skipped).
void print_table(Out& out, const BenchOptions& o, const OpResult& r) {
  out.print(format_heading(r.op, r.library));
  if (!r.skipped.empty()) {
    out.print(format_skipped(r));
    return;
  }
  out.print(format_header());
  for (const Row& row : r.rows) out.print(format_row(r, row, o) + "\n");
  out.print(format_footer(r));
}

// With --peer: each collective's sweep runs every library's timed loops in turn
// (sweep_interleaved); the tables are printed when the collective is done. Results per
// library, in the order of `libs`.
std::vector<std::vector<OpResult>> run_interleaved(const std::vector<Collectives*>& libs,
                                                   const BenchOptions& o, Out& out) {
  for (Collectives* lib : libs) out.print(format_preamble(o, lib->name(), lib->size()));
  out.print("# timed loops of the libraries above interleaved, loop by loop\n");
  std::vector<std::vector<OpResult>> per_lib(libs.size());
  for (Op op : o.ops) {
    std::vector<OpResult> results = sweep_interleaved(libs, o, op);
    for (size_t i = 0; i < libs.size(); ++i) {
      print_table(out, o, results[i]);
      per_lib[i].push_back(std::move(results[i]));
    }
  }
  return per_lib;
}

std::vector<OpResult> run_sweeps(Collectives& lib, const BenchOptions& o, Out& out) {
  std::vector<OpResult> results;
  out.print(format_preamble(o, lib.name(), lib.size()));
  for (Op op : o.ops) {
    out.print(format_heading(op, lib.name()));
    bool header = false;
    auto sink = [&](const OpResult& r, const Row& row) {
      if (!header) out.print(format_header());
      header = true;
      out.print(format_row(r, row, o) + "\n");
    };
    results.push_back(sweep(lib, o, op, sink));
    const OpResult& r = results.back();
    out.print(r.skipped.empty() ? format_footer(r) : format_skipped(r));
  }
  return results;
}

int64_t total_wrong(const std::vector<OpResult>& results) {
  int64_t w = 0;
  for (const OpResult& r : results) w += r.wrong_total();
  return w;
}

// The first line of /proc/stat (CPU time by kind); empty where there is none.
std::string cpu_stat_line() {
  std::ifstream f("/proc/stat");
  std::string line;
  std::getline(f, line);
  return line;
}

int run_rank(const BenchOptions& o) {
  const std::string stat_before = cpu_stat_line();
  const RankInfo me = detect_rank_info();
  std::vector<std::unique_ptr<PeerSession>> peers;  // outlive braid's group (declared first)
  for (const std::string& name : o.peers) peers.push_back(start_peer(name));
  const std::shared_ptr<Store> store = braid_store(me, peers);
  for (auto& p : peers) p->attach(store, me.rank, me.world_size);
  std::unique_ptr<Collectives> braid = make_braid_collectives(store, o.backend);

  Out out(braid->rank() == 0, o.report_fd);
  const MachineProbe probe_start = probe_machine(*store, me.rank, me.world_size, "start");
  std::vector<OpResult> all;
  if (peers.empty()) {
    all = run_sweeps(*braid, o, out);
  } else {
    std::vector<Collectives*> libs = {braid.get()};
    for (auto& p : peers) libs.push_back(&p->collectives());
    std::vector<std::vector<OpResult>> per_lib = run_interleaved(libs, o, out);
    for (size_t i = 1; i < per_lib.size(); ++i) out.print(format_ratios(per_lib[0], per_lib[i]));
    for (auto& r : per_lib) all.insert(all.end(), r.begin(), r.end());
  }
  const MachineProbe probe_end = probe_machine(*store, me.rank, me.world_size, "end");
  out.print(format_probe(probe_start, probe_end));
  out.print(format_steal(cpu_steal(stat_before, cpu_stat_line())));
  if (braid->rank() == 0 && !o.json_path.empty()) {
    std::ofstream f(o.json_path);
    f << to_json(o, braid->size(), all);
    BRAID_CHECK(f.good(), kIo, "-J ", o.json_path, ": cannot write the JSON file");
  }
  braid->barrier();  // nobody tears down the group while a peer still uses it
  return total_wrong(all) > 0 ? 1 : 0;
}

}  // namespace

int run_bench(const BenchOptions& options) {
  validate(options);
  if (options.nproc > 0) return launch_ranks(options);
  return run_rank(options);
}

}  // namespace braid::bench
