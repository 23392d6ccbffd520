// docs/parallelism.md's pipeline example: a GPT cut into 2 stages (1F1B, 8 micro-batches) with
// data parallelism over dp = 2. ctest runs it under braid launch --nproc-per-node 4; exits 1
// unless the loss falls.
#include "braid/nn/gpt.h"
#include "braid/nn/optim.h"
#include "braid/shard/device_mesh.h"
#include "braid/shard/pipeline.h"
#include "tiny_gpt.h"

int main() {
  const braid::nn::GPTConfig cfg = tiny_gpt_config();
  const int64_t steps = 12;
  const TokenBatches data = token_batches(1, 16, 12, cfg.vocab_size);  // per dp rank: [16, 12]
  const braid::Tensor &ids = data.ids[0], &labels = data.labels[0];
  double first = 0;
  // [snippet]
  auto world = braid::ProcessGroup::create({});  // 4 ranks
  braid::shard::DeviceMesh mesh(world, {2, 2}, {"dp", "pp"});
  braid::shard::PipelineOptions opt{.schedule = braid::shard::PipelineSchedule::k1F1B,
                                    .num_micro_batches = 8};
  opt.dp_group = mesh.group("dp");  // optional: DP x PP
  opt.sharding = {.stage = braid::shard::ZeroStage::k1};
  // Any nn::CausalLM, as a prototype on the meta device: its stages are built per rank.
  auto model = braid::nn::make_meta<braid::nn::GPT>(cfg);
  braid::shard::CausalLMPipeline pipe(model, mesh.group("pp"), opt);  // this rank's stages
  pipe.init_weights(braid::Generator(42));  // the bits of model->init_weights
  braid::nn::AdamW adam(pipe.parameters(), {.lr = 1e-2});
  for (int64_t step = 0; step < steps; ++step) {
    double loss = pipe.step(ids, labels);  // [B, T] each, cut into 8 micro-batches
    adam.step();
    adam.zero_grad();
    pipe.after_step();
    // [end snippet]
    if (step == 0) first = loss;
    if (step == steps - 1) return loss_fell("pp", world->rank(), first, loss) ? 0 : 1;
    // [snippet]
  }
  // [end snippet]
}
