// Environment helpers: the patch / clear / purge scopes, NUMA topology parsing and binding on
// this machine, and the availability checks.
#include <gtest/gtest.h>
#include <sched.h>
#include <stdlib.h>

#include <fstream>

#include "bigmodel_test_util.h"
#include "braid/accel/env_utils.h"
#include "braid/core/cpu_features.h"

namespace braid::accel {
namespace {

namespace fs = std::filesystem;
using testing::expect_error;
using testing::TempDir;

std::optional<std::string> env(const char* name) {
  const char* v = ::getenv(name);
  return v ? std::optional<std::string>(v) : std::nullopt;
}

TEST(Environment, PatchRestoresAndClearRestores) {
  ::setenv("BRAID_BIGMODEL_KEEP", "before", 1);
  ::unsetenv("BRAID_BIGMODEL_NEW");
  {
    PatchEnvironment patch{{"braid_bigmodel_keep", "inside"}, {"braid_bigmodel_new", 3}};
    EXPECT_EQ(env("BRAID_BIGMODEL_KEEP"), "inside");  // keys upper-cased
    EXPECT_EQ(env("BRAID_BIGMODEL_NEW"), "3");
  }
  EXPECT_EQ(env("BRAID_BIGMODEL_KEEP"), "before");
  EXPECT_EQ(env("BRAID_BIGMODEL_NEW"), std::nullopt);
  {
    ClearEnvironment clear;
    EXPECT_EQ(env("BRAID_BIGMODEL_KEEP"), std::nullopt);
    ::setenv("BRAID_BIGMODEL_NEW", "x", 1);
  }
  EXPECT_EQ(env("BRAID_BIGMODEL_KEEP"), "before");
  EXPECT_EQ(env("BRAID_BIGMODEL_NEW"), std::nullopt);
  ::unsetenv("BRAID_BIGMODEL_KEEP");
}

TEST(Environment, PurgeAccelerateEnvironment) {
  ::setenv("ACCELERATE_BIGMODEL_A", "1", 1);
  ::setenv("BRAID_BIGMODEL_GONE", "kept", 1);
  ::unsetenv("ACCELERATE_MIXED_PRECISION");
  ::unsetenv("BIGMODEL_OTHER");
  {
    PurgeAccelerateEnvironment purge;
    ::setenv("ACCELERATE_MIXED_PRECISION", "fp16", 1);  // what TrainingArguments(fp16=True) does
    ::setenv("ACCELERATE_BIGMODEL_A", "2", 1);
    ::unsetenv("BRAID_BIGMODEL_GONE");
    ::setenv("BIGMODEL_OTHER", "1", 1);
  }
  EXPECT_EQ(env("ACCELERATE_MIXED_PRECISION"), std::nullopt);
  EXPECT_EQ(env("ACCELERATE_BIGMODEL_A"), "1");
  EXPECT_EQ(env("BRAID_BIGMODEL_GONE"), "kept");
  EXPECT_EQ(env("BIGMODEL_OTHER"), "1");  // not a configuration prefix: left alone
  {
    PurgeAccelerateEnvironment only{{"BIGMODEL_"}};
    ::setenv("BIGMODEL_OTHER", "2", 1);
    ::setenv("ACCELERATE_BIGMODEL_A", "3", 1);
  }
  EXPECT_EQ(env("BIGMODEL_OTHER"), "1");
  EXPECT_EQ(env("ACCELERATE_BIGMODEL_A"), "3");
  for (const char* v : {"ACCELERATE_BIGMODEL_A", "BRAID_BIGMODEL_GONE", "BIGMODEL_OTHER"}) {
    ::unsetenv(v);
  }
  expect_error([] { PurgeAccelerateEnvironment bad({""}); }, ErrorKind::kInvalidArgument, "prefix");
}

void write(const fs::path& file, const std::string& text) {
  fs::create_directories(file.parent_path());
  std::ofstream(file) << text;
}

TEST(Numa, TopologyFromSysfs) {
  TempDir sys;
  write(sys.path() / "node0" / "cpulist", "0-3\n");
  write(sys.path() / "node1" / "cpulist", "4-5,8,10-11\n");
  write(sys.path() / "node2" / "cpulist", "\n");  // memory only (CXL, HBM): no CPUs
  write(sys.path() / "online", "0-2\n");
  fs::create_directories(sys.path() / "power");
  const std::vector<NumaNode> nodes = numa_nodes(sys.path());
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0].id, 0);
  EXPECT_EQ(nodes[0].cpus, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(nodes[1].id, 1);
  EXPECT_EQ(nodes[1].cpus, (std::vector<int>{4, 5, 8, 10, 11}));

  // Four local processes over two nodes: 0, 1 on node 0; 2, 3 on node 1.
  for (int i = 0; i < 4; ++i) EXPECT_EQ(numa_node_for(nodes, i, 4).id, i / 2);
  EXPECT_EQ(numa_node_for(nodes, 0, 1).id, 0);
  EXPECT_EQ(numa_node_for(nodes, 2, 3).id, 1);
  expect_error([&] { numa_node_for(nodes, 4, 4); }, ErrorKind::kInvalidArgument,
               "local process index 4 is not in [0, 4)");
  expect_error([&] { numa_node_for(nodes, -1, 4); }, ErrorKind::kInvalidArgument, "index -1");
  expect_error([&] { numa_node_for(nodes, 0, 0); }, ErrorKind::kInvalidArgument, "at least 1");

  write(sys.path() / "node3" / "cpulist", "1-x\n");
  expect_error([&] { numa_nodes(sys.path()); }, ErrorKind::kCorruptData, "node3");
  // No node folder at all: one node with the online CPUs.
  const auto flat = numa_nodes(sys.path() / "absent");
  ASSERT_EQ(flat.size(), 1u);
  EXPECT_FALSE(flat[0].cpus.empty());
}

std::vector<int> affinity_now() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(::sched_getaffinity(0, sizeof(set), &set), 0);
  std::vector<int> out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) out.push_back(c);
  }
  return out;
}

