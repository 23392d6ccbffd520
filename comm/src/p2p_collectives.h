// Collectives written once for every point-to-point transport (docs/p2p.md): a Backend that
// runs each CollectiveKind as rounds of tagged sends and receives over a Transport
// (p2p_transport.h). The UCX backend and the thread transport of the tests build on it.
// Private to comm/.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "braid/comm/backend.h"
#include "p2p_transport.h"

namespace braid::p2p {

// Algorithm family (docs/p2p.md, "Selection"). kAuto picks by message size and rank count;
// kRing forces the bandwidth algorithms (pairwise reduce-scatter, ring all-gather, scatter +
// ring broadcast); kRd forces the latency ones (recursive doubling, binomial trees).
enum class Algo : uint8_t { kAuto, kRing, kRd };

struct Options {
  Algo algo = Algo::kAuto;
  // kAuto: a call whose largest buffer (bytes on one rank) is at most this uses kRd.
  uint64_t small_bytes = 64 << 10;
  // Messages of a round longer than this go as several messages of at most this many bytes,
  // all posted at once, and the large all_reduce folds and forwards each segment as soon as
  // it arrived (docs/p2p.md, "Segments"). 0: whole messages, no pipelining.
  uint64_t segment_bytes = 1 << 20;
};

// "auto", "ring", "rd" (BRAID_P2P_ALGO). Throws kInvalidArgument naming the value otherwise.
Algo parse_algo(std::string_view text);
// Options with the algorithm from BRAID_P2P_ALGO (unset or empty: auto) and the segment size
// from BRAID_P2P_SEGMENT_BYTES (get_env_bytes: 4096, 256K, 1M; 0 turns segments off; unset or
// empty: the default, or `transport`'s preferred_segment_bytes() where that is not 0).
Options options_from_env();
Options options_from_env(const Transport& transport);

// Tag layout (docs/p2p.md, "Tags"): bit 63 set for collectives, then 40 bits of the group's
// collective index, 3 bits of phase and 20 bits of step. User send / recv tags go through as
// given and must be in [0, 2^62), so the two never match each other's messages.
constexpr uint64_t kCollectiveTagBit = uint64_t{1} << 63;
constexpr int64_t kMaxUserTag = (int64_t{1} << 62) - 1;
inline uint64_t collective_tag(uint64_t index, unsigned phase, uint64_t step) {
  return kCollectiveTagBit | (index & ((uint64_t{1} << 40) - 1)) << 23 | uint64_t{phase & 7} << 20 |
         (step & ((uint64_t{1} << 20) - 1));
}

// The backend: every CollectiveKind, every dtype, send / recv, synchronously in run(), one
// call at a time. `name` is what name() returns ("ucx", ...).
std::unique_ptr<Backend> make_p2p_backend(std::string name, const BackendContext& ctx,
                                          std::unique_ptr<Transport> transport);
std::unique_ptr<Backend> make_p2p_backend(std::string name, const BackendContext& ctx,
                                          std::unique_ptr<Transport> transport, Options options);

}  // namespace braid::p2p
