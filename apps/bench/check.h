// -c 1: rank-dependent inputs whose results are exact, and a count of wrong result elements.
// Input element k of rank r is a small integer (1..8; 1..2 for prod), so sums, products,
// minima and maxima are exact in every dtype's accumulation type and the expected value is
// that exact result rounded once to the dtype, as braid's reductions round (docs/shm.md,
// "Determinism"). Results are compared bit for bit.
#pragma once

#include <cstdint>

#include "bench/collectives.h"

namespace braid::bench {

struct CheckCall {
  Op op = Op::kAllReduce;
  DType dtype = DType::kF32;
  ReduceOp redop = ReduceOp::kSum;
  int rank = 0;
  int nranks = 1;
  int root = 0;
};

// Writes this rank's inputs into b.send (this rank's view of them) and clears the parts of
// b.recv that only the collective should write, so a stale result cannot pass.
void fill_inputs(const CheckCall& c, const CallBuffers& b);

// Elements of `result` (what Collectives::run returned) that differ from the expected
// result on this rank; 0 where this rank receives nothing (reduce on a non-root).
int64_t count_wrong(const CheckCall& c, const void* result, int64_t count);

// Elements of this rank's result: count, or nranks * count for all_gather / all_to_all.
int64_t result_elements(Op op, int64_t count, int nranks);
// Elements of this rank's input: count, or nranks * count for reduce_scatter / all_to_all.
int64_t input_elements(Op op, int64_t count, int nranks);

}  // namespace braid::bench
