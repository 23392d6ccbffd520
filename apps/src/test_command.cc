// `braid test`: Accelerate's `accelerate test`, a short end-to-end check of this machine and
// configuration. It starts --num_processes ranks of this same executable (`braid test
// --worker`) through `braid launch`'s machinery; each rank builds an Accelerator from the
// configuration (--config_file, else the default file, else ZeRO-3 over every rank), checks the
// collectives, trains a small GPT for a few steps with gradient accumulation (with tensor /
// pipeline degrees: split over tp, pipeline stages over pp), checks that the loss fell and that
// every rank holds the same model, and round-trips save_state / load_state through a temporary
// folder. Exit code 0 and "braid test: all checks passed" on success.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "braid/accel/accelerator.h"
#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "braid/nn/gpt.h"
#include "braid/nn/loss.h"
#include "braid/tensor/ops.h"
#include "commands.h"
#include "launch/job.h"

namespace braid::cli {

namespace {

struct TestOptions {
  int num_processes = 2;
  std::string config_file;
  bool worker = false;
  double timeout_s = 120;
};

// Sample i: 33 bytes of a repeating pattern the model can learn quickly.
class PatternDataset : public nn::Dataset {
 public:
  int64_t size() const override { return 64; }
  Tree get(int64_t index) const override {
    Tensor data = Tensor::empty({33}, DType::kI64);
    for (int64_t t = 0; t < 33; ++t) data.data<int64_t>()[t] = (index + t * 3) % 17;
    return Tree::map({{"input_ids", Tree(data.narrow(0, 0, 32).contiguous())},
                      {"labels", Tree(data.narrow(0, 1, 32).contiguous())}});
  }
};

void check(bool ok, const std::string& what) {
  BRAID_CHECK(ok, kInternal, "braid test: ", what);
}

int worker(const TestOptions& o) {
  accel::ConfigSources sources;
  if (!o.config_file.empty()) sources.config_file = o.config_file;
  sources.options.any_extra_key = true;  // a job file may carry its program's own keys
  accel::AcceleratorConfig cfg = accel::resolve_config({}, sources);
  if (cfg.distributed_type == accel::DistributedType::kNo && !cfg.fsdp_plugin &&
      !cfg.deepspeed_plugin) {
    // No configuration: ZeRO-3 over every rank, one unit per block.
    accel::FullyShardedDataParallelPlugin fsdp;
    fsdp.auto_wrap_policy = shard::WrapKind::kTransformerBased;
    fsdp.transformer_cls_names_to_wrap = {"GPT2Block"};
    cfg.distributed_type = accel::DistributedType::kFsdp;
    cfg.fsdp_plugin = fsdp;
  }
  // Two micro-batches a window; a pipeline's configured micro-batches instead.
  const bool pipelined = cfg.megatron_lm_plugin && cfg.megatron_lm_plugin->pp_degree > 1;
  cfg.gradient_accumulation_steps =
      pipelined ? std::max<int64_t>(1, cfg.megatron_lm_plugin->num_micro_batches) : 2;
  cfg.gradient_accumulation_plugin.reset();
  cfg.seed = 7;
  accel::Accelerator acc(cfg);
  const int W = acc.num_processes(), r = acc.process_index();
  const int D = acc.data_parallel_size(), d = acc.data_parallel_rank();
  acc.print("braid test: " + std::to_string(W) + " process(es) (dp " + std::to_string(D) + ", pp " +
            std::to_string(acc.pp_degree()) + ", tp " + std::to_string(acc.tp_degree()) + "), " +
            std::string(accel::distributed_type_name(acc.distributed_type())) + ", ZeRO stage " +
            std::to_string(static_cast<int>(acc.sharding_plan().options.stage)) +
            ", mixed precision " + std::string(amp::precision_type_name(acc.mixed_precision())));

  // 1. Collectives (over the data-parallel ranks): sum of ranks, gather order; and a broadcast
  // from the last process to all.
  Tree sum = acc.reduce(Tree(Tensor::full({1}, double(d + 1), DType::kF64)), "sum");
  check(sum.tensor().item() == double(D * (D + 1) / 2), "reduce(sum) gave a wrong value");
  Tree all = acc.gather(Tree(Tensor::full({1}, double(d), DType::kF64)));
  for (int q = 0; q < D; ++q) {
    check(all.tensor().data<double>()[q] == double(q), "gather gave ranks out of order");
  }
  Tree from_last = acc.broadcast(Tree(Tensor::full({1}, double(r), DType::kF64)), W - 1);
  check(from_last.tensor().item() == double(W - 1), "broadcast gave a wrong value");
  acc.print("  collectives: ok");

  // 2. Training: the loss falls.
  nn::GPTConfig g;
  g.vocab_size = 17;
  g.n_positions = 32;
  g.n_embd = 32;
  g.n_layer = 2;
  g.n_head = 4;
  g.embd_pdrop = g.attn_pdrop = g.resid_pdrop = 0.0;
  auto gpt = std::make_shared<nn::GPT>(g);
  Generator init(7);
  gpt->init_weights(init);
  auto model = acc.prepare_model(gpt);  // every layout
  nn::AdamW opt(model->optimizer_parameters(), {.lr = 1e-2});
  acc.prepare_optimizer(opt);
  nn::DataLoader loader(std::make_shared<PatternDataset>(), {.batch_size = 2});
  nn::DataLoader data = acc.prepare_data_loader(loader);
  const int64_t M = acc.gradient_accumulation_steps();
  std::vector<Tensor> ids, labels;
  double first = -1, last = 0, window = 0;
  for (int epoch = 0; epoch < 3; ++epoch) {
    data.set_epoch(epoch);
    ids.clear();
    labels.clear();
    for (const Tree& batch : data) {
      ids.push_back(batch.at("input_ids").tensor());
      labels.push_back(batch.at("labels").tensor());
      if (static_cast<int64_t>(ids.size()) < M) continue;
      window = acc.train_step(*model, ids, labels) * double(M);
      ids.clear();
      labels.clear();
      acc.clip_grad_norm_(*model, 1.0);
      acc.step(opt);
      acc.zero_grad(opt);
      last = acc.reduce(Tree(Tensor::full({1}, window, DType::kF64))).tensor().item();
      if (first < 0) first = last;
      window = 0;
    }
  }
  acc.print("  training: loss " + std::to_string(first) + " -> " + std::to_string(last));
  check(std::isfinite(last) && last < 0.7 * first, "the loss did not fall by 30%");

  // 3. Every rank holds the same model (whole: shards gathered, tp slices joined, stages
  // from their ranks).
  const auto whole = [&] { return acc.get_state_dict(*model); };
  double local = 0;
  for (auto& [name, t] : whole()) local += braid::sum(abs(t.to(DType::kF64))).item();
  Tensor mine = Tensor::full({1}, local, DType::kF64);
  Tensor sums = Tensor::empty({W}, DType::kF64);
  acc.process_group()->all_gather_into(sums, mine);
  for (int q = 1; q < W; ++q) {
    check(sums.data<double>()[q] == sums.data<double>()[0],
          "rank " + std::to_string(q) + " holds a different model");
  }
  acc.print("  replicas: ok");

  // 4. save_state / load_state round trip.
  // One folder for the job: every rank knows the launcher's store port.
  const char* port = std::getenv("MASTER_PORT");
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("braid_test_" + std::string(port != nullptr ? port : "single") + "_" + std::to_string(W));
  const auto before = whole();
  acc.save_state(dir);
  // One more window changes the model and the optimizer; load_state must undo it.
  Tree batch = nn::default_collate({PatternDataset().get(0), PatternDataset().get(1)});
  acc.train_step(*model, std::vector<Tensor>(M, batch.at("input_ids").tensor()),
                 std::vector<Tensor>(M, batch.at("labels").tensor()));
  acc.step(opt);
  check(!equal(whole()[0].second, before[0].second), "the extra step changed nothing");
  acc.load_state(dir);
  const auto after = whole();
  for (size_t i = 0; i < before.size(); ++i) {
    check(equal(before[i].second, after[i].second),
          "load_state did not restore " + before[i].first);
  }
  acc.wait_for_everyone();
  if (acc.is_main_process()) std::filesystem::remove_all(dir);
  acc.print("  save_state / load_state: ok");
  acc.print("braid test: all checks passed");
  return 0;
}

}  // namespace

void add_test_command(CLI::App& app) {
  auto o = std::make_shared<TestOptions>();
  CLI::App* cmd = app.add_subcommand(
      "test", "Run a short end-to-end check: collectives, sharded training, save/load state");
  cmd->add_option("--num_processes,--num-processes,-n", o->num_processes, "Ranks to start")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option("--config_file,--config-file", o->config_file,
                  "Configuration file (default: BRAID_CONFIG_FILE or the default file)");
  cmd->add_option("--timeout", o->timeout_s, "Collective deadline in seconds")
      ->capture_default_str();
  cmd->add_flag("--worker", o->worker, "One rank of the check (started by braid test)")
      ->group("");  // hidden
  cmd->callback([o] {
    if (o->worker) {
      worker(*o);
      return;
    }
    launch::LaunchOptions lo;
    lo.nproc_per_node = o->num_processes;
    lo.timeout_s = o->timeout_s;
    lo.command = {std::filesystem::read_symlink("/proc/self/exe").string(), "test", "--worker"};
    if (!o->config_file.empty()) {
      lo.command.push_back("--config_file");
      lo.command.push_back(o->config_file);
    }
    const int code = launch::run_job(lo);
    if (code != 0) {
      std::fprintf(stderr, "braid test: FAILED (exit code %d)\n", code);
      throw CommandExit{code};
    }
  });
}

}  // namespace braid::cli
