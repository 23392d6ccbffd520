// The fused optimizer step and the gradient unscale / finite check on the GPU
// (braid/kernels/cuda.h). Both are multi-tensor kernels in the manner of apex's and torch's
// multi_tensor_apply: the host packs up to kMaxTensors tensors' pointers and counts into one
// argument block passed by value, each tensor is cut into fixed-size chunks, and one CUDA
// block serves one chunk. So one launch updates many parameters, small or large, and a
// tensor too large for one launch continues in the next (first_chunk).
//
// The arithmetic is optim_math.h's, shared with the host test; Note [No FMA on the GPU] there
// says why every operation is an _rn intrinsic.
#include <algorithm>
#include <cstdint>

#include "braid/core/error.h"
#include "braid/kernels/cuda.h"
#include "optim_math.h"
#include "runtime.h"
#include "vendor.h"

namespace braid::kernels::cuda {
namespace {

constexpr int kThreads = 256;
// Kernel arguments are limited to 4 KiB on older drivers and on HIP; both blocks stay below.
constexpr int kMaxTensors = 40;
constexpr int kMaxUnscaleTensors = 96;
constexpr int64_t kMaxChunksPerLaunch = int64_t{1} << 30;  // gridDim.x allows 2^31 - 1

// ---- the optimizer kernel ----------------------------------------------------------------------

constexpr int64_t kUnitsPerChunk = 2048;  // 8192 elements (Note [Optimizer units]), 8 per thread

using math::OptimParams;
using math::OptimTensorArg;

struct OptimLaunch {
  OptimTensorArg t[kMaxTensors];
  int64_t chunk_end[kMaxTensors];  // blocks [chunk_end[t-1], chunk_end[t]) serve tensor t
  OptimParams c;
  int count;
};
static_assert(sizeof(OptimLaunch) <= 4096, "kernel argument block above 4 KiB");

template <OptimAlgo kAlgo, class P, class G>
__global__ void __launch_bounds__(kThreads) optim_kernel(const BRAID_GRID_CONSTANT OptimLaunch L) {
  const int64_t chunk = blockIdx.x;
  int t = 0;
  while (chunk >= L.chunk_end[t]) ++t;  // the grid has chunk_end[count - 1] blocks
  const OptimTensorArg& a = L.t[t];
  const int64_t local = chunk - (t > 0 ? L.chunk_end[t - 1] : 0) + a.first_chunk;
  const int64_t units = math::units_of(a.n, math::unit_shift(L.c.stochastic, a.rng_offset));
  const int64_t end = (local + 1) * kUnitsPerChunk;
  const int64_t u_end = units < end ? units : end;
  for (int64_t u = local * kUnitsPerChunk + threadIdx.x; u < u_end; u += kThreads) {
    math::optim_unit<kAlgo, P, G>(L.c, a, u);
  }
}

using OptimKernel = void (*)(const OptimLaunch);

template <OptimAlgo kAlgo, typename P>
OptimKernel optim_kernel_for_grad(DType grad) {
  switch (grad) {
    case DType::kF32:
      return optim_kernel<kAlgo, P, math::F32>;
    case DType::kBF16:
      return optim_kernel<kAlgo, P, math::BF16>;
    default:  // check_optim_step admits f32, bf16, f16 only
      return optim_kernel<kAlgo, P, math::F16>;
  }
}

template <OptimAlgo kAlgo>
OptimKernel optim_kernel_for(DType param, DType grad) {
  switch (param) {
    case DType::kF32:
      return optim_kernel_for_grad<kAlgo, math::F32>(grad);
    case DType::kBF16:
      return optim_kernel_for_grad<kAlgo, math::BF16>(grad);
    default:
      return optim_kernel_for_grad<kAlgo, math::F16>(grad);
  }
}

OptimKernel optim_kernel_for(OptimAlgo algo, DType param, DType grad) {
  switch (algo) {
    case OptimAlgo::kSgd:
      return optim_kernel_for<OptimAlgo::kSgd>(param, grad);
    case OptimAlgo::kAdam:
      return optim_kernel_for<OptimAlgo::kAdam>(param, grad);
    case OptimAlgo::kAdamW:
      return optim_kernel_for<OptimAlgo::kAdamW>(param, grad);
    case OptimAlgo::kLion:
      return optim_kernel_for<OptimAlgo::kLion>(param, grad);
  }
  BRAID_ASSERT(false, "optimizer_step: algo ", static_cast<int>(algo));
}

// Launches `kernel` over the first `L.count` tensors of L (whose chunk_end is filled) and
// empties L for the next batch.
template <typename Launch, typename Kernel>
void launch_batch(const char* op, Kernel kernel, Launch& L, cudaStream_t stream) {
  if (L.count == 0) return;
  const int64_t blocks = L.chunk_end[L.count - 1];
  void* args[] = {&L};
  BRAID_CUDA_CHECK(
      op, cudaLaunchKernel(reinterpret_cast<const void*>(kernel),
                           dim3(static_cast<unsigned>(blocks)), dim3(kThreads), args, 0, stream));
  L.count = 0;
}

// ---- the unscale / finite-check kernel ---------------------------------------------------------

constexpr int64_t kUnscaleChunk = 8192;  // elements per block, 32 per thread

struct UnscaleTensorArg {
  void* data;
  int64_t n;
  int64_t first_chunk;
};

struct UnscaleLaunch {
  UnscaleTensorArg t[kMaxUnscaleTensors];
  int64_t chunk_end[kMaxUnscaleTensors];
  int* found;  // set to 1 by any block that saw NaN or Inf; never cleared here
  float inv_scale;
  bool scale;  // inv_scale != 1
  int count;
};
static_assert(sizeof(UnscaleLaunch) <= 4096, "kernel argument block above 4 KiB");

template <class T>
__global__ void __launch_bounds__(kThreads)
    unscale_kernel(const BRAID_GRID_CONSTANT UnscaleLaunch L) {
  const int64_t chunk = blockIdx.x;
  int t = 0;
  while (chunk >= L.chunk_end[t]) ++t;
  const UnscaleTensorArg& a = L.t[t];
  const int64_t local = chunk - (t > 0 ? L.chunk_end[t - 1] : 0) + a.first_chunk;
  const int64_t begin = local * kUnscaleChunk;
  const int64_t end = a.n < begin + kUnscaleChunk ? a.n : begin + kUnscaleChunk;
  auto* data = static_cast<typename T::Bits*>(a.data);
  bool bad = false;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    const float x = T::load(data, i);
    bad |= (math::float_bits(x) & 0x7f800000u) == 0x7f800000u;
    if (L.scale) T::store(data, i, math::fmul(x, L.inv_scale));
  }
  // Racing stores of the same value: any order leaves 1.
  if (bad) *L.found = 1;
}

}  // namespace

