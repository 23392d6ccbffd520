// Optimizers over parameter groups: lazily created state, per-step buckets handed to the fused
// kernel (kernels/optim.h), and state dicts as safetensors + JSON (docs/mixed-precision.md).
#include "braid/nn/optim.h"

#include <nlohmann/json.hpp>

#include "braid/core/error.h"
#include "braid/core/thread_pool.h"
#include "braid/kernels/optim.h"
#include "braid/kernels/table.h"
#include "braid/tensor/swap_store.h"

namespace braid::nn {
namespace {

using kernels::OptimAlgo;

const char* algo_name(OptimAlgo a) {
  switch (a) {
    case OptimAlgo::kSgd:
      return "sgd";
    case OptimAlgo::kAdam:
      return "adam";
    case OptimAlgo::kAdamW:
      return "adamw";
    case OptimAlgo::kLion:
      return "lion";
  }
  return "?";
}

// torch's names for state0..2, per algorithm (empty: unused).
std::array<const char*, 3> state_names(OptimAlgo a) {
  if (a == OptimAlgo::kSgd) return {"momentum_buffer", "", ""};
  if (a == OptimAlgo::kLion) return {"exp_avg", "", ""};
  return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
}

bool uses_state(OptimAlgo a, const OptimizerOptions& o, int k) {
  switch (a) {
    case OptimAlgo::kSgd:
      return k == 0 && o.momentum != 0.0;
    case OptimAlgo::kLion:
      return k == 0;
    case OptimAlgo::kAdam:
    case OptimAlgo::kAdamW:
      return k < 2 || o.amsgrad;
  }
  return false;
}

bool supported_float(DType d) {
  return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16;
}

nlohmann::json options_json(const OptimizerOptions& o, double initial_lr) {
  return {{"lr", o.lr},
          {"weight_decay", o.weight_decay},
          {"maximize", o.maximize},
          {"momentum", o.momentum},
          {"dampening", o.dampening},
          {"nesterov", o.nesterov},
          {"betas", {o.beta1, o.beta2}},
          {"eps", o.eps},
          {"amsgrad", o.amsgrad},
          {"initial_lr", initial_lr}};
}

OptimizerOptions options_from_json(const nlohmann::json& j) {
  OptimizerOptions o;
  o.lr = j.at("lr").get<double>();
  o.weight_decay = j.at("weight_decay").get<double>();
  o.maximize = j.at("maximize").get<bool>();
  o.momentum = j.at("momentum").get<double>();
  o.dampening = j.at("dampening").get<double>();
  o.nesterov = j.at("nesterov").get<bool>();
  o.beta1 = j.at("betas").at(0).get<double>();
  o.beta2 = j.at("betas").at(1).get<double>();
  o.eps = j.at("eps").get<double>();
  o.amsgrad = j.at("amsgrad").get<bool>();
  return o;
}

}  // namespace

Optimizer::Optimizer(OptimAlgo algo, std::vector<ParamGroup> groups, MasterWeights masters)
    : algo_(algo), masters_(masters) {
  BRAID_CHECK(!groups.empty(), kInvalidArgument, algo_name(algo),
              ": expected at least one parameter group");
  for (ParamGroup& g : groups) add_param_group(std::move(g));
}

Optimizer::~Optimizer() = default;
Optimizer::Optimizer(Optimizer&&) noexcept = default;
Optimizer& Optimizer::operator=(Optimizer&&) noexcept = default;

void Optimizer::add_param_group(ParamGroup group) {
  check_group(group);
  if (group.initial_lr == 0.0) group.initial_lr = group.options.lr;
  for (const ParamGroup& g : groups_) {
    for (const Parameter& p : g.params) {
      for (const Parameter& q : group.params) {
        BRAID_CHECK(!p.is(q), kInvalidArgument, algo_name(algo_),
                    ": a parameter appears in more than one parameter group");
      }
    }
  }
  groups_.push_back(std::move(group));
}

void Optimizer::check_group(const ParamGroup& g) const {
  const char* name = algo_name(algo_);
  for (size_t i = 0; i < g.params.size(); ++i) {
    const Parameter& p = g.params[i];
    BRAID_CHECK(p.defined() && p.data().defined(), kInvalidArgument, name, ": parameter ", i,
                " is undefined");
    BRAID_CHECK(supported_float(p.data().dtype()), kInvalidArgument, name, ": parameter ", i,
                " has dtype ", dtype_name(p.data().dtype()), ": expected f32, bf16 or f16");
    // meta: a measurement run (shard::estimate_memory) allocates the state and steps nothing.
    BRAID_CHECK(p.data().device().type == DeviceType::kCPU || p.data().device().is_meta(),
                kNotSupported, name, ": parameter ", i, " is on ", p.data().device().str(),
                ": this build steps cpu parameters (and meta ones, sizes only)");
    BRAID_CHECK(p.data().is_contiguous(), kInvalidArgument, name, ": parameter ", i,
                " is not contiguous (shape ", shape_str(p.data().shape()), ")");
  }
  // Validate the hyper-parameters once here, with the same rules as the kernel.
  kernels::OptimStep s;
  s.algo = algo_;
  const OptimizerOptions& o = g.options;
  s.lr = o.lr;
  s.weight_decay = o.weight_decay;
  s.momentum = o.momentum;
  s.dampening = o.dampening;
  s.nesterov = o.nesterov;
  s.beta1 = o.beta1;
  s.beta2 = o.beta2;
  s.eps = o.eps;
  s.amsgrad = o.amsgrad;
  kernels::check_optim_step(s, nullptr, 0);
}

void Optimizer::set_rounding(kernels::Rounding rounding, uint64_t seed) {
  if (rounding == kernels::Rounding::kStochastic) {
    for (const ParamGroup& g : groups_) {
      for (const Parameter& p : g.params) {
        BRAID_CHECK(p.data().dtype() != DType::kF16, kNotSupported, algo_name(algo_),
                    ": stochastic rounding needs bf16 or f32 parameters, got an f16 one");
      }
    }
  }
  rounding_ = rounding;
  seed_ = seed;
}

void Optimizer::set_num_threads(int threads) {
  BRAID_CHECK(threads >= 1, kInvalidArgument, algo_name(algo_), ": set_num_threads(", threads,
              "): expected >= 1");
  threads_ = threads;
}

int Optimizer::num_threads() const {
  return threads_ > 0 ? threads_ : get_num_threads();
}

Optimizer::State& Optimizer::state_for(const Parameter& p, const OptimizerOptions& o) {
  auto [it, fresh] = state_.try_emplace(p.id());
  State& st = it->second;
  BRAID_ASSERT(!st.swapped, "swap the state in before stepping it");
  const bool new_master =
      fresh && masters_ == MasterWeights::kAuto && p.data().dtype() != DType::kF32;
  if (fresh) {
    st.rng_offset = rng_words_;
    rng_words_ += (static_cast<uint64_t>(p.data().numel()) + 3) / 4 * 4;
  }
  if (swap_) {
    // Offload: one buffer for every row, so the state goes to the store as one file.
    uint8_t rows = new_master || st.master.defined() ? 1 : 0;
    for (int k = 0; k < 3; ++k) {
      if (uses_state(algo_, o, k) || st.state[k].defined()) rows |= static_cast<uint8_t>(2 << k);
    }
    if (!st.packed.defined() || rows != st.rows) pack(st, rows, p.data());
    return st;
  }
  if (new_master) st.master = p.data().to(DType::kF32).contiguous().clone();
  for (int k = 0; k < 3; ++k) {
    if (uses_state(algo_, o, k) && !st.state[k].defined()) {
      st.state[k] = Tensor::zeros(p.data().shape(), DType::kF32, p.data().device());
    }
  }
  return st;
}

Tensor Optimizer::master(const Parameter& p) const {
  auto it = state_.find(p.id());
  if (it == state_.end()) return Tensor();
  if (!it->second.swapped) return it->second.master;
  const Tensor m = swapped_tensors(it->second, p.data().shape(), false)[0];
  return m.defined() ? m.clone() : m;
}

void Optimizer::step() {
  step(1.0);
}

void Optimizer::step(double grad_scale) {
  if (swap_) {
    step_offloaded(grad_scale);
    return;
  }
  for (ParamGroup& g : groups_) step_group(g, grad_scale);
}

void Optimizer::check_grad(const Parameter& p, size_t i) const {
  const Tensor& data = p.data();
  const Tensor& grad = p.grad();
  BRAID_CHECK(grad.shape() == data.shape(), kInvalidArgument, algo_name(algo_), ": parameter ", i,
              " has shape ", shape_str(data.shape()), " but its gradient has shape ",
              shape_str(grad.shape()));
  BRAID_CHECK(supported_float(grad.dtype()), kInvalidArgument, algo_name(algo_), ": gradient ", i,
              " has dtype ", dtype_name(grad.dtype()), ": expected f32, bf16 or f16");
  BRAID_CHECK(grad.device() == data.device(), kInvalidArgument, algo_name(algo_), ": gradient ", i,
              " is on ", grad.device().str(), ", its parameter on ", data.device().str());
}

void Optimizer::step_group(ParamGroup& g, double grad_scale) {
  // One kernel call per (device, dtypes, step count, first step): normally one for the group.
  struct Bucket {
    Device device;
    kernels::OptimStep step;
    std::vector<kernels::OptimTensor> tensors;
    std::vector<Tensor> keep;  // contiguous copies of non-contiguous gradients
  };
  std::vector<Bucket> buckets;
  for (size_t i = 0; i < g.params.size(); ++i) {
    const Parameter& p = g.params[i];
    if (!p.requires_grad() || !p.grad().defined()) continue;
    check_grad(p, i);
    kernels::OptimStep s;
    kernels::OptimTensor t;
    Tensor dense;
    prepare(p, g.options, grad_scale, s, t, dense);
    Bucket* b = nullptr;
    for (Bucket& c : buckets) {
      if (c.device == p.data().device() && c.step.param_dtype == s.param_dtype &&
          c.step.grad_dtype == s.grad_dtype && c.step.step == s.step &&
          c.step.first_step == s.first_step && c.step.rounding == s.rounding) {
        b = &c;
      }
    }
    if (b == nullptr) {
      buckets.push_back({p.data().device(), s, {}, {}});
      b = &buckets.back();
    }
    if (!dense.shares_storage(p.grad())) b->keep.push_back(dense);
    b->tensors.push_back(t);
  }
  for (const Bucket& b : buckets) {
    const kernels::KernelTable& k = kernels::kernels_for(b.device);
    kernels::require_support(k, kernels::Op::kOptimizerStep, b.step.param_dtype);
    k.optimizer_step(kernels::stream_for(b.device), b.step, b.tensors.data(),
                     static_cast<int64_t>(b.tensors.size()), num_threads());
  }
}

void Optimizer::prepare(const Parameter& p, const OptimizerOptions& o, double grad_scale,
                        kernels::OptimStep& s, kernels::OptimTensor& t, Tensor& dense) {
  const Tensor& data = p.data();
  const Tensor& grad = p.grad();
  State& st = state_for(p, o);
  ++st.step;
  s.algo = algo_;
  s.param_dtype = data.dtype();
  s.grad_dtype = grad.dtype();
  s.lr = o.lr;
  s.weight_decay = o.weight_decay;
  s.grad_scale = grad_scale;
  s.maximize = o.maximize;
  s.momentum = o.momentum;
  s.dampening = o.dampening;
  s.nesterov = o.nesterov;
  s.first_step = st.step == 1;
  s.beta1 = o.beta1;
  s.beta2 = o.beta2;
  s.eps = o.eps;
  s.amsgrad = o.amsgrad;
  s.step = st.step;
  s.rounding = data.dtype() == DType::kBF16 ? rounding_ : kernels::Rounding::kNearest;
  // A different stream per step: the same word offsets then draw new numbers.
  s.seed = seed_ ^ (0x9E3779B97F4A7C15ull * static_cast<uint64_t>(st.step));
  dense = grad.contiguous();
  t.n = data.numel();
  t.param = data.data_ptr();
  t.master = st.master.defined() ? st.master.data<float>() : nullptr;
  t.grad = dense.data_ptr();
  for (int k = 0; k < 3; ++k) {
    float* ptr = st.state[k].defined() ? st.state[k].data<float>() : nullptr;
    (k == 0 ? t.state0 : k == 1 ? t.state1 : t.state2) = ptr;
  }
  t.rng_offset = st.rng_offset;
}

void Optimizer::zero_grad(bool set_to_none) {
  for (ParamGroup& g : groups_) {
    for (Parameter& p : g.params) {
      if (!p.grad().defined()) continue;
      if (set_to_none) {
        p.grad() = Tensor();
      } else {
        p.grad().zero_();
      }
    }
  }
}

std::vector<Tensor> Optimizer::scaled_gradients() {
  std::vector<Tensor> out;
  for (ParamGroup& g : groups_) {
    for (Parameter& p : g.params) {
      if (p.requires_grad() && p.grad().defined()) out.push_back(p.grad());
    }
  }
  return out;
}

OptimizerState Optimizer::state_dict() const {
  return make_state_dict(false);
}

OptimizerState Optimizer::make_state_dict(bool map_files) const {
  OptimizerState out;
  nlohmann::json groups = nlohmann::json::array();
  nlohmann::json steps = nlohmann::json::array();
  const auto names = state_names(algo_);
  int64_t index = 0;
  for (const ParamGroup& g : groups_) {
    nlohmann::json jg = options_json(g.options, g.initial_lr);
    jg["params"] = nlohmann::json::array();
    for (const Parameter& p : g.params) {
      jg["params"].push_back(index);
      auto it = state_.find(p.id());
      steps.push_back(it == state_.end() ? 0 : it->second.step);
      if (it != state_.end()) {
        const State& st = it->second;
        std::array<Tensor, 4> ts{st.master, st.state[0], st.state[1], st.state[2]};
        if (st.swapped) ts = swapped_tensors(st, p.data().shape(), map_files);
        const std::string prefix = "state." + std::to_string(index) + ".";
        for (int k = 0; k < 3; ++k) {
          if (ts[k + 1].defined()) out.tensors.emplace_back(prefix + names[k], ts[k + 1]);
        }
        if (ts[0].defined()) out.tensors.emplace_back(prefix + "master", ts[0]);
      }
      ++index;
    }
    groups.push_back(std::move(jg));
  }
  nlohmann::json j{
      {"algo", algo_name(algo_)},
      {"step", steps},
      {"param_groups", groups},
      {"rounding", rounding_ == kernels::Rounding::kStochastic ? "stochastic" : "nearest"},
      {"seed", seed_}};
  out.json = j.dump();
  return out;
}

void Optimizer::load_state_dict(const OptimizerState& in) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in.json);
  } catch (const nlohmann::json::exception& e) {
    BRAID_FAIL(kCorruptData, "optimizer state: not JSON: ", e.what());
  }
  std::map<std::string, Tensor> tensors(in.tensors.begin(), in.tensors.end());
  std::map<const void*, State> loaded;
  std::vector<OptimizerOptions> options;
  uint64_t words = 0;
  // Integers only: get<int64_t> converts a JSON float (1e48) with undefined behaviour.
  const auto integer = [](const nlohmann::json& v, std::string_view what) {
    BRAID_CHECK(v.is_number_integer(), kCorruptData, "optimizer state: ", what, " is ", v.dump(),
                ", expected an integer");
    return v;
  };
  try {
    const std::string algo = j.at("algo").get<std::string>();
    BRAID_CHECK(algo == algo_name(algo_), kInvalidArgument, "optimizer state: saved by '", algo,
                "', loading into '", algo_name(algo_), "'");
    const auto& groups = j.at("param_groups");
    BRAID_CHECK(groups.size() == groups_.size(), kInvalidArgument,
                "optimizer state: ", groups.size(), " parameter groups saved, this optimizer has ",
                groups_.size());
    const auto& steps = j.at("step");
    const auto names = state_names(algo_);
    int64_t index = 0;
    for (size_t gi = 0; gi < groups_.size(); ++gi) {
      const ParamGroup& g = groups_[gi];
      BRAID_CHECK(groups[gi].at("params").size() == g.params.size(), kInvalidArgument,
                  "optimizer state: group ", gi, " saved with ", groups[gi].at("params").size(),
                  " parameters, this optimizer's has ", g.params.size());
      options.push_back(options_from_json(groups[gi]));
      for (const Parameter& p : g.params) {
        State st;
        st.step = integer(steps.at(static_cast<size_t>(index)), "step").get<int64_t>();
        st.rng_offset = words;
        words += (static_cast<uint64_t>(p.data().numel()) + 3) / 4 * 4;
        const std::string prefix = "state." + std::to_string(index) + ".";
        auto take = [&](const std::string& name) -> Tensor {
          auto it = tensors.find(prefix + name);
          if (it == tensors.end()) return Tensor();
          BRAID_CHECK(it->second.shape() == p.data().shape() && it->second.dtype() == DType::kF32,
                      kInvalidArgument, "optimizer state: ", prefix + name, " is ",
                      dtype_name(it->second.dtype()), " ", shape_str(it->second.shape()),
                      ", expected f32 ", shape_str(p.data().shape()));
          // With offload, swap_out() below copies the tensor into the store's buffer.
          return swap_ ? it->second.contiguous() : it->second.contiguous().clone();
        };
        for (int k = 0; k < 3; ++k) {
          if (uses_state(algo_, options.back(), k) && st.step > 0) {
            st.state[k] = take(names[k]);
            BRAID_CHECK(st.state[k].defined(), kInvalidArgument, "optimizer state: missing ",
                        prefix + names[k]);
          }
        }
        st.master = take("master");
        if (st.step > 0 || st.master.defined()) loaded[p.id()] = std::move(st);
        ++index;
      }
    }
    rounding_ = j.at("rounding").get<std::string>() == "stochastic" ? kernels::Rounding::kStochastic
                                                                    : kernels::Rounding::kNearest;
    seed_ = integer(j.at("seed"), "seed").get<uint64_t>();
    for (size_t gi = 0; gi < groups_.size(); ++gi) {
      groups_[gi].initial_lr = groups[gi].at("initial_lr").get<double>();
    }
  } catch (const nlohmann::json::exception& e) {
    BRAID_FAIL(kCorruptData, "optimizer state: malformed JSON: ", e.what());
  }
  for (size_t gi = 0; gi < groups_.size(); ++gi) groups_[gi].options = options[gi];
  if (swap_) {
    for (auto& [id, st] : state_) {
      if (!st.key.empty()) swap_->erase(st.key);
    }
  }
  state_ = std::move(loaded);
  rng_words_ = words;
  if (swap_) swap_out_all();
}

