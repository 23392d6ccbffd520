// SwapStore: entries with a small state machine (idle, write queued / running, read queued /
// running), one queue of keys served by the I/O threads, pread / pwrite on one file per key
// (docs/offload.md, "The swap store").
#include "braid/tensor/swap_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "braid/core/error.h"
#include "braid/core/file_util.h"

namespace braid {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using Lock = std::unique_lock<std::mutex>;

std::string errno_text(int err) {
  return std::strerror(err);
}

// Store folders made by this process so far: with the pid, a unique name per store.
std::atomic<uint64_t> g_stores{0};

bool valid_tag(const std::string& tag) {
  return std::all_of(tag.begin(), tag.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
  });
}

void write_whole(const fs::path& file, const std::string& key, const void* data, size_t n) {
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  BRAID_CHECK(fd >= 0, kIo, "swap store: open '", file.string(), "' to write key '", key,
              "': ", errno_text(errno));
  const auto* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < n) {
    const ssize_t rc = ::pwrite(fd, p + done, n - done, static_cast<off_t>(done));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) {
      const int err = rc < 0 ? errno : ENOSPC;
      ::close(fd);
      BRAID_FAIL(kIo, "swap store: write '", file.string(), "' (key '", key, "') after ", done,
                 " of ", n, " bytes: ", errno_text(err));
    }
    done += static_cast<size_t>(rc);
  }
  // No fsync: the files are scratch space (docs/offload.md). close() still reports errors
  // some file systems (NFS) only detect there.
  BRAID_CHECK(::close(fd) == 0, kIo, "swap store: close '", file.string(), "' (key '", key,
              "'): ", errno_text(errno));
}

void read_whole(const fs::path& file, const std::string& key, void* data, size_t n) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  BRAID_CHECK(fd >= 0, kIo, "swap store: open '", file.string(), "' to read key '", key,
              "': ", errno_text(errno));
  auto* p = static_cast<char*>(data);
  size_t done = 0;
  while (done < n) {
    const ssize_t rc = ::pread(fd, p + done, n - done, static_cast<off_t>(done));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) {
      const int err = errno;
      ::close(fd);
      BRAID_CHECK(rc == 0, kIo, "swap store: read '", file.string(), "' (key '", key, "') after ",
                  done, " of ", n, " bytes: ", errno_text(err));
      BRAID_FAIL(kIo, "swap store: short read of '", file.string(), "' (key '", key,
                 "'): the file ends after ", done, " of ", n,
                 " bytes (changed outside the store?)");
    }
    done += static_cast<size_t>(rc);
  }
  ::close(fd);
}

}  // namespace

struct SwapStore::Impl {
  enum class Io : uint8_t { kIdle, kWriteQueued, kWriting, kReadQueued, kReading };
  struct Entry {
    uint64_t number = 0;  // the file's name
    DType dtype = DType::kF32;
    Shape shape;
    size_t nbytes = 0;
    Tensor mem;  // held by the store
    Io io = Io::kIdle;
    bool keep = false;      // keep mem after the write / read: prefetch() or get() asked for it
    bool demanded = false;  // a get() waits for this read: the memory limit does not apply
    size_t file_size = 0;
    std::exception_ptr write_error;  // sticks until put() or erase()
    std::exception_ptr read_error;   // thrown once, by the next get()
    std::weak_ptr<void> view;        // a live map()
  };

  SwapStoreOptions options;
  fs::path dir;
  mutable std::mutex mu;
  std::condition_variable work_cv;  // I/O threads: something queued, memory freed, stop
  std::condition_variable done_cv;  // waiters: an operation finished
  std::map<std::string, Entry> entries;
  std::deque<std::string> queue;  // keys with a queued operation; stale ones are skipped
  uint64_t next_number = 0;
  size_t resident = 0, peak = 0;
  size_t write_bytes = 0;  // queued or running writes
  size_t writes_pending = 0;
  size_t file_bytes = 0;
  uint64_t writes = 0, reads = 0;
  bool stop = false;
  std::vector<std::thread> threads;

  fs::path file_of(const Entry& e) const { return dir / (std::to_string(e.number) + ".bin"); }

