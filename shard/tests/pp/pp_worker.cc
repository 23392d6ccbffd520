// pp_worker: trains a small GPT with pipeline parallelism (and data parallelism over each
// stage) under braid launch and writes each stage's final parameters, so run_pp.sh can compare
// schedules and layouts with single-process training.
//
//   pp_worker train <gpipe|1f1b|interleaved|plain|fold> <pp> <M> <steps> <out>
//             [--dp D] [--v V] [--zero Z] [--wrap transformer|none] [--tied per-mb|once]
//             [--blocks a,b,...] [--bf16] [--checkpointing]
//             [--layers-per-virtual-stage L] [--kill-rank R --kill-after F] [--tp T [--sp]]
//   pp_worker compare <a> <b> <exact|TOL>
//
// World size = pp x dp, laid out as the mesh (dp, pp). Global batch: G = M x dp micro-batches
// of 2 sequences of 12 tokens, a pure function of (step, index); replica r's j-th micro-batch is
// global j dp + r (Note [Deterministic reduction], fsdp.h). "plain": one process, ordinary
// gradient accumulation over the G micro-batches (`p.grad += g`), then scaled by 1 / G.
// "fold": one process through a ShardedModel (stage 0), whose reduction folds whole
// micro-batch gradients: the reference of data parallelism. Each pp rank of dp replica 0
// writes <out>.pp<rank>; compare merges <a>.pp* and <b>.pp* and compares tensor by tensor
// (TOL bounds max |a - b| / max |b| over the whole model).
// --bf16: every forward and backward under bf16 autocast; --checkpointing: every block
// recomputes its forward in backward (GPTConfig::activation_checkpointing).
// --tp T: tensor parallelism inside each stage (world = dp x pp x tp, mesh (dp, pp, tp); the
// stages split by parallelize, the loss vocab-parallel; --sp: sequence parallelism);
// each pp rank of dp replica 0 and tp rank 0 writes the stage's global tensors
// (CausalLMPipeline::global_state_dict), compared with a tolerance: TP changes summation order.
// --kill-rank R --kill-after F: world rank R SIGKILLs itself after F forwards of its first
// chunk (mid-step); every rank then ignores the launcher's SIGTERM so the survivors report the
// error they get (the launcher SIGKILLs them after its grace period).
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "braid/amp/autocast.h"
#include "braid/comm/process_group.h"
#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "braid/nn/gpt.h"
#include "braid/nn/optim.h"
#include "braid/shard/device_mesh.h"
#include "braid/shard/fsdp.h"
#include "braid/shard/pipeline.h"
#include "braid/tensor/ops.h"
#include "braid/tensor/safetensors.h"

