// TcpStoreServer: one thread, one poll() loop over the listening socket, a wake-up eventfd and
// every connection. All store state lives on that thread, so it needs no locks. Requests that
// must wait (get, wait) are parked and answered when their keys appear or their deadline
// passes; poll() sleeps until the next event or the nearest deadline, never busy-looping.
//
// Hostile input: every frame is bounded before it is buffered (tcp_store_wire.h); a bad token,
// a malformed, truncated or oversized frame gets an error reply where possible and that
// connection alone is dropped. Exceptions from parsing never leave the loop.
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <thread>
#include <unordered_map>

#include "braid/comm/tcp_store.h"
#include "braid/core/error.h"
#include "braid/core/logging.h"
#include "store_detail.h"
#include "tcp_store_wire.h"

namespace braid {

namespace {

using Clock = std::chrono::steady_clock;
using tcp_wire::Command;
using tcp_wire::Status;

constexpr size_t kMaxConnections = 4096;
constexpr size_t kReadChunk = 64 * 1024;
// A parked connection may buffer its next request, but not unbounded data.
constexpr size_t kMaxBuffered = 4 + tcp_wire::kMaxFrameBytes + kReadChunk;
constexpr uint64_t kMaxWaitMs = uint64_t{365} * 24 * 3600 * 1000;

struct Conn {
  int fd = -1;
  std::vector<uint8_t> in;
  size_t in_off = 0;
  std::vector<uint8_t> out;
  size_t out_off = 0;
  bool authed = false;
  bool parked = false;   // a get / wait is outstanding; later frames stay buffered
  bool closing = false;  // close once `out` is flushed (after an error reply)
  bool dead = false;     // close now
};

struct Waiter {
  std::vector<std::string> keys;
  Clock::time_point deadline;
  bool is_get = false;
};

std::vector<uint8_t> reply_ok() {
  return tcp_wire::Writer(uint8_t(Status::kOk)).finish();
}
std::vector<uint8_t> reply_message(Status status, std::string_view message) {
  return tcp_wire::Writer(uint8_t(status)).bytes(message).finish();
}

// Compares without an early exit, so the time taken does not reveal a matching prefix.
bool same_token(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= unsigned(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

struct TcpStoreServer::Impl {
  std::string host;
  uint16_t port = 0;
  std::string token;
  int listen_fd = -1;
  int wake_fd = -1;
  std::atomic<bool> stopping{false};
  std::atomic<size_t> connections{0};
  std::thread thread;

  // Owned by the serving thread.
  std::unordered_map<std::string, std::vector<uint8_t>> data;
  std::map<uint64_t, Conn> conns;
  uint64_t next_id = 1;
  std::unordered_map<uint64_t, Waiter> waiters;  // by connection id
  std::unordered_map<std::string, std::vector<uint64_t>> watchers;
  std::vector<uint64_t> runnable;  // unparked connections with frames perhaps buffered

  void bind_and_listen(uint16_t requested);
  void serve();
  void accept_all();
  void read_some(Conn& c);
  void flush(Conn& c);
  void process(uint64_t id, Conn& c);
  void handle(uint64_t id, Conn& c, std::span<const uint8_t> body);
  void handle_hello(Conn& c, const tcp_wire::Request& req);
  void send(Conn& c, std::vector<uint8_t> frame) {
    if (c.out_off == c.out.size()) c.out.clear(), c.out_off = 0;
    c.out.insert(c.out.end(), frame.begin(), frame.end());
  }
  void park(uint64_t id, Conn& c, Waiter w);
  void unpark(uint64_t id);
  void notify(const std::string& key);
  void expire(Clock::time_point now);
  int poll_timeout_ms() const;
  bool present(const std::vector<std::string>& keys) const {
    return std::ranges::all_of(keys, [&](const auto& k) { return data.contains(k); });
  }
  std::vector<std::string> missing(const std::vector<std::string>& keys) const {
    std::vector<std::string> out;
    for (const auto& k : keys) {
      if (!data.contains(k)) out.push_back(k);
    }
    return out;
  }
};

void TcpStoreServer::Impl::bind_and_listen(uint16_t requested) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE;
  addrinfo* found = nullptr;
  std::string service = std::to_string(requested);
  int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
  BRAID_CHECK(rc == 0, kInvalidArgument, "TcpStoreServer: cannot resolve bind host '", host,
              "': ", ::gai_strerror(rc));
  std::string last_error = "no address";
  for (addrinfo* a = found; a != nullptr && listen_fd < 0; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) {
      listen_fd = fd;
      break;
    }
    last_error = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(found);
  BRAID_CHECK(listen_fd >= 0, kIo, "TcpStoreServer: cannot listen on ", host, ":", requested, ": ",
              last_error);
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len);
  port = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                    : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

void TcpStoreServer::Impl::accept_all() {
  while (conns.size() < kMaxConnections) {
    int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        BRAID_LOG(kWarning) << "TcpStoreServer " << host << ":" << port
                            << ": accept: " << std::strerror(errno);
      }
      return;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    conns[next_id++].fd = fd;
    connections = conns.size();
  }
}

void TcpStoreServer::Impl::read_some(Conn& c) {
  uint8_t buf[kReadChunk];
  for (;;) {
    ssize_t got = ::recv(c.fd, buf, sizeof(buf), 0);
    if (got > 0) {
      if (c.in_off > 0 && c.in_off == c.in.size()) c.in.clear(), c.in_off = 0;
      c.in.insert(c.in.end(), buf, buf + got);
      if (c.in.size() - c.in_off > kMaxBuffered) c.dead = true;  // flooding while parked
      if (c.dead || static_cast<size_t>(got) < sizeof(buf)) return;
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    c.dead = true;  // EOF or reset: a half-sent frame is simply dropped
    return;
  }
}

void TcpStoreServer::Impl::flush(Conn& c) {
  while (c.out_off < c.out.size()) {
    ssize_t put = ::send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
    if (put > 0) {
      c.out_off += static_cast<size_t>(put);
      continue;
    }
    if (put < 0 && errno == EINTR) continue;
    if (put < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    c.dead = true;
    return;
  }
  c.out.clear();
  c.out_off = 0;
  if (c.closing) c.dead = true;
}

void TcpStoreServer::Impl::process(uint64_t id, Conn& c) {
  while (!c.parked && !c.closing && !c.dead) {
    std::optional<std::span<const uint8_t>> body;
    try {
      body = tcp_wire::next_frame(std::span<const uint8_t>(c.in).subspan(c.in_off));
    } catch (const Error& e) {  // a bad length: the rest of the stream cannot be framed
      send(c, reply_message(Status::kBadRequest, e.message()));
      c.closing = true;
      break;
    }
    if (!body) break;
    try {
      handle(id, c, *body);
    } catch (const std::exception& e) {
      const auto* err = dynamic_cast<const Error*>(&e);
      send(c, reply_message(Status::kBadRequest, err ? err->message() : e.what()));
      c.closing = true;
      BRAID_LOG(kDebug) << "TcpStoreServer " << host << ":" << port << ": dropping connection "
                        << id << ": " << e.what();
    }
    c.in_off += 4 + body->size();
  }
  if (c.in_off == c.in.size()) c.in.clear(), c.in_off = 0;
  flush(c);
}

void TcpStoreServer::Impl::handle_hello(Conn& c, const tcp_wire::Request& req) {
  if (req.version != tcp_wire::kVersion) {
    send(c, reply_message(Status::kBadRequest,
                          detail::concat("protocol version ", req.version, " is not supported; ",
                                         "this server speaks version ", tcp_wire::kVersion)));
    c.closing = true;
  } else if (!same_token(req.token, token)) {
    send(c, reply_message(Status::kBadToken, "the job token does not match this store's"));
    c.closing = true;
  } else {
    c.authed = true;
    send(c, reply_ok());
  }
}

namespace {

Clock::time_point deadline_after(uint64_t ms) {
  return Clock::now() + std::chrono::milliseconds(std::min(ms, kMaxWaitMs));
}

}  // namespace

void TcpStoreServer::Impl::handle(uint64_t id, Conn& c, std::span<const uint8_t> body) {
  // Before HELLO, anything else gets BAD_TOKEN, however malformed (body is never empty).
  const auto first = static_cast<Command>(body[0]);
  if (!c.authed && first != Command::kHello) {
    send(c, reply_message(Status::kBadToken, detail::concat("the first frame must be HELLO with "
                                                            "the job token; got command ",
                                                            int(first))));
    c.closing = true;
    return;
  }
  tcp_wire::Request req = tcp_wire::decode_request(body);
  if (!c.authed) return handle_hello(c, req);
  using tcp_wire::Writer;
  switch (req.command) {
    case Command::kSet: {
      const std::string& key = req.keys[0];
      data.insert_or_assign(key, std::vector<uint8_t>(req.value.begin(), req.value.end()));
      send(c, reply_ok());
      return notify(key);
    }
    case Command::kGet: {
      auto it = data.find(req.keys[0]);
      if (it != data.end()) return send(c, Writer(uint8_t(Status::kOk)).bytes(it->second).finish());
      return park(id, c, Waiter{std::move(req.keys), deadline_after(req.timeout_ms), true});
    }
    case Command::kAdd: {
      const std::string& key = req.keys[0];
      int64_t next = 0;
      try {
        auto it = data.find(key);
        int64_t current = it == data.end() ? 0 : store_detail::parse_counter(key, it->second);
        next = store_detail::checked_add(key, current, req.delta);
      } catch (const Error& e) {  // the request was well formed: the connection stays
        return send(c, tcp_wire::Writer(uint8_t(Status::kFailed))
                           .u8(uint8_t(e.kind()))
                           .bytes(e.message())
                           .finish());
      }
      data.insert_or_assign(key, store_detail::format_counter(next));
      send(c, Writer(uint8_t(Status::kOk)).i64(next).finish());
      return notify(key);
    }
    case Command::kCompareSet: {
      const std::string& key = req.keys[0];
      const auto expected = req.value;
      const auto desired = req.desired;
      auto it = data.find(key);
      bool swap = it == data.end() ? expected.empty() : std::ranges::equal(it->second, expected);
      if (!swap) {
        std::span<const uint8_t> now;
        if (it != data.end()) now = it->second;
        return send(c, Writer(uint8_t(Status::kOk)).bytes(now).finish());
      }
      data.insert_or_assign(key, std::vector<uint8_t>(desired.begin(), desired.end()));
      send(c, Writer(uint8_t(Status::kOk)).bytes(desired).finish());
      return notify(key);
    }
    case Command::kCheck:
      return send(c, Writer(uint8_t(Status::kOk)).u8(present(req.keys) ? 1 : 0).finish());
    case Command::kWait:
      if (present(req.keys)) return send(c, reply_ok());
      return park(id, c, Waiter{std::move(req.keys), deadline_after(req.timeout_ms), false});
    case Command::kDelete:
      return send(c, Writer(uint8_t(Status::kOk)).u8(data.erase(req.keys[0]) ? 1 : 0).finish());
    case Command::kNumKeys:
      return send(c, Writer(uint8_t(Status::kOk)).i64(int64_t(data.size())).finish());
    case Command::kHello:
      BRAID_FAIL(kCorruptData, "store frame: HELLO sent twice on one connection");
  }
  BRAID_ASSERT(false, "decode_request returned command ", int(req.command));
}

void TcpStoreServer::Impl::park(uint64_t id, Conn& c, Waiter w) {
  c.parked = true;
  for (const auto& key : w.keys) watchers[key].push_back(id);
  waiters.insert_or_assign(id, std::move(w));
}

void TcpStoreServer::Impl::unpark(uint64_t id) {
  auto it = waiters.find(id);
  if (it == waiters.end()) return;
  for (const auto& key : it->second.keys) {
    auto w = watchers.find(key);
    if (w == watchers.end()) continue;
    std::erase(w->second, id);
    if (w->second.empty()) watchers.erase(w);
  }
  waiters.erase(it);
  auto c = conns.find(id);
  if (c != conns.end()) {
    c->second.parked = false;
    runnable.push_back(id);
  }
}

void TcpStoreServer::Impl::notify(const std::string& key) {
  auto w = watchers.find(key);
  if (w == watchers.end()) return;
  std::vector<uint64_t> ids = w->second;  // unpark() edits the list
  for (uint64_t id : ids) {
    const Waiter& waiter = waiters.at(id);
    if (!present(waiter.keys)) continue;
    Conn& c = conns.at(id);
    if (waiter.is_get) {
      send(c, tcp_wire::Writer(uint8_t(Status::kOk)).bytes(data.at(waiter.keys[0])).finish());
    } else {
      send(c, reply_ok());
    }
    unpark(id);
  }
}

void TcpStoreServer::Impl::expire(Clock::time_point now) {
  std::vector<uint64_t> due;
  for (const auto& [id, w] : waiters) {
    if (w.deadline <= now) due.push_back(id);
  }
  for (uint64_t id : due) {
    tcp_wire::Writer reply{uint8_t(Status::kTimeout)};
    auto gone = missing(waiters.at(id).keys);
    reply.u32(static_cast<uint32_t>(gone.size()));
    for (const auto& key : gone) reply.bytes(key);
    send(conns.at(id), reply.finish());
    unpark(id);
  }
}

int TcpStoreServer::Impl::poll_timeout_ms() const {
  if (waiters.empty()) return -1;
  auto nearest = Clock::time_point::max();
  for (const auto& [id, w] : waiters) nearest = std::min(nearest, w.deadline);
  auto left = std::chrono::ceil<std::chrono::milliseconds>(nearest - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 60'000));
}

void TcpStoreServer::Impl::serve() {
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;
  while (!stopping.load()) {
    fds.assign({{wake_fd, POLLIN, 0}, {listen_fd, POLLIN, 0}});
    if (conns.size() >= kMaxConnections) fds[1].fd = -1;  // leave new ones in the backlog
    ids.clear();
    for (auto& [id, c] : conns) {
      short events = POLLIN | POLLRDHUP;
      if (c.out_off < c.out.size()) events |= POLLOUT;
      fds.push_back({c.fd, events, 0});
      ids.push_back(id);
    }
    int n = ::poll(fds.data(), fds.size(), poll_timeout_ms());
    if (n < 0 && errno != EINTR) {
      BRAID_LOG(kError) << "TcpStoreServer " << host << ":" << port
                        << ": poll: " << std::strerror(errno) << "; the server stops";
      break;
    }
    if (stopping.load()) break;
    if (n > 0 && (fds[1].revents & POLLIN)) accept_all();
    for (size_t i = 0; n > 0 && i < ids.size(); ++i) {
      short ev = fds[i + 2].revents;
      if (ev == 0) continue;
      Conn& c = conns.at(ids[i]);
      if (ev & (POLLIN | POLLRDHUP | POLLHUP | POLLERR)) read_some(c);
      if (!c.dead) process(ids[i], c);
    }
    expire(Clock::now());
    while (!runnable.empty()) {
      uint64_t id = runnable.back();
      runnable.pop_back();
      auto it = conns.find(id);
      if (it != conns.end() && !it->second.dead) process(id, it->second);
    }
    for (auto it = conns.begin(); it != conns.end();) {
      if (!it->second.dead) {
        ++it;
        continue;
      }
      unpark(it->first);
      ::close(it->second.fd);
      it = conns.erase(it);
    }
    runnable.clear();
    connections = conns.size();
  }
}

TcpStoreServer::TcpStoreServer(std::string host, uint16_t port, std::string token)
    : impl_(std::make_unique<Impl>()) {
  BRAID_CHECK(!token.empty(), kInvalidArgument, "TcpStoreServer: the job token is empty");
  BRAID_CHECK(token.size() <= Store::kMaxKeyBytes, kInvalidArgument,
              "TcpStoreServer: the token is ", token.size(), " bytes; the limit is ",
              Store::kMaxKeyBytes);
  BRAID_CHECK(!host.empty(), kInvalidArgument, "TcpStoreServer: the bind host is empty");
  impl_->host = std::move(host);
  impl_->token = std::move(token);
  impl_->bind_and_listen(port);
  impl_->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (impl_->wake_fd < 0) {
    int e = errno;
    ::close(impl_->listen_fd);
    BRAID_FAIL(kIo, "TcpStoreServer: eventfd: ", std::strerror(e));
  }
  impl_->thread = std::thread([impl = impl_.get()] { impl->serve(); });
}

TcpStoreServer::~TcpStoreServer() {
  stop();
}

void TcpStoreServer::stop() {
  if (!impl_->thread.joinable()) return;
  impl_->stopping = true;
  uint64_t one = 1;
  [[maybe_unused]] ssize_t put = ::write(impl_->wake_fd, &one, sizeof(one));
  impl_->thread.join();
  for (auto& [id, c] : impl_->conns) ::close(c.fd);
  impl_->conns.clear();
  impl_->connections = 0;
  ::close(impl_->listen_fd);
  ::close(impl_->wake_fd);
}

const std::string& TcpStoreServer::host() const {
  return impl_->host;
}
uint16_t TcpStoreServer::port() const {
  return impl_->port;
}
size_t TcpStoreServer::num_connections() const {
  return impl_->connections.load();
}

}  // namespace braid
