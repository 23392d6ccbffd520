// infer_auto_device_map and its helpers (Accelerate's utils/modeling.py): the greedy placement
// of a model's modules over GPU, CPU and disk memory, tied parameters kept together.
#include <algorithm>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "big_model_internal.h"
#include "braid/accel/big_model.h"
#include "braid/core/error.h"
#include "braid/core/logging.h"

namespace braid::accel {

using detail::is_within;

std::string device_for(const DeviceMap& device_map, std::string_view name) {
  const std::pair<std::string, std::string>* best = nullptr;
  for (const auto& entry : device_map) {
    if (is_within(name, entry.first) && (!best || entry.first.size() > best->first.size())) {
      best = &entry;
    }
  }
  BRAID_CHECK(best != nullptr, kInvalidArgument, "the device map gives no device for '", name,
              "' (no entry is that name or a dotted prefix of it, and there is no \"\" entry)");
  return best->second;
}

// ---- clean_device_map --------------------------------------------------------------------

namespace {

// Python dict semantics on an ordered vector: erase keeps order, a new key goes at the end.
void clean_into(DeviceMap& map, const std::string& module_name) {
  const std::string prefix = module_name.empty() ? "" : module_name + ".";
  std::vector<std::string> values;
  for (const auto& [k, v] : map) {
    if (k.starts_with(prefix)) values.push_back(v);
  }
  const bool one_device =
      values.size() > 1 && std::all_of(values.begin(), values.end(),
                                       [&](const std::string& v) { return v == values[0]; });
  if (one_device) {
    const std::string device = values[0];
    std::erase_if(map, [&](const auto& e) { return e.first.starts_with(prefix); });
    auto it =
        std::find_if(map.begin(), map.end(), [&](const auto& e) { return e.first == module_name; });
    if (it != map.end()) {
      it->second = device;
    } else {
      map.emplace_back(module_name, device);
    }
  }
  const size_t depth =
      module_name.empty()
          ? 1
          : static_cast<size_t>(std::count(module_name.begin(), module_name.end(), '.')) + 2;
  std::vector<std::string> children;  // first-appearance order
  for (const auto& [k, v] : map) {
    if (!k.starts_with(prefix) || k.size() <= module_name.size()) continue;
    size_t cut = 0;
    for (size_t parts = 0; parts < depth && cut != std::string::npos; ++parts) {
      cut = k.find('.', parts == 0 ? 0 : cut + 1);
    }
    std::string child = cut == std::string::npos ? k : k.substr(0, cut);
    if (std::find(children.begin(), children.end(), child) == children.end()) {
      children.push_back(std::move(child));
    }
  }
  for (const std::string& child : children) clean_into(map, child);
}

}  // namespace

DeviceMap clean_device_map(DeviceMap device_map) {
  clean_into(device_map, "");
  return device_map;
}

void check_device_map(nn::Module& model, const DeviceMap& device_map) {
  std::vector<std::string> uncovered;
  for (const auto& entry : model.state_dict()) {
    const std::string& name = entry.first;  // clang 15 cannot capture a structured binding
    const bool covered = std::any_of(device_map.begin(), device_map.end(),
                                     [&](const auto& e) { return is_within(name, e.first); });
    if (!covered) uncovered.push_back(name);
  }
  if (uncovered.empty()) return;
  std::ostringstream list;
  for (size_t i = 0; i < uncovered.size(); ++i) list << (i ? ", " : "") << uncovered[i];
  BRAID_FAIL(
      kInvalidArgument,
      "the device map provided does not give any device for the following tensors: ", list.str());
}

// ---- infer_auto_device_map ---------------------------------------------------------------

// Note [Device map planning]: Accelerate's greedy loop, kept branch for branch so its maps can be
// compared (golden_test.cc). Each step takes the first item; in order it is placed (with its tied
// partners) if it fits beside the reserve for the largest remaining layer, or one of its tied
// partners is split, or the item itself is split, or (fallback_allocation, empty device) a later
// item that fits is moved in front; otherwise the device is closed (its reserve counted as used)
// and the item is tried on the next one. The largest remaining layer is recomputed after every
// split and whenever the layers that realized it are all gone.

namespace {

using Item = std::pair<std::string, nn::Module*>;

bool in_list(const std::vector<std::string>& list, const std::string& s) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

struct WithTies {
  int64_t size = 0;
  std::vector<std::string> names;  // the items holding the tied partners
  std::vector<nn::Module*> modules;
};

// The size of `module_size` plus the items that hold `tied_params` (each item once). Sizes count
// a shared tensor once, under its first name, and the items are disjoint subtrees, so the sum
// is the size of the union. A partner no longer in `items` was placed already and adds nothing.
WithTies size_with_ties(const std::vector<std::string>& tied_params, int64_t module_size,
                        const detail::TensorSizes& sizes, const std::vector<Item>& items) {
  WithTies out;
  out.size = module_size;
  for (const std::string& p : tied_params) {
    auto it = std::find_if(items.begin(), items.end(),
                           [&](const Item& item) { return is_within(p, item.first); });
    if (it == items.end() || in_list(out.names, it->first)) continue;
    out.names.push_back(it->first);
    out.modules.push_back(it->second);
    out.size += sizes.at(it->first);
  }
  return out;
}

// Tied partners of `name` that live outside it: for each group with names both inside and
// outside, the outside ones.
std::vector<std::string> tied_outside(const std::string& name,
                                      const std::vector<std::vector<std::string>>& tied) {
  std::vector<std::string> out;
  for (const auto& group : tied) {
    const bool any_in = std::any_of(group.begin(), group.end(),
                                    [&](const std::string& k) { return is_within(k, name); });
    const bool all_in = std::all_of(group.begin(), group.end(),
                                    [&](const std::string& k) { return is_within(k, name); });
    if (!any_in || all_in) continue;
    for (const std::string& k : group) {
      if (!is_within(k, name)) out.push_back(k);
    }
  }
  return out;
}

bool is_no_split(const nn::Module* m, const std::vector<std::string>& classes) {
  return m != nullptr && in_list(classes, m->type_name());
}

// A module's parameters, children and buffers as items (the split of `name`).
std::vector<Item> split_items(const std::string& name, nn::Module* module) {
  return detail::direct_members(*module, name, /*with_buffers=*/true);
}

LayerSize max_layer(const std::vector<Item>& items, const ModuleSizes& sizes,
                    const std::vector<std::string>& no_split) {
  NamedModuleRefs modules;
  for (const Item& item : items) {
    if (item.second) modules.push_back(item);
  }
  return get_max_layer_size(modules, sizes, no_split);
}

struct Fallback {
  bool found = false;
  Item item;
  std::vector<Item> rest;
};

// Accelerate's fallback_allocate: breadth first over `items` (splitting what may be split), the
// first module whose size with its ties fits `limit`; it is taken out of `items`, whose
// ancestors on the list are replaced by their members.
Fallback fallback_allocate(std::vector<Item> items, const detail::TensorSizes& sizes, int64_t limit,
                           const std::vector<std::string>& no_split,
                           const std::vector<std::vector<std::string>>& tied) {
  std::vector<Item> search = items;
  std::string found_name;
  bool found = false;
  while (!search.empty()) {
    Item item = search.front();
    search.erase(search.begin());
    const auto ties = tied_outside(item.first, tied);
    if (size_with_ties(ties, sizes.at(item.first), sizes, search).size <= limit) {
      found_name = item.first;
      found = true;
      break;
    }
    if (!item.second || item.second->named_children().empty() ||
        is_no_split(item.second, no_split)) {
      continue;
    }
    std::vector<Item> members = split_items(item.first, item.second);
    search.insert(search.begin(), members.begin(), members.end());
  }
  Fallback out;
  if (!found) return out;
  // Replace each ancestor of the found item that is on the list by its members.
  for (size_t dot = found_name.find('.'); dot != std::string::npos;
       dot = found_name.find('.', dot + 1)) {
    const std::string parent = found_name.substr(0, dot);
    auto it =
        std::find_if(items.begin(), items.end(), [&](const Item& i) { return i.first == parent; });
    if (it == items.end() || !it->second) continue;
    std::vector<Item> members = split_items(parent, it->second);
    it = items.erase(it);
    items.insert(it, members.begin(), members.end());
  }
  auto it = std::find_if(items.begin(), items.end(),
                         [&](const Item& i) { return i.first == found_name; });
  BRAID_ASSERT(it != items.end(), "fallback module ", found_name, " not on the list");
  out.found = true;
  out.item = *it;
  items.erase(it);
  out.rest = std::move(items);
  return out;
}

int64_t buffer_bytes(nn::Module& module, const DeviceMapOptions& options) {
  return detail::tensor_sizes(module, options.dtype, options.special_dtypes, /*buffers_only=*/true)
      .at("");
}

// The state of one infer_auto_device_map run (Note [Device map planning]: Accelerate's loop,
// one method per branch). items: what is left to place, in order; current: the device filled.
class Planner {
 public:
  Planner(nn::Module& model, const std::optional<MaxMemory>& max_memory,
          const DeviceMapOptions& options)
      : options_(options),
        no_split_(options.no_split_module_classes),
        sizes_(detail::tensor_sizes(model, options.dtype, options.special_dtypes, false)),
        size_map_(sizes_.bytes.begin(), sizes_.bytes.end()),
        tied_(nn::find_tied_parameters(model)),
        items_(detail::direct_members(model, "", /*with_buffers=*/true)) {
    for (const DeviceBudget& b : get_max_memory(max_memory)) {
      devices_.push_back(b.device);
      limit_[b.device] = b.bytes;
    }
    if (!in_list(devices_, "disk")) devices_.push_back("disk");
    for (const std::string& d : devices_) {
      if (d != "cpu" && d != "disk") gpus_.push_back(d);
    }
    // Devices that keep room to bring back the largest offloaded layer.
    main_devices_ =
        gpus_.empty() ? std::vector<std::string>{"cpu"} : std::vector<std::string>{gpus_[0], "cpu"};
    max_layer_ = get_max_layer_size(items_, size_map_, no_split_);
  }

