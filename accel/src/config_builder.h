// The machinery of the key table (config_table.cc): value parsers that throw ValueError,
// writers of OutValue, and Builder, which turns one struct field into a KeyInfo (parse, write
// back, reset on null) so the table is one line per key.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "braid/core/environment.h"
#include "braid/core/error.h"
#include "braid/core/logging.h"
#include "config_keys.h"

namespace braid::accel::detail {

using Kind = OutValue::Kind;
using Out = std::optional<OutValue>;

inline OutValue out_bool(bool b) {
  return {Kind::kBool, b ? "true" : "false"};
}
inline OutValue out_int(int64_t v) {
  return {Kind::kInt, std::to_string(v)};
}
inline OutValue out_float(double v) {
  return {Kind::kFloat, EnvValue::python_float_str(v)};
}
inline OutValue out_string(std::string s) {
  return {Kind::kString, std::move(s)};
}
inline OutValue out_list(std::vector<std::string> items) {
  OutValue o{Kind::kList};
  o.items = std::move(items);
  return o;
}
inline std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += sep;
    out += items[i];
  }
  return out;
}

// ---- value parsers (throw ValueError) ------------------------------------------------------

inline const std::string& scalar(const RawValue& v) {
  if (v.kind != RawValue::Kind::kScalar) throw ValueError{"got a list or a mapping"};
  return v.text;
}
inline bool p_bool(const RawValue& v) {
  return parse_bool_value(scalar(v));
}
inline int64_t p_int(const RawValue& v, int64_t lo,
                     int64_t hi = std::numeric_limits<int64_t>::max()) {
  int64_t x = parse_int_value(scalar(v));
  if (x < lo || x > hi) throw ValueError{};
  return x;
}
inline double p_real(const RawValue& v, double lo, bool lo_inclusive) {
  double x = parse_real_value(scalar(v));
  if (lo_inclusive ? x < lo : x <= lo) throw ValueError{};
  return x;
}
inline std::string p_string(const RawValue& v) {
  return trim(scalar(v));
}
inline std::vector<std::string> p_list(const RawValue& v) {
  if (v.kind == RawValue::Kind::kList) {
    std::vector<std::string> out;
    for (const std::string& item : v.items) {
      for (std::string& part : split_list(item)) out.push_back(std::move(part));
    }
    return out;
  }
  return split_list(scalar(v));
}
// A parse_* function of plugins.h or amp: its braid::Error becomes a ValueError.
template <typename E>
E p_enum(E (*parse)(std::string_view), const RawValue& v) {
  std::string text = trim(scalar(v));
  try {
    return parse(text);
  } catch (const Error&) {
    throw ValueError{};
  }
}
inline amp::PrecisionType p_precision(const RawValue& v) {
  std::string text = lower(trim(scalar(v)));
  if (text == "false" || text == "off") return amp::PrecisionType::kNo;  // YAML 1.1's `no`
  try {
    return amp::parse_precision_type(text);
  } catch (const Error&) {
    throw ValueError{};
  }
}
inline DType p_dtype(std::string_view text) {
  std::string t = lower(trim(text));
  if (t == "fp32" || t == "f32" || t == "float32" || t == "float" || t == "no") return DType::kF32;
  if (t == "fp16" || t == "f16" || t == "float16" || t == "half") return DType::kF16;
  if (t == "bf16" || t == "bfloat16") return DType::kBF16;
  throw ValueError{"'" + std::string(text) + "' is not fp32, fp16 or bf16"};
}
inline std::string dtype_short(DType d) {
  return d == DType::kF16 ? "fp16" : d == DType::kBF16 ? "bf16" : "fp32";
}

template <typename E>
std::string enum_choices(std::string_view (*name)(E), int first, int last,
                         std::string_view tail = "") {
  std::string out;
  for (int i = first; i <= last; ++i) {
    if (i > first) out += (i == last) ? " or " : ", ";
    out += name(static_cast<E>(i));
  }
  return out + std::string(tail);
}

// ---- sections -----------------------------------------------------------------------------

// kAlways: written whenever the section is (Accelerate's own keys); kIfChanged: only when it
// differs from the struct's default (braid's additions, so files stay Accelerate-like);
// kNever: read only (aliases, keys without a braid field).
enum class Write : uint8_t { kAlways, kIfChanged, kNever };

template <typename T>
struct Section {
  std::string name;
  T& (*mut)(AcceleratorConfig&);
  const T* (*get)(const AcceleratorConfig&);
  Write write;  // the default for its keys
};

// A default-constructed T, the reference for "unchanged" and for null resets.
template <typename T>
const T& default_of() {
  static const T value{};
  return value;
}

