// Tree access and Accelerate's nested-structure helpers.
#include "braid/tensor/tree.h"

#include "braid/core/error.h"
#include "braid/tensor/ops.h"

namespace braid {

std::string_view tree_kind_name(Tree::Kind kind) {
  switch (kind) {
    case Tree::Kind::kNone:
      return "none";
    case Tree::Kind::kBool:
      return "bool";
    case Tree::Kind::kInt:
      return "int";
    case Tree::Kind::kDouble:
      return "double";
    case Tree::Kind::kString:
      return "string";
    case Tree::Kind::kTensor:
      return "tensor";
    case Tree::Kind::kList:
      return "list";
    case Tree::Kind::kMap:
      return "map";
  }
  return "?";
}

namespace {

template <typename T>
const T& get_as(const auto& value, Tree::Kind want, Tree::Kind have) {
  BRAID_CHECK(std::holds_alternative<T>(value), kInvalidArgument, "tree: expected a ",
              tree_kind_name(want), ", got a ", tree_kind_name(have));
  return std::get<T>(value);
}

std::string key_list(const Tree::Map& m) {
  std::string keys;
  for (const auto& [k, v] : m) keys += (keys.empty() ? "" : ", ") + k;
  return keys.empty() ? "(none)" : keys;
}

}  // namespace

const Tensor& Tree::tensor() const {
  return get_as<Tensor>(value_, Kind::kTensor, kind());
}
bool Tree::as_bool() const {
  return get_as<bool>(value_, Kind::kBool, kind());
}
int64_t Tree::as_int() const {
  return get_as<int64_t>(value_, Kind::kInt, kind());
}
double Tree::as_double() const {
  if (kind() == Kind::kInt) return static_cast<double>(std::get<int64_t>(value_));
  return get_as<double>(value_, Kind::kDouble, kind());
}
const std::string& Tree::as_string() const {
  return get_as<std::string>(value_, Kind::kString, kind());
}
const Tree::List& Tree::list() const {
  return get_as<List>(value_, Kind::kList, kind());
}
Tree::List& Tree::list() {
  return const_cast<List&>(std::as_const(*this).list());
}
const Tree::Map& Tree::map() const {
  return get_as<Map>(value_, Kind::kMap, kind());
}
Tree::Map& Tree::map() {
  return const_cast<Map&>(std::as_const(*this).map());
}

const Tree& Tree::at(std::string_view key) const {
  const Map& m = map();
  for (const auto& [k, v] : m) {
    if (k == key) return v;
  }
  BRAID_FAIL(kOutOfRange, "tree: no key '", key, "' (keys: ", key_list(m), ")");
}
Tree& Tree::at(std::string_view key) {
  return const_cast<Tree&>(std::as_const(*this).at(key));
}

bool Tree::contains(std::string_view key) const {
  for (const auto& [k, v] : map()) {
    if (k == key) return true;
  }
  return false;
}

void Tree::set(std::string key, Tree value) {
  if (is_none()) value_ = Map{};
  Map& m = map();
  for (auto& [k, v] : m) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  m.emplace_back(std::move(key), std::move(value));
}

const Tree& Tree::at(size_t index) const {
  const List& l = list();
  BRAID_CHECK(index < l.size(), kOutOfRange, "tree: index ", index,
              " is out of range for a list of ", l.size());
  return l[index];
}
Tree& Tree::at(size_t index) {
  return const_cast<Tree&>(std::as_const(*this).at(index));
}

size_t Tree::size() const {
  if (is_list()) return list().size();
  if (is_map()) return map().size();
  return 0;
}

// ---- helpers -------------------------------------------------------------------------------

Tree recursively_apply(const std::function<Tree(const Tree&)>& fn, const Tree& data,
                       const std::function<bool(const Tree&)>& test, bool error_on_other_type) {
  if (data.is_list()) {
    Tree::List out;
    out.reserve(data.size());
    for (const Tree& t : data.list())
      out.push_back(recursively_apply(fn, t, test, error_on_other_type));
    return Tree(std::move(out));
  }
  if (data.is_map()) {
    Tree::Map out;
    out.reserve(data.size());
    for (const auto& [k, v] : data.map()) {
      out.emplace_back(k, recursively_apply(fn, v, test, error_on_other_type));
    }
    return Tree(std::move(out));
  }
  const bool applies = test ? test(data) : data.is_tensor();
  if (applies) return fn(data);
  BRAID_CHECK(!error_on_other_type, kInvalidArgument, "recursively_apply: found a leaf of kind ",
              tree_kind_name(data.kind()), " that the function does not accept");
  return data;
}

Tree map_tensors(const Tree& data, const std::function<Tensor(const Tensor&)>& fn) {
  return recursively_apply([&](const Tree& leaf) { return Tree(fn(leaf.tensor())); }, data);
}

namespace {

bool skipped(const std::string& key, const std::vector<std::string>& skip_keys) {
  for (const std::string& s : skip_keys) {
    if (s == key) return true;
  }
  return false;
}

}  // namespace

Tree send_to_device(const Tree& data, Device device, const std::vector<std::string>& skip_keys) {
  if (data.is_map()) {
    Tree::Map out;
    for (const auto& [k, v] : data.map()) {
      out.emplace_back(k, skipped(k, skip_keys) ? v : send_to_device(v, device, skip_keys));
    }
    return Tree(std::move(out));
  }
  if (data.is_list()) {
    Tree::List out;
    for (const Tree& t : data.list()) out.push_back(send_to_device(t, device, skip_keys));
    return Tree(std::move(out));
  }
  if (data.is_tensor()) return Tree(data.tensor().to(device));
  return data;
}

Tree convert_to_fp32(const Tree& data) {
  return map_tensors(data, [](const Tensor& t) {
    return (t.dtype() == DType::kF16 || t.dtype() == DType::kBF16) ? t.to(DType::kF32) : t;
  });
}

namespace {

Tree listify_values(const std::vector<double>& values, const Shape& shape, size_t d, int64_t& at,
                    bool integral) {
  if (d == shape.size()) {
    const double v = values[static_cast<size_t>(at++)];
    return integral ? Tree(static_cast<int64_t>(v)) : Tree(v);
  }
  Tree::List out;
  out.reserve(static_cast<size_t>(shape[d]));
  for (int64_t i = 0; i < shape[d]; ++i)
    out.push_back(listify_values(values, shape, d + 1, at, integral));
  return Tree(std::move(out));
}

}  // namespace

Tree listify(const Tree& data) {
  return recursively_apply(
      [](const Tree& leaf) {
        const Tensor& t = leaf.tensor();
        int64_t at = 0;
        return listify_values(t.to_vector(), t.shape(), 0, at, !is_floating(t.dtype()));
      },
      data);
}

Tree concatenate(const std::vector<Tree>& data, int dim) {
  BRAID_CHECK(!data.empty(), kInvalidArgument, "concatenate: expected at least one tree");
  if (data.size() == 1) return data.front();  // the seed: one batch is returned unchanged
  const Tree& first = data.front();
  if (first.is_list()) {
    Tree::List out;
    for (size_t i = 0; i < first.size(); ++i) {
      std::vector<Tree> column;
      for (size_t j = 0; j < data.size(); ++j) {
        BRAID_CHECK(data[j].is_list() && data[j].size() == first.size(), kInvalidArgument,
                    "concatenate: tree ", j, " does not have the structure of tree 0 (a list of ",
                    first.size(), ")");
        column.push_back(data[j].list()[i]);
      }
      out.push_back(concatenate(column, dim));
    }
    return Tree(std::move(out));
  }
  if (first.is_map()) {
    Tree::Map out;
    for (const auto& [k, v] : first.map()) {
      std::vector<Tree> column;
      for (size_t j = 0; j < data.size(); ++j) {
        BRAID_CHECK(data[j].is_map() && data[j].contains(k), kInvalidArgument, "concatenate: tree ",
                    j, " has no key '", k, "' that tree 0 has");
        column.push_back(data[j].at(k));
      }
      out.emplace_back(k, concatenate(column, dim));
    }
    return Tree(std::move(out));
  }
  BRAID_CHECK(first.is_tensor(), kInvalidArgument,
              "concatenate: can only concatenate tensors, got a ", tree_kind_name(first.kind()));
  std::vector<Tensor> tensors;
  for (size_t j = 0; j < data.size(); ++j) {
    BRAID_CHECK(data[j].is_tensor(), kInvalidArgument, "concatenate: item ", j, " is a ",
                tree_kind_name(data[j].kind()), ", expected a tensor like item 0");
    tensors.push_back(data[j].tensor());
  }
  return Tree(cat(tensors, dim));
}

Tree slice_tensors(const Tree& data, int64_t start, int64_t end, int64_t step) {
  return map_tensors(data, [&](const Tensor& t) { return t.slice(0, start, end, step); });
}

int64_t find_batch_size(const Tree& data) {
  if (data.is_list() || data.is_map()) {
    BRAID_CHECK(data.size() > 0, kInvalidArgument,
                "find_batch_size: cannot find the batch size from an empty ",
                tree_kind_name(data.kind()));
    return find_batch_size(data.is_list() ? data.list().front() : data.map().front().second);
  }
  BRAID_CHECK(data.is_tensor(), kInvalidArgument,
              "find_batch_size: can only find the batch size of tensors, got a ",
              tree_kind_name(data.kind()));
  const Tensor& t = data.tensor();
  BRAID_CHECK(t.dim() > 0, kInvalidArgument, "find_batch_size: the first tensor is 0-d");
  return t.size(0);
}

}  // namespace braid
