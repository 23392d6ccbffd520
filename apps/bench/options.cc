// Parsing and validation of braid bench's options: nccl-tests' size syntax, dtype and op
// names, and the reverse (to_args) that --nproc uses to start its ranks with the same sweep.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <string>

#include "bench/bench.h"
#include "braid/core/error.h"

namespace braid::bench {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

struct TypeName {
  const char* name;
  DType dtype;
};
// nccl-tests' names first: the first entry of a dtype is the one printed.
constexpr TypeName kTypeNames[] = {
    {"float", DType::kF32},       {"half", DType::kF16},        {"bfloat16", DType::kBF16},
    {"double", DType::kF64},      {"int8", DType::kI8},         {"uint8", DType::kU8},
    {"int32", DType::kI32},       {"int64", DType::kI64},       {"int16", DType::kI16},
    {"fp8_e4m3", DType::kF8E4M3}, {"fp8_e5m2", DType::kF8E5M2}, {"char", DType::kI8},
    {"int", DType::kI32},         {"float32", DType::kF32},     {"float16", DType::kF16},
    {"float64", DType::kF64},
};

}  // namespace

std::string_view op_name(Op op) {
  switch (op) {
    case Op::kAllReduce:
      return "all_reduce";
    case Op::kAllGather:
      return "all_gather";
    case Op::kReduceScatter:
      return "reduce_scatter";
    case Op::kBroadcast:
      return "broadcast";
    case Op::kReduce:
      return "reduce";
    case Op::kAllToAll:
      return "all_to_all";
    case Op::kScatter:
      return "scatter";
  }
  return "?";
}

bool op_reduces(Op op) {
  return op == Op::kAllReduce || op == Op::kReduceScatter || op == Op::kReduce;
}
bool op_rooted(Op op) {
  return op == Op::kBroadcast || op == Op::kReduce || op == Op::kScatter;
}

// nccl-tests (src/*.cu, getBw): the bytes each rank's link must carry, relative to algbw.
double bus_factor(Op op, int nranks) {
  const double n = nranks;
  switch (op) {
    case Op::kAllReduce:
      return 2.0 * (n - 1) / n;
    case Op::kAllGather:
    case Op::kReduceScatter:
    case Op::kAllToAll:
    case Op::kScatter:
      return (n - 1) / n;
    case Op::kBroadcast:
    case Op::kReduce:
      return 1.0;
  }
  return 1.0;
}

std::vector<Op> parse_ops(std::string_view s) {
  std::string want = lower(s);
  if (want == "all") return {std::begin(kAllOps), std::end(kAllOps)};
  std::erase(want, '_');
  for (Op op : kAllOps) {
    std::string name(op_name(op));
    std::erase(name, '_');
    if (name == want) return {op};
  }
  BRAID_FAIL(kInvalidArgument, "--op '", s,
             "': expected all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all, "
             "scatter or all");
}

int64_t parse_size(std::string_view text, std::string_view flag) {
  std::string t(text);
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
  double mult = 1;
  if (!t.empty()) {
    switch (std::tolower(static_cast<unsigned char>(t.back()))) {
      case 'k':
        mult = 1024.0;
        break;
      case 'm':
        mult = 1024.0 * 1024;
        break;
      case 'g':
        mult = 1024.0 * 1024 * 1024;
        break;
      default:
        break;
    }
    if (mult != 1) t.pop_back();
  }
  double value = -1;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
  BRAID_CHECK(!t.empty() && ec == std::errc() && end == t.data() + t.size() && value >= 0 &&
                  std::isfinite(value) && value * mult < 9.0e18,
              kInvalidArgument, flag, " '", text,
              "': expected a size in bytes, a non-negative number with an optional K, M or G "
              "suffix (powers of 1024), e.g. 8, 64K, 1M");
  return static_cast<int64_t>(value * mult);
}

