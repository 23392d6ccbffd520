// accelerator_worker: the Accelerator on real processes under `braid launch`
// (run_accelerator.sh compares the results).
//
//   accelerator_worker train OUT --steps N --accum A [--stage S] [--precision bf16]
//                      [--save-at K] [--resume] [--project DIR] [--clip C] [--constant-lr]
//       A tiny GPT trained on a global batch of 4 micro-batches of 2 sequences per step
//       (A micro-batches per rank per step: W x A = 4) through prepare_model / accumulate /
//       backward / clip_grad_norm_ / step / scheduler_step; writes the final parameters
//       (save_model) to OUT. --save-at K: save_state (automatic naming under --project) after
//       step K, then SIGKILL itself; --resume: load_state the latest and continue.
//   accelerator_worker metrics      gather_for_metrics over 10 samples in batches of 2
//   accelerator_worker batch-size   find_executable_batch_size (x 0.9) with rank 1 failing above 16
//   accelerator_worker parallel OUT --tp T --pp P [--sp] [--steps N] [--precision fp16|bf16]
//                      [--init-scale S] [--backoff B] [--layers L] [--vpp V]
//                      [--save-at K] [--resume] [--project DIR]
//       The same global batch (4 micro-batches of 2) on a (dp, pp, tp) mesh: prepare_model
//       (tp) or prepare_pipeline (pp > 1), cross_entropy, pipeline_step, clip_grad_norm_ at
//       0.05; prints each step's loss and norm (%.9g) for run_accelerator.sh to compare with
//       one process; checks the dp split of the loader and of gather_for_metrics, the refusals
//       of prepare_model, and get_state_dict / save_model (OUT/model.safetensors).
//   accelerator_worker debug        debug: true catches a mismatched all_reduce on every rank
//   accelerator_worker nodes OUT    save_on_each_node: two ranks posing as two machines
//   accelerator_worker misc DIR     the other methods: reduce, pad_across_processes,
//                                   main_process_first, RNG sync, trackers, no_sync,
//                                   clip_grad_value_, register_for_checkpointing
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "braid/accel/accelerator.h"
#include "braid/core/allocator.h"
#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "braid/nn/data_text.h"
#include "braid/nn/gpt.h"
#include "braid/nn/llama.h"
#include "braid/nn/loss.h"
#include "braid/tensor/ops.h"
#include "braid/tensor/safetensors.h"

namespace {

using namespace braid;

constexpr int64_t kSeq = 12, kVocab = 37;

// Sample i: ids and labels of one sequence, a pure function of i.
class TokenDataset : public nn::Dataset {
 public:
  explicit TokenDataset(int64_t size) : size_(size) {}
  int64_t size() const override { return size_; }
  Tree get(int64_t index) const override {
    Generator gen(7919 * static_cast<uint64_t>(index) + 1);
    Tensor data = Tensor::empty({kSeq + 1}, DType::kI64);
    gen.fill_randint(data.data<int64_t>(), data.numel(), 0, kVocab);
    return Tree::map({{"input_ids", Tree(data.narrow(0, 0, kSeq).contiguous())},
                      {"labels", Tree(data.narrow(0, 1, kSeq).contiguous())}});
  }

