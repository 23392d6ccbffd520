// libFuzzer target: a sharded checkpoint's index.json (parse_checkpoint_index,
// shard/src/checkpoint_index.cc). The input is the index's text. It parses into an index whose
// tensors' pieces tile [0, numel) in order, each in a listed file, and which
// format_checkpoint_index writes so that it parses back equal; or it is kCorruptData, or
// kNotSupported for a newer format version.
#include <cstddef>
#include <cstdint>

#include "checkpoint_internal.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace braid;
  using namespace braid::shard::detail;
  CheckpointIndex index;
  if (!fuzz::parses({ErrorKind::kCorruptData, ErrorKind::kNotSupported}, [&] {
        index = parse_checkpoint_index(fuzz::as_text(data, size), "index.json");
      })) {
    return 0;
  }
  for (const auto& [name, t] : index.tensors) {
    int64_t next = 0;
    for (const IndexPiece& p : t.pieces) {
      fuzz::check(p.offset == next && p.count > 0, "pieces tile the tensor in order");
      fuzz::check(index.files.contains(p.file), "a piece's file is listed");
      next += p.count;
    }
    fuzz::check(next == t.numel, "pieces cover the whole tensor");
  }
  const std::string written = format_checkpoint_index(index);
  CheckpointIndex back;
  fuzz::check(fuzz::parses({}, [&] { back = parse_checkpoint_index(written, "written.json"); }),
              "the written index parses");
  fuzz::check(back == index, "the index survives a round trip");
  return 0;
}