void Optimizer::save(const std::filesystem::path& file) const {
  // With offload the tensors view the store's files (read-only maps): no copy in memory.
  const OptimizerState s = make_state_dict(true);
  save_safetensors(file, s.tensors, {{"braid.optimizer", s.json}});
}

void Optimizer::load(const std::filesystem::path& file) {
  const SafetensorsFile f = SafetensorsFile::open(file);
  auto it = f.metadata().find("braid.optimizer");
  BRAID_CHECK(it != f.metadata().end(), kCorruptData, file.string(),
              ": not an optimizer state (no \"braid.optimizer\" metadata)");
  load_state_dict({f.load_all(), it->second});
}

SGD::SGD(std::vector<Parameter> params, OptimizerOptions options, MasterWeights masters)
    : Optimizer(OptimAlgo::kSgd, {ParamGroup{std::move(params), options}}, masters) {}
SGD::SGD(std::vector<ParamGroup> groups, MasterWeights masters)
    : Optimizer(OptimAlgo::kSgd, std::move(groups), masters) {}
Adam::Adam(std::vector<Parameter> params, OptimizerOptions options, MasterWeights masters)
    : Optimizer(OptimAlgo::kAdam, {ParamGroup{std::move(params), options}}, masters) {}
Adam::Adam(std::vector<ParamGroup> groups, MasterWeights masters)
    : Optimizer(OptimAlgo::kAdam, std::move(groups), masters) {}
AdamW::AdamW(std::vector<Parameter> params, OptimizerOptions options, MasterWeights masters)
    : Optimizer(OptimAlgo::kAdamW, {ParamGroup{std::move(params), options}}, masters) {}
AdamW::AdamW(std::vector<ParamGroup> groups, MasterWeights masters)
    : Optimizer(OptimAlgo::kAdamW, std::move(groups), masters) {}
Lion::Lion(std::vector<Parameter> params, OptimizerOptions options, MasterWeights masters)
    : Optimizer(OptimAlgo::kLion, {ParamGroup{std::move(params), options}}, masters) {}
Lion::Lion(std::vector<ParamGroup> groups, MasterWeights masters)
    : Optimizer(OptimAlgo::kLion, std::move(groups), masters) {}

}  // namespace braid::nn
