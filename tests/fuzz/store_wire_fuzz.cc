// libFuzzer target: the TcpStore wire format (comm/src/tcp_store_wire.cc), both ways. The input
// is a byte stream as a connection delivers it. As the server reads it: frames split off by
// next_frame, each body decoded by decode_request; a decoded request must encode back to the
// very bytes it came from. As the client reads it: each frame body taken as the reply to every
// operation, through check_reply and the payload that operation reads. Bad bytes are
// kCorruptData (server); the client also raises the errors a reply carries (kTimeout,
// kInvalidArgument, kOutOfRange).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuzz_util.h"
#include "store_detail.h"
#include "tcp_store_wire.h"

namespace braid {
namespace {

using tcp_wire::Command;

std::vector<uint8_t> encode(const tcp_wire::Request& req) {
  tcp_wire::Writer w(static_cast<uint8_t>(req.command));
  const auto keys = [&] {
    w.u32(static_cast<uint32_t>(req.keys.size()));
    for (const auto& k : req.keys) w.bytes(k);
  };
  switch (req.command) {
    case Command::kHello:
      w.u32(req.version).bytes(req.token);
      break;
    case Command::kSet:
      w.bytes(req.keys.at(0)).bytes(req.value);
      break;
    case Command::kGet:
      w.u64(req.timeout_ms).bytes(req.keys.at(0));
      break;
    case Command::kAdd:
      w.bytes(req.keys.at(0)).i64(req.delta);
      break;
    case Command::kCompareSet:
      w.bytes(req.keys.at(0)).bytes(req.value).bytes(req.desired);
      break;
    case Command::kCheck:
      keys();
      break;
    case Command::kWait:
      w.u64(req.timeout_ms);
      keys();
      break;
    case Command::kDelete:
      w.bytes(req.keys.at(0));
      break;
    case Command::kNumKeys:
      break;
  }
  return w.finish();
}

// Frames whose value is also read as add()'s counter text, and frames the client reads (below):
// each such read mostly throws, and a throw costs microseconds under ASan. Frames are
// independent, so any frame can come first and the caps lose no input.
constexpr int kThrowingFrames = 4;

void as_server(std::span<const uint8_t> stream) {
  int counters = 0;
  size_t at = 0;
  for (;;) {
    std::optional<std::span<const uint8_t>> body;
    if (!fuzz::parses({ErrorKind::kCorruptData},
                      [&] { body = tcp_wire::next_frame(stream.subspan(at)); })) {
      return;  // the server answers BAD_REQUEST and closes: nothing after it is read
    }
    if (!body) return;  // a partial frame: the server waits for more
    const std::span<const uint8_t> frame = stream.subspan(at, 4 + body->size());
    at += frame.size();
    tcp_wire::Request req;
    if (!fuzz::parses({ErrorKind::kCorruptData}, [&] { req = tcp_wire::decode_request(*body); })) {
      return;
    }
    for (const auto& key : req.keys) {
      fuzz::check(!key.empty() && key.size() <= Store::kMaxKeyBytes, "keys are 1..4096 bytes");
    }
    fuzz::check(std::ranges::equal(encode(req), frame), "a request encodes back to its bytes");
    if (req.command == Command::kSet && counters++ < kThrowingFrames) {  // add()'s counter text
      fuzz::parses({ErrorKind::kInvalidArgument},
                   [&] { (void)store_detail::parse_counter(req.keys[0], req.value); });
    }
  }
}

void as_client(std::span<const uint8_t> body) {
  using namespace std::chrono_literals;
  const std::initializer_list<ErrorKind> replies = {ErrorKind::kCorruptData, ErrorKind::kTimeout,
                                                    ErrorKind::kInvalidArgument,
                                                    ErrorKind::kOutOfRange};
  const std::vector<std::string> keys = {"a", "b"};
  // What each operation reads after an OK status (tcp_store_client.cc).
  fuzz::parses(replies,
               [&] { tcp_wire::check_reply(body, "h:1", "set", nullptr, 0ms).expect_end(); });
  fuzz::parses(replies, [&] {
    tcp_wire::check_reply(body, "h:1", "get", &keys, 5ms).bytes(Store::kMaxValueBytes, "value");
  });
  fuzz::parses(replies,
               [&] { (void)tcp_wire::check_reply(body, "h:1", "add", nullptr, 0ms).i64(); });
  fuzz::parses(replies,
               [&] { (void)tcp_wire::check_reply(body, "h:1", "check", nullptr, 0ms).u8(); });
  fuzz::parses(replies, [&] { tcp_wire::check_reply(body, "h:1", "wait", &keys, 5ms); });
}

}  // namespace
}  // namespace braid

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> stream(data, size);
  braid::as_server(stream);
  // The client reads one frame per reply; take the stream's first kThrowingFrames. Each is read
  // as five replies, most of which throw: with every frame read, a 4 KiB input of 5-byte frames
  // made some 4,000 throws and store_wire ran at 900 exec/s; with 16, 1,400.
  size_t at = 0;
  for (int frames = 0; frames < braid::kThrowingFrames && size - at >= 4; ++frames) {
    const uint32_t len = braid::tcp_wire::frame_length(data + at);
    if (len == 0 || len > size - at - 4) break;
    braid::as_client(stream.subspan(at + 4, len));
    at += 4 + size_t{len};
  }
  return 0;
}