 private:
  int64_t size_;
};

std::shared_ptr<nn::GPT> tiny_gpt(int64_t n_layer = 3) {
  nn::GPTConfig c;
  c.vocab_size = kVocab;
  c.n_positions = 16;
  c.n_embd = 24;
  c.n_layer = n_layer;
  c.n_head = 4;
  c.embd_pdrop = c.attn_pdrop = c.resid_pdrop = 0.0;
  auto gpt = std::make_shared<nn::GPT>(c);
  Generator gen(42);
  gpt->init_weights(gen);
  return gpt;
}

// A tiny Llama (grouped-query attention, untied head) with the GPT's vocabulary and sequence.
std::shared_ptr<nn::Llama> tiny_llama(int64_t n_layer = 3) {
  nn::LlamaConfig c;
  c.vocab_size = kVocab;
  c.hidden_size = 24;
  c.intermediate_size = 40;
  c.num_hidden_layers = n_layer;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 16;
  auto llama = std::make_shared<nn::Llama>(c);
  Generator gen(42);
  llama->init_weights(gen);
  return llama;
}

std::string arg(const std::vector<std::string>& a, const std::string& key, std::string def) {
  for (size_t i = 0; i + 1 < a.size(); ++i) {
    if (a[i] == key) return a[i + 1];
  }
  return def;
}
bool flag(const std::vector<std::string>& a, const std::string& key) {
  for (const auto& s : a) {
    if (s == key) return true;
  }
  return false;
}

int train(const std::string& out, const std::vector<std::string>& a) {
  const int64_t steps = std::stoll(arg(a, "--steps", "3"));
  const int64_t accum = std::stoll(arg(a, "--accum", "1"));
  const int64_t save_at = std::stoll(arg(a, "--save-at", "-1"));
  const double clip = std::stod(arg(a, "--clip", "0"));
  accel::AcceleratorConfig cfg;
  cfg.distributed_type = accel::DistributedType::kFsdp;
  accel::FullyShardedDataParallelPlugin fsdp;
  const int stage = std::stoi(arg(a, "--stage", "3"));
  fsdp.sharding_strategy = stage == 3   ? accel::FsdpShardingStrategy::kFullShard
                           : stage == 0 ? accel::FsdpShardingStrategy::kNoShard
                                        : accel::FsdpShardingStrategy::kShardGradOp;
  fsdp.auto_wrap_policy = shard::WrapKind::kTransformerBased;
  fsdp.transformer_cls_names_to_wrap = {"GPT2Block"};
  cfg.fsdp_plugin = fsdp;
  cfg.gradient_accumulation_steps = accum;
  if (arg(a, "--precision", "no") == "bf16") cfg.mixed_precision = amp::PrecisionType::kBf16;
  cfg.project_config.project_dir = arg(a, "--project", "/tmp/accelerator_worker");
  cfg.project_config.automatic_checkpoint_naming = true;
  cfg.project_config.total_limit = 2;
  accel::Accelerator acc(cfg);
  const int W = acc.num_processes();
  BRAID_CHECK(W * accum == 4, kInvalidArgument, "W x accum must be 4, got ", W, " x ", accum);

  auto model = acc.prepare_model(tiny_gpt());
  nn::AdamW opt(model->optimizer_parameters(), {.lr = 1e-2, .weight_decay = 0.1});
  acc.prepare_optimizer(opt);
  // scheduler_step steps the schedule num_processes times per optimizer step (Accelerate's
  // AcceleratedScheduler without split_batches): the schedule counts steps x processes.
  // --constant-lr: a constant schedule, which (unlike a decaying one counted in processes)
  // also continues exactly at another world size.
  const bool constant = flag(a, "--constant-lr");
  nn::LRScheduler sched(
      opt, constant ? nn::SchedulerType::kConstant : nn::SchedulerType::kCosine,
      {.num_warmup_steps = constant ? 0 : 1 * W, .num_training_steps = steps * W});
  acc.prepare_scheduler(sched);
  nn::DataLoader loader(std::make_shared<TokenDataset>(8 * steps), {.batch_size = 2});
  nn::DataLoader train = acc.prepare_data_loader(loader);
  int64_t start_batches = 0;
  if (flag(a, "--resume")) {
    acc.load_state();
    start_batches = acc.resumed_position(0).samples / train.total_batch_size();
    acc.print("resumed after " + std::to_string(start_batches) + " batches");
  }
  nn::DataLoader skipped = acc.skip_first_batches(train, start_batches);
  nn::DataLoader& data = start_batches > 0 ? skipped : train;
  nn::CrossEntropyLoss ce;
  int64_t step = start_batches / accum;
  double loss_sum = 0;
  for (const Tree& batch : data) {
    auto accumulate = acc.accumulate(data);
    auto autocast = acc.autocast();
    Tensor logits = model->forward(batch.at("input_ids").tensor());
    loss_sum += ce.forward(logits, batch.at("labels").tensor()).item();
    acc.backward(*model, ce.backward());
    if (!acc.sync_gradients()) continue;
    if (clip > 0) {
      const double norm = acc.clip_grad_norm_(*model, clip);
      acc.print("step " + std::to_string(step) + " grad norm " + std::to_string(norm));
    }
    acc.step(opt);
    acc.scheduler_step(sched);
    acc.zero_grad(opt);
    Tree mean = acc.reduce(Tree(Tensor::full({1}, loss_sum / double(accum), DType::kF32)));
    acc.print("step " + std::to_string(step) + " loss " + std::to_string(mean.tensor().item()));
    loss_sum = 0;
    ++step;
    if (step == save_at) {
      acc.save_state();
      acc.print("saved at step " + std::to_string(step) + "; killing this rank");
      std::fflush(stdout);
      // No rank dies before the main process's line is written (else the launcher may stop
      // it first and the log would not show the save).
      acc.wait_for_everyone();
      std::raise(SIGKILL);  // the job dies here (braid launch stops the other ranks)
    }
  }
  acc.save_model(*model, out);
  return 0;
}

int parallel(const std::string& out, const std::vector<std::string>& a) {
  const int64_t steps = std::stoll(arg(a, "--steps", "3"));
  const int64_t tp = std::stoll(arg(a, "--tp", "1")), pp = std::stoll(arg(a, "--pp", "1"));
  accel::AcceleratorConfig cfg;
  cfg.distributed_type = accel::DistributedType::kFsdp;
  accel::FullyShardedDataParallelPlugin fsdp;
  fsdp.auto_wrap_policy = shard::WrapKind::kTransformerBased;
  // --model llama: the same layouts for the second family (nothing below names either).
  const bool llama = arg(a, "--model", "gpt2") == "llama";
  fsdp.transformer_cls_names_to_wrap = {llama ? "LlamaDecoderLayer" : "GPT2Block"};
  cfg.fsdp_plugin = fsdp;
  cfg.megatron_lm_plugin = accel::MegatronLMPlugin{
      .tp_degree = tp, .pp_degree = pp, .sequence_parallelism = flag(a, "--sp")};
  cfg.mixed_precision = amp::parse_precision_type(arg(a, "--precision", "no"));
  const int64_t layers = std::stoll(arg(a, "--layers", "3"));
  cfg.megatron_lm_plugin->num_layers_per_virtual_pipeline_stage = std::stoll(arg(a, "--vpp", "0"));
  // fp16: a scale that overflows the first steps (skipped, backed off) when asked.
  cfg.grad_scaler_kwargs.init_scale = std::stod(arg(a, "--init-scale", "65536"));
  cfg.grad_scaler_kwargs.backoff_factor = std::stod(arg(a, "--backoff", "0.5"));
  auto world = ProcessGroup::create({});
  const int64_t dp = world->size() / (tp * pp);
  BRAID_CHECK(dp >= 1 && 4 % dp == 0, kInvalidArgument, "dp ", dp, " must divide 4");
  cfg.gradient_accumulation_steps = 4 / dp;
  accel::Accelerator acc(cfg, world);
  BRAID_CHECK(acc.data_parallel_size() == dp && acc.tp_degree() == tp && acc.pp_degree() == pp,
              kInternal, "mesh: dp ", acc.data_parallel_size(), " tp ", acc.tp_degree(), " pp ",
              acc.pp_degree());
  BRAID_CHECK((tp * pp > 1) == (acc.mesh() != nullptr), kInternal, "mesh()");

  // The refusal: tp > 1 or pp > 1 needs a model with a parallel plan (nn::CausalLM).
  const auto kind_of = [](const std::function<void()>& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return e.kind();
    }
    return ErrorKind::kInternal;  // no error
  };
  if (tp * pp > 1) {
    auto linear = std::make_shared<nn::Linear>(4, 4);
    BRAID_CHECK(kind_of([&] { acc.prepare_model(linear); }) == ErrorKind::kNotSupported, kInternal,
                "prepare_model of a model without a parallel plan with tp or pp > 1 must refuse");
  }