  Entry& find(const std::string& key, const char* call) {
    auto it = entries.find(key);
    BRAID_CHECK(it != entries.end(), kInvalidArgument, "swap store '", dir.string(), "': ", call,
                "('", key, "'): no tensor was put under this key");
    return it->second;
  }

  void set_mem(Entry& e, Tensor mem) {
    if (e.mem.defined()) resident -= e.nbytes;
    e.mem = std::move(mem);
    if (e.mem.defined()) {
      resident += e.nbytes;
      peak = std::max(peak, resident);
    }
  }

  void enqueue(const std::string& key) {
    queue.push_back(key);
    work_cv.notify_all();
  }

  static const char* io_name(Io io) {
    switch (io) {
      case Io::kIdle:
        return "no operation";
      case Io::kWriteQueued:
        return "queued write";
      case Io::kWriting:
        return "write";
      case Io::kReadQueued:
        return "queued read";
      case Io::kReading:
        return "read";
    }
    return "?";
  }

  // Waits for done_cv until `deadline`; on timeout throws kTimeout naming the call, the key,
  // its file and the operation the key was waiting for.
  // `waiting_for` replaces "the <operation> of '<file>'" in the message.
  void wait(Lock& lock, Clock::time_point deadline, const std::string& key, const char* call,
            std::chrono::milliseconds timeout, const std::string& waiting_for = {}) {
    if (done_cv.wait_until(lock, deadline) != std::cv_status::timeout) return;
    auto it = entries.find(key);
    std::string what = waiting_for;
    if (what.empty()) {
      what = it == entries.end() ? std::string("an erased key")
                                 : std::string("the ") + io_name(it->second.io) + " of '" +
                                       file_of(it->second).string() + "'";
    }
    BRAID_FAIL(kTimeout, "swap store '", dir.string(), "': ", call, "('", key,
               "') timed out after ", timeout.count(), " ms waiting for ", what);
  }

  bool runnable(const Entry& e) const {
    if (e.io == Io::kWriteQueued) return true;
    if (e.io != Io::kReadQueued) return false;
    const size_t limit = options.max_resident_bytes;
    return e.demanded || limit == 0 || resident == 0 || resident + e.nbytes <= limit;
  }

  void worker() {
    Lock lock(mu);
    while (true) {
      std::string key;
      while (!stop && !take(key)) work_cv.wait(lock);
      if (stop) return;
      run(key, entries.at(key), lock);
    }
  }

  // Removes the first runnable key from the queue into `key`; drops stale keys on the way.
  bool take(std::string& key) {
    for (auto it = queue.begin(); it != queue.end();) {
      auto e = entries.find(*it);
      if (e == entries.end() ||
          (e->second.io != Io::kWriteQueued && e->second.io != Io::kReadQueued)) {
        it = queue.erase(it);  // stale: cancelled, erased, or served from an earlier copy
        continue;
      }
      if (runnable(e->second)) {
        key = std::move(*it);
        queue.erase(it);
        return true;
      }
      ++it;
    }
    return false;
  }

  // One read or write, with the lock released around the I/O. The entry stays in the map
  // meanwhile: erase() and put() wait for running operations.
  void run(const std::string& key, Entry& e, Lock& lock) {
    const bool write = e.io == Io::kWriteQueued;
    const fs::path file = file_of(e);
    const size_t n = e.nbytes;
    Tensor src = e.mem;
    Tensor dst;
    e.io = write ? Io::kWriting : Io::kReading;
    if (!write) {  // reserve the destination's bytes now, so the limit sees them
      resident += n;
      peak = std::max(peak, resident);
    }
    const DType dtype = e.dtype;
    const Shape shape = e.shape;
    lock.unlock();
    std::exception_ptr error;
    try {
      if (options.before_io) options.before_io(write ? SwapOp::kWrite : SwapOp::kRead, key);
      if (write) {
        write_whole(file, key, src.data_ptr(), n);
      } else {
        dst = Tensor::empty(shape, dtype);
        read_whole(file, key, dst.data_ptr(), n);
      }
    } catch (...) {
      error = std::current_exception();
    }
    src = Tensor();
    lock.lock();
    if (write) {
      write_bytes -= n;
      --writes_pending;
      if (error) {
        e.write_error = error;  // the memory stays: it is the only good copy
      } else {
        file_bytes = file_bytes - e.file_size + n;
        e.file_size = n;
        ++writes;
        if (!e.keep) set_mem(e, Tensor());
      }
    } else {
      resident -= n;
      if (error) {
        e.read_error = error;
      } else {
        ++reads;
        if (e.keep || e.demanded) set_mem(e, std::move(dst));
      }
      e.demanded = false;
    }
    e.io = Io::kIdle;
    done_cv.notify_all();
    work_cv.notify_all();  // memory may have been freed
  }
};

