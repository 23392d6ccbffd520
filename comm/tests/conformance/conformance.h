// The collective conformance suite (issue 3): every collective of the ProcessGroup front x
// dtype x count x placement (in-place / out-of-place, list / one-buffer forms) x group (the
// world and subgroups from new_group), each rank's result checked bit for bit against a
// reference computed here from the inputs every rank can regenerate. It runs on any backend
// and does not care how the ranks were started (threads, forked processes, braid launch,
// mpirun): every rank of `world` calls run_conformance with the same options.
//
//   auto pg = braid::ProcessGroup::create(options);
//   for (const auto& line : braid::conformance::run_conformance(*pg)) std::cerr << line << "\n";
//
// The reference follows the determinism rule of docs/shm.md ("Determinism"): a left fold in
// rank order in the accumulation type (f64 in f64; f32, f16, bf16, fp8 in f32 rounded once at
// the end; integers and bool in i64, then wrapped). What the grid covers, and where it is
// thinned for time, is in docs/comm.md, "Conformance suite".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "braid/comm/process_group.h"

namespace braid::conformance {

struct Options {
  std::vector<int64_t> counts = {0, 1, 7, 4099, (1 << 20) + 3};
  std::vector<DType> dtypes;  // empty: every dtype the backend's capabilities list
  bool subgroups = true;      // also run the grid on subgroups made with new_group
  std::string only;           // non-empty: run only collectives whose name contains it
};

// Runs the whole grid on `world` (every rank of world calls it, with the same options); each
// rank checks its own results exactly. Returns this rank's failures, each one line naming the
// collective, dtype, count, placement, group and the first wrong element (empty: all passed).
//
// A call that throws where no error is expected ends this rank's run (its peers then fail
// their next call with the backend's timeout or peer-lost error). Ranks outside a subgroup wait
// at their next call while its members run the grid there, so the group's timeout must exceed
// the time of one group's grid.
std::vector<std::string> run_conformance(ProcessGroup& world, const Options& options = {});

}  // namespace braid::conformance
