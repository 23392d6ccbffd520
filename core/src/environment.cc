// Environment variables: typed getters, the Python-str() conversion PatchEnvironment uses,
// and the patch / clear scopes.
#include "braid/core/environment.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "braid/core/error.h"

extern char** environ;  // POSIX; declared by <unistd.h> only with _GNU_SOURCE

namespace braid {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The trimmed value, or nullopt when unset or blank (typed getters then use their default).
std::optional<std::string> typed_value(std::string_view name) {
  std::optional<std::string> raw = get_env_string(name);
  if (!raw) return std::nullopt;
  const std::string_view t = trim(*raw);
  if (t.empty()) return std::nullopt;
  return std::string(t);
}

// Puts back the values saved by a PatchEnvironment, last first.
void restore(const std::vector<std::pair<std::string, std::optional<std::string>>>& saved) {
  for (auto it = saved.rbegin(); it != saved.rend(); ++it) {
    if (it->second) {
      ::setenv(it->first.c_str(), it->second->c_str(), 1);
    } else {
      ::unsetenv(it->first.c_str());
    }
  }
}

void set_var(const std::string& key, const std::string& value) {
  BRAID_CHECK(::setenv(key.c_str(), value.c_str(), 1) == 0, kIo, "setenv(", key,
              ") failed: ", std::strerror(errno));
}

}  // namespace

std::optional<std::string> get_env_string(std::string_view name) {
  const char* v = std::getenv(std::string(name).c_str());
  if (!v) return std::nullopt;
  return std::string(v);
}

std::string get_env_string(std::string_view name, std::string_view default_value) {
  std::optional<std::string> v = get_env_string(name);
  return v ? *v : std::string(default_value);
}

int64_t get_env_int(std::string_view name, int64_t default_value) {
  const std::optional<std::string> v = typed_value(name);
  if (!v) return default_value;
  const char* first = v->data() + (v->front() == '+' ? 1 : 0);
  int64_t out = 0;
  const auto [end, ec] = std::from_chars(first, v->data() + v->size(), out);
  BRAID_CHECK(ec != std::errc::result_out_of_range, kInvalidArgument, name, "='", *v,
              "' is out of range; expected a 64-bit integer");
  BRAID_CHECK(ec == std::errc() && end == v->data() + v->size(), kInvalidArgument, name, "='", *v,
              "' is not an integer; expected a base-10 integer such as 4");
  return out;
}

double get_env_double(std::string_view name, double default_value) {
  const std::optional<std::string> v = typed_value(name);
  if (!v) return default_value;
  const char* first = v->data() + (v->front() == '+' ? 1 : 0);
  double out = 0;
  const auto [end, ec] = std::from_chars(first, v->data() + v->size(), out);
  BRAID_CHECK(ec == std::errc() && end == v->data() + v->size() && std::isfinite(out),
              kInvalidArgument, name, "='", *v,
              "' is not a number; expected a finite decimal number such as 0.5 or 1e-3");
  return out;
}

uint64_t get_env_bytes(std::string_view name, uint64_t default_value) {
  const std::optional<std::string> v = typed_value(name);
  if (!v) return default_value;
  uint64_t count = 0;
  const char* last = v->data() + v->size();
  const auto [end, ec] = std::from_chars(v->data(), last, count);
  int shift = -1;
  if (ec == std::errc() && end + 1 >= last) {
    const char unit = end == last ? '\0' : static_cast<char>(std::toupper(*end));
    shift = unit == '\0'  ? 0
            : unit == 'K' ? 10
            : unit == 'M' ? 20
            : unit == 'G' ? 30
            : unit == 'T' ? 40
                          : -1;
  }
  BRAID_CHECK(shift >= 0 && count <= (UINT64_MAX >> shift), kInvalidArgument, name, "='", *v,
              "' is not a byte count; expected a non-negative integer with an optional K, M, G "
              "or T suffix, such as 4096 or 4M");
  return count << shift;
}

bool get_env_bool(std::string_view name, bool default_value) {
  const std::optional<std::string> v = typed_value(name);
  if (!v) return default_value;
  const std::string l = lower(*v);
  if (l == "1" || l == "true" || l == "yes" || l == "on") return true;
  if (l == "0" || l == "false" || l == "no" || l == "off") return false;
  BRAID_FAIL(kInvalidArgument, name, "='", *v,
             "' is not a boolean; expected 1/0, true/false, yes/no or on/off");
}

