// SPDX-License-Identifier: Apache-2.0
// File utilities every on-disk format in braid shares: atomic replacement of a file
// (AtomicFile, write_file_atomic), read-only memory maps (MappedFile) and whole-file reads.
// Every OS failure is an Error of kind kIo whose message names the path, the operation and
// the errno text. The atomic write protocol is described in docs/files.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

namespace braid {

// Writes a file so that readers see either the old content or the complete new content,
// never a partial file, even if the process or the machine dies midway:
//   1. write to a temporary file in the same folder (".<name>.tmp.<pid>.<n>"),
//   2. commit(): flush, fsync the file, rename it over the target, fsync the folder.
// If commit() is not reached (an exception, an early return) the destructor closes and
// removes the temporary file and the target is untouched.
//
//   AtomicFile out(path);
//   out.write(header);
//   out.write(data, size);
//   out.commit();
class AtomicFile {
 public:
  // Creates the temporary file. Throws kIo naming the folder when it cannot be created.
  explicit AtomicFile(std::filesystem::path path);
  ~AtomicFile();
  AtomicFile(AtomicFile&& other) noexcept;
  AtomicFile& operator=(AtomicFile&& other) noexcept;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Appends bytes (buffered). Throws kIo naming the temporary path; throws kInvalidArgument
  // after commit() or abort().
  void write(const void* data, size_t nbytes);
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }

  // Flushes, fsyncs, renames over the target and fsyncs the folder. On failure the
  // temporary file is removed and kIo is thrown; the target keeps its old content.
  void commit();
  // Drops the temporary file; the target is untouched. Never throws. Idempotent.
  void abort() noexcept;

  const std::filesystem::path& path() const { return path_; }
  const std::filesystem::path& temp_path() const { return temp_path_; }
  uint64_t bytes_written() const { return bytes_written_; }
  bool is_open() const { return fd_ >= 0; }

 private:
  void flush_buffer();
  void write_through(const void* data, size_t nbytes);

  std::filesystem::path path_;
  std::filesystem::path temp_path_;
  int fd_ = -1;
  std::string buffer_;
  uint64_t bytes_written_ = 0;
};

// Replaces `path` with `bytes` through AtomicFile.
void write_file_atomic(const std::filesystem::path& path, std::string_view bytes);

// Reads a whole file. Throws kIo naming the path when it cannot be opened or read.
std::string read_file(const std::filesystem::path& path);

// How a MappedFile maps its pages.
enum class MapMode : uint8_t {
  kReadOnly,     // PROT_READ: writing through the pointer faults
  kCopyOnWrite,  // MAP_PRIVATE writable: writes change this process's copy, never the file
};

// A whole file mapped into memory. Move-only; unmaps on destruction. An empty file maps to
// data() == nullptr, size() == 0. The file must not be truncated while mapped (POSIX gives
// SIGBUS on pages past the new end); braid's writers never truncate, they replace.
class MappedFile {
 public:
  // Throws kIo naming the path and the errno text when it cannot be opened, is not a
  // regular file, or cannot be mapped.
  static MappedFile open(const std::filesystem::path& path, MapMode mode = MapMode::kReadOnly);

  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const { return static_cast<const std::byte*>(addr_); }
  // Writable only for MapMode::kCopyOnWrite (the pages are private to this process).
  std::byte* mutable_data() const { return static_cast<std::byte*>(addr_); }
  size_t size() const { return size_; }
  std::span<const std::byte> bytes() const { return {data(), size_}; }
  const std::filesystem::path& path() const { return path_; }
  MapMode mode() const { return mode_; }

 private:
  void reset() noexcept;

  std::filesystem::path path_;
  void* addr_ = nullptr;
  size_t size_ = 0;
  MapMode mode_ = MapMode::kReadOnly;
};

}  // namespace braid
