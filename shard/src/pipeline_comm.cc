// PipelineChannel (pipeline_comm.h, Note [Pipeline channels]): a header and a payload per
// message over a two-rank group, sent from a thread of the channel, received on the caller's
// thread with the group's deadline.
#include "pipeline_comm.h"

#include <sstream>

#include "braid/core/error.h"

namespace braid::shard {
namespace {

constexpr int64_t kMaxDims = 6;
constexpr int64_t kHeaderWords = 3 + kMaxDims;  // tag, dtype, ndim, dims

// Adds `context` in front of a braid::Error's message, keeping its kind (a peer lost stays a
// peer lost).
[[noreturn]] void rethrow_with(const std::string& context) {
  try {
    throw;
  } catch (const Error& e) {
    throw Error(e.kind(), context + ": " + e.message(), e.where());
  }
}

}  // namespace

const char* traffic_name(TrafficKind kind) {
  switch (kind) {
    case TrafficKind::kActivation:
      return "activation";
    case TrafficKind::kGradient:
      return "gradient";
    case TrafficKind::kTiedWeight:
      return "tied weight";
    case TrafficKind::kTiedGrad:
      return "tied weight's gradient";
  }
  return "?";
}

int64_t pipeline_tag(TrafficKind kind, int64_t stage, int64_t micro_batch) {
  // 2 bits of kind, 24 of stage, 24 of micro-batch, 1 for header / payload (bit 0).
  BRAID_ASSERT(stage >= 0 && stage < (int64_t{1} << 24) && micro_batch >= 0 &&
                   micro_batch < (int64_t{1} << 24),
               "pipeline_tag: stage ", stage, ", micro-batch ", micro_batch);
  return ((static_cast<int64_t>(kind) << 48) | (stage << 24) | micro_batch) << 1;
}

PipelineChannel::PipelineChannel(int from, int to, TrafficKind kind,
                                 std::shared_ptr<ProcessGroup> group, int self,
                                 std::chrono::milliseconds deadline)
    : from_(from), to_(to), kind_(kind), group_(std::move(group)) {
  if (group_ && self == from) queue_ = std::make_unique<CommQueue>(deadline);
}

std::string PipelineChannel::peer_str(int pp_rank) const {
  std::ostringstream out;
  out << "pp rank " << pp_rank;
  if (group_) {
    // The group holds {min, max} of the two pp ranks in order.
    const int g = pp_rank == std::min(from_, to_) ? 0 : 1;
    out << " (world rank " << group_->global_ranks()[static_cast<size_t>(g)] << ")";
  }
  return out.str();
}

void PipelineChannel::send(Tensor t, int64_t tag, std::string what) {
  if (!group_) {
    local_.push_back(std::move(t));
    return;
  }
  BRAID_ASSERT(queue_ != nullptr, "pipeline: send on a channel this rank does not send on");
  BRAID_CHECK(t.dim() <= kMaxDims, kInvalidArgument, "pipeline: ", what, " has ", t.dim(),
              " dimensions; at most ", kMaxDims, " are sent");
  const int peer = from_ < to_ ? 1 : 0;
  std::string context = "pipeline: sending " + what + " to " + peer_str(to_);
  queue_->submit(what, [group = group_, peer, t = t.contiguous(), tag, context] {
    try {
      Tensor header = Tensor::zeros({kHeaderWords}, DType::kI64);
      int64_t* h = header.data<int64_t>();
      h[0] = tag;
      h[1] = static_cast<int64_t>(t.dtype());
      h[2] = t.dim();
      for (int64_t i = 0; i < t.dim(); ++i) h[3 + i] = t.size(static_cast<int>(i));
      group->send(header, peer, tag);
      group->send(t, peer, tag | 1);
    } catch (...) {
      rethrow_with(context);
    }
  });
}

Tensor PipelineChannel::recv(int64_t tag, const std::string& what) {
  if (!group_) {
    BRAID_ASSERT(!local_.empty(), "pipeline: local receive of ", what, " before its send");
    Tensor t = std::move(local_.front());
    local_.pop_front();
    return t;
  }
  const int peer = from_ < to_ ? 0 : 1;
  try {
    Tensor header = Tensor::empty({kHeaderWords}, DType::kI64);
    group_->recv(header, peer, tag);
    const int64_t* h = header.data<int64_t>();
    BRAID_CHECK(h[0] == tag && h[2] >= 0 && h[2] <= kMaxDims, kInvalidArgument,
                "the message carries tag ", h[0], " and ", h[2], " dimensions, expected tag ", tag);
    Shape shape;
    for (int64_t i = 0; i < h[2]; ++i) shape.push_back(h[3 + i]);
    Tensor t = Tensor::empty(shape, static_cast<DType>(h[1]));
    group_->recv(t, peer, tag | 1);
    return t;
  } catch (...) {
    rethrow_with("pipeline: receiving " + what + " from " + peer_str(from_));
  }
}

void PipelineChannel::flush() {
  if (queue_) queue_->drain();
}

}  // namespace braid::shard
