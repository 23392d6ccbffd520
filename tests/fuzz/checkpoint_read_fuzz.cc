// libFuzzer target: reading a sharded checkpoint (ShardedCheckpoint, shard/src/checkpoint_read.cc)
// whose index and rank file come from the input, so that the index's claims are checked
// against a real safetensors file: a piece missing from it, of another dtype or length.
// Input: u32 little-endian n, then n bytes of index.json, then the bytes of one rank file.
// When the index parses, the rank file is written under every file name it lists, and the
// index's sizes and CRC32C are set to match it (else the CRC would stop every mutant before the
// code under test); then every tensor is read, whole and by range. Bad input is kCorruptData
// (or kNotSupported for a dtype or format version).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <vector>

#include "braid/shard/checkpoint.h"
#include "checkpoint_internal.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace braid;
  using namespace braid::shard::detail;
  if (size < 4) return 0;
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= uint32_t{data[i]} << (8 * i);
  if (n > size - 4) return 0;
  const std::string_view index_text = fuzz::as_text(data + 4, n);
  const std::span<const uint8_t> rank_file(data + 4 + n, size - 4 - n);

  CheckpointIndex index;
  if (!fuzz::parses({ErrorKind::kCorruptData, ErrorKind::kNotSupported},
                    [&] { index = parse_checkpoint_index(index_text, "index.json"); })) {
    return 0;
  }
  if (index.files.size() > 4) return 0;  // each is a file write: keep executions fast
  const auto folder = fuzz::temp_dir() / "ckpt";
  std::filesystem::remove_all(folder);
  std::filesystem::create_directories(folder);
  const uint32_t crc = crc32c(std::as_bytes(rank_file));
  for (auto& [name, file] : index.files) {
    fuzz::write_file(folder / name, rank_file);
    file = IndexFile{rank_file.size(), crc};
  }
  const std::string text = format_checkpoint_index(index);
  fuzz::write_file(folder / kIndexName,
                   {reinterpret_cast<const uint8_t*>(text.data()), text.size()});

  fuzz::parses({ErrorKind::kCorruptData, ErrorKind::kNotSupported}, [&] {
    const shard::ShardedCheckpoint ckpt(folder);
    for (const std::string& name : ckpt.names()) {
      const Tensor t = ckpt.read(name);
      fuzz::check(t.shape() == ckpt.shape(name) && t.dtype() == ckpt.dtype(name),
                  "a tensor reads back with the index's shape and dtype");
      // A range across every piece boundary, converted to f32 as resharding does.
      const int64_t numel = t.numel();
      std::vector<float> out(static_cast<size_t>(numel));
      if (numel > 1) ckpt.read_range(name, 1, numel - 1, out.data(), DType::kF32);
    }
  });
  return 0;
}
