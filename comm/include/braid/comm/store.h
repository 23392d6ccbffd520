// SPDX-License-Identifier: Apache-2.0
// The key-value Store every rank rendezvouses through (design.md, "Store"; docs/store.md):
// set / get / add / compare_set / check / wait / delete_key / num_keys over byte values, with a
// deadline on every blocking call.
//
// Implementations: InMemoryStore (threads of one process), FileStore (processes of one machine,
// tests), TcpStore (braid/comm/tcp_store.h: the real one), and PrefixStore (a namespace inside
// another store, for subgroups). store_from_env() builds the job's store from the launcher's
// variables.
//
// Every Store is thread-safe. The public calls are non-virtual: they validate the key and value
// limits once, here, and forward to the protected do_* members an implementation overrides.
//
// Errors (braid/core/error.h):
//   kTimeout          a wait / get reached its deadline; the message names the missing keys and
//                     the timeout
//   kPeerLost         the store's server went away (TcpStore); the message names its address
//   kInvalidArgument  an empty or too long key, a too large value, too many keys in one call,
//                     a non-integer value under add(), a rejected token
//   kIo / kCorruptData  the OS refused (socket, file) / bytes from outside did not parse
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace braid {

class Store {
 public:
  // Limits every store enforces (the TCP frame format is sized by them; docs/store.md).
  static constexpr size_t kMaxKeyBytes = 4096;
  static constexpr size_t kMaxValueBytes = size_t{64} << 20;           // 64 MiB
  static constexpr size_t kMaxKeysPerRequest = 16384;                  // check() / wait()
  static constexpr std::chrono::milliseconds kDefaultTimeout{300000};  // 5 minutes, as torch

  explicit Store(std::chrono::milliseconds timeout = kDefaultTimeout);
  virtual ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Stores `value` under `key`, replacing any previous value, and wakes waiters on `key`.
  void set(std::string_view key, std::span<const uint8_t> value);
  void set(std::string_view key, std::string_view value);

  // Waits until `key` exists (up to `timeout`, default timeout()) and returns its value.
  std::vector<uint8_t> get(std::string_view key);
  std::vector<uint8_t> get(std::string_view key, std::chrono::milliseconds timeout);
  std::string get_string(std::string_view key);  // get() as text

  // Adds `delta` to the integer stored under `key` (created at 0 when missing) and returns the
  // new value. Values written by add() are decimal text ("42"), so get() reads them back as
  // such; add() on a key holding anything else throws kInvalidArgument.
  int64_t add(std::string_view key, int64_t delta);

  // torch's compareSet: if `key` is missing and `expected` is empty, or the stored value equals
  // `expected`, stores `desired` and returns it; otherwise returns the stored value unchanged
  // (empty when the key is missing). Never waits.
  std::vector<uint8_t> compare_set(std::string_view key, std::span<const uint8_t> expected,
                                   std::span<const uint8_t> desired);
  std::string compare_set(std::string_view key, std::string_view expected,
                          std::string_view desired);

  // True when every key exists now; never waits.
  bool check(const std::vector<std::string>& keys);

  // Waits until every key exists. Throws kTimeout naming the missing keys and the timeout.
  void wait(const std::vector<std::string>& keys);  // timeout()
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);

  // Removes `key`; true when it existed.
  bool delete_key(std::string_view key);

  // Number of keys stored (PrefixStore: the whole underlying store's count, as in torch).
  int64_t num_keys();

  // The default deadline of get() and wait(); TcpStore also uses it to connect.
  std::chrono::milliseconds timeout() const { return std::chrono::milliseconds(timeout_ms_); }
  // Throws kInvalidArgument for a negative timeout.
  void set_timeout(std::chrono::milliseconds timeout);

 protected:
  // Implementations: arguments are already validated (non-empty keys within the limits).
  virtual void do_set(std::string_view key, std::span<const uint8_t> value) = 0;
  virtual std::vector<uint8_t> do_get(std::string_view key, std::chrono::milliseconds timeout) = 0;
  virtual int64_t do_add(std::string_view key, int64_t delta) = 0;
  virtual std::vector<uint8_t> do_compare_set(std::string_view key,
                                              std::span<const uint8_t> expected,
                                              std::span<const uint8_t> desired) = 0;
  virtual bool do_check(const std::vector<std::string>& keys) = 0;
  virtual void do_wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  virtual bool do_delete_key(std::string_view key) = 0;
  virtual int64_t do_num_keys() = 0;

 private:
  std::atomic<int64_t> timeout_ms_;
};