void set_affinity(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  ASSERT_EQ(::sched_setaffinity(0, sizeof(set), &set), 0);
}

TEST(Numa, BindsThisProcess) {
  const std::vector<int> before = affinity_now();
  const std::vector<NumaNode> nodes = numa_nodes();
  ASSERT_FALSE(nodes.empty());
  {
    ClearEnvironment no_launcher;  // a single process: the local world is the node count
    const std::vector<int> cpus = override_numa_affinity(0);
    EXPECT_EQ(cpus, affinity_now());
    ASSERT_FALSE(cpus.empty());
    for (int c : cpus) {
      EXPECT_TRUE(std::find(nodes[0].cpus.begin(), nodes[0].cpus.end(), c) != nodes[0].cpus.end());
    }
    if (nodes.size() == 1 && before == nodes[0].cpus) {
      EXPECT_EQ(cpus, nodes[0].cpus);  // one node: every CPU
    }
    const int past = static_cast<int>(nodes.size());
    expect_error([&] { override_numa_affinity(past); }, ErrorKind::kInvalidArgument,
                 "is not in [0, " + std::to_string(past) + ")");
    expect_error([] { override_numa_affinity(-1); }, ErrorKind::kInvalidArgument, "index -1");
    // A launcher's local world size spreads its processes over the nodes.
    {
      PatchEnvironment launcher{
          {"RANK", 1}, {"WORLD_SIZE", 2}, {"LOCAL_RANK", 1}, {"LOCAL_WORLD_SIZE", 2}};
      EXPECT_FALSE(override_numa_affinity(1).empty());
    }
    EXPECT_FALSE(override_numa_affinity(1, false, 2).empty());

    // set_numa_affinity binds once per index: the second call returns the first answer and
    // leaves the affinity alone.
    const std::vector<int> first = set_numa_affinity(0);
    set_affinity({first.front()});
    EXPECT_EQ(set_numa_affinity(0), first);
    EXPECT_EQ(affinity_now(), std::vector<int>{first.front()});
    EXPECT_EQ(override_numa_affinity(0, true), first);  // override recomputes and binds
  }
  set_affinity(before);
}

TEST(EnvironmentChecks, AvailabilityAndBf16) {
  // This build has no GPU runtime: bf16 runs on the CPU (natively or through f32).
  EXPECT_TRUE(is_bf16_available());
  EXPECT_EQ(bf16_support() == Bf16Support::kNative, cpu_features().avx512_bf16);
  EXPECT_FALSE(is_npu_available(true));
  EXPECT_FALSE(is_mps_available());
  EXPECT_FALSE(is_torch_xla_available(true, false));
  EXPECT_FALSE(is_xpu_available());
  const auto all = accelerator_availability();
  ASSERT_EQ(all.size(), 6u);
  std::vector<std::string> names;
  for (const auto& b : all) {
    names.push_back(b.name);
    EXPECT_EQ(b.available, b.reason.empty()) << b.name;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"cuda", "hip", "xpu", "npu", "mps", "xla"}));
  EXPECT_FALSE(all[3].available);
  EXPECT_NE(all[3].reason.find("NPU"), std::string::npos);
}

}  // namespace
}  // namespace braid::accel
