// What the backends' waits share (docs/ucx.md, "Sending, receiving, waiting"): how many CPUs
// this process may run on, and the spin window of a point-to-point wait. Private to comm/.
#pragma once

#include <algorithm>
#include <chrono>

namespace braid {

// CPUs in this process's affinity mask (at least 1), read once.
int usable_cpus();

// Note [Spin while data flows]
// A point-to-point wait progresses its transport back to back (yielding between rounds) for
// a short spin, then blocks on the transport's event fds. Over tcp a large message moves only
// while the worker is progressed, one socket read or write per progress call; blocking between
// those costs an event-fd round trip per piece and held braid's large-message bandwidth over
// a veth link to 0.6 of ucx_perftest's (docs/performance.md, 2026-12-02 evening). So while
// progress keeps delivering events the spin is extended, up to `active` after the last event,
// and the wait blocks once the transport has been quiet that long. Only when this node has a
// CPU to spare beyond its ranks: the kernel's tcp work (softirqs, the socket copies) needs a
// core too, and with every core taken by a rank the extension measured no gain (2 nodes x 2
// ranks on 2 vCPUs); with more ranks than cores it would hold a core a peer needs.
class SpinWindow {
 public:
  using Clock = std::chrono::steady_clock;
  SpinWindow(Clock::time_point start, std::chrono::nanoseconds spin,
             std::chrono::nanoseconds active, bool spare_cpu)
      : end_(start + spin), active_(spare_cpu ? active : std::chrono::nanoseconds{0}) {}
  // After a progress round at `now` that delivered `events`.
  void progressed(Clock::time_point now, unsigned events) {
    if (events > 0 && active_.count() > 0) end_ = std::max(end_, now + active_);
  }
  // Whether the wait should block (sleep) rather than progress again.
  bool should_block(Clock::time_point now) const { return now >= end_; }

 private:
  Clock::time_point end_;
  std::chrono::nanoseconds active_;
};

}  // namespace braid
