// Object collectives over the ProcessGroup's tensor collectives: serialize, exchange the byte
// counts, then the bytes padded to the largest count as u8 tensors, and deserialize.
#include <algorithm>
#include <cstring>

#include "braid/comm/object.h"
#include "braid/core/error.h"
#include "meta_backend.h"

namespace braid {
namespace {

// A u8 tensor of `padded` bytes holding `bytes` then zeros.
Tensor padded_bytes(const std::vector<uint8_t>& bytes, int64_t padded) {
  Tensor t = Tensor::zeros({padded}, DType::kU8);
  if (!bytes.empty()) std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

// Every rank's byte count, in rank order.
std::vector<int64_t> all_gather_sizes(ProcessGroup& pg, int64_t mine) {
  Tensor in = Tensor::full({1}, mine, DType::kI64);
  Tensor out = Tensor::empty({pg.size()}, DType::kI64);
  pg.all_gather_into(out, in);
  const int64_t* p = out.data<int64_t>();
  return std::vector<int64_t>(p, p + pg.size());
}

Tree parse_block(const Tensor& flat, int64_t offset, int64_t size) {
  const auto* base = static_cast<const uint8_t*>(flat.data_ptr()) + offset;
  return deserialize_tree(std::span<const uint8_t>(base, static_cast<size_t>(size)));
}

// A group of the meta backend simulates every rank in this process (meta_backend.h): each
// rank runs the same program, so each would contribute this rank's object.
bool simulated(const ProcessGroup& pg) {
  return pg.backend().name() == kMetaBackendName;
}

}  // namespace

void broadcast_object_list(ProcessGroup& pg, std::vector<Tree>& objects, int root) {
  if (simulated(pg)) return;  // the root's list is this rank's
  std::vector<uint8_t> bytes;
  if (pg.rank() == root) bytes = serialize_tree(Tree(objects));
  Tensor size = Tensor::full({1}, static_cast<int64_t>(bytes.size()), DType::kI64);
  pg.broadcast(size, root);
  const int64_t n = size.data<int64_t>()[0];
  Tensor payload = pg.rank() == root ? padded_bytes(bytes, n) : Tensor::empty({n}, DType::kU8);
  pg.broadcast(payload, root);
  if (pg.rank() == root) return;
  Tree received = parse_block(payload, 0, n);
  BRAID_CHECK(received.is_list(), kCorruptData, "broadcast_object_list: the root sent a ",
              tree_kind_name(received.kind()), ", expected a list");
  objects = received.list();
}

std::vector<Tree> all_gather_object(ProcessGroup& pg, const Tree& object) {
  if (simulated(pg)) return std::vector<Tree>(static_cast<size_t>(pg.size()), object);
  const std::vector<uint8_t> bytes = serialize_tree(object);
  const auto sizes = all_gather_sizes(pg, static_cast<int64_t>(bytes.size()));
  const int64_t padded = *std::max_element(sizes.begin(), sizes.end());
  Tensor in = padded_bytes(bytes, padded);
  Tensor out = Tensor::empty({pg.size() * padded}, DType::kU8);
  pg.all_gather_into(out, in);
  std::vector<Tree> result;
  for (int r = 0; r < pg.size(); ++r) result.push_back(parse_block(out, r * padded, sizes[r]));
  return result;
}

std::vector<Tree> gather_object(ProcessGroup& pg, const Tree& object, int root) {
  if (simulated(pg)) {
    return pg.rank() == root ? std::vector<Tree>(static_cast<size_t>(pg.size()), object)
                             : std::vector<Tree>();
  }
  const std::vector<uint8_t> bytes = serialize_tree(object);
  // Every rank needs the largest size: gather moves the same count from each rank.
  const auto sizes = all_gather_sizes(pg, static_cast<int64_t>(bytes.size()));
  const int64_t padded = *std::max_element(sizes.begin(), sizes.end());
  Tensor in = padded_bytes(bytes, padded);
  std::vector<Tensor> outputs;
  if (pg.rank() == root) {
    for (int r = 0; r < pg.size(); ++r) outputs.push_back(Tensor::empty({padded}, DType::kU8));
  }
  pg.gather(outputs, in, root);
  std::vector<Tree> result;
  for (size_t r = 0; r < outputs.size(); ++r) {
    result.push_back(parse_block(outputs[r], 0, sizes[r]));
  }
  return result;
}

}  // namespace braid