  // The loader is split over dp: the ranks of one dp index get the same samples.
  nn::DataLoader loader(std::make_shared<TokenDataset>(8 * steps), {.batch_size = 2});
  nn::DataLoader train = acc.prepare_data_loader(loader);
  {
    Tensor first = (*train.begin()).at("input_ids").tensor().contiguous().to(DType::kF64);
    first = first.reshape({first.numel()});
    Tensor all = Tensor::empty({world->size() * first.numel()}, DType::kF64);
    world->all_gather_into(all, first);
    for (int r = 0; r < world->size(); ++r) {
      // Without a mesh every rank is its own dp index.
      const bool same_dp = acc.mesh() == nullptr
                               ? r == world->rank()
                               : acc.mesh()->coordinate_of(r)[0] == acc.mesh()->coordinate()[0];
      const bool equal = std::equal(first.data<double>(), first.data<double>() + first.numel(),
                                    all.data<double>() + r * first.numel());
      BRAID_CHECK(equal == same_dp, kInternal, "rank ", r, "'s first batch ",
                  equal ? "equals" : "differs from", " this rank's (same dp index: ", same_dp, ")");
    }
    Tree g = acc.gather_for_metrics(Tree(first.reshape({2, kSeq})), train);
    BRAID_CHECK(g.tensor().size(0) == 2 * dp, kInternal, "gather_for_metrics: ", g.tensor().size(0),
                " rows, expected 2 x dp = ", 2 * dp);
  }

