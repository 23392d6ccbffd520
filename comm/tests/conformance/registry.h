// Which backends the conformance suite runs on, and how their ranks start. A backend's test
// registers itself from a static initializer (in any source of braid_comm_test):
//
//   const bool kUcxConformance = [] {
//     braid::conformance::ConformanceBackend b;
//     b.name = "ucx_processes";
//     b.backend = "ucx";
//     return braid::conformance::register_backend_for_conformance(b);
//   }();
//
// conformance_test.cc turns every entry into one GoogleTest case per group size, named
// Backends/Conformance.<...>/<name>_<size>ranks. Backends whose ranks cannot be forked from a
// test (MPI under mpirun) call run_conformance from their own program instead.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "conformance.h"

namespace braid::conformance {

struct ConformanceBackend {
  std::string name;     // in the test's name: letters, digits and '_'
  std::string backend;  // the backend registry's name ("shm", ...)
  // kProcesses: one forked process per rank sharing a TCP store (the deployment shape);
  // kThreads: ranks as threads of the test process sharing an in-memory store.
  enum class Ranks { kThreads, kProcesses } ranks = Ranks::kProcesses;
  std::vector<int> sizes = {1, 2, 3, 4, 8};
  std::map<std::string, std::string> env;  // set in every rank before its group is created
  Options options;
};

// Adds an entry; returns true so it can initialize a static. Call before main() starts.
bool register_backend_for_conformance(ConformanceBackend backend);
const std::vector<ConformanceBackend>& conformance_backends();

}  // namespace braid::conformance
