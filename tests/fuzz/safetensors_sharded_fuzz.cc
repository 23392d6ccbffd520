// libFuzzer target: loading a sharded safetensors checkpoint through its
// model.safetensors.index.json (load_safetensors -> load_sharded, tensor/src/sharded.cc): the
// index's weight map checked against real shard files. Input: u32 little-endian n, then n
// bytes of the index's text, then the bytes of one shard. The shard is written under every
// file name the index maps a tensor to (at most 4); then the folder is loaded. It loads the
// tensors the weight map names, each from the file it names, or fails with kCorruptData (or
// kNotSupported for a dtype braid does not store).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "braid/tensor/safetensors.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace braid;
  namespace fs = std::filesystem;
  if (size < 4) return 0;
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= uint32_t{data[i]} << (8 * i);
  if (n > size - 4) return 0;
  const std::string_view index_text = fuzz::as_text(data + 4, n);
  const std::span<const uint8_t> shard(data + 4 + n, size - 4 - n);

  // The files the index names, read with the parser under test (its own target checks it).
  SafetensorsIndex index;
  if (!fuzz::parses({ErrorKind::kCorruptData},
                    [&] { index = parse_safetensors_index(index_text, "index"); })) {
    return 0;
  }
  std::set<std::string> files;
  for (const auto& entry : index.weight_map) files.insert(entry.second);
  if (files.size() > 4) return 0;  // each is a file write: keep executions fast

  const fs::path folder = fuzz::temp_dir() / "sharded";
  fs::remove_all(folder);
  fs::create_directories(folder);
  for (const std::string& file : files) {
    // A name the index may hold but no file can have ("a/", "a/."): load_sharded must refuse
    // it; the folder simply lacks that file.
    std::error_code ec;
    fs::create_directories((folder / file).parent_path(), ec);
    std::ofstream out(folder / file, std::ios::binary);
    out.write(reinterpret_cast<const char*>(shard.data()),
              static_cast<std::streamsize>(shard.size()));
  }
  fuzz::write_file(folder / "model.safetensors.index.json",
                   {reinterpret_cast<const uint8_t*>(index_text.data()), index_text.size()});

  NamedTensors loaded;
  if (!fuzz::parses({ErrorKind::kCorruptData, ErrorKind::kNotSupported},
                    [&] { loaded = load_safetensors(folder); })) {
    return 0;
  }
  std::set<std::string> names;
  for (const auto& [name, tensor] : loaded) {
    fuzz::check(names.insert(name).second, "each tensor is loaded once");
    fuzz::check(tensor.nbytes() == 0 || tensor.data_ptr() != nullptr, "a tensor has its bytes");
  }
  fuzz::check(names.size() == index.weight_map.size(), "every tensor of the weight map is loaded");
  return 0;
}
