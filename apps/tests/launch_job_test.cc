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
#include "launch/launch_config.h"
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

TEST(RankEnvironment, RestartCountInBothSpellings) {
  LaunchOptions o = valid_options();
  o.max_restarts = 3;
  o.rdzv_id = "job7";
  JobSetup job{"0123456789abcdef", "127.0.0.1", 1234, true};
  job.restart_count = 2;
  auto env = as_map(rank_environment(o, job, 1));
  EXPECT_EQ(env["BRAID_RESTART_COUNT"], "2");
  EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "2");
  EXPECT_EQ(env["TORCHELASTIC_MAX_RESTARTS"], "3");
  EXPECT_EQ(env["TORCHELASTIC_RUN_ID"], "job7");
  EXPECT_EQ(as_map(rank_environment(valid_options(), JobSetup{}, 0))["BRAID_RESTART_COUNT"], "0");
}

TEST(LaunchOptions, RestartsAreCountedAndForOneNode) {
  LaunchOptions o = valid_options();
  o.max_restarts = -1;
  EXPECT_THAT(validate_error(o), HasSubstr("--max-restarts -1"));
  o = valid_options();
  o.max_restarts = 2;
  o.nnodes = 2;
  o.master_addr = "node0";
  o.master_port = 29500;
  EXPECT_THAT(validate_error(o), HasSubstr("--max-restarts 2 with --nnodes 2"));
}

// ---- resolve_launch: flags over the file ---------------------------------------------------

LaunchFlags flags_with_file(const std::string& name = "cfg.yaml") {
  LaunchFlags f;
  f.base.config_file = name;
  f.base.command = {"prog"};
  return f;
}

std::string resolve_error(const LaunchFlags& flags, const std::optional<FileSettings>& file,
                          const MachineCounts& counts = {}) {
  try {
    resolve_launch(flags, file, counts);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    return e.message();
  }
  ADD_FAILURE() << "resolve_launch accepted the flags";
  return {};
}

TEST(ResolveLaunch, DefaultsWithoutFlagsOrFile) {
  LaunchFlags f;
  f.base.command = {"prog"};
  ResolvedLaunch r = resolve_launch(f, std::nullopt, {});
  EXPECT_EQ(r.options.nproc_per_node, 1);
  EXPECT_EQ(r.options.nnodes, 1);
  EXPECT_EQ(r.options.node_rank, 0);
  EXPECT_EQ(r.options.master_addr, "");
  EXPECT_EQ(r.options.master_port, 0);
  EXPECT_TRUE(r.warnings.empty());
}

TEST(ResolveLaunch, FileKeysMapToTheJobShape) {
  FileSettings file;
  file.num_processes = 8;
  file.num_machines = 2;
  file.machine_rank = 1;
  file.main_process_ip = "10.0.0.1";
  file.main_process_port = 29501;
  ResolvedLaunch r = resolve_launch(flags_with_file(), file, {});
  EXPECT_EQ(r.options.nproc_per_node, 4);  // num_processes is the total, as accelerate's
  EXPECT_EQ(r.options.nnodes, 2);
  EXPECT_EQ(r.options.node_rank, 1);
  EXPECT_EQ(r.options.master_addr, "10.0.0.1");
  EXPECT_EQ(r.options.master_port, 29501);
  EXPECT_EQ(r.options.config_file, "cfg.yaml");
  EXPECT_TRUE(r.warnings.empty());
}

TEST(ResolveLaunch, FlagsWinWithOneWarningPerDisagreement) {
  FileSettings file;
  file.num_processes = 2;
  file.num_machines = 1;
  file.main_process_port = 29501;
  LaunchFlags f = flags_with_file();
  f.nproc_per_node = "4";
  f.nnodes = 1;  // agrees: no warning
  f.master_port = 29502;
  ResolvedLaunch r = resolve_launch(f, file, {});
  EXPECT_EQ(r.options.nproc_per_node, 4);
  EXPECT_EQ(r.options.master_port, 29502);
  EXPECT_THAT(r.warnings,
              ElementsAre("--master-port 29502 overrides main_process_port: 29501 from "
                          "cfg.yaml",
                          "--nproc-per-node 4 overrides num_processes: 2 from cfg.yaml"));
}

TEST(ResolveLaunch, NodesFromTheFlagDivideTheFilesTotal) {
  FileSettings file;
  file.num_processes = 6;
  LaunchFlags f = flags_with_file();
  f.nnodes = 2;
  f.node_rank = 0;
  f.master_addr = "10.0.0.1";
  f.master_port = 29500;
  EXPECT_EQ(resolve_launch(f, file, {}).options.nproc_per_node, 3);
  f.nnodes = 4;
  EXPECT_THAT(resolve_error(f, file), HasSubstr("num_processes: 6 in cfg.yaml does not divide "
                                                "over 4 node(s)"));
  f.nproc_per_node = "2";  // the flag wins: the file's total no longer matters, but is named
  ResolvedLaunch r = resolve_launch(f, file, {});
  EXPECT_EQ(r.options.nproc_per_node, 2);
  EXPECT_THAT(r.warnings, ElementsAre(HasSubstr("--nproc-per-node 2 overrides num_processes: 6")));
}