// Adds the keys of one section to the table.
template <typename T>
class Builder {
 public:
  Builder(std::vector<KeyInfo>& out, Section<T> section) : out_(out), s_(std::move(section)) {}

  // One field: `parse` turns a non-null value into F; `format` writes F (nullopt: leave the
  // key out). YAML null resets the field to the struct's default.
  template <typename F>
  KeyInfo& field(std::string name, std::string expected, F T::*member,
                 std::function<F(const RawValue&)> parse, std::function<Out(const F&)> format,
                 std::vector<std::string> env = {}, std::optional<Write> write = {}) {
    KeyInfo k{s_.name, std::move(name), std::move(expected)};
    k.env = std::move(env);
    auto mut = s_.mut;
    auto get = s_.get;
    Write w = write.value_or(s_.write);
    k.set = [mut, member, parse](AcceleratorConfig& c, const RawValue& v) {
      T& t = mut(c);
      if (v.kind == RawValue::Kind::kNull) {
        t.*member = default_of<T>().*member;
      } else {
        t.*member = parse(v);
      }
    };
    k.get = [get, member, format, w](const AcceleratorConfig& c) -> Out {
      const T* t = get(c);
      if (t == nullptr || w == Write::kNever) return std::nullopt;
      if (w == Write::kIfChanged && t->*member == default_of<T>().*member) return std::nullopt;
      return format(t->*member);
    };
    out_.push_back(std::move(k));
    return out_.back();
  }