SwapStore::SwapStore(SwapStoreOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  const std::string& opt = options.option;
  BRAID_CHECK(!options.folder.empty(), kInvalidArgument, "swap store: ", opt,
              " is empty: expected an existing, writable folder");
  BRAID_CHECK(options.io_threads >= 1, kInvalidArgument, "swap store: io_threads ",
              options.io_threads, ": expected >= 1");
  BRAID_CHECK(valid_tag(options.tag), kInvalidArgument, "swap store: tag '", options.tag,
              "': expected letters, digits, '-' and '_' only");
  BRAID_CHECK(options.timeout.count() >= 0, kInvalidArgument, "swap store: timeout ",
              options.timeout.count(), " ms: expected >= 0");
  struct stat st {};
  BRAID_CHECK(::stat(options.folder.c_str(), &st) == 0, kIo, opt, " '", options.folder.string(),
              "': ", errno_text(errno), " (expected an existing, writable folder)");
  BRAID_CHECK(S_ISDIR(st.st_mode), kIo, opt, " '", options.folder.string(),
              "': ", errno_text(ENOTDIR), " (expected an existing, writable folder)");
  const std::string stem = "braid-swap-" +
                           (options.tag.empty() ? std::string() : options.tag + "-") +
                           std::to_string(::getpid()) + "-";
  for (int attempt = 0;; ++attempt) {
    fs::path dir = options.folder / (stem + std::to_string(g_stores.fetch_add(1)));
    if (::mkdir(dir.c_str(), 0700) == 0) {
      m.dir = std::move(dir);
      break;
    }
    const int err = errno;
    // EEXIST: left by an earlier process with this pid; take the next number.
    BRAID_CHECK(err == EEXIST && attempt < 1000, kIo, opt, " '", options.folder.string(),
                "': cannot create the swap folder '", dir.string(), "': ", errno_text(err),
                " (expected an existing, writable folder)");
  }
  m.options = std::move(options);
  try {
    for (int i = 0; i < m.options.io_threads; ++i) m.threads.emplace_back([&m] { m.worker(); });
  } catch (...) {  // no thread: stop those started, remove the folder, report
    {
      Lock lock(m.mu);
      m.stop = true;
    }
    m.work_cv.notify_all();
    for (std::thread& t : m.threads) t.join();
    std::error_code ec;
    fs::remove(m.dir, ec);
    throw;
  }
}

SwapStore::~SwapStore() {
  Impl& m = *impl_;
  {
    Lock lock(m.mu);
    m.stop = true;
  }
  m.work_cv.notify_all();
  for (std::thread& t : m.threads) t.join();
  std::error_code ec;  // scratch: failures to clean up are not worth an exception here
  fs::remove_all(m.dir, ec);
}

