// CPU features: level names, the support lattice, ScopedCpuIsa forcing and nesting, and the
// BRAID_CPU_ISA cap (checked in a child process, since the cap is read once per process).
#include "braid/core/cpu_features.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "braid/core/environment.h"
#include "braid/core/error.h"
#include "child_process.h"

namespace braid {
namespace {

using ::testing::HasSubstr;

using testing::exit_child;
using testing::in_child;
using testing::kChildPassed;
using testing::run_child_test;

TEST(CpuIsa, Names) {
  EXPECT_EQ(cpu_isa_name(CpuIsa::kScalar), "scalar");
  EXPECT_EQ(cpu_isa_name(CpuIsa::kAvx2), "avx2");
  EXPECT_EQ(cpu_isa_name(CpuIsa::kAvx512), "avx512");
  EXPECT_EQ(cpu_isa_name(CpuIsa::kAvx512Bf16), "avx512bf16");
  EXPECT_EQ(cpu_isa_name(CpuIsa::kAmx), "amx");
}

TEST(CpuFeatures, LevelsFormALattice) {
  const CpuFeatures& f = cpu_features();
  EXPECT_TRUE(cpu_supports(CpuIsa::kScalar));
  // Each wider level implies the narrower ones (detection requires them).
  EXPECT_TRUE(!f.avx512 || f.avx2);
  EXPECT_TRUE(!f.avx512_bf16 || f.avx512);
  EXPECT_TRUE(!f.avx512_fp16 || f.avx512);
  EXPECT_EQ(cpu_supports(CpuIsa::kAvx2), f.avx2);
  EXPECT_EQ(cpu_supports(CpuIsa::kAvx512), f.avx512);
  EXPECT_EQ(cpu_supports(CpuIsa::kAvx512Bf16), f.avx512_bf16);
  // kAmx also needs the OS's permission, so it implies the features but not the converse.
  EXPECT_TRUE(!cpu_supports(CpuIsa::kAmx) || (f.amx_tile && f.avx512_bf16));
  EXPECT_TRUE(cpu_supports(cpu_max_isa()));
  const int next = static_cast<int>(cpu_max_isa()) + 1;
  if (next <= static_cast<int>(CpuIsa::kAmx)) {
    EXPECT_FALSE(cpu_supports(static_cast<CpuIsa>(next)));
  }
  EXPECT_LE(static_cast<int>(cpu_active_isa()), static_cast<int>(cpu_max_isa()));
  EXPECT_FALSE(f.vendor.empty());
}

// PREFETCHW as the Linux kernel reads it: its name for the cpuid bit is "3dnowprefetch".
TEST(CpuFeatures, PrefetchwAgreesWithTheKernel) {
  std::ifstream in("/proc/cpuinfo");
  if (!in) GTEST_SKIP() << "no /proc/cpuinfo";
  std::string line;
  while (std::getline(in, line) && line.rfind("flags", 0) != 0) {
  }
  if (line.empty()) GTEST_SKIP() << "/proc/cpuinfo has no flags line";
  std::istringstream flags(line.substr(line.find(':') + 1));
  bool listed = false;
  for (std::string f; flags >> f;) listed = listed || f == "3dnowprefetch";
  EXPECT_EQ(cpu_features().prefetchw, listed) << line;
}

TEST(ScopedCpuIsa, ForcesAndNests) {
  const CpuIsa outer_default = cpu_dispatch_isa();
  {
    ScopedCpuIsa scalar(CpuIsa::kScalar);
    EXPECT_EQ(cpu_dispatch_isa(), CpuIsa::kScalar);
    {
      ScopedCpuIsa wide(cpu_max_isa());
      EXPECT_EQ(cpu_dispatch_isa(), cpu_max_isa());
    }
    EXPECT_EQ(cpu_dispatch_isa(), CpuIsa::kScalar);
  }
  EXPECT_EQ(cpu_dispatch_isa(), outer_default);
  EXPECT_EQ(cpu_dispatch_isa(), cpu_active_isa());
}

TEST(ScopedCpuIsa, IsPerThread) {
  ScopedCpuIsa scalar(CpuIsa::kScalar);
  CpuIsa seen = CpuIsa::kScalar;
  std::thread([&] { seen = cpu_dispatch_isa(); }).join();
  EXPECT_EQ(seen, cpu_active_isa());
  EXPECT_EQ(cpu_dispatch_isa(), CpuIsa::kScalar);
}

TEST(ScopedCpuIsa, UnsupportedLevelThrowsAndChangesNothing) {
  if (cpu_max_isa() == CpuIsa::kAmx) GTEST_SKIP() << "this CPU supports every level";
  const auto unsupported = static_cast<CpuIsa>(static_cast<int>(cpu_max_isa()) + 1);
  ScopedCpuIsa scalar(CpuIsa::kScalar);
  try {
    ScopedCpuIsa bad(unsupported);
    FAIL() << "forcing " << cpu_isa_name(unsupported) << " did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotSupported);
    EXPECT_THAT(e.message(), HasSubstr(std::string(cpu_isa_name(unsupported))));
  }
  EXPECT_EQ(cpu_dispatch_isa(), CpuIsa::kScalar);
}

TEST(ScopedCpuIsa, LevelOutsideTheEnumThrows) {
  // Runs on every machine, including ones that support every real level.
  const auto bogus = static_cast<CpuIsa>(9);
  EXPECT_FALSE(cpu_supports(bogus));
  try {
    ScopedCpuIsa bad(bogus);
    FAIL() << "forcing level 9 did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotSupported);
    EXPECT_THAT(e.message(), HasSubstr("not supported by this CPU"));
  }
  EXPECT_EQ(cpu_dispatch_isa(), cpu_active_isa());
}

TEST(CpuIsaEnv, ScalarCapApplies) {
  PatchEnvironment env{{"BRAID_CPU_ISA", "scalar"}};
  EXPECT_EQ(run_child_test("CpuIsaEnvChild.ActiveIsScalar"), kChildPassed);
}

TEST(CpuIsaEnv, BadValueIsRejected) {
  PatchEnvironment env{{"BRAID_CPU_ISA", "sse9"}};
  EXPECT_EQ(run_child_test("CpuIsaEnvChild.ActiveThrowsNamingTheVariable"), kChildPassed);
}

TEST(CpuIsaEnvChild, ActiveIsScalar) {
  if (!in_child()) GTEST_SKIP() << "runs as a child of CpuIsaEnv.ScalarCapApplies";
  EXPECT_EQ(cpu_active_isa(), CpuIsa::kScalar);
  EXPECT_EQ(cpu_dispatch_isa(), CpuIsa::kScalar);
  exit_child();
}

TEST(CpuIsaEnvChild, ActiveThrowsNamingTheVariable) {
  if (!in_child()) GTEST_SKIP() << "runs as a child of CpuIsaEnv.BadValueIsRejected";
  try {
    cpu_active_isa();
    ADD_FAILURE() << "BRAID_CPU_ISA=sse9 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_THAT(e.message(), HasSubstr("BRAID_CPU_ISA"));
    EXPECT_THAT(e.message(), HasSubstr("sse9"));
  }
  exit_child();
}

}  // namespace
}  // namespace braid
