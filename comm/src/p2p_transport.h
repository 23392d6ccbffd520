// Transport: what a point-to-point backend provides to the collective algorithms that are
// written once for all of them (p2p_collectives.*, docs/p2p.md). A transport moves bytes
// between the ranks of one group by tag; it knows nothing of collectives. Implementations:
// UCX (ucx_transport.*) and, in the tests, ranks as threads (comm/tests/p2p_test_transport.h).
// Private to comm/.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace braid::p2p {

using Clock = std::chrono::steady_clock;

// One posted send or receive. Owned by the transport's implementation; opaque here.
class Request {
 public:
  virtual ~Request() = default;
  // Whether it finished (successfully or not); drives progress if the transport needs it.
  virtual bool test() = 0;
  // Bytes received (receives), once finished.
  virtual size_t received() const = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The segment size (Options::segment_bytes) this transport moves large messages best in,
  // taken where BRAID_P2P_SEGMENT_BYTES is unset (options_from_env); 0: no preference.
  virtual uint64_t preferred_segment_bytes() const { return 0; }

  // Nonblocking. The buffer must stay valid and untouched until the request finished. A
  // receive matches the sender's message with the same (peer, tag) exactly; messages of one
  // (peer, tag) pair are matched in the order they were sent. A receive of `bytes` accepts a
  // message of at most `bytes` (received() says how many came).
  virtual std::unique_ptr<Request> isend(int peer, uint64_t tag, const void* data,
                                         size_t bytes) = 0;
  virtual std::unique_ptr<Request> irecv(int peer, uint64_t tag, void* data, size_t bytes) = 0;

  // Waits until every request finished, or `deadline`. Never busy-waits the whole wait (poll,
  // then sleep or block in the transport's own wait). Throws kTimeout (at the deadline) or
  // kPeerLost (a peer's endpoint failed) with `what` and the peers of the unfinished
  // requests in the message; `peers[i]` is the peer of `requests[i]`.
  virtual void wait_all(std::vector<std::unique_ptr<Request>>& requests,
                        const std::vector<int>& peers, Clock::time_point deadline,
                        const std::string& what) = 0;
};

}  // namespace braid::p2p
