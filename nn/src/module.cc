// Module and Layer: the structure of a model (names, registration, traversal, state dicts,
// modes, hooks, saved activations) and the hook / checkpointing wrapper around a Layer's
// forward and backward. Layers' arithmetic lives in the other nn/src files.
#include "braid/nn/module.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <utility>

#include "braid/core/rng.h"
#include "braid/tensor/ops.h"

namespace braid::nn {

// ---- grad mode ---------------------------------------------------------------------------

namespace {
thread_local bool t_grad_enabled = true;

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    out += "'" + items[i] + "'";
  }
  return out;
}

std::string join_prefix(const std::string& prefix, const std::string& name) {
  if (prefix.empty()) return name;
  return name.empty() ? prefix : prefix + "." + name;
}
}  // namespace

bool grad_enabled() {
  return t_grad_enabled;
}

namespace {
thread_local int t_empty_weights = 0;  // 0 off, 1 parameters, 2 parameters and buffers

Tensor to_meta(const Tensor& t) {
  return t.defined() ? Tensor::empty(t.shape(), t.dtype(), kMeta) : t;
}
}  // namespace

InitEmptyWeights::InitEmptyWeights(bool include_buffers) : prev_(t_empty_weights) {
  t_empty_weights = include_buffers ? 2 : 1;
}

InitEmptyWeights::~InitEmptyWeights() {
  t_empty_weights = prev_;
}

bool empty_weights_active() {
  return t_empty_weights > 0;
}

NoGradGuard::NoGradGuard() : prev_(t_grad_enabled) {
  t_grad_enabled = false;
}

NoGradGuard::~NoGradGuard() {
  t_grad_enabled = prev_;
}

// ---- registration ----------------------------------------------------------------------------

void Module::check_new_name(const std::string& name, const char* what) const {
  BRAID_CHECK(!name.empty() && name.find('.') == std::string::npos, kInvalidArgument, type_name_,
              ": ", what, " name '", name, "' must be non-empty and contain no '.'");
  const auto taken = [&](const auto& list) {
    return std::any_of(list.begin(), list.end(), [&](const auto& e) {
      if constexpr (std::is_same_v<std::decay_t<decltype(e)>, BufferEntry>) {
        return e.name == name;
      } else {
        return e.first == name;
      }
    });
  };
  BRAID_CHECK(!taken(params_) && !taken(buffers_) && !taken(children_), kInvalidArgument,
              type_name_, ": ", what, " name '", name, "' is already registered");
}

Parameter Module::register_parameter(const std::string& name, Parameter p) {
  check_new_name(name, "parameter");
  BRAID_CHECK(p.defined(), kInvalidArgument, type_name_, ": parameter '", name, "' is undefined");
  if (t_empty_weights > 0 && !p.data().device().is_meta()) p.data() = to_meta(p.data());
  params_.emplace_back(name, p);
  return p;
}

Tensor Module::register_buffer(const std::string& name, Tensor t, bool persistent) {
  check_new_name(name, "buffer");
  if (t_empty_weights > 1) t = to_meta(t);
  buffers_.push_back(BufferEntry{name, t, persistent});
  return t;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  check_new_name(name, "module");
  BRAID_CHECK(m != nullptr, kInvalidArgument, type_name_, ": module '", name, "' is null");
  children_.emplace_back(name, std::move(m));
}

Parameter& Module::param(std::string_view name) {
  for (auto& [n, p] : params_) {
    if (n == name) return p;
  }
  std::vector<std::string> names;
  for (auto& [n, p] : params_) names.push_back(n);
  BRAID_FAIL(kOutOfRange, type_name_, " has no parameter '", name, "' (parameters: ", join(names),
             ")");
}

void Module::set_parameter(std::string_view name, Parameter p) {
  BRAID_CHECK(p.defined(), kInvalidArgument, type_name_, ": set_parameter('", name,
              "') with an undefined parameter");
  param(name) = std::move(p);
}

std::shared_ptr<Module> Module::replace_module(std::string_view name, std::shared_ptr<Module> m) {
  BRAID_CHECK(m != nullptr, kInvalidArgument, type_name_, ": replace_module('", name,
              "') with a null module");
  for (auto& [n, slot] : children_) {
    if (n == name) return std::exchange(slot, std::move(m));
  }
  return child(name);  // throws kOutOfRange naming the children
}

Tensor& Module::buffer(std::string_view name) {
  for (auto& b : buffers_) {
    if (b.name == name) return b.tensor;
  }
  std::vector<std::string> names;
  for (auto& b : buffers_) names.push_back(b.name);
  BRAID_FAIL(kOutOfRange, type_name_, " has no buffer '", name, "' (buffers: ", join(names), ")");
}

