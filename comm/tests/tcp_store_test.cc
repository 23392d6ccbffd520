// TcpStore specifics: many clients, the job token, hostile frames over a raw socket (the
// server must answer with an error, drop only that connection and keep serving; also seeded
// mutations of valid frames of every command), a server
// that goes away, a server that stops answering, connect retries, and store_from_env().
// Raw frames are built here from docs/store.md, not from the implementation's helpers.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "braid/comm/store.h"
#include "braid/comm/tcp_store.h"
#include "braid/core/environment.h"
#include "braid/core/error.h"

namespace braid {
namespace {

using namespace std::chrono_literals;

template <typename Fn>
std::string error_of(ErrorKind kind, Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    return e.message();
  }
  ADD_FAILURE() << "expected an Error of kind " << to_string(kind);
  return {};
}

// --- raw frames (docs/store.md, "Frame format") ---------------------------------------------

struct Frame {
  std::vector<uint8_t> body;
  Frame& u8(uint8_t v) { return body.push_back(v), *this; }
  Frame& u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) body.push_back(uint8_t(v >> (8 * i)));
    return *this;
  }
  Frame& u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) body.push_back(uint8_t(v >> (8 * i)));
    return *this;
  }
  Frame& str(std::string_view s) {
    u32(uint32_t(s.size()));
    body.insert(body.end(), s.begin(), s.end());
    return *this;
  }
  std::vector<uint8_t> wire() const {
    std::vector<uint8_t> out(4 + body.size());
    for (int i = 0; i < 4; ++i) out[i] = uint8_t(body.size() >> (8 * i));
    std::copy(body.begin(), body.end(), out.begin() + 4);
    return out;
  }
};

constexpr uint8_t kHello = 1, kSet = 2, kGet = 3, kWait = 7;
constexpr uint8_t kOk = 0, kBadToken = 2, kBadRequest = 3;

class RawClient {
 public:
  explicit RawClient(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  }
  ~RawClient() { ::close(fd_); }
  void send(const std::vector<uint8_t>& bytes) {
    ASSERT_EQ(::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL), ssize_t(bytes.size()));
  }
  void hello(const std::string& token) {
    send(Frame().u8(kHello).u32(1).str(token).wire());
    EXPECT_EQ(reply_status(), kOk);
  }
  void shutdown_write() { ::shutdown(fd_, SHUT_WR); }
  // Reads n bytes; false on EOF. Fails the test rather than hanging past 20 s.
  bool read(uint8_t* dst, size_t n) {
    while (n > 0) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20000) != 1) {
        ADD_FAILURE() << "no reply from the server within 20 s";
        return false;
      }
      ssize_t got = ::recv(fd_, dst, n, 0);
      if (got <= 0) return false;
      dst += got;
      n -= size_t(got);
    }
    return true;
  }
  // The reply's status byte, or -1 when the connection closed instead; the body is kept.
  int reply_status() {
    uint8_t h[4];
    if (!read(h, 4)) return -1;
    uint32_t len = h[0] | h[1] << 8 | h[2] << 16 | uint32_t(h[3]) << 24;
    last_body.assign(len, 0);
    if (len == 0 || !read(last_body.data(), len)) return -1;
    return last_body[0];
  }
  std::string last_text() const {
    // status u8, then u32 length + bytes
    return last_body.size() > 5 ? std::string(last_body.begin() + 5, last_body.end()) : "";
  }
  bool closed_by_server() {
    uint8_t b;
    return !read(&b, 1);
  }
  std::vector<uint8_t> last_body;

 private:
  int fd_ = -1;
};

class TcpStoreTest : public ::testing::Test {
 protected:
  std::string token_ = generate_store_token();
  TcpStoreServer server_{"127.0.0.1", 0, token_};
  std::shared_ptr<TcpStore> client(std::chrono::milliseconds timeout = 10s) {
    return std::make_shared<TcpStore>("127.0.0.1", server_.port(), token_, timeout);
  }
  // The server still serves a well-behaved client.
  void expect_serving() {
    auto c = client();
    std::string key = "alive" + std::to_string(probe_++);
    c->set(key, "yes");
    EXPECT_EQ(c->get_string(key), "yes");
  }
  int probe_ = 0;
};

uint16_t unused_port() {
  TcpStoreServer probe("127.0.0.1", 0, "t");
  return probe.port();
}

