// SPDX-License-Identifier: Apache-2.0
// Environment variables: typed getters with defaults and clear errors, and RAII scopes that
// patch or clear the environment the way Accelerate's patch_environment / clear_environment
// context managers do (tests and launch helpers use them).
//
// Every BRAID_* variable is listed in docs/environment.md.
//
// Thread safety: getenv/setenv/unsetenv are not thread-safe in POSIX. Reading is safe while
// no thread writes; PatchEnvironment and ClearEnvironment write, so use them only while no
// other thread reads or writes the environment (test bodies, single-threaded setup).
#pragma once

#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace braid {

// The value, or nullopt when the variable is not set (an empty value is returned as "").
std::optional<std::string> get_env_string(std::string_view name);
std::string get_env_string(std::string_view name, std::string_view default_value);

// The typed getters return `default_value` when the variable is unset or empty, and throw
// kInvalidArgument naming the variable, its value and the expected form when it does not
// parse. Surrounding spaces are ignored.
int64_t get_env_int(std::string_view name, int64_t default_value);   // base-10 integer
double get_env_double(std::string_view name, double default_value);  // finite number
bool get_env_bool(std::string_view name, bool default_value);        // 1/0 true/false yes/no on/off
// A byte count: a non-negative base-10 integer with an optional K, M, G or T suffix (binary
// multiples, either case), such as 4096, 256K or 4M.
uint64_t get_env_bytes(std::string_view name, uint64_t default_value);
// Comma-separated items, each trimmed of spaces; empty items are skipped.
std::vector<std::string> get_env_list(std::string_view name,
                                      std::vector<std::string> default_value = {});

// A value for PatchEnvironment, converted to text the way Python's str() does: strings as
// they are, integers in base 10, bool as "True" / "False", floating point in Python's repr
// form ("0.1", "1.0", "1e+16", "inf", "nan").
class EnvValue {
 public:
  EnvValue(const char* text) : text_(text) {}                // NOLINT: implicit by design
  EnvValue(std::string text) : text_(std::move(text)) {}     // NOLINT
  EnvValue(std::string_view text) : text_(text) {}           // NOLINT
  EnvValue(bool value) : text_(value ? "True" : "False") {}  // NOLINT
  template <std::integral T>
  requires(!std::same_as<T, bool> && !std::same_as<T, char>) EnvValue(T value)
      : text_(std::to_string(value)) {}  // NOLINT
  template <std::floating_point T>
  EnvValue(T value) : text_(python_float_str(static_cast<double>(value))) {}  // NOLINT

  const std::string& text() const { return text_; }

  // Python's str(float) / repr(float): shortest round-trip digits, ".0" on integral values,
  // exponent form when the decimal exponent is < -4 or >= 16.
  static std::string python_float_str(double value);

 private:
  std::string text_;
};

// Sets each variable (key upper-cased, value as EnvValue text) for the scope's lifetime and
// on exit restores each to its previous value, or removes it if it was unset - also when an
// exception leaves the scope. Scopes nest.
//
//   PatchEnvironment env{{"braid_log_level", "debug"}, {"world_size", 4}, {"flag", true}};
//
// Throws kInvalidArgument, before changing anything, for an empty key or one containing '='.
//
// The second form takes a list made at run time, and a nullopt value unsets the variable for
// the scope (tests that must see a variable absent):
//
//   PatchEnvironment env(EnvPatch{{"BRAID_BACKEND", std::nullopt}, {"UCX_TLS", "tcp,self"}});
using EnvPatch = std::vector<std::pair<std::string, std::optional<std::string>>>;
class PatchEnvironment {
 public:
  PatchEnvironment(std::initializer_list<std::pair<std::string_view, EnvValue>> vars);
  explicit PatchEnvironment(const EnvPatch& vars);
  ~PatchEnvironment();
  PatchEnvironment(const PatchEnvironment&) = delete;
  PatchEnvironment& operator=(const PatchEnvironment&) = delete;

 private:
  void apply(const EnvPatch& vars);
  // Upper-cased key and its value before the scope (nullopt: it was unset).
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

// Empties the environment for the scope's lifetime and on exit restores exactly the previous
// one: variables set, changed or removed inside the scope are put back as they were.
class ClearEnvironment {
 public:
  ClearEnvironment();
  ~ClearEnvironment();
  ClearEnvironment(const ClearEnvironment&) = delete;
  ClearEnvironment& operator=(const ClearEnvironment&) = delete;

 private:
  std::vector<std::pair<std::string, std::string>> saved_;
};

// The names and values of the variables currently set whose name starts with `prefix`
// (e.g. "BRAID_"), sorted by name.
std::vector<std::pair<std::string, std::string>> env_with_prefix(std::string_view prefix);

}  // namespace braid
