// The check the backend snippets (docs/ucx.md, docs/mpi.md, docs/hier.md) run after creating
// their group: an all_reduce of every rank's number must give the sum on every rank.
#pragma once
#include <cstdio>

#include "braid/comm/process_group.h"

inline int check_world(braid::ProcessGroup& pg, const char* backend) {
  braid::Tensor x = braid::Tensor::full({5}, pg.rank() + 1);
  pg.all_reduce(x);
  const double want = pg.size() * (pg.size() + 1) / 2.0;
  for (double v : x.to_vector()) {
    if (v != want) {
      std::fprintf(stderr, "FAIL: %s rank %d: all_reduce gave %g, expected %g\n", backend,
                   pg.rank(), v, want);
      return 1;
    }
  }
  const bool backend_ok = pg.backend().name() == backend;
  if (!backend_ok)
    std::fprintf(stderr, "FAIL: the group runs %s, expected %s\n",
                 std::string(pg.backend().name()).c_str(), backend);
  std::printf("%s rank %d of %d: all_reduce ok\n", backend, pg.rank(), pg.size());
  return backend_ok ? 0 : 1;
}
