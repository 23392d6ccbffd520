// The finite-difference checker itself must catch a wrong backward (input or parameter).
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include "braid/nn/module.h"
#include "braid/tensor/ops.h"
#include "finite_diff.h"

namespace braid::nn {
namespace {

// y = x * w (elementwise), with a backward that is wrong by a factor in one place.
class Scaled : public Layer {
 public:
  Scaled(bool wrong_input, bool wrong_param)
      : Layer("Scaled"), wrong_input_(wrong_input), wrong_param_(wrong_param) {
    register_parameter("w", Parameter(Tensor::from_vector({0.5, -2, 3}, {3}, DType::kF64)));
  }

 protected:
  Tensor forward_impl(const Tensor& x) override {
    save_for_backward(x);
    return mul(x, param("w").data());
  }
  Tensor backward_impl(const Tensor& dy) override {
    const Tensor x = pop_saved<Tensor>();
    accumulate_grad(param("w"), scale(mul(dy, x), wrong_param_ ? 1.01 : 1.0));
    return scale(mul(dy, param("w").data()), wrong_input_ ? 1.01 : 1.0);
  }

 private:
  bool wrong_input_, wrong_param_;
};

TEST(FiniteDiff, AcceptsACorrectBackward) {
  Scaled ok(false, false);
  testing::check_layer_gradients(ok, Tensor::from_vector({1, 2, -1}, {3}, DType::kF64));
}

TEST(FiniteDiff, CatchesAWrongInputGradient) {
  Scaled bad(true, false);
  EXPECT_NONFATAL_FAILURE(
      testing::check_layer_gradients(bad, Tensor::from_vector({1, 2, -1}, {3}, DType::kF64)),
      "Scaled input");
}

TEST(FiniteDiff, CatchesAWrongParameterGradient) {
  Scaled bad(false, true);
  EXPECT_NONFATAL_FAILURE(
      testing::check_layer_gradients(bad, Tensor::from_vector({1, 2, -1}, {3}, DType::kF64)),
      "Scaled w");
}

}  // namespace
}  // namespace braid::nn