  // One prepared model and one training step for every layout.
  const auto make = [&]() -> std::shared_ptr<nn::CausalLM> {
    if (llama) return tiny_llama(layers);
    return tiny_gpt(layers);
  };
  auto model = acc.prepare_model(make());
  if (model->pipelined()) {
    const shard::Pipeline& pipe = model->pipeline().pipeline();
    acc.print("pipeline: " + std::to_string(pipe.shape().virtual_stages) + " chunk(s) per rank, " +
              std::string(shard::schedule_name(pipe.shape().schedule)));
  }
  nn::AdamW opt(model->optimizer_parameters(), {.lr = 1e-2, .weight_decay = 0.1});
  acc.prepare_optimizer(opt);
  std::vector<Tensor> ids, labels;
  int64_t step = 0;
  for (const Tree& batch : train) {
    ids.push_back(batch.at("input_ids").tensor());
    labels.push_back(batch.at("labels").tensor());
    if (static_cast<int64_t>(ids.size()) < acc.gradient_accumulation_steps()) continue;
    const double loss = acc.train_step(*model, ids, labels);
    ids.clear();
    labels.clear();
    const double norm = acc.clip_grad_norm_(*model, 0.05);
    acc.step(opt);
    acc.zero_grad(opt);
    Tree mean = acc.reduce(Tree(Tensor::full({1}, loss, DType::kF64)));
    char line[128];
    std::snprintf(line, sizeof line, "step %lld loss %.9g norm %.9g%s",
                  static_cast<long long>(step), mean.tensor().item(), norm,
                  acc.optimizer_step_was_skipped() ? " skipped" : "");
    acc.print(line);
    ++step;
  }
  BRAID_CHECK(step == steps, kInternal, step, " steps ran, expected ", steps);
  if (flag(a, "--save-load")) {
    // save_state, one more step, load_state: the model is back (every layout writes one
    // folder; a pipeline rank's chunks share it).
    const NamedTensors before = acc.get_state_dict(*model);
    const auto dir = std::filesystem::path(out) / "state";
    acc.save_state(dir);
    Tree batch = nn::default_collate({TokenDataset(2).get(0), TokenDataset(2).get(1)});
    const int64_t M = acc.gradient_accumulation_steps();
    acc.train_step(*model, std::vector<Tensor>(M, batch.at("input_ids").tensor()),
                   std::vector<Tensor>(M, batch.at("labels").tensor()));
    acc.step(opt);
    acc.zero_grad(opt);
    acc.load_state(dir);
    const NamedTensors after = acc.get_state_dict(*model);
    BRAID_CHECK(before.size() == after.size(), kInternal, "load_state: tensor count");
    for (size_t i = 0; i < before.size(); ++i) {
      BRAID_CHECK(equal(before[i].second, after[i].second), kInternal,
                  "load_state did not restore ", before[i].first);
    }
    acc.print("save_state / load_state restored the model");
  }
  const NamedTensors state = acc.get_state_dict(*model);
  // Every parameter of the whole model, whole (GPT: lm_head.weight is wte's tied name).
  auto whole = make();
  std::map<std::string, Shape> got;
  for (auto& [name, t] : state) got.emplace(name, t.shape());
  for (auto& [name, p] : whole->named_parameters()) {
    BRAID_CHECK(got.count(name) && got.at(name) == p.data().shape(), kInternal,
                "get_state_dict: ", name, got.count(name) ? " is not whole" : " is missing");
  }
  acc.save_model(*model, out);
  acc.print("parallel OK");
  return 0;
}

