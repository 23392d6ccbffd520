// The shm segment: create / open / unlink of the POSIX shared-memory object, the offsets of
// its parts, futex wait / wake on its words and the liveness check of peer processes
// (docs/shm.md, "Segment layout" and "Waiting").
#include "shm_segment.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <new>

#include "braid/core/error.h"

namespace braid::shm {
namespace {

constexpr size_t kPage = 4096;
// Per rank: the cells, then the data slots.
constexpr size_t kBcastCellsBytes = kBcastCells * sizeof(BcastCell);
constexpr size_t kBcastStride = kBcastCellsBytes + kBcastSlots * kBcastCellBytes;

size_t round_up(size_t v, size_t to) {
  return (v + to - 1) / to * to;
}

struct Layout {
  size_t control_off, slot_off, mailbox_off, mailbox_stride, bcast_off, arena_off, total;
};

Layout layout_for(int nranks, uint64_t slot_bytes, uint64_t mailbox_bytes, uint64_t arena_bytes) {
  Layout l{};
  const size_t n = static_cast<size_t>(nranks);
  l.control_off = round_up(sizeof(SegmentHeader), kPage);
  l.slot_off = round_up(l.control_off + n * sizeof(ControlBlock), kPage);
  l.mailbox_off = l.slot_off + n * slot_region_bytes(slot_bytes);
  l.mailbox_stride = round_up(sizeof(MailboxHeader) + mailbox_bytes, 64);
  l.bcast_off = round_up(l.mailbox_off + n * n * l.mailbox_stride, kPage);
  l.arena_off = round_up(l.bcast_off + n * kBcastStride, kPage);
  l.total = l.arena_off + n * arena_bytes;
  return l;
}

std::string errno_text(int e) {
  return std::strerror(e);
}

}  // namespace

Segment::Segment(std::string name, int nranks, uint8_t* base, size_t bytes, int fd)
    : name_(std::move(name)), nranks_(nranks), base_(base), bytes_(bytes), fd_(fd) {}

Segment::~Segment() {
  if (base_) munmap(base_, bytes_);
  if (fd_ >= 0) close(fd_);
}

void Segment::compute_offsets() {
  const Layout l =
      layout_for(nranks_, header().slot_bytes, header().mailbox_bytes, header().arena_bytes);
  arena_off_ = l.arena_off;
  control_off_ = l.control_off;
  slot_off_ = l.slot_off;
  mailbox_off_ = l.mailbox_off;
  mailbox_stride_ = l.mailbox_stride;
  bcast_off_ = l.bcast_off;
}

std::unique_ptr<Segment> Segment::create(const std::string& name, int nranks,
                                         SegmentConfig config) {
  config.arena_bytes = round_up(config.arena_bytes, kPage);
  const Layout l = layout_for(nranks, config.slot_bytes, config.mailbox_bytes, config.arena_bytes);
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  BRAID_CHECK(fd >= 0, kIo, "shm: shm_open(", name, ", O_CREAT|O_EXCL) failed: ", errno_text(errno),
              " (expected a fresh name; stale /dev/shm", name, " from a crashed job?)");
  int err = ftruncate(fd, static_cast<off_t>(l.total)) == 0 ? 0 : errno;
  // Reserve the pages now: a full /dev/shm must fail here, not with SIGBUS on a later store.
  // The arenas stay sparse: allocate() reserves each block's pages when it hands it out.
  if (err == 0) err = posix_fallocate(fd, 0, static_cast<off_t>(l.arena_off));
  void* base =
      err == 0 ? mmap(nullptr, l.total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  if (err == 0 && base == MAP_FAILED) err = errno;
  if (err != 0) {
    close(fd);
    shm_unlink(name.c_str());
    if (err == ENOSPC || err == ENOMEM) {
      BRAID_FAIL(kOutOfMemory, "shm: cannot reserve ", l.total, " bytes for segment ", name,
                 " in /dev/shm: ", errno_text(err), " (expected room for ", nranks, " slots of ",
                 config.slot_bytes, " bytes; lower BRAID_SHM_SLOT_BYTES or enlarge /dev/shm)");
    }
    BRAID_FAIL(kIo, "shm: sizing / mapping segment ", name, " (", l.total,
               " bytes) failed: ", errno_text(err));
  }
  auto* header = new (base) SegmentHeader();
  header->nranks = static_cast<uint32_t>(nranks);
  header->slot_bytes = config.slot_bytes;
  header->mailbox_bytes = config.mailbox_bytes;
  header->oneshot_bytes = config.oneshot_bytes;
  header->algo = config.algo;
  header->total_bytes = l.total;
  header->arena_bytes = config.arena_bytes;
  header->zerocopy_bytes = config.zerocopy_bytes;
  header->chunk_bytes = config.chunk_bytes;
  header->nontemporal_bytes = config.nontemporal_bytes;
  header->kernel_copy_bytes = config.kernel_copy_bytes;
  header->kernel_copy_limit = config.kernel_copy_limit;
  header->kernel_copy_gather_bytes = config.kernel_copy_gather_bytes;
  header->bcast_bytes = std::min<uint64_t>(config.bcast_bytes, kBcastMaxBytes);
  header->reduce_bytes = config.reduce_bytes;
  std::unique_ptr<Segment> seg(new Segment(name, nranks, static_cast<uint8_t*>(base), l.total, fd));
  seg->compute_offsets();
  for (int r = 0; r < nranks; ++r) {
    new (&seg->control(r)) ControlBlock();
    for (int d = 0; d < nranks; ++d) new (&seg->mailbox(r, d)) MailboxHeader();
    for (int j = 0; j < kBcastCells; ++j) new (&seg->bcast_cell(r, j)) BcastCell();
  }
  // Written last: a rank that maps early sees either no magic or a complete header.
  std::atomic_ref<uint32_t>(header->version).store(kVersion, std::memory_order_relaxed);
  std::atomic_ref<uint32_t>(header->magic).store(kMagic, std::memory_order_release);
  return seg;
}

std::unique_ptr<Segment> Segment::open(const std::string& name, int nranks) {
  const int fd = shm_open(name.c_str(), O_RDWR, 0600);
  BRAID_CHECK(fd >= 0, kIo, "shm: shm_open(", name, ") failed: ", errno_text(errno),
              " (expected the segment rank 0 published through the store)");
  struct stat st {};
  const int stat_rc = fstat(fd, &st);
  const size_t bytes = stat_rc == 0 ? static_cast<size_t>(st.st_size) : 0;
  void* base = bytes >= sizeof(SegmentHeader)
                   ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                   : MAP_FAILED;
  const int err = errno;
  if (base == MAP_FAILED) close(fd);
  BRAID_CHECK(base != MAP_FAILED, kIo, "shm: mapping segment ", name, " (", bytes,
              " bytes) failed: ", errno_text(err));
  std::unique_ptr<Segment> seg(new Segment(name, nranks, static_cast<uint8_t*>(base), bytes, fd));
  SegmentHeader& h = seg->header();
  const uint32_t magic = std::atomic_ref<uint32_t>(h.magic).load(std::memory_order_acquire);
  BRAID_CHECK(magic == kMagic && h.version == kVersion, kCorruptData, "shm: segment ", name,
              " has magic 0x", std::hex, magic, std::dec, " version ", h.version,
              " (expected a braid shm segment, version ", kVersion, ")");
  BRAID_CHECK(h.nranks == static_cast<uint32_t>(nranks) && h.total_bytes == bytes, kCorruptData,
              "shm: segment ", name, " is for ", h.nranks, " ranks and ", h.total_bytes,
              " bytes (expected ", nranks, " ranks and the file's ", bytes, " bytes)");
  seg->compute_offsets();
  return seg;
}

void Segment::mark_mapped() {
  const uint32_t before = header().mapped.fetch_add(1, std::memory_order_acq_rel);
  if (before + 1 == static_cast<uint32_t>(nranks_)) shm_unlink(name_.c_str());
}

uint8_t* Segment::slot(int rank) const {
  const uint64_t slot = header().slot_bytes;
  return base_ + slot_off_ + static_cast<size_t>(rank) * slot_region_bytes(slot);
}

MailboxHeader& Segment::mailbox(int src, int dst) const {
  const size_t index = static_cast<size_t>(src) * nranks_ + dst;
  return *reinterpret_cast<MailboxHeader*>(base_ + mailbox_off_ + index * mailbox_stride_);
}

uint8_t* Segment::mailbox_data(int src, int dst) const {
  return reinterpret_cast<uint8_t*>(&mailbox(src, dst)) + sizeof(MailboxHeader);
}

BcastCell& Segment::bcast_cell(int rank, int j) const {
  uint8_t* ring = base_ + bcast_off_ + static_cast<size_t>(rank) * kBcastStride;
  return reinterpret_cast<BcastCell*>(ring)[j];
}

uint8_t* Segment::bcast_slot(int rank, int k) const {
  uint8_t* ring = base_ + bcast_off_ + static_cast<size_t>(rank) * kBcastStride;
  return ring + kBcastCellsBytes + static_cast<size_t>(k) * kBcastCellBytes;
}

void Segment::touch_pages(int me) const {
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14
#endif
  // Populates the page tables without reading the bytes (peers may already write them); the
  // pages themselves exist already (create() reserved them). An older kernel refuses (EINVAL):
  // the first use of each page then takes the fault.
  auto populate = [&](size_t begin, size_t end) {
    const size_t from = begin / kPage * kPage, to = std::min(round_up(end, kPage), bytes_);
    if (to > from) (void)madvise(base_ + from, to - from, MADV_POPULATE_READ);
  };
  const size_t n = static_cast<size_t>(nranks_);
  const uint64_t slot = header().slot_bytes;
  populate(slot_off_, slot_off_ + n * slot_region_bytes(slot));  // every rank's slot
  const size_t me_row = mailbox_off_ + static_cast<size_t>(me) * n * mailbox_stride_;
  populate(me_row, me_row + n * mailbox_stride_);  // the mailboxes this rank sends through
  for (size_t src = 0; src < n; ++src) {           // and those it receives from
    const size_t box = mailbox_off_ + (src * n + static_cast<size_t>(me)) * mailbox_stride_;
    populate(box, box + mailbox_stride_);
  }
  populate(bcast_off_, bcast_off_ + n * kBcastStride);  // every rank's small-broadcast ring
}

uint8_t* Segment::arena(int rank) const {
  return base_ + arena_off_ + static_cast<size_t>(rank) * header().arena_bytes;
}

void Segment::reserve_arena(int rank, uint64_t offset, uint64_t bytes) {
  const uint64_t start = arena_off_ + rank * header().arena_bytes + offset;
  const int err = posix_fallocate(fd_, static_cast<off_t>(start), static_cast<off_t>(bytes));
  if (err == ENOSPC || err == ENOMEM) {
    BRAID_FAIL(kOutOfMemory, "shm: cannot reserve ", bytes, " bytes of rank ", rank,
               "'s arena in segment ", name_, ": ", errno_text(err),
               " (expected room in /dev/shm; enlarge it or allocate less)");
  }
  BRAID_CHECK(err == 0, kIo, "shm: reserving ", bytes, " bytes of rank ", rank,
              "'s arena in segment ", name_, " failed: ", errno_text(err));
}

void futex_wait(std::atomic<uint32_t>& word, uint32_t expected, std::chrono::milliseconds slice) {
  struct timespec ts {};
  ts.tv_sec = slice.count() / 1000;
  ts.tv_nsec = (slice.count() % 1000) * 1000000;
  // EAGAIN (value changed), EINTR and ETIMEDOUT all mean "look again"; the caller loops.
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void publish_word(std::atomic<uint32_t>& word, std::atomic<uint32_t>& waiters, uint32_t value) {
  word.store(value, std::memory_order_seq_cst);
  if (waiters.load(std::memory_order_seq_cst) != 0) futex_wake_all(word);
}

uint64_t pid_namespace() {
  struct stat st {};
  return ::stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

PeerWatch::PeerWatch(int nranks) : pidfd_(nranks, -1), pid_(nranks, 0), pid_ns_(pid_namespace()) {}

PeerWatch::~PeerWatch() {
  for (int fd : pidfd_) {
    if (fd >= 0) close(fd);
  }
}

bool PeerWatch::alive(int rank, int32_t pid, uint64_t pid_ns) {
  if (pid <= 0 || pid == getpid()) return true;  // not mapped yet, or ranks as threads
  if (pid_ns != 0 && pid_ns_ != 0 && pid_ns != pid_ns_) return true;  // not a pid of ours
  if (pid_[rank] != pid) {
    if (pidfd_[rank] >= 0) close(pidfd_[rank]);
    pid_[rank] = pid;
    const long fd = syscall(SYS_pidfd_open, pid, 0);
    pidfd_[rank] = fd >= 0 ? static_cast<int>(fd) : (errno == ESRCH ? -3 : -2);
  }
  if (pidfd_[rank] == -3) return false;  // gone before we could open it
  if (pidfd_[rank] >= 0) {
    struct pollfd p {};
    p.fd = pidfd_[rank];
    p.events = POLLIN;
    return poll(&p, 1, 0) == 0;  // readable once the process has terminated
  }
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const size_t close_paren = line.rfind(')');
  return close_paren == std::string::npos || close_paren + 2 >= line.size() ||
         line[close_paren + 2] != 'Z';
}

}  // namespace braid::shm
