// docs/parallelism.md's tensor-parallel example: a GPT split over tp = 2 and sharded (ZeRO-1)
// over dp = 2. ctest runs it under braid launch --nproc-per-node 4; exits 1 unless the loss
// falls.
#include "braid/nn/gpt.h"
#include "braid/nn/optim.h"
#include "braid/shard/device_mesh.h"
#include "braid/shard/fsdp.h"
#include "braid/shard/tensor_parallel.h"
#include "tiny_gpt.h"

int main() {
  const braid::nn::GPTConfig cfg = tiny_gpt_config();
  const int64_t G = 4, seed = 7, steps = 6;  // micro-batches per step (global)
  const TokenBatches data = token_batches(G, 2, 12, cfg.vocab_size);
  const std::vector<braid::Tensor>&ids = data.ids, &labels = data.labels;
  double first = 0, loss = 0;
  // [snippet]
  auto world = braid::ProcessGroup::create({});  // 4 ranks
  braid::shard::DeviceMesh mesh(world, {2, 2}, {"dp", "tp"});
  auto gpt = std::make_shared<braid::nn::GPT>(cfg);
  braid::Generator init(42);
  gpt->init_weights(init);  // the same whole model on every rank
  // The model's own plan (any nn::CausalLM): which modules split, and how.
  auto plan =
      braid::shard::parallelize(*gpt, mesh, gpt->parallel_plan(), {.sequence_parallel = true});
  braid::shard::ShardingOptions so{.stage = braid::shard::ZeroStage::k1};
  so.tensor_parallel = plan;    // checkpoints of global tensors, TP clipping
  so.checkpoint_group = world;  // every rank writes into one folder
  braid::shard::ShardedModel sm(gpt, mesh.group("dp"), so);
  braid::nn::AdamW adam(sm.optimizer_parameters(), {.lr = 1e-2});
  braid::shard::VocabParallelCrossEntropy ce(mesh.group("tp"), {.vocab_size = cfg.vocab_size});
  const int64_t dp = mesh.size("dp");
  for (int64_t step = 0; step < steps; ++step) {
    loss = 0;
    for (int64_t j = 0; j < G / dp; ++j) {
      const int64_t m = j * dp + mesh.local_rank("dp");          // this dp rank's micro-batches
      braid::default_generator(braid::kCPU).manual_seed(seed);   // the same on every tp rank
      loss += ce.forward(sm.forward(ids[m]), labels[m]).item();  // logits: [B, T, vocab / tp]
      sm.backward(ce.backward());
    }
    sm.finish_gradients(1.0 / G);
    sm.clip_grad_norm_(1.0);
    adam.step();
    sm.after_step();
    adam.zero_grad();
    // [end snippet]
    if (step == 0) first = loss;
    // [snippet]
  }
  // [end snippet]
  return loss_fell("tp", world->rank(), first, loss) ? 0 : 1;
}
