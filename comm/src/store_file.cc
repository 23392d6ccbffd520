// FileStore: processes of one machine share a store through one file.
//
// The file is "BRAIDFS1" followed by an append-only log of records
//   u8 op (1 = set, 2 = delete) | u32 key bytes | u32 value bytes | key | value   (little-endian)
// Writers append one whole record with a single pwrite() under an exclusive flock(); readers
// replay new records under a shared flock(). A record cut short by a crash is ignored by
// readers and overwritten by the next writer. Waits re-read the file with sleeps that back off
// from 1 ms to 10 ms: there is no cross-process notification to sleep on, and 10 ms keeps a
// waiting process cheap while rendezvous stays quick (docs/store.md).
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "braid/comm/store.h"
#include "braid/core/error.h"
#include "store_detail.h"

namespace braid {

namespace {

constexpr char kMagic[8] = {'B', 'R', 'A', 'I', 'D', 'F', 'S', '1'};
constexpr size_t kRecordHeader = 9;
enum : uint8_t { kOpSet = 1, kOpDelete = 2 };

uint32_t load_u32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
void store_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(uint8_t(v >> (8 * i)));
}

}  // namespace

struct FileStore::State {
  std::string path;
  int fd = -1;
  std::mutex mutex;  // threads of this process share fd, and so its flock
  std::map<std::string, std::vector<uint8_t>, std::less<>> data;
  uint64_t offset = sizeof(kMagic);  // end of the last complete record replayed

  // flock() for the scope; EINTR is retried.
  class FileLock {
   public:
    FileLock(const State& s, int op) : s_(s) {
      while (::flock(s.fd, op) != 0) {
        BRAID_CHECK(errno == EINTR, kIo, "FileStore: flock('", s.path,
                    "'): ", std::strerror(errno));
      }
    }
    ~FileLock() { ::flock(s_.fd, LOCK_UN); }
    FileLock(const FileLock&) = delete;
    FileLock& operator=(const FileLock&) = delete;

   private:
    const State& s_;
  };

  uint64_t file_size() const {
    struct stat st {};
    BRAID_CHECK(::fstat(fd, &st) == 0, kIo, "FileStore: fstat('", path,
                "'): ", std::strerror(errno));
    return static_cast<uint64_t>(st.st_size);
  }

  void read_exact(uint64_t at, void* dst, size_t n) const {
    auto* p = static_cast<uint8_t*>(dst);
    while (n > 0) {
      ssize_t got = ::pread(fd, p, n, static_cast<off_t>(at));
      if (got < 0 && errno == EINTR) continue;
      BRAID_CHECK(got > 0, kIo, "FileStore: read('", path, "') at offset ", at, ": ",
                  got < 0 ? std::strerror(errno) : "unexpected end of file");
      p += got;
      at += static_cast<uint64_t>(got);
      n -= static_cast<size_t>(got);
    }
  }

  void write_exact(uint64_t at, const std::vector<uint8_t>& bytes) const {
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t put =
          ::pwrite(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(at + done));
      if (put < 0 && errno == EINTR) continue;
      BRAID_CHECK(put > 0, kIo, "FileStore: write('", path, "'): ", std::strerror(errno));
      done += static_cast<size_t>(put);
    }
  }

  // Replays the records appended since `offset`; call under a flock.
  void refresh() {
    uint64_t size = file_size();
    if (size <= offset) return;
    std::vector<uint8_t> buf(size - offset);
    read_exact(offset, buf.data(), buf.size());
    size_t pos = 0;
    while (buf.size() - pos >= kRecordHeader) {
      uint8_t op = buf[pos];
      uint32_t klen = load_u32(&buf[pos + 1]);
      uint32_t vlen = load_u32(&buf[pos + 5]);
      BRAID_CHECK((op == kOpSet || op == kOpDelete) && klen > 0 && klen <= kMaxKeyBytes &&
                      vlen <= kMaxValueBytes,
                  kCorruptData, "FileStore: '", path, "' has a bad record at offset ", offset + pos,
                  " (op ", int(op), ", key ", klen, " bytes, value ", vlen,
                  " bytes); expected op 1 or 2 within the store's limits");
      if (buf.size() - pos - kRecordHeader < uint64_t(klen) + vlen) break;  // torn tail
      const uint8_t* k = &buf[pos + kRecordHeader];
      std::string key(reinterpret_cast<const char*>(k), klen);
      if (op == kOpSet) {
        data.insert_or_assign(std::move(key), std::vector<uint8_t>(k + klen, k + klen + vlen));
      } else {
        data.erase(key);
      }
      pos += kRecordHeader + klen + vlen;
    }
    offset += pos;
  }

  // Appends one record; call under the exclusive flock, after refresh().
  void append(uint8_t op, std::string_view key, std::span<const uint8_t> value) {
    std::vector<uint8_t> rec;
    rec.reserve(kRecordHeader + key.size() + value.size());
    rec.push_back(op);
    store_u32(rec, static_cast<uint32_t>(key.size()));
    store_u32(rec, static_cast<uint32_t>(value.size()));
    rec.insert(rec.end(), key.begin(), key.end());
    rec.insert(rec.end(), value.begin(), value.end());
    if (file_size() > offset) {  // a torn record left by a crashed writer
      BRAID_CHECK(::ftruncate(fd, static_cast<off_t>(offset)) == 0, kIo, "FileStore: truncate('",
                  path, "'): ", std::strerror(errno));
    }
    write_exact(offset, rec);
    offset += rec.size();
    if (op == kOpSet) {
      data.insert_or_assign(std::string(key), std::vector<uint8_t>(value.begin(), value.end()));
    } else {
      data.erase(std::string(key));
    }
  }

  std::vector<std::string> missing(const std::vector<std::string>& keys) const {
    std::vector<std::string> out;
    for (const auto& key : keys) {
      if (!data.contains(key)) out.push_back(key);
    }
    return out;
  }

  // Polls until `keys` all exist, with backed-off sleeps outside the locks.
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
    using namespace std::chrono;
    auto deadline = steady_clock::now() + timeout;
    auto pause = microseconds(1000);
    for (;;) {
      {
        std::lock_guard guard(mutex);
        FileLock lock(*this, LOCK_SH);
        refresh();
        auto gone = missing(keys);
        if (gone.empty()) return;
        if (steady_clock::now() >= deadline) {
          store_detail::throw_wait_timeout("FileStore '" + path + "'", gone, keys, timeout);
        }
      }
      auto left = duration_cast<microseconds>(deadline - steady_clock::now());
      std::this_thread::sleep_for(std::max(microseconds(0), std::min(pause, left)));
      pause = std::min(pause * 2, microseconds(10000));
    }
  }
};

