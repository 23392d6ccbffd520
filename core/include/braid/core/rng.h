// SPDX-License-Identifier: Apache-2.0
// Random numbers: the Philox4x32-10 counter-based generator (Salmon et al., "Parallel
// random numbers: as easy as 1, 2, 3", SC'11) and braid's mapping from (seed, offset) to
// numbers, written down in docs/rng.md so that a GPU kernel produces the same numbers.
//
// A Generator is only (seed, offset): every number is a pure function of them, so a draw
// can be computed in any order, on any device, and a saved state replays exactly.
//
//   braid::Generator gen(42);
//   std::vector<float> x(1000);
//   gen.fill_uniform(x.data(), x.size());   // [0, 1), offset advances by 1000 words
//   auto state = gen.get_state();            // ... later: gen.set_state(state)
//
// Process-wide: default_generator(device) and set_seed(seed, device_specific, deterministic)
// with Hugging Face Accelerate's semantics.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include "braid/core/device.h"

namespace braid {

// ---- the Philox4x32-10 block function ----------------------------------------------------

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

namespace philox_detail {
inline constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // round multipliers
inline constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // key schedule (Weyl)

constexpr PhiloxCounter round(const PhiloxCounter& c, const PhiloxKey& k) {
  const uint64_t p0 = uint64_t{kM0} * c[0];
  const uint64_t p1 = uint64_t{kM1} * c[2];
  return {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
          static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
}
}  // namespace philox_detail

// Philox4x32 with 10 rounds: 128 bits of counter and 64 bits of key in, 128 random bits out.
// Matches Random123's philox4x32_R(10, ctr, key) (checked against its kat_vectors).
constexpr PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key) {
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {  // the key is bumped before every round but the first
      key[0] += philox_detail::kW0;
      key[1] += philox_detail::kW1;
    }
    counter = philox_detail::round(counter, key);
  }
  return counter;
}

// braid's stream (docs/rng.md): word k of the stream for `seed` is
//   philox4x32_10(philox_counter(k / 4), philox_key(seed))[k % 4].
constexpr PhiloxKey philox_key(uint64_t seed) {
  return {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
}
constexpr PhiloxCounter philox_counter(uint64_t block) {
  return {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0u, 0u};
}

// ---- Generator ---------------------------------------------------------------------------

// A Philox stream position: a seed and an offset counted in 32-bit words.
//
// Offset rule (Note [RNG offset] in docs/rng.md): a draw of n elements reads the words
// [offset, offset + w) where w is the words it needs (1 per f32 uniform, 2 per f64 uniform,
// randint or randperm element, 2 per pair of f32 normals, 4 per pair of f64 normals), then
// sets offset += w rounded up to a multiple of 4 (a whole Philox block). So the offset is
// always a multiple of 4, every draw starts on a block boundary, and the numbers of one
// draw never depend on how earlier draws were split. A draw of 0 elements reads nothing.
//
// Thread safety: every member may be called concurrently. A draw reserves its range of the
// stream under a lock and computes the numbers outside it; which thread gets which range
// then depends on scheduling, so reproducible programs draw from one thread at a time (or
// use one Generator per thread).
class Generator {
 public:
  static constexpr uint32_t kStateVersion = 1;
  static constexpr size_t kStateBytes = 24;  // "BRNG", version, seed, offset

  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  // Restarts the stream of `seed` at offset 0.
  void manual_seed(uint64_t seed);
  uint64_t seed() const;
  // The next word to read. set_offset requires a multiple of 4 (kInvalidArgument).
  uint64_t offset() const;
  void set_offset(uint64_t offset);

  // One value each; every call is a draw of one element (so it advances the offset by 4).
  float uniform();          // [0, 1), a multiple of 2^-24
  double uniform_double();  // [0, 1), a multiple of 2^-53
  float normal(float mean = 0.0f, float std = 1.0f);
  double normal_double(double mean = 0.0, double std = 1.0);
  // Uniform in [low, high); kInvalidArgument unless low < high. 64 random bits reduced
  // modulo (high - low): each value's probability is within 2^-64 of 1 / (high - low).
  int64_t randint(int64_t low, int64_t high);
  // A uniformly random permutation of 0 .. n-1 (n >= 0).
  std::vector<int64_t> randperm(int64_t n);

  // Fill `out[0 .. n)`; `out` may be null only when n == 0. n < 0 is kInvalidArgument.
  // Normals: std must be finite and >= 0, mean finite (kInvalidArgument).
  void fill_uniform(float* out, int64_t n);
  void fill_uniform(double* out, int64_t n);
  void fill_normal(float* out, int64_t n, float mean = 0.0f, float std = 1.0f);
  void fill_normal(double* out, int64_t n, double mean = 0.0, double std = 1.0);
  void fill_randint(int64_t* out, int64_t n, int64_t low, int64_t high);
  void fill_randperm(int64_t* out, int64_t n);

  // 24 bytes, little-endian: "BRNG", u32 version (1), u64 seed, u64 offset.
  std::vector<uint8_t> get_state() const;
  // Rejects a wrong size, magic, version or an offset not a multiple of 4 (kCorruptData);
  // the generator is unchanged then.
  void set_state(std::span<const uint8_t> bytes);

 private:
  struct Range {
    uint64_t seed;
    uint64_t offset;  // first word of the draw
  };
  // Reserves `words` words (rounded up to a block) and returns where they start.
  Range reserve(uint64_t items, uint64_t words_per_item, const char* what);

  mutable std::mutex mu_;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The process-wide generator of `device` (one per device type and index), created on first
// use with the seed of the last set_seed (0 before any). Generators are never destroyed, so
// the reference stays valid for the life of the process. kInvalidArgument if index < 0.
Generator& default_generator(Device device = kCPU);

// Seeds every default generator, existing and future, like accelerate.utils.set_seed:
//   device_specific: adds this process's index (the RANK environment variable, 0 when
//     unset; kInvalidArgument when it is not a non-negative integer) to `seed`, so each
//     rank draws a different stream;
//   deterministic: true turns on deterministic_algorithms(); false leaves it as it is.
void set_seed(uint64_t seed, bool device_specific = false, bool deterministic = false);

// Whether kernels must give the same bits on every run. CPU kernels always do, whatever the
// flag; GPU kernels consult it and then avoid atomics-order-dependent reductions and
// non-deterministic library algorithms (or fail with kNotSupported where none exists).
bool deterministic_algorithms();
void set_deterministic_algorithms(bool on);

}  // namespace braid
