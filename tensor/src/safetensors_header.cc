// Parsing and validation of a safetensors header held in memory (no Tensor involved).
// The layout rules follow the Rust safetensors crate (tensor.rs, Metadata::validate and
// read_metadata): sorted by offsets, the tensors must tile the data section exactly,
// from 0 to its end, with no hole and no overlap. braid also rejects duplicate names,
// which serde_json and nlohmann would both silently merge. docs/files.md, "Validation".
#include <algorithm>
#include <bit>
#include <limits>
#include <numeric>

#include "braid/core/error.h"
#include "braid/tensor/safetensors.h"
#include "braid/tensor/shape_checks.h"
#include "safetensors_json.h"

namespace braid {
namespace {

using Json = nlohmann::ordered_json;

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little endian; big-endian hosts would need byte swaps");

// safetensors dtypes braid does not store: a valid file may hold them, so the error is
// "not supported" rather than "corrupt".
constexpr std::string_view kOtherFormatDTypes[] = {
    "U16", "U32",     "U64",     "C64",         "F8_E8M0",
    "F4",  "F6_E2M3", "F6_E3M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ"};

// Names come from untrusted files: keep what a message quotes short.
std::string short_name(std::string_view name) {
  if (name.size() <= 128) return std::string(name);
  return std::string(name.substr(0, 120)) + "...(" + std::to_string(name.size()) + " bytes)";
}

uint64_t load_le64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

std::string accepted_dtypes() {
  std::string out;
  for (int i = 0; i < kNumDTypes; ++i) {
    if (i) out += ", ";
    out += dtype_safetensors_name(static_cast<DType>(i));
  }
  return out;
}

DType parse_entry_dtype(const Json& v, std::string_view what, const std::string& name) {
  BRAID_CHECK(v.is_string(), kCorruptData, what, ": tensor '", name, "': \"dtype\" is ",
              detail::json_kind(v), ", expected a string such as \"F32\"");
  const auto& text = v.get_ref<const std::string&>();
  for (int i = 0; i < kNumDTypes; ++i) {
    const auto t = static_cast<DType>(i);
    if (text == dtype_safetensors_name(t)) return t;
  }
  for (std::string_view other : kOtherFormatDTypes) {
    BRAID_CHECK(text != other, kNotSupported, what, ": tensor '", name, "': dtype '", text,
                "' is a safetensors dtype braid does not store; supported: ", accepted_dtypes());
  }
  BRAID_FAIL(kCorruptData, what, ": tensor '", name, "': unknown dtype ", detail::json_kind(v),
             "; expected one of ", accepted_dtypes());
}

Shape parse_entry_shape(const Json& v, std::string_view what, const std::string& name) {
  BRAID_CHECK(v.is_array(), kCorruptData, what, ": tensor '", name, "': \"shape\" is ",
              detail::json_kind(v), ", expected a list of non-negative integers");
  Shape shape;
  shape.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    uint64_t d = 0;
    BRAID_CHECK(detail::json_to_u64(v[i], d), kCorruptData, what, ": tensor '", name, "': shape[",
                i, "] is ", detail::json_kind(v[i]), ", expected a non-negative integer");
    BRAID_CHECK(d <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), kCorruptData, what,
                ": tensor '", name, "': shape[", i, "] = ", d, " is too large");
    shape.push_back(static_cast<int64_t>(d));
  }
  return shape;
}

void parse_entry_offsets(const Json& v, std::string_view what, SafetensorsEntry& e) {
  uint64_t begin = 0, end = 0;
  BRAID_CHECK(v.is_array() && v.size() == 2 && detail::json_to_u64(v[0], begin) &&
                  detail::json_to_u64(v[1], end),
              kCorruptData, what, ": tensor '", e.name, "': \"data_offsets\" is ",
              v.is_array() ? v.dump().substr(0, 80) : detail::json_kind(v),
              ", expected [begin, end], two non-negative integers");
  BRAID_CHECK(begin <= end, kCorruptData, what, ": tensor '", e.name, "': data_offsets [", begin,
              ", ", end, "] has begin > end");
  e.begin = begin;
  e.end = end;
}

// numel * dtype size with overflow checks, as the Rust crate's ValidationOverflow.
void check_entry_size(const SafetensorsEntry& e, std::string_view what) {
  uint64_t bytes = dtype_size(e.dtype);
  for (int64_t d : e.shape) {
    const auto ud = static_cast<uint64_t>(d);
    BRAID_CHECK(ud == 0 || bytes <= std::numeric_limits<uint64_t>::max() / ud, kCorruptData, what,
                ": tensor '", short_name(e.name), "': shape ", shape_str(e.shape), " of ",
                dtype_safetensors_name(e.dtype), " overflows 64-bit byte counts");
    bytes *= ud;
  }
  BRAID_CHECK(strides_fit(e.shape), kCorruptData, what, ": tensor '", short_name(e.name),
              "': shape ", shape_str(e.shape),
              " cannot be a tensor: its non-zero dimensions multiply past 2^63 - 1");
  BRAID_CHECK(bytes == e.nbytes(), kCorruptData, what, ": tensor '", short_name(e.name),
              "': shape ", shape_str(e.shape), " of ", dtype_safetensors_name(e.dtype), " needs ",
              bytes, " bytes but data_offsets [", e.begin, ", ", e.end, "] span ", e.nbytes());
}

