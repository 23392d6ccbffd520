// send / recv through the mailbox of the ordered pair (docs/shm.md, "Point to point"). A
// mailbox holds one chunk: the sender waits until the previous chunk was taken, writes the
// chunk and its header (tag, total size, offset, dtype) and bumps `posted`; the receiver
// waits for `posted`, checks the header against its own call, copies and bumps `taken`.
// Messages of a pair are matched in order: the next message from a peer must carry the tag
// the recv names. A send returns once its last chunk is posted (it does not wait for the
// receiver to take it), so a message of up to one mailbox never blocks the sender.
#include <algorithm>
#include <cstring>

#include "shm_group.h"

namespace braid::shm {

void ShmGroup::send(Call& c) {
  const CollectiveDesc& d = c.desc;
  const int peer = d.peer;
  MailboxHeader& mb = seg_->mailbox(me_, peer);
  uint8_t* data = seg_->mailbox_data(me_, peer);
  const uint64_t cap = seg_->header().mailbox_bytes;
  const uint64_t total = static_cast<uint64_t>(d.count) * dtype_size(d.dtype);
  uint32_t posted = mb.posted.load(std::memory_order_relaxed);  // only this rank writes it
  uint64_t off = 0;
  do {
    const uint64_t len = std::min(cap, total - off);
    wait_at_least(c, peer, mb.taken, mb.taken_waiters, posted);  // mailbox empty
    mb.tag = d.tag;
    mb.total_bytes = total;
    mb.offset = off;
    mb.len = len;
    mb.dtype = static_cast<uint32_t>(d.dtype);
    if (len > 0) std::memcpy(data, static_cast<const uint8_t*>(d.send) + off, len);
    publish_word(mb.posted, mb.posted_waiters, ++posted);
    off += len;
  } while (off < total);
}

void ShmGroup::recv(Call& c) {
  const CollectiveDesc& d = c.desc;
  const int peer = d.peer;
  MailboxHeader& mb = seg_->mailbox(peer, me_);
  const uint8_t* data = seg_->mailbox_data(peer, me_);
  const uint64_t total = static_cast<uint64_t>(d.count) * dtype_size(d.dtype);
  uint32_t taken = mb.taken.load(std::memory_order_relaxed);  // only this rank writes it
  uint64_t off = 0;
  do {
    wait_at_least(c, peer, mb.posted, mb.posted_waiters, taken + 1);
    const auto dtype = static_cast<DType>(mb.dtype);
    BRAID_CHECK(mb.tag == d.tag && mb.total_bytes == total && dtype == d.dtype && mb.offset == off,
                kInvalidArgument, "shm: ", describe_call(c), ": the next message from group rank ",
                peer, " (world rank ", context_.global_ranks[peer], ") has tag ", mb.tag, ", ",
                mb.total_bytes, " bytes of ", dtype, " (expected tag ", d.tag, ", ", total,
                " bytes of ", d.dtype, "; messages between two ranks match in order)");
    if (mb.len > 0) std::memcpy(static_cast<uint8_t*>(d.recv) + off, data, mb.len);
    off += mb.len;
    publish_word(mb.taken, mb.taken_waiters, ++taken);
  } while (off < total);
}

}  // namespace braid::shm
