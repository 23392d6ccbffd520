// The hierarchical backend "hier" (docs/hier.md): the shm backend inside each node composed
// with a point-to-point transport (UCX) between nodes. all_reduce, reduce_scatter, all_gather
// and broadcast run as shm steps in the node and pipelined chains / exchanges between the
// ranks of the same local index on different nodes; every other kind, and layouts that are
// not "several nodes of equal size with contiguous ranks", run the point-to-point algorithms
// (p2p_collectives.h) over the same transport. One node: the shm backend alone.
// Private to comm/; registered in backend_registry.cc when UCX is built.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "braid/comm/backend.h"
#include "p2p_transport.h"

namespace braid {

// Makes the transport between the ranks of a group (every rank calls it; collective).
using HierTransportFactory =
    std::function<std::unique_ptr<p2p::Transport>(const BackendContext& ctx)>;

// Collective over the group: every rank calls it. Finds each rank's node (node_identity()),
// creates the shm backend over its node's ranks and, when the group spans several nodes, the
// transport over the whole group.
std::unique_ptr<Backend> make_hier_backend(const BackendContext& ctx,
                                           const HierTransportFactory& transport);

// This rank's node, as a string equal on the ranks of one node and different between nodes
// (docs/hier.md, "Nodes"): BRAID_HIER_RANKS_PER_NODE=k (testing: world rank / k), else the
// launcher's GROUP_RANK with the host name, else the host name with the network namespace.
std::string node_identity(int world_rank);

}  // namespace braid