SafetensorsEntry parse_entry(const std::string& key, const Json& v, std::string_view what) {
  SafetensorsEntry e;
  e.name = short_name(key);
  BRAID_CHECK(v.is_object(), kCorruptData, what, ": tensor '", e.name, "' is ",
              detail::json_kind(v), ", expected an object with dtype, shape, data_offsets");
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    BRAID_CHECK(v.contains(field), kCorruptData, what, ": tensor '", e.name, "' has no \"", field,
                "\"");
  }
  e.dtype = parse_entry_dtype(v["dtype"], what, e.name);
  e.shape = parse_entry_shape(v["shape"], what, e.name);
  parse_entry_offsets(v["data_offsets"], what, e);
  e.name = key;
  return e;
}

StringMap parse_metadata(const Json& v, std::string_view what) {
  BRAID_CHECK(v.is_object(), kCorruptData, what, ": \"__metadata__\" is ", detail::json_kind(v),
              ", expected an object of string -> string");
  StringMap out;
  for (const auto& [key, value] : v.items()) {
    BRAID_CHECK(value.is_string(), kCorruptData, what, ": \"__metadata__\" key '", short_name(key),
                "' holds ", detail::json_kind(value),
                ", expected a string (metadata is string -> string)");
    out.emplace(key, value.get<std::string>());
  }
  return out;
}

// Sorted by offsets, the tensors must cover [0, data_bytes) exactly once.
void check_layout(const std::vector<SafetensorsEntry>& entries, uint64_t data_bytes,
                  std::string_view what) {
  for (const SafetensorsEntry& e : entries) {
    BRAID_CHECK(e.end <= data_bytes, kCorruptData, what, ": tensor '", short_name(e.name),
                "': data_offsets [", e.begin, ", ", e.end, "] end past the data section (",
                data_bytes, " bytes)");
  }
  std::vector<size_t> order(entries.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::pair(entries[a].begin, entries[a].end) <
           std::pair(entries[b].begin, entries[b].end);
  });
  uint64_t covered = 0;
  const SafetensorsEntry* previous = nullptr;
  for (size_t i : order) {
    const SafetensorsEntry& e = entries[i];
    BRAID_CHECK(e.begin >= covered, kCorruptData, what, ": tensor '", short_name(e.name),
                "' data_offsets [", e.begin, ", ", e.end, "] overlap tensor '",
                previous ? short_name(previous->name) : "", "' [", previous ? previous->begin : 0,
                ", ", previous ? previous->end : 0, "]");
    BRAID_CHECK(e.begin == covered, kCorruptData, what, ": bytes [", covered, ", ", e.begin,
                ") of the data section belong to no tensor (a hole before tensor '",
                short_name(e.name), "')");
    covered = e.end;
    previous = &e;
  }
  BRAID_CHECK(covered == data_bytes, kCorruptData, what, ": the tensors cover ", covered,
              " bytes but the data section holds ", data_bytes,
              " (trailing bytes belong to no tensor)");
}

}  // namespace

SafetensorsHeader parse_safetensors_header(std::span<const std::byte> file, std::string_view path) {
  const std::string what = "safetensors file '" + std::string(path) + "'";
  BRAID_CHECK(file.size() >= 8, kCorruptData, what, ": ", file.size(),
              " bytes, too short for the 8-byte header length");
  const uint64_t n = load_le64(file.data());
  BRAID_CHECK(n <= kSafetensorsMaxHeaderBytes, kCorruptData, what, ": header length ", n,
              " exceeds the limit of ", kSafetensorsMaxHeaderBytes, " bytes");
  BRAID_CHECK(n <= file.size() - 8, kCorruptData, what, ": header length ", n,
              " runs past the end of the file (", file.size(), " bytes)");

  const std::string header_what = what + " header";
  const std::string_view text(reinterpret_cast<const char*>(file.data() + 8), n);
  const Json json = detail::parse_json_strict(text, header_what);
  BRAID_CHECK(json.is_object(), kCorruptData, header_what, " is ", detail::json_kind(json),
              ", expected a JSON object");

  SafetensorsHeader out;
  out.header_bytes = n;
  out.data_bytes = file.size() - 8 - n;
  out.entries.reserve(json.size());
  for (const auto& [key, value] : json.items()) {
    if (key == "__metadata__") {
      out.metadata = parse_metadata(value, what);
    } else {
      out.entries.push_back(parse_entry(key, value, what));
      check_entry_size(out.entries.back(), what);
    }
  }
  check_layout(out.entries, out.data_bytes, what);
  return out;
}

}  // namespace braid
