// Environment getters and the PatchEnvironment / ClearEnvironment scopes (Accelerate's
// patch_environment / clear_environment semantics).
#include "braid/core/environment.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <limits>
#include <stdexcept>

#include "braid/core/error.h"

namespace braid {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr const char* kVar = "BRAID_ENV_TEST_VAR";

bool is_set(const char* name) {
  return std::getenv(name) != nullptr;
}
std::string value_of(const char* name) {
  return std::getenv(name) ? std::getenv(name) : "<unset>";
}

// Checks that `fn` throws kInvalidArgument naming the variable, the value and `expected`.
template <typename Fn>
void expect_bad_value(Fn fn, const std::string& value, const std::string& expected) {
  PatchEnvironment env{{kVar, value}};
  try {
    fn();
    ADD_FAILURE() << "value '" << value << "' was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_THAT(e.message(), HasSubstr(kVar));
    EXPECT_THAT(e.message(), HasSubstr("'" + value + "'"));
    EXPECT_THAT(e.message(), HasSubstr(expected));
  }
}

TEST(GetEnv, StringDistinguishesUnsetFromEmpty) {
  ::unsetenv(kVar);
  EXPECT_FALSE(get_env_string(kVar).has_value());
  EXPECT_EQ(get_env_string(kVar, "fallback"), "fallback");
  PatchEnvironment env{{kVar, ""}};
  ASSERT_TRUE(get_env_string(kVar).has_value());
  EXPECT_EQ(*get_env_string(kVar), "");
  EXPECT_EQ(get_env_string(kVar, "fallback"), "");
}

TEST(GetEnv, IntParsesAndDefaults) {
  ::unsetenv(kVar);
  EXPECT_EQ(get_env_int(kVar, 7), 7);
  {
    PatchEnvironment env{{kVar, " -12 "}};
    EXPECT_EQ(get_env_int(kVar, 7), -12);
  }
  {
    PatchEnvironment env{{kVar, "+9000000000"}};
    EXPECT_EQ(get_env_int(kVar, 7), 9000000000LL);
  }
  {
    PatchEnvironment env{{kVar, ""}};
    EXPECT_EQ(get_env_int(kVar, 7), 7);
  }
  expect_bad_value([] { get_env_int(kVar, 0); }, "12abc", "integer");
  expect_bad_value([] { get_env_int(kVar, 0); }, "1.5", "integer");
  expect_bad_value([] { get_env_int(kVar, 0); }, "four", "integer");
  expect_bad_value([] { get_env_int(kVar, 0); }, "99999999999999999999", "64-bit");
}

TEST(GetEnv, BytesTakeBinarySuffixes) {
  ::unsetenv(kVar);
  EXPECT_EQ(get_env_bytes(kVar, 5), 5u);
  const std::pair<const char*, uint64_t> good[] = {
      {"0", 0},         {" 4096 ", 4096},          {"256K", 256u << 10},
      {"4m", 4u << 20}, {"1G", uint64_t{1} << 30}, {"2T", uint64_t{2} << 40}};
  for (const auto& [text, want] : good) {
    PatchEnvironment env{{kVar, text}};
    EXPECT_EQ(get_env_bytes(kVar, 5), want) << text;
  }
  for (const char* bad :
       {"-1", "1.5M", "12Q", "M", "4MB", "99999999999999999999", "20000000000000T"}) {
    expect_bad_value([] { get_env_bytes(kVar, 0); }, bad, "byte count");
  }
}

TEST(GetEnv, DoubleParsesAndRejectsNonFinite) {
  ::unsetenv(kVar);
  EXPECT_EQ(get_env_double(kVar, 0.25), 0.25);
  {
    PatchEnvironment env{{kVar, "1e-3"}};
    EXPECT_DOUBLE_EQ(get_env_double(kVar, 0), 0.001);
  }
  {
    PatchEnvironment env{{kVar, "-2.5"}};
    EXPECT_EQ(get_env_double(kVar, 0), -2.5);
  }
  expect_bad_value([] { get_env_double(kVar, 0); }, "abc", "finite decimal number");
  expect_bad_value([] { get_env_double(kVar, 0); }, "0.5x", "finite decimal number");
  expect_bad_value([] { get_env_double(kVar, 0); }, "inf", "finite decimal number");
  expect_bad_value([] { get_env_double(kVar, 0); }, "nan", "finite decimal number");
}

TEST(GetEnv, BoolAcceptsTheUsualSpellings) {
  ::unsetenv(kVar);
  EXPECT_TRUE(get_env_bool(kVar, true));
  EXPECT_FALSE(get_env_bool(kVar, false));
  for (const char* yes : {"1", "true", "TRUE", "True", "yes", "Yes", "on", "ON"}) {
    PatchEnvironment env{{kVar, yes}};
    EXPECT_TRUE(get_env_bool(kVar, false)) << yes;
  }
  for (const char* no : {"0", "false", "False", "no", "NO", "off", "Off"}) {
    PatchEnvironment env{{kVar, no}};
    EXPECT_FALSE(get_env_bool(kVar, true)) << no;
  }
  expect_bad_value([] { get_env_bool(kVar, false); }, "2", "1/0, true/false, yes/no or on/off");
  expect_bad_value([] { get_env_bool(kVar, false); }, "enabled", "true/false");
}

TEST(GetEnv, ListSplitsOnCommas) {
  ::unsetenv(kVar);
  EXPECT_THAT(get_env_list(kVar, {"a"}), ElementsAre("a"));
  EXPECT_TRUE(get_env_list(kVar).empty());
  PatchEnvironment env{{kVar, " eth0, ib0 ,,lo "}};
  EXPECT_THAT(get_env_list(kVar), ElementsAre("eth0", "ib0", "lo"));
}

TEST(EnvValue, ConvertsLikePythonStr) {
  EXPECT_EQ(EnvValue(true).text(), "True");
  EXPECT_EQ(EnvValue(false).text(), "False");
  EXPECT_EQ(EnvValue(42).text(), "42");
  EXPECT_EQ(EnvValue(-7L).text(), "-7");
  EXPECT_EQ(EnvValue(18446744073709551615ULL).text(), "18446744073709551615");
  EXPECT_EQ(EnvValue("abc").text(), "abc");
  EXPECT_EQ(EnvValue(std::string("s")).text(), "s");
  // Python: str(0.1), str(1.0), str(-0.0), str(1e16), str(1e15), str(1e-5), str(0.0001),
  // str(123.456), str(2.5e-07), str(float('inf')), str(float('nan')), str(1.5e300)
  EXPECT_EQ(EnvValue(0.1).text(), "0.1");
  EXPECT_EQ(EnvValue(1.0).text(), "1.0");
  EXPECT_EQ(EnvValue(-0.0).text(), "-0.0");
  EXPECT_EQ(EnvValue(1e16).text(), "1e+16");
  EXPECT_EQ(EnvValue(1e15).text(), "1000000000000000.0");
  EXPECT_EQ(EnvValue(1e-5).text(), "1e-05");
  EXPECT_EQ(EnvValue(0.0001).text(), "0.0001");
  EXPECT_EQ(EnvValue(123.456).text(), "123.456");
  EXPECT_EQ(EnvValue(2.5e-7).text(), "2.5e-07");
  EXPECT_EQ(EnvValue(std::numeric_limits<double>::infinity()).text(), "inf");
  EXPECT_EQ(EnvValue(-std::numeric_limits<double>::infinity()).text(), "-inf");
  EXPECT_EQ(EnvValue(std::numeric_limits<double>::quiet_NaN()).text(), "nan");
  EXPECT_EQ(EnvValue(1.5e300).text(), "1.5e+300");
  EXPECT_EQ(EnvValue(0.5f).text(), "0.5");
}

TEST(PatchEnvironment, SetsUpperCasedKeysAndRemovesThemOnExit) {
  ::unsetenv("BRAID_ENV_TEST_A");
  ::unsetenv("BRAID_ENV_TEST_B");
  ::unsetenv("BRAID_ENV_TEST_C");
  {
    PatchEnvironment env{
        {"braid_env_test_a", 3}, {"Braid_Env_Test_B", true}, {"BRAID_ENV_TEST_C", 0.5}};
    EXPECT_EQ(value_of("BRAID_ENV_TEST_A"), "3");
    EXPECT_EQ(value_of("BRAID_ENV_TEST_B"), "True");
    EXPECT_EQ(value_of("BRAID_ENV_TEST_C"), "0.5");
    EXPECT_FALSE(is_set("braid_env_test_a"));
  }
  EXPECT_FALSE(is_set("BRAID_ENV_TEST_A"));
  EXPECT_FALSE(is_set("BRAID_ENV_TEST_B"));
  EXPECT_FALSE(is_set("BRAID_ENV_TEST_C"));
}

TEST(PatchEnvironment, RestoresPreviousValues) {
  ::setenv(kVar, "before", 1);
  {
    PatchEnvironment env{{kVar, "during"}};
    EXPECT_EQ(value_of(kVar), "during");
    ::setenv(kVar, "changed inside", 1);
  }
  EXPECT_EQ(value_of(kVar), "before");
  ::unsetenv(kVar);
}

TEST(PatchEnvironment, SameKeyTwiceRestoresTheOriginal) {
  ::setenv(kVar, "original", 1);
  {
    PatchEnvironment env{{kVar, "one"}, {"braid_env_test_var", "two"}};
    EXPECT_EQ(value_of(kVar), "two");
  }
  EXPECT_EQ(value_of(kVar), "original");
  ::unsetenv(kVar);
}

TEST(PatchEnvironment, RestoresWhenAnExceptionLeaves) {
  ::unsetenv(kVar);
  try {
    PatchEnvironment env{{kVar, "x"}};
    throw std::runtime_error("boom");
  } catch (const std::runtime_error&) {
  }
  EXPECT_FALSE(is_set(kVar));
}

TEST(PatchEnvironment, Nests) {
  ::unsetenv(kVar);
  {
    PatchEnvironment outer{{kVar, "outer"}};
    {
      PatchEnvironment inner{{kVar, "inner"}};
      EXPECT_EQ(value_of(kVar), "inner");
    }
    EXPECT_EQ(value_of(kVar), "outer");
  }
  EXPECT_FALSE(is_set(kVar));
}

TEST(PatchEnvironment, BadKeyChangesNothing) {
  ::unsetenv("BRAID_ENV_TEST_A");
  try {
    PatchEnvironment env{{"BRAID_ENV_TEST_A", "1"}, {"A=B", "2"}};
    ADD_FAILURE() << "a key with '=' was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_THAT(e.message(), HasSubstr("'A=B'"));
  }
  EXPECT_FALSE(is_set("BRAID_ENV_TEST_A"));
  EXPECT_THROW((PatchEnvironment{{"", "1"}}), Error);
}

// The run-time form: a list built by the caller, where nullopt unsets for the scope.
TEST(PatchEnvironment, AListMadeAtRunTimeSetsAndUnsetsThenRestores) {
  ::setenv(kVar, "before", 1);
  ::unsetenv("BRAID_ENV_TEST_B");
  EnvPatch patch;
  patch.emplace_back(kVar, std::nullopt);
  patch.emplace_back("braid_env_test_b", std::string("set"));
  {
    PatchEnvironment env(patch);
    EXPECT_FALSE(is_set(kVar));
    EXPECT_EQ(value_of("BRAID_ENV_TEST_B"), "set");
  }
  EXPECT_EQ(value_of(kVar), "before");
  EXPECT_FALSE(is_set("BRAID_ENV_TEST_B"));
  ::unsetenv(kVar);
  try {
    PatchEnvironment env(EnvPatch{{"BRAID_ENV_TEST_B", "1"}, {"A=B", std::nullopt}});
    ADD_FAILURE() << "a key with '=' was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_THAT(e.message(), HasSubstr("'A=B'"));
  }
  EXPECT_FALSE(is_set("BRAID_ENV_TEST_B"));
}

TEST(ClearEnvironment, EmptiesAndRestoresExactly) {
  ::setenv("BRAID_ENV_TEST_KEEP", "kept", 1);
  ::setenv("BRAID_ENV_TEST_CHANGE", "old", 1);
  ::unsetenv("BRAID_ENV_TEST_NEW");
  const auto before = env_with_prefix("");
  {
    ClearEnvironment clear;
    EXPECT_TRUE(env_with_prefix("").empty());
    EXPECT_FALSE(is_set("PATH"));
    ::setenv("BRAID_ENV_TEST_NEW", "new", 1);
    ::setenv("BRAID_ENV_TEST_CHANGE", "new", 1);
  }
  EXPECT_EQ(env_with_prefix(""), before);
  EXPECT_FALSE(is_set("BRAID_ENV_TEST_NEW"));
  EXPECT_EQ(value_of("BRAID_ENV_TEST_CHANGE"), "old");
  EXPECT_EQ(value_of("BRAID_ENV_TEST_KEEP"), "kept");
  ::unsetenv("BRAID_ENV_TEST_KEEP");
  ::unsetenv("BRAID_ENV_TEST_CHANGE");
}

TEST(ClearEnvironment, NestsWithPatchAndSurvivesExceptions) {
  ::setenv(kVar, "outside", 1);
  const auto before = env_with_prefix("");
  try {
    ClearEnvironment clear;
    PatchEnvironment env{{kVar, "inside"}};
    EXPECT_EQ(env_with_prefix("").size(), 1u);
    throw std::runtime_error("boom");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(env_with_prefix(""), before);
  EXPECT_EQ(value_of(kVar), "outside");
  ::unsetenv(kVar);
}

TEST(EnvWithPrefix, ListsSortedMatches) {
  PatchEnvironment env{{"BRAID_ENV_TEST_Z", "z"}, {"BRAID_ENV_TEST_Y", "y"}};
  const auto vars = env_with_prefix("BRAID_ENV_TEST_");
  ASSERT_EQ(vars.size(), 2u);
  EXPECT_EQ(vars[0], std::make_pair(std::string("BRAID_ENV_TEST_Y"), std::string("y")));
  EXPECT_EQ(vars[1], std::make_pair(std::string("BRAID_ENV_TEST_Z"), std::string("z")));
}

}  // namespace
}  // namespace braid
