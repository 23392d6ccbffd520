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
  kAuto = 0,           // one-shot up to oneshot_bytes (see ShmOptions), else reduce-scatter
  kOneShot = 1,        // every rank folds every rank's chunk
  kReduceScatter = 2,  // rank r folds stripe r of each chunk, then all gather the stripes
};

struct ShmOptions {
  // Per-rank staging ring (BRAID_SHM_SLOT_BYTES); a step stages at most a quarter of it.
  uint64_t slot_bytes = uint64_t{2} << 20;
  uint64_t mailbox_bytes = uint64_t{64} << 10;  // per ordered pair (BRAID_SHM_MAILBOX_BYTES)
  // kAuto: the largest all_reduce / reduce (bytes) that runs one-shot (BRAID_SHM_ONESHOT_BYTES).
  // 0: 16 KiB, and 4 MiB for two ranks (where both algorithms move the same bytes and one-shot
  // needs one pass fewer; docs/shm.md, "Algorithms").
  uint64_t oneshot_bytes = 0;
  // Most bytes of a message one pipelined step moves (BRAID_SHM_CHUNK_BYTES; also capped by
  // the slot): small enough that a step's data stays in the caches between the ranks.
  uint64_t chunk_bytes = uint64_t{256} << 10;
  // Smallest result (bytes per rank) that all_reduce / all_gather / broadcast write into the
  // caller's buffer with streaming stores (BRAID_SHM_NONTEMPORAL_BYTES).
  uint64_t nontemporal_bytes = uint64_t{8} << 20;
  ShmAlgo algo = ShmAlgo::kAuto;  // BRAID_SHM_ALGO: auto, oneshot, rs
  // Per-rank arena that allocate() hands out (BRAID_SHM_ARENA_BYTES; rounded up to the page
  // size; 0: no arena, allocate() returns nullptr). Address space only until allocated.
  uint64_t arena_bytes = uint64_t{256} << 20;
  // Smallest message (bytes per rank) that tries the zero-copy path (BRAID_SHM_ZEROCOPY_BYTES).
  uint64_t zerocopy_bytes = uint64_t{64} << 10;
  // Smallest message (bytes per rank) for which ranks read each other's ordinary buffers
  // directly with process_vm_readv instead of staging them (BRAID_SHM_KERNEL_COPY_BYTES; 0:
  // never; docs/shm.md, "Kernel copy").
  uint64_t kernel_copy_bytes = uint64_t{32} << 10;
  // all_gather, gather, all_to_all and scatter's own threshold (bytes a block) where every
  // rank has a CPU of its own and it is the lower one (BRAID_SHM_KERNEL_COPY_GATHER_BYTES; 0:
  // kernel_copy_bytes). There one copy fewer pays from 8 KiB a rank: 2 ranks, 16 KiB in all,
  // 1.7-1.8 us against 2.5-2.8 staged (all_to_all, 8 KiB a block: 1.47x).
  uint64_t kernel_copy_gather_bytes = uint64_t{8} << 10;
  // Largest broadcast (bytes) that takes the small-broadcast path (BRAID_SHM_BCAST_BYTES; at
  // most shm::kBcastMaxBytes, 256 KiB; 0: never): the root writes its ring and returns, the
  // others copy the message out (docs/shm.md, "Small broadcasts"). Rank 0's value decides.
  uint64_t bcast_bytes = uint64_t{16} << 10;
  // The same where the group has more ranks than rank 0 has CPUs (BRAID_SHM_BCAST_SHARED_BYTES):
  // there every step-protocol call waits for every rank to get a core, and the path, which
  // waits for the root alone, wins at every size it takes (4 and 8 ranks on 2 vCPUs).
  uint64_t bcast_shared_bytes = uint64_t{256} << 10;
  // Largest reduce (bytes) that takes the small-reduce path (BRAID_SHM_REDUCE_BYTES; 0: never):
  // every other rank writes its contribution into its ring and returns, the root folds them,
  // in chunks of shm::kReduceChunkBytes above that (docs/shm.md, "Small reduces"). Rank 0's
  // value decides. By default every size: it beat the step path at every size measured, with
  // a CPU per rank or not (2 ranks, 512 KiB-64 MiB: 1.3-1.7x; 4 and 8 ranks level or ahead).
  uint64_t reduce_bytes = ~uint64_t{0};
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
