// libFuzzer target: a .safetensors file (tensor/src/safetensors_header.cc and safetensors.cc).
// The input is a whole file. parse_safetensors_header must accept it with a layout that fits
// the file (every tensor inside the data section, with the bytes its dtype and shape imply) or
// reject it with kCorruptData / kNotSupported; an accepted file is then opened through
// SafetensorsFile and every tensor read, which adds the checks made only when tensors are
// handed out (BOOL bytes, unaligned data copied).
#include <cstddef>
#include <cstdint>
#include <span>

#include "braid/tensor/safetensors.h"
#include "fuzz_util.h"

namespace braid {
namespace {

void check_layout(const SafetensorsHeader& h, size_t file_size) {
  fuzz::check(h.data_start() <= file_size, "the data section starts inside the file");
  fuzz::check(h.data_start() + h.data_bytes == file_size, "the data section ends the file");
  for (const SafetensorsEntry& e : h.entries) {
    fuzz::check(e.begin <= e.end && e.end <= h.data_bytes, "a tensor lies in the data section");
    uint64_t numel = 1;
    for (int64_t d : e.shape) {
      fuzz::check(d >= 0, "dimensions are not negative");
      numel *= static_cast<uint64_t>(d);
    }
    fuzz::check(e.nbytes() == numel * dtype_size(e.dtype), "a tensor's bytes match its shape");
  }
}

}  // namespace
}  // namespace braid

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace braid;
  const std::span<const std::byte> file(reinterpret_cast<const std::byte*>(data), size);
  SafetensorsHeader header;
  const bool ok = fuzz::parses({ErrorKind::kCorruptData, ErrorKind::kNotSupported},
                               [&] { header = parse_safetensors_header(file, "input"); });
  if (!ok) return 0;
  check_layout(header, size);

  static const auto path = fuzz::temp_dir() / "input.safetensors";
  fuzz::write_file(path, {data, size});
  fuzz::parses({ErrorKind::kCorruptData}, [&] {
    const SafetensorsFile f = SafetensorsFile::open(path);
    fuzz::check(f.entries().size() == header.entries.size(), "open() reads the same header");
    for (const auto& named : f.load_all()) {
      const Tensor& t = named.second;
      fuzz::check(t.nbytes() == 0 || t.data_ptr() != nullptr, "a tensor with bytes has data");
    }
  });
  return 0;
}
