// The binary form of a Tree for the object collectives (docs/comm.md, "Object serialization").
// Integers are little-endian whatever the host; tensor payloads are the host's bytes, which
// braid only builds for little-endian hosts (checked below). The reader trusts nothing: every
// length is checked against what remains before anything is allocated.
#include <bit>
#include <cstring>
#include <string>

#include "braid/comm/object.h"
#include "braid/core/error.h"
#include "braid/tensor/shape_checks.h"

static_assert(std::endian::native == std::endian::little,
              "the Tree format stores tensor bytes in little-endian order");

namespace braid {
namespace {

constexpr uint8_t kMagic[4] = {'B', 'R', 'T', 'R'};
constexpr size_t kHeaderBytes = 16;  // magic, version, 3 reserved bytes, u64 payload length
constexpr int kMaxDepth = 512;

// Node tags, fixed by the format (not Tree::Kind's numbering, which may change).
enum Tag : uint8_t {
  kTagNone = 0,
  kTagBool = 1,
  kTagInt = 2,
  kTagDouble = 3,
  kTagString = 4,
  kTagTensor = 5,
  kTagList = 6,
  kTagMap = 7,
};

class Writer {
 public:
  std::vector<uint8_t> out;

  void u8(uint8_t v) { out.push_back(v); }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void bytes(const void* p, size_t n) {
    if (n == 0) return;
    const size_t at = out.size();
    out.resize(at + n);  // not insert(): GCC 12 sees an overflow in it that is not there
    std::memcpy(out.data() + at, p, n);
  }
  void str(std::string_view s) {
    u64(s.size());
    bytes(s.data(), s.size());
  }

  void tensor(const Tensor& t) {
    BRAID_CHECK(!t.device().is_meta(), kInvalidArgument, "serialize_tree: a meta tensor (shape ",
                shape_str(t.shape()), ") has no data to send");
    const Tensor host = t.to(kCPU).contiguous();
    const std::string_view name = dtype_name(host.dtype());
    u8(static_cast<uint8_t>(name.size()));
    bytes(name.data(), name.size());
    u32(static_cast<uint32_t>(host.dim()));
    for (int64_t d : host.shape()) u64(static_cast<uint64_t>(d));
    u64(host.nbytes());
    if (host.nbytes() > 0) bytes(host.data_ptr(), host.nbytes());
  }

  void node(const Tree& t) {
    switch (t.kind()) {
      case Tree::Kind::kNone:
        u8(kTagNone);
        return;
      case Tree::Kind::kBool:
        u8(kTagBool);
        u8(t.as_bool() ? 1 : 0);
        return;
      case Tree::Kind::kInt:
        u8(kTagInt);
        u64(static_cast<uint64_t>(t.as_int()));
        return;
      case Tree::Kind::kDouble:
        u8(kTagDouble);
        u64(std::bit_cast<uint64_t>(t.as_double()));
        return;
      case Tree::Kind::kString:
        u8(kTagString);
        str(t.as_string());
        return;
      case Tree::Kind::kTensor:
        u8(kTagTensor);
        tensor(t.tensor());
        return;
      case Tree::Kind::kList:
        u8(kTagList);
        u64(t.list().size());
        for (const Tree& child : t.list()) node(child);
        return;
      case Tree::Kind::kMap:
        u8(kTagMap);
        u64(t.map().size());
        for (const auto& [key, child] : t.map()) {
          str(key);
          node(child);
        }
        return;
    }
    BRAID_ASSERT(false, "unknown Tree kind ", static_cast<int>(t.kind()));
  }
};

class Reader {
 public:
  Reader(std::span<const uint8_t> in, size_t pos) : in_(in), pos_(pos) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return in_.size() - pos_; }

  void need(size_t n, std::string_view what) const {
    BRAID_CHECK(n <= remaining(), kCorruptData, "deserialize_tree: truncated at byte ", pos_, ": ",
                what, " needs ", n, " bytes, ", remaining(), " remain");
  }
  uint8_t u8(std::string_view what) {
    need(1, what);
    return in_[pos_++];
  }
  uint64_t u64(std::string_view what) {
    need(8, what);
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t{in_[pos_ + i]} << (8 * i);
    pos_ += 8;
    return v;
  }
  uint32_t u32(std::string_view what) {
    need(4, what);
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t{in_[pos_ + i]} << (8 * i);
    pos_ += 4;
    return v;
  }
  // A length that must fit in what remains (each counted item takes >= `min_item` bytes).
  uint64_t length(std::string_view what, uint64_t min_item = 1) {
    const size_t at = pos_;
    const uint64_t n = u64(what);
    BRAID_CHECK(n <= remaining() / min_item, kCorruptData, "deserialize_tree: ", what, " ", n,
                " at byte ", at, " is more than the ", remaining(), " bytes that remain");
    return n;
  }
  std::string str(std::string_view what) {
    const uint64_t n = length(what);
    std::string s(reinterpret_cast<const char*>(in_.data() + pos_), n);
    pos_ += n;
    return s;
  }