TEST(TcpStoreTokenTest, GeneratedTokensAreRandomHex) {
  std::string a = generate_store_token(), b = generate_store_token();
  EXPECT_EQ(a.size(), 32u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos) << a;
  EXPECT_NE(a, b);
}

TEST_F(TcpStoreTest, ServerReportsThePortItPicked) {
  EXPECT_NE(server_.port(), 0);
  EXPECT_EQ(server_.host(), "127.0.0.1");
}

TEST_F(TcpStoreTest, ManyClientsRendezvous) {
  constexpr int kClients = 16;
  std::vector<std::string> keys;
  for (int i = 0; i < kClients; ++i) keys.push_back("rank" + std::to_string(i));
  std::atomic<int> ok{0};
  std::vector<std::thread> ranks;
  for (int i = 0; i < kClients; ++i) {
    ranks.emplace_back([&, i] {
      auto c = client();
      c->set(keys[i], std::to_string(i * i));
      c->wait(keys);
      int sum = 0;
      for (int j = 0; j < kClients; ++j) sum += std::stoi(c->get_string(keys[j]));
      if (sum == (kClients - 1) * kClients * (2 * kClients - 1) / 6) ++ok;
      c->add("arrived", 1);
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_EQ(ok.load(), kClients);
  EXPECT_EQ(client()->add("arrived", 0), kClients);
}

TEST_F(TcpStoreTest, OneClientServesConcurrentCallsWhileAWaitIsParked) {
  auto c = client();
  std::thread waiter([&] { EXPECT_EQ(c->get_string("go"), "now"); });
  c->set("go", "now");  // must not queue behind the parked get
  waiter.join();
}

TEST_F(TcpStoreTest, WrongTokenIsRejectedClearly) {
  TcpStore bad("127.0.0.1", server_.port(), "not-the-token", 5s);
  auto msg = error_of(ErrorKind::kInvalidArgument, [&] { bad.set("k", "v"); });
  EXPECT_NE(msg.find("token rejected"), std::string::npos) << msg;
  EXPECT_NE(msg.find("127.0.0.1:" + std::to_string(server_.port())), std::string::npos) << msg;
  EXPECT_FALSE(client()->check({"k"}));
  expect_serving();
}

TEST_F(TcpStoreTest, EmptyTokenIsRefusedBeforeConnecting) {
  auto msg = error_of(ErrorKind::kInvalidArgument,
                      [&] { TcpStore c("127.0.0.1", server_.port(), "", 1s); });
  EXPECT_NE(msg.find("token"), std::string::npos) << msg;
}

TEST_F(TcpStoreTest, RequestWithoutHelloGetsBadTokenAndIsClosed) {
  RawClient raw(server_.port());
  raw.send(Frame().u8(kSet).str("k").str("v").wire());
  EXPECT_EQ(raw.reply_status(), kBadToken);
  EXPECT_NE(raw.last_text().find("HELLO"), std::string::npos) << raw.last_text();
  EXPECT_TRUE(raw.closed_by_server());
  EXPECT_FALSE(client()->check({"k"}));
  expect_serving();
}

TEST_F(TcpStoreTest, HelloWithWrongVersionIsRefused) {
  RawClient raw(server_.port());
  raw.send(Frame().u8(kHello).u32(99).str(token_).wire());
  EXPECT_EQ(raw.reply_status(), kBadRequest);
  EXPECT_NE(raw.last_text().find("version 99"), std::string::npos) << raw.last_text();
  EXPECT_TRUE(raw.closed_by_server());
  expect_serving();
}

TEST_F(TcpStoreTest, PipelinedRequestsAreAnsweredInOrder) {
  RawClient raw(server_.port());
  std::vector<uint8_t> all = Frame().u8(kHello).u32(1).str(token_).wire();
  for (auto f : {Frame().u8(kSet).str("p").str("xyz"), Frame().u8(kGet).u64(1000).str("p")}) {
    auto w = f.wire();
    all.insert(all.end(), w.begin(), w.end());
  }
  raw.send(all);
  EXPECT_EQ(raw.reply_status(), kOk);  // hello
  EXPECT_EQ(raw.reply_status(), kOk);  // set
  EXPECT_EQ(raw.reply_status(), kOk);  // get
  EXPECT_EQ(raw.last_text(), "xyz");
}

struct BadFrame {
  std::string name;
  std::vector<uint8_t> bytes;
};

TEST_F(TcpStoreTest, MalformedFramesGetAnErrorAndOnlyThatConnectionDrops) {
  std::vector<BadFrame> cases = {
      {"unknown command", Frame().u8(0x7f).wire()},
      {"zero command", Frame().u8(0).str("k").wire()},
      {"length over the limit", {0xff, 0xff, 0xff, 0xff, kSet}},
      {"zero length", {0, 0, 0, 0}},
      {"field longer than the frame", Frame().u8(kSet).u32(1000).wire()},
      {"key over 4 KiB", Frame().u8(kSet).str(std::string(5000, 'k')).str("v").wire()},
      {"empty key", Frame().u8(kSet).str("").str("v").wire()},
      {"trailing bytes", Frame().u8(kSet).str("k").str("v").u8(1).wire()},
      {"too many keys", Frame().u8(kWait).u64(10).u32(1u << 30).wire()},
      {"second hello", Frame().u8(kHello).u32(1).str(token_).wire()},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto watcher = client();
    std::thread parked([&] { EXPECT_EQ(watcher->get_string("after_bad"), "1"); });
    RawClient raw(server_.port());
    raw.hello(token_);
    raw.send(c.bytes);
    EXPECT_EQ(raw.reply_status(), kBadRequest);
    EXPECT_FALSE(raw.last_text().empty());
    EXPECT_TRUE(raw.closed_by_server());
    client()->set("after_bad", "1");  // a parked client on another connection is still served
    parked.join();
    EXPECT_TRUE(client()->delete_key("after_bad"));
    expect_serving();
  }
}

// Seeded mutation fuzzing: valid frames of every command (docs/store.md), with bytes flipped,
// fields cut or grown, length prefixes rewritten, sent after a valid hello on fresh
// connections. Whatever the server makes of each (an answer, an error, a close, a parked
// wait that the client abandons), it must keep serving well-behaved clients and hold exactly
// what they stored. Timeouts in the seeds are short, so a mutant that parks ends soon.
TEST_F(TcpStoreTest, MutatedFramesNeverStopTheServer) {
  constexpr uint8_t kAdd = 4, kCompareSet = 5, kCheck = 6, kDelete = 8, kNumKeys = 9;
  const std::vector<std::vector<uint8_t>> seeds = {
      Frame().u8(kSet).str("fz").str("value").wire(),
      Frame().u8(kGet).u64(5).str("fz").wire(),
      Frame().u8(kAdd).str("fz_n").u64(3).wire(),
      Frame().u8(kCompareSet).str("fz").str("value").str("other").wire(),
      Frame().u8(kCheck).u32(2).str("fz").str("fz_n").wire(),
      Frame().u8(kWait).u64(5).u32(1).str("fz").wire(),
      Frame().u8(kDelete).str("fz").wire(),
      Frame().u8(kNumKeys).wire(),
  };
  auto keeper = client();
  keeper->set("fz_keep", "kept");
  std::mt19937 rng(20261130);
  for (int i = 0; i < 300; ++i) {
    std::vector<uint8_t> f = seeds[rng() % seeds.size()];
    for (int m = 0, n = 1 + int(rng() % 3); m < n; ++m) {
      const size_t at = rng() % f.size();
      switch (rng() % 4) {
        case 0:
          f[at] ^= uint8_t(1u << (rng() % 8));
          break;
        case 1:
          f.resize(std::max<size_t>(at, 1));
          break;
        case 2:  // one more byte at `at`
          f.push_back(uint8_t(rng()));
          std::rotate(f.begin() + long(at), f.end() - 1, f.end());
          break;
        case 3:  // a length prefix (of the frame or of a field) off by a little
          if (at + 4 <= f.size()) f[at] = uint8_t(f[at] + int(rng() % 5) - 2);
          break;
      }
    }
    RawClient raw(server_.port());
    raw.hello(token_);
    raw.send(f);
    raw.shutdown_write();  // the server sees the end of the stream after this frame
    if (i % 50 == 49) expect_serving();
  }
  expect_serving();
  EXPECT_EQ(keeper->get_string("fz_keep"), "kept");
}

TEST_F(TcpStoreTest, TruncatedFrameThenCloseIsDropped) {
  {
    RawClient raw(server_.port());
    raw.hello(token_);
    const auto full = Frame().u8(kSet).str("cut").str("value").wire();
    raw.send({full.begin(), full.end() - 3});  // the frame less its last 3 bytes
    raw.shutdown_write();
    EXPECT_TRUE(raw.closed_by_server());
  }
  EXPECT_FALSE(client()->check({"cut"}));
  expect_serving();
}

TEST_F(TcpStoreTest, GarbageBeforeHelloIsDropped) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    RawClient raw(server_.port());
    std::vector<uint8_t> junk(997);
    uint32_t x = seed * 2654435761u;
    for (auto& b : junk) b = uint8_t((x = x * 1103515245u + 12345u) >> 16);
    raw.send(junk);
    raw.shutdown_write();
    int status = raw.reply_status();  // an error reply, or a plain close
    EXPECT_TRUE(status == kBadToken || status == kBadRequest || status == -1) << status;
    EXPECT_TRUE(raw.closed_by_server());
  }
  expect_serving();
}

TEST_F(TcpStoreTest, AClientThatDisconnectsWhileParkedDoesNotDisturbTheServer) {
  {
    RawClient raw(server_.port());
    raw.hello(token_);
    raw.send(Frame().u8(kWait).u64(60000).u32(1).str("someday").wire());
  }  // closed while parked
  auto c = client();
  c->set("someday", "1");
  EXPECT_TRUE(c->check({"someday"}));
  expect_serving();
}

TEST(TcpStoreLifetimeTest, ClientGetsPeerLostWhenTheServerGoesAway) {
  std::string token = generate_store_token();
  auto server = std::make_unique<TcpStoreServer>("127.0.0.1", 0, token);
  std::string address = "127.0.0.1:" + std::to_string(server->port());
  TcpStore waiting("127.0.0.1", server->port(), token, 30s);
  TcpStore later("127.0.0.1", server->port(), token, 30s);
  waiting.set("up", "1");  // both hold an open connection
  later.set("up", "1");
  std::string waiter_msg;
  std::thread waiter(
      [&] { waiter_msg = error_of(ErrorKind::kPeerLost, [&] { waiting.wait({"never"}); }); });
  server.reset();
  waiter.join();
  EXPECT_NE(waiter_msg.find(address), std::string::npos) << waiter_msg;
  auto msg = error_of(ErrorKind::kPeerLost, [&] { later.get("up"); });
  EXPECT_NE(msg.find(address), std::string::npos) << msg;
}

TEST(TcpStoreLifetimeTest, ConnectGivesUpAtTheTimeoutWithPeerLost) {
  uint16_t port = unused_port();
  TcpStore c("127.0.0.1", port, "tok", 200ms);
  auto msg = error_of(ErrorKind::kPeerLost, [&] { c.set("k", "v"); });
  EXPECT_NE(msg.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << msg;
}

TEST(TcpStoreLifetimeTest, ConnectRetriesUntilTheServerStarts) {
  uint16_t port = unused_port();
  std::string token = generate_store_token();
  TcpStore c("127.0.0.1", port, token, 30s);
  std::string got;
  std::thread rank([&] {
    c.set("early", "bird");  // retries until the server below is listening
    got = c.get_string("early");
  });
  TcpStoreServer server("127.0.0.1", port, token);
  rank.join();
  EXPECT_EQ(got, "bird");
}

// A "server" that accepts, answers HELLO, then never answers again.
TEST(TcpStoreLifetimeTest, ClientDeadlineResetsTheConnectionOfASilentServer) {
  int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(lfd, 4), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len);
  uint16_t port = ntohs(addr.sin_port);

  std::atomic<int> accepted{0};
  std::atomic<bool> saw_reset{false};
  std::thread fake([&] {
    for (int round = 0; round < 2; ++round) {
      int fd = ::accept(lfd, nullptr, nullptr);
      if (fd < 0) return;
      ++accepted;
      uint8_t buf[4096];
      ::recv(fd, buf, sizeof(buf), 0);  // HELLO
      auto ok = Frame().u8(kOk).wire();
      ::send(fd, ok.data(), ok.size(), MSG_NOSIGNAL);
      ::recv(fd, buf, sizeof(buf), 0);  // the request, never answered
      // The client must close this connection at its deadline.
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 20000) == 1 && ::recv(fd, buf, sizeof(buf), 0) <= 0) saw_reset = true;
      ::close(fd);
    }
  });
  TcpStore c("127.0.0.1", port, "tok", 10s);
  auto msg = error_of(ErrorKind::kTimeout, [&] { c.wait({"k"}, 100ms); });
  EXPECT_NE(msg.find("did not answer"), std::string::npos) << msg;
  // The next call opens a fresh connection instead of reading the old one's late reply.
  EXPECT_THROW(c.get("k", 100ms), Error);
  fake.join();
  ::close(lfd);
  EXPECT_TRUE(saw_reset.load());
  EXPECT_EQ(accepted.load(), 2);
}