std::vector<std::string> get_env_list(std::string_view name,
                                      std::vector<std::string> default_value) {
  const std::optional<std::string> v = get_env_string(name);
  if (!v || trim(*v).empty()) return default_value;
  std::vector<std::string> items;
  std::string_view rest = *v;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view item = trim(rest.substr(0, comma));
    if (!item.empty()) items.emplace_back(item);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return items;
}

// Python formats repr(float) from the shortest round-trip digits: fixed notation when the
// decimal exponent is in [-4, 16), with ".0" appended to integral values, else d.ddde+XX.
std::string EnvValue::python_float_str(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  std::string_view sci(buf, res.ptr - buf);  // "-1.2345e+05"
  std::string out;
  if (sci.front() == '-') {
    out += '-';
    sci.remove_prefix(1);
  }
  const size_t e = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e)) {
    if (c != '.') digits += c;
  }
  const int exp10 = std::atoi(std::string(sci.substr(e + 1)).c_str());
  if (exp10 < -4 || exp10 >= 16) {
    out += digits[0];
    if (digits.size() > 1) out.append(".").append(digits, 1);
    out += exp10 < 0 ? "e-" : "e+";
    const int a = std::abs(exp10);
    if (a < 10) out += '0';
    out += std::to_string(a);
    return out;
  }
  if (exp10 < 0) {
    out += "0." + std::string(static_cast<size_t>(-exp10 - 1), '0') + digits;
  } else if (static_cast<size_t>(exp10) + 1 >= digits.size()) {
    out += digits + std::string(static_cast<size_t>(exp10) + 1 - digits.size(), '0') + ".0";
  } else {
    out += digits.substr(0, exp10 + 1) + "." + digits.substr(exp10 + 1);
  }
  return out;
}

PatchEnvironment::PatchEnvironment(
    std::initializer_list<std::pair<std::string_view, EnvValue>> vars) {
  EnvPatch patch;
  for (const auto& [key, value] : vars) patch.emplace_back(std::string(key), value.text());
  apply(patch);
}

PatchEnvironment::PatchEnvironment(const EnvPatch& vars) {
  apply(vars);
}

void PatchEnvironment::apply(const EnvPatch& vars) {
  // Validate everything first so a bad key changes nothing.
  std::vector<std::string> keys;
  for (const auto& [key, value] : vars) {
    BRAID_CHECK(!key.empty() && key.find('=') == std::string::npos, kInvalidArgument,
                "environment variable name '", key, "' is not valid; expected a non-empty ",
                "name without '='");
    std::string upper(key);
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    keys.push_back(std::move(upper));
  }
  size_t i = 0;
  try {
    for (const auto& [key, value] : vars) {
      const std::string& k = keys[i++];
      // A key given twice ("a" and "A") keeps the value from before the scope, not the first
      // patched one, so the exit restores the original.
      const bool seen =
          std::any_of(saved_.begin(), saved_.end(), [&](const auto& s) { return s.first == k; });
      if (!seen) saved_.emplace_back(k, get_env_string(k));
      if (value) {
        set_var(k, *value);
      } else {
        ::unsetenv(k.c_str());
      }
    }
  } catch (...) {
    restore(saved_);  // the destructor does not run for a half-built scope
    throw;
  }
}

PatchEnvironment::~PatchEnvironment() {
  restore(saved_);
}

ClearEnvironment::ClearEnvironment() {
  for (char** e = environ; e && *e; ++e) {
    const std::string_view entry(*e);
    const size_t eq = entry.find('=');
    if (eq == 0 || eq == std::string_view::npos) continue;  // not settable through setenv
    saved_.emplace_back(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
  }
  ::clearenv();
}

ClearEnvironment::~ClearEnvironment() {
  ::clearenv();
  for (const auto& [key, value] : saved_) ::setenv(key.c_str(), value.c_str(), 1);
}

std::vector<std::pair<std::string, std::string>> env_with_prefix(std::string_view prefix) {
  std::vector<std::pair<std::string, std::string>> out;
  for (char** e = environ; e && *e; ++e) {
    const std::string_view entry(*e);
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos || !entry.starts_with(prefix)) continue;
    out.emplace_back(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace braid