  DeviceMap run() {
    while (!items_.empty()) step();
    report();
    return options_.clean_result ? clean_device_map(std::move(map_)) : std::move(map_);
  }

 private:
  // What the loop knows about the item it treats.
  struct Step {
    Item item;
    int64_t size = 0;
    std::vector<std::string> ties;  // tied parameters outside the item
    WithTies with_ties;
    std::string device;
    bool unlimited = false;
    int64_t max_size = 0;  // the device's limit less the reserve
    int64_t reserved = 0;
  };

  void say(const std::string& line) const {
    if (options_.verbose) std::cout << line << "\n";
  }

  void refresh_max_layer() { max_layer_ = max_layer(items_, size_map_, no_split_); }

  void step() {
    Step s;
    s.item = items_.front();
    items_.erase(items_.begin());
    const std::string& name = s.item.first;
    say("\nTreating module " + name + ".");
    // The largest remaining layer may have changed now that this one is taken.
    std::erase_if(max_layer_.names, [&](const std::string& n) { return is_within(n, name); });
    if (max_layer_.names.empty()) refresh_max_layer();

    s.size = sizes_.at(name);
    s.ties = tied_outside(name, tied_);
    s.device = devices_[current_];
    s.unlimited = s.device == "disk";
    s.max_size = s.unlimited ? 0 : limit_[s.device];
    if (in_list(main_devices_, s.device)) {
      s.max_size -= max_layer_.size;
      s.reserved = max_layer_.size;
    }
    s.with_ties = size_with_ties(s.ties, s.size, sizes_, items_);

    if (s.unlimited || used_[s.device] + s.with_ties.size <= s.max_size) return place(s);
    if (!s.ties.empty() && used_[s.device] + s.size <= s.max_size && split_tied(s)) return;
    if (used_[s.device] + s.size >= s.max_size && split_item(s)) return;
    if (used_[s.device] == 0 && options_.fallback_allocation && place_fallback_first(s)) return;
    next_device(s);
  }

