// docs/offload.md's first example: AdamW with its state on "NVMe" (a folder of the run). Exits
// 1 unless a step gives the same bits as the same step without offload, and the state saves.
#include <cstdio>
#include <filesystem>

#include "braid/core/rng.h"
#include "braid/nn/offload.h"
#include "braid/nn/optim.h"

namespace {

// Parameters with values and gradients drawn from `seed`: the same for the same seed.
std::vector<braid::nn::Parameter> make_params(uint64_t seed) {
  braid::Generator gen(seed);
  std::vector<braid::nn::Parameter> out;
  for (int64_t n : {7, 64, 3}) {
    braid::nn::Parameter p(braid::Tensor::randn({n}, braid::DType::kF32, &gen));
    p.grad() = braid::Tensor::randn({n}, braid::DType::kF32, &gen);
    out.push_back(p);
  }
  return out;
}

}  // namespace

int main() {
  const std::filesystem::path nvme_dir = "local_nvme";
  std::filesystem::create_directories(nvme_dir);
  std::filesystem::create_directories("ckpt");
  std::vector<braid::nn::Parameter> params = make_params(11), plain = make_params(11);
  braid::nn::AdamW reference(plain, {.lr = 3e-4, .weight_decay = 0.1});
  // [snippet]
  braid::nn::AdamW opt(params, {.lr = 3e-4, .weight_decay = 0.1});
  braid::nn::OffloadConfig off;
  off.device = braid::nn::OffloadDevice::kNvme;  // or parse_offload_device("nvme")
  off.nvme_path = nvme_dir;                      // an existing, writable folder (/local_nvme)
  off.buffer_count = 4;                          // parameters' state in memory at once
  opt.set_offload(off);
  // ... backward: every parameter's grad() ...
  opt.step();                              // same bits as without offload
  opt.save("ckpt/optimizer.safetensors");  // streams the state files
  // [end snippet]

  reference.step();
  bool ok = std::filesystem::exists("ckpt/optimizer.safetensors");
  for (size_t i = 0; i < params.size(); ++i) {
    ok = ok && params[i].data().to_vector() == plain[i].data().to_vector();
  }
  if (!ok) std::fprintf(stderr, "FAIL: the offloaded step differs, or nothing was saved\n");
  return ok ? 0 : 1;
}
