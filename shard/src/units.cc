// make_units: which parameters are gathered and reduced together (FSDP's auto-wrap), and the
// flat layout of each unit (docs/sharding.md, "Units").
#include "braid/shard/units.h"

#include <algorithm>
#include <map>
#include <set>

#include "braid/core/error.h"

namespace braid::shard {

int64_t padded_numel(int64_t numel, int world_size) {
  BRAID_CHECK(numel >= 0 && world_size >= 1, kInvalidArgument, "padded_numel: numel ", numel,
              " and world_size ", world_size, " must be >= 0 and >= 1");
  const int64_t grain = kChunk * world_size;
  return (numel + grain - 1) / grain * grain;
}

ShardInfo shard_info(int64_t padded, int world_size, int rank) {
  BRAID_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, kInvalidArgument,
              "shard_info: rank ", rank, " is outside a world of ", world_size);
  BRAID_CHECK(padded >= 0 && padded % world_size == 0, kInvalidArgument, "shard_info: ", padded,
              " elements do not split evenly over ", world_size, " ranks");
  const int64_t count = padded / world_size;
  return ShardInfo{count * rank, count};
}

WrapKind parse_wrap_kind(std::string_view name) {
  if (name == "transformer_based_wrap") return WrapKind::kTransformerBased;
  if (name == "size_based_wrap") return WrapKind::kSizeBased;
  if (name == "no_wrap") return WrapKind::kNoWrap;
  BRAID_FAIL(kInvalidArgument, "auto_wrap_policy '", name,
             "' is not one of transformer_based_wrap, size_based_wrap, no_wrap");
}

namespace {

bool starts_with_path(const std::string& name, const std::string& prefix) {
  if (prefix.empty()) return true;
  return name == prefix ||
         (name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0 &&
          name[prefix.size()] == '.');
}

std::string join_path(const std::string& a, const std::string& b) {
  return a.empty() ? b : b.empty() ? a : a + "." + b;
}

// The unit candidates of the subtree at `path` in post-order; returns the number of
// parameter elements of the subtree that no candidate below took (size-based wrap).
int64_t visit(nn::Module& m, const std::string& path, const WrapPolicy& policy,
              const std::set<std::string>& ignored, std::vector<std::string>& out) {
  if (ignored.count(path)) return 0;
  int64_t unwrapped = 0;
  for (auto& [name, p] : m.named_parameters(/*remove_duplicate=*/false)) {
    // Only the module's own parameters: named_parameters recurses, so count direct ones.
    if (name.find('.') == std::string::npos) unwrapped += p.data().numel();
  }
  for (auto& [child_name, child] : m.named_children()) {
    unwrapped += visit(*child, join_path(path, child_name), policy, ignored, out);
  }
  if (path.empty()) return unwrapped;  // the root is always the last unit
  bool wrap = false;
  if (policy.kind == WrapKind::kTransformerBased) {
    const auto& names = policy.transformer_cls_names_to_wrap;
    wrap = std::find(names.begin(), names.end(), m.type_name()) != names.end();
  } else if (policy.kind == WrapKind::kSizeBased) {
    // Containers without a forward (ModuleList) are never wrapped, as FSDP's size policy
    // excludes nn.ModuleList; their parameters count towards the parent.
    wrap = unwrapped >= policy.min_num_params && dynamic_cast<nn::Layer*>(&m) != nullptr;
  }
  if (!wrap) return unwrapped;
  out.push_back(path);
  return 0;
}

}  // namespace

std::vector<Unit> make_units(nn::Module& root, const WrapPolicy& policy, int world_size) {
  BRAID_CHECK(world_size >= 1, kInvalidArgument, "make_units: world_size ", world_size,
              " must be >= 1");
  if (policy.kind == WrapKind::kSizeBased) {
    BRAID_CHECK(policy.min_num_params > 0, kInvalidArgument,
                "size_based_wrap: min_num_params must be positive, got ", policy.min_num_params);
  }
  std::set<std::string> ignored(policy.ignored_modules.begin(), policy.ignored_modules.end());
  for (const auto& path : ignored) root.get_submodule(path);  // kOutOfRange for unknown paths

  std::vector<std::string> unit_paths;
  visit(root, "", policy, ignored, unit_paths);
  unit_paths.push_back("");  // the root

  // Each parameter handle goes to the innermost unit containing its first name; a handle
  // whose names fall under different units goes to the root.
  const auto all = root.named_parameters(/*remove_duplicate=*/false);
  const auto owner_of = [&](const std::string& name) -> size_t {
    size_t best = unit_paths.size() - 1;  // the root
    size_t best_len = 0;
    for (size_t u = 0; u + 1 < unit_paths.size(); ++u) {
      const auto& p = unit_paths[u];
      if (starts_with_path(name, p) && p.size() >= best_len) {
        best = u;
        best_len = p.size();
      }
    }
    return best;
  };
  std::map<const void*, size_t> owner;  // handle -> unit
  std::map<const void*, std::string> first_name;
  for (auto& [name, p] : all) {
    bool skip = false;
    for (const auto& ig : ignored) skip = skip || starts_with_path(name, ig);
    if (skip) continue;
    const size_t u = owner_of(name);
    auto it = owner.find(p.id());
    if (it == owner.end()) {
      owner[p.id()] = u;
      first_name[p.id()] = name;
    } else if (it->second != u) {
      it->second = unit_paths.size() - 1;  // tied across units: the root keeps it
    }
  }

  std::vector<Unit> units(unit_paths.size());
  for (size_t u = 0; u < unit_paths.size(); ++u) {
    units[u].name = unit_paths[u];
    auto* layer = dynamic_cast<nn::Layer*>(&root.get_submodule(unit_paths[u]));
    BRAID_CHECK(layer != nullptr, kInvalidArgument, "make_units: module '",
                unit_paths[u].empty() ? std::string("<root>") : unit_paths[u], "' (",
                root.get_submodule(unit_paths[u]).type_name(),
                ") would be a unit but is not a Layer: its forward / backward cannot drive "
                "gathering and reduction");
    units[u].layer = layer;
  }
  std::set<const void*> placed;
  for (auto& [name, p] : all) {
    auto it = owner.find(p.id());
    if (it == owner.end() || placed.count(p.id())) continue;
    placed.insert(p.id());
    Unit& unit = units[it->second];
    UnitParam up{first_name[p.id()], p, p.data().shape(), unit.numel, p.data().numel()};
    unit.numel += up.numel;
    unit.params.push_back(std::move(up));
  }
  std::vector<Unit> out;
  for (size_t u = 0; u < units.size(); ++u) {
    if (units[u].params.empty() && u + 1 < units.size()) continue;
    units[u].padded = padded_numel(units[u].numel, world_size);
    out.push_back(std::move(units[u]));
  }
  return out;
}

}  // namespace braid::shard
