// FlatParameters: ShardedModel over a module tree built from the framework's names, driven by
// calling the units' hooks directly instead of running Layer::forward / backward.
//
// The tree: a root Layer ("braid.FlatRoot"); for unit "a.b" containers "a" (plain Modules)
// and the unit Layer "b" ("braid.FlatUnit"); for its parameter "c.w" a container "c" under
// the unit and the parameter "w" there. named_parameters() then yields "a.b.c.w", the
// framework's own names, and a transformer-based wrap policy on "braid.FlatUnit" makes one
// ShardedModel unit per FlatUnitSpec; the root unit holds no parameters and brackets the
// passes (its pre / post hooks start and end a forward or a backward, as a model's root).
#include "braid/shard/flat_params.h"

#include <map>
#include <utility>

#include "braid/core/error.h"
#include "braid/tensor/ops.h"

namespace braid::shard {

namespace {

constexpr const char* kUnitType = "braid.FlatUnit";

// Stands for a framework's module: its forward and backward are the framework's, never run.
class FlatLayer final : public nn::Layer {
 public:
  explicit FlatLayer(std::string type) : nn::Layer(std::move(type)) {}

 protected:
  Tensor forward_impl(const Tensor&) override { return refuse(); }
  Tensor backward_impl(const Tensor&) override { return refuse(); }

 private:
  Tensor refuse() const {
    BRAID_CHECK(false, kNotSupported, "FlatParameters: module '", type_name(),
                "' stands for a framework's module and has no forward or backward of its own");
    return {};
  }
};

std::vector<std::string> split_path(const std::string& path, const std::string& what) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    parts.push_back(path.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    BRAID_CHECK(!parts.back().empty(), kInvalidArgument, "FlatParameters: ", what, " '", path,
                "' has an empty component; expected a dotted path such as 'transformer.h.0'");
    if (dot == std::string::npos) return parts;
    start = dot + 1;
  }
}

// The child `name` of `m`, created as a container when missing.
nn::Module& container(nn::Module& m, const std::string& name) {
  for (auto& [n, child] : m.named_children()) {
    if (n == name) return *child;
  }
  return *m.register_module(name, std::make_shared<nn::Module>("braid.FlatModule"));
}

enum class Phase : uint8_t { kIdle, kForward, kBackward };

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::kIdle:
      return "between passes";
    case Phase::kForward:
      return "in the forward (after begin_forward)";
    case Phase::kBackward:
      return "in the backward (after begin_backward)";
  }
  return "?";
}

}  // namespace

struct FlatParameters::Impl {
  struct ParamRef {
    std::string name;  // full
    Shape shape;
    nn::Parameter param;
  };
  struct UnitRef {
    std::string name;
    nn::Layer* layer = nullptr;
    std::vector<ParamRef> params;
  };
  std::shared_ptr<nn::Layer> root;
  std::vector<UnitRef> units;
  std::unique_ptr<ShardedModel> sm;
  Phase phase = Phase::kIdle;

  UnitRef& unit(size_t u, const char* call) {
    BRAID_CHECK(u < units.size(), kOutOfRange, "FlatParameters::", call, ": unit ", u,
                " does not exist; there are ", units.size(), " units");
    return units[u];
  }
  void expect(Phase p, const char* call) const {
    BRAID_CHECK(phase == p, kInvalidArgument, "FlatParameters::", call, " must be called ",
                phase_name(p), ", but it was called ", phase_name(phase));
  }
  static void run(nn::Layer& layer, std::function<void(nn::Module&)> nn::ModuleHooks::*hook) {
    const auto& fn = layer.hooks().*hook;
    if (fn) fn(layer);
  }
};

