// parallelize_gpt (tensor_parallel.h): swaps the GPT's layers for parallel ones in place,
// keeping every name, and slices each parameter's values (docs/parallelism.md, "The GPT").
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

}  // namespace

std::shared_ptr<TensorParallelPlan> parallelize_gpt(nn::GPT& gpt, std::shared_ptr<ProcessGroup> tp,
                                                    TensorParallelOptions options) {
  BRAID_CHECK(tp != nullptr && tp->rank() >= 0, kInvalidArgument,
              "parallelize_gpt: the tensor-parallel group is null or does not hold this rank");
  const nn::GPTConfig& cfg = gpt.config();
  const int parts = tp->size(), rank = tp->rank();
  BRAID_CHECK(cfg.n_head % parts == 0, kInvalidArgument, "parallelize_gpt: n_head = ", cfg.n_head,
              " must be a multiple of the tensor-parallel size ", parts);
  BRAID_CHECK(cfg.inner() % parts == 0, kInvalidArgument, "parallelize_gpt: the MLP's inner size ",
              cfg.inner(), " must be a multiple of the tensor-parallel size ", parts);
  nn::Module& transformer = gpt.get_submodule("transformer");
  BRAID_CHECK(dynamic_cast<VocabParallelEmbedding*>(transformer.child("wte").get()) == nullptr,
              kInvalidArgument, "parallelize_gpt: the GPT is parallelized already");
  const bool sp = options.sequence_parallel;

  // A GPT built on the meta device: each module's parameters get their whole values just
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
      const std::string full = path + "." + name;
      BRAID_CHECK(reference != nullptr, kInvalidArgument, "parallelize_gpt: '", full,
                  "' is on the meta device: give TensorParallelOptions::init");
      Tensor values = Tensor::empty(p.data().shape(), DType::kF32);
      reference->init_weights_range(*options.init, full, 0, values.numel(), values.data<float>());
      p.data() = values.to(p.data().dtype());
    }
  };

  const int64_t heads = cfg.n_head / parts;
  for (int64_t i = 0; i < gpt.num_blocks(); ++i) {
    nn::Block& block = gpt.block(i);
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

  // The embedding and the tied head: rows of the padded vocabulary.
  materialize(transformer, "transformer");
  const int64_t padded = pad_vocab_size(cfg.vocab_size, parts, options.vocab_divisible_by);
  auto wte = VocabParallelEmbedding::from_embedding(child_as<nn::Embedding>(transformer, "wte"), tp,
                                                    {.padded_num_embeddings = padded});
  auto head = ColumnParallelLinear::from_linear(child_as<nn::Linear>(gpt, "lm_head"), tp,
                                                {.sequence_parallel = sp, .padded_out = padded});
  head->set_parameter("weight", wte->weight());  // tied, as in the GPT
  transformer.replace_module("wte", wte);
  gpt.replace_module("lm_head", head);
  if (sp) {
    // The embedding's sum is whole on every rank; the dropout after it keeps this rank's part
    // of the sequence, and everything up to the head's gather works on parts.
    transformer.replace_module("drop", std::make_shared<SequenceParallelDropout>(
                                           child_as<nn::Dropout>(transformer, "drop").p(), tp,
                                           /*scatter_input=*/true));
    transformer.replace_module(
        "ln_f", sequence_parallel_norm(child_as<nn::LayerNorm>(transformer, "ln_f"), cfg, tp));
  }
  return std::make_shared<TensorParallelPlan>(gpt, std::move(tp), sp);
}

}  // namespace braid::shard
