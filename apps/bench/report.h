// What rank 0 prints and writes: nccl-tests' table layout, the --peer ratio table and the
// -J JSON file (formats in docs/bench.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/sweep.h"

namespace braid::bench {

// "# nThread 1 nGpus 1 minBytes ..." and the library / rank lines.
std::string format_preamble(const BenchOptions& o, const std::string& library, int nranks);
// "# Collective test: all_reduce (braid shm)": the line that opens each library's table.
std::string format_heading(Op op, const std::string& library);
// The blank "#" line and the three header lines of nccl-tests' table.
std::string format_header();
// One table row, without the newline nccl-tests adds after the in-place columns.
std::string format_row(const OpResult& r, const Row& row, const BenchOptions& o);
// "# Out of bounds values : 0 OK" / "# Avg bus bandwidth    : X " / "#".
std::string format_footer(const OpResult& r);
// One line per skipped collective.
std::string format_skipped(const OpResult& r);
// braid busbw / peer busbw per collective and size, out of place and in place.
std::string format_ratios(const std::vector<OpResult>& braid, const std::vector<OpResult>& peer);

// The share of CPU time the hypervisor gave to other guests (steal) between two readings of the
// first line of /proc/stat ("cpu user nice system idle iowait irq softirq steal ..."): percent of
// the user..steal ticks that passed; percent < 0 when either line does not read that way. A
// shared VM's slow phases show here.
struct Steal {
  double percent = -1;
  uint64_t ticks = 0;  // user..steal ticks (USER_HZ, all CPUs) between the readings
};
Steal cpu_steal(const std::string& before, const std::string& after);
// "# cpu steal during the run: 5.5% of 1234 CPU ticks (/proc/stat)\n"; empty when unknown.
std::string format_steal(const Steal& steal);

// The whole run as JSON (docs/bench.md, "JSON output").
std::string to_json(const BenchOptions& o, int nranks, const std::vector<OpResult>& results);

}  // namespace braid::bench
