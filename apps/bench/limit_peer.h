// The "limit" peer (limit_peer.cc): the bare shared-memory data path braid's shm backend is
// measured against (docs/bench.md, "The limit program").
#pragma once

#include <memory>

#include "bench/collectives.h"

namespace braid::bench {

std::unique_ptr<PeerSession> start_limit_peer();

}  // namespace braid::bench
