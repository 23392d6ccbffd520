// A dispatched model at run time: the hooks that stream disk modules in and out around their
// forward, and the thread that reads the next one ahead (Note [Dispatch units] in
// big_model_dispatch_internal.h; docs/big-model.md, "Dispatch").
//
// Note [Dispatch prefetch]: the first forward records the order the units run in (FSDP's
// forward prefetch records its units the same way); from then on, when unit i starts, unit
// i + 1 of that order is read on the worker thread while i computes. At most one read is in
// flight or staged, so offloaded memory peaks at two units. The worker only produces tensors;
// putting them into modules, and back to meta, happens on the forward's thread. Every wait for
// the worker has a deadline (DispatchOptions::timeout). The order does not wrap around: after
// the last unit nothing is read, so between forwards every disk tensor is on meta.
#include <algorithm>

#include "big_model_dispatch_internal.h"
#include "braid/core/error.h"
#include "braid/core/logging.h"

namespace braid::accel {

Tensor DispatchSlot::read() const {
  if (safetensors) {  // a view of the file's map: copied out (converted) so the model owns it
    const Tensor view = safetensors->get(safetensors_name);
    return view.dtype() == dtype ? view.clone() : view.to(dtype);
  }
  Tensor t = memory.defined() ? memory : load_offloaded_weight(file, info);
  return t.dtype() == dtype ? t : t.to(dtype);
}

DispatchedModel::Impl::~Impl() {
  // The handle ran remove(); a worker left to finish a stalled read may be the last owner,
  // and it runs this destructor on its own thread.
  if (worker_.joinable()) worker_.detach();
}

void DispatchedModel::Impl::check_hooks_free() const {
  auto check = [](const nn::Layer* layer, const std::string& name) {
    const nn::ModuleHooks& h = layer->hooks();
    BRAID_CHECK(!h.pre_forward && !h.post_forward && !h.pre_backward && !h.post_backward,
                kInvalidArgument, "dispatch_model: ", layer->type_name(), " '", name,
                "' already has hooks (sharding, or another dispatch_model handle still alive); "
                "a layer takes one set of hooks");
  };
  for (const DispatchUnit& unit : units) check(unit.layer, unit.name);
  if (root) check(root, "");
}

void DispatchedModel::Impl::install() {
  position_.assign(units.size(), -1);
  const bool root_is_unit =
      std::any_of(units.begin(), units.end(), [&](const auto& u) { return u.layer == root; });
  for (size_t u = 0; u < units.size(); ++u) {
    nn::ModuleHooks hooks;
    const bool is_root = units[u].layer == root;
    hooks.pre_forward = [this, u, is_root](nn::Module&) {
      if (is_root) begin_pass();
      pre_forward(u);
    };
    hooks.post_forward = [this, u, is_root](nn::Module&) {
      post_forward(u);
      if (is_root) end_pass();
    };
    hooks.pre_backward = [this, u](nn::Module&) { refuse_backward(units[u].name); };
    units[u].layer->set_hooks(std::move(hooks));
    hooked_.push_back(units[u].layer);
  }
  if (root && !root_is_unit) {
    nn::ModuleHooks hooks;
    hooks.pre_forward = [this](nn::Module&) { begin_pass(); };
    hooks.post_forward = [this](nn::Module&) { end_pass(); };
    hooks.pre_backward = [this](nn::Module&) { refuse_backward(""); };
    root->set_hooks(std::move(hooks));
    hooked_.push_back(root);
  }
  installed_ = true;
  if (prefetch && units.size() >= 2) {
    worker_ = std::thread([self = shared_from_this()] { self->worker_loop(); });
  }
}

void DispatchedModel::Impl::remove() {
  if (!installed_) return;
  if (worker_.joinable()) {
    std::unique_lock<std::mutex> lk(mu_);
    stop_ = true;
    cv_.notify_all();
    if (cv_.wait_for(lk, timeout, [&] { return worker_exited_; })) {
      lk.unlock();
      worker_.join();
    } else {
      BRAID_LOG(kWarning) << "dispatch_model: the background read of '" << units[staged_].name
                          << "' did not finish within " << timeout.count()
                          << " ms; it is left to finish on its own thread";
      lk.unlock();
      worker_.detach();
    }
  }
  for (nn::Layer* layer : hooked_) layer->set_hooks({});
  hooked_.clear();
  free_all();
  {
    std::lock_guard<std::mutex> lk(mu_);  // a detached worker may still be finishing
    stop_ = true;
    stage_ = Stage::kIdle;
    staged_tensors_.clear();
    staged_error_ = nullptr;
  }
  installed_ = false;
}

// ---- the hooks ---------------------------------------------------------------------------

void DispatchedModel::Impl::begin_pass() {
  // A forward that threw left its units loaded: start clean.
  free_all();
}

void DispatchedModel::Impl::end_pass() {
  frozen_ = true;
  std::unique_lock<std::mutex> lk(mu_);
  if (stage_ != Stage::kIdle) drop_staged(lk, units[staged_].name);
}

void DispatchedModel::Impl::refuse_backward(const std::string& where) const {
  std::string names;
  for (size_t i = 0; i < units.size() && i < 4; ++i) names += (i ? ", " : "") + units[i].name;
  if (units.size() > 4) names += ", ... " + std::to_string(units.size()) + " layers";
  BRAID_FAIL(kNotSupported, "backward through the dispatched model ",
             where.empty() ? std::string("") : "at '" + where + "' ",
             "is not supported: modules mapped to disk (", names,
             ") hold no weights after their forward; a dispatched model runs inference. Train "
             "with shard::ShardedModel (parameter offload) or load the whole model");
}

void DispatchedModel::Impl::record(size_t u) {
  if (frozen_) return;
  if (position_[u] >= 0) {  // a unit runs again: the first pass is over (no root hook)
    frozen_ = true;
    return;
  }
  position_[u] = static_cast<int64_t>(order_.size());
  order_.push_back(u);
}

void DispatchedModel::Impl::pre_forward(size_t u) {
  record(u);
  DispatchUnit& unit = units[u];
  std::vector<Tensor> values;
  {
    std::unique_lock<std::mutex> lk(mu_);
    if (stage_ != Stage::kIdle) {
      wait_settled(lk, unit.name);
      if (staged_ == u) {
        Stage stage = stage_;
        std::exception_ptr error = staged_error_;
        values = std::move(staged_tensors_);
        staged_tensors_.clear();
        staged_error_ = nullptr;
        stage_ = Stage::kIdle;
        if (stage == Stage::kFailed) std::rethrow_exception(error);
        ++stats_.prefetch_hits;
      } else {
        drop_staged(lk, unit.name);
      }
    }
  }
  if (values.empty()) {
    values = read_unit(u, /*only_unused=*/true);
    std::lock_guard<std::mutex> lk(mu_);
    ++stats_.loads;
  }
  int64_t added = 0;
  for (size_t k = 0; k < unit.slots.size(); ++k) {
    DispatchSlot& slot = slots[unit.slots[k]];
    if (slot.users++ > 0) continue;  // another running unit holds it (a tied tensor)
    slot.data() = std::move(values[k]);
    added += static_cast<int64_t>(slot.data().nbytes());
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    loaded_bytes_ += added;
  }
  if (frozen_ && prefetch && worker_.joinable()) {
    const auto next = static_cast<size_t>(position_[u] + 1);
    if (position_[u] >= 0 && next < order_.size()) request(order_[next]);
  }
}

void DispatchedModel::Impl::post_forward(size_t u) {
  int64_t freed = 0;
  for (size_t s : units[u].slots) {
    DispatchSlot& slot = slots[s];
    if (slot.users == 0 || --slot.users > 0) continue;
    freed += static_cast<int64_t>(slot.data().nbytes());
    slot.data() = Tensor::empty(slot.shape, slot.dtype, kMeta);
  }
  std::lock_guard<std::mutex> lk(mu_);
  loaded_bytes_ -= freed;
}

void DispatchedModel::Impl::free_all() {
  int64_t freed = 0;
  for (DispatchSlot& slot : slots) {
    if (slot.users == 0) continue;
    slot.users = 0;
    freed += static_cast<int64_t>(slot.data().nbytes());
    slot.data() = Tensor::empty(slot.shape, slot.dtype, kMeta);
  }
  std::lock_guard<std::mutex> lk(mu_);
  loaded_bytes_ -= freed;
}

// ---- reading, on either thread -----------------------------------------------------------

std::vector<Tensor> DispatchedModel::Impl::read_unit(size_t u, bool only_unused) {
  const DispatchUnit& unit = units[u];
  std::vector<Tensor> out(unit.slots.size());
  int64_t bytes = 0;
  for (size_t k = 0; k < unit.slots.size(); ++k) {
    const DispatchSlot& slot = slots[unit.slots[k]];
    if (only_unused && slot.users > 0) continue;  // only the forward thread asks for this
    out[k] = slot.read();
    if (!slot.memory.defined()) bytes += static_cast<int64_t>(out[k].nbytes());
  }
  std::lock_guard<std::mutex> lk(mu_);
  stats_.bytes_read += bytes;
  return out;
}

void DispatchedModel::Impl::wait_settled(std::unique_lock<std::mutex>& lk, const std::string& who) {
  if (cv_.wait_for(lk, timeout, [&] { return stage_ != Stage::kLoading; })) return;
  BRAID_FAIL(kTimeout, "dispatch_model: the forward of '", who, "' waited ", timeout.count(),
             " ms for the background read of '", units[staged_].name,
             "' (DispatchOptions::timeout); is the offload folder on a stalled file system?");
}

void DispatchedModel::Impl::drop_staged(std::unique_lock<std::mutex>& lk, const std::string& who) {
  wait_settled(lk, who);
  staged_tensors_.clear();
  staged_error_ = nullptr;
  stage_ = Stage::kIdle;
  ++stats_.prefetch_dropped;
}

void DispatchedModel::Impl::request(size_t u) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stage_ != Stage::kIdle || stop_) return;
    stage_ = Stage::kLoading;
    staged_ = u;
    ++stats_.prefetches;
  }
  cv_.notify_all();
}

void DispatchedModel::Impl::worker_loop() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return stop_ || (stage_ == Stage::kLoading && !reading_); });
    if (stop_) {
      worker_exited_ = true;
      cv_.notify_all();
      return;
    }
    const size_t u = staged_;
    reading_ = true;
    lk.unlock();
    std::vector<Tensor> values;
    std::exception_ptr error;
    try {
      values = read_unit(u, /*only_unused=*/false);
    } catch (...) {
      error = std::current_exception();
    }
    lk.lock();
    reading_ = false;
    staged_tensors_ = std::move(values);
    staged_error_ = error;
    stage_ = error ? Stage::kFailed : Stage::kReady;
    cv_.notify_all();
  }
}

// ---- queries -----------------------------------------------------------------------------

std::vector<std::string> DispatchedModel::Impl::order_names() const {
  std::vector<std::string> out;
  for (size_t u : order_) out.push_back(units[u].name);
  return out;
}

DispatchStats DispatchedModel::Impl::stats_copy() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

int64_t DispatchedModel::Impl::loaded_bytes() const {
  std::lock_guard<std::mutex> lk(mu_);
  return loaded_bytes_;
}

}  // namespace braid::accel
