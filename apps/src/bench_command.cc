// `braid bench`: nccl-tests' flags and table for braid's collectives (docs/bench.md). This
// file holds only the command line; apps/bench/ does the work.
#include <memory>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "commands.h"

namespace braid::cli {
namespace {

struct RawBenchOptions {
  std::string min_bytes = "32M", max_bytes = "32M", dtype = "float", redop = "sum";
  std::vector<std::string> ops;
  int check = 1;
  int shared = 0;
};

}  // namespace

void add_bench_command(CLI::App& app) {
  auto o = std::make_shared<bench::BenchOptions>();
  auto raw = std::make_shared<RawBenchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Measure collectives, nccl-tests style (busbw table; --peer limit / mpi compare)");
  cmd->footer(
      "Run as N ranks: braid bench --nproc N ..., braid launch --nproc-per-node N braid bench "
      "..., or mpirun -np N braid bench [--peer mpi] .... See docs/bench.md.");
  cmd->add_option("-b,--minbytes", raw->min_bytes, "Smallest message (bytes; K/M/G suffixes)")
      ->capture_default_str();
  cmd->add_option("-e,--maxbytes", raw->max_bytes, "Largest message (bytes; K/M/G suffixes)")
      ->capture_default_str();
  cmd->add_option("-f,--stepfactor", o->factor, "Multiply the size by this each step")
      ->capture_default_str();
  cmd->add_option("-n,--iters", o->iters, "Iterations per timed loop")->capture_default_str();
  cmd->add_option("--iters-small", o->iters_small,
                  "Iterations per timed loop for sizes up to 8 KiB (OSU's convention; 0: -n)")
      ->capture_default_str();
  cmd->add_option("-w,--warmup_iters", o->warmup, "Warm-up iterations")->capture_default_str();
  cmd->add_option("--repeats", o->repeats, "Timed loops per size; the median is reported")
      ->capture_default_str();
  cmd->add_option("-d,--datatype", raw->dtype, "float, half, bfloat16, double, int32, ...")
      ->capture_default_str();
  cmd->add_option("-o,--op-type", raw->redop, "Reduction: sum, prod, min, max, avg")
      ->capture_default_str();
  cmd->add_option("-r,--root", o->root, "Root rank of broadcast, reduce and scatter")
      ->capture_default_str();
  cmd->add_option("-c,--check", raw->check, "1: check results (#wrong), 0: do not")
      ->capture_default_str();
  cmd->add_option("-R,--shared-buffers", raw->shared,
                  "1: buffers from the backend's shared allocator (shm: zero-copy), 0: malloc")
      ->capture_default_str();
  cmd->add_option("-J,--json", o->json_path, "Also write the results to this JSON file");
  cmd->add_option("--loop-times", o->loop_times_path,
                  "Each rank appends every timed loop's time to PATH.rank<R> (docs/bench.md)");
  cmd->add_option(
      "--op", raw->ops,
      "all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all, scatter or all "
      "(repeatable; default all_reduce)");
  cmd->add_option("--backend", o->backend, "braid backend to measure")->capture_default_str();
  cmd->add_option("--nproc", o->nproc, "Start this many ranks on this node (else: one rank)");
  cmd->add_option(
      "--peer", o->peers,
      "Also measure this library and print ratios: limit (the bare shm data path), mpi");
  cmd->add_option("--report-fd", o->report_fd)->group("");  // internal: set by --nproc
  cmd->callback([o, raw] {
    o->min_bytes = bench::parse_size(raw->min_bytes, "-b");
    o->max_bytes = bench::parse_size(raw->max_bytes, "-e");
    o->dtype = bench::parse_bench_dtype(raw->dtype);
    o->redop = bench::parse_redop(raw->redop);
    o->check = raw->check != 0;
    o->shared_buffers = raw->shared != 0;
    if (!raw->ops.empty()) {
      o->ops.clear();
      for (const std::string& s : raw->ops) {
        for (bench::Op op : bench::parse_ops(s)) o->ops.push_back(op);
      }
    }
    int code = bench::run_bench(*o);
    if (code != 0) throw CommandExit{code};
  });
}

}  // namespace braid::cli