  // The item and its tied partners go on the device.
  void place(const Step& s) {
    const std::string& name = s.item.first;
    std::ostringstream line;
    line << "Putting " << name;
    if (!s.with_ties.names.empty()) {
      line << " and [";
      for (size_t i = 0; i < s.with_ties.names.size(); ++i) {
        line << (i ? ", " : "") << s.with_ties.names[i];
      }
      line << "]";
    } else {
      line << " (size=" << s.size << ")";
    }
    if (!s.unlimited) line << " (available=" << s.max_size - used_[s.device] << ")";
    line << " on " << s.device << ".";
    say(line.str());
    used_[s.device] += s.with_ties.size;
    map_.emplace_back(name, s.device);
    for (const std::string& tied_name : s.with_ties.names) {
      std::erase_if(items_, [&](const Item& i) { return i.first == tied_name; });
      map_.emplace_back(tied_name, s.device);
    }
    if (!options_.offload_buffers && s.item.second) {
      buffer_sizes_[s.device] += buffer_bytes(*s.item.second, options_);
    }
  }

  // The item alone fits: split the first tied partner that can be split, and try again.
  bool split_tied(const Step& s) {
    say("Not enough space on " + s.device + " to put " + s.item.first +
        " and its tied modules (space available " + std::to_string(s.max_size - used_[s.device]) +
        ", needed size " + std::to_string(s.with_ties.size) + ").");
    for (size_t k = 0; k < s.with_ties.names.size(); ++k) {
      nn::Module* tied_module = s.with_ties.modules[k];
      if (!tied_module || tied_module->named_children().empty() ||
          is_no_split(tied_module, no_split_)) {
        continue;
      }
      const std::string& tied_name = s.with_ties.names[k];
      say("Splitting " + tied_name + ".");
      std::vector<Item> members = split_items(tied_name, tied_module);
      auto at = std::find_if(items_.begin(), items_.end(),
                             [&](const Item& i) { return i.first == tied_name; });
      at = items_.erase(at);
      items_.insert(at, members.begin(), members.end());
      items_.insert(items_.begin(), s.item);
      refresh_max_layer();
      return true;
    }
    say("None of the tied modules can be split, going to the next device.");
    return false;
  }

