// The shm backend (docs/shm.md): collectives between the processes of one node through one
// POSIX shared-memory segment per group. Private to comm/: the front reaches it through the
// backend registry under the name "shm" (register_shm_backend()).
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "braid/comm/backend.h"

namespace braid {

// Which all-reduce / reduce algorithm to run (docs/shm.md, "Algorithms").
enum class ShmAlgo : uint8_t {
  kAuto = 0,           // one-shot up to oneshot_bytes (or for 2 ranks), else reduce-scatter
  kOneShot = 1,        // every rank folds every slot
  kReduceScatter = 2,  // rank r folds stripe r of each chunk, then all gather the stripes
};

struct ShmOptions {
  uint64_t slot_bytes = uint64_t{4} << 20;       // per-rank staging slot (BRAID_SHM_SLOT_BYTES)
  uint64_t mailbox_bytes = uint64_t{64} << 10;   // per ordered pair (BRAID_SHM_MAILBOX_BYTES)
  uint64_t oneshot_bytes = uint64_t{256} << 10;  // kAuto threshold (BRAID_SHM_ONESHOT_BYTES)
  ShmAlgo algo = ShmAlgo::kAuto;                 // BRAID_SHM_ALGO: auto, oneshot, rs
  // Per-rank arena that allocate() hands out (BRAID_SHM_ARENA_BYTES; rounded up to the page
  // size; 0: no arena, allocate() returns nullptr). Address space only until allocated.
  uint64_t arena_bytes = uint64_t{256} << 20;
  // Smallest message (bytes per rank) that tries the zero-copy path (BRAID_SHM_ZEROCOPY_BYTES).
  uint64_t zerocopy_bytes = uint64_t{64} << 10;
};

// The options from the environment (defaults above). Throws kInvalidArgument naming the
// variable, its value and the accepted form.
ShmOptions shm_options_from_env();

// Rank 0's options decide: the others read slot sizes and the algorithm from the segment.
std::unique_ptr<Backend> create_shm_backend(const BackendContext& context,
                                            const ShmOptions& options);

// Registers "shm" (options from the environment) with the backend registry; called by
// comm/src/backend_registry.cc.
void register_shm_backend();

// Parses "auto" / "oneshot" / "rs"; nullopt-like kAuto with ok=false for anything else.
bool parse_shm_algo(std::string_view text, ShmAlgo* algo);

}  // namespace braid
