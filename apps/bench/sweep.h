// The measurement loop: for each collective, sizes from -b to -e, out of place then in
// place; time = median over `repeats` timed loops of the average time per iteration, then
// averaged over ranks (nccl-tests' default); optional check.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/collectives.h"

namespace braid::bench {

struct Measure {
  double time_us = 0;
  double algbw = 0;    // GB/s (1e9 bytes)
  double busbw = 0;    // GB/s
  int64_t wrong = -1;  // -1: not checked
};

struct Row {
  int64_t bytes = 0;  // max(send, recv) bytes, nccl-tests' "size"
  int64_t count = 0;  // elements per rank (nccl-tests' "count")
  Measure out_of_place, in_place;
};

struct OpResult {
  std::string library;  // Collectives::name()
  Op op = Op::kAllReduce;
  int root = -1;        // printed root: -1 for unrooted ops
  std::string skipped;  // why the library could not run it; rows empty then
  std::vector<Row> rows;
  int64_t wrong_total() const;
  double avg_busbw() const;  // mean over rows, both placements (nccl-tests' footer)
};

// Called on every rank after each row (rank 0 prints it).
using RowSink = std::function<void(const OpResult& so_far, const Row& row)>;

OpResult sweep(Collectives& lib, const BenchOptions& options, Op op, const RowSink& sink);

// The same sweep of one collective on several libraries at once (--peer): for each size and
// placement, timed loop r of every library runs in turn (library order), r = 1..repeats, each
// after one untimed call. A machine whose speed drifts during the run (a shared VM) then slows
// every library's loops alike, and the ratios between them hold. One OpResult per library,
// in the order of `libs`.
std::vector<OpResult> sweep_interleaved(const std::vector<Collectives*>& libs,
                                        const BenchOptions& options, Op op);

}  // namespace braid::bench