  // The item does not fit: replace it by its members when it may be split.
  bool split_item(const Step& s) {
    const auto& [name, module] = s.item;
    say("Not enough space on " + s.device + " to put " + name + " (space available " +
        std::to_string(s.max_size - used_[s.device]) + ", module size " + std::to_string(s.size) +
        ").");
    if (!module || module->named_children().empty() || is_no_split(module, no_split_)) {
      say("This module cannot be split, going to the next device.");
      return false;
    }
    say("Splitting " + name + ".");
    std::vector<Item> members = split_items(name, module);
    items_.insert(items_.begin(), members.begin(), members.end());
    refresh_max_layer();
    return true;
  }

  // Nothing is on the device yet: treat a later module that fits first.
  bool place_fallback_first(const Step& s) {
    const int64_t room = limit_[s.device] - std::max(max_layer_.size, s.with_ties.size);
    Fallback fb = fallback_allocate(items_, sizes_, room - used_[s.device], no_split_, tied_);
    if (!fb.found) return false;
    say("Fallback: putting " + fb.item.first + " first.");
    items_ = std::move(fb.rest);
    items_.insert(items_.begin(), s.item);
    items_.insert(items_.begin(), fb.item);
    return true;
  }

  // The device is full: the item is tried again on the next one.
  void next_device(const Step& s) {
    if (used_[s.device] == 0) minimum_needed_.emplace_back(s.device, s.with_ties.size + s.reserved);
    used_[s.device] += s.reserved;
    ++current_;
    BRAID_ASSERT(current_ < devices_.size(), "disk takes every module");
    items_.insert(items_.begin(), s.item);
  }

  void report() {
    const int64_t offloaded_buffers = buffer_sizes_["cpu"] + buffer_sizes_["disk"];
    if (offloaded_buffers > 0 && !options_.offload_buffers && !gpus_.empty()) {
      const bool fits = std::any_of(gpus_.begin(), gpus_.end(), [&](const std::string& g) {
        return limit_[g] >= offloaded_buffers + used_[g];
      });
      if (!fits) {
        BRAID_LOG(kWarning) << "the model needs " << offloaded_buffers
                            << " bytes of buffers for offloaded layers, which does not seem to "
                               "fit any GPU's remaining memory; consider offload_buffers = true";
      }
    }
    if (!minimum_needed_.empty()) {
      std::ostringstream info;
      for (auto& [d, bytes] : minimum_needed_) info << " " << d << ": " << bytes << " bytes;";
      BRAID_LOG(kInfo) << "no module could be assigned to these devices for lack of memory (the "
                          "least each would have needed in this attempt):"
                       << info.str();
    }
  }

  const DeviceMapOptions& options_;
  const std::vector<std::string>& no_split_;
  const detail::TensorSizes sizes_;
  const ModuleSizes size_map_;
  const std::vector<std::vector<std::string>> tied_;
  std::vector<Item> items_;
  std::vector<std::string> devices_, gpus_, main_devices_;
  std::map<std::string, int64_t> limit_, used_, buffer_sizes_;
  std::vector<std::pair<std::string, int64_t>> minimum_needed_;
  LayerSize max_layer_;
  size_t current_ = 0;
  DeviceMap map_;
};

}  // namespace

DeviceMap infer_auto_device_map(nn::Module& model, const std::optional<MaxMemory>& max_memory,
                                const DeviceMapOptions& options) {
  return Planner(model, max_memory, options).run();
}

}  // namespace braid::accel
