// docs/sharding.md's example: a GPT under ZeRO-3, micro-batches split over the ranks, one
// optimizer step per global batch. ctest runs it under braid launch --nproc-per-node 2; exits 1
// unless the loss falls.
#include "braid/amp/autocast.h"
#include "braid/nn/gpt.h"
#include "braid/nn/loss.h"
#include "braid/nn/optim.h"
#include "braid/shard/fsdp.h"
#include "tiny_gpt.h"

using braid::DType;
using braid::shard::ZeroStage;

int main() {
  auto gpt = std::make_shared<braid::nn::GPT>(tiny_gpt_config());
  braid::Generator init(42);
  gpt->init_weights(init);
  const braid::shard::WrapPolicy policy{.kind = braid::shard::WrapKind::kTransformerBased,
                                        .transformer_cls_names_to_wrap = {"GPT2Block"}};
  const int64_t G = 4, steps = 6;  // micro-batches per step (global)
  const TokenBatches data = token_batches(G, 2, 12, 37);
  const std::vector<braid::Tensor>&ids = data.ids, &labels = data.labels;
  braid::nn::CrossEntropyLoss ce;
  double first = 0;
  // [snippet]
  auto pg = braid::ProcessGroup::create({});
  const int64_t W = pg->size();
  braid::shard::ShardedModel sm(gpt, pg, {.stage = ZeroStage::k3, .wrap = policy});
  braid::nn::AdamW opt(sm.optimizer_parameters(), {.lr = 1e-2, .weight_decay = 0.1});
  for (int64_t step = 0; step < steps; ++step) {
    double loss = 0;
    for (int64_t j = 0; j < G / W; ++j) {
      const int64_t m = j * W + pg->rank();           // micro-batch m = j * W + rank
      braid::amp::AutocastScope scope(DType::kBF16);  // optional
      loss += ce.forward(sm.forward(ids[m]), labels[m]).item();
      sm.backward(ce.backward());  // folds each unit's gradient
    }
    sm.finish_gradients(1.0 / G);  // mean over the global batch
    sm.clip_grad_norm_(1.0);       // optional: the global norm
    opt.step();
    opt.zero_grad();
    sm.after_step();  // stages 1-2: all_gather the updated parameters
    // [end snippet]
    if (step == 0) first = loss;
    if (step == steps - 1) return loss_fell("zero-3", pg->rank(), first, loss) ? 0 : 1;
    // [snippet]
  }
  // [end snippet]
}
