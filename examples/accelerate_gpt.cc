// The main job (README's quick start): a GPT trained on a text corpus with the Accelerator,
// sharded over the ranks `braid launch` starts. Everything comes from one YAML file
// (examples/accelerate_gpt.yaml: ZeRO-3 through deepspeed_config, bf16, trackers, checkpoint
// rotation) plus `--KEY VALUE` overrides of any configuration key or of this program's own keys:
//
//   braid launch --nproc-per-node 2 build/examples/accelerate_gpt \
//       --config_file examples/accelerate_gpt.yaml --max_steps 200 --output_dir /tmp/gpt
//
// Own keys (the program's defaults in parentheses; accelerate_gpt.yaml sets a bigger model: 4
// layers, 128 wide, 600 steps of 32 sequences, about 90 s on 2 cores): data
// (/usr/share/common-licenses), output_dir
// (accelerate_gpt_out), max_steps (200), global_batch_size (16 sequences per optimizer step,
// whatever the number of ranks), micro_batch_size (4 per rank), context (64), n_layer (2),
// n_embd (64), n_head (4), model (gpt2; llama: the Llama family with n_kv_head (n_head / 2)
// key / value heads and an untied head, the rest as gpt2's), lr (3e-3), warmup_steps (max_steps /
// 10), log_every (10), save_every (100), sample_tokens (160), resume (false), max_final_loss
// (unset: no check), stop_after (0: never; else save_state after that step and end, as an
// interrupted job), tp_degree and pp_degree (1: megatron_lm_config's degrees; above 1 the ranks
// form a (dp, pp, tp) mesh: the model is split over tp and cut into pp pipeline stages, 1F1B).
// gradient_accumulation_steps follows from global_batch_size / (micro_batch_size x dp ranks);
// with pp_degree > 1 they are the pipeline's micro-batches of one step.
//
// On the main process: a progress line every log_every steps (accel::ProgressBar: step, loss,
// tokens/s, remaining time), a
// held-out loss, a generated sample, <output_dir>/loss_curve.svg, TensorBoard and JSONL logs
// under <output_dir>/logs. Checkpoints (save_state) every save_every steps under
// <output_dir>/checkpoints, the oldest beyond total_limit removed; `--resume true` continues
// from the latest. At the end <output_dir>/model.safetensors (+ config.json, so transformers'
// GPT2LMHeadModel / LlamaForCausalLM.from_pretrained loads it), and "final loss X" as the last
// line. Exit code 1 when max_final_loss is given and the loss did not fall below it.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "braid/accel/accelerator.h"
#include "braid/core/error.h"
#include "braid/core/file_util.h"
#include "braid/nn/data_text.h"
#include "braid/nn/gpt.h"
#include "braid/nn/llama.h"
#include "braid/nn/loss.h"
#include "braid/tensor/ops.h"

namespace {

using namespace braid;

const std::vector<std::string> kOwnKeys = {"data",
                                           "output_dir",
                                           "max_steps",
                                           "global_batch_size",
                                           "micro_batch_size",
                                           "context",
                                           "n_layer",
                                           "n_embd",
                                           "n_head",
                                           "n_kv_head",
                                           "model",
                                           "lr",
                                           "warmup_steps",
                                           "log_every",
                                           "save_every",
                                           "sample_tokens",
                                           "resume",
                                           "max_final_loss",
                                           "stop_after",
                                           "tp_degree",
                                           "pp_degree"};

// Training windows [begin, end) of the corpus (the rest is held out).
class Subset : public nn::Dataset {
 public:
  Subset(std::shared_ptr<nn::Dataset> base, int64_t begin, int64_t end)
      : base_(std::move(base)), begin_(begin), end_(end) {}
  int64_t size() const override { return end_ - begin_; }
  Tree get(int64_t i) const override { return base_->get(begin_ + i); }

