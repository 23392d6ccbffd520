// The comm_ucx component's entry point (backend_registry.cc references it weakly): the ucx
// backend (p2p collectives over the UCX transport) and hier (shm inside a node, UCX between
// nodes).
#include "braid/comm/backend.h"
#include "hier_backend.h"
#include "p2p_collectives.h"
#include "ucx_transport.h"

extern "C" void braid_comm_register_ucx() {
  using namespace braid;
  register_backend("ucx", [](const BackendContext& ctx) {
    return p2p::make_p2p_backend("ucx", ctx, make_ucx_transport(ctx));
  });
  register_backend("hier", [](const BackendContext& ctx) {
    return make_hier_backend(ctx, [](const BackendContext& c) { return make_ucx_transport(c); });
  });
}
