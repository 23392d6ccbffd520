// A GPT trained from scratch, in one process, on the bytes of a text corpus (by default the
// licence texts every Debian machine has in /usr/share/common-licenses): braid's nn layers
// with hand-written backward, AdamW with a cosine schedule, bf16 autocast if asked. It prints
// the loss as it falls, evaluates on held-out windows, and ends with a generated sample.
//
//   gpt_train [--data DIR] [--steps N] [--batch B] [--context T] [--layers L] [--embd D]
//             [--heads H] [--lr LR] [--precision no|bf16] [--seed S] [--out DIR]
//             [--checkpointing 0|1] [--sample-tokens N]
//
// The sharded, multi-process version of this job comes with the sharding and Accelerator
// issues. Exit code 0 means the training loss fell below `--max-final-loss` (default: the loss
// of a uniform guess over the bytes seen, ln 256 = 5.55, minus 1.5) and the model written to
// --out loads back with the same logits.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <string>

#include "braid/amp/autocast.h"
#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "braid/nn/data.h"
#include "braid/nn/data_text.h"
#include "braid/nn/gpt.h"
#include "braid/nn/lr_scheduler.h"
#include "braid/nn/optim.h"
#include "braid/tensor/ops.h"

namespace {

using namespace braid;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string data = "/usr/share/common-licenses";
  std::string out = "gpt_out";
  int64_t steps = 600, batch = 8, context = 64, layers = 2, embd = 64, heads = 4;
  double lr = 3e-3;
  std::string precision = "no";
  uint64_t seed = 1234;
  bool checkpointing = false;
  int64_t sample_tokens = 200;
  double max_final_loss = std::log(256.0) - 1.5;
};

Options parse(int argc, char** argv) {
  Options o;
  std::map<std::string, std::string> kv;
  for (int i = 1; i < argc; i += 2) {
    const std::string arg = argv[i];
    BRAID_CHECK(arg.rfind("--", 0) == 0 && i + 1 < argc, kInvalidArgument, "gpt_train: option ",
                arg, " needs a value (--name value)");
    kv[arg.substr(2)] = argv[i + 1];
  }
  for (auto& [k, v] : kv) {
    if (k == "data")
      o.data = v;
    else if (k == "out")
      o.out = v;
    else if (k == "steps")
      o.steps = std::stoll(v);
    else if (k == "batch")
      o.batch = std::stoll(v);
    else if (k == "context")
      o.context = std::stoll(v);
    else if (k == "layers")
      o.layers = std::stoll(v);
    else if (k == "embd")
      o.embd = std::stoll(v);
    else if (k == "heads")
      o.heads = std::stoll(v);
    else if (k == "lr")
      o.lr = std::stod(v);
    else if (k == "precision")
      o.precision = v;
    else if (k == "seed")
      o.seed = std::stoull(v);
    else if (k == "checkpointing")
      o.checkpointing = v == "1";
    else if (k == "sample-tokens")
      o.sample_tokens = std::stoll(v);
    else if (k == "max-final-loss")
      o.max_final_loss = std::stod(v);
    else
      BRAID_FAIL(kInvalidArgument, "gpt_train: unknown option --", k);
  }
  BRAID_CHECK(o.precision == "no" || o.precision == "bf16", kInvalidArgument,
              "gpt_train: --precision must be no or bf16, got ", o.precision);
  return o;
}

// Printable bytes as they are, others as '.', so a sample prints on any terminal.
std::string printable(const Tensor& ids) {
  std::string s;
  for (double v : ids.to_vector()) {
    const int c = static_cast<int>(v);
    s += (c == '\n' || (c >= 32 && c < 127)) ? static_cast<char>(c) : '.';
  }
  return s;
}

// Windows [begin, end) of a dataset: the training part of the corpus.
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