void optimizer_step(const OptimStep& step, const OptimTensor* tensors, int64_t count,
                    void* stream) {
  check_optim_step(step, tensors, count);
  constexpr const char* kOp = "cuda::optimizer_step";
  const auto s = static_cast<cudaStream_t>(stream);
  const OptimKernel kernel = optim_kernel_for(step.algo, step.param_dtype, step.grad_dtype);

  OptimLaunch L{};
  L.c = math::optim_params(step);

  int64_t blocks = 0;
  for (int64_t i = 0; i < count; ++i) {
    const OptimTensor& x = tensors[i];
    if (x.n == 0) continue;  // its pointers may be null
    const int shift = math::unit_shift(L.c.stochastic, x.rng_offset);
    const int64_t chunks = (math::units_of(x.n, shift) + kUnitsPerChunk - 1) / kUnitsPerChunk;
    for (int64_t first = 0; first < chunks;) {
      const int64_t take = std::min(chunks - first, kMaxChunksPerLaunch - blocks);
      L.t[L.count] = {x.param,  x.master, x.grad,       x.state0, x.state1,
                      x.state2, x.n,      x.rng_offset, first};
      blocks += take;
      L.chunk_end[L.count++] = blocks;
      first += take;
      if (L.count == kMaxTensors || blocks == kMaxChunksPerLaunch) {
        launch_batch(kOp, kernel, L, s);
        blocks = 0;
      }
    }
  }
  launch_batch(kOp, kernel, L, s);
}

bool unscale_and_check_finite(DType dtype, void* const* data, const int64_t* counts, int64_t count,
                              float inv_scale, void* stream) {
  constexpr const char* kOp = "cuda::unscale_and_check_finite";
  BRAID_CHECK(dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16, kNotSupported,
              kOp, ": dtype ", dtype, " is not supported (expected f32, bf16 or f16)");
  BRAID_CHECK(count >= 0, kInvalidArgument, kOp, ": count ", count, " is negative");
  BRAID_CHECK(count == 0 || (data && counts), kInvalidArgument, kOp,
              ": data and counts must not be null when count is ", count);
  bool any = false;
  for (int64_t t = 0; t < count; ++t) {
    BRAID_CHECK(counts[t] >= 0, kInvalidArgument, kOp, ": counts[", t, "] = ", counts[t],
                " is negative");
    BRAID_CHECK(counts[t] == 0 || data[t], kInvalidArgument, kOp, ": data[", t,
                "] is null with counts[", t, "] = ", counts[t]);
    any |= counts[t] > 0;
  }
  if (!any) return false;  // nothing to read: no device work, no wait

  const auto s = static_cast<cudaStream_t>(stream);
  using Kernel = void (*)(const UnscaleLaunch);
  const Kernel kernel = dtype == DType::kF32    ? unscale_kernel<math::F32>
                        : dtype == DType::kBF16 ? unscale_kernel<math::BF16>
                                                : unscale_kernel<math::F16>;
  detail::StreamBuffer flag(kOp, sizeof(int), s);
  BRAID_CUDA_CHECK(kOp, cudaMemsetAsync(flag.get(), 0, sizeof(int), s));

  UnscaleLaunch L{};
  L.found = static_cast<int*>(flag.get());
  L.inv_scale = inv_scale;
  L.scale = inv_scale != 1.0f;
  int64_t blocks = 0;
  for (int64_t t = 0; t < count; ++t) {
    const int64_t chunks = (counts[t] + kUnscaleChunk - 1) / kUnscaleChunk;
    for (int64_t first = 0; first < chunks;) {
      const int64_t take = std::min(chunks - first, kMaxChunksPerLaunch - blocks);
      L.t[L.count] = {data[t], counts[t], first};
      blocks += take;
      L.chunk_end[L.count++] = blocks;
      first += take;
      if (L.count == kMaxUnscaleTensors || blocks == kMaxChunksPerLaunch) {
        launch_batch(kOp, kernel, L, s);
        blocks = 0;
      }
    }
  }
  launch_batch(kOp, kernel, L, s);

  // The one device-to-host transfer: the caller asked for a host bool.
  int found = 0;
  BRAID_CUDA_CHECK(kOp,
                   cudaMemcpyAsync(&found, flag.get(), sizeof(int), cudaMemcpyDeviceToHost, s));
  flag.release(kOp);
  BRAID_CUDA_CHECK(kOp, cudaStreamSynchronize(s));
  return found != 0;
}

}  // namespace braid::kernels::cuda
