// The meta backend (docs/comm.md, "The meta backend"): a group of `size` ranks simulated by one
// process, for measuring a step on the meta device (shard::estimate_memory). Its tensors live
// on meta (no memory), so a collective has nothing to move: the front has checked shapes,
// counts, dtypes and the device, and the call completes at once. Private to comm/: reached
// through the registry as "meta" (register_meta_backend()).
#pragma once

#include <string_view>

namespace braid {

inline constexpr std::string_view kMetaBackendName = "meta";

// Registers "meta" (backend_registry.cc).
void register_meta_backend();

}  // namespace braid
