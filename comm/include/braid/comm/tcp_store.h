// SPDX-License-Identifier: Apache-2.0
// The TCP Store (docs/store.md): a server that one process (the launcher or rank 0) runs on its
// own thread, and a client every rank uses. Every connection presents the job token first;
// frames are length-prefixed binary with limits on keys, values and frame size; the server
// parks waiting requests until their keys appear and never busy-loops (poll()).
//
//   TcpStoreServer server("127.0.0.1", 0, token);          // 0: pick a free port
//   TcpStore store("127.0.0.1", server.port(), token, std::chrono::seconds(30));
//   store.set("ready/0", "1");
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "braid/comm/store.h"

namespace braid {

// A random job token: 32 lowercase hex characters from the OS's random source.
// Throws kIo when no random source can be read.
std::string generate_store_token();

class TcpStoreServer {
 public:
  // Binds `host` (an IPv4/IPv6 literal or a name; "127.0.0.1" keeps the store on loopback) and
  // `port` (0 picks a free one), listens, and starts the serving thread. Throws
  // kInvalidArgument for an empty token or an unresolvable host, kIo when bind/listen fails
  // (naming host:port and the OS error).
  TcpStoreServer(std::string host, uint16_t port, std::string token);
  // Stops the thread and closes every connection; clients then get kPeerLost.
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  const std::string& host() const;
  uint16_t port() const;  // the bound port (the chosen one when constructed with 0)
  // Idempotent; the destructor calls it.
  void stop();

  // Connections open now (accepted, token presented or not). For tests and diagnostics.
  size_t num_connections() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A client. Connects lazily and retries with backoff (up to the timeout) while the server is
// not up yet. Thread-safe: concurrent calls use separate connections from a small pool, so a
// long wait() never blocks another thread's set().
//   - a token the server rejects: kInvalidArgument "store token rejected by host:port"
//   - the server closed the connection or died: kPeerLost naming host:port
//   - a wait that reaches its deadline: kTimeout; that connection is closed and a fresh one
//     is used next, so a late reply is never taken for the next answer
class TcpStore final : public Store {
 public:
  TcpStore(std::string host, uint16_t port, std::string token,
           std::chrono::milliseconds timeout = kDefaultTimeout);
  ~TcpStore() override;

  const std::string& host() const;
  uint16_t port() const;

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
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace braid
