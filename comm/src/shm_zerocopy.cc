// The zero-copy collectives (docs/shm.md, "Zero-copy buffers"): when every buffer a
// collective reads lies in an allocated block of its rank's arena, ranks read each other's
// buffers in place instead of staging them through the slots.
//
// Every rank publishes the arena offsets of its buffers at the call's first step (-1 when
// outside), so after that step's ready wait all ranks take the same decision from the same
// data (Note [Zero-copy decision]). The reductions use the same Folder (rank-order left fold) as
// the slot path, so the bits are the same. Since peers read my buffers directly, a zero-copy call
// ends with a wait until every rank has finished its reads: the caller may overwrite them on
// return.
#include <sys/prctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <thread>

#include "braid/core/allocator.h"
#include "fold.h"
#include "overlap.h"
#include "shm_group.h"

namespace braid::shm {

// Note [Kernel copy]
// A buffer outside the arenas can still be read in place: process_vm_readv copies straight
// from a peer process's memory into this one's, one copy where staging makes two (the owner
// writes a chunk into its area, the reader copies it out). So for messages of at least the
// group's kernel_copy_bytes (rank 0's header; all_gather, gather, all_to_all and scatter from its
// kernel_copy_gather_bytes where that is lower, which rank 0 sets only where every rank has a
// CPU of its own: docs/shm.md) every rank that can (kernel_copy_works(), once per
// group) also publishes its buffers' addresses with its call and stages nothing in the first
// step, exactly as a rank whose buffers lie in its arena does (Note [Zero-copy decision]). If
// every rank offered, the zero-copy path runs, reading each peer's buffer from the mapped arena
// where it lies there and with process_vm_readv where not; a fold reads the peers' parts in
// chunks into a scratch buffer first. If some rank could not offer, every rank sees it in the
// same published words, the slot path starts again, and the group stops trying for later calls
// (every rank sets kernel_copy_off_ at the same call). Ranks that are threads of one process
// read their own process the same way. Ranks in different pid namespaces (containers that share
// /dev/shm but not their pids) never take the path: each rank's namespace is in its control
// block. A copy that fails later is an error naming the peer: peer lost when the peer exited or
// left after an error, not supported when the kernel refused (a security policy that lets a
// process read itself but not its peers); BRAID_SHM_KERNEL_COPY_BYTES=0 turns the path off.
//
// Where the group has more ranks than rank 0 has CPUs, results of more than
// kKernelCopyLimitShared stay on the slots: there the staged path's streaming stores and
// cache-sized steps beat a long kernel copy per rank (4 ranks on 2 vCPUs, 64 MiB all_gather:
// 3.5-3.9 GB/s staged against 3.0-3.3, broadcast 4.6-5.0 against 3.7-4.0; at 16 MiB the kernel
// copy is ahead; docs/performance.md). Where it has more than twice as many, results of more
// than kKernelCopyLimitCrowded and messages of less than kKernelCopyBytesCrowded a rank stay
// there too: 6 and 8 ranks on 2 vCPUs took up to 2.1x as long through the kernel for 16 MiB
// all_gathers and broadcasts, up to 1.4x for all_reduces of 4-16 MiB, and up to 2.3x for
// all_gathers of 32-43 KiB a rank (docs/performance.md, "Crowded groups stage"). Each block
// is read whole by n-1 readers straight into their results, from memory each time, with the
// kernel's ordinary stores; staged, its owner reads it once and the readers take it from the
// cache a step at a time and write the result with streaming stores.
//
// The kernel pins every page it copies from. A 4 KiB page costs about as much to pin as to copy
// on the Xeon VM, a huge page next to nothing per 4 KiB. So for an all_reduce or reduce_scatter
// of at least kKernelCopyPagedBytes, a rank offers its buffers only where braid's cpu allocator
// put them on huge pages (cpu_memory_on_huge_pages); else it declines the call (its word 2, not
// 0). A decline leaves the group trying at later calls. Ranks that offered staged nothing, so
// the slot path starts again, as for mixed arena buffers. On 4 KiB pages the staged path took
// 2-rank all_reduces of 16-64 MiB 1.3-1.4x faster and reduce_scatters 1.1-1.3x; on huge pages
// the kernel copy leads up to 16 MiB (docs/performance.md, "The kernel copy on 4 KiB pages").
bool ShmGroup::kernel_copy_works() {
  // Yama's ptrace_scope 1 lets a process read only its descendants unless the target names
  // its reader: allow any (as OpenMPI's vader does); scope 2 and 3 forbid it outright.
  if (FILE* f = std::fopen("/proc/sys/kernel/yama/ptrace_scope", "r")) {
    int scope = 0;
    const bool read = std::fscanf(f, "%d", &scope) == 1;
    std::fclose(f);
    if (!read || scope >= 2) return false;
    if (scope == 1 && prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) != 0) return false;
  }
  // The system call itself may be missing or filtered (seccomp): read this process.
  uint64_t probe = 0x6b636f7079ULL, copy = 0;
  iovec local{&copy, sizeof copy}, remote{&probe, sizeof probe};
  return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == sizeof copy && copy == probe;
}

