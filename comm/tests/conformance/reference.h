// The conformance suite's inputs and reference results. Inputs are a pure function of
// (case salt, rank, element index, dtype), so every rank regenerates any rank's input instead
// of receiving it; reductions fold them in rank order in the accumulation type, as the
// determinism rule of docs/shm.md states, with scalar code written here (no kernel from src/).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "braid/comm/types.h"

namespace braid::conformance::detail {

using Bytes = std::vector<uint8_t>;

// Which values a case draws. kGeneral: small values (floats with fraction bits below the
// narrow formats' precision, so storing and the final rounding are not exact; integers in
// [-4, 4], u8 in [0, 8], bool 0 / 1), so that sums over 8 ranks fit every integer type and
// every fp8 format. kProduct: magnitudes in [0.5, 1.75) for floats; for integers +-1, except
// one rank per element that holds +-2 or +-3, so products fit i8 too.
enum class Values : uint8_t { kGeneral, kProduct };

struct Source {
  DType dtype = DType::kF32;
  uint64_t salt = 0;  // differs per case, so a stale buffer from the last case is caught
  int ranks = 1;      // group size (kProduct picks its one large factor per element by it)
  Values values = Values::kGeneral;
};

// Writes elements [begin, begin + count) of `rank`'s input, in `s.dtype`, to `out`.
void fill_input(const Source& s, int rank, int64_t begin, int64_t count, void* out);
Bytes input_bytes(const Source& s, int rank, int64_t begin, int64_t count);

// Whether the documented rules allow `op` on `dtype`: premul_sum needs a float dtype and avg
// a numeric one (not bool); everything else must raise kNotSupported.
bool op_allowed(ReduceOp op, DType dtype);

// Rank r's premul_sum factor (each rank passes its own, as NCCL allows).
double premul_factor(int rank);

// Elements [begin, begin + count) of the reduction of every rank's input with `op`.
Bytes reduce_reference(const Source& s, ReduceOp op, int64_t begin, int64_t count);

// "" when the `count` elements at `got` equal `want` bit for bit; otherwise the first wrong
// element: "element 17 is 1.25 (bits 0x3d00), expected 1.5 (bits 0x3e00)".
std::string first_difference(DType dtype, const void* got, const void* want, int64_t count);

}  // namespace braid::conformance::detail
