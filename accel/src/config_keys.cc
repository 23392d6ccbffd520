// Applying a key from any source, finding the closest key to a misspelled one, and the
// value parsing shared by the table, the environment and the program's own keys.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "braid/core/error.h"
#include "config_keys.h"

namespace braid::accel::detail {
namespace {

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += sep;
    out += items[i];
  }
  return out;
}

std::string describe(const RawValue& v) {
  switch (v.kind) {
    case RawValue::Kind::kNull:
      return "null";
    case RawValue::Kind::kScalar:
      return "'" + v.text + "'";
    case RawValue::Kind::kList:
      return "[" + join(v.items, ", ") + "]";
    case RawValue::Kind::kMap: {
      std::vector<std::string> parts;
      for (const auto& [k, x] : v.entries) parts.push_back(k + ": " + x);
      return "{" + join(parts, ", ") + "}";
    }
  }
  return "?";
}

}  // namespace

void apply_key(AcceleratorConfig& config, const KeyInfo& key, const RawValue& value,
               std::string_view source) {
  try {
    key.set(config, value);
  } catch (const ValueError& e) {
    BRAID_FAIL(kInvalidArgument, key.path(), " = ", describe(value), " (", source, "): expected ",
               key.expected, e.expected.empty() ? "" : "; ", e.expected);
  }
}

// Left out of the fuzzers' coverage instrumentation (tests/fuzz): its inner loop is a few
// comparisons per character pair for every known key, which under coverage made most of the
// config_yaml target's time (docs/fuzzing.md) while telling the fuzzer nothing about the parser.
#if defined(__clang__)
__attribute__((no_sanitize("coverage")))
#endif
size_t
edit_distance(std::string_view a, std::string_view b, size_t limit) {
  const size_t gap = a.size() > b.size() ? a.size() - b.size() : b.size() - a.size();
  if (gap > limit) return gap;       // every path needs at least the difference in length
  constexpr size_t kStackRow = 129;  // every known key is shorter: no allocation per candidate
  size_t small[kStackRow];
  std::vector<size_t> large(b.size() < kStackRow ? 0 : b.size() + 1);
  size_t* const row = b.size() < kStackRow ? small : large.data();
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    size_t row_min = row[0];
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      // Plain comparisons, not std::min: a library call would be instrumented after all.
      size_t best = up + 1 < row[j - 1] + 1 ? up + 1 : row[j - 1] + 1;
      best = diag + cost < best ? diag + cost : best;
      row[j] = best;
      row_min = best < row_min ? best : row_min;
      diag = up;
    }
    // Entries never decrease from one row to the next along any path, so the distance is at
    // least this row's smallest entry.
    if (row_min > limit) return row_min;
  }
  return row[b.size()];
}

std::string closest(std::string_view full_name, const std::vector<std::string>& candidates) {
  const std::string_view name = full_name.substr(0, kSuggestionChars);
  std::string best;
  size_t best_d = std::numeric_limits<size_t>::max();
  for (const std::string& c : candidates) {
    // Only a strictly smaller distance replaces the best (ties: the first).
    size_t d = edit_distance(name, c, best_d == 0 ? 0 : best_d - 1);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}
std::string trim(std::string_view text) {
  size_t b = 0, e = text.size();
  while (b < e && std::isspace(static_cast<unsigned char>(text[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(text[e - 1]))) --e;
  return std::string(text.substr(b, e - b));
}
std::vector<std::string> split_list(std::string_view text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    std::string item = trim(text.substr(start, comma - start));
    if (!item.empty()) out.push_back(std::move(item));
    start = comma + 1;
  }
  return out;
}

bool parse_bool_value(std::string_view text) {
  std::string t = lower(trim(text));
  if (t == "true" || t == "yes" || t == "y" || t == "on" || t == "1" || t == "t") return true;
  if (t == "false" || t == "no" || t == "n" || t == "off" || t == "0" || t == "f") return false;
  throw ValueError{};
}

int64_t parse_int_value(std::string_view text) {
  std::string t = trim(text);
  std::string_view s = t;
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) throw ValueError{};
  return v;
}

double parse_real_value(std::string_view text) {
  std::string t = trim(text);
  if (t.empty()) throw ValueError{};
  char* end = nullptr;
  double v = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size() || !std::isfinite(v)) throw ValueError{};
  return v;
}

void check_extra_keys(const ConfigOptions& options) {
  for (const std::string& k : options.extra_keys) {
    BRAID_CHECK(!k.empty() && k.find('.') == std::string::npos, kInvalidArgument, "extra key '", k,
                "': expected a non-empty name without '.'");
    bool taken =
        find_key("", k) != nullptr ||
        std::find(section_names().begin(), section_names().end(), k) != section_names().end();
    BRAID_CHECK(!taken, kInvalidArgument, "extra key '", k,
                "' is already a configuration key; choose another name");
  }
}
}  // namespace braid::accel::detail