void SwapStore::put(const std::string& key, const Tensor& tensor) {
  Impl& m = *impl_;
  BRAID_CHECK(tensor.defined(), kInvalidArgument, "swap store: put('", key,
              "'): the tensor is undefined");
  BRAID_CHECK(tensor.device().type == DeviceType::kCPU, kNotSupported, "swap store: put('", key,
              "'): the tensor is on ", tensor.device().str(), ", expected cpu");
  Tensor t = tensor.is_contiguous() ? tensor : tensor.contiguous();
  const size_t n = t.nbytes();
  const size_t limit = m.options.max_resident_bytes;
  const auto deadline = Clock::now() + m.options.timeout;
  Lock lock(m.mu);
  while (true) {
    auto it = m.entries.find(key);
    const Impl::Io io = it == m.entries.end() ? Impl::Io::kIdle : it->second.io;
    const bool busy = io == Impl::Io::kWriting || io == Impl::Io::kReading;
    const size_t queued = io == Impl::Io::kWriteQueued ? it->second.nbytes : 0;
    const size_t others = m.write_bytes - queued;
    const bool room = limit == 0 || others == 0 || others + n <= limit;
    if (!busy && room) break;
    m.wait(lock, deadline, key, "put", m.options.timeout,
           busy ? std::string()
                : "room under max_resident_bytes " + std::to_string(limit) + " (" +
                      std::to_string(others) + " bytes of other writes queued)");
  }
  auto [it, fresh] = m.entries.try_emplace(key);
  Impl::Entry& e = it->second;
  if (fresh) e.number = m.next_number++;
  BRAID_CHECK(e.view.expired(), kInvalidArgument, "swap store: put('", key,
              "'): a view from map() of this key is still alive");
  if (e.io == Impl::Io::kWriteQueued) {
    m.write_bytes -= e.nbytes;
  } else {
    ++m.writes_pending;
    m.enqueue(key);  // a queued read, if any, becomes this write
  }
  e.io = Impl::Io::kWriteQueued;
  e.demanded = false;
  e.keep = false;
  e.write_error = nullptr;
  e.read_error = nullptr;
  m.set_mem(e, Tensor());
  e.dtype = t.dtype();
  e.shape = t.shape();
  e.nbytes = n;
  m.set_mem(e, std::move(t));
  m.write_bytes += n;
  m.work_cv.notify_all();
  m.done_cv.notify_all();  // a get() waiting for a cancelled read now finds the memory
}

void SwapStore::prefetch(const std::string& key) {
  Impl& m = *impl_;
  Lock lock(m.mu);
  Impl::Entry& e = m.find(key, "prefetch");
  e.keep = true;
  if (e.mem.defined() || e.io != Impl::Io::kIdle || e.write_error) return;
  e.io = Impl::Io::kReadQueued;
  m.enqueue(key);
}

Tensor SwapStore::get(const std::string& key) {
  return get(key, impl_->options.timeout);
}

Tensor SwapStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  Impl& m = *impl_;
  const auto deadline = Clock::now() + timeout;
  Lock lock(m.mu);
  while (true) {
    Impl::Entry& e = m.find(key, "get");
    if (e.write_error) std::rethrow_exception(e.write_error);
    if (e.read_error) {
      std::exception_ptr error = std::exchange(e.read_error, nullptr);
      std::rethrow_exception(error);
    }
    e.keep = true;
    if (e.mem.defined() && e.io == Impl::Io::kIdle) return e.mem;
    if (!e.mem.defined() && e.io == Impl::Io::kIdle) {
      e.io = Impl::Io::kReadQueued;
      e.demanded = true;
      m.enqueue(key);
    } else if (e.io == Impl::Io::kReadQueued && !e.demanded) {
      e.demanded = true;
      m.work_cv.notify_all();
    }
    m.wait(lock, deadline, key, "get", timeout);
  }
}

void SwapStore::release(const std::string& key) {
  Impl& m = *impl_;
  Lock lock(m.mu);
  Impl::Entry& e = m.find(key, "release");
  e.keep = false;
  if (e.io == Impl::Io::kReadQueued && !e.demanded) e.io = Impl::Io::kIdle;  // cancelled
  if (e.io == Impl::Io::kIdle && e.mem.defined()) {
    m.set_mem(e, Tensor());
    m.work_cv.notify_all();
  }
}

bool SwapStore::write_pending(const std::string& key) const {
  const Impl& m = *impl_;
  Lock lock(m.mu);
  auto it = m.entries.find(key);
  return it != m.entries.end() &&
         (it->second.io == Impl::Io::kWriteQueued || it->second.io == Impl::Io::kWriting);
}

void SwapStore::wait_written(const std::string& key) {
  wait_written(key, impl_->options.timeout);
}

void SwapStore::wait_written(const std::string& key, std::chrono::milliseconds timeout) {
  Impl& m = *impl_;
  const auto deadline = Clock::now() + timeout;
  Lock lock(m.mu);
  while (true) {
    Impl::Entry& e = m.find(key, "wait_written");
    if (e.io != Impl::Io::kWriteQueued && e.io != Impl::Io::kWriting) {
      if (e.write_error) std::rethrow_exception(e.write_error);
      return;
    }
    m.wait(lock, deadline, key, "wait_written", timeout);
  }
}

