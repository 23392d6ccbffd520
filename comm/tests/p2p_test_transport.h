// A Transport for tests (p2p_transport.h): the ranks are threads of one process and a Fabric
// holds one mailbox per (src, dst, tag). A send copies its bytes into the mailbox, or straight
// into the oldest receive already posted for that key, and completes at once; a receive
// completes when a message of its key arrives. Waits block on the fabric's condition variable
// until the deadline (no busy-wait). Messages of one key match in the order they were sent.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "../src/p2p_transport.h"
#include "braid/core/error.h"

namespace braid::p2p::testing {

class Fabric {
 public:
  explicit Fabric(int size) : size_(size) {}
  int size() const { return size_; }

  struct Recv {
    void* data;
    size_t bytes;
    bool done = false, cancelled = false, too_big = false;
    size_t received = 0;
  };
  using Key = std::tuple<int, int, uint64_t>;  // src, dst, tag

  void send(int src, int dst, uint64_t tag, const void* data, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    Box& box = boxes_[{src, dst, tag}];
    while (!box.waiting.empty() && box.waiting.front()->cancelled) box.waiting.pop_front();
    if (!box.waiting.empty()) {
      deliver(*box.waiting.front(), data, bytes);
      box.waiting.pop_front();
      cv_.notify_all();
      return;
    }
    const auto* p = static_cast<const uint8_t*>(data);
    box.messages.emplace_back(p, p + bytes);
  }

  std::shared_ptr<Recv> recv(int src, int dst, uint64_t tag, void* data, size_t bytes) {
    auto r = std::make_shared<Recv>(Recv{data, bytes});
    std::lock_guard<std::mutex> lock(mu_);
    Box& box = boxes_[{src, dst, tag}];
    if (!box.messages.empty()) {
      deliver(*r, box.messages.front().data(), box.messages.front().size());
      box.messages.pop_front();
    } else {
      box.waiting.push_back(r);
    }
    return r;
  }

  void cancel(const std::shared_ptr<Recv>& r) {
    std::lock_guard<std::mutex> lock(mu_);
    r->cancelled = true;
  }

  bool done(const Recv& r) {
    std::lock_guard<std::mutex> lock(mu_);
    return r.done;
  }

  // Blocks until every receive in `recvs` (null: a finished send) is done, or `deadline`.
  bool wait(const std::vector<Recv*>& recvs, Clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_until(lock, deadline, [&] {
      return std::all_of(recvs.begin(), recvs.end(), [](Recv* r) { return !r || r->done; });
    });
  }

 private:
  struct Box {
    std::deque<std::vector<uint8_t>> messages;
    std::deque<std::shared_ptr<Recv>> waiting;
  };

  static void deliver(Recv& r, const void* data, size_t bytes) {
    r.done = true;
    r.received = std::min(bytes, r.bytes);
    r.too_big = bytes > r.bytes;
    if (r.received > 0) std::memcpy(r.data, data, r.received);
  }

  const int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<Key, Box> boxes_;
};

class ThreadTransport final : public Transport {
 public:
  ThreadTransport(std::shared_ptr<Fabric> fabric, int rank)
      : fabric_(std::move(fabric)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return fabric_->size(); }

  std::unique_ptr<Request> isend(int peer, uint64_t tag, const void* data, size_t bytes) override {
    check_peer(peer);
    fabric_->send(rank_, peer, tag, data, bytes);
    return std::make_unique<Req>(fabric_, nullptr);
  }

  std::unique_ptr<Request> irecv(int peer, uint64_t tag, void* data, size_t bytes) override {
    check_peer(peer);
    return std::make_unique<Req>(fabric_, fabric_->recv(peer, rank_, tag, data, bytes));
  }

  void wait_all(std::vector<std::unique_ptr<Request>>& requests, const std::vector<int>& peers,
                Clock::time_point deadline, const std::string& what) override {
    std::vector<Fabric::Recv*> recvs;
    for (auto& r : requests) recvs.push_back(static_cast<Req&>(*r).recv.get());
    const bool all = fabric_->wait(recvs, deadline);
    std::ostringstream missing;
    for (size_t i = 0; i < recvs.size(); ++i) {
      if (!recvs[i]) continue;
      if (all && recvs[i]->too_big) {
        BRAID_FAIL(kInvalidArgument, what, ": a message from rank ", peers[i],
                   " is larger than the ", recvs[i]->bytes, " bytes received");
      }
      if (!all && !fabric_->done(*recvs[i])) missing << (missing.tellp() ? ", " : "") << peers[i];
    }
    if (!all) {
      BRAID_FAIL(kTimeout, what, ": timed out waiting for peers [", missing.str(), "]");
    }
  }

 private:
  struct Req final : Request {
    Req(std::shared_ptr<Fabric> f, std::shared_ptr<Fabric::Recv> r)
        : fabric(std::move(f)), recv(std::move(r)) {}
    ~Req() override {
      if (recv) fabric->cancel(recv);
    }
    bool test() override { return !recv || fabric->done(*recv); }
    size_t received() const override { return recv ? recv->received : 0; }
    std::shared_ptr<Fabric> fabric;
    std::shared_ptr<Fabric::Recv> recv;
  };

  void check_peer(int peer) const {
    BRAID_CHECK(peer >= 0 && peer < size() && peer != rank_, kInvalidArgument,
                "thread transport: peer ", peer, "; expected another rank in [0, ", size(), ")");
  }

  std::shared_ptr<Fabric> fabric_;
  int rank_;
};

}  // namespace braid::p2p::testing