namespace {

// The calls that read the root's send buffer alone: the others' buffers do not matter.
bool root_only(CollectiveKind k) {
  return k == CollectiveKind::kBroadcast || k == CollectiveKind::kScatter;
}

}  // namespace

bool ShmGroup::in_arena(const Call& c, int p) const {
  const CollectiveKind k = c.desc.kind;
  const CallWords& w = call_words(p, c);
  if (root_only(k)) return p == c.desc.root && w.send_arena_off.load() >= 0;
  if (w.send_arena_off.load() < 0) return false;
  return k != CollectiveKind::kAllReduce || w.recv_arena_off.load() >= 0;
}

bool ShmGroup::qualifies(const Call& c, int p) const {
  if (root_only(c.desc.kind) && p != c.desc.root) return false;
  return c.kc_all || in_arena(c, p);
}

bool ShmGroup::zero_copy_eligible(const Call& c) const {
  if (root_only(c.desc.kind)) return qualifies(c, c.desc.root);
  for (int p = 0; p < n_; ++p) {
    if (!qualifies(c, p)) return false;
  }
  return true;
}

const uint8_t* ShmGroup::peer_buffer(const Call& c, int p, bool recv) const {
  if (p == me_) return static_cast<const uint8_t*>(recv ? c.desc.recv : c.desc.send);
  const CallWords& w = call_words(p, c);
  const int64_t off = (recv ? w.recv_arena_off : w.send_arena_off).load(std::memory_order_relaxed);
  return off >= 0 ? seg_->arena(p) + off : nullptr;
}

void ShmGroup::read_peer(Call& c, int p, bool recv, int64_t offset, int64_t bytes, void* dst) {
  if (bytes <= 0) return;
  if (const uint8_t* src = peer_buffer(c, p, recv)) {
    // A large result is written with streaming stores, as the slot path's (docs/shm.md).
    copy_out(dst, src + offset, bytes, bytes >= int64_t(seg_->header().nontemporal_bytes));
    return;
  }
  kernel_copy(c, p, recv, offset, bytes, dst, false);
}

void ShmGroup::write_peer(Call& c, int p, int64_t offset, int64_t bytes, const void* src) {
  if (bytes > 0) kernel_copy(c, p, true, offset, bytes, const_cast<void*>(src), true);
}

void ShmGroup::kernel_copy(Call& c, int p, bool recv, int64_t offset, int64_t bytes, void* mine,
                           bool write) {
  c.kc_used = true;
  const CallWords& w = call_words(p, c);
  const uint64_t base = (recv ? w.recv_addr : w.send_addr).load(std::memory_order_relaxed);
  kernel_copy_at(c, p, base + static_cast<uint64_t>(offset), bytes, mine, write);
}

