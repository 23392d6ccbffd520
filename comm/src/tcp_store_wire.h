// The TcpStore wire format (docs/store.md, "Frame format"), shared by server and client.
// A frame is a u32 little-endian body length followed by the body; the body's first byte is
// a command (requests) or a status (replies). Integers are little-endian; byte strings are a
// u32 length then the bytes. Reader throws kCorruptData on anything short or oversized.
// next_frame, decode_request and check_reply are the whole decoder: they touch no socket, so
// the server, the client and the fuzz targets (tests/fuzz/store_wire_fuzz.cc) share them.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "braid/comm/store.h"
#include "braid/core/error.h"

namespace braid::tcp_wire {

constexpr uint32_t kVersion = 1;
// Two values (compare_set) plus a key and a little framing.
constexpr size_t kMaxFrameBytes = 2 * Store::kMaxValueBytes + Store::kMaxKeyBytes + 64;

enum class Command : uint8_t {
  kHello = 1,       // u32 version, bytes token
  kSet = 2,         // bytes key, bytes value
  kGet = 3,         // u64 timeout_ms, bytes key
  kAdd = 4,         // bytes key, i64 delta
  kCompareSet = 5,  // bytes key, bytes expected, bytes desired
  kCheck = 6,       // u32 n, n x bytes key
  kWait = 7,        // u64 timeout_ms, u32 n, n x bytes key
  kDelete = 8,      // bytes key
  kNumKeys = 9,     // (nothing)
};

enum class Status : uint8_t {
  kOk = 0,          // payload per command (docs/store.md)
  kTimeout = 1,     // u32 n, n x bytes missing key
  kBadToken = 2,    // bytes message; the server closes the connection
  kBadRequest = 3,  // bytes message; the server closes the connection
  kFailed = 4,      // u8 error kind, bytes message; the connection stays usable
};

class Writer {
 public:
  explicit Writer(uint8_t first) { bytes_.resize(4), bytes_.push_back(first); }
  Writer& u8(uint8_t v) { return bytes_.push_back(v), *this; }
  Writer& u32(uint32_t v) { return put(v, 4); }
  Writer& u64(uint64_t v) { return put(v, 8); }
  Writer& i64(int64_t v) { return put(static_cast<uint64_t>(v), 8); }
  Writer& bytes(std::span<const uint8_t> b) {
    u32(static_cast<uint32_t>(b.size()));
    bytes_.insert(bytes_.end(), b.begin(), b.end());
    return *this;
  }
  Writer& bytes(std::string_view s) {
    return bytes(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
  }
  // The whole frame, length prefix filled in.
  std::vector<uint8_t> finish() {  // moves the bytes out
    uint32_t n = static_cast<uint32_t>(bytes_.size() - 4);
    for (int i = 0; i < 4; ++i) bytes_[i] = uint8_t(n >> (8 * i));
    return std::move(bytes_);
  }

 private:
  Writer& put(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) bytes_.push_back(uint8_t(v >> (8 * i)));
    return *this;
  }
  std::vector<uint8_t> bytes_;
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> body) : body_(body) {}
  uint8_t u8() { return static_cast<uint8_t>(get(1)); }
  uint32_t u32() { return static_cast<uint32_t>(get(4)); }
  uint64_t u64() { return get(8); }
  int64_t i64() { return static_cast<int64_t>(get(8)); }
  std::span<const uint8_t> bytes(size_t limit, std::string_view what) {
    uint32_t n = u32();
    BRAID_CHECK(n <= limit, kCorruptData, "store frame: ", what, " of ", n,
                " bytes exceeds the limit of ", limit);
    need(n, what);
    auto out = body_.subspan(pos_, n);
    pos_ += n;
    return out;
  }
  std::string string(size_t limit, std::string_view what) {
    auto b = bytes(limit, what);
    return {reinterpret_cast<const char*>(b.data()), b.size()};
  }
  void expect_end() const {
    BRAID_CHECK(pos_ == body_.size(), kCorruptData, "store frame: ", body_.size() - pos_,
                " unexpected trailing bytes after the fields");
  }

 private:
  void need(size_t n, std::string_view what) const {
    BRAID_CHECK(body_.size() - pos_ >= n, kCorruptData, "store frame: truncated ", what, " (needs ",
                n, " bytes, ", body_.size() - pos_, " left)");
  }
  uint64_t get(int n) {
    need(static_cast<size_t>(n), "integer field");
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= uint64_t(body_[pos_ + i]) << (8 * i);
    pos_ += static_cast<size_t>(n);
    return v;
  }
  std::span<const uint8_t> body_;
  size_t pos_ = 0;
};

inline uint32_t frame_length(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

// The body of the frame at the front of `in` (a connection's buffered bytes); nullopt while
// its length prefix or its body is incomplete. kCorruptData when the length is 0 or above
// kMaxFrameBytes: known from the prefix alone, before any of the body is buffered.
std::optional<std::span<const uint8_t>> next_frame(std::span<const uint8_t> in);

// A request body's fields. Which ones a command fills:
//   HELLO version, token | SET keys[0], value | GET timeout_ms, keys[0] | ADD keys[0], delta
//   COMPARE_SET keys[0], value (expected), desired | CHECK keys | WAIT timeout_ms, keys
//   DELETE keys[0] | NUM_KEYS nothing
// `value` and `desired` view the body: they live as long as it does.
struct Request {
  Command command = Command::kNumKeys;
  uint32_t version = 0;
  std::string token;
  uint64_t timeout_ms = 0;
  std::vector<std::string> keys;
  std::span<const uint8_t> value;
  std::span<const uint8_t> desired;
  int64_t delta = 0;
};

// Decodes one request body. kCorruptData naming the field for an empty body, an unknown
// command, a field running past the body, a key empty or over Store::kMaxKeyBytes, a value over
// Store::kMaxValueBytes, more than Store::kMaxKeysPerRequest keys, or trailing bytes. Whether
// the request is allowed on the connection (HELLO first and once) is the server's to check.
Request decode_request(std::span<const uint8_t> body);

// The client's reading of a reply body to `op` sent to the server at `address`: returns a
// Reader positioned after an OK status for the op's payload. TIMEOUT throws kTimeout naming
// the missing keys (of `keys`, when given) and `timeout`; BAD_TOKEN and BAD_REQUEST throw
// kInvalidArgument with the server's message; FAILED throws the kind it carries
// (kInvalidArgument or kOutOfRange; any other kind is kCorruptData); an unknown status or a
// short payload is kCorruptData.
Reader check_reply(std::span<const uint8_t> body, std::string_view address, std::string_view op,
                   const std::vector<std::string>* keys, std::chrono::milliseconds timeout);

}  // namespace braid::tcp_wire