TEST(ResolveLaunch, NprocPerNodeWords) {
  LaunchFlags f;
  f.base.command = {"prog"};
  f.nproc_per_node = "auto";
  EXPECT_EQ(resolve_launch(f, std::nullopt, {.gpus = 0, .cpus = 6}).options.nproc_per_node, 6);
  EXPECT_EQ(resolve_launch(f, std::nullopt, {.gpus = 2, .cpus = 6}).options.nproc_per_node, 2);
  f.nproc_per_node = "cpu";
  EXPECT_EQ(resolve_launch(f, std::nullopt, {.gpus = 2, .cpus = 6}).options.nproc_per_node, 6);
  f.nproc_per_node = "gpu";
  EXPECT_THAT(resolve_error(f, std::nullopt, {.gpus = 0, .cpus = 6}), HasSubstr("no CUDA or HIP"));
  f.nproc_per_node = "4x";
  EXPECT_THAT(resolve_error(f, std::nullopt), HasSubstr("--nproc-per-node '4x'"));
  // auto shows its count in the warning.
  FileSettings file;
  file.num_processes = 2;
  LaunchFlags g = flags_with_file();
  g.nproc_per_node = "auto";
  EXPECT_THAT(resolve_launch(g, file, {.gpus = 0, .cpus = 3}).warnings,
              ElementsAre("--nproc-per-node auto (3) overrides num_processes: 2 from cfg.yaml"));
}

TEST(ResolveLaunch, StandaloneIsOneLoopbackNodeAtAFreePort) {
  FileSettings file;
  file.num_machines = 2;
  file.main_process_ip = "10.0.0.1";
  LaunchFlags f = flags_with_file();
  f.standalone = true;
  ResolvedLaunch r = resolve_launch(f, file, {});
  EXPECT_EQ(r.options.nnodes, 1);
  EXPECT_EQ(r.options.master_addr, "127.0.0.1");
  EXPECT_EQ(r.options.master_port, 0);
  EXPECT_THAT(r.warnings,
              ElementsAre("--standalone overrides num_machines: 2 from cfg.yaml",
                          "--standalone overrides main_process_ip: 10.0.0.1 from cfg.yaml"));
  f.nnodes = 2;
  EXPECT_THAT(resolve_error(f, std::nullopt), HasSubstr("--standalone with --nnodes 2"));
  f.nnodes = 1;
  EXPECT_NO_THROW(resolve_launch(f, std::nullopt, {}));
  f.master_addr = "10.0.0.1";
  EXPECT_THAT(resolve_error(f, std::nullopt),
              HasSubstr("--standalone with --master-addr 10.0.0.1"));
  f.master_addr.reset();
  f.master_port = 29500;
  EXPECT_THAT(resolve_error(f, std::nullopt), HasSubstr("--standalone with --master-port 29500"));
}

TEST(ResolveLaunch, RdzvEndpointIsTheMasterAddressAndPort) {
  LaunchFlags f;
  f.base.command = {"prog"};
  f.rdzv_endpoint = "node0:29511";
  f.rdzv_backend = "c10d";
  ResolvedLaunch r = resolve_launch(f, std::nullopt, {});
  EXPECT_EQ(r.options.master_addr, "node0");
  EXPECT_EQ(r.options.master_port, 29511);
  f.master_addr = "node0";  // agreeing is fine
  EXPECT_NO_THROW(resolve_launch(f, std::nullopt, {}));
  f.master_addr = "node1";
  EXPECT_THAT(resolve_error(f, std::nullopt), HasSubstr("disagrees with --master-addr node1"));
  f.master_addr.reset();
  f.rdzv_backend = "etcd-v2";
  EXPECT_THAT(resolve_error(f, std::nullopt), HasSubstr("--rdzv-backend 'etcd-v2'"));
}

TEST(ParseRdzvEndpoint, Forms) {
  EXPECT_EQ(parse_rdzv_endpoint("node0:29511"), std::make_pair(std::string("node0"), 29511));
  EXPECT_EQ(parse_rdzv_endpoint("node0"), std::make_pair(std::string("node0"), 29400));
  EXPECT_EQ(parse_rdzv_endpoint("[::1]:29511"), std::make_pair(std::string("::1"), 29511));
  EXPECT_EQ(parse_rdzv_endpoint("[::1]"), std::make_pair(std::string("::1"), 29400));
  for (const char* bad : {"node0:", "node0:http", "node0:70000", ":29500", "[::1", "[::1]x"}) {
    EXPECT_THROW(parse_rdzv_endpoint(bad), Error) << bad;
  }
}

TEST(FileSettings, AbsentKeysStayAbsent) {
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("braid_launch_cfg_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "a.yaml") << "mixed_precision: fp16\nmy_own_key: 3\n";
  FileSettings a = read_file_settings(dir / "a.yaml");
  EXPECT_FALSE(a.num_processes);
  EXPECT_FALSE(a.num_machines);
  EXPECT_FALSE(a.machine_rank);
  EXPECT_FALSE(a.main_process_ip);
  EXPECT_FALSE(a.main_process_port);
  std::ofstream(dir / "b.yaml") << "num_processes: -1\nnum_machines: 1\nmachine_rank: 0\n"
                                   "main_process_port: 0\n";
  FileSettings b = read_file_settings(dir / "b.yaml");
  EXPECT_FALSE(b.num_processes);  // -1: whatever the launcher starts
  EXPECT_EQ(b.num_machines, 1);
  EXPECT_EQ(b.machine_rank, 0);
  EXPECT_EQ(b.main_process_port, 0);
  try {
    read_file_settings(dir / "missing.yaml");
    ADD_FAILURE() << "a missing file was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_THAT(e.message(), HasSubstr((dir / "missing.yaml").string()));
  }
  std::filesystem::remove_all(dir);
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
