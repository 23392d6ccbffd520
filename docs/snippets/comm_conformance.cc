// docs/comm.md: the collective conformance suite on the ranks of braid launch (or mpirun);
// exits 1 when any check fails.
#include <iostream>

#include "conformance/conformance.h"  // target braid_comm_conformance

int main() {
  braid::ProcessGroupOptions options;              // the launcher's ranks and store
  auto pg = braid::ProcessGroup::create(options);  // threads, fork, braid launch or mpirun
  std::vector<std::string> failures = braid::conformance::run_conformance(*pg);
  for (const std::string& line : failures) std::cerr << line << '\n';
  return failures.empty() ? 0 : 1;
}
