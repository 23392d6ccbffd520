// The group behind make_p2p_backend (p2p_collectives.h). p2p_collectives.cc: creation, run(),
// the rounds of sends and receives, the cross-rank check, send / recv;
// p2p_collectives_algos.cc: the algorithms (docs/p2p.md, "Algorithms"). Private to comm/.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "braid/comm/backend.h"
#include "fold.h"
#include "p2p_collectives.h"

namespace braid::p2p {

// One rank's call as the cross-rank check carries it (docs/p2p.md, "Cross-rank check"). Sent
// as raw bytes: every member is set (no padding left undefined).
struct CallHeader {
  uint64_t index = 0, seq = 0, signature = 0;
  int64_t count = 0;
  double premul = 1.0;
  uint64_t segment = 0;  // the sender's Options::segment_bytes: rank 0's decides for the call
  int32_t root = 0;
  uint32_t payload = 0;  // bytes of the sender's data after the header (Note [Fused check])
  uint8_t kind = 0, dtype = 0, op = 0;
  uint8_t algo = 0;   // the sender's Options::algo: rank 0's decides too
  uint8_t fused = 0;  // 1: the sender's data came with its header (Note [Fused check])
  uint8_t reserved[3] = {};
};
static_assert(sizeof(CallHeader) == 64);

// When a call must be done: desc.timeout, else the group's `group_timeout`, else 300 s, from
// now.
Clock::time_point call_deadline(const CollectiveDesc& d, std::chrono::milliseconds group_timeout);
// This rank's header for the call `d`, the group's call number `index` (algo left 0).
CallHeader make_header(const CollectiveDesc& d, uint64_t index);
// "all_reduce f32 x 1024 sum", "broadcast bf16 x 7 root 2", "barrier" (as the shm backend).
std::string describe_header(const CallHeader& h);
// Whether two ranks' headers are the same call: kind and call index always; dtype, count
// (except all_to_all_v), op of reductions, root of rooted kinds.
bool same_call(const CallHeader& a, const CallHeader& b);

// One piece of a round: send `bytes` at `data` to `peer`, or receive them from it.
struct Piece {
  int peer;
  bool send;
  void* data;
  size_t bytes;
};

// A copy between two of the caller's buffers that a round makes while its messages are in
// flight (Note [Local copy under the transfer]).
struct LocalCopy {
  void* dst = nullptr;
  const void* src = nullptr;
  size_t bytes = 0;
};

struct Call {
  const CollectiveDesc& desc;
  Clock::time_point deadline;
  uint64_t index = 0;               // collectives this rank entered in the group, this one included
  std::vector<CallHeader> headers;  // every rank's call, after the check
  std::vector<double> factors;      // premul_sum: rank r's factor at [r]
  uint64_t segment = 0;             // rank 0's segment_bytes, once the check ran (Note [Segments])
  // Note [Fused check]: every rank's data came with the check; rank r's at data[r] (in the
  // group's check buffer, valid until the next call).
  bool fused = false;
  std::vector<const uint8_t*> data;
};

class P2pGroup final : public Backend {
 public:
  P2pGroup(std::string name, const BackendContext& ctx, std::unique_ptr<Transport> transport,
           Options options);

  std::string_view name() const override { return name_; }
  const BackendCapabilities& capabilities() const override { return caps_; }
  std::shared_ptr<Work> run(const CollectiveDesc& desc) override;
  // The error that left the group unusable, or null (a backend composed of this one, hier,
  // breaks with it).
  std::exception_ptr broken() {
    std::lock_guard<std::mutex> lock(mu_);
    return broken_;
  }

 private:
  friend struct Algorithms;
  void dispatch(Call& c);
  // Requests posted and not yet waited for; expect[i] is a receive's length, kSent for a send.
  static constexpr size_t kSent = ~size_t{0};
  struct Posted {
    std::vector<std::unique_ptr<Request>> requests;
    std::vector<int> peers;
    std::vector<size_t> expect;
    unsigned phase = 0;  // of the first request, for the error text
    uint64_t step = 0;
  };
  // Posts one message (tag from the call's index, phase and step) into `into`.
  void post(Call& c, unsigned phase, uint64_t step, const Piece& p, Posted& into);
  // Waits for everything in `posted` (kTimeout at the call's deadline), checks that each
  // receive brought exactly its bytes, and empties it.
  void finish(Call& c, Posted& posted);
  // Posts every piece, makes `copy` (if any), then waits for all of them. `segmented`: pieces
  // longer than the call's segment (rank 0's Options::segment_bytes) go as several messages
  // (Note [Segments]).
  void round(Call& c, unsigned phase, uint64_t step, const std::vector<Piece>& pieces,
             bool segmented = true, const LocalCopy& copy = {});
  // The group's receive buffer of at least `bytes` (uninitialized, kept across calls: a large
  // collective then allocates and faults in nothing).
  uint8_t* scratch(size_t bytes);

  void check_across_ranks(Call& c);
  // Note [Fused check]: whether this rank sends its data for `d` with its header (its own call
  // and options decide), and how many bytes of data rank `rank` sends when the call is fused.
  bool fuses(const CollectiveDesc& d) const;
  size_t fused_bytes(const CollectiveDesc& d, int rank) const;
  // Splits `got` bytes received from group rank `from` at `at` into `cnt` check records, their
  // ends appended to `ends`; invalid argument naming the peer if they are not.
  void split_records(const Call& c, int from, const uint8_t* at, size_t got, int cnt,
                     std::vector<size_t>& ends) const;
  std::string where(const Call& c, unsigned phase, uint64_t step) const;
  bool small(const Call& c, uint64_t bytes) const;
  std::string describe_call(const Call& c) const;
  void send(Call& c);
  void recv(Call& c);

  std::string name_;
  BackendContext ctx_;
  std::unique_ptr<Transport> transport_;
  Options options_;
  int me_ = 0, n_ = 1;
  std::mutex mu_;              // one call at a time
  std::exception_ptr broken_;  // the error that left the group unusable
  uint64_t calls_ = 0;
  std::vector<uint8_t> fold_scratch_;
  std::vector<uint8_t> check_buf_;  // the cross-rank check's records (Note [Fused check])
  std::unique_ptr<uint8_t[]> scratch_;
  size_t scratch_size_ = 0;
  BackendCapabilities caps_;
};

// The algorithms (p2p_collectives_algos.cc); a friend of P2pGroup.
struct Algorithms {
  static void fused(P2pGroup& g, Call& c);  // Note [Fused check]: the data is already here
  static void reduction(P2pGroup& g, Call& c);
  static void pipelined_all_reduce(P2pGroup& g, Call& c, Folder& folder);
  static void broadcast(P2pGroup& g, Call& c);
  static void all_gather(P2pGroup& g, Call& c);
  static void gather(P2pGroup& g, Call& c);
  static void scatter(P2pGroup& g, Call& c);
  static void all_to_all(P2pGroup& g, Call& c);
};

// Element range of block r when `count` elements are split into n blocks: [start(r), start(r+1)).
inline int64_t block_start(int64_t count, int r, int n) {
  return static_cast<int64_t>(static_cast<__int128>(count) * r / n);
}

}  // namespace braid::p2p
