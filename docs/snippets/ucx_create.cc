// docs/ucx.md: a group on the ucx backend. ctest runs it under braid launch --nproc-per-node 2
// when UCX is built; exits 1 unless an all_reduce over it is right.
#include "check_world.h"

int main() {
  // [snippet]
  braid::ProcessGroupOptions options;
  options.backend = "ucx";
  auto pg = braid::ProcessGroup::create(options);  // store, rank and size as for any backend
  // [end snippet]
  return check_world(*pg, "ucx");
}