DType parse_bench_dtype(std::string_view name) {
  const std::string want = lower(name);
  for (const TypeName& t : kTypeNames) {
    if (want == t.name) return t.dtype;
  }
  BRAID_CHECK(want != "uint32" && want != "uint64", kNotSupported, "-d '", name,
              "': braid has no unsigned 32- or 64-bit dtype; use int32 / int64");
  std::optional<DType> d = dtype_from_name(name);
  BRAID_CHECK(d.has_value() && *d != DType::kBool, kInvalidArgument, "-d '", name,
              "': expected a dtype: float, half, bfloat16, double, int8, uint8, int16, int32, "
              "int64, fp8_e4m3, fp8_e5m2 (nccl-tests' names) or braid's (f32, bf16, i32, ...)");
  return *d;
}

std::string_view nccl_type_name(DType dtype) {
  for (const TypeName& t : kTypeNames) {
    if (t.dtype == dtype) return t.name;
  }
  return dtype_name(dtype);
}

ReduceOp parse_redop(std::string_view name) {
  const std::string want = lower(name);
  for (ReduceOp op :
       {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg}) {
    if (want == reduce_op_name(op)) return op;
  }
  BRAID_FAIL(kInvalidArgument, "-o '", name, "': expected sum, prod, min, max or avg");
}

int iters_for(const BenchOptions& o, int64_t bytes) {
  return o.iters_small > 0 && bytes <= kSmallMessageBytes ? o.iters_small : o.iters;
}

void validate(const BenchOptions& o) {
  BRAID_CHECK(o.min_bytes >= 0, kInvalidArgument, "-b ", o.min_bytes, ": expected >= 0");
  BRAID_CHECK(o.min_bytes <= o.max_bytes, kInvalidArgument, "-b ", o.min_bytes,
              " is larger than -e ", o.max_bytes, ": expected min bytes <= max bytes");
  BRAID_CHECK(o.factor >= 2, kInvalidArgument, "-f ", o.factor,
              ": expected a step factor >= 2 (sizes grow as size * factor)");
  BRAID_CHECK(o.iters >= 1, kInvalidArgument, "-n ", o.iters, ": expected >= 1 iteration");
  BRAID_CHECK(o.iters_small >= 0, kInvalidArgument, "--iters-small ", o.iters_small,
              ": expected >= 1 iteration, or 0 for -n's");
  BRAID_CHECK(o.warmup >= 0, kInvalidArgument, "-w ", o.warmup, ": expected >= 0");
  BRAID_CHECK(o.repeats >= 1, kInvalidArgument, "--repeats ", o.repeats, ": expected >= 1");
  BRAID_CHECK(o.root >= 0, kInvalidArgument, "-r ", o.root, ": expected a rank >= 0");
  BRAID_CHECK(o.nproc >= 0, kInvalidArgument, "--nproc ", o.nproc, ": expected >= 1");
  BRAID_CHECK(!o.ops.empty(), kInvalidArgument, "--op: no collective selected");
  BRAID_CHECK(o.dtype != DType::kBool, kNotSupported, "-d bool: not supported by braid bench");
  for (const std::string& p : o.peers) {
    BRAID_CHECK(p == "mpi" || p == "limit", kInvalidArgument, "--peer '", p,
                "': expected mpi or limit");
  }
}

std::vector<std::string> to_args(const BenchOptions& o) {
  std::vector<std::string> a = {
      "-b", std::to_string(o.min_bytes),      "-e",        std::to_string(o.max_bytes),
      "-f", std::to_string(o.factor),         "-n",        std::to_string(o.iters),
      "-w", std::to_string(o.warmup),         "--repeats", std::to_string(o.repeats),
      "-d", std::string(dtype_name(o.dtype)), "-o",        std::string(reduce_op_name(o.redop)),
      "-r", std::to_string(o.root),           "-c",        o.check ? "1" : "0",
      "-R", o.shared_buffers ? "1" : "0",     "--backend", o.backend};
  a.insert(a.end(), {"--iters-small", std::to_string(o.iters_small)});
  if (!o.json_path.empty()) a.insert(a.end(), {"-J", o.json_path});
  if (!o.loop_times_path.empty()) a.insert(a.end(), {"--loop-times", o.loop_times_path});
  for (Op op : o.ops) a.insert(a.end(), {"--op", std::string(op_name(op))});
  for (const std::string& p : o.peers) a.insert(a.end(), {"--peer", p});
  return a;
}

}  // namespace braid::bench