FlatParameters::FlatParameters(std::vector<FlatUnitSpec> units, std::shared_ptr<ProcessGroup> pg,
                               ShardingOptions options)
    : impl_(std::make_unique<Impl>()) {
  BRAID_CHECK(pg != nullptr, kInvalidArgument, "FlatParameters: the process group is null");
  BRAID_CHECK(!units.empty(), kInvalidArgument, "FlatParameters: no units were given");
  impl_->root = std::make_shared<FlatLayer>("braid.FlatRoot");
  std::map<std::string, bool> unit_names;
  for (auto& spec : units) {
    const auto path = split_path(spec.name, "unit name");
    BRAID_CHECK(!unit_names.count(spec.name), kInvalidArgument, "FlatParameters: unit '", spec.name,
                "' is registered twice");
    BRAID_CHECK(!spec.params.empty(), kInvalidArgument, "FlatParameters: unit '", spec.name,
                "' has no parameters");
    for (auto& [other, unused] : unit_names) {
      const bool inside = spec.name.rfind(other + ".", 0) == 0;
      const bool around = other.rfind(spec.name + ".", 0) == 0;
      BRAID_CHECK(!inside && !around, kInvalidArgument, "FlatParameters: unit '", spec.name,
                  "' lies ", inside ? "inside" : "around", " unit '", other,
                  "'; units may not nest (register the inner parameters in one of them)");
    }
    unit_names[spec.name] = true;
    nn::Module* parent = impl_->root.get();
    for (size_t i = 0; i + 1 < path.size(); ++i) parent = &container(*parent, path[i]);
    auto layer = parent->register_module(path.back(), std::make_shared<FlatLayer>(kUnitType));
    Impl::UnitRef ref{spec.name, layer.get(), {}};
    for (auto& p : spec.params) {
      const auto ppath = split_path(p.name, "parameter name of unit '" + spec.name + "':");
      const std::string full = spec.name + "." + p.name;
      Tensor data;
      if (p.initial.defined()) {
        BRAID_CHECK(p.initial.dtype() == DType::kF32 && p.initial.device() == kCPU,
                    kInvalidArgument, "FlatParameters: the initial value of '", full,
                    "' must be an f32 CPU tensor, got ", dtype_name(p.initial.dtype()), " on ",
                    p.initial.device().str());
        data = p.initial.clone();  // contiguous, ours: the caller's memory is never written
      } else {
        BRAID_CHECK(static_cast<bool>(options.param_init), kInvalidArgument,
                    "FlatParameters: parameter '", full,
                    "' has no initial value and ShardingOptions::param_init is not set");
        data = Tensor::empty(p.shape, DType::kF32, kMeta);
      }
      nn::Module* owner = layer.get();
      for (size_t i = 0; i + 1 < ppath.size(); ++i) owner = &container(*owner, ppath[i]);
      for (auto& [n, unused] : owner->named_parameters()) {
        BRAID_CHECK(n != ppath.back(), kInvalidArgument, "FlatParameters: parameter '", full,
                    "' is registered twice");
      }
      nn::Parameter param = owner->register_parameter(ppath.back(), nn::Parameter(data));
      ref.params.push_back({full, data.shape(), param});
    }
    impl_->units.push_back(std::move(ref));
  }
  options.wrap = WrapPolicy{};
  options.wrap.kind = WrapKind::kTransformerBased;
  options.wrap.transformer_cls_names_to_wrap = {kUnitType};
  impl_->sm = std::make_unique<ShardedModel>(impl_->root, std::move(pg), std::move(options));
}

FlatParameters::~FlatParameters() = default;

size_t FlatParameters::num_units() const {
  return impl_->units.size();
}
const std::string& FlatParameters::unit_name(size_t unit) const {
  return impl_->unit(unit, "unit_name").name;
}
size_t FlatParameters::num_params(size_t unit) const {
  return impl_->unit(unit, "num_params").params.size();
}
const std::string& FlatParameters::param_name(size_t unit, size_t i) const {
  auto& u = impl_->unit(unit, "param_name");
  BRAID_CHECK(i < u.params.size(), kOutOfRange, "FlatParameters::param_name: unit '", u.name,
              "' has ", u.params.size(), " parameters, asked for ", i);
  return u.params[i].name;
}
const Shape& FlatParameters::param_shape(size_t unit, size_t i) const {
  auto& u = impl_->unit(unit, "param_shape");
  BRAID_CHECK(i < u.params.size(), kOutOfRange, "FlatParameters::param_shape: unit '", u.name,
              "' has ", u.params.size(), " parameters, asked for ", i);
  return u.params[i].shape;
}