// ---------------------------------------------------------------------------------------------

TEST(StoreFromEnvTest, RankZeroServesAndOtherRanksConnect) {
  std::string port = std::to_string(unused_port());
  std::string token = generate_store_token();
  std::shared_ptr<Store> rank0, rank1;
  {
    PatchEnvironment env{{"MASTER_ADDR", "127.0.0.1"},
                         {"MASTER_PORT", port},
                         {"BRAID_STORE_TOKEN", token},
                         {"RANK", 0},
                         {"BRAID_STORE_SERVED_BY_LAUNCHER", "0"}};
    EXPECT_TRUE(store_env_from_env().is_server());
    rank0 = store_from_env(10s);
  }
  {
    PatchEnvironment env{{"MASTER_ADDR", "127.0.0.1"},
                         {"MASTER_PORT", port},
                         {"BRAID_STORE_TOKEN", token},
                         {"RANK", 1}};
    EXPECT_FALSE(store_env_from_env().is_server());
    rank1 = store_from_env(10s);
  }
  rank1->set("from1", "hi");
  EXPECT_EQ(rank0->get_string("from1"), "hi");
  EXPECT_EQ(rank0->timeout(), 10s);
}

TEST(StoreFromEnvTest, LauncherServedMeansNoRankServes) {
  PatchEnvironment env{{"MASTER_PORT", 29500},
                       {"BRAID_STORE_TOKEN", "t"},
                       {"RANK", 0},
                       {"BRAID_STORE_SERVED_BY_LAUNCHER", 1}};
  auto e = store_env_from_env();
  EXPECT_FALSE(e.is_server());
  EXPECT_EQ(e.host, "127.0.0.1");  // MASTER_ADDR defaults to loopback
  EXPECT_EQ(e.port, 29500);
}