  Tensor tensor() {
    const size_t at = pos_;
    const uint8_t name_len = u8("dtype name length");
    need(name_len, "dtype name");
    std::string name(reinterpret_cast<const char*>(in_.data() + pos_), name_len);
    pos_ += name_len;
    auto dtype = dtype_from_name(name);
    BRAID_CHECK(dtype && dtype_name(*dtype) == name, kCorruptData,
                "deserialize_tree: unknown dtype '", name, "' in the tensor at byte ", at);
    const uint32_t ndim = u32("tensor rank");
    BRAID_CHECK(ndim <= remaining() / 8, kCorruptData, "deserialize_tree: tensor rank ", ndim,
                " at byte ", at, " is more than the remaining bytes can hold");
    Shape shape;
    int64_t numel = 1;
    for (uint32_t i = 0; i < ndim; ++i) {
      const uint64_t d = u64("tensor dimension");
      BRAID_CHECK(d <= (uint64_t{1} << 40), kCorruptData, "deserialize_tree: tensor dimension ", d,
                  " at byte ", pos_ - 8, " is implausibly large");
      shape.push_back(static_cast<int64_t>(d));
      numel = d == 0 ? 0 : (numel > (int64_t{1} << 48) / static_cast<int64_t>(d) ? -1 : numel * d);
      BRAID_CHECK(numel >= 0, kCorruptData, "deserialize_tree: tensor shape ", shape_str(shape),
                  " at byte ", at, " has too many elements");
    }
    BRAID_CHECK(strides_fit(shape), kCorruptData, "deserialize_tree: tensor shape ",
                shape_str(shape), " at byte ", at,
                " cannot be a tensor: its non-zero dimensions multiply past 2^63 - 1");
    const uint64_t nbytes = length("tensor byte count");
    const uint64_t expected = static_cast<uint64_t>(numel) * dtype_size(*dtype);
    BRAID_CHECK(nbytes == expected, kCorruptData, "deserialize_tree: tensor at byte ", at,
                " declares ", nbytes, " bytes, expected ", expected, " for ", name, " ",
                shape_str(shape));
    Tensor t = Tensor::empty(shape, *dtype);
    if (nbytes > 0) std::memcpy(t.data_ptr(), in_.data() + pos_, nbytes);
    if (*dtype == DType::kBool) {
      for (uint64_t i = 0; i < nbytes; ++i) {
        BRAID_CHECK(in_[pos_ + i] <= 1, kCorruptData, "deserialize_tree: bool tensor byte ",
                    pos_ + i, " holds ", int{in_[pos_ + i]}, ", expected 0 or 1");
      }
    }
    pos_ += nbytes;
    return t;
  }

  Tree node(int depth) {
    BRAID_CHECK(depth <= kMaxDepth, kCorruptData, "deserialize_tree: nesting deeper than ",
                kMaxDepth, " at byte ", pos_);
    const size_t at = pos_;
    const uint8_t tag = u8("node tag");
    switch (tag) {
      case kTagNone:
        return Tree();
      case kTagBool: {
        const uint8_t v = u8("bool");
        BRAID_CHECK(v <= 1, kCorruptData, "deserialize_tree: bool at byte ", at + 1, " holds ",
                    int{v}, ", expected 0 or 1");
        return Tree(v == 1);
      }
      case kTagInt:
        return Tree(static_cast<int64_t>(u64("int")));
      case kTagDouble:
        return Tree(std::bit_cast<double>(u64("double")));
      case kTagString:
        return Tree(str("string length"));
      case kTagTensor:
        return Tree(tensor());
      case kTagList: {
        const uint64_t n = length("list length");
        Tree::List items;
        items.reserve(n);
        for (uint64_t i = 0; i < n; ++i) items.push_back(node(depth + 1));
        return Tree(std::move(items));
      }
      case kTagMap: {
        const uint64_t n = length("map length", 9);  // key length + tag at least
        Tree::Map items;
        items.reserve(n);
        for (uint64_t i = 0; i < n; ++i) {
          std::string key = str("map key length");
          items.emplace_back(std::move(key), node(depth + 1));
        }
        return Tree(std::move(items));
      }
      default:
        BRAID_FAIL(kCorruptData, "deserialize_tree: unknown node tag ", int{tag}, " at byte ", at,
                   ", expected 0..7");
    }
  }

 private:
  std::span<const uint8_t> in_;
  size_t pos_;
};

}  // namespace

std::vector<uint8_t> serialize_tree(const Tree& tree) {
  Writer w;
  w.bytes(kMagic, sizeof(kMagic));
  w.u8(kTreeFormatVersion);
  w.u8(0);
  w.u8(0);
  w.u8(0);
  w.u64(0);  // payload length, patched below
  w.node(tree);
  const uint64_t payload = w.out.size() - kHeaderBytes;
  for (int i = 0; i < 8; ++i) w.out[8 + i] = static_cast<uint8_t>(payload >> (8 * i));
  return std::move(w.out);
}

Tree deserialize_tree(std::span<const uint8_t> bytes) {
  BRAID_CHECK(bytes.size() >= kHeaderBytes, kCorruptData, "deserialize_tree: ", bytes.size(),
              " bytes is shorter than the ", kHeaderBytes, "-byte header");
  BRAID_CHECK(std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) == 0, kCorruptData,
              "deserialize_tree: bad magic; expected \"BRTR\" at byte 0");
  BRAID_CHECK(bytes[4] == kTreeFormatVersion, kCorruptData, "deserialize_tree: format version ",
              int{bytes[4]}, ", expected ", int{kTreeFormatVersion});
  BRAID_CHECK(bytes[5] == 0 && bytes[6] == 0 && bytes[7] == 0, kCorruptData,
              "deserialize_tree: reserved header bytes 5..7 must be 0");
  Reader r(bytes, 8);
  const uint64_t payload = r.u64("payload length");
  BRAID_CHECK(payload == bytes.size() - kHeaderBytes, kCorruptData,
              "deserialize_tree: header declares ", payload, " payload bytes, the buffer holds ",
              bytes.size() - kHeaderBytes);
  Tree tree = r.node(0);
  BRAID_CHECK(r.remaining() == 0, kCorruptData, "deserialize_tree: ", r.remaining(),
              " trailing bytes after the tree, at byte ", r.pos());
  return tree;
}

}  // namespace braid
