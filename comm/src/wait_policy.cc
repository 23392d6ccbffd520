// usable_cpus(): the one affinity read the backends' waits share (wait_policy.h).
#include "wait_policy.h"

#include <sched.h>

#include <algorithm>

namespace braid {

int usable_cpus() {
  static const int cpus = [] {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
    return std::max(1, CPU_COUNT(&set));
  }();
  return cpus;
}

}  // namespace braid