TEST(StoreFromEnvTest, MissingOrBadVariablesNameTheVariable) {
  ClearEnvironment clear;
  auto msg = error_of(ErrorKind::kInvalidArgument, [] { store_env_from_env(); });
  EXPECT_NE(msg.find("MASTER_PORT"), std::string::npos) << msg;
  {
    PatchEnvironment env{{"MASTER_PORT", 70000}};
    msg = error_of(ErrorKind::kInvalidArgument, [] { store_env_from_env(); });
    EXPECT_NE(msg.find("70000"), std::string::npos) << msg;
  }
  {
    PatchEnvironment env{{"MASTER_PORT", 29500}};
    msg = error_of(ErrorKind::kInvalidArgument, [] { store_env_from_env(); });
    EXPECT_NE(msg.find("BRAID_STORE_TOKEN"), std::string::npos) << msg;
  }
  {
    PatchEnvironment env{{"MASTER_PORT", 29500}, {"BRAID_STORE_TOKEN", "t"}, {"RANK", -2}};
    msg = error_of(ErrorKind::kInvalidArgument, [] { store_env_from_env(); });
    EXPECT_NE(msg.find("RANK"), std::string::npos) << msg;
  }
}

TEST(TcpStoreServerTest, BindFailureNamesTheAddress) {
  TcpStoreServer first("127.0.0.1", 0, "t");
  std::string port = std::to_string(first.port());
  auto msg =
      error_of(ErrorKind::kIo, [&] { TcpStoreServer second("127.0.0.1", first.port(), "t"); });
  EXPECT_NE(msg.find("127.0.0.1:" + port), std::string::npos) << msg;
  msg = error_of(ErrorKind::kInvalidArgument, [] { TcpStoreServer s("127.0.0.1", 0, ""); });
  EXPECT_NE(msg.find("token"), std::string::npos) << msg;
}

}  // namespace
}  // namespace braid