// 10 samples, batches of 2 per rank: on 3 ranks the last global batch is padded with
// repeated samples (even_batches); gather_for_metrics drops them.
int metrics() {
  accel::Accelerator acc;
  nn::DataLoader loader(std::make_shared<nn::SyntheticDataset>(nn::SyntheticOptions{.size = 10}),
                        {.batch_size = 2});
  nn::DataLoader data = acc.prepare_data_loader(loader);
  std::vector<int64_t> seen;
  for (const Tree& batch : data) {
    auto accumulate = acc.accumulate(data);
    Tree all = acc.gather_for_metrics(batch.at("index"), data);
    const Tensor& t = all.tensor();
    for (int64_t i = 0; i < t.numel(); ++i) seen.push_back(t.data<int64_t>()[i]);
  }
  std::string text;
  for (int64_t v : seen) text += std::to_string(v) + " ";
  acc.print("metrics: " + text);
  BRAID_CHECK(static_cast<int64_t>(seen.size()) == 10, kInternal, "expected 10 samples, got ",
              seen.size(), ": ", text);
  std::vector<int64_t> sorted = seen;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 10; ++i) {
    BRAID_CHECK(sorted[static_cast<size_t>(i)] == i, kInternal, "samples are not 0..9: ", text);
  }
  return 0;
}

int batch_size() {
  accel::Accelerator acc;
  std::vector<int64_t> tried;
  const int64_t found = acc.find_executable_batch_size(
      [&](int64_t b) {
        tried.push_back(b);
        if (acc.process_index() == 1 && b > 16) {
          BRAID_FAIL(kOutOfMemory, "rank 1 cannot fit batch ", b);
        }
      },
      64);
  std::string text;
  for (int64_t b : tried) text += std::to_string(b) + " ";
  std::printf("rank %d tried %s-> %lld\n", acc.process_index(), text.c_str(),
              static_cast<long long>(found));
  // The seed's default shrinks by 0.9: int(64 x 0.9) = 57, ... down to the first size <= 16.
  const std::vector<int64_t> expected = {64, 57, 51, 45, 40, 36, 32, 28, 25, 22, 19, 17, 15};
  BRAID_CHECK(found == 15 && tried == expected, kInternal,
              "every rank must settle on 15 after 64 x 0.9^k; tried ", text);
  return 0;
}

// debug: true (ACCELERATE_DEBUG_MODE): the Accelerator's group checks every collective's
// arguments across ranks, so a mismatch is an error naming both calls, not a hang.
int debug_mode() {
  accel::AcceleratorConfig cfg;
  cfg.debug = true;
  accel::Accelerator acc(cfg);
  Tensor t = Tensor::zeros({acc.process_index() + 1}, DType::kF32);
  try {
    acc.process_group()->all_reduce(t);
  } catch (const Error& e) {
    const std::string m = e.message();
    BRAID_CHECK(m.find("ranks disagree") != std::string::npos &&
                    m.find("shape=[2]   <- differs") != std::string::npos,
                kInternal, "unexpected message: ", m);
    std::printf("rank %d: debug mode OK (caught the mismatch)\n", acc.process_index());
    return 0;
  }
  BRAID_FAIL(kInternal, "debug: true did not catch the mismatched all_reduce");
}

