// The list of backends the conformance suite runs on (registry.h).
#include "registry.h"

namespace braid::conformance {
namespace {

std::vector<ConformanceBackend>& entries() {
  static std::vector<ConformanceBackend> backends;  // built on first use: any static may register
  return backends;
}

}  // namespace

bool register_backend_for_conformance(ConformanceBackend backend) {
  entries().push_back(std::move(backend));
  return true;
}

const std::vector<ConformanceBackend>& conformance_backends() {
  return entries();
}

}  // namespace braid::conformance
