// The runtime of a dispatched model (big_model_dispatch.cc plans it, big_model_dispatch_hooks.cc
// runs it): the offloaded tensors ("slots"), the layers whose forward streams them ("units"),
// the hooks and the prefetch thread. Not installed.
//
// Note [Dispatch units]: a unit is the nn::Layer whose forward brings a group of disk tensors
// in. Going down from the tensor's map entry along its path, the first Layer whose type is in
// DispatchOptions::preload_module_classes (a whole block); else the Layer holding the tensor
// (a Linear, LayerNorm, Embedding: Accelerate's per-leaf hooks), or, when that module is not a
// Layer, its nearest Layer ancestor. Hooks run only around Layer::forward, so a unit must be a
// Layer. A slot (one
// tensor handle, tied names together) may belong to several units (GPT's wte and lm_head on
// disk): each slot counts the units using it and goes back to meta when the last one ends.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "braid/accel/big_model.h"

namespace braid::accel {

// One offloaded tensor handle and where its values come from.
struct DispatchSlot {
  std::vector<std::string> names;  // every name of the handle (tied names), model order
  nn::Parameter param;             // a parameter's handle, else undefined
  nn::Module* owner = nullptr;     // a buffer: its module and leaf name
  std::string leaf;
  // A quantized layer's tensor (nn::Linear4bit / Linear8bitLt hold them outside their
  // parameters) and that layer's path.
  Tensor* external = nullptr;
  std::string module;
  DType dtype = DType::kF32;  // what the model holds (values are converted to it)
  Shape shape;
  // The source: an in-memory tensor (state_dict), a .dat file described by `info`, or a
  // tensor of a safetensors file (its memory map, kept open by the Impl).
  Tensor memory;
  std::filesystem::path file;
  OffloadedWeight info;
  const SafetensorsFile* safetensors = nullptr;
  std::string safetensors_name;
  int users = 0;  // units running that use it (forward thread only)

  Tensor& data() {
    if (external) return *external;
    return param.defined() ? param.data() : owner->buffer(leaf);
  }
  // The values, converted to `dtype`: a fresh CPU tensor (file) or the state_dict's tensor.
  // Thread-safe: reads only what dispatch set.
  Tensor read() const;
};

struct DispatchUnit {
  std::string name;  // the layer's module path
  nn::Layer* layer = nullptr;
  std::vector<size_t> slots;
  int64_t bytes = 0;
};

struct DispatchedModel::Impl : std::enable_shared_from_this<DispatchedModel::Impl> {
  DeviceMap device_map;
  std::vector<std::unique_ptr<SafetensorsFile>> checkpoint_files;  // DispatchOptions::checkpoint
  std::vector<DispatchSlot> slots;
  std::vector<DispatchUnit> units;
  nn::Layer* root = nullptr;  // the model when it is a Layer (a pass starts and ends there)
  bool prefetch = true;
  std::chrono::milliseconds timeout{};

  Impl() = default;
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  // kInvalidArgument naming a layer to hook (a unit, the root) that has hooks already.
  void check_hooks_free() const;
  // Sets the hooks (and starts the prefetch thread when there are two units or more).
  void install();
  // Stops the thread (waiting at most `timeout` for a read in flight, then leaving it to
  // finish on its own: the thread holds a reference to this Impl), removes the hooks, puts
  // every slot back on meta. Idempotent.
  void remove();

  std::vector<std::string> order_names() const;
  DispatchStats stats_copy() const;
  int64_t loaded_bytes() const;

 private:
  enum class Stage { kIdle, kLoading, kReady, kFailed };

  void pre_forward(size_t u);
  void post_forward(size_t u);
  void begin_pass();
  void end_pass();
  [[noreturn]] void refuse_backward(const std::string& where) const;
  void record(size_t u);
  // Reads the unit's slots (those with no user when `only_unused`): one tensor per slot of the
  // unit, undefined for a slot skipped.
  std::vector<Tensor> read_unit(size_t u, bool only_unused);
  // With mu_ held: waits until no read is in flight (kTimeout naming `who` after `timeout`).
  void wait_settled(std::unique_lock<std::mutex>& lk, const std::string& who);
  // With mu_ held: drops a staged read (waiting for one in flight first).
  void drop_staged(std::unique_lock<std::mutex>& lk, const std::string& who);
  void request(size_t u);
  void free_all();
  void worker_loop();

  std::vector<nn::Layer*> hooked_;
  bool installed_ = false;
  // The order units ran in on the first pass; frozen at its end (or when a unit repeats).
  std::vector<size_t> order_;
  std::vector<int64_t> position_;  // a unit's index in order_, -1 before it ran
  bool frozen_ = false;

  mutable std::mutex mu_;  // guards what follows (the worker and the forward thread share it)
  std::condition_variable cv_;
  Stage stage_ = Stage::kIdle;
  size_t staged_ = 0;  // the unit of the read in flight / ready / failed
  bool reading_ = false;
  bool stop_ = false;
  bool worker_exited_ = false;
  std::vector<Tensor> staged_tensors_;
  std::exception_ptr staged_error_;
  DispatchStats stats_;
  int64_t loaded_bytes_ = 0;  // forward thread writes, others read under mu_
  std::thread worker_;
};

}  // namespace braid::accel