void SwapStore::flush() {
  flush(impl_->options.timeout);
}

void SwapStore::flush(std::chrono::milliseconds timeout) {
  Impl& m = *impl_;
  const auto deadline = Clock::now() + timeout;
  Lock lock(m.mu);
  while (m.writes_pending > 0) {
    if (m.done_cv.wait_until(lock, deadline) == std::cv_status::timeout && m.writes_pending > 0) {
      BRAID_FAIL(kTimeout, "swap store '", m.dir.string(), "': flush() timed out after ",
                 timeout.count(), " ms with ", m.writes_pending, " writes (", m.write_bytes,
                 " bytes) not done");
    }
  }
  for (const auto& [key, e] : m.entries) {
    if (e.write_error) std::rethrow_exception(e.write_error);
  }
}

void SwapStore::erase(const std::string& key) {
  Impl& m = *impl_;
  const auto deadline = Clock::now() + m.options.timeout;
  Lock lock(m.mu);
  while (true) {
    auto it = m.entries.find(key);
    if (it == m.entries.end()) return;
    if (it->second.io != Impl::Io::kWriting && it->second.io != Impl::Io::kReading) break;
    m.wait(lock, deadline, key, "erase", m.options.timeout);
  }
  Impl::Entry& e = m.entries.at(key);
  BRAID_CHECK(e.view.expired(), kInvalidArgument, "swap store: erase('", key,
              "'): a view from map() of this key is still alive");
  if (e.io == Impl::Io::kWriteQueued) {
    m.write_bytes -= e.nbytes;
    --m.writes_pending;
  }
  m.set_mem(e, Tensor());
  m.file_bytes -= e.file_size;
  ::unlink(m.file_of(e).c_str());  // ENOENT (never written) is fine; the folder goes at the end
  m.entries.erase(key);
  m.done_cv.notify_all();
  m.work_cv.notify_all();
}

bool SwapStore::contains(const std::string& key) const {
  const Impl& m = *impl_;
  Lock lock(m.mu);
  return m.entries.count(key) != 0;
}

Tensor SwapStore::map(const std::string& key) {
  Impl& m = *impl_;
  wait_written(key);
  fs::path file;
  DType dtype;
  Shape shape;
  size_t n = 0;
  {
    Lock lock(m.mu);
    Impl::Entry& e = m.find(key, "map");
    file = m.file_of(e);
    dtype = e.dtype;
    shape = e.shape;
    n = e.nbytes;
  }
  if (n == 0) return Tensor::empty(shape, dtype);
  auto mapping = std::make_shared<MappedFile>(MappedFile::open(file, MapMode::kReadOnly));
  BRAID_CHECK(mapping->size() == n, kIo, "swap store: '", file.string(), "' (key '", key,
              "') holds ", mapping->size(), " bytes, expected ", n,
              " (changed outside the store?)");
  // Read-only pages: nothing writes through the view.
  Tensor view = Tensor::from_blob(const_cast<std::byte*>(mapping->data()), shape, dtype, kCPU,
                                  [mapping](void*) {});
  Lock lock(m.mu);
  m.find(key, "map").view = mapping;
  return view;
}

fs::path SwapStore::file(const std::string& key) const {
  const Impl& m = *impl_;
  Lock lock(m.mu);
  auto it = m.entries.find(key);
  BRAID_CHECK(it != m.entries.end(), kInvalidArgument, "swap store '", m.dir.string(), "': file('",
              key, "'): no tensor was put under this key");
  return m.file_of(it->second);
}

const fs::path& SwapStore::directory() const {
  return impl_->dir;
}

SwapStoreStats SwapStore::stats() const {
  const Impl& m = *impl_;
  Lock lock(m.mu);
  SwapStoreStats s;
  s.resident_bytes = m.resident;
  s.peak_resident_bytes = m.peak;
  s.file_bytes = m.file_bytes;
  s.keys = m.entries.size();
  s.writes = m.writes;
  s.reads = m.reads;
  return s;
}

void SwapStore::reset_peak() {
  Impl& m = *impl_;
  Lock lock(m.mu);
  m.peak = m.resident;
}

}  // namespace braid
