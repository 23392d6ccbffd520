// A shm-only consumer of braid::comm: one rank, an all_reduce over shm, the transports this
// program did not link absent from backend_names() (which holds the two backends braid::comm
// always has: meta, for measurement runs, and shm) and named when asked for.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "braid/comm/backend.h"
#include "braid/comm/process_group.h"
#include "braid/comm/store.h"
#include "braid/core/config.h"
#include "braid/core/error.h"
#include "braid/tensor/tensor.h"

int main() {
  int failures = 0;
  auto expect = [&](bool ok, const std::string& what) {
    std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
    if (!ok) ++failures;
  };
  expect(braid::backend_names() == std::vector<std::string>{"meta", "shm"},
         "backend_names() is meta and shm alone");
  braid::ProcessGroupOptions o;
  o.backend = "shm";
  o.store = std::make_shared<braid::InMemoryStore>();
  o.rank = 0;
  o.size = 1;
  auto pg = braid::ProcessGroup::create(o);
  braid::Tensor x = braid::Tensor::from_vector({1.0, 2.0}, {2});
  pg->all_reduce(x);
  expect(x.to_vector() == std::vector<double>{1.0, 2.0}, "all_reduce on one shm rank");
  if (BRAID_HAVE_MPI) {
    o.backend = "mpi";
    o.store = std::make_shared<braid::InMemoryStore>();
    std::string message;
    try {
      braid::ProcessGroup::create(o);
    } catch (const braid::Error& e) {
      message = e.message();
    }
    std::printf("asking for mpi: %s\n", message.c_str());
    expect(message.find("link braid::comm_mpi") != std::string::npos,
           "the mpi backend, built but not linked, is named with its component");
  }
  return failures == 0 ? 0 : 1;
}
