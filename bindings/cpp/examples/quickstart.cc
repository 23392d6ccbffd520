// braid's C++ API through libbraid.so: every rank adds its number, all_reduce sums them.
// Build: c++ -std=c++20 quickstart.cc -lbraid    Run: braid launch --nproc-per-node 2 ./a.out
#include <braid/comm/process_group.h>
#include <braid/tensor/tensor.h>

#include <cstdio>

int main() {
  // From the launcher's environment: braid launch, torchrun, mpirun, Slurm.
  std::shared_ptr<braid::ProcessGroup> pg = braid::ProcessGroup::create({});
  braid::Tensor x = braid::Tensor::from_vector({1.0, double(pg->rank())}, {2});
  pg->all_reduce(x);  // blocking; pass {.async = braid::AsyncOp::kYes} for a Work to wait on
  std::vector<double> v = x.to_vector();
  std::printf("rank %d of %d: ranks %g, sum of ranks %g\n", pg->rank(), pg->size(), v[0], v[1]);
  return v[0] == pg->size() ? 0 : 1;
}
