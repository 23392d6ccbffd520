// The pipeline's messages between stages (docs/parallelism.md, "Communication"). Internal to
// shard/.
//
// Note [Pipeline channels]: one channel per (sender, receiver, kind) of pp ranks, each over a
// two-rank group of its own, so that one rank's sends never block its own compute: the
// sender's messages go to a communication thread (CommQueue) per channel, and only the main
// thread receives. A send of more than one mailbox waits for its receiver (shm), so a rank
// that sent on its main thread could block while its receiver blocks sending back: with a
// thread per outgoing channel, the ranks behave as with unbounded buffers, which is what
// validate_pipeline_order() proves free of deadlock. A group is used by one thread per rank
// (the sender's CommQueue thread, the receiver's main thread), as ProcessGroup requires.
// Messages of a channel are received in the order sent (validated for the schedule), and each
// carries a tag naming its kind, stage and micro-batch, which the receiver checks. A message is
// a small header (tag, dtype, shape) and the payload, so a receiver need not know shapes.
// Between chunks of one rank (p = 1) a channel is a local queue.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include "braid/comm/process_group.h"
#include "braid/tensor/tensor.h"
#include "comm_queue.h"

namespace braid::shard {

enum class TrafficKind : uint8_t { kActivation, kGradient, kTiedWeight, kTiedGrad };
const char* traffic_name(TrafficKind kind);  // "activation", "gradient", ...

// The tag of a message: kind, the receiving stage, the micro-batch (< 2^62, the user range).
int64_t pipeline_tag(TrafficKind kind, int64_t stage, int64_t micro_batch);

class PipelineChannel {
 public:
  // from / to / self: pp ranks; `group` holds pp ranks {min(from, to), max(from, to)} in that
  // order, or is null for a local channel (from == to). The sender gets a thread.
  PipelineChannel(int from, int to, TrafficKind kind, std::shared_ptr<ProcessGroup> group, int self,
                  std::chrono::milliseconds deadline);
  int from() const { return from_; }
  int to() const { return to_; }
  TrafficKind kind() const { return kind_; }

  // On the sender: queues the message on the channel's thread (the tensor is kept alive, not
  // copied: it must not change until sent). `what` names it in errors.
  void send(Tensor t, int64_t tag, std::string what);
  // On the receiver: waits for the next message (the group's deadline), checks its tag.
  Tensor recv(int64_t tag, const std::string& what);
  // On the sender: waits until every queued message has been handed over; rethrows the first
  // error of the channel's thread.
  void flush();

  // "pp rank 1 (world rank 3)".
  std::string peer_str(int pp_rank) const;

 private:
  int from_, to_;
  TrafficKind kind_;
  std::shared_ptr<ProcessGroup> group_;  // null: local
  std::unique_ptr<CommQueue> queue_;     // on the sender of a remote channel
  std::deque<Tensor> local_;
};

}  // namespace braid::shard
