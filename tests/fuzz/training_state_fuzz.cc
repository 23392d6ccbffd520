// libFuzzer target: the JSON texts a training checkpoint and a model folder hold, read back on
// load (docs/accelerator.md, docs/nn.md): a GPT's config.json (GPTConfig::from_hf_json), the
// optimizer's state (Optimizer::load_state_dict's json), the LR scheduler's
// (LRScheduler::load_state_json) and the GradScaler's (GradScaler::load_state_json). The first
// input byte picks the reader, the rest is the text. Each loads, or fails with kCorruptData
// (not JSON, a field missing or of the wrong type) or kInvalidArgument (a value out of range, a
// state saved for something else), never with another exception.
#include <cstddef>
#include <cstdint>
#include <string>

#include "braid/amp/grad_scaler.h"
#include "braid/nn/gpt.h"
#include "braid/nn/lr_scheduler.h"
#include "braid/nn/optim.h"
#include "fuzz_util.h"

namespace {

// Two f32 parameters in one group: the optimizer and scheduler the states are loaded into.
braid::nn::AdamW& optimizer() {
  using namespace braid;
  static nn::AdamW adamw({nn::Parameter(Tensor::zeros({2, 3})), nn::Parameter(Tensor::zeros({3}))},
                         nn::OptimizerOptions{});
  return adamw;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace braid;
  if (size == 0) return 0;
  const std::string text(fuzz::as_text(data + 1, size - 1));
  const std::initializer_list<ErrorKind> refusals = {ErrorKind::kCorruptData,
                                                     ErrorKind::kInvalidArgument};
  switch (data[0] % 4) {
    case 0:
      fuzz::parses(refusals, [&] { (void)nn::GPTConfig::from_hf_json(text); });
      break;
    case 1:
      fuzz::parses(refusals, [&] { optimizer().load_state_dict(nn::OptimizerState{{}, text}); });
      break;
    case 2: {
      nn::LRScheduler scheduler(optimizer(), nn::SchedulerType::kLinear, {10, 100});
      fuzz::parses(refusals, [&] { scheduler.load_state_json(text); });
      break;
    }
    case 3: {
      amp::GradScaler scaler;
      fuzz::parses(refusals, [&] { scaler.load_state_json(text); });
      break;
    }
  }
  return 0;
}
