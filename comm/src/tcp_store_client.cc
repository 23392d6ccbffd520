// TcpStore, the client: a small pool of authenticated connections, each carrying one request
// at a time. Every send and receive polls against the call's deadline; a connection that hit a
// deadline or an error is closed, never returned to the pool, so a late reply can never be
// read as the answer to a later request. Connecting retries with backoff until the store's
// timeout, since ranks may start before the server.
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <thread>

#include "braid/comm/tcp_store.h"
#include "braid/core/error.h"
#include "store_detail.h"
#include "tcp_store_wire.h"

namespace braid {

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using tcp_wire::Command;
using tcp_wire::Status;
using tcp_wire::Writer;

constexpr size_t kMaxIdle = 8;
// The server answers a timed-out wait itself (naming the missing keys); the client's own
// deadline is later by this much and only fires when the server stopped answering.
constexpr auto kWaitGrace = 1000ms;

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      if (fd_ >= 0) ::close(fd_);
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

int ms_left(Clock::time_point deadline) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
}

}  // namespace

struct TcpStore::Impl {
  std::string host;
  uint16_t port = 0;
  std::string token;
  std::string address;  // "host:port" for messages
  std::mutex mutex;
  std::vector<int> idle;

  ~Impl() {
    for (int fd : idle) ::close(fd);
  }

  // Waits for `events` on fd until the deadline; false when it passed.
  static bool wait_io(int fd, short events, Clock::time_point deadline) {
    for (;;) {
      pollfd p{fd, events, 0};
      int n = ::poll(&p, 1, ms_left(deadline));
      if (n > 0) return true;
      if (n == 0) return false;
      if (errno != EINTR) BRAID_FAIL(kIo, "TcpStore: poll: ", std::strerror(errno));
    }
  }

  [[noreturn]] void lost(std::string_view op, std::string_view why) const {
    BRAID_FAIL(kPeerLost, "TcpStore: lost the store server at ", address, " during ", op, ": ",
               why);
  }
  [[noreturn]] void late(std::string_view op, Clock::time_point start) const {
    auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    BRAID_FAIL(kTimeout, "TcpStore: the store server at ", address, " did not answer ", op,
               " within ", waited.count(), " ms; the connection was reset");
  }

  void send_all(int fd, const std::vector<uint8_t>& frame, Clock::time_point deadline,
                std::string_view op) const {
    auto start = Clock::now();
    size_t done = 0;
    while (done < frame.size()) {
      ssize_t put = ::send(fd, frame.data() + done, frame.size() - done, MSG_NOSIGNAL);
      if (put > 0) {
        done += static_cast<size_t>(put);
      } else if (put < 0 && errno == EINTR) {
        continue;
      } else if (put < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (!wait_io(fd, POLLOUT, deadline)) late(op, start);
      } else {
        lost(op, std::strerror(errno));
      }
    }
  }

  void recv_exact(int fd, uint8_t* dst, size_t n, Clock::time_point deadline, std::string_view op,
                  Clock::time_point start) const {
    while (n > 0) {
      ssize_t got = ::recv(fd, dst, n, 0);
      if (got > 0) {
        dst += got;
        n -= static_cast<size_t>(got);
      } else if (got == 0) {
        lost(op, "the server closed the connection");
      } else if (errno == EINTR) {
        continue;
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (!wait_io(fd, POLLIN, deadline)) late(op, start);
      } else {
        lost(op, std::strerror(errno));
      }
    }
  }

  std::vector<uint8_t> recv_frame(int fd, Clock::time_point deadline, std::string_view op) const {
    auto start = Clock::now();
    uint8_t header[4];
    recv_exact(fd, header, 4, deadline, op, start);
    uint32_t len = tcp_wire::frame_length(header);
    BRAID_CHECK(len >= 1 && len <= tcp_wire::kMaxFrameBytes, kCorruptData, "TcpStore: reply to ",
                op, " from ", address, " has frame length ", len, "; expected 1..",
                tcp_wire::kMaxFrameBytes);
    std::vector<uint8_t> body(len);
    recv_exact(fd, body.data(), len, deadline, op, start);
    return body;
  }

