// braid_interop_tool: the C++ side of the interop tests (tests/interop/README in
// docs/files.md). It writes braid's sample tensors (one per dtype, special values included)
// to a file or a sharded folder, and dumps any file / index / folder braid can load as
// canonical JSON (name, dtype, shape, data bytes in hex) for the Python scripts to compare.
//
//   braid_interop_tool write <file.safetensors>
//   braid_interop_tool write-sharded <folder> <max_shard_size>
//   braid_interop_tool dump <file | index | folder>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "braid/core/error.h"
#include "braid/tensor/safetensors.h"

namespace {

using braid::DType;
using braid::NamedTensors;
using braid::Tensor;

constexpr double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::nan("");

// Values exactly representable in each float type, so any correct conversion gives the
// same bits; tests/interop/samples.py holds the same list.
std::vector<double> float_values(DType dt) {
  std::vector<double> v = {0.0, -0.0, 1.0, -2.5, 0.375, 3.0};
  auto add = [&v](std::initializer_list<double> more) { v.insert(v.end(), more); };
  switch (dt) {
    case DType::kF64:
      add({1e300, 5e-324, kInf, -kInf, kNaN});
      break;
    case DType::kF32:
      add({3.4028234663852886e38, std::ldexp(1.0, -149), kInf, -kInf, kNaN});
      break;
    case DType::kF16:
      add({65504.0, std::ldexp(1.0, -24), kInf, -kInf, kNaN});
      break;
    case DType::kBF16:
      add({3.3895313892515355e38, std::ldexp(1.0, -133), kInf, -kInf, kNaN});
      break;
    case DType::kF8E4M3:
      add({448.0, std::ldexp(1.0, -9), -448.0, kNaN});
      break;
    case DType::kF8E5M2:
      add({57344.0, std::ldexp(1.0, -16), kInf, -kInf, kNaN});
      break;
    default:
      break;
  }
  return v;
}

template <typename T>
Tensor from_ints(std::initializer_list<T> values, DType dt) {
  Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, dt);
  std::memcpy(t.data_ptr(), std::data(values), values.size() * sizeof(T));
  return t;
}

NamedTensors samples() {
  NamedTensors out;
  for (DType dt :
       {DType::kF64, DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kF8E5M2}) {
    const std::vector<double> v = float_values(dt);
    out.emplace_back(std::string(braid::dtype_name(dt)),
                     Tensor::from_vector(v, {static_cast<int64_t>(v.size())}, dt));
  }
  out.emplace_back("i64", from_ints<int64_t>({0, 1, -1, std::numeric_limits<int64_t>::min(),
                                              std::numeric_limits<int64_t>::max(), 123456789012345},
                                             DType::kI64));
  out.emplace_back("i32", from_ints<int32_t>({0, 1, -1, std::numeric_limits<int32_t>::min(),
                                              std::numeric_limits<int32_t>::max(), 123456},
                                             DType::kI32));
  out.emplace_back("i16", from_ints<int16_t>({0, 1, -1, -32768, 32767, 1234}, DType::kI16));
  out.emplace_back("i8", from_ints<int8_t>({0, 1, -1, -128, 127, 12}, DType::kI8));
  out.emplace_back("u8", from_ints<uint8_t>({0, 1, 127, 128, 255, 12}, DType::kU8));
  out.emplace_back("bool", from_ints<uint8_t>({1, 0, 1, 1, 0, 0}, DType::kBool));
  // Saved through a transpose: the writer must emit C order.
  const Tensor m = Tensor::from_vector({0, 1.5, 0.5, 2, 1, 2.5}, {3, 2}, DType::kF32);
  out.emplace_back("matrix.2d", m.t());
  out.emplace_back("scalar", Tensor::full({}, 7.25, DType::kF64));
  out.emplace_back("empty", Tensor::zeros({0, 3}, DType::kF32));
  out.emplace_back(
      "\xc3\xbcn\xc3\xaf"
      "code/name.\xc3\x9f",
      from_ints<int32_t>({7, 8, 9}, DType::kI32));
  return out;
}

const braid::StringMap kMetadata = {{"format", "pt"},
                                    {"writer", "braid"},
                                    {"\xc3\xbcn\xc3\xaf",
                                     "c\xc3\xb8"
                                     "d\xc3\xa9"}};

std::string hex(const Tensor& t) {
  static const char* digits = "0123456789abcdef";
  const Tensor c = t.contiguous();
  const auto* p = static_cast<const unsigned char*>(c.data_ptr());
  std::string out;
  out.reserve(c.nbytes() * 2);
  for (size_t i = 0; i < c.nbytes(); ++i) {
    out.push_back(digits[p[i] >> 4]);
    out.push_back(digits[p[i] & 15]);
  }
  return out;
}

void dump(const std::filesystem::path& path) {
  nlohmann::ordered_json out;
  out["metadata"] = nullptr;
  if (std::filesystem::is_regular_file(path) && !path.string().ends_with(".json")) {
    out["metadata"] = braid::SafetensorsFile::open(path).metadata();
  }
  out["tensors"] = nlohmann::ordered_json::array();
  for (const auto& [name, t] : braid::load_safetensors(path)) {
    out["tensors"].push_back({{"name", name},
                              {"dtype", braid::dtype_safetensors_name(t.dtype())},
                              {"shape", t.shape()},
                              {"hex", hex(t)}});
  }
  std::cout << out.dump(1) << "\n";
}

int usage() {
  std::cerr << "usage: braid_interop_tool write <file> | write-sharded <folder> <max_size> | "
               "dump <file|index|folder>\n";
  return 64;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return usage();
  const std::string command = argv[1];
  try {
    if (command == "write" && argc == 3) {
      braid::save_safetensors(argv[2], samples(), kMetadata);
    } else if (command == "write-sharded" && argc == 4) {
      braid::save_sharded(argv[2], samples(), std::string_view(argv[3]), kMetadata);
    } else if (command == "dump" && argc == 3) {
      dump(argv[2]);
    } else {
      return usage();
    }
  } catch (const braid::Error& e) {
    std::cerr << "braid_interop_tool: " << braid::to_string(e.kind()) << ": " << e.message()
              << "\n";
    return 2;
  }
  return 0;
}
