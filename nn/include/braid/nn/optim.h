// SPDX-License-Identifier: Apache-2.0
// Optimizers on lists of parameters: SGD, Adam, AdamW and Lion with torch.optim's update
// formulas, options structs and parameter groups (docs/mixed-precision.md, "Optimizers").
// Each step is one fused kernel pass per parameter group (kernels/optim.h) that reads the
// parameter (or its f32 master copy), the gradient and the state and writes them back.
//
//   auto params = model_parameters();
//   braid::nn::AdamW opt(params, {.lr = 3e-4, .weight_decay = 0.1});
//   ... backward ...
//   opt.step();
//   opt.zero_grad();
//   opt.save("ckpt/optimizer.safetensors");          // tensors + JSON scalars, atomic
//
// Mixed precision: a bf16 / f16 parameter gets an f32 master copy (MasterWeights::kAuto)
// that the step updates; the parameter is then the master rounded to nearest (or
// stochastically, for bf16, with Rounding::kStochastic). State is always f32.
//
// Offload (docs/offload.md): set_offload({.device = OffloadDevice::kNvme, .nvme_path = ...})
// keeps the state and masters in files between steps, stepping parameter by parameter.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "braid/amp/grad_scaler.h"
#include "braid/kernels/optim.h"
#include "braid/nn/offload.h"
#include "braid/nn/parameter.h"
#include "braid/tensor/safetensors.h"
#include "braid/tensor/tensor.h"

namespace braid {
class SwapStore;
}

namespace braid::nn {

enum class MasterWeights : uint8_t {
  kAuto,  // an f32 master for every non-f32 parameter
  kNone   // update 16-bit parameters directly (computed in f32, rounded once per step)
};

// Every hyper-parameter any of the algorithms reads; each optimizer documents its own.
struct OptimizerOptions {
  double lr = 1e-3;
  double weight_decay = 0.0;
  bool maximize = false;
  double momentum = 0.0;   // SGD
  double dampening = 0.0;  // SGD
  bool nesterov = false;   // SGD
  double beta1 = 0.9;      // Adam, AdamW, Lion
  double beta2 = 0.999;
  double eps = 1e-8;     // Adam, AdamW
  bool amsgrad = false;  // Adam, AdamW
};

struct ParamGroup {
  std::vector<Parameter> params;
  OptimizerOptions options;
  double initial_lr = 0.0;  // set by the optimizer; LR schedules scale it
};

// Optimizer state dict: tensors (saved as safetensors) and scalars (saved as JSON in the
// file's metadata under "braid.optimizer"). Tensor names: "state.<i>.<name>" with i the
// parameter's index over all groups in order and torch's state names (momentum_buffer,
// exp_avg, exp_avg_sq, max_exp_avg_sq) plus "master".
struct OptimizerState {
  NamedTensors tensors;
  std::string json;  // {"algo", "step": [per parameter], "param_groups": [{options, "params"}]}
};

class Optimizer : public amp::ScaledOptimizer {
 public:
  ~Optimizer() override;
  Optimizer(Optimizer&&) noexcept;
  Optimizer& operator=(Optimizer&&) noexcept;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One step over every group with a gradient: parameters whose grad is undefined are
  // skipped (torch's `p.grad is None`), as are those with requires_grad false.
  void step() override;
  // A step with every gradient multiplied by grad_scale as it is read (a fused unscale).
  void step(double grad_scale);
  // Sets gradients to zero, or to undefined with set_to_none (torch's default).
  void zero_grad(bool set_to_none = true);

  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  void add_param_group(ParamGroup group);
  kernels::OptimAlgo algo() const { return algo_; }
  // Whether 16-bit parameters get f32 masters (the Accelerator checks it against its
  // precision policy's master_dtype).
  MasterWeights master_weights() const { return masters_; }

  // Rounding of 16-bit parameters after each step; kStochastic needs bf16 parameters.
  void set_rounding(kernels::Rounding rounding, uint64_t seed = 0);
  // Threads a step may use: large groups are split over them with the same bits
  // (the cpu table's optimizer_step). Until set here, braid's intra-op thread count
  // (braid::get_num_threads(): BRAID_NUM_THREADS, default 1), read at each step. Raise it when
  // this rank owns spare cores.
  void set_num_threads(int threads);
  // The thread count the next step uses.
  int num_threads() const;
  // The f32 master copy of a parameter, or undefined when it has none (with kNvme offload: a
  // copy read back from the store).
  Tensor master(const Parameter& p) const;

  // Where the state lives between steps (docs/offload.md). Best called before the first
  // step; existing state moves (to the files, or back into memory). kNone and kCpu step every
  // group in one fused pass as before; kNvme steps parameter by parameter, reading the next
  // parameters' state while the current one is stepped, with the same bits. Throws
  // kInvalidArgument for a bad config and kIo naming offload_optimizer_nvme_path when the
  // folder is missing or not writable.
  void set_offload(const OffloadConfig& config);
  const OffloadConfig& offload() const { return offload_; }
  // Bytes of state (moments and masters) held in memory now, and in offload files. Between
  // steps with kNvme the first is 0; without offload it is the whole state.
  int64_t state_bytes_in_memory() const;
  int64_t state_bytes_on_disk() const;

