// SPDX-License-Identifier: Apache-2.0
// Tree: a nested list / string-keyed map of Tensors and plain values (none, bool, int,
// double, string). Batches, state dicts and Accelerate's "nested list/tuple/dict of tensors"
// all use it. Maps keep insertion order, as Python dicts do.
//
// The helpers below follow Accelerate's data-operation utilities (the seed page):
// recursively_apply, send_to_device (skip_keys), convert_to_fp32, listify, concatenate,
// slice_tensors, find_batch_size.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "braid/tensor/tensor.h"

namespace braid {

class Tree {
 public:
  using List = std::vector<Tree>;
  using Map = std::vector<std::pair<std::string, Tree>>;  // insertion-ordered
  enum class Kind : uint8_t { kNone, kBool, kInt, kDouble, kString, kTensor, kList, kMap };

  Tree() = default;
  Tree(Tensor t) : value_(std::move(t)) {}          // NOLINT: implicit by design
  Tree(bool v) : value_(v) {}                       // NOLINT
  Tree(int v) : value_(static_cast<int64_t>(v)) {}  // NOLINT
  Tree(int64_t v) : value_(v) {}                    // NOLINT
  Tree(double v) : value_(v) {}                     // NOLINT
  Tree(std::string v) : value_(std::move(v)) {}     // NOLINT
  Tree(const char* v) : value_(std::string(v)) {}   // NOLINT
  Tree(List v) : value_(std::move(v)) {}            // NOLINT
  Tree(Map v) : value_(std::move(v)) {}             // NOLINT

  static Tree list(std::initializer_list<Tree> items) { return Tree(List(items)); }
  static Tree map(std::initializer_list<std::pair<std::string, Tree>> items) {
    return Tree(Map(items));
  }

  Kind kind() const { return static_cast<Kind>(value_.index()); }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_tensor() const { return kind() == Kind::kTensor; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_map() const { return kind() == Kind::kMap; }
  bool is_leaf() const { return !is_list() && !is_map(); }

  // Typed access; a wrong kind throws kInvalidArgument naming both kinds.
  const Tensor& tensor() const;
  bool as_bool() const;
  int64_t as_int() const;
  double as_double() const;  // ints convert
  const std::string& as_string() const;
  const List& list() const;
  List& list();
  const Map& map() const;
  Map& map();

  // Map access: throws kOutOfRange naming the key and the keys present.
  const Tree& at(std::string_view key) const;
  Tree& at(std::string_view key);
  bool contains(std::string_view key) const;
  // Inserts or replaces (keeps the original position when replacing).
  void set(std::string key, Tree value);
  // List access: throws kOutOfRange. Both constnesses, so that `tree.at(0)` on a mutable
  // tree is the index, never the key overload with the literal 0 taken as a null pointer.
  const Tree& at(size_t index) const;
  Tree& at(size_t index);
  // Children count of a list or map; 0 for leaves.
  size_t size() const;

 private:
  std::variant<std::monostate, bool, int64_t, double, std::string, Tensor, List, Map> value_;
};

std::string_view tree_kind_name(Tree::Kind kind);

// Applies fn to every tensor leaf (or every leaf for which `test` is true), rebuilding the
// same structure. Leaves fn is not applied to are kept as they are, or throw
// kInvalidArgument when error_on_other_type is set (Accelerate's recursively_apply).
Tree recursively_apply(const std::function<Tree(const Tree&)>& fn, const Tree& data,
                       const std::function<bool(const Tree&)>& test = {},
                       bool error_on_other_type = false);
// Tensor-only convenience form.
Tree map_tensors(const Tree& data, const std::function<Tensor(const Tensor&)>& fn);

// Moves every tensor to `device`, except map entries whose key is in skip_keys (at any
// depth), which stay where they are.
Tree send_to_device(const Tree& data, Device device,
                    const std::vector<std::string>& skip_keys = {});
// f16 and bf16 tensors become f32; everything else is unchanged.
Tree convert_to_fp32(const Tree& data);
// Tensors become nested lists of numbers (a 0-d tensor becomes a number): ints for integer
// and bool dtypes, doubles for floats.
Tree listify(const Tree& data);
// Concatenates a list of trees of the same structure, tensor by tensor along `dim`. One
// element is returned as is. A non-tensor leaf throws kInvalidArgument.
Tree concatenate(const std::vector<Tree>& data, int dim = 0);
// Slices dimension 0 of every tensor: tensor[start:end:step]; other leaves are kept.
Tree slice_tensors(const Tree& data, int64_t start, int64_t end, int64_t step = 1);
// The size of dimension 0 of the first tensor found (depth first). An empty list / map or a
// non-tensor leaf on the way throws kInvalidArgument, as Accelerate does.
int64_t find_batch_size(const Tree& data);

}  // namespace braid
