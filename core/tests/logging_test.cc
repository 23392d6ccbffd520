// Logging: level parsing, BRAID_LOG_LEVEL / RANK, filtering without evaluating arguments,
// the line format, and whole lines from several threads.
#include "braid/core/logging.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "braid/core/environment.h"
#include "braid/core/error.h"

namespace braid {
namespace {

using ::testing::HasSubstr;

// Captures lines and restores the global logging state afterwards.
class LoggingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_level_ = log_level();
    saved_rank_ = log_rank();
    previous_sink_ = set_log_sink([this](std::string_view line) {
      std::lock_guard<std::mutex> lock(mu_);
      lines_.emplace_back(line);
    });
  }
  void TearDown() override {
    set_log_sink(std::move(previous_sink_));
    set_log_level(saved_level_);
    set_log_rank(saved_rank_);
  }
  std::vector<std::string> lines() {
    std::lock_guard<std::mutex> lock(mu_);
    return lines_;
  }

 private:
  LogLevel saved_level_ = LogLevel::kWarning;
  int saved_rank_ = -1;
  LogSink previous_sink_;
  std::mutex mu_;
  std::vector<std::string> lines_;
};

TEST(LogLevelNames, ParseIsCaseInsensitiveAndRoundTrips) {
  for (int i = 0; i <= static_cast<int>(LogLevel::kOff); ++i) {
    const auto level = static_cast<LogLevel>(i);
    EXPECT_EQ(parse_log_level(log_level_name(level)), level);
  }
  EXPECT_EQ(parse_log_level("DEBUG"), LogLevel::kDebug);
  EXPECT_EQ(parse_log_level("Warning"), LogLevel::kWarning);
  EXPECT_EQ(log_level_name(LogLevel::kTrace), "trace");
  EXPECT_EQ(log_level_name(LogLevel::kOff), "off");
}

TEST(LogLevelNames, BadNameNamesTheSourceAndTheChoices) {
  try {
    parse_log_level("verbose", "BRAID_LOG_LEVEL");
    FAIL() << "'verbose' was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_THAT(e.message(), HasSubstr("BRAID_LOG_LEVEL='verbose'"));
    EXPECT_THAT(e.message(), HasSubstr("trace, debug, info, warning, error or off"));
  }
}

TEST_F(LoggingTest, EnvironmentSetsLevelAndRank) {
  {
    PatchEnvironment env{{"BRAID_LOG_LEVEL", "Info"}, {"RANK", 5}};
    configure_logging_from_env();
    EXPECT_EQ(log_level(), LogLevel::kInfo);
    EXPECT_EQ(log_rank(), 5);
  }
  {
    ClearEnvironment clear;
    configure_logging_from_env();
    EXPECT_EQ(log_level(), LogLevel::kWarning);  // the default
  }
}

TEST_F(LoggingTest, BadEnvironmentValueThrowsAndKeepsTheLevel) {
  set_log_level(LogLevel::kError);
  {
    PatchEnvironment env{{"BRAID_LOG_LEVEL", "loud"}};
    try {
      configure_logging_from_env();
      FAIL() << "BRAID_LOG_LEVEL=loud was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      EXPECT_THAT(e.message(), HasSubstr("BRAID_LOG_LEVEL"));
      EXPECT_THAT(e.message(), HasSubstr("loud"));
    }
  }
  {
    PatchEnvironment env{{"RANK", "zero"}};
    EXPECT_THROW(configure_logging_from_env(), Error);
  }
  EXPECT_EQ(log_level(), LogLevel::kError);
}