  // Throws for the error statuses; returns a Reader positioned after an OK status.
  tcp_wire::Reader check_status(const std::vector<uint8_t>& body, std::string_view op,
                                const std::vector<std::string>* keys,
                                std::chrono::milliseconds timeout) const {
    return tcp_wire::check_reply(body, address, op, keys, timeout);
  }

  // One non-blocking connect attempt; returns the error text on failure.
  std::string try_connect(Fd& out, Clock::time_point deadline) const {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* found = nullptr;
    int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
    BRAID_CHECK(rc != EAI_NONAME, kInvalidArgument, "TcpStore: cannot resolve store host '", host,
                "': ", ::gai_strerror(rc));
    if (rc != 0) return ::gai_strerror(rc);
    std::string error = "no address";
    for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
      Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
      if (fd.get() < 0) {
        error = std::strerror(errno);
        continue;
      }
      int err = ::connect(fd.get(), a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
      if (err == EINPROGRESS) {
        err = ETIMEDOUT;
        if (wait_io(fd.get(), POLLOUT, deadline)) {
          socklen_t len = sizeof(err);
          ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
        }
      }
      if (err == 0) {
        int one = 1;
        ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        out = Fd(fd.release());
        error.clear();
        break;
      }
      error = std::strerror(err);
    }
    ::freeaddrinfo(found);
    return error;
  }

  Fd connect(Clock::time_point deadline) const {
    auto pause = 10ms;
    std::string error;
    for (;;) {
      Fd fd;
      error = try_connect(fd, deadline);
      if (error.empty()) {
        send_all(fd.get(),
                 Writer(uint8_t(Command::kHello)).u32(tcp_wire::kVersion).bytes(token).finish(),
                 deadline, "HELLO");
        check_status(recv_frame(fd.get(), deadline, "HELLO"), "HELLO", nullptr, {});
        return fd;
      }
      auto left = deadline - Clock::now();
      if (left <= 0ms) break;
      std::this_thread::sleep_for(std::min<Clock::duration>(pause, left));
      pause = std::min(pause * 2, 1000ms);
    }
    BRAID_FAIL(kPeerLost, "TcpStore: cannot reach the store server at ", address,
               " (last error: ", error, "); gave up at the store's timeout");
  }

  // Sends one request and returns the reply body. `deadline` bounds the whole exchange.
  std::vector<uint8_t> request(std::vector<uint8_t> frame, Clock::time_point deadline,
                               std::string_view op) {
    Fd fd;
    {
      std::lock_guard lock(mutex);
      if (!idle.empty()) {
        fd = Fd(idle.back());
        idle.pop_back();
      }
    }
    if (fd.get() < 0) fd = connect(deadline);
    send_all(fd.get(), frame, deadline, op);
    auto body = recv_frame(fd.get(), deadline, op);
    // Error statuses other than kBadRequest / kBadToken leave the connection usable.
    auto status = static_cast<Status>(body[0]);
    if (status == Status::kOk || status == Status::kTimeout || status == Status::kFailed) {
      std::lock_guard lock(mutex);
      if (idle.size() < kMaxIdle) idle.push_back(fd.release());
    }
    return body;
  }

  // A request that answers at once: bounded by the store's timeout.
  std::vector<uint8_t> simple(std::vector<uint8_t> frame, std::chrono::milliseconds timeout,
                              std::string_view op) {
    return request(std::move(frame), Clock::now() + timeout, op);
  }
};

TcpStore::TcpStore(std::string host, uint16_t port, std::string token,
                   std::chrono::milliseconds timeout)
    : Store(timeout), impl_(std::make_unique<Impl>()) {
  BRAID_CHECK(!host.empty(), kInvalidArgument, "TcpStore: the server host is empty");
  BRAID_CHECK(port != 0, kInvalidArgument, "TcpStore: server port 0 for host ", host,
              "; expected the server's port (1..65535)");
  BRAID_CHECK(!token.empty(), kInvalidArgument, "TcpStore: the job token is empty (set ",
              "BRAID_STORE_TOKEN or pass the server's token)");
  BRAID_CHECK(token.size() <= kMaxKeyBytes, kInvalidArgument, "TcpStore: the token is ",
              token.size(), " bytes; the limit is ", kMaxKeyBytes);
  impl_->address = host + ":" + std::to_string(port);
  impl_->host = std::move(host);
  impl_->port = port;
  impl_->token = std::move(token);
}
TcpStore::~TcpStore() = default;

