// libFuzzer target: the object-collective format (deserialize_tree, comm/src/object_format.cc),
// what broadcast_object_list / all_gather_object receive from other ranks. The input is one
// serialized Tree. It is refused with kCorruptData naming the offset, or it decodes into a Tree
// that serialize_tree writes back as exactly the input (the format has one encoding per Tree).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "braid/comm/object.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace braid;
  Tree tree;
  if (!fuzz::parses({ErrorKind::kCorruptData},
                    [&] { tree = deserialize_tree(std::span<const uint8_t>(data, size)); })) {
    return 0;
  }
  const std::vector<uint8_t> written = serialize_tree(tree);
  fuzz::check(std::ranges::equal(written, std::span<const uint8_t>(data, size)),
              "a decoded Tree serializes back to its bytes");
  return 0;
}
