// Internal to comm/src/process_group*.cc: the state of one ProcessGroup and the helpers its
// files share. process_group.cc: creation, subgroups, the choke point (submit);
// process_group_calls.cc: each public collective's checks and descriptor;
// process_group_exchange.cc: the store exchanges (create / new_group agreement, debug mode).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "braid/comm/process_group.h"
#include "braid/comm/store.h"
#include "call_thread.h"

namespace braid {

// What one rank saw of a call, for the debug-mode comparison: only the fields every rank must
// agree on for that kind ("all_reduce dtype=f32 count=6 op=sum shape=[2, 3]").
// What a call looked like to its caller, for BRAID_DEBUG_MODE and trace logs. Formatted only
// when one of them asks (call_text): a string per call would cost more than a small collective.
struct CallRecord {
  const Shape* shape = nullptr;    // the caller's tensor shape; lives until submit returns
  bool check_across_ranks = true;  // false for send / recv (pairs, not the whole group)
  // The tensors whose memory the call reads or writes (null: none), live until submit returns.
  // An async call on the group's communication thread holds them until it finished, as
  // torch's Work holds its tensors, so a temporary passed to an async call stays valid (Note
  // [Async calls]). Staging buffers and list outputs are held by `then` instead.
  std::array<const Tensor*, 2> tensors{};
};

// "all_reduce dtype=float32 count=6 op=sum shape=[2, 3]"
std::string call_text(const CollectiveDesc& desc, const CallRecord& rec);

struct ProcessGroup::Impl {
  std::string id;                     // "0" for the world group, "0.1", "0.1.2" for subgroups
  int rank = -1;                      // rank in this group; -1 on a non-member placeholder
  int size = 0;                       // number of members
  int world_rank = 0;                 // this process in the world group
  std::vector<int> global_ranks;      // group rank -> world rank
  std::shared_ptr<Store> root_store;  // the job's store, unprefixed
  std::shared_ptr<Store> store;       // "braid/pg/<id>/..." for this group's front
  std::unique_ptr<Backend> backend;
  std::string backend_name;
  std::chrono::milliseconds timeout{0};
  bool debug_mode = false;
  // Advanced by submit. Atomic (relaxed) so that calls from different threads, one at a time, need
  // no other synchronization.
  std::atomic<uint64_t> seq{0};
  uint64_t id_hash = 0;  // FNV-1a of id: where every call's signature starts
  // The backend's capabilities as bit sets (by enum value), filled by make_backend().
  uint64_t kind_bits = 0, dtype_bits = 0, device_bits = 0;
  std::atomic<uint64_t> children{0};
  // Runs AsyncOp::kYes calls where the backend runs_on_any_thread; started by the first such
  // call. Declared after `backend`, so it is destroyed (its queue run out) before the backend.
  std::unique_ptr<CallThread> call_thread;

  bool member() const { return rank >= 0; }
  // "group 0 (world ranks [0, 1, 2])"
  std::string describe() const;
  // "rank 2 (world rank 5)"
  std::string rank_name(int group_rank) const;
  void require_member(std::string_view what) const;
  // Creates `backend` for a group this rank belongs to (the backend's own rendezvous).
  void make_backend();

  // The choke point (STYLE.md rule 2): capability checks, sequence number, signature,
  // timeout, debug-mode cross-rank check, backend.run (on call_thread for an async call where
  // the backend allows it, after the async calls before it otherwise), and the wait for
  // AsyncOp::kNo.
  // `then` (optional) runs after the backend's Work succeeded: copies out of staging buffers.
  // `desc` is the caller's own: submit fills in its timeout, seq and signature (by reference:
  // a copy of the descriptor, with its four vectors, was a measurable part of a small call).
  std::shared_ptr<Work> submit(CollectiveDesc& desc, const CallOptions& o, const CallRecord& rec,
                               std::function<void()> then = {});

  // "all_reduce #5 on group 0 (world ranks [0, 1])": a call in the async path's messages.
  std::string call_name(const CollectiveDesc& desc) const;
  // backend->run(desc), never null.
  std::shared_ptr<Work> run_on_backend(const CollectiveDesc& desc);
  // Note [Async calls]: queues the call on call_thread; returns the Work it completes.
  std::shared_ptr<Work> submit_on_call_thread(CollectiveDesc desc, const CallRecord& rec,
                                              std::function<void()> then);

  void check_capabilities(const CollectiveDesc& desc) const;
  std::chrono::milliseconds resolve_timeout(const CallOptions& o) const;
  uint64_t signature(const CollectiveDesc& desc) const;
  // BRAID_DEBUG_MODE: every member publishes `rec` for this call and compares.
  void debug_check(const CollectiveDesc& desc, const CallRecord& rec) const;
};

// "[0, 1, 2]"
std::string int_list_str(const std::vector<int>& values);

// Every member publishes `value` under "<key>/<rank>" in `store` and reads the others'; the
// values come back in rank order. The last reader deletes the keys. A rank missing at the
// deadline: kTimeout naming `what` and the missing ranks.
std::vector<std::string> exchange_values(Store& store, const std::string& key,
                                         const std::string& value, int rank,
                                         const std::vector<int>& global_ranks,
                                         std::chrono::milliseconds timeout,
                                         const std::string& what);

// Throws kInvalidArgument "<what>: ranks disagree on <topic>" with one line per rank, marking
// those that differ from rank 0, when the values are not all equal.
void require_same(const std::vector<std::string>& values, const std::vector<int>& global_ranks,
                  const std::string& what, const std::string& topic);

// The group timeout: `option`, else BRAID_TIMEOUT (seconds), else 300 s. Throws
// kInvalidArgument for a value <= 0.
std::chrono::milliseconds resolve_group_timeout(std::optional<std::chrono::milliseconds> option);

}  // namespace braid
