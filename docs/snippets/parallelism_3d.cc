// docs/parallelism.md's DP x TP x PP example on 8 ranks: pipeline stages split over tp = 2,
// sharded (ZeRO-3) over dp = 2. ctest runs it under braid launch --nproc-per-node 8; exits 1
// unless a second step on the same batch has a lower loss and the global state dict holds the
// stage's tensors whole.
#include "braid/nn/gpt.h"
#include "braid/nn/optim.h"
#include "braid/shard/device_mesh.h"
#include "braid/shard/pipeline.h"
#include "tiny_gpt.h"

int main() {
  const braid::nn::GPTConfig cfg = tiny_gpt_config();
  const TokenBatches data = token_batches(1, 8, 12, cfg.vocab_size);  // per dp rank: [8, 12]
  const braid::Tensor &ids = data.ids[0], &labels = data.labels[0];
  braid::Generator gen(42);
  auto world = braid::ProcessGroup::create({});
  using braid::NamedTensors;
  // [snippet]
  braid::shard::DeviceMesh mesh(world, {2, 2, 2}, {"dp", "pp", "tp"});  // 8 ranks
  braid::shard::PipelineOptions opt{.schedule = braid::shard::PipelineSchedule::k1F1B,
                                    .num_micro_batches = 4};
  opt.tp_group = mesh.group("tp");
  opt.tensor_parallel.sequence_parallel = true;  // optional
  opt.dp_group = mesh.group("dp");               // optional: DP x TP x PP
  opt.sharding.stage = braid::shard::ZeroStage::k3;
  opt.sharding.checkpoint_group = mesh.flatten({"dp", "tp"}, "dp_tp");
  auto model = braid::nn::make_meta<braid::nn::GPT>(cfg);             // a prototype: no memory
  braid::shard::CausalLMPipeline pipe(model, mesh.group("pp"), opt);  // stages split over tp
  pipe.init_weights(gen);  // the slices of model->init_weights
  braid::nn::AdamW adam(pipe.parameters(), {.lr = 1e-2});
  double loss = pipe.step(ids, labels);  // dp rank r: global micro-batches j dp + r
  adam.step();
  adam.zero_grad();
  pipe.after_step();
  NamedTensors whole = pipe.global_state_dict();  // this pp rank's part, unsplit
  // [end snippet]

  const double second = pipe.step(ids, labels);
  bool ok = loss_fell("dp x tp x pp", world->rank(), loss, second, 1.0) && !whole.empty();
  for (const auto& [name, t] : whole) {
    // Whole tensors: wte is [vocab (padded to tp), embd], every other one has embd somewhere.
    if (name.find("wte") != std::string::npos) ok = ok && t.size(0) >= cfg.vocab_size;
  }
  return ok ? 0 : 1;
}