  KeyInfo& boolean(std::string name, bool T::*m, std::vector<std::string> env = {},
                   std::optional<Write> w = {}) {
    return field<bool>(std::move(name), "true or false", m, p_bool, out_bool, std::move(env), w);
  }
  KeyInfo& opt_boolean(std::string name, std::optional<bool> T::*m,
                       std::vector<std::string> env = {}, std::optional<Write> w = {}) {
    return field<std::optional<bool>>(
        std::move(name), "true or false", m, [](const RawValue& v) { return p_bool(v); },
        [](const std::optional<bool>& b) -> Out {
          if (!b) return std::nullopt;
          return out_bool(*b);
        },
        std::move(env), w);
  }
  KeyInfo& integer(std::string name, int64_t T::*m, int64_t lo, int64_t hi, std::string expected,
                   std::vector<std::string> env = {}, std::optional<Write> w = {}) {
    return field<int64_t>(
        std::move(name), std::move(expected), m,
        [lo, hi](const RawValue& v) { return p_int(v, lo, hi); }, out_int, std::move(env), w);
  }
  KeyInfo& opt_integer(std::string name, std::optional<int64_t> T::*m, int64_t lo, int64_t hi,
                       std::string expected, std::vector<std::string> env = {},
                       std::optional<Write> w = {}) {
    return field<std::optional<int64_t>>(
        std::move(name), std::move(expected), m,
        [lo, hi](const RawValue& v) { return p_int(v, lo, hi); },
        [](const std::optional<int64_t>& x) -> Out {
          if (!x) return std::nullopt;
          return out_int(*x);
        },
        std::move(env), w);
  }
  KeyInfo& real(std::string name, double T::*m, double lo, bool inclusive, std::string expected,
                std::vector<std::string> env = {}, std::optional<Write> w = {}) {
    return field<double>(
        std::move(name), std::move(expected), m,
        [lo, inclusive](const RawValue& v) { return p_real(v, lo, inclusive); }, out_float,
        std::move(env), w);
  }
  KeyInfo& opt_real(std::string name, std::optional<double> T::*m, double lo, bool inclusive,
                    std::string expected, std::vector<std::string> env = {},
                    std::optional<Write> w = {}) {
    return field<std::optional<double>>(
        std::move(name), std::move(expected), m,
        [lo, inclusive](const RawValue& v) { return p_real(v, lo, inclusive); },
        [](const std::optional<double>& x) -> Out {
          if (!x) return std::nullopt;
          return out_float(*x);
        },
        std::move(env), w);
  }
  KeyInfo& text(std::string name, std::string T::*m, std::string expected,
                std::vector<std::string> env = {}, std::optional<Write> w = {}) {
    return field<std::string>(
        std::move(name), std::move(expected), m, p_string,
        [](const std::string& x) -> Out {
          if (x.empty()) return std::nullopt;
          return out_string(x);
        },
        std::move(env), w);
  }
  KeyInfo& path(std::string name, std::filesystem::path T::*m, std::vector<std::string> env = {},
                std::optional<Write> w = {}) {
    return field<std::filesystem::path>(
        std::move(name), "a path", m,
        [](const RawValue& v) { return std::filesystem::path(p_string(v)); },
        [](const std::filesystem::path& x) -> Out {
          if (x.empty()) return std::nullopt;
          return out_string(x.string());
        },
        std::move(env), w);
  }
  // Written as a comma-separated string (Accelerate's style for class-name lists) or a YAML
  // sequence.
  KeyInfo& list(std::string name, std::vector<std::string> T::*m, bool comma_string,
                std::vector<std::string> env = {}, std::optional<Write> w = {}) {
    return field<std::vector<std::string>>(
        std::move(name), "a comma-separated list or a YAML sequence", m, p_list,
        [comma_string](const std::vector<std::string>& x) -> Out {
          if (x.empty()) return std::nullopt;
          return comma_string ? out_string(join(x, ",")) : out_list(x);
        },
        std::move(env), w);
  }
  template <typename E>
  KeyInfo& choice(std::string name, E T::*m, E (*parse)(std::string_view),
                  std::string_view (*to_name)(E), std::string expected,
                  std::vector<std::string> env = {}, std::optional<Write> w = {}) {
    return field<E>(
        std::move(name), std::move(expected), m,
        [parse](const RawValue& v) { return p_enum(parse, v); },
        [to_name](const E& e) -> Out { return out_string(std::string(to_name(e))); },
        std::move(env), w);
  }
  template <typename E>
  KeyInfo& opt_choice(std::string name, std::optional<E> T::*m, E (*parse)(std::string_view),
                      std::string_view (*to_name)(E), std::string expected,
                      std::vector<std::string> env = {}, std::optional<Write> w = {}) {
    return field<std::optional<E>>(
        std::move(name), std::move(expected), m,
        [parse](const RawValue& v) { return p_enum(parse, v); },
        [to_name](const std::optional<E>& e) -> Out {
          if (!e) return std::nullopt;
          return out_string(std::string(to_name(*e)));
        },
        std::move(env), w);
  }
  // A key for something braid does not run (TPU pods, IPEX, other launchers, torch.compile
  // options): accepted only with a value that asks for nothing (null, false, an empty string,
  // list or mapping, or one of `inert`, compared without case); any other value is refused
  // with `why`, so a setting never looks honoured when it is not (docs/config.md).
  KeyInfo& inert(std::string name, std::string why, std::vector<std::string> inert = {}) {
    std::string expected = "null, false or empty";
    for (const std::string& x : inert) expected += ", or '" + x + "'";
    expected += " (" + why + ")";
    KeyInfo k{s_.name, std::move(name), expected};
    k.set = [inert](AcceleratorConfig&, const RawValue& v) {
      switch (v.kind) {
        case RawValue::Kind::kNull:
          return;
        case RawValue::Kind::kList:
          if (v.items.empty()) return;
          break;
        case RawValue::Kind::kMap:
          if (v.entries.empty()) return;
          break;
        case RawValue::Kind::kScalar: {
          if (v.text.empty()) return;
          try {
            if (!parse_bool_value(v.text)) return;
          } catch (const ValueError&) {
          }
          for (const std::string& x : inert) {
            if (lower(v.text) == lower(x)) return;
          }
          break;
        }
      }
      throw ValueError{"braid does not act on it"};
    };
    k.get = [](const AcceleratorConfig&) -> Out { return std::nullopt; };
    out_.push_back(std::move(k));
    return out_.back();
  }

 private:
  std::vector<KeyInfo>& out_;
  Section<T> s_;
};

// Section accessors: `mut` creates an optional section on first use.
template <typename T, std::optional<T> AcceleratorConfig::*M>
Section<T> optional_section(std::string name, Write write) {
  return {std::move(name),
          [](AcceleratorConfig& c) -> T& {
            if (!(c.*M)) (c.*M).emplace();
            return *(c.*M);
          },
          [](const AcceleratorConfig& c) -> const T* { return (c.*M) ? &*(c.*M) : nullptr; },
          write};
}
template <typename T, T AcceleratorConfig::*M>
Section<T> member_section(std::string name, Write write) {
  return {std::move(name), [](AcceleratorConfig& c) -> T& { return c.*M; },
          [](const AcceleratorConfig& c) -> const T* { return &(c.*M); }, write};
}
inline Section<AcceleratorConfig> top_section(std::string name, Write write) {
  return {std::move(name), [](AcceleratorConfig& c) -> AcceleratorConfig& { return c; },
          [](const AcceleratorConfig& c) -> const AcceleratorConfig* { return &c; }, write};
}

}  // namespace braid::accel::detail