 private:
  std::shared_ptr<nn::Dataset> base_;
  int64_t begin_, end_;
};

std::string printable(const Tensor& ids) {
  std::string s;
  const Tensor flat = ids.contiguous();
  for (int64_t i = 0; i < flat.numel(); ++i) {
    const auto c = static_cast<unsigned char>(flat.data<int64_t>()[i]);
    s += (c == '\n' || c == '\t' || (c >= 32 && c < 127)) ? static_cast<char>(c) : '?';
  }
  return s;
}

// The loss curve as an SVG line plot (an image any browser shows).
void write_loss_svg(const std::filesystem::path& path, const std::vector<double>& losses,
                    int64_t first_step) {
  if (losses.empty()) return;
  const double w = 640, h = 360, m = 40;
  const double lo = *std::min_element(losses.begin(), losses.end());
  const double hi = *std::max_element(losses.begin(), losses.end());
  const double span = std::max(hi - lo, 1e-9);
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"640\" height=\"360\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"";
  for (size_t i = 0; i < losses.size(); ++i) {
    const double x = m + (w - 2 * m) * (losses.size() == 1 ? 0.0 : double(i) / (losses.size() - 1));
    const double y = h - m - (h - 2 * m) * (losses[i] - lo) / span;
    char pt[48];
    std::snprintf(pt, sizeof pt, "%.1f,%.1f ", x, y);
    svg += pt;
  }
  char axis[512];
  std::snprintf(axis, sizeof axis,
                "\"/>\n<text x=\"%g\" y=\"20\" font-size=\"14\">training loss, steps %lld-%lld "
                "(%.3f .. %.3f)</text>\n<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" "
                "stroke=\"black\"/>\n<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" "
                "stroke=\"black\"/>\n</svg>\n",
                m, static_cast<long long>(first_step),
                static_cast<long long>(first_step + static_cast<int64_t>(losses.size()) - 1), hi,
                lo, m, h - m, w - m, h - m, m, m, m, h - m);
  svg += axis;
  AtomicFile f(path);
  f.write(svg);
  f.commit();
}

int run(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  const accel::ConfigOptions copts{.extra_keys = kOwnKeys};
  accel::ConfigArguments cli = accel::take_config_arguments(args, copts);
  BRAID_CHECK(args.empty(), kInvalidArgument, "accelerate_gpt: unknown argument '",
              args.empty() ? std::string() : args.front(),
              "' (give --config_file FILE and --KEY VALUE for configuration keys)");
  accel::AcceleratorConfig cfg = accel::resolve_config(
      {}, {.command_line = cli, .options = copts, .validate = false});  // the Accelerator checks

  const std::string data_dir = accel::extra_string(cfg, "data", "/usr/share/common-licenses");
  const std::filesystem::path out = accel::extra_string(cfg, "output_dir", "accelerate_gpt_out");
  const int64_t max_steps = accel::extra_int(cfg, "max_steps", 200);
  const int64_t global_batch = accel::extra_int(cfg, "global_batch_size", 16);
  const int64_t micro = accel::extra_int(cfg, "micro_batch_size", 4);
  const int64_t context = accel::extra_int(cfg, "context", 64);
  const int64_t log_every = std::max<int64_t>(1, accel::extra_int(cfg, "log_every", 10));
  const int64_t save_every = accel::extra_int(cfg, "save_every", 100);
  const int64_t stop_after = accel::extra_int(cfg, "stop_after", 0);
  const double lr = accel::extra_double(cfg, "lr", 3e-3);
  // A demo exits 0 whatever the loss; --max_final_loss X turns it into a check (the tests and
  // scripts/main_job.sh ask for one).
  const std::optional<double> max_final_loss =
      accel::extra_value(cfg, "max_final_loss")
          ? std::optional<double>(accel::extra_double(cfg, "max_final_loss", 0))
          : std::nullopt;
  BRAID_CHECK(max_steps >= 1 && micro >= 1 && global_batch >= 1, kInvalidArgument,
              "accelerate_gpt: max_steps, micro_batch_size and global_batch_size must be >= 1");

  // --tp_degree / --pp_degree: the model-parallel degrees of megatron_lm_config, which apply
  // under any distributed_type (the data-parallel ranks are sharded by its plugin).
  const int64_t tp = accel::extra_int(cfg, "tp_degree", 1),
                pp = accel::extra_int(cfg, "pp_degree", 1);
  if (tp > 1 || pp > 1) {
    if (!cfg.megatron_lm_plugin) cfg.megatron_lm_plugin = accel::MegatronLMPlugin{};
    cfg.megatron_lm_plugin->tp_degree = tp;
    cfg.megatron_lm_plugin->pp_degree = pp;
  }
  // The ranks come from the launcher; the global batch stays the same for any number of
  // them: accumulation makes up the difference.
  auto world = ProcessGroup::create({});
  const int64_t W = world->size();
  BRAID_CHECK(tp >= 1 && pp >= 1 && W % (tp * pp) == 0, kInvalidArgument, "accelerate_gpt: ", W,
              " ranks are not a multiple of tp_degree x pp_degree = ", tp, " x ", pp);
  const int64_t dp = W / (tp * pp);
  BRAID_CHECK(global_batch % (micro * dp) == 0, kInvalidArgument,
              "accelerate_gpt: global_batch_size ", global_batch,
              " is not a multiple of micro_batch_size x data-parallel ranks = ", micro, " x ", dp);
  cfg.gradient_accumulation_steps = global_batch / (micro * dp);
  cfg.gradient_accumulation_plugin.reset();
  if (cfg.project_config.project_dir.empty()) cfg.project_config.project_dir = out;
  if (cfg.project_config.logging_dir.empty()) cfg.project_config.logging_dir = out / "logs";
  cfg.project_config.automatic_checkpoint_naming = true;
  const uint64_t seed = cfg.seed.value_or(1234);
  cfg.seed = seed;
  accel::Accelerator acc(cfg, world);

  auto text = std::make_shared<nn::TextBytesDataset>(
      data_dir, nn::TextBytesOptions{.context_length = context});
  const int64_t n = text->size(), n_eval = std::max<int64_t>(1, n / 20);
  // The family (--model): everything below works on nn::CausalLM, whatever it is.
  const std::string family = accel::extra_string(cfg, "model", "gpt2");
  const int64_t n_embd = accel::extra_int(cfg, "n_embd", 64),
                n_layer = accel::extra_int(cfg, "n_layer", 2),
                n_head = accel::extra_int(cfg, "n_head", 4);
  const auto build_model = [&]() -> std::shared_ptr<nn::CausalLM> {
    if (family == "gpt2") {
      nn::GPTConfig g;
      g.vocab_size = 256;
      g.n_positions = context;
      g.n_embd = n_embd;
      g.n_layer = n_layer;
      g.n_head = n_head;
      g.embd_pdrop = g.attn_pdrop = g.resid_pdrop = 0.0;
      return std::make_shared<nn::GPT>(g);
    }
    BRAID_CHECK(family == "llama", kInvalidArgument, "accelerate_gpt: model '", family,
                "' is not one of gpt2, llama");
    nn::LlamaConfig l;
    l.vocab_size = 256;
    l.max_position_embeddings = context;
    l.hidden_size = n_embd;
    l.intermediate_size = (8 * n_embd / 3 + 15) / 16 * 16;  // SwiGLU's 8/3 d, a multiple of 16
    l.num_hidden_layers = n_layer;
    l.num_attention_heads = n_head;
    l.num_key_value_heads = accel::extra_int(cfg, "n_kv_head", std::max<int64_t>(1, n_head / 2));
    return std::make_shared<nn::Llama>(l);
  };
  // The same whole initialization on every rank; prepare_model keeps each rank's part of it.
  std::shared_ptr<nn::CausalLM> lm = build_model();
  Generator init_gen(seed);
  lm->init_weights(init_gen);
  const int64_t n_params = lm->num_parameters();
  // One prepared model for every layout: dp / ZeRO, split over tp by the model's plan, cut
  // into pp stages.
  std::shared_ptr<accel::PreparedModel> model = acc.prepare_model(lm);
  acc.print("accelerate_gpt: " + lm->type_name() + ", " + std::to_string(W) + " rank(s) (dp " +
            std::to_string(dp) + ", pp " + std::to_string(pp) + ", tp " + std::to_string(tp) +
            "), " + (acc.sharding_plan().sequence_parallel ? "sequence parallel, " : "") +
            std::string(accel::distributed_type_name(acc.distributed_type())) + " stage " +
            std::to_string(static_cast<int>(acc.sharding_plan().options.stage)) +
            ", mixed precision " + std::string(amp::precision_type_name(acc.mixed_precision())) +
            ", " + std::to_string(n_params) + " parameters, corpus " +
            std::to_string(text->bytes().size()) + " bytes, global batch " +
            std::to_string(global_batch) + " x " + std::to_string(context) + " tokens (" +
            std::to_string(micro) + " per rank x " + std::to_string(dp) + " dp ranks x " +
            std::to_string(acc.gradient_accumulation_steps()) +
            (pp > 1 ? " pipeline micro-batches)" : " accumulation steps)"));

  nn::AdamW opt(model->optimizer_parameters(), {.lr = lr, .weight_decay = 0.1, .beta2 = 0.95});
  acc.prepare_optimizer(opt);
  // scheduler_step advances the schedule num_processes times per optimizer step (Accelerate's
  // AcceleratedScheduler without split_batches): the schedule is given in steps x processes,
  // so the learning rates are those of any other number of ranks.
  nn::LRScheduler sched(
      opt, nn::SchedulerType::kCosine,
      {.num_warmup_steps = accel::extra_int(cfg, "warmup_steps", max_steps / 10) * W,
       .num_training_steps = max_steps * W});
  acc.prepare_scheduler(sched);
  // Enough windows for max_steps; a seeded shuffle (the same on every rank) over the training
  // part, split across ranks by prepare_data_loader.
  nn::DataLoader loader(std::make_shared<Subset>(text, 0, n - n_eval),
                        {.batch_size = micro, .shuffle = true, .seed = seed, .drop_last = true});
  nn::DataLoader train = acc.prepare_data_loader(loader);
  const int64_t batches_per_epoch = train.size();
  BRAID_CHECK(batches_per_epoch >= acc.gradient_accumulation_steps(), kInvalidArgument,
              "accelerate_gpt: the corpus is too small for one global batch");

  int64_t step = 0;
  int64_t epoch = 0, skip = 0;
  if (accel::extra_bool(cfg, "resume", false)) {
    acc.load_state();
    const auto pos = acc.resumed_position(0);
    epoch = pos.epoch;
    skip = pos.samples / train.total_batch_size();
    step = (epoch * batches_per_epoch + skip) / acc.gradient_accumulation_steps();
    acc.print("resumed at step " + std::to_string(step) + " (epoch " + std::to_string(epoch) +
              ", batch " + std::to_string(skip) + ")");
  }
  acc.init_trackers("accelerate_gpt", accel::HParams{{"lr", lr},
                                                     {"max_steps", double(max_steps)},
                                                     {"global_batch_size", double(global_batch)}});

  std::vector<Tensor> window_ids, window_labels;  // a step's micro-batches
  std::vector<double> curve;
  const int64_t first_step = step + 1;
  double window_loss = 0, last_loss = 0, ema = -1;
  const int64_t start_step = step;
  // The library's progress bar (main process only): a line every log_every steps and at the
  // end, with the rate in tokens/s and the remaining time.
  accel::ProgressBar bar = acc.progress_bar({.desc = "train",
                                             .total = max_steps,
                                             .every = log_every,
                                             .initial = step,
                                             .unit = "tok",
                                             .unit_scale = double(global_batch * context)});
  while (step < max_steps) {
    train.set_epoch(epoch);
    nn::DataLoader skipped = acc.skip_first_batches(train, skip);
    nn::DataLoader& data = skip > 0 ? skipped : train;
    skip = 0;
    window_ids.clear();
    window_labels.clear();
    for (const Tree& batch : data) {
      // A step runs the window's micro-batches together (Megatron's train step: one after
      // another, or by the pipeline's schedule); a partial window at the end of the pass is
      // dropped, so every step is one whole global batch.
      window_ids.push_back(batch.at("input_ids").tensor());
      window_labels.push_back(batch.at("labels").tensor());
      if (static_cast<int64_t>(window_ids.size()) < acc.gradient_accumulation_steps()) continue;
      window_loss = acc.train_step(*model, window_ids, window_labels);
      window_ids.clear();
      window_labels.clear();
      // Clipping is the configuration's (deepspeed_config.gradient_clipping): acc.step clips.
      acc.step(opt);
      acc.scheduler_step(sched);
      acc.zero_grad(opt);
      ++step;
      // The step's loss: the mean over its micro-batches and ranks.
      Tree mean = acc.reduce(Tree(Tensor::full({1}, window_loss, DType::kF64)));
      window_loss = 0;
      last_loss = mean.tensor().item();
      ema = ema < 0 ? last_loss : 0.9 * ema + 0.1 * last_loss;
      curve.push_back(last_loss);
      acc.log({{"loss", last_loss}, {"lr", sched.get_last_lr()[0]}}, step);
      bar.update(1, {{"loss", last_loss}, {"avg", ema}});
      if (save_every > 0 && step % save_every == 0 && step < max_steps) {
        const auto folder = acc.save_state();
        acc.print("saved " + folder.string());
      }
      if (step == stop_after) {
        const auto folder = acc.save_state();
        acc.end_training();
        acc.print("stopped after step " + std::to_string(step) + "; state in " + folder.string());
        return 0;
      }
      if (step >= max_steps) break;
    }
    if (step < max_steps) ++epoch;
  }

  // The trained model whole on every rank (Accelerate's get_state_dict: shards gathered, tp
  // slices joined, pipeline stages from their ranks) for the held-out loss and the sample.
  const NamedTensors trained = acc.get_state_dict(*model);
  std::shared_ptr<nn::CausalLM> whole = build_model();
  whole->load_state_dict(trained, /*strict=*/false);
  nn::CrossEntropyLoss eval_ce;
  double eval_loss = 0;
  {
    nn::NoGradGuard no_grad;
    whole->eval();
    const int64_t eval_batches = std::min<int64_t>(8, n_eval);
    for (int64_t i = 0; i < eval_batches; ++i) {
      std::vector<Tree> samples{text->get(n - n_eval + i * (n_eval / eval_batches))};
      Tree batch = nn::default_collate(samples);
      auto autocast = acc.autocast();
      Tensor logits = whole->forward(batch.at("input_ids").tensor());
      eval_loss +=
          eval_ce.forward(logits, batch.at("labels").tensor()).item() / double(eval_batches);
    }
  }
  acc.print("held-out loss " + std::to_string(eval_loss) +
            " (a uniform guess: " + std::to_string(std::log(256.0)) + ")");
  {
    // A sample, the same on every rank (same seed, same whole model).
    nn::NoGradGuard no_grad;
    Generator sample_gen(seed + 2);
    Tensor prompt = text->get(n - n_eval).at("input_ids").tensor().narrow(0, 0, 16).unsqueeze(0);
    Tensor sample =
        whole->generate(prompt, accel::extra_int(cfg, "sample_tokens", 160), 0.8, 20, sample_gen);
    acc.print("---- sample (prompt: \"" + printable(prompt) + "\") ----\n" + printable(sample) +
              "\n----");
  }
  acc.save_model(*model, out);
  acc.on_main_process([&] {
    AtomicFile f(out / "config.json");
    f.write(whole->hf_config_json());
    f.commit();
    write_loss_svg(out / "loss_curve.svg", curve, first_step);
  });
  acc.end_training();
  acc.print("wrote " + (out / "model.safetensors").string() + ", config.json, loss_curve.svg");
  if (max_final_loss && acc.is_main_process() && !(ema < *max_final_loss) && step > start_step) {
    std::fprintf(stderr, "accelerate_gpt: the loss %.4f did not fall below %.3f\n", ema,
                 *max_final_loss);
    return 1;
  }
  acc.print("final loss " + std::to_string(last_loss));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "accelerate_gpt: %s\n", e.what());
    return 1;
  }
}