std::shared_ptr<Module> Module::child(std::string_view name) const {
  for (auto& [n, m] : children_) {
    if (n == name) return m;
  }
  std::vector<std::string> names;
  for (auto& [n, m] : children_) names.push_back(n);
  BRAID_FAIL(kOutOfRange, type_name_, " has no child module '", name, "' (children: ", join(names),
             ")");
}

// ---- traversal ----------------------------------------------------------------------------

void Module::collect_parameters(const std::string& prefix, bool remove_duplicate,
                                std::vector<const void*>& seen,
                                std::vector<std::pair<std::string, Parameter>>& out) const {
  for (auto& [n, p] : params_) {
    if (remove_duplicate) {
      if (std::find(seen.begin(), seen.end(), p.id()) != seen.end()) continue;
      seen.push_back(p.id());
    }
    out.emplace_back(join_prefix(prefix, n), p);
  }
  for (auto& [n, m] : children_) {
    m->collect_parameters(join_prefix(prefix, n), remove_duplicate, seen, out);
  }
}

std::vector<std::pair<std::string, Parameter>> Module::named_parameters(
    bool remove_duplicate) const {
  std::vector<std::pair<std::string, Parameter>> out;
  std::vector<const void*> seen;
  collect_parameters("", remove_duplicate, seen, out);
  return out;
}

std::vector<Parameter> Module::parameters() const {
  std::vector<Parameter> out;
  for (auto& [n, p] : named_parameters()) out.push_back(p);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& b : buffers_) out.emplace_back(b.name, b.tensor);
  for (auto& [n, m] : children_) {
    for (auto& [bn, t] : m->named_buffers()) out.emplace_back(join_prefix(n, bn), t);
  }
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const {
  return children_;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out{{"", this}};
  for (auto& [n, m] : children_) {
    for (auto& [sub, ptr] : m->named_modules()) out.emplace_back(join_prefix(n, sub), ptr);
  }
  return out;
}

const Module& Module::get_submodule(std::string_view path) const {
  const Module* m = this;
  size_t start = 0;
  while (start < path.size()) {
    const size_t dot = std::min(path.find('.', start), path.size());
    m = m->child(path.substr(start, dot - start)).get();
    start = dot + 1;
  }
  return *m;
}

Module& Module::get_submodule(std::string_view path) {
  return const_cast<Module&>(std::as_const(*this).get_submodule(path));
}

int64_t Module::num_parameters(bool only_trainable) const {
  int64_t n = 0;
  for (auto& [name, p] : named_parameters()) {
    if (!only_trainable || p.requires_grad()) n += p.data().numel();
  }
  return n;
}

// ---- modes and transforms -------------------------------------------------------------------

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, m] : children_) m->train(on);
}

void Module::apply(const std::function<void(Module&)>& fn) {
  for (auto& [n, m] : children_) m->apply(fn);
  fn(*this);
}

namespace {
// Every distinct parameter once, so a tied parameter is converted once.
template <typename Fn>
void for_each_unique_parameter(const Module& m, Fn fn) {
  for (auto& [n, p] : m.named_parameters(/*remove_duplicate=*/true)) fn(p);
}
}  // namespace

void Module::to(Device device) {
  for_each_unique_parameter(*this, [&](const Parameter& p) {
    if (p.data().device() == device) return;
    p.data() = p.data().to(device);
    if (p.grad().defined()) p.grad() = p.grad().to(device);
  });
  apply([&](Module& m) {
    for (auto& b : m.buffers_) {
      if (b.tensor.defined() && b.tensor.device() != device) b.tensor = b.tensor.to(device);
    }
  });
}

void Module::to(DType dtype) {
  BRAID_CHECK(is_floating(dtype), kInvalidArgument, type_name_,
              ".to(dtype): expected a floating dtype, got ", dtype_name(dtype));
  for_each_unique_parameter(*this, [&](const Parameter& p) {
    if (!is_floating(p.data().dtype()) || p.data().dtype() == dtype) return;
    p.data() = p.data().to(dtype);
    p.grad() = Tensor();
  });
  apply([&](Module& m) {
    for (auto& b : m.buffers_) {
      if (b.tensor.defined() && is_floating(b.tensor.dtype())) {
        b.tensor = b.tensor.to(dtype);
      }
    }
  });
}