namespace {

using namespace braid;

bool g_checkpointing = false, g_bf16 = false;

nn::GPTConfig config() {
  nn::GPTConfig c;
  c.activation_checkpointing = g_checkpointing;
  c.vocab_size = 37;
  c.n_positions = 16;
  c.n_embd = 24;
  c.n_layer = 8;
  c.n_head = 4;
  c.embd_pdrop = c.attn_pdrop = c.resid_pdrop = 0.0;
  return c;
}

std::pair<Tensor, Tensor> micro_batch(int64_t step, int64_t m) {
  Generator gen(1000003 * static_cast<uint64_t>(step) + static_cast<uint64_t>(m));
  Tensor data = Tensor::empty({2, 13}, DType::kI64);
  gen.fill_randint(data.data<int64_t>(), data.numel(), 0, 37);
  return {data.narrow(1, 0, 12).contiguous(), data.narrow(1, 1, 12).contiguous()};
}

const nn::OptimizerOptions kAdam{.lr = 1e-2, .weight_decay = 0.1};

amp::AutocastScope autocast() {
  return g_bf16 ? amp::AutocastScope(DType::kBF16) : amp::AutocastScope::noop();
}

struct Opts {
  std::string mode, out;
  int64_t pp = 1, M = 1, steps = 1, dp = 1, v = 1, zero = 0, layers_per_virtual = 0, tp = 1;
  bool sp = false;
  std::string wrap = "transformer";  // the ShardedModels' policy: transformer (GPT2Block) | none
  shard::TiedGradSync tied = shard::TiedGradSync::kPerMicroBatch;
  std::vector<int64_t> blocks;
  int kill_rank = -1;
  int64_t kill_after = 0;
};

void save(const std::string& path, const NamedTensors& state) {
  save_safetensors(path, state);
}

int plain(const Opts& o) {
  auto gpt = std::make_shared<nn::GPT>(config());
  Generator init(42);
  gpt->init_weights(init);
  nn::AdamW opt(gpt->parameters(), kAdam);
  nn::CrossEntropyLoss ce;
  const int64_t G = o.M * o.dp;
  for (int64_t s = 0; s < o.steps; ++s) {
    double loss = 0;
    for (int64_t g = 0; g < G; ++g) {
      auto [x, y] = micro_batch(s, g);
      auto scope = autocast();
      loss += ce.forward(gpt->forward(x), y).item();
      gpt->backward(ce.backward());
    }
    double squares = 0;  // the whole gradient's 2-norm, for Pipeline::clip_grad_norm_
    for (auto& p : gpt->parameters()) {
      p.grad() = scale(p.grad(), 1.0 / static_cast<double>(G));
      const Tensor g = p.grad().to(DType::kF64).contiguous();
      for (int64_t i = 0; i < g.numel(); ++i) squares += g.data<double>()[i] * g.data<double>()[i];
    }
    opt.step();
    opt.zero_grad();
    std::printf("step %lld loss %.6f norm %.9g\n", static_cast<long long>(s),
                loss / static_cast<double>(G), std::sqrt(squares));
  }
  NamedTensors state;
  for (auto& [n, p] : gpt->named_parameters()) state.emplace_back(n, p.data());
  save(o.out + ".pp0", state);
  return 0;
}

int fold(const Opts& o) {
  auto gpt = std::make_shared<nn::GPT>(config());
  Generator init(42);
  gpt->init_weights(init);
  auto pg = ProcessGroup::create({});
  BRAID_CHECK(pg->size() == 1, kInvalidArgument, "pp_worker fold runs on one rank");
  shard::ShardedModel sm(gpt, pg, {.stage = shard::ZeroStage::k0});
  nn::AdamW opt(sm.optimizer_parameters(), kAdam);
  nn::CrossEntropyLoss ce;
  const int64_t G = o.M * o.dp;
  for (int64_t s = 0; s < o.steps; ++s) {
    for (int64_t g = 0; g < G; ++g) {
      auto [x, y] = micro_batch(s, g);
      auto scope = autocast();
      ce.forward(sm.forward(x), y);
      sm.backward(ce.backward());
    }
    sm.finish_gradients(1.0 / static_cast<double>(G));
    opt.step();
    opt.zero_grad();
    sm.after_step();
  }
  NamedTensors state;
  for (auto& [n, t] : sm.full_state_dict()) {
    if (n != "lm_head.weight") state.emplace_back(n, t);  // tied: once, as wte
  }
  save(o.out + ".pp0", state);
  return 0;
}

int pipelined(const Opts& o) {
  auto world = ProcessGroup::create({});
  BRAID_CHECK(world->size() == o.pp * o.dp * o.tp, kInvalidArgument, "pp_worker: world size ",
              world->size(), " is not pp ", o.pp, " x dp ", o.dp, " x tp ", o.tp);
  if (o.kill_rank >= 0) std::signal(SIGTERM, SIG_IGN);
  shard::DeviceMesh mesh = o.tp > 1
                               ? shard::DeviceMesh(world, {o.dp, o.pp, o.tp}, {"dp", "pp", "tp"})
                               : shard::DeviceMesh(world, {o.dp, o.pp}, {"dp", "pp"});
  shard::PipelineOptions opt;
  opt.schedule = shard::parse_pipeline_schedule(o.mode);
  opt.num_micro_batches = o.M;
  opt.virtual_stages = o.v;
  opt.num_layers_per_virtual_pipeline_stage = o.layers_per_virtual;
  opt.blocks_per_stage = o.blocks;
  opt.tied_grad_sync = o.tied;
  if (o.tp > 1) {
    opt.tp_group = mesh.group("tp");
    opt.tensor_parallel.sequence_parallel = o.sp;
  }
  if (o.dp > 1) {
    opt.dp_group = mesh.group("dp");
    // Checkpoints of a TP-split chunk are written by the chunk's dp x tp ranks (not used here).
    if (o.tp > 1) opt.sharding.checkpoint_group = mesh.flatten({"dp", "tp"}, "dp_tp");
    opt.sharding.stage = shard::zero_stage_from_int(o.zero);
    if (o.wrap == "transformer") {
      opt.sharding.wrap = {.kind = shard::WrapKind::kTransformerBased,
                           .transformer_cls_names_to_wrap = {"GPT2Block"}};
    }
  }
  shard::CausalLMPipeline pipe(nn::make_meta<nn::GPT>(config()), mesh.group("pp"), opt);
  pipe.init_weights(Generator(42));
  const int rank = world->rank();
  if (rank == 0) {
    std::printf("pipeline: %s\n", shard::format_pipeline_order(pipe.pipeline().order()).c_str());
  }
  int64_t forwards = 0;
  if (rank == o.kill_rank) {
    nn::ModuleHooks hooks;
    hooks.post_forward = [&](nn::Module&) {
      if (++forwards == o.kill_after) {
        std::fprintf(stderr, "rank %d: SIGKILL after %lld forwards\n", rank,
                     static_cast<long long>(forwards));
        std::fflush(stderr);
        std::raise(SIGKILL);
      }
    };
    pipe.stages()[0]->set_hooks(hooks);
  }
  nn::AdamW adam(pipe.parameters(), kAdam);
  const int64_t r = mesh.local_rank("dp");
  for (int64_t s = 0; s < o.steps; ++s) {
    std::vector<Tensor> xs, ys;
    for (int64_t j = 0; j < o.M; ++j) {
      auto [x, y] = micro_batch(s, j * o.dp + r);
      xs.push_back(x);
      ys.push_back(y);
    }
    double mean_loss = 0;
    {
      auto scope = autocast();  // the runtime computes on this thread
      mean_loss = pipe.step(xs, ys);
    }
    // The global norm (an infinite max_norm scales nothing), against the reference's.
    const double norm = pipe.pipeline().clip_grad_norm_(std::numeric_limits<double>::infinity());
    Tensor loss = Tensor::full({1}, mean_loss, DType::kF64);
    adam.step();
    adam.zero_grad();
    pipe.after_step();
    if (o.dp > 1) mesh.group("dp")->all_reduce(loss);
    if (rank == 0) {
      std::printf("step %lld loss %.6f norm %.9g\n", static_cast<long long>(s),
                  loss.item() / static_cast<double>(o.dp), norm);
    }
  }
  const NamedTensors state = pipe.global_state_dict();  // collective over dp and tp
  const bool writer = r == 0 && (o.tp == 1 || mesh.local_rank("tp") == 0);
  if (writer) save(o.out + ".pp" + std::to_string(mesh.local_rank("pp")), state);
  world->barrier();
  return 0;
}

std::map<std::string, Tensor> load_parts(const std::string& prefix) {
  const std::filesystem::path p(prefix);
  std::map<std::string, Tensor> out;
  for (auto& entry : std::filesystem::directory_iterator(p.parent_path())) {
    const std::string name = entry.path().filename().string();
    const std::string stem = p.filename().string() + ".pp";
    if (name.rfind(stem, 0) != 0) continue;
    for (auto& [n, t] : load_safetensors(entry.path().string())) {
      BRAID_CHECK(!out.count(n), kInvalidArgument, n, " is in two parts of ", prefix);
      out[n] = t;
    }
  }
  BRAID_CHECK(!out.empty(), kInvalidArgument, "no ", prefix, ".pp* files");
  return out;
}

int compare(const std::string& a, const std::string& b, const std::string& mode) {
  const auto A = load_parts(a), B = load_parts(b);
  BRAID_CHECK(A.size() == B.size(), kInvalidArgument, a, " has ", A.size(), " tensors, ", b,
              " has ", B.size());
  double worst = 0, scale_all = 1e-30;
  std::string worst_name;
  for (auto& [n, t] : A) {
    auto it = B.find(n);
    BRAID_CHECK(it != B.end(), kInvalidArgument, b, " lacks ", n);
    if (mode == "exact") {
      BRAID_CHECK(t.nbytes() == it->second.nbytes() &&
                      std::memcmp(t.data_ptr(), it->second.data_ptr(), t.nbytes()) == 0,
                  kInvalidArgument, n, " differs between ", a, " and ", b,
                  " (expected the same bits)");
      continue;
    }
    const double d = amax(abs(sub(t, it->second))).item();
    scale_all = std::max(scale_all, amax(abs(it->second)).item());
    if (d > worst) worst = d, worst_name = n;
  }
  if (mode != "exact") {
    worst /= scale_all;
    std::printf("largest normalized difference %.3g (%s)\n", worst, worst_name.c_str());
    BRAID_CHECK(worst <= std::stod(mode), kInvalidArgument, "normalized difference ", worst, " of ",
                worst_name, " exceeds ", mode);
  }
  std::printf("%s and %s agree (%s)\n", a.c_str(), b.c_str(), mode.c_str());
  return 0;
}

std::vector<int64_t> parse_list(const std::string& text) {
  std::vector<int64_t> out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t comma = text.find(',', pos);
    out.push_back(std::stoll(text.substr(pos, comma - pos)));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

int run(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "compare" && argc == 5) return compare(argv[2], argv[3], argv[4]);
  BRAID_CHECK(cmd == "train" && argc >= 7, kInvalidArgument,
              "usage: pp_worker train <gpipe|1f1b|interleaved|plain|fold> <pp> <M> <steps> <out> "
              "[options] | compare A B MODE");
  Opts o;
  o.mode = argv[2];
  o.pp = std::stoll(argv[3]);
  o.M = std::stoll(argv[4]);
  o.steps = std::stoll(argv[5]);
  o.out = argv[6];
  for (int i = 7; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--dp" && has_value) {
      o.dp = std::stoll(argv[++i]);
    } else if (a == "--v" && has_value) {
      o.v = std::stoll(argv[++i]);
    } else if (a == "--zero" && has_value) {
      o.zero = std::stoll(argv[++i]);
    } else if (a == "--tied" && has_value) {
      const std::string t = argv[++i];
      BRAID_CHECK(t == "per-mb" || t == "once", kInvalidArgument, "--tied per-mb|once, got ", t);
      o.tied =
          t == "once" ? shard::TiedGradSync::kOncePerStep : shard::TiedGradSync::kPerMicroBatch;
    } else if (a == "--tp" && has_value) {
      o.tp = std::stoll(argv[++i]);
    } else if (a == "--sp") {
      o.sp = true;
    } else if (a == "--bf16") {
      g_bf16 = true;
    } else if (a == "--checkpointing") {
      g_checkpointing = true;
    } else if (a == "--wrap" && has_value) {
      o.wrap = argv[++i];
    } else if (a == "--blocks" && has_value) {
      o.blocks = parse_list(argv[++i]);
    } else if (a == "--layers-per-virtual-stage" && has_value) {
      o.layers_per_virtual = std::stoll(argv[++i]);
    } else if (a == "--kill-rank" && has_value) {
      o.kill_rank = std::stoi(argv[++i]);
    } else if (a == "--kill-after" && has_value) {
      o.kill_after = std::stoll(argv[++i]);
    } else {
      BRAID_FAIL(kInvalidArgument, "pp_worker: unknown option ", a);
    }
  }
  if (o.mode == "plain") return plain(o);
  if (o.mode == "fold") return fold(o);
  return pipelined(o);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pp_worker: %s\n", e.what());
    return 1;
  }
}