// Threads of one process. Waits sleep on a condition variable.
class InMemoryStore final : public Store {
 public:
  explicit InMemoryStore(std::chrono::milliseconds timeout = kDefaultTimeout);
  ~InMemoryStore() override;

 protected:
  void do_set(std::string_view key, std::span<const uint8_t> value) override;
  std::vector<uint8_t> do_get(std::string_view key, std::chrono::milliseconds timeout) override;
  int64_t do_add(std::string_view key, int64_t delta) override;
  std::vector<uint8_t> do_compare_set(std::string_view key, std::span<const uint8_t> expected,
                                      std::span<const uint8_t> desired) override;
  bool do_check(const std::vector<std::string>& keys) override;
  void do_wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool do_delete_key(std::string_view key) override;
  int64_t do_num_keys() override;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Processes of one machine sharing a file: an append-only log of records written under an
// exclusive flock(), replayed under a shared one. Waits poll the file with sleeps that back off
// from 1 ms to 10 ms (docs/store.md). Meant for tests; the log is never compacted.
// Throws kIo when the file cannot be opened, kCorruptData when it is not a store log.
class FileStore final : public Store {
 public:
  explicit FileStore(std::string path, std::chrono::milliseconds timeout = kDefaultTimeout);
  ~FileStore() override;
  const std::string& path() const;

 protected:
  void do_set(std::string_view key, std::span<const uint8_t> value) override;
  std::vector<uint8_t> do_get(std::string_view key, std::chrono::milliseconds timeout) override;
  int64_t do_add(std::string_view key, int64_t delta) override;
  std::vector<uint8_t> do_compare_set(std::string_view key, std::span<const uint8_t> expected,
                                      std::span<const uint8_t> desired) override;
  bool do_check(const std::vector<std::string>& keys) override;
  void do_wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool do_delete_key(std::string_view key) override;
  int64_t do_num_keys() override;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Every key of `store` seen through this one is "<prefix>/<key>", so subgroups sharing one
// store cannot collide. Prefixes nest. The timeout is this object's own (initially the
// underlying store's). Throws kInvalidArgument for an empty prefix or a null store.
class PrefixStore final : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> store);
  ~PrefixStore() override;
  const std::string& prefix() const { return prefix_; }
  const std::shared_ptr<Store>& underlying() const { return store_; }

 protected:
  void do_set(std::string_view key, std::span<const uint8_t> value) override;
  std::vector<uint8_t> do_get(std::string_view key, std::chrono::milliseconds timeout) override;
  int64_t do_add(std::string_view key, int64_t delta) override;
  std::vector<uint8_t> do_compare_set(std::string_view key, std::span<const uint8_t> expected,
                                      std::span<const uint8_t> desired) override;
  bool do_check(const std::vector<std::string>& keys) override;
  void do_wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool do_delete_key(std::string_view key) override;
  int64_t do_num_keys() override;

 private:
  std::string full_key(std::string_view key) const;
  std::vector<std::string> full_keys(const std::vector<std::string>& keys) const;

  std::string prefix_;
  std::shared_ptr<Store> store_;
};

// What store_from_env() reads (docs/store.md, "Rendezvous from the environment"):
//   MASTER_ADDR                     server host (default 127.0.0.1)
//   MASTER_PORT                     server port (required, 1..65535)
//   BRAID_STORE_TOKEN               the job token (required)
//   BRAID_STORE_SERVED_BY_LAUNCHER  1: the launcher runs the server, every rank is a client
//   RANK                            otherwise rank 0 starts the server in-process (default 0)
struct StoreEnv {
  std::string host;
  uint16_t port = 0;
  std::string token;
  int rank = 0;
  bool served_by_launcher = false;
  // True when this process must start the server: not served by the launcher and rank 0.
  bool is_server() const { return !served_by_launcher && rank == 0; }
};
// Throws kInvalidArgument naming the variable, its value and the expected form.
StoreEnv store_env_from_env();

// The job's store: a TcpStore client of MASTER_ADDR:MASTER_PORT. When env.is_server() the
// returned store also owns a TcpStoreServer bound to MASTER_ADDR:MASTER_PORT (kept alive as
// long as the store is), so rank 0 must outlive the other ranks' use of the store.
std::shared_ptr<Store> store_from_env(std::chrono::milliseconds timeout = Store::kDefaultTimeout);
std::shared_ptr<Store> store_from_env(const StoreEnv& env,
                                      std::chrono::milliseconds timeout = Store::kDefaultTimeout);

}  // namespace braid
