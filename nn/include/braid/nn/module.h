// SPDX-License-Identifier: Apache-2.0
// Module: named parameters, buffers and children, as torch.nn.Module, without an autograd
// engine. A Layer is a Module with one tensor in and one tensor out and a hand-written
// backward: forward() caches what backward() needs (when grad mode is on), backward() takes
// the gradient of the output, adds the parameters' gradients into Parameter::grad() and
// returns the gradient of the input (docs/nn.md).
//
//   auto lin = std::make_shared<braid::nn::Linear>(4, 3);
//   Tensor y = lin->forward(x);          // saves x
//   Tensor dx = lin->backward(dy);       // lin->weight().grad() += dy^T x ...
//   for (auto& [name, p] : lin->named_parameters()) ...
//
// Saved activations form a stack per module: a module called twice before its backward pops
// the second call's context first (reverse order, as a backward pass runs). Pipelines and
// activation checkpointing move whole stacks aside with take_saved() / restore_saved().
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "braid/core/device.h"
#include "braid/core/dtype.h"
#include "braid/core/error.h"
#include "braid/nn/parameter.h"
#include "braid/tensor/safetensors.h"
#include "braid/tensor/tensor.h"

namespace braid::nn {

// ---- grad mode ---------------------------------------------------------------------------

// Whether forward passes save what their backward needs (per thread; on by default).
bool grad_enabled();
// torch.no_grad(): forward passes inside save nothing (inference, or the first pass of an
// activation-checkpointed block).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// The seed's init_empty_weights (Accelerate's big-model utilities): while one is alive on a
// thread, parameters registered on that thread become tensors of the same shape and dtype on
// the meta device (no memory), so a model of any size can be built to size it or to be
// materialized shard by shard (shard::ShardingOptions::param_init). Linear and Embedding,
// which hold nearly all of a model's elements, then draw no initial values
// (empty_weights_active()), so a 7B model builds in well under a second, as under torch's
// meta device; other layers' few values are dropped at once. With include_buffers, buffers too.
class InitEmptyWeights {
 public:
  explicit InitEmptyWeights(bool include_buffers = false);
  ~InitEmptyWeights();
  InitEmptyWeights(const InitEmptyWeights&) = delete;
  InitEmptyWeights& operator=(const InitEmptyWeights&) = delete;

 private:
  int prev_;
};

// True while an InitEmptyWeights is alive on this thread: a layer's constructor may then give
// register_parameter a meta tensor of the right shape and dtype instead of drawing values.
bool empty_weights_active();

// ---- hooks ---------------------------------------------------------------------------------

// Called around a Layer's forward and backward; sharding (FSDP units) gathers parameters in
// the pre hooks and frees or reduces them in the post hooks. Any member may be empty.
struct ModuleHooks {
  std::function<void(class Module&)> pre_forward;
  std::function<void(class Module&)> post_forward;
  std::function<void(class Module&)> pre_backward;
  std::function<void(class Module&)> post_backward;
};

// What load_state_dict found (torch's _IncompatibleKeys).
struct LoadResult {
  std::vector<std::string> missing_keys;     // in the module, not in the state dict
  std::vector<std::string> unexpected_keys;  // in the state dict, not in the module
};

// Saved activations of a module tree, moved out by take_saved().
class SavedActivations {
 public:
  bool empty() const { return stacks_.empty(); }

 private:
  friend class Module;
  std::map<const class Module*, std::vector<std::shared_ptr<void>>> stacks_;
};

// ---- Module --------------------------------------------------------------------------------

class Module {
 public:
  // type_name: the class name wrap policies match ("GPT2Block", "Linear").
  explicit Module(std::string type_name) : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  const std::string& type_name() const { return type_name_; }

  // ---- structure (names may not be empty or contain '.'; a name is registered once) ----
  Parameter register_parameter(const std::string& name, Parameter p);
  // persistent = false keeps the buffer out of state_dict (torch's persistent flag).
  Tensor register_buffer(const std::string& name, Tensor t, bool persistent = true);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }

  // Direct members by name; throws kOutOfRange naming the module and the names present.
  Parameter& param(std::string_view name);
  Tensor& buffer(std::string_view name);
  std::shared_ptr<Module> child(std::string_view name) const;
  // Replaces a registered parameter handle (retie_parameters, sharding's flat views).
  void set_parameter(std::string_view name, Parameter p);
  // Replaces a registered child module, keeping its name and place (torch's setattr on a
  // submodule): tensor parallelism swaps a Linear for a parallel one. Returns the old child;
  // kOutOfRange when there is no child `name`, kInvalidArgument for a null module. A module
  // that keeps its own pointer to the child (Sequential's run list) still runs the old one;
  // GPT's modules look their children up by name on every pass.
  std::shared_ptr<Module> replace_module(std::string_view name, std::shared_ptr<Module> m);