void ShmGroup::kernel_copy_at(Call& c, int p, uint64_t base, int64_t bytes, void* mine,
                              bool write) {
  const pid_t pid = seg_->control(p).pid.load(std::memory_order_acquire);
  auto* local_bytes = static_cast<uint8_t*>(mine);
  int64_t done = 0;
  while (done < bytes) {
    iovec local{local_bytes + done, static_cast<size_t>(bytes - done)};
    iovec remote{reinterpret_cast<void*>(base + static_cast<uint64_t>(done)),
                 static_cast<size_t>(bytes - done)};
    const ssize_t got = write ? process_vm_writev(pid, &local, 1, &remote, 1, 0)
                              : process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (got > 0) {
      done += got;
      continue;
    }
    const int err = got < 0 ? errno : EIO;
    if (err == EINTR) continue;
    kernel_copy_failed(c, p, pid, write, bytes - done, err);
  }
}

// A peer that is exiting fails the copy (ESRCH, or EFAULT once its memory is gone) a moment
// before it is seen dead: wait up to a second for that, so that the error is the usual peer
// lost (naming the missing rank, as every wait's) rather than a failed system call.
void ShmGroup::kernel_copy_failed(Call& c, int p, int32_t pid, bool write, int64_t bytes, int err) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (true) {
    fail_if_a_peer_exited(c);
    const uint32_t aborted = seg_->control(p).aborted.load(std::memory_order_acquire);
    if (aborted != 0) {
      fail_wait(c, ErrorKind::kPeerLost,
                "group rank " + std::to_string(p) + " (world rank " +
                    std::to_string(context_.global_ranks[p]) + ") left the group after a " +
                    std::string(to_string(static_cast<ErrorKind>(aborted - 1))) + " error",
                {p});
    }
    if (std::chrono::steady_clock::now() >= until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const std::string what =
      "shm: " + describe_call(c) + ": " + (write ? "process_vm_writev" : "process_vm_readv") +
      " of " + std::to_string(bytes) + " bytes " + (write ? "to" : "from") + " group rank " +
      std::to_string(p) + " (world rank " + std::to_string(context_.global_ranks[p]) + ", pid " +
      std::to_string(pid) + ") failed: " + std::strerror(err);
  BRAID_CHECK(err != EPERM && err != ENOSYS, kNotSupported, what,
              "; expected the kernel to copy between the ranks' buffers (docs/shm.md, \"Kernel "
              "copy\"); "
              "BRAID_SHM_KERNEL_COPY_BYTES=0 stages every message through shared memory instead");
  BRAID_FAIL(kInternal, what, " (the peer is alive: its buffer is not where it said)");
}

// Note [Zero-copy decision]
// Whether a call can read its peers' buffers in place depends on every rank's buffers, so it
// is decided after a ready wait; an extra step for it alone cost a fifth of a 1 MiB
// all_reduce's time (docs/shm.md). So the decision rides on the slot path's first step: each
// rank publishes its arena offsets (and, Note [Kernel copy], whether it offers its buffers to
// process_vm_readv) with the call, and a rank whose own buffers qualify stages nothing in that
// step. After the ready wait every rank sees the same words: all qualify, and the zero-copy
// path runs from there; none does, and the slot path goes on; some do, and the slot path
// starts again (one wasted step, only when ranks mix arena and other buffers).
// Whether call c tries the kernel copy: decided from the call, rank 0's header and the group's
// history alone, so every rank decides alike. all_reduce takes it from kKernelCopyAllReduceBytes
// at the least: its zero-copy form has three steps where the one-shot slot path has one (2
// ranks in place: 10.8 against 6.9-7.5 GB/s at 256 KiB and 1 MiB staged and kernel-copied, a tie
// at 2 MiB, 8.8 against 12.2 at 4 MiB; docs/performance.md).
bool ShmGroup::tries_kernel_copy(const Call& c) const {
  constexpr uint64_t kKernelCopyAllReduceBytes = uint64_t{2} << 20;
  const SegmentHeader& h = seg_->header();
  uint64_t threshold = h.kernel_copy_bytes;
  if (threshold == 0 || kernel_copy_off_) return false;
  const CollectiveKind k = c.desc.kind;
  const uint64_t bytes = static_cast<uint64_t>(c.desc.count) * dtype_size(c.desc.dtype);
  // all_to_all and scatter read each block once, as gather does: the same threshold.
  const bool gathers = k == CollectiveKind::kAllGather || k == CollectiveKind::kGather ||
                       k == CollectiveKind::kAllToAll || k == CollectiveKind::kScatter;
  if (gathers && h.kernel_copy_gather_bytes != 0) {
    threshold = std::min(threshold, h.kernel_copy_gather_bytes);
  }
  const uint64_t result = gathers ? bytes * static_cast<uint64_t>(n_) : bytes;
  // Not all_to_all's or scatter's: the limit is for results whose every block n-1 readers read
  // from memory (Note [Kernel copy]), where these read each once (8 ranks on 2 vCPUs, 4 MiB
  // all_to_all: 1.6x).
  const bool once = k == CollectiveKind::kAllToAll || k == CollectiveKind::kScatter;
  if (h.kernel_copy_limit != 0 && result > h.kernel_copy_limit && !once) return false;
  return bytes >= (k == CollectiveKind::kAllReduce ? std::max(threshold, kKernelCopyAllReduceBytes)
                                                   : threshold);
}

void ShmGroup::zero_copy_candidate(Call& c) {
  const SegmentHeader& h = seg_->header();
  const CollectiveDesc& d = c.desc;
  const int64_t es = static_cast<int64_t>(dtype_size(d.dtype));
  const int64_t bytes = d.count * es;
  if (static_cast<uint64_t>(bytes) < zc_floor_bytes_) return;  // the common small call
  // Decided from the call, rank 0's header and the group's history alone: every rank takes
  // these branches alike.
  const bool arena = h.arena_bytes != 0 && bytes >= static_cast<int64_t>(h.zerocopy_bytes);
  c.kc_tried = tries_kernel_copy(c);
  if (d.count <= 0 || (!arena && !c.kc_tried)) return;
  const bool blocks = d.kind == CollectiveKind::kReduceScatter ||
                      d.kind == CollectiveKind::kAllToAll || d.kind == CollectiveKind::kScatter;
  const int64_t send_bytes = blocks ? n_ * bytes : bytes;
  // An all_to_all in place rewrites the blocks its peers read: it stages, and declines for
  // this call only (peers that offered start the slot path again).
  const bool overwrites_peers_reads =
      d.kind == CollectiveKind::kAllToAll &&
      overlaps(d.send, static_cast<size_t>(send_bytes), d.recv, static_cast<size_t>(n_ * bytes));
  if (arena && !overwrites_peers_reads) {
    c.send_off = arena_offset(d.send, send_bytes);
    if (d.kind == CollectiveKind::kAllReduce) c.recv_off = arena_offset(d.recv, bytes);
  }
  c.kc_mine = c.kc_tried && kernel_copy_able_ && !overwrites_peers_reads;
  c.kc_declined = c.kc_tried && kernel_copy_able_ && overwrites_peers_reads;
  // Where peers would read this rank's buffers page by page through the kernel, each 4 KiB
  // page costs a pin: large reductions on such buffers stage instead (Note [Kernel copy]).
  if (c.kc_mine && bytes >= static_cast<int64_t>(kKernelCopyPagedBytes) &&
      (d.kind == CollectiveKind::kAllReduce || d.kind == CollectiveKind::kReduceScatter)) {
    const bool huge = cpu_memory_on_huge_pages(d.send, static_cast<size_t>(send_bytes)) &&
                      (d.kind != CollectiveKind::kAllReduce || d.recv == d.send ||
                       cpu_memory_on_huge_pages(d.recv, static_cast<size_t>(bytes)));
    c.kc_declined = !huge;
    c.kc_mine = huge;
  }
  c.zc_candidate = true;
  const bool mine_in_arena =
      c.send_off >= 0 && (d.kind != CollectiveKind::kAllReduce || c.recv_off >= 0);
  c.zc_mine = (!root_only(d.kind) || me_ == d.root) && (mine_in_arena || c.kc_mine);
}

bool ShmGroup::resolve_zero_copy(Call& c) {
  if (c.kc_tried) {
    // Every rank offered, and every pid names the same process for every rank (one pid
    // namespace): ranks in containers of their own but one /dev/shm must not read a stranger.
    // A rank that declined this call (2) leaves the group trying at later calls; one that
    // cannot (0) stops it.
    const uint64_t ns = seg_->control(0).pid_ns.load(std::memory_order_relaxed);
    bool cannot = ns == 0;
    c.kc_all = ns != 0;
    for (int p = 0; p < n_; ++p) {
      const uint32_t word = call_words(p, c).kernel_copy.load();
      const bool same_ns = seg_->control(p).pid_ns.load(std::memory_order_relaxed) == ns;
      c.kc_all &= word == 1 && same_ns;
      cannot |= word == 0 || !same_ns;
    }
    kernel_copy_off_ = cannot;  // every rank reads the same words: all stop together
  }
  if (zero_copy_eligible(c)) {
    zero_copy_first(c);
    c.zc_taken = true;
    return true;
  }
  for (int p = 0; p < n_; ++p) {
    const bool staged_nothing = (!root_only(c.desc.kind) || p == c.desc.root) &&
                                (in_arena(c, p) || call_words(p, c).kernel_copy.load() == 1);
    if (staged_nothing) {
      c.zc_repeat = true;
      return true;
    }
  }
  return false;
}

void ShmGroup::finish_zero_copy(Call& c) {
  if (c.desc.kind == CollectiveKind::kAllReduce) {
    step(
        c, 0, [] {}, [&] { zero_copy_gather_stripes(c); });
  }
  // An empty step: once every peer is ready for it, every peer has finished reading my buffers.
  step(
      c, 0, [] {}, [] {});
  zero_copy_calls_.fetch_add(1, std::memory_order_relaxed);
  if (c.kc_used) kernel_copy_calls_.fetch_add(1, std::memory_order_relaxed);
}

// The one step of broadcast / all_gather / gather / reduce / reduce_scatter, and step A of
// all_reduce (rank r folds stripe r of every send buffer into stripe r of its recv buffer).
// No two ranks write the same bytes, and no rank writes bytes another reads in this step:
// in place, a rank writes only the part of its buffer that no peer reads.
void ShmGroup::zero_copy_first(Call& c) {
  const CollectiveDesc& d = c.desc;
  const int64_t es = static_cast<int64_t>(dtype_size(d.dtype));
  const int64_t bytes = d.count * es;
  // Folds elements [offset_bytes / es, + count) of every rank's send buffer into `out`; the
  // parts of peers that must be kernel-copied go through peer_scratch_ a chunk at a time.
  auto fold = [&](int64_t offset_bytes, int64_t count, void* out) {
    if (count <= 0) return;
    bool direct = true;
    for (int p = 0; p < n_; ++p) direct &= peer_buffer(c, p, false) != nullptr;
    Folder folder(d.dtype, d.op, c.factors, n_);
    if (direct) {
      for (int p = 0; p < n_; ++p) inputs_[p] = peer_buffer(c, p, false) + offset_bytes;
      folder.fold(inputs_.data(), n_, count, out);
      return;
    }
    const int64_t chunk = chunk_elems(count, es);
    peer_scratch_.resize(static_cast<size_t>(n_ * chunk * es));
    for (int64_t i = 0; i < count; i += chunk) {
      const int64_t len = std::min(chunk, count - i);
      const int64_t at = offset_bytes + i * es;
      for (int p = 0; p < n_; ++p) {
        if (const uint8_t* src = peer_buffer(c, p, false)) {
          inputs_[p] = src + at;
        } else {
          uint8_t* tmp = peer_scratch_.data() + p * chunk * es;
          read_peer(c, p, false, at, len * es, tmp);
          inputs_[p] = tmp;
        }
      }
      folder.fold(inputs_.data(), n_, len, static_cast<uint8_t*>(out) + i * es);
    }
  };
  switch (d.kind) {
    case CollectiveKind::kAllReduce: {
      const int64_t lo = d.count * me_ / n_, hi = d.count * (me_ + 1) / n_;
      fold(lo * es, hi - lo, static_cast<uint8_t*>(d.recv) + lo * es);
      break;
    }
    case CollectiveKind::kReduce:
      if (me_ == d.root) fold(0, d.count, d.recv);
      break;
    case CollectiveKind::kReduceScatter:
      fold(int64_t{me_} * bytes, d.count, d.recv);
      break;
    case CollectiveKind::kBroadcast: {
      // In place the root has nothing of its own to copy, so with kernel copy it writes the
      // first 1/n of every peer's buffer while each peer reads the rest from the root: both
      // sides copy (docs/shm.md, "Kernel copy"; 2 ranks, 16 MiB: 12.8 -> 28 GB/s).
      const CallWords& root = call_words(d.root, c);  // the root's words: all ranks agree
      const bool split = c.kc_all && n_ > 1 &&
                         root.send_addr.load(std::memory_order_relaxed) ==
                             root.recv_addr.load(std::memory_order_relaxed);
      const int64_t share = split ? d.count / n_ * es : 0;
      if (me_ == d.root) {
        read_peer(c, d.root, false, 0, bytes, d.recv);
        for (int p = 0; p < n_ && share > 0; ++p) {
          if (p != me_) write_peer(c, p, 0, share, d.send);
        }
      } else {
        read_peer(c, d.root, false, share, bytes - share, static_cast<uint8_t*>(d.recv) + share);
      }
      break;
    }
    case CollectiveKind::kAllGather:
    case CollectiveKind::kGather:
      if (d.kind == CollectiveKind::kGather && me_ != d.root) break;
      for (int p = 0; p < n_; ++p) {
        read_peer(c, p, false, 0, bytes, static_cast<uint8_t*>(d.recv) + p * bytes);
      }
      break;
    case CollectiveKind::kAllToAll:
      // Block `me` of every rank's send buffer into block p of mine (out of place only:
      // zero_copy_candidate), starting with the next rank so that the ranks spread their reads.
      for (int i = 1; i <= n_; ++i) {
        const int p = (me_ + i) % n_;
        read_peer(c, p, false, int64_t{me_} * bytes, bytes,
                  static_cast<uint8_t*>(d.recv) + p * bytes);
      }
      break;
    case CollectiveKind::kScatter:
      // Block `me` of the root's send buffer (the root's own, in place, is already there).
      read_peer(c, d.root, false, int64_t{me_} * bytes, bytes, d.recv);
      break;
    default:
      BRAID_ASSERT(false, "shm: zero-copy path entered for ", collective_name(d.kind));
  }
}

// all_reduce step B: copy stripe p of rank p's recv buffer (its folded stripe) into mine.
void ShmGroup::zero_copy_gather_stripes(Call& c) {
  const CollectiveDesc& d = c.desc;
  const int64_t es = static_cast<int64_t>(dtype_size(d.dtype));
  for (int p = 0; p < n_; ++p) {
    if (p == me_) continue;
    const int64_t lo = d.count * p / n_, hi = d.count * (p + 1) / n_;
    read_peer(c, p, true, lo * es, (hi - lo) * es, static_cast<uint8_t*>(d.recv) + lo * es);
  }
}

}  // namespace braid::shm