int run(const Options& o) {
  set_seed(o.seed);
  auto text = std::make_shared<nn::TextBytesDataset>(
      o.data, nn::TextBytesOptions{.context_length = o.context});
  // The last 1/20 of the windows is held out for evaluation.
  const int64_t n = text->size(), n_eval = std::max<int64_t>(1, n / 20);
  std::printf("corpus: %zu files, %zu bytes, %lld training windows of %lld bytes\n",
              text->files().size(), text->bytes().size(), static_cast<long long>(n - n_eval),
              static_cast<long long>(o.context));

  nn::GPTConfig cfg;
  cfg.vocab_size = 256;
  cfg.n_positions = o.context;
  cfg.n_embd = o.embd;
  cfg.n_layer = o.layers;
  cfg.n_head = o.heads;
  cfg.embd_pdrop = cfg.attn_pdrop = cfg.resid_pdrop = 0.0;
  cfg.activation_checkpointing = o.checkpointing;
  nn::GPT gpt(cfg);
  Generator init_gen(o.seed);
  gpt.init_weights(init_gen);
  std::printf("model: %lld parameters (%lld layers, d=%lld, %lld heads), precision %s\n",
              static_cast<long long>(gpt.num_parameters()), static_cast<long long>(o.layers),
              static_cast<long long>(o.embd), static_cast<long long>(o.heads), o.precision.c_str());

  // Weight decay on matrices only (GPT-2 / nanoGPT practice): biases, norms and position
  // embeddings are left alone.
  nn::ParamGroup decay, no_decay;
  for (auto& [name, p] : gpt.named_parameters()) {
    (p.data().dim() >= 2 && name != "transformer.wpe.weight" ? decay : no_decay)
        .params.push_back(p);
  }
  decay.options = {.lr = o.lr, .weight_decay = 0.1, .beta2 = 0.95};
  no_decay.options = {.lr = o.lr, .weight_decay = 0.0, .beta2 = 0.95};
  nn::AdamW opt(std::vector<nn::ParamGroup>{decay, no_decay});
  nn::LRScheduler sched(opt, nn::SchedulerType::kCosine,
                        {.num_warmup_steps = o.steps / 10, .num_training_steps = o.steps});

  // Training windows in a seeded random order (a new permutation each epoch), batches
  // collated into {"input_ids": [B, T], "labels": [B, T]} and prefetched on a thread.
  auto train_set = std::make_shared<Subset>(text, 0, n - n_eval);
  nn::DataLoader loader(
      train_set, {.batch_size = o.batch, .shuffle = true, .seed = o.seed, .drop_last = true});
  auto it = loader.begin();
  const auto next_batch = [&] {
    if (it == loader.end()) it = loader.begin();  // the next epoch
    Tree batch = *it;
    ++it;
    return batch;
  };

  nn::CrossEntropyLoss ce;
  const bool bf16 = o.precision == "bf16";
  const auto t0 = Clock::now();
  double loss_v = 0, first_loss = 0, ema = 0;
  for (int64_t step = 1; step <= o.steps; ++step) {
    Tree batch = next_batch();
    {
      auto scope = bf16 ? amp::AutocastScope(DType::kBF16) : amp::AutocastScope::noop();
      Tensor logits = gpt.forward(batch.at("input_ids").tensor());
      loss_v = ce.forward(logits, batch.at("labels").tensor()).item();
      gpt.backward(ce.backward());
    }
    opt.step();
    opt.zero_grad();
    sched.step();
    if (step == 1) first_loss = ema = loss_v;
    ema = 0.9 * ema + 0.1 * loss_v;
    if (step % 25 == 0 || step == 1 || step == o.steps) {
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      std::printf("step %5lld  loss %.4f  (avg %.4f)  lr %.2e  %.0f tokens/s\n",
                  static_cast<long long>(step), loss_v, ema, sched.get_last_lr()[0],
                  step * o.batch * o.context / s);
      std::fflush(stdout);
    }
  }

  // Held-out loss.
  double eval_loss = 0;
  {
    nn::NoGradGuard no_grad;
    gpt.eval();
    const int64_t eval_batches = std::min<int64_t>(8, n_eval);
    for (int64_t i = 0; i < eval_batches; ++i) {
      std::vector<Tree> samples{text->get(n - n_eval + i * (n_eval / eval_batches))};
      Tree batch = nn::default_collate(samples);
      Tensor logits = gpt.forward(batch.at("input_ids").tensor());
      eval_loss += ce.forward(logits, batch.at("labels").tensor()).item() / eval_batches;
    }
    gpt.train();
  }
  std::printf("held-out loss %.4f (a uniform guess: %.4f)\n", eval_loss, std::log(256.0));

  // A sample, prompted with the start of a held-out window.
  Generator sample_gen(o.seed + 2);
  Tensor prompt = text->get(n - n_eval).at("input_ids").tensor().narrow(0, 0, 16).unsqueeze(0);
  Tensor out = gpt.generate(prompt, o.sample_tokens, 0.8, 20, sample_gen);
  std::printf("---- sample (prompt: \"%s\") ----\n%s\n----\n", printable(prompt).c_str(),
              printable(out).c_str());

  // Save, reload, and check the reloaded model gives the same logits.
  nn::save_pretrained(gpt, o.out);
  auto back = nn::from_pretrained(o.out);
  {
    nn::NoGradGuard no_grad;
    gpt.eval();
    back->eval();
    BRAID_CHECK(equal(gpt.forward(prompt), back->forward(prompt)), kInternal,
                "gpt_train: the model saved to ", o.out, " does not load back to the same logits");
  }
  std::printf("saved %s (config.json, model.safetensors); reloaded with identical logits\n",
              o.out.c_str());
  std::printf("first loss %.4f, final average loss %.4f\n", first_loss, ema);
  if (!(ema < o.max_final_loss)) {
    std::fprintf(stderr, "gpt_train: the loss did not fall below %.3f\n", o.max_final_loss);
    return 1;
  }
  std::printf("final loss %.4f\n", ema);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpt_train: %s\n", e.what());
    return 1;
  }
}