  // Recursive, in registration order, "a.b.weight" names. remove_duplicate drops later names
  // of a parameter handle already seen (tied weights appear once), as torch does.
  std::vector<std::pair<std::string, Parameter>> named_parameters(
      bool remove_duplicate = true) const;
  std::vector<Parameter> parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;
  // This module first (name ""), then every descendant, depth first.
  std::vector<std::pair<std::string, Module*>> named_modules();
  // The sub-module at a dotted path ("transformer.h.0"); "" is this one. Throws kOutOfRange.
  Module& get_submodule(std::string_view path);
  const Module& get_submodule(std::string_view path) const;

  // Counts elements; tied parameters once. only_trainable: requires_grad ones.
  int64_t num_parameters(bool only_trainable = false) const;

  // ---- modes and transforms ----
  void train(bool on = true);  // recursive
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // fn(module) for every descendant, then this module (torch's order).
  void apply(const std::function<void(Module&)>& fn);
  // Converts parameters and buffers in place (the handles keep their identity, so tied
  // parameters stay tied and optimizers keep working). to(dtype) converts floating tensors
  // only; gradients are dropped when their dtype or device changes.
  void to(Device device);
  void to(DType dtype);
  // Drops every parameter's gradient (set_to_none) or fills it with zeros.
  void zero_grad(bool set_to_none = true);

  // ---- state ----
  // Every parameter (under each of its names: tied ones twice, as torch) and persistent
  // buffer, sharing storage with the module.
  NamedTensors state_dict() const;
  // Copies values in (converting dtype; shapes must match exactly, else kInvalidArgument
  // naming the key and both shapes). strict: a missing or unexpected key throws
  // kInvalidArgument listing all of them; otherwise they are returned. A key of a tied
  // parameter counts as present when any of its names is given.
  LoadResult load_state_dict(const NamedTensors& state, bool strict = true);

  // ---- hooks and saved activations ----
  void set_hooks(ModuleHooks hooks) { hooks_ = std::move(hooks); }
  const ModuleHooks& hooks() const { return hooks_; }
  // Moves the saved activations of this module and every descendant out / back in.
  SavedActivations take_saved();
  void restore_saved(SavedActivations saved);
  // Saved contexts still waiting for a backward, in this module and its descendants.
  size_t saved_count() const;
  // Drops them (after an evaluation pass run with grad on, or an abandoned step).
  void clear_saved();

 protected:
  // Pushes a context for the next backward when grad mode is on (nothing otherwise).
  template <typename T>
  void save_for_backward(T ctx) {
    if (grad_enabled()) saved_.push_back(std::make_shared<T>(std::move(ctx)));
  }
  // Pops the most recent context; throws kInvalidArgument "<type> '<name>': backward without
  // a saved forward" when there is none.
  template <typename T>
  T pop_saved() {
    return std::move(*static_cast<T*>(pop_saved_raw().get()));
  }

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> m);
  void check_new_name(const std::string& name, const char* what) const;
  std::shared_ptr<void> pop_saved_raw();
  void collect_parameters(const std::string& prefix, bool remove_duplicate,
                          std::vector<const void*>& seen,
                          std::vector<std::pair<std::string, Parameter>>& out) const;

  struct BufferEntry {
    std::string name;
    Tensor tensor;
    bool persistent;
  };
  std::string type_name_;
  bool training_ = true;
  std::vector<std::pair<std::string, Parameter>> params_;
  std::vector<BufferEntry> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  ModuleHooks hooks_;
  std::vector<std::shared_ptr<void>> saved_;
};

// A Module with one tensor in and one out. forward() / backward() run the hooks around the
// subclass's forward_impl() / backward_impl().
class Layer : public Module {
 public:
  using Module::Module;
  Tensor forward(const Tensor& x);
  // Returns the gradient of the input, or an undefined Tensor when the input takes none
  // (token ids).
  Tensor backward(const Tensor& grad_output);

  // Activation checkpointing (torch.utils.checkpoint with preserve_rng_state): when on,
  // forward() runs forward_impl without saving (NoGradGuard) and keeps only its input and the
  // default CPU generator's state; backward() first runs forward_impl again from them (so
  // dropout draws the same masks), then backward_impl, and leaves the generator where it was.
  // Names and parameters do not change (no wrapper module).
  void set_checkpointing(bool on) { checkpointing_ = on; }
  bool checkpointing() const { return checkpointing_; }

 protected:
  virtual Tensor forward_impl(const Tensor& x) = 0;
  virtual Tensor backward_impl(const Tensor& grad_output) = 0;

 private:
  bool checkpointing_ = false;
};

// Adds g into p's gradient, allocating it (zeros of p's shape, dtype and device) when
// undefined; g is converted to the gradient's dtype. Layers call this for every parameter.
void accumulate_grad(const Parameter& p, const Tensor& g);

// ---- tied parameters (the seed's find_tied_parameters / retie_parameters) -------------------

// Groups of names that refer to one parameter, each group sorted, groups sorted by their
// first name: [["lm_head.weight", "transformer.wte.weight"]].
std::vector<std::vector<std::string>> find_tied_parameters(const Module& model);
// Makes every name of each group refer to the handle of the group's first name (after
// something replaced one of them, e.g. a load that made copies).
void retie_parameters(Module& model, const std::vector<std::vector<std::string>>& tied);

}  // namespace braid::nn