// save_on_each_node: two ranks made to look like two machines (LOCAL_RANK 0 of 1 each, the
// shm backend on this one): save_model writes on each machine's main process with the flag,
// on the main process only without it.
int nodes(const std::string& out) {
  ::setenv("LOCAL_RANK", "0", 1);
  ::setenv("LOCAL_WORLD_SIZE", "1", 1);
  std::shared_ptr<ProcessGroup> pg;  // the first Accelerator's, then shared
  for (bool each : {true, false}) {
    accel::AcceleratorConfig cfg;
    cfg.init_process_group_kwargs.backend = "shm";
    cfg.project_config.save_on_each_node = each;
    accel::Accelerator acc(cfg, pg);
    pg = acc.process_group();
    BRAID_CHECK(acc.is_local_main_process(), kInternal, "every rank is its node's main");
    auto model = acc.prepare_model(tiny_gpt(1));
    const std::string dir =
        out + (each ? "/each" : "/main") + "/node" + std::to_string(acc.process_index());
    acc.save_model(*model, dir);
  }
  std::printf("rank %d: nodes OK\n", pg->rank());
  return 0;
}

int misc(const std::string& dir) {
  std::filesystem::create_directories(dir);
  accel::AcceleratorConfig cfg;
  cfg.log_with = {"jsonl", "csv"};
  cfg.project_config.project_dir = dir;
  accel::Accelerator acc(cfg);
  const int r = acc.process_index(), W = acc.num_processes();
  // reduce and pad_across_processes.
  Tree sum = acc.reduce(Tree(Tensor::full({2}, double(r + 1), DType::kF32)), "sum");
  BRAID_CHECK(sum.tensor().data<float>()[1] == float(W * (W + 1) / 2), kInternal, "reduce sum");
  Tree padded = acc.pad_across_processes(Tree(Tensor::ones({r + 1}, DType::kF32)), 0, -1.0);
  BRAID_CHECK(padded.tensor().numel() == W, kInternal, "pad_across_processes length");
  Tree all = acc.gather(padded);
  BRAID_CHECK(all.tensor().numel() == W * W, kInternal, "gather length");
  // main_process_first: rank 0 writes a file the others then read.
  const auto marker = std::filesystem::path(dir) / "first.txt";
  acc.main_process_first([&] {
    if (acc.is_main_process()) {
      std::ofstream(marker) << "made by 0";
    } else {
      BRAID_CHECK(std::filesystem::exists(marker), kInternal, "main_process_first: rank ", r,
                  " ran before the main process");
    }
  });
  // synchronize_rng_states: every rank ends with rank 0's generator.
  default_generator(kCPU).manual_seed(100 + static_cast<uint64_t>(r));
  acc.synchronize_rng_states();
  Tensor state = Tensor::empty({24}, DType::kU8);
  const auto mine = default_generator(kCPU).get_state();
  std::copy(mine.begin(), mine.end(), state.data<uint8_t>());
  Tree states = acc.gather(Tree(state));
  for (int q = 1; q < W; ++q) {
    BRAID_CHECK(std::memcmp(states.tensor().data<uint8_t>(),
                            states.tensor().data<uint8_t>() + 24 * q, 24) == 0,
                kInternal, "synchronize_rng_states: rank ", q, " differs");
  }
  // set_seed: the same stream on every rank, or one per rank with device_specific.
  const auto seeded_states = [&](bool device_specific) {
    acc.set_seed(11, device_specific);
    const auto st = default_generator(kCPU).get_state();
    Tensor t = Tensor::empty({24}, DType::kU8);
    std::copy(st.begin(), st.end(), t.data<uint8_t>());
    return acc.gather(Tree(t)).tensor();
  };
  const Tensor same_seed = seeded_states(false), own_seed = seeded_states(true);
  for (int q = 1; q < W; ++q) {
    BRAID_CHECK(std::memcmp(same_seed.data<uint8_t>(), same_seed.data<uint8_t>() + 24 * q, 24) == 0,
                kInternal, "set_seed: rank ", q, " differs");
    BRAID_CHECK(std::memcmp(own_seed.data<uint8_t>(), own_seed.data<uint8_t>() + 24 * q, 24) != 0,
                kInternal, "set_seed(device_specific): rank ", q, " has rank 0's stream");
  }
  // broadcast: rank 1's values everywhere; on_local_main_process: one rank per node.
  Tree from1 = acc.broadcast(Tree(Tensor::full({3}, double(r), DType::kF32)), W - 1);
  BRAID_CHECK(from1.tensor().data<float>()[2] == float(W - 1), kInternal, "broadcast");
  int local_main_calls = 0;
  acc.on_local_main_process([&] { ++local_main_calls; });
  Tree calls = acc.reduce(Tree(Tensor::full({1}, double(local_main_calls), DType::kF64)), "sum");
  BRAID_CHECK(calls.tensor().item() == 1.0, kInternal, "on_local_main_process ran on ",
              calls.tensor().item(), " ranks of one node");
  // free_memory: the allocator's cache goes back to the OS (a freed 4 MiB block is cached).
  { Tensor big = Tensor::empty({1 << 20}, DType::kF32); }
  const size_t cached = get_allocator(kCPU).stats().reserved_bytes;
  acc.free_memory();
  BRAID_CHECK(get_allocator(kCPU).stats().reserved_bytes + (size_t{4} << 20) <= cached, kInternal,
              "free_memory left the cached 4 MiB block");
  // Trackers: files on the main process only.
  acc.init_trackers("run", accel::HParams{{"lr", 0.5}});
  acc.log({{"loss", 1.5}}, 0);
  acc.log({{"loss", 1.25}}, 1);
  acc.end_training();
  // register_for_checkpointing + save_state / load_state round trip of a custom object.
  int counter = 41 + r;
  acc.register_for_checkpointing(
      {[&] { return std::string("{\"counter\": ") + std::to_string(counter) + "}"; },
       [&](const std::string& j) { counter = std::stoi(j.substr(j.find(':') + 1)); }});
  auto gpt = tiny_gpt();
  auto model = acc.prepare_model(gpt);
  nn::SGD opt(model->optimizer_parameters(), {.lr = 0.1});
  acc.prepare_optimizer(opt);
  // no_sync + clip_grad_value_.
  nn::CrossEntropyLoss ce;
  Tensor ids = Tensor::from_vector({1, 2, 3, 4}, {1, 4}, DType::kI64);
  {
    auto ns = acc.no_sync(*model);
    BRAID_CHECK(!model->sharded().gradient_sync(), kInternal, "no_sync");
  }
  BRAID_CHECK(model->sharded().gradient_sync(), kInternal, "no_sync restores");
  ce.forward(model->forward(ids), ids);
  acc.backward(*model, ce.backward());
  acc.clip_grad_value_(*model, 1e-3);
  for (auto& p : model->optimizer_parameters()) {
    BRAID_CHECK(amax(abs(p.grad())).item() <= 1e-3 + 1e-9, kInternal, "clip_grad_value_");
  }
  acc.step(opt);
  BRAID_CHECK(&acc.unwrap_model(*model) == gpt.get(), kInternal, "unwrap_model");
  const auto saved = acc.save_state(std::filesystem::path(dir) / "state");
  counter = 0;
  acc.load_state(saved);
  BRAID_CHECK(counter == 41, kInternal, "custom state: expected the main process's 41, got ",
              counter);
  acc.wait_for_everyone();
  acc.print("misc OK");
  return 0;
}

int run(int argc, char** argv) {
  std::vector<std::string> a(argv + 1, argv + argc);
  BRAID_CHECK(!a.empty(), kInvalidArgument,
              "usage: accelerator_worker train|parallel|metrics|batch-size|debug|nodes|misc");
  if (a[0] == "train" && a.size() >= 2) return train(a[1], a);
  if (a[0] == "parallel" && a.size() >= 2) return parallel(a[1], a);
  if (a[0] == "metrics") return metrics();
  if (a[0] == "batch-size") return batch_size();
  if (a[0] == "debug") return debug_mode();
  if (a[0] == "nodes" && a.size() >= 2) return nodes(a[1]);
  if (a[0] == "misc" && a.size() >= 2) return misc(a[1]);
  BRAID_FAIL(kInvalidArgument, "accelerator_worker: unknown command ", a[0]);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "accelerator_worker: %s\n", e.what());
    return 1;
  }
}
