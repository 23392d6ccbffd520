// tp_worker: tensor parallelism on real processes under `braid launch` (run_tp.sh).
//
//   tp_worker layers
//       every rank of the world is one tp group: the layer checks of tp_scenarios.h
//   tp_worker train --tp T [--model gpt2|llama] [--tied] [--stage none|0|1|2|3] [--sp]
//                   [--dropout P] [--clip C] [--checkpointing] [--bf16] [--overlap] [--steps N]
//                   [--G G] [--save-at K DIR] [--resume DIR --start K] [--tol X]
//       a DeviceMesh (dp = WORLD_SIZE / T, tp = T); a small GPT (or Llama: grouped-query
//       attention, a pad id, --tied for a tied head; no dropout) split over tp (T > 1:
//       parallelize) and, unless --stage none, wrapped by a ShardedModel over dp at that
//       ZeRO stage. Every rank first trains the same model in one process on the same global
//       batch (the reference), then the parallel run; each step's loss and clipped norm, and
//       at the end every parameter (this rank's slice of the reference's), must agree within
//       the tolerance (max |a - b| over the model / max |reference|).
//   tp_worker check-ckpt DIR STEPS [--model M] [--tied] [--dropout P] [--clip C]
//       one process: the checkpoint holds every parameter whole under its model's name and equals
//       the reference after STEPS steps (within 2e-4), with the optimizer's state beside it
//
// Global batch: G micro-batches of 2 sequences of 8 tokens, a function of (step, micro-batch);
// dp rank d runs micro-batches d, d + dp, ...; before each micro-batch the default generator is
// seeded from (step, micro-batch), so dropout masks do not depend on the layout either.
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "braid/amp/autocast.h"
#include "braid/comm/process_group.h"
#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "braid/nn/clip_grad.h"
#include "braid/nn/gpt.h"
#include "braid/nn/llama.h"
#include "braid/nn/optim.h"
#include "braid/shard/checkpoint.h"
#include "braid/shard/device_mesh.h"
#include "braid/shard/fsdp.h"
#include "braid/shard/tensor_parallel.h"
#include "braid/tensor/ops.h"
#include "tp_scenarios.h"

