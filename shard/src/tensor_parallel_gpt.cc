// parallelize_gpt and parallelize_gpt_stage (tensor_parallel.h): swap the GPT's (or a pipeline
// stage's) layers for parallel ones in place, keeping every name, and slice each parameter's
// values (docs/parallelism.md, "The GPT" and "TP x PP").
#include <memory>
#include <string>

#include "braid/core/error.h"
#include "braid/shard/tensor_parallel.h"

namespace braid::shard {
namespace {

template <typename T>
T& child_as(nn::Module& m, const std::string& name) {
  auto* c = dynamic_cast<T*>(m.child(name).get());
  BRAID_CHECK(c != nullptr, kInvalidArgument, "parallelize_gpt: '", name, "' of ", m.type_name(),
              " is not the layer a GPT has there (already parallelized?)");
  return *c;
}

// A SequenceParallelLayerNorm with the same parameter handles as `ln` (GPT's LayerNorms).
std::shared_ptr<SequenceParallelLayerNorm> sequence_parallel_norm(
    nn::LayerNorm& ln, const nn::GPTConfig& cfg, std::shared_ptr<ProcessGroup> tp) {
  auto out = std::make_shared<SequenceParallelLayerNorm>(cfg.n_embd, cfg.layer_norm_epsilon,
                                                         nn::Bias::kYes, ln.weight().data().dtype(),
                                                         std::move(tp));
  out->set_parameter("weight", ln.weight());
  out->set_parameter("bias", ln.bias());
  return out;
}

// What parallelize_gpt and parallelize_gpt_stage split: blocks [first, end) of a module tree
// with the GPT's names, and optionally its embedding and its head.
struct GPTParts {
  const char* who;
  int64_t first_block = 0, end_block = 0;
  bool embedding = false, head = false;
};

std::shared_ptr<TensorParallelPlan> parallelize_parts(nn::Module& root, const nn::GPTConfig& cfg,
                                                      const GPTParts& parts_spec,
                                                      std::shared_ptr<ProcessGroup> tp,
                                                      const TensorParallelOptions& options) {
  const char* who = parts_spec.who;
  BRAID_CHECK(tp != nullptr && tp->rank() >= 0, kInvalidArgument, who,
              ": the tensor-parallel group is null or does not hold this rank");
  const int parts = tp->size(), rank = tp->rank();
  BRAID_CHECK(cfg.n_head % parts == 0, kInvalidArgument, who, ": n_head = ", cfg.n_head,
              " must be a multiple of the tensor-parallel size ", parts);
  BRAID_CHECK(cfg.inner() % parts == 0, kInvalidArgument, who, ": the MLP's inner size ",
              cfg.inner(), " must be a multiple of the tensor-parallel size ", parts);
  nn::Module& transformer = root.get_submodule("transformer");
  const bool sp = options.sequence_parallel;

  // A model built on the meta device: each module's parameters get their whole values just
  // before they are sliced (one layer at a time is whole), computed by init_weights_range on a
  // meta reference with the global shapes (the parallel model's own shapes are local).
  std::shared_ptr<nn::GPT> reference;
  if (options.init != nullptr) {
    nn::InitEmptyWeights empty;
    reference = std::make_shared<nn::GPT>(cfg);
  }
  const auto materialize = [&](nn::Module& m, const std::string& path) {
    for (auto& [name, p] : m.named_parameters()) {
      if (!p.data().device().is_meta()) continue;
      std::string full = path.empty() ? name : path + "." + name;
      BRAID_CHECK(reference != nullptr, kInvalidArgument, who, ": '", full,
                  "' is on the meta device: give TensorParallelOptions::init");
      // A pipeline stage's replica of the tied head takes wte's values.
      if (full == "lm_head.weight") full = "transformer.wte.weight";
      Tensor values = Tensor::empty(p.data().shape(), DType::kF32);
      reference->init_weights_range(*options.init, full, 0, values.numel(), values.data<float>());
      p.data() = values.to(p.data().dtype());
    }
  };

  const int64_t heads = cfg.n_head / parts;
  nn::Module* h =
      parts_spec.end_block > parts_spec.first_block ? &transformer.get_submodule("h") : nullptr;
  for (int64_t i = parts_spec.first_block; i < parts_spec.end_block; ++i) {
    nn::Module& block = *h->child(std::to_string(i));
    const std::string path = "transformer.h." + std::to_string(i);
    materialize(block, path);
    auto& attn = child_as<nn::CausalSelfAttention>(block, "attn");
    nn::Module& mlp = block.get_submodule("mlp");
    ColumnParallelOptions column{.sequence_parallel = sp};
    const RowParallelOptions row{.input_is_parallel = true, .sequence_parallel = sp};
    column.blocks = 3;  // q | k | v: this rank's heads of each
    attn.replace_module("c_attn", ColumnParallelLinear::from_linear(
                                      child_as<nn::Linear>(attn, "c_attn"), tp, column));
    attn.replace_module(
        "c_proj", RowParallelLinear::from_linear(child_as<nn::Linear>(attn, "c_proj"), tp, row));
    attn.set_local_heads(rank * heads, heads);
    column.blocks = 1;
    mlp.replace_module(
        "c_fc", ColumnParallelLinear::from_linear(child_as<nn::Linear>(mlp, "c_fc"), tp, column));
    mlp.replace_module(
        "c_proj", RowParallelLinear::from_linear(child_as<nn::Linear>(mlp, "c_proj"), tp, row));
    if (sp) {
      for (const char* ln : {"ln_1", "ln_2"}) {
        block.replace_module(ln,
                             sequence_parallel_norm(child_as<nn::LayerNorm>(block, ln), cfg, tp));
      }
      attn.replace_module("resid_dropout",
                          std::make_shared<SequenceParallelDropout>(
                              child_as<nn::Dropout>(attn, "resid_dropout").p(), tp));
      mlp.replace_module("dropout", std::make_shared<SequenceParallelDropout>(
                                        child_as<nn::Dropout>(mlp, "dropout").p(), tp));
    }
  }

  // The embedding and the head: rows of the padded vocabulary. Tied when both are here (the
  // GPT, or a one-stage pipeline); otherwise the head's weight is the pipeline's replica of
  // wte, split as wte is, so each tp rank's replica is its own rows of the first stage's wte.
  materialize(transformer, "transformer");
  const int64_t padded = pad_vocab_size(cfg.vocab_size, parts, options.vocab_divisible_by);
  std::shared_ptr<VocabParallelEmbedding> wte;
  if (parts_spec.embedding) {
    wte = VocabParallelEmbedding::from_embedding(child_as<nn::Embedding>(transformer, "wte"), tp,
                                                 {.padded_num_embeddings = padded});
    transformer.replace_module("wte", wte);
    if (sp) {
      // The embedding's sum is whole on every rank; the dropout after it keeps this rank's
      // part of the sequence, and everything up to the head's gather works on parts.
      transformer.replace_module("drop", std::make_shared<SequenceParallelDropout>(
                                             child_as<nn::Dropout>(transformer, "drop").p(), tp,
                                             /*scatter_input=*/true));
    }
  }
  if (parts_spec.head) {
    materialize(root.get_submodule("lm_head"), "lm_head");
    auto head = ColumnParallelLinear::from_linear(child_as<nn::Linear>(root, "lm_head"), tp,
                                                  {.sequence_parallel = sp, .padded_out = padded});
    if (wte) head->set_parameter("weight", wte->weight());  // tied, as in the GPT
    root.replace_module("lm_head", head);
    if (sp) {
      transformer.replace_module(
          "ln_f", sequence_parallel_norm(child_as<nn::LayerNorm>(transformer, "ln_f"), cfg, tp));
    }
  }
  return std::make_shared<TensorParallelPlan>(root, std::move(tp), sp);
}

}  // namespace

std::shared_ptr<TensorParallelPlan> parallelize_gpt(nn::GPT& gpt, std::shared_ptr<ProcessGroup> tp,
                                                    TensorParallelOptions options) {
  BRAID_CHECK(dynamic_cast<VocabParallelEmbedding*>(
                  gpt.get_submodule("transformer").child("wte").get()) == nullptr,
              kInvalidArgument, "parallelize_gpt: the GPT is parallelized already");
  return parallelize_parts(gpt, gpt.config(), {"parallelize_gpt", 0, gpt.num_blocks(), true, true},
                           std::move(tp), options);
}

std::shared_ptr<TensorParallelPlan> parallelize_gpt_stage(nn::GPTStage& stage,
                                                          std::shared_ptr<ProcessGroup> tp,
                                                          TensorParallelOptions options) {
  const nn::StageSpec& spec = stage.spec();
  bool parallel = false;
  for (auto& [name, m] : stage.named_modules()) {
    if (dynamic_cast<TensorParallelLayer*>(m) != nullptr) parallel = true;
  }
  BRAID_CHECK(!parallel, kInvalidArgument, "parallelize_gpt_stage: the stage (blocks [",
              spec.first_block, ", ", spec.end_block, ")) is parallelized already");
  return parallelize_parts(
      stage, stage.config(),
      {"parallelize_gpt_stage", spec.first_block, spec.end_block, spec.embedding, spec.head},
      std::move(tp), options);
}

}  // namespace braid::shard
