// Compares braid's tensor ops with PyTorch outputs stored in torch_ops.safetensors (see
// gen_torch_reference.py). Tolerances are dtype-aware: |braid - torch| <= atol + rtol*|torch|,
// with rtol about one unit in the last place of the output dtype (two for bf16 matmul,
// whose f32 accumulation order differs from torch's).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "braid/tensor/ops.h"
#include "braid/tensor/safetensors.h"

namespace braid {
namespace {

const char* kFile = BRAID_SOURCE_DIR "/tests/reference/torch_ops.safetensors";

struct Tol {
  double rtol, atol;
};

Tol tolerance(DType dt, const std::string& op) {
  const bool approx = op != "relu" && op != "neg" && op != "abs" && op != "maximum";
  switch (dt) {
    case DType::kF32:
      return approx ? Tol{2e-6, 1e-6} : Tol{0, 0};
    case DType::kF16:
      return approx ? Tol{1e-3, 1e-5} : Tol{0, 0};
    case DType::kBF16:
      return approx ? Tol{8e-3, 1e-4} : Tol{0, 0};
    default:
      return {0, 0};
  }
}

Tensor run_case(const std::string& spec, const Tensor& x, const Tensor& y) {
  const size_t colon = spec.find(':');
  const std::string op = spec.substr(0, colon);
  const int arg = colon == std::string::npos ? 0 : std::stoi(spec.substr(colon + 1));
  if (op == "exp") return exp(x);
  if (op == "log") return log(x);
  if (op == "tanh") return tanh(x);
  if (op == "sigmoid") return sigmoid(x);
  if (op == "relu") return relu(x);
  if (op == "gelu") return gelu(x);
  if (op == "gelu_tanh") return gelu(x, GeluApproximate::kTanh);
  if (op == "silu") return silu(x);
  if (op == "sqrt") return sqrt(x);
  if (op == "rsqrt") return rsqrt(x);
  if (op == "neg") return neg(x);
  if (op == "abs") return abs(x);
  if (op == "softmax") return softmax(x, arg);
  if (op == "log_softmax") return log_softmax(x, arg);
  if (op == "sum") return colon == std::string::npos ? sum(x) : sum(x, arg);
  if (op == "sum_f32") return sum(x, DType::kF32);
  if (op == "mean") return colon == std::string::npos ? mean(x) : mean(x, arg);
  if (op == "amax") return amax(x);
  if (op == "norm") return norm(x);
  if (op == "matmul") return matmul(x, y);
  if (op == "matmul_bt") return matmul(x, y.t());  // a transposed view: no copy
  if (op == "add") return add(x, y);
  if (op == "sub") return sub(x, y);
  if (op == "mul") return mul(x, y);
  if (op == "div") return div(x, y);
  if (op == "maximum") return maximum(x, y);
  ADD_FAILURE() << "unknown op in reference file: " << spec;
  return x;
}

TEST(TorchReference, EveryCaseMatches) {
  const SafetensorsFile file = SafetensorsFile::open(kFile);
  ASSERT_GE(file.metadata().size(), 60u) << "reference file lost its cases";
  for (const auto& [name, spec] : file.metadata()) {
    SCOPED_TRACE(name + " (" + spec + ")");
    const Tensor x = file.get(name + ".x");
    const Tensor y = file.contains(name + ".y") ? file.get(name + ".y") : Tensor();
    const Tensor want = file.get(name + ".out");
    const Tensor got = run_case(spec, x, y);
    ASSERT_EQ(got.shape(), want.shape());
    ASSERT_EQ(got.dtype(), want.dtype());
    Tol tol = tolerance(want.dtype(), spec.substr(0, spec.find(':')));
    if (spec.starts_with("matmul") && want.dtype() == DType::kBF16) tol.rtol *= 2;
    if (spec.starts_with("matmul") || spec.starts_with("sum") || spec.starts_with("mean") ||
        spec.starts_with("norm")) {
      tol.atol = std::max(tol.atol, 1e-5);  // f32 accumulation order differs from torch's
    }
    const std::vector<double> g = got.to_vector(), w = want.to_vector();
    int bad = 0;
    for (size_t i = 0; i < g.size() && bad < 5; ++i) {
      const bool ok = (std::isnan(g[i]) && std::isnan(w[i])) || g[i] == w[i] ||
                      std::abs(g[i] - w[i]) <= tol.atol + tol.rtol * std::abs(w[i]);
      if (!ok) {
        ++bad;
        ADD_FAILURE() << "element " << i << ": braid " << g[i] << ", torch " << w[i];
      }
    }
  }
}

}  // namespace
}  // namespace braid
