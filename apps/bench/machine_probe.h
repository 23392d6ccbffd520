// The machine probe of braid bench (docs/bench.md, "The machine probe"): before and after the
// timed loops, ranks 0 and 1 time a 1 MiB copy within one process and a 1 MiB copy of data
// the other process has just written, with nothing of braid in between. A shared VM
// sometimes runs a whole job in a state where the second is several times slower than
// usual (issue 35: 1 MiB in ~500 us instead of ~50); the footer says so, as it reports CPU
// steal, so such a run is not read as braid's figure.
#pragma once

#include <string>
#include <string_view>

#include "braid/comm/store.h"

namespace braid::bench {

struct MachineProbe {
  double local_gbs = 0;  // rank 0 copies 1 MiB it has just written (median GB/s)
  double cross_gbs = 0;  // rank 0 copies 1 MiB rank 1 has just written, and the other way
  std::string skipped;   // why the probe did not run (one rank, ranks on two hosts, ...)
};

// Every rank calls it with the same `tag` ("start", "end"); ranks 0 and 1 take part, the
// others return at once. Never throws for the machine's sake: a failure (no shared memory,
// the other rank not answering within 10 s) comes back in `skipped`. Rank 0's result is the
// one that counts.
MachineProbe probe_machine(Store& store, int rank, int world_size, std::string_view tag);

// The bench's footer lines for rank 0: both probes, and a warning when the copy between
// processes ran below kSlowRatio of the copy within one.
std::string format_probe(const MachineProbe& start, const MachineProbe& end);

// Below this share of the local copy's speed, the cross-process copy is in the slow state.
// Ordinary runs measured 0.45-0.62 on an Intel Xeon VM (docs/bench.md); the slow state of
// issue 35 was about 0.1 of an ordinary run.
inline constexpr double kSlowRatio = 0.12;

}  // namespace braid::bench
