#include "braid/nn/parameter.h"

namespace braid::nn {

std::vector<Parameter> make_parameters(const std::vector<Tensor>& tensors) {
  std::vector<Parameter> out;
  out.reserve(tensors.size());
  for (const Tensor& t : tensors) out.emplace_back(t);
  return out;
}

}  // namespace braid::nn
