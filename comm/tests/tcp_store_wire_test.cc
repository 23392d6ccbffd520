// The TcpStore wire decoder on its own (comm/src/tcp_store_wire.cc; docs/store.md, "Frame
// format"): frame splitting, request decoding and the client's reading of replies, without a
// socket. The replies here are inputs tests/fuzz/store_wire_fuzz found crashing or misreported
// (docs/fuzzing.md, "Bugs found"); tcp_store_test.cc covers the same rules end to end.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "../src/tcp_store_wire.h"
#include "braid/core/error.h"

namespace braid {
namespace {

using namespace std::chrono_literals;
using tcp_wire::Command;
using tcp_wire::Status;

// The kind and message of what fn throws (kind kInternal when it returns).
template <typename Fn>
std::pair<ErrorKind, std::string> error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return {e.kind(), e.message()};
  }
  return {ErrorKind::kInternal, "returned"};
}

TEST(TcpStoreWire, NextFrameWaitsForWholeFramesAndRefusesBadLengths) {
  const std::vector<uint8_t> set =
      tcp_wire::Writer(uint8_t(Command::kSet)).bytes("k").bytes("v").finish();
  EXPECT_FALSE(tcp_wire::next_frame(std::span(set).first(3)));
  EXPECT_FALSE(tcp_wire::next_frame(std::span(set).first(set.size() - 1)));
  auto body = tcp_wire::next_frame(set);
  ASSERT_TRUE(body);
  EXPECT_EQ(body->size(), set.size() - 4);
  const std::vector<uint8_t> empty = {0, 0, 0, 0};
  const auto [kind, message] = error_of([&] { tcp_wire::next_frame(empty); });
  EXPECT_EQ(kind, ErrorKind::kCorruptData);
  EXPECT_NE(message.find("frame length 0"), std::string::npos) << message;
}

TEST(TcpStoreWire, DecodeRequestReadsEveryFieldAndRefusesTrailingBytes) {
  auto frame =
      tcp_wire::Writer(uint8_t(Command::kCompareSet)).bytes("k").bytes("a").bytes("bc").finish();
  const tcp_wire::Request req = tcp_wire::decode_request(std::span(frame).subspan(4));
  EXPECT_EQ(req.command, Command::kCompareSet);
  ASSERT_EQ(req.keys, std::vector<std::string>{"k"});
  EXPECT_EQ(std::string(req.value.begin(), req.value.end()), "a");
  EXPECT_EQ(std::string(req.desired.begin(), req.desired.end()), "bc");
  frame.push_back(0);
  EXPECT_EQ(error_of([&] { tcp_wire::decode_request(std::span(frame).subspan(4)); }).first,
            ErrorKind::kCorruptData);
}

// Found by fuzzing: a FAILED reply cut short after its status byte. Built with clang 15, the
// previous form of this code (the message read inside the BRAID_FAIL of an unbraced case) ran
// the destructor of another case's temporary, never constructed, while unwinding.
TEST(TcpStoreWire, FailedReplyCutShortIsCorruptData) {
  const std::vector<uint8_t> body = {uint8_t(Status::kFailed)};
  const auto [kind, message] =
      error_of([&] { tcp_wire::check_reply(body, "h:1", "add", nullptr, 0ms); });
  EXPECT_EQ(kind, ErrorKind::kCorruptData);
  EXPECT_NE(message.find("truncated"), std::string::npos) << message;
  for (Status s : {Status::kBadToken, Status::kBadRequest}) {
    const std::vector<uint8_t> cut = {uint8_t(s), 9, 0};
    EXPECT_EQ(error_of([&] { tcp_wire::check_reply(cut, "h:1", "set", nullptr, 0ms); }).first,
              ErrorKind::kCorruptData);
  }
}

// Found by fuzzing: a FAILED reply with an empty message gave an Error with no text at all.
TEST(TcpStoreWire, FailedReplyNamesTheStoreAndOperation) {
  const auto body = tcp_wire::Writer(uint8_t(Status::kFailed))
                        .u8(uint8_t(ErrorKind::kOutOfRange))
                        .bytes("")
                        .finish();
  const auto [kind, message] = error_of(
      [&] { tcp_wire::check_reply(std::span(body).subspan(4), "h:1", "add", nullptr, 0ms); });
  EXPECT_EQ(kind, ErrorKind::kOutOfRange);
  EXPECT_NE(message.find("add"), std::string::npos) << message;
  EXPECT_NE(message.find("h:1"), std::string::npos) << message;
  // A kind a request cannot fail with is not trusted.
  const auto odd = tcp_wire::Writer(uint8_t(Status::kFailed))
                       .u8(uint8_t(ErrorKind::kTimeout))
                       .bytes("x")
                       .finish();
  EXPECT_EQ(error_of([&] {
              tcp_wire::check_reply(std::span(odd).subspan(4), "h:1", "add", nullptr, 0ms);
            }).first,
            ErrorKind::kCorruptData);
}

}  // namespace
}  // namespace braid