void Module::zero_grad(bool set_to_none) {
  for_each_unique_parameter(*this, [&](const Parameter& p) {
    if (set_to_none) {
      p.grad() = Tensor();
    } else if (p.grad().defined()) {
      p.grad().zero_();
    }
  });
}

// ---- state dicts ----------------------------------------------------------------------------

NamedTensors Module::state_dict() const {
  NamedTensors out;
  for (auto& [n, p] : named_parameters(/*remove_duplicate=*/false)) out.emplace_back(n, p.data());
  // Persistent buffers only, in module order after the parameters of the same module would
  // be simpler to read, but torch lists a module's parameters, then its buffers, then its
  // children; the order matters only to readers, not to loading.
  std::function<void(const Module&, const std::string&)> add_buffers =
      [&](const Module& m, const std::string& prefix) {
        for (auto& b : m.buffers_) {
          if (b.persistent && b.tensor.defined()) {
            out.emplace_back(join_prefix(prefix, b.name), b.tensor);
          }
        }
        for (auto& [n, c] : m.children_) add_buffers(*c, join_prefix(prefix, n));
      };
  add_buffers(*this, "");
  return out;
}

LoadResult Module::load_state_dict(const NamedTensors& state, bool strict) {
  std::map<std::string, const Tensor*> given;
  for (auto& [k, t] : state) given[k] = &t;

  // Destinations: every name of every parameter, and every persistent buffer.
  struct Dest {
    std::string name;
    Tensor target;
    const void* group;  // the parameter handle (tied names share it); null for buffers
  };
  std::vector<Dest> dests;
  for (auto& [n, p] : named_parameters(false)) dests.push_back({n, p.data(), p.id()});
  for (auto& [n, t] : state_dict()) {
    // [&n = n]: clang 15 cannot capture a structured binding itself.
    bool is_param =
        std::any_of(dests.begin(), dests.end(), [&n = n](auto& d) { return d.name == n; });
    if (!is_param) dests.push_back({n, t, nullptr});
  }

  LoadResult result;
  std::vector<const void*> loaded_groups;
  std::vector<std::string> matched;
  for (auto& d : dests) {
    auto it = given.find(d.name);
    if (it == given.end()) continue;
    const Tensor& src = *it->second;
    BRAID_CHECK(src.shape() == d.target.shape(), kInvalidArgument, type_name_,
                ".load_state_dict: '", d.name, "' has shape ", shape_str(src.shape()),
                ", the module expects ", shape_str(d.target.shape()));
    matched.push_back(d.name);
    if (d.group) loaded_groups.push_back(d.group);
  }
  for (auto& d : dests) {
    const bool found = std::find(matched.begin(), matched.end(), d.name) != matched.end();
    const bool group_loaded = d.group && std::find(loaded_groups.begin(), loaded_groups.end(),
                                                   d.group) != loaded_groups.end();
    if (!found && !group_loaded) result.missing_keys.push_back(d.name);
  }
  for (auto& [k, t] : state) {
    const bool known =
        std::any_of(dests.begin(), dests.end(), [&k = k](auto& d) { return d.name == k; });
    if (!known) result.unexpected_keys.push_back(k);
  }
  if (strict && (!result.missing_keys.empty() || !result.unexpected_keys.empty())) {
    BRAID_FAIL(kInvalidArgument, type_name_, ".load_state_dict(strict): missing keys [",
               join(result.missing_keys), "], unexpected keys [", join(result.unexpected_keys),
               "]");
  }
  // Every check passed: copy (nothing is written when a strict load fails).
  for (auto& d : dests) {
    auto it = given.find(d.name);
    if (it != given.end()) d.target.copy_(*it->second);
  }
  return result;
}

// ---- saved activations ------------------------------------------------------------------

std::shared_ptr<void> Module::pop_saved_raw() {
  BRAID_CHECK(!saved_.empty(), kInvalidArgument, type_name_,
              ": backward without a saved forward (run forward with grad enabled first, once per "
              "backward)");
  auto ctx = std::move(saved_.back());
  saved_.pop_back();
  return ctx;
}

SavedActivations Module::take_saved() {
  SavedActivations out;
  for (auto& [name, m] : named_modules()) {
    if (!m->saved_.empty()) out.stacks_[m] = std::move(m->saved_);
    m->saved_.clear();
  }
  return out;
}