  std::vector<Tensor> scaled_gradients() override;

  OptimizerState state_dict() const;
  // Restores state saved by an optimizer of the same algorithm over parameters of the same
  // shapes in the same order; throws kInvalidArgument naming the first mismatch (algorithm,
  // parameter count, a shape, a missing tensor).
  void load_state_dict(const OptimizerState& state);
  // Atomic save to one .safetensors file, and its inverse (kCorruptData for a file that is
  // not an optimizer state). With kNvme offload, save() streams the state files through
  // read-only maps and load() writes each parameter's state to the store as it goes: neither
  // holds the whole state in anonymous memory (state_dict() does, by its nature).
  void save(const std::filesystem::path& file) const;
  void load(const std::filesystem::path& file);

 protected:
  Optimizer(kernels::OptimAlgo algo, std::vector<ParamGroup> groups, MasterWeights masters);

 private:
  struct State {
    int64_t step = 0;
    Tensor master;  // f32
    Tensor state[3];
    uint64_t rng_offset = 0;  // stochastic rounding: first Philox word of this parameter
    // Offload (optim_offload.cc): the tensors above live in the swap store under `key` as one
    // f32 buffer of their rows (master, state0, state1, state2 as `rows` says) while swapped.
    std::string key;
    bool swapped = false;
    uint8_t rows = 0;
    Tensor packed;  // the buffer the tensors view, when they came from the store
  };
  State& state_for(const Parameter& p, const OptimizerOptions& o);
  void step_group(ParamGroup& g, double grad_scale);
  void check_group(const ParamGroup& g) const;
  void check_grad(const Parameter& p, size_t i) const;
  // The kernel descriptor and buffers of one parameter for this step; creates its state and
  // advances its step count. `dense` receives the gradient's contiguous form.
  void prepare(const Parameter& p, const OptimizerOptions& o, double grad_scale,
               kernels::OptimStep& s, kernels::OptimTensor& t, Tensor& dense);
  // Offload (optim_offload.cc).
  void step_offloaded(double grad_scale);
  void swap_in(State& st, const Shape& shape);
  void swap_out(State& st, const Tensor& data);  // data: the parameter's
  void swap_out_all();
  // Gives `st` one f32 buffer holding the rows in `rows` (each shaped as the parameter `data`):
  // existing tensors are copied in, new ones start as `data` in f32 (master) or zeros.
  void pack(State& st, uint8_t rows, const Tensor& data);
  // A swapped state's tensors {master, state0, state1, state2} (undefined where absent), read
  // from the store (a copy) or, with map_file, viewing its file.
  std::array<Tensor, 4> swapped_tensors(const State& st, const Shape& shape, bool map_file) const;
  OptimizerState make_state_dict(bool map_files) const;

  kernels::OptimAlgo algo_;
  MasterWeights masters_;
  std::vector<ParamGroup> groups_;
  std::map<const void*, State> state_;  // by Parameter::id()
  kernels::Rounding rounding_ = kernels::Rounding::kNearest;
  uint64_t seed_ = 0;
  uint64_t rng_words_ = 0;  // Philox words handed out to parameters so far
  int threads_ = 0;         // 0: braid::get_num_threads()
  OffloadConfig offload_;
  std::unique_ptr<SwapStore> swap_;  // kNvme
  uint64_t swap_keys_ = 0;           // keys handed out so far
};

// torch.optim.SGD: lr, momentum, dampening, nesterov, weight_decay, maximize.
class SGD : public Optimizer {
 public:
  SGD(std::vector<Parameter> params, OptimizerOptions options,
      MasterWeights masters = MasterWeights::kAuto);
  SGD(std::vector<ParamGroup> groups, MasterWeights masters = MasterWeights::kAuto);
};

// torch.optim.Adam: lr, beta1, beta2, eps, weight_decay (L2, added to the gradient),
// amsgrad, maximize. Defaults as torch: lr 1e-3, betas (0.9, 0.999), eps 1e-8, wd 0.
class Adam : public Optimizer {
 public:
  Adam(std::vector<Parameter> params, OptimizerOptions options = {},
       MasterWeights masters = MasterWeights::kAuto);
  Adam(std::vector<ParamGroup> groups, MasterWeights masters = MasterWeights::kAuto);
};

// torch.optim.AdamW: as Adam with decoupled weight decay (p *= 1 - lr * wd). torch's default
// weight_decay is 1e-2: pass it explicitly (OptimizerOptions' default is 0).
class AdamW : public Optimizer {
 public:
  AdamW(std::vector<Parameter> params, OptimizerOptions options = {},
        MasterWeights masters = MasterWeights::kAuto);
  AdamW(std::vector<ParamGroup> groups, MasterWeights masters = MasterWeights::kAuto);
};

// Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"): lr, beta1 (0.9),
// beta2 (0.99), weight_decay (decoupled). Pass beta2 = 0.99 explicitly for the paper's value.
class Lion : public Optimizer {
 public:
  Lion(std::vector<Parameter> params, OptimizerOptions options,
       MasterWeights masters = MasterWeights::kAuto);
  Lion(std::vector<ParamGroup> groups, MasterWeights masters = MasterWeights::kAuto);
};

}  // namespace braid::nn
