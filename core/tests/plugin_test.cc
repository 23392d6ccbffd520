// Tests of braid/core/plugin.h in a program that links braid statically (every test binary
// here): it is not libbraid.so, so no plugin path exists and nothing is ever loaded; the
// answer is the same on every call and from every thread. The libbraid.so side runs in
// bindings/c/tests (bindings.plugin_*: plugin_test.c) and bindings/python/tests.
#include "braid/core/plugin.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace braid {
namespace {

TEST(PluginTest, StaticProgramHasNoSharedLibraryDir) {
  EXPECT_EQ(shared_library_dir(), "");
  EXPECT_EQ(component_plugin_path("comm_mpi"), "");
  EXPECT_FALSE(component_plugin_present("comm_mpi"));
}

TEST(PluginTest, StaticProgramLoadsNothingAndSaysWhy) {
  const PluginLoad& load = load_component_plugin("comm_test_none", "braid_comm_register_none");
  EXPECT_EQ(load.entry, nullptr);
  EXPECT_EQ(load.path, "");
  EXPECT_NE(load.error.find("linked statically"), std::string::npos) << load.error;
  EXPECT_FALSE(component_plugin_loaded("comm_test_none"));
  EXPECT_FALSE(component_plugin_loaded("never_asked"));
}

TEST(PluginTest, OneResultPerComponentWhateverTheThreads) {
  std::vector<const PluginLoad*> seen(8, nullptr);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < seen.size(); ++i) {
    threads.emplace_back(
        [&seen, i] { seen[i] = &load_component_plugin("kernels_test_threads", "entry"); });
  }
  for (std::thread& t : threads) t.join();
  for (const PluginLoad* p : seen) EXPECT_EQ(p, seen[0]);
  // Another component gets its own result.
  EXPECT_NE(&load_component_plugin("core_test_other", "entry"), seen[0]);
}

}  // namespace
}  // namespace braid
