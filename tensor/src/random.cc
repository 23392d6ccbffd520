// Random factories: Tensor::rand / randn draw f32 (or f64) from a Philox Generator and
// convert once to the requested dtype, so a bf16 randn holds the rounded f32 draw - the same
// numbers an f32 randn of the same (seed, offset) gives, rounded.
#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "braid/kernels/cpu.h"
#include "braid/tensor/tensor.h"

namespace braid {
namespace {

enum class Dist { kUniform, kNormal };

Tensor draw(Shape shape, DType dtype, Generator* gen, Dist dist, const char* what) {
  BRAID_CHECK(is_floating(dtype), kInvalidArgument, what, ": dtype ", dtype,
              " is not a floating type");
  Generator& g = gen ? *gen : default_generator(kCPU);
  const DType draw_dtype = dtype == DType::kF64 ? DType::kF64 : DType::kF32;
  Tensor out = Tensor::empty(std::move(shape), draw_dtype);
  const int64_t n = out.numel();
  if (draw_dtype == DType::kF64) {
    auto* p = static_cast<double*>(out.data_ptr());
    dist == Dist::kUniform ? g.fill_uniform(p, n) : g.fill_normal(p, n);
  } else {
    auto* p = static_cast<float*>(out.data_ptr());
    dist == Dist::kUniform ? g.fill_uniform(p, n) : g.fill_normal(p, n);
  }
  return out.to(dtype);
}

}  // namespace

Tensor Tensor::rand(Shape shape, DType dtype, Generator* gen) {
  return draw(std::move(shape), dtype, gen, Dist::kUniform, "rand");
}

Tensor Tensor::randn(Shape shape, DType dtype, Generator* gen) {
  return draw(std::move(shape), dtype, gen, Dist::kNormal, "randn");
}

}  // namespace braid
