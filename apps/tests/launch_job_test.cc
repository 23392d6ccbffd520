// The launcher's pieces without starting a job: option checks, the variables each rank
// gets, environment merging, program lookup, shared-memory cleanup, line splitting and the
// wording and codes of rank exits.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "braid/core/environment.h"
#include "braid/core/error.h"
#include "launch/job.h"
#include "launch/line_relay.h"
#include "launch/supervisor.h"

namespace braid::launch {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

LaunchOptions valid_options() {
  LaunchOptions o;
  o.nproc_per_node = 2;
  o.command = {"prog"};
  return o;
}

std::string validate_error(const LaunchOptions& o) {
  try {
    validate(o);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    return e.message();
  }
  ADD_FAILURE() << "validate accepted the options";
  return {};
}

TEST(LaunchOptions, ValidOptionsPass) {
  EXPECT_NO_THROW(validate(valid_options()));
}

TEST(LaunchOptions, BadValuesNameTheOption) {
  LaunchOptions o = valid_options();
  o.nproc_per_node = 0;
  EXPECT_THAT(validate_error(o), HasSubstr("--nproc-per-node 0"));
  o = valid_options();
  o.nnodes = 2;
  o.node_rank = 2;
  o.master_addr = "node0";
  o.master_port = 29500;
  EXPECT_THAT(validate_error(o), HasSubstr("--node-rank 2"));
  o = valid_options();
  o.master_port = 70000;
  EXPECT_THAT(validate_error(o), HasSubstr("--master-port 70000"));
  o = valid_options();
  o.nnodes = 2;
  EXPECT_THAT(validate_error(o), HasSubstr("--master-addr"));
  o = valid_options();
  o.timeout_s = 0.0;
  EXPECT_THAT(validate_error(o), HasSubstr("--timeout"));
  o = valid_options();
  o.grace_period_s = -1;
  EXPECT_THAT(validate_error(o), HasSubstr("--grace-period -1"));
  o = valid_options();
  o.command.clear();
  EXPECT_THAT(validate_error(o), HasSubstr("no program"));
}

std::map<std::string, std::string> as_map(
    const std::vector<std::pair<std::string, std::string>>& v) {
  return {v.begin(), v.end()};
}

TEST(RankEnvironment, SecondNodeRanksAndSizes) {
  LaunchOptions o = valid_options();
  o.nproc_per_node = 3;
  o.nnodes = 2;
  o.node_rank = 1;
  o.timeout_s = 2.5;
  o.config_file = "/etc/job.yaml";
  JobSetup job{"0123456789abcdef", "10.0.0.1", 29511, false};
  auto env = as_map(rank_environment(o, job, 2));
  EXPECT_EQ(env["RANK"], "5");
  EXPECT_EQ(env["LOCAL_RANK"], "2");
  EXPECT_EQ(env["WORLD_SIZE"], "6");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "3");
  EXPECT_EQ(env["GROUP_RANK"], "1");
  EXPECT_EQ(env["MASTER_ADDR"], "10.0.0.1");
  EXPECT_EQ(env["MASTER_PORT"], "29511");
  EXPECT_EQ(env["BRAID_STORE_TOKEN"], "0123456789abcdef");
  EXPECT_EQ(env["BRAID_TIMEOUT"], "2.5");
  EXPECT_EQ(env["BRAID_CONFIG_FILE"], "/etc/job.yaml");
  EXPECT_EQ(env.count("BRAID_STORE_SERVED_BY_LAUNCHER"), 0u);  // node 1 does not serve it
}

TEST(RankEnvironment, OptionalVariablesOnlyWhenGiven) {
  JobSetup job{"0123456789abcdef", "127.0.0.1", 1234, true};
  auto env = as_map(rank_environment(valid_options(), job, 0));
  EXPECT_EQ(env["BRAID_STORE_SERVED_BY_LAUNCHER"], "1");
  EXPECT_EQ(env.count("BRAID_TIMEOUT"), 0u);
  EXPECT_EQ(env.count("BRAID_CONFIG_FILE"), 0u);
}

TEST(MergeEnvironment, OverridesReplaceAndAdd) {
  std::vector<std::string> merged =
      merge_environment({"PATH=/bin", "RANK=9", "RANKING=x"}, {{"RANK", "0"}, {"WORLD_SIZE", "2"}});
  EXPECT_THAT(merged, ElementsAre("PATH=/bin", "RANKING=x", "RANK=0", "WORLD_SIZE=2"));
}

