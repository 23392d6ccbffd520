// docs/big-model.md's example: a GPT built on the meta device, a device map under a CPU budget
// (the rest to disk), the checkpoint loaded through it and the offloaded part read back. The
// program first saves a small GPT as tiny-gpt2/ (save_pretrained); exits 1 unless part of the
// map is "disk" and every parameter ends with the saved values.
#include <cstdio>
#include <set>

#include "braid/core/rng.h"

// [snippet]
#include "braid/accel/big_model.h"
#include "braid/core/file_util.h"
#include "braid/nn/gpt.h"
using namespace braid;

int main() {
  // [end snippet]
  nn::GPTConfig small{.vocab_size = 64, .n_positions = 16, .n_embd = 32, .n_layer = 4, .n_head = 4};
  auto saved = std::make_shared<nn::GPT>(small);
  Generator gen(3);
  saved->init_weights(gen);
  nn::save_pretrained(*saved, "tiny-gpt2");

  // [snippet]
  std::shared_ptr<nn::GPT> gpt;
  {
    nn::InitEmptyWeights empty;  // parameters on the meta device: no memory
    gpt =
        std::make_shared<nn::GPT>(nn::GPTConfig::from_hf_json(read_file("tiny-gpt2/config.json")));
  }
  accel::DeviceMap map = accel::infer_auto_device_map(
      *gpt, accel::MaxMemory{{"cpu", "64KiB"}, {"disk", 0}},  // what does not fit: disk
      {.no_split_module_classes = {"GPT2Block"}});
  accel::load_checkpoint_in_model(*gpt, "tiny-gpt2/",
                                  {.device_map = map, .offload_folder = "offload"});
  // Modules mapped to "disk" are still meta; their tensors are offload/<name>.dat.
  accel::load_offloaded_weights(*gpt, accel::load_offload_index("offload"), "offload");
  // [end snippet]

  std::set<std::string> devices;
  for (const auto& [name, device] : map) devices.insert(device);
  bool ok = devices.count("disk") == 1 && devices.count("cpu") == 1;
  NamedTensors want = saved->state_dict(), got = gpt->state_dict();
  ok = ok && want.size() == got.size();
  for (size_t i = 0; ok && i < want.size(); ++i) {
    ok = want[i].first == got[i].first && got[i].second.device() == kCPU &&
         want[i].second.to_vector() == got[i].second.to_vector();
  }
  if (!ok) std::fprintf(stderr, "FAIL: the device map or a loaded parameter is wrong\n");
  return ok ? 0 : 1;
}
