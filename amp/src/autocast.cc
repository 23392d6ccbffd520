// The per-thread autocast state and its cast cache (docs/mixed-precision.md, "Autocast").
#include "braid/amp/autocast.h"

#include <map>
#include <memory>
#include <tuple>
#include <utility>

#include "braid/amp/fp8.h"
#include "braid/core/error.h"

namespace braid::amp {
namespace {

struct ThreadState {
  bool enabled = false;
  DType dtype = DType::kF32;
  bool cache = false;
  int depth = 0;  // scopes alive on this thread, enabled or not
  // (storage, offset, dtype) -> the cast; cleared when the outermost scope ends. As torch's
  // cached_casts, the entry holds its source weakly: a source freed meanwhile (a ZeRO-3 unit
  // released after its forward) is not kept alive by the cache, and a later storage at the
  // same address is told apart by the expired reference.
  struct Entry {
    std::weak_ptr<Storage> source;
    Shape shape;
    Strides strides;
    Tensor cast;
  };
  std::map<std::tuple<const void*, int64_t, DType>, Entry> cache_entries;
};

ThreadState& state() {
  thread_local ThreadState s;
  return s;
}

bool is_float(DType d) {
  return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16 || d == DType::kF64;
}

}  // namespace

AutocastScope::AutocastScope(DType dtype, AutocastKwargs kwargs) {
  BRAID_CHECK(!kwargs.enabled || dtype == DType::kF16 || dtype == DType::kBF16, kInvalidArgument,
              "AutocastScope: dtype ", dtype_name(dtype), ": expected f16 or bf16");
  ThreadState& s = state();
  prev_enabled_ = s.enabled;
  prev_dtype_ = s.dtype;
  prev_cache_ = s.cache;
  s.enabled = kwargs.enabled;
  if (kwargs.enabled) s.dtype = dtype;
  s.cache = kwargs.cache_enabled.value_or(true);
  ++s.depth;
}

AutocastScope::AutocastScope(DType dtype, AutocastKwargs kwargs, Fp8Training* fp8)
    : AutocastScope(dtype, kwargs) {
  if (fp8 != nullptr) {
    prev_fp8_ = exchange_fp8_training(fp8);
    fp8_set_ = true;
  }
}

AutocastScope::AutocastScope(AutocastScope&& other) noexcept
    : active_(other.active_),
      fp8_set_(std::exchange(other.fp8_set_, false)),
      prev_fp8_(other.prev_fp8_),
      prev_enabled_(other.prev_enabled_),
      prev_dtype_(other.prev_dtype_),
      prev_cache_(other.prev_cache_) {
  other.active_ = false;
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  ThreadState& s = state();
  s.enabled = prev_enabled_;
  s.dtype = prev_dtype_;
  s.cache = prev_cache_;
  if (--s.depth == 0) s.cache_entries.clear();
  if (fp8_set_) exchange_fp8_training(prev_fp8_);  // torch drops its cache at the outermost exit
}

AutocastScope AutocastScope::noop() {
  return AutocastScope(NoopTag{});
}

bool autocast_enabled() {
  return state().enabled;
}
DType autocast_low_dtype() {
  return state().enabled ? state().dtype : DType::kF32;
}

DType autocast_dtype(OpCategory category, DType input_dtype) {
  const ThreadState& s = state();
  if (!s.enabled || !is_float(input_dtype) || input_dtype == DType::kF64) return input_dtype;
  switch (category) {
    case OpCategory::kMatmul:
      return s.dtype;
    case OpCategory::kFp32:
      return DType::kF32;
    case OpCategory::kPromote:
    case OpCategory::kPassThrough:
      return input_dtype;
  }
  return input_dtype;
}

Tensor autocast_cast(const Tensor& x, OpCategory category) {
  const DType target = autocast_dtype(category, x.dtype());
  if (target == x.dtype()) return x;
  ThreadState& s = state();
  // Only f32 -> low casts are cached (torch caches casts of f32 leaf tensors).
  if (!s.cache || x.dtype() != DType::kF32) return x.to(target);
  const auto key = std::make_tuple(static_cast<const void*>(x.storage().get()), x.offset(), target);
  auto it = s.cache_entries.find(key);
  if (it != s.cache_entries.end() && !it->second.source.expired() &&
      it->second.source.lock() == x.storage() && it->second.shape == x.shape() &&
      it->second.strides == x.strides()) {
    return it->second.cast;
  }
  Tensor cast = x.to(target);
  s.cache_entries[key] = {x.storage(), x.shape(), x.strides(), cast};
  return cast;
}

AutocastScope get_mixed_precision_context_manager(bool native_amp, PrecisionType precision,
                                                  AutocastKwargs kwargs) {
  if (!native_amp) return AutocastScope::noop();
  return PrecisionPolicy::from(precision).autocast(kwargs);
}

AutocastScope PrecisionPolicy::autocast() const {
  return autocast(AutocastKwargs{});
}

AutocastScope PrecisionPolicy::autocast(const AutocastKwargs& kwargs, Fp8Training* fp8) const {
  if (compute_dtype != DType::kF16 && compute_dtype != DType::kBF16) return AutocastScope::noop();
  return AutocastScope(compute_dtype, kwargs, type == PrecisionType::kFp8 ? fp8 : nullptr);
}

std::function<Tree(const Tree&)> convert_outputs_to_fp32(std::function<Tree(const Tree&)> forward) {
  BRAID_CHECK(static_cast<bool>(forward), kInvalidArgument,
              "convert_outputs_to_fp32: expected a forward function, got an empty one");
  return [fwd = std::move(forward)](const Tree& input) { return convert_to_fp32(fwd(input)); };
}

}  // namespace braid::amp