TEST_F(LoggingTest, FiltersBelowTheLevelWithoutEvaluatingArguments) {
  set_log_level(LogLevel::kWarning);
  int evaluated = 0;
  auto count = [&] { return ++evaluated; };
  BRAID_LOG(kInfo) << "hidden " << count();
  BRAID_LOG(kDebug) << count();
  EXPECT_EQ(evaluated, 0);
  BRAID_LOG(kWarning) << "shown " << count();
  BRAID_LOG(kError) << "shown " << count();
  EXPECT_EQ(evaluated, 2);
  ASSERT_EQ(lines().size(), 2u);
  EXPECT_THAT(lines()[0], HasSubstr("shown 1"));
  EXPECT_THAT(lines()[1], HasSubstr("shown 2"));

  set_log_level(LogLevel::kOff);
  BRAID_LOG(kError) << count();
  EXPECT_EQ(evaluated, 2);
  EXPECT_FALSE(log_enabled(LogLevel::kError));

  set_log_level(LogLevel::kTrace);
  EXPECT_TRUE(log_enabled(LogLevel::kTrace));
  EXPECT_FALSE(log_enabled(LogLevel::kOff));
}

TEST_F(LoggingTest, WorksAsTheBodyOfAnIfElse) {
  set_log_level(LogLevel::kInfo);
  bool else_taken = false;
  if (lines().size() == 99)
    BRAID_LOG(kInfo) << "never";
  else
    else_taken = true;
  EXPECT_TRUE(else_taken);
  EXPECT_TRUE(lines().empty());
}

TEST_F(LoggingTest, LineFormatWithAndWithoutRank) {
  set_log_level(LogLevel::kTrace);
  set_log_rank(-1);
  const int line = __LINE__ + 1;
  BRAID_LOG(kWarning) << "x=" << 42;
  set_log_rank(3);
  BRAID_LOG(kInfo) << "hello";
  BRAID_LOG(kTrace) << "t";
  BRAID_LOG(kDebug) << "d";
  BRAID_LOG(kError) << "e";
  const auto got = lines();
  ASSERT_EQ(got.size(), 5u);
  const std::regex no_rank(R"(\[braid\] W \d\d:\d\d:\d\d\.\d\d\d logging_test\.cc:(\d+)\] x=42)");
  std::smatch m;
  ASSERT_TRUE(std::regex_match(got[0], m, no_rank)) << got[0];
  EXPECT_EQ(m[1].str(), std::to_string(line));
  const std::regex ranked(
      R"(\[braid rank 3\] I \d\d:\d\d:\d\d\.\d\d\d logging_test\.cc:\d+\] hello)");
  EXPECT_TRUE(std::regex_match(got[1], ranked)) << got[1];
  EXPECT_THAT(got[2], HasSubstr("] T "));
  EXPECT_THAT(got[3], HasSubstr("] D "));
  EXPECT_THAT(got[4], HasSubstr("] E "));
}

TEST_F(LoggingTest, BadRankIsRejected) {
  EXPECT_THROW(set_log_rank(-2), Error);
  set_log_rank(0);
  EXPECT_EQ(log_rank(), 0);
}

TEST_F(LoggingTest, ThreadsWriteWholeLines) {
  set_log_level(LogLevel::kInfo);
  constexpr int kThreads = 4, kPerThread = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < kPerThread; ++i) {
        BRAID_LOG(kInfo) << "thread " << t << " message " << i << " end";
      }
    });
  }
  for (auto& th : threads) th.join();
  const auto got = lines();
  ASSERT_EQ(got.size(), static_cast<size_t>(kThreads * kPerThread));
  std::vector<int> next(kThreads, 0);
  const std::regex shape(R"(.*\] thread (\d) message (\d+) end)");
  for (const auto& l : got) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(l, m, shape)) << l;
    const int t = std::stoi(m[1].str());
    EXPECT_EQ(std::stoi(m[2].str()), next[t]++);  // per-thread order is kept
  }
}

TEST_F(LoggingTest, ThrowingSinkDoesNotEscape) {
  set_log_level(LogLevel::kInfo);
  LogSink capture = set_log_sink([](std::string_view) { throw std::runtime_error("sink"); });
  EXPECT_NO_THROW(BRAID_LOG(kError) << "lost");
  set_log_sink(std::move(capture));
  BRAID_LOG(kError) << "kept";
  ASSERT_EQ(lines().size(), 1u);
  EXPECT_THAT(lines()[0], HasSubstr("kept"));
}

}  // namespace
}  // namespace braid