void Module::restore_saved(SavedActivations saved) {
  for (auto& [name, m] : named_modules()) {
    auto it = saved.stacks_.find(m);
    if (it == saved.stacks_.end()) continue;
    BRAID_CHECK(m->saved_.empty(), kInvalidArgument, type_name_, ".restore_saved: module '", name,
                "' (", m->type_name_, ") still holds saved activations of another pass");
    m->saved_ = std::move(it->second);
    saved.stacks_.erase(it);
  }
  BRAID_CHECK(saved.stacks_.empty(), kInvalidArgument, type_name_,
              ".restore_saved: the activations came from modules outside this one");
}

size_t Module::saved_count() const {
  size_t n = saved_.size();
  for (auto& [name, m] : children_) n += m->saved_count();
  return n;
}

void Module::clear_saved() {
  for (auto& [name, m] : named_modules()) m->saved_.clear();
}

// ---- Layer ------------------------------------------------------------------------------

namespace {
// What a checkpointed forward keeps: its input and where the default generator stood.
struct CheckpointCtx {
  Tensor input;
  std::vector<uint8_t> rng_state;
};
}  // namespace

Tensor Layer::forward(const Tensor& x) {
  if (hooks().pre_forward) hooks().pre_forward(*this);
  Tensor y;
  if (checkpointing_ && grad_enabled()) {
    CheckpointCtx ctx{x, default_generator(kCPU).get_state()};
    {
      NoGradGuard no_grad;
      y = forward_impl(x);
    }
    save_for_backward(std::move(ctx));
  } else {
    y = forward_impl(x);
  }
  if (hooks().post_forward) hooks().post_forward(*this);
  return y;
}

Tensor Layer::backward(const Tensor& grad_output) {
  if (hooks().pre_backward) hooks().pre_backward(*this);
  if (checkpointing_) {
    auto ctx = pop_saved<CheckpointCtx>();
    Generator& gen = default_generator(kCPU);
    const auto now = gen.get_state();
    gen.set_state(ctx.rng_state);
    try {
      forward_impl(ctx.input);  // with grad on: saves what backward_impl needs
    } catch (...) {
      gen.set_state(now);
      throw;
    }
    gen.set_state(now);
  }
  Tensor dx = backward_impl(grad_output);
  if (hooks().post_backward) hooks().post_backward(*this);
  return dx;
}

// ---- gradients ----------------------------------------------------------------------------

void accumulate_grad(const Parameter& p, const Tensor& g) {
  BRAID_CHECK(p.defined() && g.defined(), kInvalidArgument,
              "accumulate_grad: undefined parameter or gradient");
  const Tensor& data = p.data();
  BRAID_CHECK(g.shape() == data.shape(), kInvalidArgument, "accumulate_grad: gradient of shape ",
              shape_str(g.shape()), " for a parameter of shape ", shape_str(data.shape()));
  if (!p.requires_grad()) return;
  Tensor& grad = p.grad();
  if (!grad.defined()) {
    grad = g.to(data.device(), data.dtype()).contiguous();
    if (grad.shares_storage(g)) grad = grad.clone();  // never alias the caller's tensor
    return;
  }
  const Tensor src = g.dtype() == grad.dtype() ? g : g.to(grad.dtype());
  axpby_(1.0, src, 1.0, grad);
}

// ---- tied parameters ------------------------------------------------------------------------

std::vector<std::vector<std::string>> find_tied_parameters(const Module& model) {
  std::map<const void*, std::vector<std::string>> by_handle;
  std::vector<const void*> order;
  for (auto& [n, p] : model.named_parameters(/*remove_duplicate=*/false)) {
    if (!by_handle.count(p.id())) order.push_back(p.id());
    by_handle[p.id()].push_back(n);
  }
  std::vector<std::vector<std::string>> groups;
  for (const void* id : order) {
    auto names = by_handle[id];
    if (names.size() < 2) continue;
    std::sort(names.begin(), names.end());
    groups.push_back(std::move(names));
  }
  std::sort(groups.begin(), groups.end());
  return groups;
}

void retie_parameters(Module& model, const std::vector<std::vector<std::string>>& tied) {
  const auto split = [](const std::string& full) {
    const size_t dot = full.rfind('.');
    return dot == std::string::npos
               ? std::pair<std::string, std::string>{"", full}
               : std::pair<std::string, std::string>{full.substr(0, dot), full.substr(dot + 1)};
  };
  for (auto& group : tied) {
    if (group.size() < 2) continue;
    auto [first_mod, first_name] = split(group[0]);
    Parameter keep = model.get_submodule(first_mod).param(first_name);
    for (size_t i = 1; i < group.size(); ++i) {
      auto [mod, name] = split(group[i]);
      model.get_submodule(mod).set_parameter(name, keep);
    }
  }
}

}  // namespace braid::nn