TEST(JobToken, MultiNodeNeedsAUsableSharedToken) {
  LaunchOptions o = valid_options();
  o.nnodes = 2;
  {
    ClearEnvironment clear;
    try {
      job_token_for(o);
      ADD_FAILURE() << "no token accepted";
    } catch (const Error& e) {
      EXPECT_THAT(e.message(), HasSubstr("BRAID_STORE_TOKEN"));
    }
  }
  {
    PatchEnvironment env{{"BRAID_STORE_TOKEN", "short"}};
    EXPECT_THROW(job_token_for(o), Error);
  }
  {
    PatchEnvironment env{{"BRAID_STORE_TOKEN", "abc/def/ghi/jkl"}};
    EXPECT_THROW(job_token_for(o), Error);
  }
  {
    PatchEnvironment env{{"BRAID_STORE_TOKEN", "shared-token-0123"}};
    EXPECT_EQ(job_token_for(o), "shared-token-0123");
  }
}

TEST(JobToken, SingleNodeTokensAreFreshHex) {
  std::string a = job_token_for(valid_options()), b = job_token_for(valid_options());
  EXPECT_EQ(a.size(), 32u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(a, b);
}

TEST(ResolveProgram, FindsInPathAndNamesMissingPrograms) {
  PatchEnvironment env{{"PATH", "/nonexistent:/bin:/usr/bin"}};
  std::string sh = resolve_program("sh");
  EXPECT_TRUE(sh == "/bin/sh" || sh == "/usr/bin/sh") << sh;
  try {
    resolve_program("braid-no-such-program");
    ADD_FAILURE() << "a missing program was resolved";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_THAT(e.message(), HasSubstr("braid-no-such-program"));
  }
  EXPECT_THROW(resolve_program("/nonexistent/prog"), Error);
}

TEST(JobShm, RemovesOnlyThisJobsSegments) {
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("braid_launch_shm_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string token = "abcdef0123456789ffff";
  for (std::string name :
       {"braid-abcdef012345-pg0-buf", "braid-abcdef012345-x", "braid-abcdef012346-other-job",
        "braid-abcdef01234-short", "unrelated"}) {
    std::ofstream(dir / name) << "x";
  }
  EXPECT_THAT(remove_job_shm(token, dir),
              ElementsAre("braid-abcdef012345-pg0-buf", "braid-abcdef012345-x"));
  EXPECT_FALSE(std::filesystem::exists(dir / "braid-abcdef012345-x"));
  EXPECT_TRUE(std::filesystem::exists(dir / "braid-abcdef012346-other-job"));
  EXPECT_TRUE(std::filesystem::exists(dir / "braid-abcdef01234-short"));
  EXPECT_TRUE(std::filesystem::exists(dir / "unrelated"));
  std::filesystem::remove_all(dir);
  EXPECT_TRUE(remove_job_shm(token, dir).empty());  // a missing folder holds nothing of ours
  EXPECT_THROW(remove_job_shm("abc", dir), Error);  // too short to name a job
}

std::vector<std::string> relay(std::initializer_list<std::string_view> chunks, bool finish) {
  std::vector<std::string> lines;
  LineRelay r([&](std::string_view line) { lines.emplace_back(line); });
  for (std::string_view c : chunks) r.feed(c);
  if (finish) {
    r.finish();
    r.finish();
  }
  return lines;
}

TEST(LineRelay, WholeLinesAcrossChunks) {
  EXPECT_THAT(relay({"ab", "c\nde", "f\n\ng"}, false), ElementsAre("abc", "def", ""));
  EXPECT_THAT(relay({"ab", "c\nde", "f\n\ng"}, true), ElementsAre("abc", "def", "", "g"));
  EXPECT_TRUE(relay({"", ""}, true).empty());
}

TEST(LineRelay, OverlongLinesAreCut) {
  std::string big(LineRelay::kMaxLine + 10, 'x');
  std::vector<std::string> lines = relay({big.substr(0, 100), big.substr(100) + "\n"}, true);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].size(), LineRelay::kMaxLine);
  EXPECT_EQ(lines[1], std::string(10, 'x'));
}

// The wait status of a real child that runs `body`.
template <typename Body>
int status_of(Body body) {
  pid_t pid = ::fork();
  if (pid == 0) {
    body();
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

TEST(ExitDescription, CodesAndSignals) {
  int exited = status_of([] { ::_exit(3); });
  EXPECT_EQ(describe_exit(2, exited), "rank 2 exited with code 3");
  EXPECT_EQ(exit_code_of(exited), 3);
  int killed = status_of([] { ::kill(::getpid(), SIGKILL); });
  EXPECT_EQ(describe_exit(1, killed), "rank 1 was killed by signal 9 (Killed)");
  EXPECT_EQ(exit_code_of(killed), 137);
  EXPECT_EQ(exit_code_of(status_of([] {})), 0);
}

}  // namespace
}  // namespace braid::launch
