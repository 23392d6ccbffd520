// ShmGroup: the shm Backend of one group. shm_backend.cc holds the rendezvous, the waits, the
// step protocol and the cross-rank check; shm_collectives.cc the collective algorithms;
// shm_p2p.cc send / recv through the pair mailboxes; shm_arena.cc allocate / release of the
// per-rank arena and shm_zerocopy.cc the collectives that read peers' arena buffers in place.
//
// Note [Step protocol]
// Every collective is a sequence of steps; every step is
//   1. wait until every rank's epoch >= 2s (all finished reading step s-1: my slot is free),
//   2. write: fill my slot,
//   3. epoch = 2s+1 (ready), wait until every rank's epoch >= 2s+1,
//   4. (first step of a call) compare the calls every rank published (the cross-rank check),
//   5. read: any slot, into the caller's buffers,
//   6. epoch = 2s+2 (done).
// No rank can be more than one step ahead of another, so a slot is never rewritten while a
// peer reads it. All ranks of a group run the same steps because their calls match, which
// step 4 checks before any rank reads a peer's data.
#pragma once

#include <algorithm>
#include <chrono>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "braid/comm/backend.h"
#include "braid/core/error.h"
#include "shm_backend.h"
#include "shm_segment.h"

namespace braid::shm {

struct Call {
  const CollectiveDesc& desc;
  std::chrono::steady_clock::time_point deadline;
  std::chrono::milliseconds timeout;
  uint64_t index = 0;  // collectives this rank entered, this one included
  bool first_step = true;
  uint32_t target = 0;          // the epoch being waited for (error messages)
  std::vector<double> factors;  // premul_sum: every rank's factor, after the first step
  // Where this rank's buffers lie in its arena (published at the first step), -1: outside.
  int64_t send_off = -1, recv_off = -1;
};

// Steps to move `elems` in chunks of `chunk`; at least one, so every call meets the check.
inline int64_t steps_for(int64_t elems, int64_t chunk) {
  return std::max<int64_t>(1, (elems + chunk - 1) / chunk);
}

class ShmGroup final : public Backend {
 public:
  ShmGroup(const BackendContext& context, const ShmOptions& options);
  ~ShmGroup() override;

  std::string_view name() const override { return "shm"; }
  const BackendCapabilities& capabilities() const override { return caps_; }
  std::shared_ptr<Work> run(const CollectiveDesc& desc) override;
  // 64-byte aligned blocks of this rank's arena (shm_arena.cc). kOutOfMemory when full.
  void* allocate(size_t bytes) override;
  void release(void* ptr) override;
  // Collectives that took the zero-copy path (tests and benchmarks look at it).
  uint64_t zero_copy_calls() const { return zero_copy_calls_.load(std::memory_order_relaxed); }

 private:
  void dispatch(const CollectiveDesc& desc);
  Call begin_call(const CollectiveDesc& desc, bool collective);
  void leave_after_error(ErrorKind kind);

  // ---- waiting (shm_backend.cc) ----
  // Waits until `word` (rank `peer`'s) reaches `target`, wrap-safe. Throws kTimeout,
  // kPeerLost (peer gone or left after an error) naming the call and the missing ranks.
  void wait_at_least(Call& c, int peer, std::atomic<uint32_t>& word, std::atomic<uint32_t>& waiters,
                     uint32_t target);
  void wait_all(Call& c, uint32_t target);
  [[noreturn]] void fail_wait(Call& c, ErrorKind kind, const std::string& why,
                              const std::vector<int>& missing);
  std::string describe_call(const Call& c) const;
  std::string ranks_text(const std::vector<int>& ranks) const;

  // ---- Note [Step protocol] ----
  template <class Write, class Read>
  void step(Call& c, Write&& write, Read&& read) {
    wait_all(c, epoch_);
    if (c.first_step) publish_call(c);
    write();
    publish_word(seg_->control(me_).epoch, seg_->control(me_).epoch_waiters, ++epoch_);
    wait_all(c, epoch_);
    if (c.first_step) verify_call(c);
    c.first_step = false;
    read();
    publish_word(seg_->control(me_).epoch, seg_->control(me_).epoch_waiters, ++epoch_);
  }
  void publish_call(Call& c);
  void verify_call(Call& c);

  // ---- collectives (shm_collectives.cc) ----
  void all_reduce(Call& c);  // also kReduce
  void reduce_one_shot(Call& c);
  void reduce_stripes(Call& c);
  void broadcast(Call& c);
  void all_gather(Call& c);  // also kGather
  void reduce_scatter(Call& c);
  void exchange(Call& c);  // all_to_all, all_to_all_v, scatter
  void barrier(Call& c);
  // bytes of a sub-slot (the slot split into n parts, 8-byte aligned)
  uint64_t sub_slot_bytes() const;

  // ---- zero-copy (shm_arena.cc, shm_zerocopy.cc) ----
  static BackendCapabilities make_capabilities(bool can_allocate);
  void init_arena();
  // Byte offset of [p, p + bytes) in this rank's arena when it lies inside one allocated
  // block, else -1.
  int64_t arena_offset(const void* p, int64_t bytes);
  // Runs the call on the peers' arena buffers when every buffer it reads lies in an arena;
  // false (after one shared step that the slot path then follows) when not.
  bool zero_copy(Call& c);
  bool zero_copy_eligible(const Call& c) const;
  void zero_copy_first(Call& c);
  void zero_copy_gather_stripes(Call& c);
  const uint8_t* peer_send(int p) const;
  uint8_t* peer_recv(int p) const;

  // ---- point to point (shm_p2p.cc) ----
  void send(Call& c);
  void recv(Call& c);

  BackendContext context_;
  int me_ = 0, n_ = 1;
  std::unique_ptr<Segment> seg_;
  PeerWatch watch_;
  uint32_t epoch_ = 0;
  uint64_t calls_ = 0;
  std::mutex mu_;              // one call at a time on this backend
  std::exception_ptr broken_;  // the error that left this group unusable
  BackendCapabilities caps_;
  std::atomic<uint64_t> zero_copy_calls_{0};
  std::mutex arena_mu_;                  // allocate / release may come from any thread
  std::map<uint64_t, uint64_t> free_;    // offset -> bytes, coalesced
  std::map<uint64_t, uint64_t> blocks_;  // handed out: offset -> bytes
};

}  // namespace braid::shm
