// Formatting of braid bench's output. The table reproduces nccl-tests' printf formats
// (src/common.cu: Reporter and BenchTime) column for column, so scripts written for
// nccl-tests' output parse braid's.
#include "bench/report.h"

#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>

#include "braid/core/config.h"

namespace braid::bench {
namespace {

template <typename... A>
std::string fmt(const char* f, A... a) {
  char buf[512];
  std::snprintf(buf, sizeof buf, f, a...);
  return buf;
}

// nccl-tests: fewer decimals as the time grows, always 7 wide.
std::string time_str(double us) {
  if (us >= 10000.0) return fmt("%7.0f", us);
  if (us >= 100.0) return fmt("%7.1f", us);
  return fmt("%7.2f", us);
}

std::string measure_str(const Measure& m) {
  std::string s = fmt("  %7s  %6.2f  %6.2f", time_str(m.time_us).c_str(), m.algbw, m.busbw);
  if (m.wrong < 0) return s + "    N/A";
  return s + fmt("  %5lld", static_cast<long long>(m.wrong));
}

std::string json_str(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string json_num(double v) {
  return std::isfinite(v) ? fmt("%.6g", v) : "null";
}

std::string json_measure(const Measure& m) {
  return "{\"time_us\": " + json_num(m.time_us) + ", \"algbw_gbps\": " + json_num(m.algbw) +
         ", \"busbw_gbps\": " + json_num(m.busbw) +
         ", \"wrong\": " + (m.wrong < 0 ? std::string("null") : std::to_string(m.wrong)) + "}";
}

std::string redop_str(const OpResult& r, const BenchOptions& o) {
  return op_reduces(r.op) ? std::string(reduce_op_name(o.redop)) : "none";
}

std::string ratio_str(double a, double b) {
  return b > 0 ? fmt("%7.2f", a / b) : "    n/a";
}

// The preamble's note of --iters-small: " (1000 up to 8192 bytes)", or nothing.
std::string small_loops(const BenchOptions& o) {
  if (o.iters_small <= 0) return "";
  return fmt(" (%d up to %lld bytes)", o.iters_small, static_cast<long long>(kSmallMessageBytes));
}

}  // namespace

std::string format_preamble(const BenchOptions& o, const std::string& library, int nranks) {
  return fmt("# braid bench %s: %s, %d ranks, %s\n", BRAID_VERSION_STRING, library.c_str(), nranks,
             "one process per rank") +
         fmt("# nThread 1 nGpus 1 minBytes %lld maxBytes %lld step: %lld(factor) warmup iters: "
             "%d iters: %d agg iters: 1 validation: %d graph: 0\n",
             static_cast<long long>(o.min_bytes), static_cast<long long>(o.max_bytes),
             static_cast<long long>(o.factor), o.warmup, o.iters, o.check ? 1 : 0) +
         fmt("# buffers: %s\n", o.shared_buffers
                                    ? "the library's shared allocator where it has one (-R 1)"
                                    : "braid cpu allocator (-R 0)") +
         fmt("# time: median of %d timed loops of %d iterations%s, averaged over ranks\n",
             o.repeats, o.iters, small_loops(o).c_str());
}

namespace {

// user, nice, system, idle, iowait, irq, softirq, steal (guest time is inside user and nice).
bool cpu_fields(const std::string& line, uint64_t (&v)[8]) {
  std::istringstream in(line);
  std::string label;
  in >> label;
  if (label != "cpu") return false;
  for (uint64_t& x : v) {
    if (!(in >> x)) return false;
  }
  return true;
}

}  // namespace

Steal cpu_steal(const std::string& before, const std::string& after) {
  uint64_t a[8], b[8];
  Steal out;
  if (!cpu_fields(before, a) || !cpu_fields(after, b)) return out;
  for (int i = 0; i < 8; ++i) {
    if (b[i] < a[i]) return out;
    out.ticks += b[i] - a[i];
  }
  if (out.ticks > 0) {
    out.percent = 100.0 * static_cast<double>(b[7] - a[7]) / static_cast<double>(out.ticks);
  }
  return out;
}

std::string format_steal(const Steal& steal) {
  if (steal.percent < 0) return {};
  return fmt("# cpu steal during the run: %.1f%% of %llu CPU ticks (/proc/stat)\n", steal.percent,
             static_cast<unsigned long long>(steal.ticks));
}

std::string format_heading(Op op, const std::string& library) {
  return "# Collective test: " + std::string(op_name(op)) + " (" + library + ")\n";
}

std::string format_header() {
  return "#\n" +
         fmt("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place "
             "         \n",
             "", "", "", "", "") +
         fmt("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "size", "count",
             "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
             "#wrong") +
         fmt("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "(B)",
             "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
             "");
}

std::string format_row(const OpResult& r, const Row& row, const BenchOptions& o) {
  return fmt("%12lld  %12lld  %8s  %6s  %6i", static_cast<long long>(row.bytes),
             static_cast<long long>(row.count), std::string(nccl_type_name(o.dtype)).c_str(),
             redop_str(r, o).c_str(), r.root) +
         measure_str(row.out_of_place) + measure_str(row.in_place);
}

std::string format_footer(const OpResult& r) {
  const int64_t wrong = r.wrong_total();
  return fmt("# Out of bounds values : %lld %s\n", static_cast<long long>(wrong),
             wrong ? "FAILED" : "OK") +
         fmt("# Avg bus bandwidth    : %g \n", r.avg_busbw()) + "#\n";
}

std::string format_skipped(const OpResult& r) {
  return "# " + r.library + ": skipped " + std::string(op_name(r.op)) + ": " + r.skipped + "\n";
}

std::string format_ratios(const std::vector<OpResult>& braid, const std::vector<OpResult>& peer) {
  std::string out;
  for (size_t i = 0; i < braid.size() && i < peer.size(); ++i) {
    const OpResult& a = braid[i];
    const OpResult& b = peer[i];
    out += "#\n# " + std::string(op_name(a.op)) + ": bus bandwidth ratio " + a.library + " / " +
           b.library + " (> 1: " + a.library + " faster)\n";
    if (!b.skipped.empty()) {
      out += "# " + b.library + " skipped: " + b.skipped + "\n";
      continue;
    }
    out += fmt("# %10s  %12s  %10s  %10s  %7s  %10s  %10s  %7s\n", "size", "count", "braid oop",
               "peer oop", "ratio", "braid ip", "peer ip", "ratio");
    out += fmt("# %10s  %12s  %10s  %10s  %7s  %10s  %10s  %7s\n", "(B)", "(elements)", "(GB/s)",
               "(GB/s)", "", "(GB/s)", "(GB/s)", "");
    for (size_t k = 0; k < a.rows.size() && k < b.rows.size(); ++k) {
      const Row& x = a.rows[k];
      const Row& y = b.rows[k];
      out += fmt("%12lld  %12lld  %10.2f  %10.2f  %7s  %10.2f  %10.2f  %7s\n",
                 static_cast<long long>(x.bytes), static_cast<long long>(x.count),
                 x.out_of_place.busbw, y.out_of_place.busbw,
                 ratio_str(x.out_of_place.busbw, y.out_of_place.busbw).c_str(), x.in_place.busbw,
                 y.in_place.busbw, ratio_str(x.in_place.busbw, y.in_place.busbw).c_str());
    }
    out += fmt("# Avg bus bandwidth ratio: %s\n", ratio_str(a.avg_busbw(), b.avg_busbw()).c_str());
  }
  return out;
}

std::string to_json(const BenchOptions& o, int nranks, const std::vector<OpResult>& results) {
  std::string s =
      "{\n  \"tool\": \"braid bench\",\n  \"version\": " + json_str(BRAID_VERSION_STRING) +
      ",\n  \"nranks\": " + std::to_string(nranks) + ",\n  \"backend\": " + json_str(o.backend) +
      ",\n  \"type\": " + json_str(std::string(nccl_type_name(o.dtype))) +
      ",\n  \"redop\": " + json_str(std::string(reduce_op_name(o.redop))) +
      ",\n  \"min_bytes\": " + std::to_string(o.min_bytes) +
      ",\n  \"max_bytes\": " + std::to_string(o.max_bytes) +
      ",\n  \"factor\": " + std::to_string(o.factor) +
      ",\n  \"iters\": " + std::to_string(o.iters) +
      ",\n  \"iters_small\": " + std::to_string(iters_for(o, kSmallMessageBytes)) +
      ",\n  \"small_bytes\": " + std::to_string(kSmallMessageBytes) +
      ",\n  \"warmup_iters\": " + std::to_string(o.warmup) +
      ",\n  \"repeats\": " + std::to_string(o.repeats) +
      ",\n  \"check\": " + (o.check ? "true" : "false") + ",\n  \"results\": [";
  bool first = true;
  for (const OpResult& r : results) {
    s += first ? "\n" : ",\n";
    first = false;
    s += "    {\"library\": " + json_str(r.library) +
         ", \"op\": " + json_str(std::string(op_name(r.op))) +
         ", \"root\": " + std::to_string(r.root) + ", \"redop\": " + json_str(redop_str(r, o)) +
         ", \"skipped\": " + (r.skipped.empty() ? std::string("null") : json_str(r.skipped)) +
         ", \"out_of_bounds\": " + std::to_string(r.wrong_total()) +
         ", \"avg_busbw_gbps\": " + json_num(r.avg_busbw()) + ", \"rows\": [";
    for (size_t k = 0; k < r.rows.size(); ++k) {
      const Row& row = r.rows[k];
      s += (k ? ",\n" : "\n") + std::string("      {\"size\": ") + std::to_string(row.bytes) +
           ", \"count\": " + std::to_string(row.count) +
           ", \"out_of_place\": " + json_measure(row.out_of_place) +
           ", \"in_place\": " + json_measure(row.in_place) + "}";
    }
    s += r.rows.empty() ? "]}" : "\n    ]}";
  }
  return s + "\n  ]\n}\n";
}

}  // namespace braid::bench
