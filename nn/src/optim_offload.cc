// Optimizer state offload (docs/offload.md, "Optimizer offload"): with kNvme every
// parameter's state (master, state0..2) is one f32 buffer of rows that lives in a SwapStore
// between steps. A step walks the parameters in order, reading up to buffer_count parameters'
// state ahead while the current one is stepped by the same kernel as without offload (one
// tensor per call instead of one call per group: the formulas are elementwise, so the bits are
// the same), and writes each back after its update.
#include <bit>
#include <deque>
#include <string>

#include "braid/core/error.h"
#include "braid/core/logging.h"
#include "braid/kernels/table.h"
#include "braid/nn/optim.h"
#include "braid/tensor/swap_store.h"

namespace braid::nn {
namespace {

// Row bits: 1 = master, 2 << k = state[k]. Rows are stored in this order.
constexpr uint8_t kMasterRow = 1;
constexpr uint8_t state_row(int k) {
  return static_cast<uint8_t>(2 << k);
}

}  // namespace

void Optimizer::pack(State& st, uint8_t rows, const Tensor& data) {
  if (rows == 0) return;
  Tensor* slots[4] = {&st.master, &st.state[0], &st.state[1], &st.state[2]};
  const int64_t n = data.numel();
  Tensor packed = Tensor::empty({std::popcount(rows) * n}, DType::kF32);
  int64_t r = 0;
  for (int i = 0; i < 4; ++i) {
    const uint8_t bit = i == 0 ? kMasterRow : state_row(i - 1);
    if ((rows & bit) == 0) {
      BRAID_ASSERT(!slots[i]->defined(), "a state row would be dropped");
      continue;
    }
    Tensor row = packed.narrow(0, (r++) * n, n).view(data.shape());
    if (slots[i]->defined()) {
      row.copy_(*slots[i]);
    } else if (i == 0) {
      row.copy_(data);  // the master starts as the parameter in f32, as data.to(kF32)
    } else {
      row.zero_();
    }
    *slots[i] = row;
  }
  st.packed = packed;
  st.rows = rows;
}

void Optimizer::swap_out(State& st, const Tensor& data) {
  uint8_t rows = st.master.defined() ? kMasterRow : 0;
  for (int k = 0; k < 3; ++k) {
    if (st.state[k].defined()) rows |= state_row(k);
  }
  if (rows == 0) return;  // nothing but the step count (SGD without momentum on f32)
  if (!st.packed.defined() || rows != st.rows) pack(st, rows, data);
  if (st.key.empty()) st.key = "state" + std::to_string(swap_keys_++);
  swap_->put(st.key, st.packed);
  st.master = Tensor();
  for (Tensor& t : st.state) t = Tensor();
  st.packed = Tensor();
  st.swapped = true;
}

void Optimizer::swap_in(State& st, const Shape& shape) {
  const Tensor packed = swap_->get(st.key, offload_.io_timeout);
  const int64_t n = shape_numel(shape);
  BRAID_ASSERT(packed.numel() == std::popcount(st.rows) * n, "swapped state of ", st.key, " has ",
               packed.numel(), " elements");
  int64_t r = 0;
  auto row = [&] { return packed.narrow(0, (r++) * n, n).view(shape); };
  if (st.rows & kMasterRow) st.master = row();
  for (int k = 0; k < 3; ++k) {
    if (st.rows & state_row(k)) st.state[k] = row();
  }
  st.packed = packed;
  st.swapped = false;
}

std::array<Tensor, 4> Optimizer::swapped_tensors(const State& st, const Shape& shape,
                                                 bool map_file) const {
  Tensor packed = map_file ? swap_->map(st.key) : swap_->get(st.key, offload_.io_timeout);
  if (!map_file) swap_->release(st.key);  // our reference keeps the memory; the store lets go
  const int64_t n = shape_numel(shape);
  std::array<Tensor, 4> out;
  int64_t r = 0;
  for (int i = 0; i < 4; ++i) {
    const uint8_t bit = i == 0 ? kMasterRow : state_row(i - 1);
    if (st.rows & bit) out[i] = packed.narrow(0, (r++) * n, n).view(shape);
  }
  return out;
}

void Optimizer::swap_out_all() {
  // Parameter by parameter, at most buffer_count writes in flight.
  std::deque<std::string> writing;
  try {
    for (const ParamGroup& g : groups_) {
      for (const Parameter& p : g.params) {
        auto it = state_.find(p.id());
        if (it == state_.end() || it->second.swapped) continue;
        swap_out(it->second, p.data());
        if (!it->second.swapped) continue;
        writing.push_back(it->second.key);
        while (static_cast<int64_t>(writing.size()) >= offload_.buffer_count) {
          swap_->wait_written(writing.front(), offload_.io_timeout);
          writing.pop_front();
        }
      }
    }
    swap_->flush(offload_.io_timeout);
  } catch (...) {
    // What did not reach the store must not view anyone else's memory (load_state_dict's
    // input): give it its own.
    for (auto& [id, st] : state_) {
      if (st.swapped || st.packed.defined()) continue;
      if (st.master.defined()) st.master = st.master.clone();
      for (Tensor& t : st.state) {
        if (t.defined()) t = t.clone();
      }
    }
    throw;
  }
}

void Optimizer::set_offload(const OffloadConfig& config) {
  check_offload_config(config);
  // kCpu: cpu parameters (the only kind this build steps, see check_group) already have their
  // state in host memory, so there is nothing to move. GPU ranks will keep the state and the
  // master on the host, step there and copy the parameter back (docs/offload.md).
  const bool same_store =
      swap_ && config.device == OffloadDevice::kNvme && config.nvme_path == offload_.nvme_path;
  // The new store first: a bad folder then changes nothing.
  std::unique_ptr<SwapStore> fresh;
  if (config.device == OffloadDevice::kNvme && !same_store) {
    SwapStoreOptions so;
    so.folder = config.nvme_path;
    so.option = "offload_optimizer_nvme_path";
    so.tag = log_rank() >= 0 ? "rank" + std::to_string(log_rank()) : std::string();
    so.timeout = config.io_timeout;
    fresh = std::make_unique<SwapStore>(std::move(so));
  }
  if (swap_ && !same_store) {
    // Back into memory from the old store before it goes (an error here leaves the old config
    // and every state either in memory or in the old store).
    for (const ParamGroup& g : groups_) {
      for (const Parameter& p : g.params) {
        auto it = state_.find(p.id());
        if (it == state_.end() || !it->second.swapped) continue;
        swap_in(it->second, p.data().shape());
        swap_->release(it->second.key);
      }
    }
    for (auto& [id, st] : state_) st.key.clear();
    swap_.reset();
  }
  offload_ = config;
  if (fresh) {
    swap_ = std::move(fresh);
    swap_out_all();
  }
}

void Optimizer::step_offloaded(double grad_scale) {
  // Check every gradient first, so a bad one leaves every state untouched.
  struct Item {
    const ParamGroup* group;
    const Parameter* param;
  };
  std::vector<Item> items;
  for (const ParamGroup& g : groups_) {
    for (size_t i = 0; i < g.params.size(); ++i) {
      const Parameter& p = g.params[i];
      if (!p.requires_grad() || !p.grad().defined()) continue;
      check_grad(p, i);
      items.push_back({&g, &p});
    }
  }
  // Note [Offload window]: at most buffer_count parameters' state is in memory: the ones whose
  // write-back has not completed (`writing`, oldest first) plus those asked for and not yet
  // stepped ([cur, next), the current one included). Reads ahead are issued only while that
  // sum is below the window; a write that completed frees its slot (the store drops its
  // memory once written).
  const size_t window = static_cast<size_t>(offload_.buffer_count);
  std::deque<std::string> writing;
  size_t next = 0;
  auto request = [&](size_t j) {
    auto it = state_.find(items[j].param->id());
    if (it != state_.end() && it->second.swapped) swap_->prefetch(it->second.key);
  };
  for (size_t cur = 0; cur < items.size(); ++cur) {
    while (!writing.empty() && !swap_->write_pending(writing.front())) writing.pop_front();
    if (next == cur) {
      while (writing.size() + 1 > window) {
        swap_->wait_written(writing.front(), offload_.io_timeout);
        writing.pop_front();
      }
      request(next++);
    }
    while (next < items.size() && writing.size() + (next - cur) < window) request(next++);

    const Parameter& p = *items[cur].param;
    auto it = state_.find(p.id());
    if (it != state_.end() && it->second.swapped) swap_in(it->second, p.data().shape());
    kernels::OptimStep s;
    kernels::OptimTensor t;
    Tensor dense;
    prepare(p, items[cur].group->options, grad_scale, s, t, dense);
    // Offloaded state lives on the host: the step runs on the cpu table.
    kernels::kernels_for(kCPU).optimizer_step(kernels::stream_for(kCPU), s, &t, 1, threads_);
    State& st = state_.at(p.id());
    swap_out(st, p.data());
    if (st.swapped) writing.push_back(st.key);
  }
  // Every write done before returning: between steps no state is in memory, and an I/O error
  // surfaces here rather than at the next step.
  swap_->flush(offload_.io_timeout);
}

int64_t Optimizer::state_bytes_in_memory() const {
  int64_t bytes = 0;
  for (const auto& [id, st] : state_) {
    if (st.master.defined()) bytes += static_cast<int64_t>(st.master.nbytes());
    for (const Tensor& t : st.state) {
      if (t.defined()) bytes += static_cast<int64_t>(t.nbytes());
    }
  }
  if (swap_) bytes += static_cast<int64_t>(swap_->stats().resident_bytes);
  return bytes;
}

int64_t Optimizer::state_bytes_on_disk() const {
  return swap_ ? static_cast<int64_t>(swap_->stats().file_bytes) : 0;
}

}  // namespace braid::nn
