// docs/device-mesh.md's example: a (dp, tp, pp) mesh of 8 ranks, a tensor distributed,
// redistributed and gathered back. ctest runs it under braid launch --nproc-per-node 8; exits
// 1 unless every rank gets the original tensor back and the groups have the documented sizes.
#include <cstdio>

// [snippet]
#include "braid/shard/device_mesh.h"
using namespace braid::shard;

int main() {
  auto world = braid::ProcessGroup::create({});           // 8 ranks
  DeviceMesh mesh(world, {2, 2, 2}, {"dp", "tp", "pp"});  // collective
  auto tp = mesh.group("tp");                        // 2 ranks, tp->rank() == mesh.local_rank("tp")
  auto dp_pp = mesh.flatten({"dp", "pp"}, "dp_pp");  // collective, 4 ranks
  braid::Tensor w =
      braid::Tensor::arange(0, 24, 1, braid::DType::kF32).reshape({4, 6});  // same everywhere
  braid::Tensor local = distribute_tensor(w, mesh, {Replicate{}, Shard{0}, Replicate{}});
  braid::Tensor moved = redistribute(local, mesh, {Replicate{}, Shard{0}, Replicate{}},
                                     {Shard{1}, Replicate{}, Replicate{}}, w.shape());
  braid::Tensor whole = full_tensor(moved, mesh, {Shard{1}, Replicate{}, Replicate{}}, w.shape());
  // [end snippet]

  const bool ok = world->size() == 8 && tp->size() == 2 && tp->rank() == mesh.local_rank("tp") &&
                  dp_pp->size() == 4 && local.shape() == braid::Shape{2, 6} &&
                  moved.shape() == braid::Shape{4, 3} && whole.to_vector() == w.to_vector();
  if (!ok) std::fprintf(stderr, "FAIL: rank %d: a group or a placement is wrong\n", world->rank());
  return ok ? 0 : 1;
}
