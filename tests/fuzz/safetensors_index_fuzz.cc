// libFuzzer target: model.safetensors.index.json (parse_safetensors_index, tensor/src/
// sharded.cc), and the max_shard_size text (parse_size). The input is the index's text. An
// index that parses must name each tensor once, with a relative file name without "..", and
// format_safetensors_index must write it so that it parses back equal; anything else is
// kCorruptData. The same bytes as a size either parse or are kInvalidArgument.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <set>
#include <string>

#include "braid/tensor/safetensors.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace braid;
  const std::string_view text = fuzz::as_text(data, size);
  fuzz::parses({ErrorKind::kInvalidArgument}, [&] { (void)parse_size(text); });

  SafetensorsIndex index;
  if (!fuzz::parses({ErrorKind::kCorruptData},
                    [&] { index = parse_safetensors_index(text, "input.json"); })) {
    return 0;
  }
  std::set<std::string> names;
  for (const auto& [name, file] : index.weight_map) {
    fuzz::check(names.insert(name).second, "each tensor is named once");
    fuzz::check(!file.empty() && file.front() != '/', "file names are relative");
    for (const auto& part : std::filesystem::path(file)) {
      fuzz::check(part != "..", "file names do not climb out of the folder");
    }
  }
  const std::string written = format_safetensors_index(index);
  SafetensorsIndex back;
  fuzz::check(fuzz::parses({}, [&] { back = parse_safetensors_index(written, "written.json"); }),
              "the written index parses");
  fuzz::check(back.total_size == index.total_size, "total_size survives a round trip");
  fuzz::check(std::set(back.weight_map.begin(), back.weight_map.end()) ==
                  std::set(index.weight_map.begin(), index.weight_map.end()),
              "the weight map survives a round trip");
  return 0;
}
