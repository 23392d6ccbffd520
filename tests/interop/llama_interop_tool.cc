// llama_interop_tool: the C++ side of the transformers Llama interop test
// (llama_transformers.py).
//
//   llama_interop_tool check <model> <reference> <tol>
//       llama_from_pretrained(<model>); runs the reference's "ids" forward, the mean
//       cross-entropy against its "targets" and the backward, and compares logits, loss and the
//       gradient of every parameter with the reference's "logits", "loss" and "grad.<name>" as
//       normalized errors max |braid - torch| / max |torch|; prints each, fails above <tol>.
//   llama_interop_tool save <folder>
//       a seeded Llama (grouped keys / values, untied head, norms away from 1) ->
//       <folder>/model (save_pretrained) and <folder>/braid_logits.safetensors {ids, logits}
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <string>

#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "braid/nn/llama.h"
#include "braid/nn/loss.h"
#include "braid/tensor/ops.h"
#include "braid/tensor/safetensors.h"

namespace {

using namespace braid;

std::map<std::string, Tensor> by_name(const NamedTensors& file) {
  std::map<std::string, Tensor> out;
  for (auto& [name, t] : file) out[name] = t;
  return out;
}

Tensor need(const std::map<std::string, Tensor>& m, const std::string& name) {
  const auto it = m.find(name);
  BRAID_CHECK(it != m.end(), kInvalidArgument, "the reference file has no tensor '", name, "'");
  return it->second;
}

// max |a - b| / max |b| (b's max taken as at least 1e-30).
double normalized_error(const Tensor& a, const Tensor& b) {
  BRAID_CHECK(a.shape() == b.shape(), kInvalidArgument, "shapes differ: ", shape_str(a.shape()),
              " vs ", shape_str(b.shape()));
  const Tensor a64 = a.to(DType::kF64), b64 = b.to(DType::kF64);
  return amax(abs(sub(a64, b64))).item() / std::max(amax(abs(b64)).item(), 1e-30);
}

int check(const std::string& model_dir, const std::string& ref_path, double tol) {
  auto model = nn::llama_from_pretrained(model_dir);
  const auto ref = by_name(load_safetensors(ref_path));
  model->train(true);
  model->zero_grad();
  const Tensor logits = model->forward(need(ref, "ids"));
  nn::CrossEntropyLoss ce;
  const Tensor loss = ce.forward(logits, need(ref, "targets"));
  model->backward(ce.backward());

  int failures = 0;
  double worst_grad = 0;
  std::string worst_name;
  const auto report = [&](const std::string& what, double err) {
    const bool ok = err <= tol;
    if (!ok) ++failures;
    if (!ok || what == "logits" || what == "loss") {
      std::printf("%-52s normalized error %.3g%s\n", what.c_str(), err, ok ? "" : "  FAIL");
    }
  };
  report("logits", normalized_error(logits, need(ref, "logits")));
  report("loss", normalized_error(loss, need(ref, "loss")));
  int grads = 0;
  for (auto& [name, p] : model->named_parameters()) {
    const double err = normalized_error(p.grad(), need(ref, "grad." + name));
    report("grad " + name, err);
    if (err >= worst_grad) {
      worst_grad = err;
      worst_name = name;
    }
    ++grads;
  }
  std::printf("%d parameter gradients, worst normalized error %.3g (%s), bound %.3g\n", grads,
              worst_grad, worst_name.c_str(), tol);
  return failures == 0 ? 0 : 1;
}

int save(const std::string& dir) {
  nn::LlamaConfig cfg;
  cfg.vocab_size = 80;
  cfg.hidden_size = 48;
  cfg.intermediate_size = 100;
  cfg.num_hidden_layers = 2;
  cfg.num_attention_heads = 6;
  cfg.num_key_value_heads = 2;
  cfg.max_position_embeddings = 32;
  cfg.rms_norm_eps = 1e-5;
  cfg.rope_theta = 500.0;
  nn::Llama model(cfg);
  Generator gen(7);
  model.init_weights(gen);
  // Norm weights away from 1, so a layout mistake in any of them shows.
  for (auto& [name, p] : model.named_parameters()) {
    if (name.ends_with("norm.weight")) {
      p.data().copy_(add(p.data(), mul(Tensor::randn(p.data().shape(), DType::kF32, &gen), 0.1)));
    }
  }
  nn::save_pretrained(model, dir + "/model");
  const Tensor ids = Tensor::from_vector(
      {3, 17, 42, 0, 79, 8, 8, 21, 33, 5, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {2, 11},
      DType::kI64);
  model.eval();
  nn::NoGradGuard no_grad;
  save_safetensors(dir + "/braid_logits.safetensors",
                   {{"ids", ids}, {"logits", model.forward(ids)}});
  return 0;
}

int run(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "check" && argc == 5) return check(argv[2], argv[3], std::stod(argv[4]));
  if (cmd == "save" && argc == 3) return save(argv[2]);
  std::cerr << "usage: llama_interop_tool check <model> <reference> <tol> | save <folder>\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "llama_interop_tool: " << e.what() << "\n";
    return 1;
  }
}
