// Whether two byte ranges share a byte: the in-place test of the backends' collectives.
#pragma once

#include <cstddef>
#include <cstdint>

namespace braid {

// Whether [a, a + a_bytes) and [b, b + b_bytes) share a byte (an empty or null range: no).
inline bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  if (!a || !b || a_bytes == 0 || b_bytes == 0) return false;
  const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + b_bytes && pb < pa + a_bytes;
}

}  // namespace braid
