// braid::Error and the BRAID_CHECK / BRAID_FAIL / BRAID_ASSERT macros.
#include "braid/core/error.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>

namespace braid {
namespace {

using ::testing::HasSubstr;

TEST(ErrorKindNames, EachKindHasItsOwnName) {
  EXPECT_EQ(to_string(ErrorKind::kInvalidArgument), "invalid argument");
  EXPECT_EQ(to_string(ErrorKind::kOutOfRange), "out of range");
  EXPECT_EQ(to_string(ErrorKind::kNotSupported), "not supported");
  EXPECT_EQ(to_string(ErrorKind::kIo), "I/O error");
  EXPECT_EQ(to_string(ErrorKind::kCorruptData), "corrupt data");
  EXPECT_EQ(to_string(ErrorKind::kTimeout), "timeout");
  EXPECT_EQ(to_string(ErrorKind::kPeerLost), "peer lost");
  EXPECT_EQ(to_string(ErrorKind::kOutOfMemory), "out of memory");
  EXPECT_EQ(to_string(ErrorKind::kInternal), "internal error");
  std::set<std::string_view> names;
  for (int k = 0; k <= static_cast<int>(ErrorKind::kInternal); ++k) {
    names.insert(to_string(static_cast<ErrorKind>(k)));
  }
  EXPECT_EQ(names.size(), 9u);
}

TEST(Error, WhatCarriesKindMessageAndFileLine) {
  const int line = __LINE__ + 1;
  const Error e(ErrorKind::kIo, "open /x: No such file");
  EXPECT_EQ(e.kind(), ErrorKind::kIo);
  EXPECT_EQ(e.message(), "open /x: No such file");
  const std::string what = e.what();
  EXPECT_THAT(what, HasSubstr("I/O error"));
  EXPECT_THAT(what, HasSubstr("open /x: No such file"));
  EXPECT_THAT(what, HasSubstr("error_test.cc:" + std::to_string(line)));
  EXPECT_EQ(e.where().line(), static_cast<unsigned>(line));
  // The message accessor has no prefix; what() does.
  EXPECT_THAT(e.message(), ::testing::Not(HasSubstr("error_test.cc")));
}

TEST(Error, IsARuntimeError) {
  try {
    BRAID_FAIL(kTimeout, "wait");
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("timeout"));
    return;
  }
  FAIL() << "BRAID_FAIL did not throw";
}

TEST(BraidCheck, ThrowsTheGivenKindWithTheJoinedMessage) {
  const int n = -3;
  try {
    BRAID_CHECK(n >= 0, kOutOfRange, "count ", n, " is negative; expected >= 0");
    FAIL() << "BRAID_CHECK did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kOutOfRange);
    EXPECT_EQ(e.message(), "count -3 is negative; expected >= 0");
  }
}

TEST(BraidCheck, PassingConditionEvaluatesNoMessagePart) {
  int evaluated = 0;
  auto part = [&] {
    ++evaluated;
    return "x";
  };
  BRAID_CHECK(1 + 1 == 2, kInvalidArgument, part());
  EXPECT_EQ(evaluated, 0);
  EXPECT_THROW(BRAID_CHECK(1 + 1 == 3, kInvalidArgument, part()), Error);
  EXPECT_EQ(evaluated, 1);
}

TEST(BraidCheck, EveryKindRoundTrips) {
  auto kind_of = [](auto thrower) {
    try {
      thrower();
    } catch (const Error& e) {
      return e.kind();
    }
    return ErrorKind::kInternal;
  };
  EXPECT_EQ(kind_of([] { BRAID_CHECK(false, kInvalidArgument, "a"); }),
            ErrorKind::kInvalidArgument);
  EXPECT_EQ(kind_of([] { BRAID_CHECK(false, kNotSupported, "a"); }), ErrorKind::kNotSupported);
  EXPECT_EQ(kind_of([] { BRAID_CHECK(false, kCorruptData, "a"); }), ErrorKind::kCorruptData);
  EXPECT_EQ(kind_of([] { BRAID_CHECK(false, kPeerLost, "a"); }), ErrorKind::kPeerLost);
  EXPECT_EQ(kind_of([] { BRAID_CHECK(false, kOutOfMemory, "a"); }), ErrorKind::kOutOfMemory);
}

TEST(BraidAssert, GivesInternalWithTheConditionText) {
  const int size = 4;
  try {
    BRAID_ASSERT(size == 5, "size was ", size);
    FAIL() << "BRAID_ASSERT did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInternal);
    EXPECT_THAT(e.message(), HasSubstr("size == 5"));
    EXPECT_THAT(e.message(), HasSubstr("size was 4"));
  }
  EXPECT_NO_THROW(BRAID_ASSERT(size == 4));
  try {
    BRAID_ASSERT(size < 0);  // no message parts
    FAIL() << "BRAID_ASSERT did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInternal);
    EXPECT_THAT(e.message(), HasSubstr("size < 0"));
  }
}

TEST(BraidFail, ThrowsUnconditionallyWithLocation) {
  const int line = __LINE__ + 2;
  try {
    BRAID_FAIL(kCorruptData, "header of ", "model.safetensors", " is truncated");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCorruptData);
    EXPECT_EQ(e.message(), "header of model.safetensors is truncated");
    EXPECT_EQ(e.where().line(), static_cast<unsigned>(line));
    EXPECT_THAT(std::string(e.where().file_name()), HasSubstr("error_test.cc"));
    return;
  }
  FAIL() << "BRAID_FAIL did not throw";
}

}  // namespace
}  // namespace braid