void FlatParameters::begin_forward() {
  impl_->expect(Phase::kIdle, "begin_forward");
  Impl::run(*impl_->root, &nn::ModuleHooks::pre_forward);
  impl_->phase = Phase::kForward;
}

void FlatParameters::end_forward() {
  impl_->expect(Phase::kForward, "end_forward");
  Impl::run(*impl_->root, &nn::ModuleHooks::post_forward);
  impl_->phase = Phase::kIdle;
}

void FlatParameters::begin_backward() {
  impl_->expect(Phase::kIdle, "begin_backward");
  Impl::run(*impl_->root, &nn::ModuleHooks::pre_backward);
  impl_->phase = Phase::kBackward;
}

void FlatParameters::end_backward() {
  impl_->expect(Phase::kBackward, "end_backward");
  Impl::run(*impl_->root, &nn::ModuleHooks::post_backward);
  impl_->phase = Phase::kIdle;
}

void FlatParameters::gather(size_t unit) {
  auto& u = impl_->unit(unit, "gather");
  BRAID_CHECK(impl_->phase != Phase::kIdle, kInvalidArgument, "FlatParameters::gather of unit '",
              u.name, "' must be called in a pass (after begin_forward or begin_backward)");
  Impl::run(*u.layer, impl_->phase == Phase::kForward ? &nn::ModuleHooks::pre_forward
                                                      : &nn::ModuleHooks::pre_backward);
}

Tensor FlatParameters::param(size_t unit, size_t i) const {
  auto& u = impl_->unit(unit, "param");
  BRAID_CHECK(i < u.params.size(), kOutOfRange, "FlatParameters::param: unit '", u.name, "' has ",
              u.params.size(), " parameters, asked for ", i);
  const Tensor& data = u.params[i].param.data();
  BRAID_CHECK(data.defined() && !data.device().is_meta(), kInvalidArgument,
              "FlatParameters::param: unit '", u.name,
              "' is not gathered (ZeRO stage 3 holds only shards between uses); call gather(", unit,
              ") first");
  return data;
}

void FlatParameters::release(size_t unit) {
  auto& u = impl_->unit(unit, "release");
  impl_->expect(Phase::kForward, "release");
  Impl::run(*u.layer, &nn::ModuleHooks::post_forward);
}

void FlatParameters::reduce_gradients(size_t unit, std::span<const Tensor> grads) {
  auto& u = impl_->unit(unit, "reduce_gradients");
  impl_->expect(Phase::kBackward, "reduce_gradients");
  BRAID_CHECK(grads.size() == u.params.size(), kInvalidArgument,
              "FlatParameters::reduce_gradients: unit '", u.name, "' has ", u.params.size(),
              " parameters, got ", grads.size(), " gradients");
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    auto& p = u.params[i];
    if (!g.defined()) continue;  // no gradient: zero
    BRAID_CHECK(g.shape() == p.shape, kInvalidArgument,
                "FlatParameters::reduce_gradients: ", "the gradient of '", p.name, "' has shape ",
                shape_str(g.shape()), ", the parameter ", shape_str(p.shape));
    BRAID_CHECK(
        (g.dtype() == DType::kF32 || g.dtype() == DType::kBF16 || g.dtype() == DType::kF16) &&
            g.device() == kCPU,
        kInvalidArgument, "FlatParameters::reduce_gradients: the gradient of '", p.name,
        "' must be an f32, bf16 or f16 CPU tensor, got ", dtype_name(g.dtype()), " on ",
        g.device().str());
    // A copy of our own: stage 0 reads it when its bucket is launched (possibly at
    // end_backward), and with set_gradient_sync(false) it stays to be summed with the next
    // micro-batches' (as accumulate_grad does). The caller's memory is free on return.
    Tensor& acc = p.param.grad();
    acc = acc.defined() ? acc + g.to(acc.dtype()) : g.clone();
  }
  Impl::run(*u.layer, &nn::ModuleHooks::post_backward);
}

ShardedModel& FlatParameters::sharded() {
  return *impl_->sm;
}
const ShardedModel& FlatParameters::sharded() const {
  return *impl_->sm;
}

}  // namespace braid::shard