const std::string& TcpStore::host() const {
  return impl_->host;
}
uint16_t TcpStore::port() const {
  return impl_->port;
}

void TcpStore::do_set(std::string_view key, std::span<const uint8_t> value) {
  auto body = impl_->simple(Writer(uint8_t(Command::kSet)).bytes(key).bytes(value).finish(),
                            timeout(), "set");
  impl_->check_status(body, "set", nullptr, {}).expect_end();
}

std::vector<uint8_t> TcpStore::do_get(std::string_view key, std::chrono::milliseconds timeout) {
  auto frame = Writer(uint8_t(Command::kGet)).u64(uint64_t(timeout.count())).bytes(key).finish();
  auto body = impl_->request(std::move(frame), Clock::now() + timeout + kWaitGrace, "get");
  std::vector<std::string> keys{std::string(key)};
  auto r = impl_->check_status(body, "get", &keys, timeout);
  auto value = r.bytes(kMaxValueBytes, "value");
  return {value.begin(), value.end()};
}

int64_t TcpStore::do_add(std::string_view key, int64_t delta) {
  auto body = impl_->simple(Writer(uint8_t(Command::kAdd)).bytes(key).i64(delta).finish(),
                            timeout(), "add");
  return impl_->check_status(body, "add", nullptr, {}).i64();
}

std::vector<uint8_t> TcpStore::do_compare_set(std::string_view key,
                                              std::span<const uint8_t> expected,
                                              std::span<const uint8_t> desired) {
  auto frame =
      Writer(uint8_t(Command::kCompareSet)).bytes(key).bytes(expected).bytes(desired).finish();
  auto body = impl_->simple(std::move(frame), timeout(), "compare_set");
  auto value = impl_->check_status(body, "compare_set", nullptr, {}).bytes(kMaxValueBytes, "value");
  return {value.begin(), value.end()};
}

namespace {
Writer with_keys(Writer w, const std::vector<std::string>& keys) {
  w.u32(static_cast<uint32_t>(keys.size()));
  for (const auto& key : keys) w.bytes(key);
  return w;
}
}  // namespace

bool TcpStore::do_check(const std::vector<std::string>& keys) {
  auto body =
      impl_->simple(with_keys(Writer(uint8_t(Command::kCheck)), keys).finish(), timeout(), "check");
  return impl_->check_status(body, "check", nullptr, {}).u8() != 0;
}

void TcpStore::do_wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  Writer w{uint8_t(Command::kWait)};  // braces: clang reads (uint8_t(X::y)) as a declaration
  w.u64(uint64_t(timeout.count()));
  auto frame = with_keys(std::move(w), keys).finish();
  auto body = impl_->request(std::move(frame), Clock::now() + timeout + kWaitGrace, "wait");
  impl_->check_status(body, "wait", &keys, timeout);
}

bool TcpStore::do_delete_key(std::string_view key) {
  auto body =
      impl_->simple(Writer(uint8_t(Command::kDelete)).bytes(key).finish(), timeout(), "delete_key");
  return impl_->check_status(body, "delete_key", nullptr, {}).u8() != 0;
}

int64_t TcpStore::do_num_keys() {
  auto body = impl_->simple(Writer(uint8_t(Command::kNumKeys)).finish(), timeout(), "num_keys");
  return impl_->check_status(body, "num_keys", nullptr, {}).i64();
}

std::string generate_store_token() {
  std::ifstream in("/dev/urandom", std::ios::binary);
  uint8_t raw[16] = {};
  in.read(reinterpret_cast<char*>(raw), sizeof(raw));
  BRAID_CHECK(in.gcount() == sizeof(raw), kIo,
              "generate_store_token: cannot read 16 bytes from /dev/urandom");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token;
  for (uint8_t b : raw) token += {kHex[b >> 4], kHex[b & 15]};
  return token;
}

}  // namespace braid
