// docs/comm.md's first example: collectives on the launcher's ranks.
// Run: braid launch --nproc-per-node 2 ./doc_comm_collectives (exits 1 on a wrong result)
#include <cstdio>

// [snippet]
#include "braid/comm/process_group.h"
#include "braid/comm/tree_ops.h"

int main() {
  braid::ProcessGroupOptions options;  // backend "shm", store and ranks from the env
  auto pg = braid::ProcessGroup::create(options);
  braid::Tensor grad = braid::Tensor::full({3}, pg->rank());  // rank r: [r, r, r]
  pg->all_reduce(grad, {.op = braid::ReduceOp::kAvg});        // blocks, throws on failure
  braid::Tensor weights = braid::Tensor::full({3}, pg->rank() == 0 ? 7.0 : -1.0);
  auto work = pg->broadcast(weights, 0, {.async = braid::AsyncOp::kYes});
  braid::Tensor loss = braid::Tensor::full({1}, 0.5 * pg->rank());  // overlap: work meanwhile
  work->wait();
  braid::Tree metrics = braid::gather(*pg, braid::Tree::map({{"loss", loss}}));  // [size()]
  // [end snippet]

  const int n = pg->size();
  bool ok = true;
  for (double g : grad.to_vector()) ok = ok && g == (n - 1) / 2.0;
  for (double w : weights.to_vector()) ok = ok && w == 7.0;
  std::vector<double> losses = metrics.at("loss").tensor().to_vector();
  ok = ok && losses.size() == static_cast<size_t>(n);
  for (int r = 0; ok && r < n; ++r) ok = losses[r] == 0.5 * r;
  if (!ok) std::fprintf(stderr, "FAIL: rank %d: a collective gave a wrong result\n", pg->rank());
  return ok ? 0 : 1;
}
