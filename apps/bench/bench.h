// `braid bench`: nccl-tests for braid's collectives (docs/bench.md). This header is what
// apps/src/bench_command.cc and the tests see: the options (nccl-tests' flags), their
// parsing and validation, and run_bench(), which either starts N ranks of itself
// (--nproc) or runs as one rank of a job started by braid launch / mpirun.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "braid/comm/types.h"
#include "braid/core/dtype.h"

namespace braid::bench {

// The collectives braid bench measures, in the order `--op all` runs them.
enum class Op : uint8_t {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kBroadcast,
  kReduce,
  kAllToAll,
  kScatter
};
inline constexpr Op kAllOps[] = {Op::kAllReduce, Op::kAllGather, Op::kReduceScatter, Op::kBroadcast,
                                 Op::kReduce,    Op::kAllToAll,  Op::kScatter};

std::string_view op_name(Op op);                // "all_reduce", ...
bool op_reduces(Op op);                         // all_reduce, reduce_scatter, reduce
bool op_rooted(Op op);                          // broadcast, reduce
double bus_factor(Op op, int nranks);           // nccl-tests' busbw / algbw factor
std::vector<Op> parse_ops(std::string_view s);  // "all_reduce", "allreduce", "all"

struct BenchOptions {
  int64_t min_bytes = 32 << 20;     // -b (nccl-tests' default)
  int64_t max_bytes = 32 << 20;     // -e
  int64_t factor = 2;               // -f: next size = size * factor
  int iters = 20;                   // -n: iterations per timed loop
  int iters_small = 0;              // --iters-small: the same up to 8 KiB (0: -n)
  int warmup = 5;                   // -w: warm-up iterations (at the largest and smallest size)
  int repeats = 5;                  // timed loops per size; the median is reported
  DType dtype = DType::kF32;        // -d
  ReduceOp redop = ReduceOp::kSum;  // -o
  int root = 0;                     // -r
  bool check = true;                // -c
  bool shared_buffers = false;      // -R: buffers from the library's shared allocator
  std::string json_path;            // -J
  std::string loop_times_path;      // --loop-times: each rank writes its loops to PATH.rank<R>
  std::vector<Op> ops = {Op::kAllReduce};  // --op
  std::string backend = "shm";             // --backend
  int nproc = 0;                           // --nproc: >0 starts that many ranks of itself
  std::vector<std::string> peers;          // --peer: libraries to compare with ("mpi")
  int report_fd = -1;  // internal: rank 0 writes the report here (set by --nproc's parent)
};

// The largest size (the table's size column) whose timed loops make --iters-small calls: OSU
// micro-benchmarks' LARGE_MESSAGE_SIZE, below which they loop 10000 times and above it 1000.
inline constexpr int64_t kSmallMessageBytes = 8192;
// Calls per timed loop at a size: --iters-small up to kSmallMessageBytes where set, else -n.
int iters_for(const BenchOptions& options, int64_t bytes);

// nccl-tests' size syntax: a number with an optional K, M or G (powers of 1024), "64K".
// Throws kInvalidArgument naming `flag` and the text.
int64_t parse_size(std::string_view text, std::string_view flag);
// nccl-tests' names (float, half, bfloat16, int32, ...) and braid's (f32, bf16, ...).
DType parse_bench_dtype(std::string_view name);
// The name nccl-tests prints for a dtype ("float", "bfloat16", "int32", ...).
std::string_view nccl_type_name(DType dtype);
ReduceOp parse_redop(std::string_view name);  // sum, prod, min, max, avg
// Throws kInvalidArgument naming the flag, its value and the expected range.
void validate(const BenchOptions& options);
// The command-line arguments (after `braid bench`) that reproduce `options` on a rank.
std::vector<std::string> to_args(const BenchOptions& options);

// Runs the benchmark (docs/bench.md). Returns the exit status: 0, or non-zero when a check
// found wrong elements or a rank failed. Throws braid::Error on bad options or a failed
// rendezvous.
int run_bench(const BenchOptions& options);

}  // namespace braid::bench
