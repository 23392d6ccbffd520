// The UCX transport (docs/ucx.md): p2p::Transport over UCP tag matching, used by the "ucx"
// backend (the collectives of p2p_collectives.h over it; registered in backend_registry.cc).
// Compiled only when CMake found UCX (BRAID_HAVE_UCX, comm/CMakeLists.txt). Private to comm/.
#pragma once

#include <memory>
#include <string>

#include "braid/comm/backend.h"
#include "p2p_transport.h"

namespace braid {

// Connects this rank to every rank of the group (itself included): UCP context and workers,
// worker addresses exchanged through ctx.store ("ucx/addr/<rank>", waiting up to ctx.timeout),
// one endpoint per peer. Collective over the group: every rank must call it. Throws kTimeout
// when a peer's address does not appear in time, kInternal when UCX fails to start.
std::unique_ptr<p2p::Transport> make_ucx_transport(const BackendContext& ctx);

// UCX's own account of the endpoint to `peer` (ucp_ep_print_info: its lanes and, per kind of
// send, which protocol each message size takes), for diagnostics. `transport` must come from
// make_ucx_transport; anything else is kInvalidArgument.
std::string describe_ucx_endpoint(p2p::Transport& transport, int peer);

// The UCX library this process runs on, for the environment report (docs/ucx.md, "UCX
// versions"): "1.13.1 (built against 1.13; /lib/x86_64-linux-gnu/libucp.so.0)". The loaded
// library may be newer than the headers braid was built with (UCP keeps its ABI within 1.x).
std::string ucx_library_version();

}  // namespace braid
