// AtomicFile, MappedFile and whole-file helpers over POSIX calls. Every failure names the
// path, the call and strerror(errno) (docs/files.md, "Atomic writes").
#include "braid/core/file_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include "braid/core/error.h"

namespace braid {
namespace {

namespace fs = std::filesystem;

// Small writes gather here so a file of many small tensors is not one syscall per tensor.
constexpr size_t kBufferBytes = size_t{1} << 20;

std::string errno_text(int err) {
  return std::strerror(err);
}

fs::path parent_or_dot(const fs::path& path) {
  fs::path parent = path.parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

// ".<name>.tmp.<pid>.<n>" beside the target: same file system, so rename() is atomic.
fs::path temp_name_for(const fs::path& path, uint64_t n) {
  std::string name = ".";
  name.append(path.filename().string()).append(".tmp.").append(std::to_string(::getpid()));
  name.append(".").append(std::to_string(n));
  return parent_or_dot(path) / name;
}

void close_quietly(int fd) noexcept {
  if (fd >= 0) ::close(fd);
}

// fsync of the folder makes the rename itself durable (ext4, xfs need it).
void fsync_dir(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  BRAID_CHECK(fd >= 0, kIo, "open folder '", dir.string(), "' to fsync it: ", errno_text(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some file systems (tmpfs on old kernels, some FUSE) refuse fsync on folders: the rename
  // already happened, so only real I/O errors are reported.
  BRAID_CHECK(rc == 0 || err == EINVAL || err == ENOTSUP, kIo, "fsync folder '", dir.string(),
              "': ", errno_text(err));
}

}  // namespace

// ---- AtomicFile ----

AtomicFile::AtomicFile(fs::path path) : path_(std::move(path)) {
  BRAID_CHECK(!path_.empty() && !path_.filename().empty(), kInvalidArgument, "AtomicFile: path '",
              path_.string(), "' does not name a file");
  static std::atomic<uint64_t> counter{0};
  for (int attempt = 0; attempt < 100; ++attempt) {
    temp_path_ = temp_name_for(path_, counter.fetch_add(1));
    fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ >= 0 || errno != EEXIST) break;
  }
  BRAID_CHECK(fd_ >= 0, kIo, "create temporary file '", temp_path_.string(), "' to write '",
              path_.string(), "': ", errno_text(errno));
}

AtomicFile::~AtomicFile() {
  abort();
}

AtomicFile::AtomicFile(AtomicFile&& other) noexcept {
  *this = std::move(other);
}

AtomicFile& AtomicFile::operator=(AtomicFile&& other) noexcept {
  if (this != &other) {
    abort();
    path_ = std::move(other.path_);
    temp_path_ = std::move(other.temp_path_);
    fd_ = std::exchange(other.fd_, -1);
    buffer_ = std::move(other.buffer_);
    bytes_written_ = std::exchange(other.bytes_written_, 0);
  }
  return *this;
}

void AtomicFile::write_through(const void* data, size_t nbytes) {
  const char* p = static_cast<const char*>(data);
  while (nbytes > 0) {
    const ssize_t n = ::write(fd_, p, nbytes);
    if (n < 0 && errno == EINTR) continue;
    BRAID_CHECK(n > 0, kIo, "write ", nbytes, " bytes to '", temp_path_.string(),
                "' (temporary for '", path_.string(),
                "'): ", n < 0 ? errno_text(errno) : std::string("wrote nothing"));
    p += n;
    nbytes -= static_cast<size_t>(n);
  }
}

void AtomicFile::flush_buffer() {
  if (buffer_.empty()) return;
  write_through(buffer_.data(), buffer_.size());
  buffer_.clear();
}

void AtomicFile::write(const void* data, size_t nbytes) {
  BRAID_CHECK(fd_ >= 0, kInvalidArgument, "AtomicFile::write to '", path_.string(),
              "' after commit() or abort()");
  if (nbytes == 0) return;
  if (buffer_.size() + nbytes <= kBufferBytes) {
    buffer_.append(static_cast<const char*>(data), nbytes);
  } else {
    flush_buffer();
    if (nbytes < kBufferBytes) {
      buffer_.append(static_cast<const char*>(data), nbytes);
    } else {
      write_through(data, nbytes);
    }
  }
  bytes_written_ += nbytes;
}

void AtomicFile::commit() {
  BRAID_CHECK(fd_ >= 0, kInvalidArgument, "AtomicFile::commit of '", path_.string(),
              "' after commit() or abort()");
  try {
    flush_buffer();
    BRAID_CHECK(::fsync(fd_) == 0, kIo, "fsync '", temp_path_.string(), "': ", errno_text(errno));
    const int fd = std::exchange(fd_, -1);
    BRAID_CHECK(::close(fd) == 0, kIo, "close '", temp_path_.string(), "': ", errno_text(errno));
    BRAID_CHECK(::rename(temp_path_.c_str(), path_.c_str()) == 0, kIo, "rename '",
                temp_path_.string(), "' to '", path_.string(), "': ", errno_text(errno));
  } catch (...) {
    abort();
    throw;
  }
  temp_path_.clear();
  fsync_dir(parent_or_dot(path_));
}

void AtomicFile::abort() noexcept {
  close_quietly(std::exchange(fd_, -1));
  buffer_.clear();
  if (!temp_path_.empty()) {
    ::unlink(temp_path_.c_str());
    temp_path_.clear();
  }
}

void write_file_atomic(const fs::path& path, std::string_view bytes) {
  AtomicFile out(path);
  out.write(bytes);
  out.commit();
}

std::string read_file(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  BRAID_CHECK(fd >= 0, kIo, "open '", path.string(), "' for reading: ", errno_text(errno));
  std::string out;
  char chunk[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      BRAID_FAIL(kIo, "read '", path.string(), "': ", errno_text(err));
    }
    if (n == 0) break;
    out.append(chunk, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

// ---- MappedFile ----

MappedFile MappedFile::open(const fs::path& path, MapMode mode) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  BRAID_CHECK(fd >= 0, kIo, "open '", path.string(), "' for reading: ", errno_text(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    BRAID_FAIL(kIo, "stat '", path.string(), "': ", errno_text(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    BRAID_FAIL(kIo, "map '", path.string(), "': not a regular file");
  }
  MappedFile out;
  out.path_ = path;
  out.mode_ = mode;
  out.size_ = static_cast<size_t>(st.st_size);
  if (out.size_ > 0) {
    const int prot = mode == MapMode::kReadOnly ? PROT_READ : PROT_READ | PROT_WRITE;
    void* addr = ::mmap(nullptr, out.size_, prot, MAP_PRIVATE, fd, 0);
    if (addr == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      BRAID_FAIL(kIo, "mmap ", out.size_, " bytes of '", path.string(), "': ", errno_text(err));
    }
    out.addr_ = addr;
  }
  ::close(fd);  // the mapping keeps its own reference to the file
  return out;
}

MappedFile::~MappedFile() {
  reset();
}

MappedFile::MappedFile(MappedFile&& other) noexcept {
  *this = std::move(other);
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    reset();
    path_ = std::move(other.path_);
    addr_ = std::exchange(other.addr_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mode_ = other.mode_;
  }
  return *this;
}

void MappedFile::reset() noexcept {
  if (addr_ != nullptr) ::munmap(addr_, size_);
  addr_ = nullptr;
  size_ = 0;
}

}  // namespace braid
