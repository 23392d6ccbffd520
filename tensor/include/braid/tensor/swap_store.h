// SPDX-License-Identifier: Apache-2.0
// SwapStore: an asynchronous, file-backed home for CPU tensors that do not need to stay in
// memory (docs/offload.md). The optimizer keeps its per-parameter state here under
// offload_optimizer_device = nvme; the ZeRO-3 code can keep parameter shards here the same way.
//
//   SwapStore store({.folder = "/local_nvme", .tag = "rank3"});
//   store.put("p0", state);          // queued write; the store holds `state` until written
//   store.prefetch("p1");            // queued read, ahead of use
//   Tensor s1 = store.get("p1");     // waits for the read (up to the deadline)
//   ... update s1 in place ...
//   store.put("p1", s1);             // written back; memory dropped once written
//   store.flush();                   // every queued write done
//
// Files: the store makes its own folder `<folder>/braid-swap-<tag>-<pid>-<n>` (mkdir, so two
// stores never share one) and one file per key in it (`<i>.bin`, i the key's number in order
// of first put), holding the tensor's raw bytes in C order. Shapes and dtypes stay in memory:
// the files are scratch, not checkpoints, so they are never fsynced and the destructor
// removes them and the folder. A process that crashes leaves its folder behind; it is safe to
// delete once no process with that pid runs.
//
// Threads: `io_threads` background threads run the queued reads and writes with pread /
// pwrite, one operation per key at a time, in queue order. Waits sleep on a condition
// variable and each has a deadline (kTimeout naming the key, its file and the operation).
// Every method is thread-safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "braid/tensor/tensor.h"

namespace braid {

enum class SwapOp : uint8_t { kWrite, kRead };

struct SwapStoreOptions {
  // An existing, writable folder (DeepSpeed's nvme_path). The store works in a new folder
  // inside it.
  std::filesystem::path folder{};  // {}: designated initializers may leave members out
  // Added to the store folder's name to tell processes apart beside the pid (e.g. "rank3");
  // letters, digits, '-' and '_' only.
  std::string tag{};
  // What the caller calls `folder` in its messages (e.g. "offload_optimizer_nvme_path").
  std::string option = "folder";
  // Background I/O threads (>= 1).
  int io_threads = 1;
  // Bytes the store may hold in memory on its own account: put() waits while the writes
  // queued or running would go past it (one tensor larger than the limit is still written,
  // alone), and a prefetched read starts only while what the store holds plus the tensor fits.
  // get() always reads. 0: no limit.
  size_t max_resident_bytes = 0;
  // Deadline of every wait that is not given its own.
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
  // Test hook: runs on an I/O thread just before each read or write of `key` (outside the
  // store's lock). What it throws becomes that operation's error.
  std::function<void(SwapOp op, const std::string& key)> before_io{};
};

struct SwapStoreStats {
  size_t resident_bytes = 0;       // held in memory by the store: queued or running writes,
                                   // reads done and not yet released, reads running
  size_t peak_resident_bytes = 0;  // max of resident_bytes since start or reset_peak()
  size_t file_bytes = 0;           // bytes in the store's files
  size_t keys = 0;
  uint64_t writes = 0;  // completed
  uint64_t reads = 0;   // completed
};

class SwapStore {
 public:
  // Checks that `folder` is an existing folder and creates the store's own folder in it.
  // Throws kInvalidArgument for bad options and kIo naming `option`, the folder and the errno
  // text when the folder is missing, not a folder or not writable.
  explicit SwapStore(SwapStoreOptions options);
  // Stops the I/O threads after their current operation (queued operations are dropped), then
  // removes the files and the folder. Never throws.
  ~SwapStore();
  SwapStore(const SwapStore&) = delete;
  SwapStore& operator=(const SwapStore&) = delete;

  // Queues a write of `tensor` (a defined CPU tensor; a non-contiguous one is copied first).
  // The store keeps a reference until the write completes and then drops it, so the caller
  // must not change the tensor's memory before then (wait_written). Replaces what the key
  // held; waits (up to the deadline) for a read or write of the key that is running, and for
  // room under max_resident_bytes. Throws kInvalidArgument while a map() view of the key lives.
  void put(const std::string& key, const Tensor& tensor);
  // Starts reading `key` into memory unless it is there or on its way. Never waits.
  void prefetch(const std::string& key);
  // The key's tensor, in memory: waits for its read, or for a queued or running write of it.
  // The store keeps it (resident) until release() or the next put(); the caller may change it
  // and put() it back. Throws kInvalidArgument for an unknown key, kTimeout at the deadline,
  // kIo for a failed read (the next get() tries again) or a failed write (sticks until put()
  // or erase()).
  Tensor get(const std::string& key);
  Tensor get(const std::string& key, std::chrono::milliseconds timeout);
  // Drops the store's in-memory copy (after its write, when one is queued); the file stays.
  void release(const std::string& key);
  // True while a write of the key is queued or running. Never waits.
  bool write_pending(const std::string& key) const;
  // Waits until no write of the key is queued or running; throws its error (kIo) if it failed.
  void wait_written(const std::string& key);
  void wait_written(const std::string& key, std::chrono::milliseconds timeout);
  // Waits for every queued write; throws the first failed write's error.
  void flush();
  void flush(std::chrono::milliseconds timeout);
  // Forgets the key and removes its file (waits for an operation of it that is running).
  void erase(const std::string& key);
  bool contains(const std::string& key) const;
  // A read-only view of the key's file (written first if a write is queued): no copy, the
  // pages come from the page cache. Valid while the view lives; put() and erase() of the key
  // throw meanwhile. Writing through it faults. For streaming the files into a checkpoint.
  Tensor map(const std::string& key);

  // The key's file (whether or not it was written yet).
  std::filesystem::path file(const std::string& key) const;
  const std::filesystem::path& directory() const;
  SwapStoreStats stats() const;
  void reset_peak();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace braid
