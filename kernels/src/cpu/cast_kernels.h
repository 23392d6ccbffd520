// The cast pairs that have SIMD paths, as one table of function pointers per SIMD level
// (cast.cc picks the table once per call; each ISA file fills its own).
#pragma once

#include <cstdint>

namespace braid::kernels::cpu {

enum HotCast : int {
  kCastF32ToF16,
  kCastF16ToF32,
  kCastF32ToBF16,
  kCastBF16ToF32,
  kCastF32ToE4M3,
  kCastF32ToE4M3Sat,
  kCastE4M3ToF32,
  kCastF32ToE5M2,
  kCastF32ToE5M2Sat,
  kCastE5M2ToF32,
  kCastF16ToBF16,
  kCastBF16ToF16,
  kNumHotCasts
};

using CastFn = void (*)(const void* src, void* dst, int64_t n);

struct CastTable {
  CastFn fn[kNumHotCasts] = {};
};

// The current SIMD level's kernel for one hot pair (cast.cc's table, without cast()'s checks):
// for callers that convert many short runs, such as the rows of a tile.
CastFn hot_cast_fn(HotCast which);

// Each overwrites the entries it implements and leaves the others as they are.
namespace scalar {
void fill_cast_table(CastTable& table);
}
namespace avx2 {
void fill_cast_table(CastTable& table);
}
namespace avx512 {
void fill_cast_table(CastTable& table);
}
namespace avx512bf16 {
void fill_cast_table(CastTable& table);
}

}  // namespace braid::kernels::cpu