namespace {

using namespace braid;
using namespace braid::shard;

constexpr int64_t kVocab = 37;

struct Opts {
  int64_t tp = 1, steps = 3, G = 4, save_at = -1, start = 0;
  std::string model = "gpt2", stage = "none", save_dir, resume_dir;
  bool sp = false, checkpointing = false, bf16 = false, tied = false;
  bool overlap = false;  // the ShardedModel's communication thread (off: its default here)
  double dropout = 0, clip = 0, tol = 2e-4;
};

// The same model on every rank (--model): GPT-2, or a Llama whose 8 query heads read 4 key /
// value heads (grouped at TP 2 and 4), with a pad id among the tokens.
std::shared_ptr<nn::CausalLM> make_model(const Opts& o) {
  if (o.model == "llama") {
    nn::LlamaConfig c;
    c.activation_checkpointing = o.checkpointing;
    c.vocab_size = kVocab;
    c.hidden_size = 32;
    c.intermediate_size = 40;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 8;
    c.num_key_value_heads = 4;
    c.max_position_embeddings = 16;
    c.tie_word_embeddings = o.tied;
    c.pad_token_id = 3;
    return std::make_shared<nn::Llama>(c);
  }
  BRAID_CHECK(o.model == "gpt2" && !o.tied, kInvalidArgument, "tp_worker: --model ", o.model,
              o.tied ? " --tied" : "", " is not one of gpt2, llama [--tied]");
  nn::GPTConfig c;
  c.activation_checkpointing = o.checkpointing;
  c.vocab_size = kVocab;
  c.n_positions = 16;
  c.n_embd = 24;
  c.n_layer = 2;
  c.n_head = 4;
  c.embd_pdrop = c.attn_pdrop = c.resid_pdrop = o.dropout;
  return std::make_shared<nn::GPT>(c);
}

std::pair<Tensor, Tensor> micro_batch(int64_t step, int64_t m) {
  Generator gen(1000003 * static_cast<uint64_t>(step) + static_cast<uint64_t>(m));
  Tensor data = Tensor::empty({2, 9}, DType::kI64);
  gen.fill_randint(data.data<int64_t>(), data.numel(), 0, kVocab);
  return {data.narrow(1, 0, 8).contiguous(), data.narrow(1, 1, 8).contiguous()};
}

void seed_for(int64_t step, int64_t m) {
  default_generator(kCPU).manual_seed(7 + 1000 * static_cast<uint64_t>(step) +
                                      static_cast<uint64_t>(m));
}

amp::AutocastScope autocast(const Opts& o) {
  return o.bf16 ? amp::AutocastScope(DType::kBF16) : amp::AutocastScope::noop();
}

const nn::OptimizerOptions kAdam{.lr = 1e-2, .weight_decay = 0.1};

struct Reference {
  std::shared_ptr<nn::CausalLM> gpt;
  std::vector<double> losses, norms;
};

// One process, ordinary gradient accumulation over the G micro-batches of each step.
Reference train_reference(const Opts& o, int64_t steps) {
  Reference ref;
  ref.gpt = make_model(o);
  Generator init(42);
  ref.gpt->init_weights(init);
  nn::AdamW opt(ref.gpt->parameters(), kAdam);
  nn::CrossEntropyLoss ce;
  for (int64_t s = 0; s < steps; ++s) {
    double loss = 0;
    for (int64_t m = 0; m < o.G; ++m) {
      auto [x, y] = micro_batch(s, m);
      seed_for(s, m);
      auto scope = autocast(o);
      loss += ce.forward(ref.gpt->forward(x), y).item();
      ref.gpt->backward(ce.backward());
    }
    for (auto& p : ref.gpt->parameters()) p.grad() = scale(p.grad(), 1.0 / double(o.G));
    ref.norms.push_back(o.clip > 0 ? nn::clip_grad_norm_(ref.gpt->parameters(), o.clip) : 0.0);
    opt.step();
    opt.zero_grad();
    ref.losses.push_back(loss / double(o.G));
  }
  return ref;
}

bool near(double a, double b, double rel) {
  return std::abs(a - b) <= rel * std::max(1e-12, std::abs(b));
}

int train(const Opts& o) {
  auto world = ProcessGroup::create({});
  const int W = world->size();
  BRAID_CHECK(W % o.tp == 0, kInvalidArgument, "tp_worker: --tp ", o.tp, " must divide ", W);
  const int64_t dp = W / o.tp;
  BRAID_CHECK(o.G % dp == 0, kInvalidArgument, "tp_worker: G = ", o.G, " must be a multiple of dp ",
              dp);
  BRAID_CHECK(o.stage != "none" || dp == 1, kInvalidArgument,
              "tp_worker: --stage none needs one data-parallel rank");
  DeviceMesh mesh(world, {dp, o.tp}, {"dp", "tp"});
  const auto tp = mesh.group("tp"), dpg = mesh.group("dp");
  const Reference ref = train_reference(o, o.steps);

  std::shared_ptr<nn::CausalLM> gpt = make_model(o);
  Generator init(42);
  gpt->init_weights(init);
  std::shared_ptr<TensorParallelPlan> plan;
  if (o.tp > 1) plan = parallelize(*gpt, tp, gpt->parallel_plan(), {.sequence_parallel = o.sp});
  std::unique_ptr<ShardedModel> sm;
  if (o.stage != "none") {
    ShardingOptions so;
    so.stage = zero_stage_from_int(std::stoll(o.stage));
    so.wrap.kind = WrapKind::kTransformerBased;
    so.wrap.transformer_cls_names_to_wrap = {"GPT2Block", "LlamaDecoderLayer"};
    so.tensor_parallel = plan;
    so.checkpoint_group = world;
    if (o.overlap) so.overlap = true;
    sm = std::make_unique<ShardedModel>(gpt, dpg, so);
  }
  nn::AdamW opt(sm ? sm->optimizer_parameters() : gpt->parameters(), kAdam);
  nn::CrossEntropyLoss ce;
  std::unique_ptr<VocabParallelCrossEntropy> vce;
  if (plan)
    vce = std::make_unique<VocabParallelCrossEntropy>(
        tp, VocabParallelCrossEntropyOptions{.vocab_size = kVocab});
  if (!o.resume_dir.empty()) {
    BRAID_CHECK(sm != nullptr, kInvalidArgument, "tp_worker: --resume needs a --stage");
    sm->load_checkpoint(o.resume_dir, &opt, {.rng_states = false});
  }

  std::vector<std::string> failures;
  // Losses and norms: rounding of f32 sums in another order; bf16 rounds partial sums (the
  // row-parallel all-reduce adds bf16 partial products), one bf16 ulp is 2^-8.
  const double step_tol = o.bf16 ? 1e-2 : 1e-5;
  for (int64_t s = o.start; s < o.steps; ++s) {
    if (s == o.save_at) sm->save_checkpoint(o.save_dir, &opt, {{"step", std::to_string(s)}});
    double loss = 0;
    for (int64_t j = 0; j < o.G / dp; ++j) {
      const int64_t m = j * dp + mesh.local_rank("dp");
      auto [x, y] = micro_batch(s, m);
      seed_for(s, m);
      auto scope = autocast(o);
      const Tensor logits = sm ? sm->forward(x) : gpt->forward(x);
      loss += (vce ? vce->forward(logits, y) : ce.forward(logits, y)).item();
      const Tensor dlogits = vce ? vce->backward() : ce.backward();
      if (sm) {
        sm->backward(dlogits);
      } else {
        gpt->backward(dlogits);
      }
    }
    double norm = 0;
    if (sm) {
      sm->finish_gradients(1.0 / double(o.G));
      if (o.clip > 0) norm = sm->clip_grad_norm_(o.clip);
    } else {
      for (auto& p : gpt->parameters()) p.grad() = scale(p.grad(), 1.0 / double(o.G));
      if (o.clip > 0) {
        norm = plan ? clip_grad_norm_(gpt->parameters(), *plan, o.clip)
                    : nn::clip_grad_norm_(gpt->parameters(), o.clip);
      }
    }
    opt.step();
    opt.zero_grad();
    if (sm) sm->after_step();
    Tensor l = Tensor::full({1}, loss, DType::kF64);
    dpg->all_reduce(l);
    loss = l.item() / double(o.G);
    const auto si = static_cast<size_t>(s);
    if (!near(loss, ref.losses[si], step_tol)) {
      failures.push_back("step " + std::to_string(s) + " loss " + std::to_string(loss) +
                         ", one process " + std::to_string(ref.losses[si]));
    }
    if (o.clip > 0 && !near(norm, ref.norms[si], step_tol)) {
      failures.push_back("step " + std::to_string(s) + " gradient norm " + std::to_string(norm) +
                         ", one process " + std::to_string(ref.norms[si]));
    }
    if (world->rank() == 0) {
      std::printf("step %lld loss %.6f (one process %.6f) norm %.9g (one process %.9g)\n",
                  static_cast<long long>(s), loss, ref.losses[si], norm, ref.norms[si]);
    }
  }

  // Every parameter: this rank's slice of the reference's.
  std::map<std::string, Tensor> values;
  if (sm) {
    for (auto& [name, t] : sm->full_state_dict()) values[name] = t;
  }
  const auto want = ref.gpt->named_parameters();
  const auto got = gpt->named_parameters();
  BRAID_CHECK(want.size() == got.size(), kInternal, "tp_worker: parameter lists differ");
  double worst = 0, largest = 1e-30;
  std::string worst_name;
  for (size_t i = 0; i < got.size(); ++i) {
    const auto& [name, p] = got[i];
    const Tensor value = sm ? values.at(name) : p.data();
    Tensor expected = want[i].second.data();
    if (const TensorSlice* sl = plan ? plan->slice(p) : nullptr) {
      expected = tp_testing::local_of(expected, static_cast<int>(sl->dim), sl->segments,
                                      value.size(static_cast<int>(sl->dim)));
    }
    largest = std::max(largest, amax(abs(expected)).item());
    const double d = amax(abs(sub(value.to(DType::kF32), expected))).item();
    if (d > worst) worst = d, worst_name = name;
  }
  worst /= largest;
  if (!(worst <= o.tol)) {
    failures.push_back("parameters differ from one process by " + std::to_string(worst) + " (" +
                       worst_name + "; tolerance " + std::to_string(o.tol) + ")");
  }
  for (const auto& f : failures)
    std::fprintf(stderr, "tp_worker rank %d: FAIL %s\n", world->rank(), f.c_str());
  if (!failures.empty()) return 1;
  std::printf("tp_worker rank %d: %s%s %s tp %lld stage %s%s OK (largest difference %.3g of %s)\n",
              world->rank(), gpt->type_name().c_str(), o.tied ? " (tied)" : "", mesh.str().c_str(),
              static_cast<long long>(o.tp), o.stage.c_str(), o.sp ? " sp" : "", worst,
              worst_name.c_str());
  world->barrier();
  return 0;
}

int check_checkpoint(const std::string& dir, int64_t steps, const Opts& o) {
  const Reference ref = train_reference(o, steps);
  ShardedCheckpoint ckpt(dir);
  int bad = 0;
  double worst = 0, largest = 1e-30;  // over the whole model, as train's comparison
  for (auto& [name, p] : ref.gpt->named_parameters()) {
    if (!ckpt.contains(name) || ckpt.shape(name) != p.data().shape()) {
      std::fprintf(stderr, "FAIL: '%s' missing or of another shape\n", name.c_str());
      ++bad;
      continue;
    }
    largest = std::max(largest, amax(abs(p.data())).item());
    worst = std::max(worst, amax(abs(sub(ckpt.read(name).to(DType::kF32), p.data()))).item());
    for (const char* state : {"exp_avg", "exp_avg_sq"}) {
      const std::string key = std::string("optimizer.") + state + "." + name;
      if (!ckpt.contains(key) || ckpt.shape(key) != p.data().shape()) {
        std::fprintf(stderr, "FAIL: '%s' missing or of another shape\n", key.c_str());
        ++bad;
      }
    }
  }
  worst /= largest;
  const size_t expected = 3 * ref.gpt->named_parameters().size();
  if (ckpt.names().size() != expected) {
    std::fprintf(stderr, "FAIL: %zu tensors, expected %zu\n", ckpt.names().size(), expected);
    ++bad;
  }
  if (worst > 2e-4) {
    std::fprintf(stderr, "FAIL: parameters differ from one process by %.3g\n", worst);
    ++bad;
  }
  if (bad != 0) return 1;
  std::printf("check-ckpt: %s holds the global %s (largest difference %.3g)\n", dir.c_str(),
              ref.gpt->type_name().c_str(), worst);
  return 0;
}

int layers() {
  auto world = ProcessGroup::create({});
  tp_testing::Failures f;
  tp_testing::check_all_layers(world, f);
  for (const auto& line : f.lines)
    std::fprintf(stderr, "tp_worker rank %d: FAIL %s\n", world->rank(), line.c_str());
  if (!f.lines.empty()) return 1;
  std::printf("tp_worker rank %d: layers OK (%lld checks)\n", world->rank(),
              static_cast<long long>(f.checks));
  world->barrier();
  return 0;
}

Opts parse(int argc, char** argv, int first) {
  Opts o;
  for (int i = first; i < argc; ++i) {
    const std::string a = argv[i];
    const bool more = i + 1 < argc;
    if (a == "--tp" && more)
      o.tp = std::stoll(argv[++i]);
    else if (a == "--model" && more)
      o.model = argv[++i];
    else if (a == "--tied")
      o.tied = true;
    else if (a == "--stage" && more)
      o.stage = argv[++i];
    else if (a == "--sp")
      o.sp = true;
    else if (a == "--checkpointing")
      o.checkpointing = true;
    else if (a == "--bf16")
      o.bf16 = true;
    else if (a == "--overlap")
      o.overlap = true;
    else if (a == "--dropout" && more)
      o.dropout = std::stod(argv[++i]);
    else if (a == "--clip" && more)
      o.clip = std::stod(argv[++i]);
    else if (a == "--steps" && more)
      o.steps = std::stoll(argv[++i]);
    else if (a == "--G" && more)
      o.G = std::stoll(argv[++i]);
    else if (a == "--tol" && more)
      o.tol = std::stod(argv[++i]);
    else if (a == "--save-at" && i + 2 < argc)
      o.save_at = std::stoll(argv[++i]), o.save_dir = argv[++i];
    else if (a == "--resume" && more)
      o.resume_dir = argv[++i];
    else if (a == "--start" && more)
      o.start = std::stoll(argv[++i]);
    else
      BRAID_FAIL(kInvalidArgument, "tp_worker: unknown option ", a);
  }
  return o;
}

int run(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "layers") return layers();
  if (cmd == "check-ckpt" && argc >= 4) {
    return check_checkpoint(argv[2], std::stoll(argv[3]), parse(argc, argv, 4));
  }
  BRAID_CHECK(cmd == "train", kInvalidArgument,
              "usage: tp_worker layers | train --tp T [options] | check-ckpt DIR STEPS [options]");
  return train(parse(argc, argv, 2));
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tp_worker: %s\n", e.what());
    return 1;
  }
}
