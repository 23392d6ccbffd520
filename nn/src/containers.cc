// ModuleList and Sequential: containers whose children are named "0", "1", ... or by the
// caller, as torch.nn.ModuleList / nn.Sequential.
#include <string>

#include "braid/nn/layers.h"

namespace braid::nn {

void ModuleList::push_back(std::shared_ptr<Module> m) {
  register_module(std::to_string(items_.size()), m);
  items_.push_back(std::move(m));
}

void Sequential::append(const std::string& name, std::shared_ptr<Layer> layer) {
  register_module(name, layer);
  layers_.push_back(std::move(layer));
}

Tensor Sequential::forward_impl(const Tensor& x) {
  Tensor y = x;
  for (auto& l : layers_) y = l->forward(y);
  return y;
}

Tensor Sequential::backward_impl(const Tensor& grad_output) {
  Tensor g = grad_output;
  for (auto it = layers_.rbegin(); it != layers_.rend(); ++it) g = (*it)->backward(g);
  return g;
}

}  // namespace braid::nn