FileStore::FileStore(std::string path, std::chrono::milliseconds timeout)
    : Store(timeout), state_(std::make_unique<State>()) {
  auto& s = *state_;
  s.path = std::move(path);
  BRAID_CHECK(!s.path.empty(), kInvalidArgument, "FileStore: the path is empty");
  s.fd = ::open(s.path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  BRAID_CHECK(s.fd >= 0, kIo, "FileStore: open('", s.path, "'): ", std::strerror(errno));
  try {
    State::FileLock lock(s, LOCK_EX);
    if (s.file_size() == 0) {
      s.write_exact(0, std::vector<uint8_t>(std::begin(kMagic), std::end(kMagic)));
    } else {
      char magic[sizeof(kMagic)] = {};
      BRAID_CHECK(s.file_size() >= sizeof(kMagic), kCorruptData, "FileStore: '", s.path,
                  "' is too short to be a store log; expected it to start with BRAIDFS1");
      s.read_exact(0, magic, sizeof(magic));
      BRAID_CHECK(std::memcmp(magic, kMagic, sizeof(kMagic)) == 0, kCorruptData, "FileStore: '",
                  s.path, "' is not a store log; expected it to start with BRAIDFS1");
    }
    s.refresh();
  } catch (...) {
    ::close(s.fd);
    throw;
  }
}

FileStore::~FileStore() {
  if (state_ && state_->fd >= 0) ::close(state_->fd);
}

const std::string& FileStore::path() const {
  return state_->path;
}

void FileStore::do_set(std::string_view key, std::span<const uint8_t> value) {
  std::lock_guard guard(state_->mutex);
  State::FileLock lock(*state_, LOCK_EX);
  state_->refresh();
  state_->append(kOpSet, key, value);
}

std::vector<uint8_t> FileStore::do_get(std::string_view key, std::chrono::milliseconds timeout) {
  state_->wait({std::string(key)}, timeout);
  std::lock_guard guard(state_->mutex);
  auto it = state_->data.find(key);
  // Deleted between the wait and here: report it as the timeout the caller would have met.
  if (it == state_->data.end()) {
    store_detail::throw_wait_timeout("FileStore '" + state_->path + "'", {std::string(key)},
                                     {std::string(key)}, timeout);
  }
  return it->second;
}

int64_t FileStore::do_add(std::string_view key, int64_t delta) {
  std::lock_guard guard(state_->mutex);
  State::FileLock lock(*state_, LOCK_EX);
  state_->refresh();
  auto it = state_->data.find(key);
  int64_t current = it == state_->data.end() ? 0 : store_detail::parse_counter(key, it->second);
  int64_t next = store_detail::checked_add(key, current, delta);
  state_->append(kOpSet, key, store_detail::format_counter(next));
  return next;
}

std::vector<uint8_t> FileStore::do_compare_set(std::string_view key,
                                               std::span<const uint8_t> expected,
                                               std::span<const uint8_t> desired) {
  std::lock_guard guard(state_->mutex);
  State::FileLock lock(*state_, LOCK_EX);
  state_->refresh();
  auto it = state_->data.find(key);
  bool swap =
      it == state_->data.end() ? expected.empty() : std::ranges::equal(it->second, expected);
  if (!swap) return it == state_->data.end() ? std::vector<uint8_t>{} : it->second;
  state_->append(kOpSet, key, desired);
  return {desired.begin(), desired.end()};
}

bool FileStore::do_check(const std::vector<std::string>& keys) {
  std::lock_guard guard(state_->mutex);
  State::FileLock lock(*state_, LOCK_SH);
  state_->refresh();
  return state_->missing(keys).empty();
}

void FileStore::do_wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  state_->wait(keys, timeout);
}

bool FileStore::do_delete_key(std::string_view key) {
  std::lock_guard guard(state_->mutex);
  State::FileLock lock(*state_, LOCK_EX);
  state_->refresh();
  if (!state_->data.contains(key)) return false;
  state_->append(kOpDelete, key, {});
  return true;
}

int64_t FileStore::do_num_keys() {
  std::lock_guard guard(state_->mutex);
  State::FileLock lock(*state_, LOCK_SH);
  state_->refresh();
  return static_cast<int64_t>(state_->data.size());
}

}  // namespace braid
