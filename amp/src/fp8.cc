// fp8 quantization with per-tensor scales, delayed scaling, and the CPU fp8 GEMM
// (dequantize + f32 GEMM). docs/mixed-precision.md, "fp8".
#include "braid/amp/fp8.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "braid/comm/process_group.h"
#include "braid/core/error.h"
#include "braid/kernels/table.h"
#include "braid/tensor/ops.h"

namespace braid::amp {
namespace {

void check_fp8(DType d, const char* what) {
  BRAID_CHECK(d == DType::kF8E4M3 || d == DType::kF8E5M2, kInvalidArgument, what, ": dtype ",
              dtype_name(d), ": expected f8e4m3 or f8e5m2");
}

bool is_float_dtype(DType d) {
  return d == DType::kF32 || d == DType::kF64 || d == DType::kF16 || d == DType::kBF16;
}

// amax(|x|) in f32 (NaN when x holds one).
float abs_max(const Tensor& xf32) {
  if (xf32.numel() == 0) return 0.0f;
  return static_cast<float>(amax(abs(xf32)).item());
}

}  // namespace

Fp8Format parse_fp8_format(std::string_view name) {
  if (name == "E4M3" || name == "e4m3") return Fp8Format::kE4M3;
  if (name == "HYBRID" || name == "hybrid") return Fp8Format::kHybrid;
  BRAID_FAIL(kInvalidArgument, "fp8_format '", name, "': expected \"E4M3\" or \"HYBRID\"");
}

AmaxComputeAlgo parse_amax_compute_algo(std::string_view name) {
  if (name == "max") return AmaxComputeAlgo::kMax;
  if (name == "most_recent") return AmaxComputeAlgo::kMostRecent;
  BRAID_FAIL(kInvalidArgument, "amax_compute_algo '", name,
             "': expected \"max\" or \"most_recent\"");
}

DType fp8_dtype(Fp8Format format, Fp8Role role) {
  return format == Fp8Format::kHybrid && role == Fp8Role::kGradient ? DType::kF8E5M2
                                                                    : DType::kF8E4M3;
}

double fp8_max(DType d) {
  check_fp8(d, "fp8_max");
  return d == DType::kF8E4M3 ? 448.0 : 57344.0;
}

Fp8Tensor quantize_fp8(const Tensor& x, DType d, float scale) {
  check_fp8(d, "quantize_fp8");
  BRAID_CHECK(is_float_dtype(x.dtype()), kInvalidArgument, "quantize_fp8: input dtype ",
              dtype_name(x.dtype()), ": expected a float dtype (f64, f32, f16, bf16)");
  BRAID_CHECK(std::isfinite(scale) && scale > 0, kInvalidArgument, "quantize_fp8: scale ", scale,
              ": expected a finite value > 0");
  Tensor scaled = x.to(DType::kF32).contiguous().clone();
  const kernels::KernelTable& k = kernels::kernels_for(x.device());
  kernels::require_support(k, kernels::Op::kScale, DType::kF32);
  kernels::require_support(k, kernels::Op::kCast, DType::kF32);
  const Stream s = kernels::stream_for(x.device());
  k.scale(s, DType::kF32, scaled.numel(), scale, scaled.data_ptr(), scaled.data_ptr());
  Fp8Tensor out;
  out.data = Tensor::empty(x.shape(), d, x.device());
  k.cast(s, scaled.data_ptr(), DType::kF32, out.data.data_ptr(), d, scaled.numel(),
         kernels::CastMode::kSaturate);
  out.scale = scale;
  out.scale_inv = 1.0f / scale;
  return out;
}

Tensor dequantize_fp8(const Fp8Tensor& x, DType out_dtype) {
  check_fp8(x.data.dtype(), "dequantize_fp8");
  Tensor f = x.data.to(DType::kF32).contiguous().clone();
  const kernels::KernelTable& k = kernels::kernels_for(f.device());
  kernels::require_support(k, kernels::Op::kScale, DType::kF32);
  k.scale(kernels::stream_for(f.device()), DType::kF32, f.numel(), x.scale_inv, f.data_ptr(),
          f.data_ptr());
  return out_dtype == DType::kF32 ? f : f.to(out_dtype);
}

Tensor fp8_matmul(const Fp8Tensor& a, const Fp8Tensor& b, Fp8Trans trans_b, DType out_dtype) {
  BRAID_CHECK(a.data.dim() == 2 && b.data.dim() == 2, kInvalidArgument, "fp8_matmul: operands ",
              shape_str(a.data.shape()), " and ", shape_str(b.data.shape()),
              ": expected 2-d tensors");
  BRAID_CHECK(out_dtype == DType::kF32 || out_dtype == DType::kBF16, kInvalidArgument,
              "fp8_matmul: out_dtype ", dtype_name(out_dtype), ": expected f32 or bf16");
  const Tensor fa = dequantize_fp8(a);
  Tensor fb = dequantize_fp8(b);
  if (trans_b == Fp8Trans::kYes) fb = fb.t();
  BRAID_CHECK(fa.size(1) == fb.size(0), kInvalidArgument, "fp8_matmul: inner dimensions ",
              fa.size(1), " and ", fb.size(0), " differ");
  Tensor y = matmul(fa, fb);
  return out_dtype == DType::kF32 ? y : y.to(out_dtype);
}

DelayedScaling::DelayedScaling(Fp8RecipeKwargs recipe, DType d) : recipe_(recipe), dtype_(d) {
  check_fp8(d, "DelayedScaling");
  BRAID_CHECK(recipe.margin >= 0, kInvalidArgument, "fp8 recipe margin ", recipe.margin,
              ": expected >= 0");
  BRAID_CHECK(recipe.interval >= 1, kInvalidArgument, "fp8 recipe interval ", recipe.interval,
              ": expected >= 1");
  BRAID_CHECK(recipe.amax_history_len >= 1, kInvalidArgument, "fp8 recipe amax_history_len ",
              recipe.amax_history_len, ": expected >= 1");
  history_.assign(static_cast<size_t>(recipe.amax_history_len), 0.0f);
}

Fp8Tensor DelayedScaling::quantize(const Tensor& x) {
  Fp8Tensor q = quantize_fp8(x, dtype_, scale_);
  const float a = abs_max(x.to(DType::kF32));
  // NaN wins, so a NaN amax keeps the scale at the next update (TE's isfinite check).
  history_[0] = std::isnan(a) || std::isnan(history_[0]) ? NAN : std::max(history_[0], a);
  return q;
}

float DelayedScaling::update(ProcessGroup* group) {
  ++updates_;
  if (updates_ % recipe_.interval == 0) {
    float amax = history_[0];
    if (recipe_.amax_compute_algo == AmaxComputeAlgo::kMax) {
      for (float h : history_) amax = std::isnan(h) || std::isnan(amax) ? NAN : std::max(amax, h);
    }
    if (group != nullptr && group->size() > 1) {
      // Every rank must quantize with the same scale, or replicas drift apart.
      Tensor t = Tensor::full({1}, static_cast<double>(amax), DType::kF32);
      CallOptions o;
      o.op = ReduceOp::kMax;
      group->all_reduce(t, o);
      amax = static_cast<float>(t.item());
    }
    if (std::isfinite(amax) && amax > 0.0f) {
      const float fmax = static_cast<float>(fp8_max(dtype_));
      scale_ = (fmax / amax) / std::ldexp(1.0f, recipe_.margin);
    }
  }
  // Roll: history[i] = history[i + 1], the oldest slot takes this step's amax, [0] restarts.
  std::rotate(history_.begin(), history_.begin() + 1, history_.end());
  history_[0] = 0.0f;
  return scale_;
}

// ---- fp8 training ---------------------------------------------------------------------

namespace {
thread_local Fp8Training* t_fp8 = nullptr;
}  // namespace

Fp8Training::Fp8Training(Fp8TrainingOptions options) : options_(options) {
  // The recipe's checks, once, before any layer joins.
  (void)DelayedScaling(options_.recipe, DType::kF8E4M3);
}

Fp8Training::LinearScaling* Fp8Training::linear(const void* layer, int64_t in_features,
                                                int64_t out_features) {
  if (in_features % 16 != 0 || out_features % 16 != 0) return nullptr;
  if (auto it = by_layer_.find(layer); it != by_layer_.end()) return it->second;
  const DType grad = fp8_dtype(options_.recipe.fp8_format, Fp8Role::kGradient);
  auto scaling = std::make_unique<LinearScaling>(LinearScaling{
      DelayedScaling(options_.recipe, DType::kF8E4M3),
      DelayedScaling(options_.recipe, DType::kF8E4M3), DelayedScaling(options_.recipe, grad)});
  LinearScaling* out = scaling.get();
  order_.emplace_back(layer, std::move(scaling));
  by_layer_.emplace(layer, out);
  return out;
}

void Fp8Training::update(ProcessGroup* group) {
  if (order_.empty()) return;
  if (group != nullptr && group->size() > 1) {
    const int64_t n = static_cast<int64_t>(order_.size()) * 3;
    Tensor amax = Tensor::empty({n}, DType::kF32);
    float* a = amax.data<float>();
    int64_t i = 0;
    for (auto& [key, s] : order_) {
      for (DelayedScaling* d : {&s->input, &s->weight, &s->grad_output}) {
        const float v = d->step_amax();
        a[i++] = std::isfinite(v) ? v : INFINITY;  // NaN / Inf: the scale is kept
      }
    }
    CallOptions o;
    o.op = ReduceOp::kMax;
    group->all_reduce(amax, o);
    i = 0;
    for (auto& [key, s] : order_) {
      for (DelayedScaling* d : {&s->input, &s->weight, &s->grad_output}) d->set_step_amax(a[i++]);
    }
  }
  for (auto& [key, s] : order_) {
    s->input.update();
    s->weight.update();
    s->grad_output.update();
  }
}

Fp8Training* fp8_training() {
  return t_fp8;
}

Fp8Training* exchange_fp8_training(Fp8Training* training) {
  return std::exchange(t_fp8, training);
}

Fp8Scope::Fp8Scope(Fp8Training* training) : previous_(exchange_fp8_training(training)) {}

Fp8Scope::~Fp8Scope() {
  exchange_fp8_training(previous_);
}

}  // namespace braid::amp
