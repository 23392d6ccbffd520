// The TcpStore wire decoder (tcp_store_wire.h; docs/store.md, "Frame format"): frame
// splitting, request decoding for the server, reply checking for the client. Pure functions
// over byte spans, so that every byte a peer can send is checked in one place and the fuzz
// target drives exactly the code the server and client run.
#include "tcp_store_wire.h"

#include "store_detail.h"

namespace braid::tcp_wire {

std::optional<std::span<const uint8_t>> next_frame(std::span<const uint8_t> in) {
  if (in.size() < 4) return std::nullopt;
  const uint32_t len = frame_length(in.data());
  BRAID_CHECK(len != 0 && len <= kMaxFrameBytes, kCorruptData, "frame length ", len,
              " is outside 1..", kMaxFrameBytes);
  if (in.size() - 4 < size_t{len}) return std::nullopt;
  return in.subspan(4, len);
}

namespace {

std::string read_key(Reader& r) {
  std::string key = r.string(Store::kMaxKeyBytes, "key");
  BRAID_CHECK(!key.empty(), kCorruptData, "store frame: empty key");
  return key;
}

std::vector<std::string> read_keys(Reader& r) {
  const uint32_t n = r.u32();
  BRAID_CHECK(n <= Store::kMaxKeysPerRequest, kCorruptData, "store frame: ", n,
              " keys exceed the limit of ", Store::kMaxKeysPerRequest);
  std::vector<std::string> keys;
  keys.reserve(n);
  for (uint32_t i = 0; i < n; ++i) keys.push_back(read_key(r));
  return keys;
}

}  // namespace

Request decode_request(std::span<const uint8_t> body) {
  Reader r(body);
  Request req;
  req.command = static_cast<Command>(r.u8());
  switch (req.command) {
    case Command::kHello:
      req.version = r.u32();
      req.token = r.string(Store::kMaxKeyBytes, "token");
      break;
    case Command::kSet:
      req.keys.push_back(read_key(r));
      req.value = r.bytes(Store::kMaxValueBytes, "value");
      break;
    case Command::kGet:
      req.timeout_ms = r.u64();
      req.keys.push_back(read_key(r));
      break;
    case Command::kAdd:
      req.keys.push_back(read_key(r));
      req.delta = r.i64();
      break;
    case Command::kCompareSet:
      req.keys.push_back(read_key(r));
      req.value = r.bytes(Store::kMaxValueBytes, "expected value");
      req.desired = r.bytes(Store::kMaxValueBytes, "desired value");
      break;
    case Command::kCheck:
      req.keys = read_keys(r);
      break;
    case Command::kWait:
      req.timeout_ms = r.u64();
      req.keys = read_keys(r);
      break;
    case Command::kDelete:
      req.keys.push_back(read_key(r));
      break;
    case Command::kNumKeys:
      break;
    default:
      BRAID_FAIL(kCorruptData, "store frame: unknown command ", int(req.command),
                 "; expected 1..9");
  }
  r.expect_end();
  return req;
}

Reader check_reply(std::span<const uint8_t> body, std::string_view address, std::string_view op,
                   const std::vector<std::string>* keys, std::chrono::milliseconds timeout) {
  Reader r(body);
  const auto status = static_cast<Status>(r.u8());
  switch (status) {
    case Status::kOk:
      return r;
    case Status::kTimeout: {
      const uint32_t n = r.u32();
      std::vector<std::string> gone;
      for (uint32_t i = 0; i < n && i < Store::kMaxKeysPerRequest; ++i) {
        gone.push_back(r.string(Store::kMaxKeyBytes, "key"));
      }
      store_detail::throw_wait_timeout(detail::concat("TcpStore ", address), gone,
                                       keys ? *keys : gone, timeout);
    }
    case Status::kBadToken: {
      const std::string message = r.string(Store::kMaxValueBytes, "message");
      BRAID_FAIL(kInvalidArgument, "TcpStore: store token rejected by ", address, ": ", message,
                 " (check BRAID_STORE_TOKEN matches the server's)");
    }
    case Status::kBadRequest: {
      const std::string message = r.string(Store::kMaxValueBytes, "message");
      BRAID_FAIL(kInvalidArgument, "TcpStore: the store server at ", address, " refused ", op, ": ",
                 message);
    }
    case Status::kFailed: {
      const uint8_t kind = r.u8();
      std::string message = r.string(Store::kMaxValueBytes, "message");
      // Only the kinds a request can fail with travel; anything else is not ours. The server's
      // message says what failed; the prefix says where (and stands alone when it is empty).
      const bool known =
          kind == uint8_t(ErrorKind::kInvalidArgument) || kind == uint8_t(ErrorKind::kOutOfRange);
      throw Error(known ? ErrorKind(kind) : ErrorKind::kCorruptData,
                  detail::concat("TcpStore: ", op, " failed at the store server at ", address,
                                 message.empty() ? " (no message in its reply)" : ": ", message));
    }
  }
  BRAID_FAIL(kCorruptData, "TcpStore: reply to ", op, " from ", address, " has status ",
             int(status), "; expected 0..4");
}

}  // namespace braid::tcp_wire
