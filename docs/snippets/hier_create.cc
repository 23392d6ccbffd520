// docs/hier.md: a group on the hier backend. ctest runs it under braid launch --nproc-per-node 4
// with BRAID_HIER_RANKS_PER_NODE=2 (two simulated nodes of two ranks) when UCX is built; exits
// 1 unless an all_reduce over it is right.
#include "check_world.h"

using namespace braid;

int main() {
  // [snippet]
  ProcessGroupOptions o;
  o.backend = "hier";                    // or BRAID_BACKEND=hier, see below
  auto world = ProcessGroup::create(o);  // under braid launch --nnodes M on each node
  // [end snippet]
  return check_world(*world, "hier");
}
