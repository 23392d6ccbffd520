// SPDX-License-Identifier: Apache-2.0
// A causal language model as the parallelism layers see it, whatever its family: token ids in,
// logits out; an embedding part, a list of blocks and a head part; and a ParallelPlan saying
// how each of its modules splits over tensor-parallel ranks and where pipeline stages may be
// cut (docs/parallelism.md, "Any model"). shard/ and accel/ work through this interface and
// never name a family: each family in nn/ (GPT, Llama) supplies its plan, as Hugging Face
// models carry a base_model_tp_plan of styles by module path and torch's parallelize_module
// takes one.
//
//   const nn::ParallelPlan& plan = model->parallel_plan();
//   auto tp_plan = shard::parallelize(*model, mesh.group("tp"), plan, {.init = ...});
//   auto stage = model->make_stage({.first_block = 0, .end_block = 6, .embedding = true});
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>
#include "braid/core/rng.h"
#include "braid/nn/module.h"
#include "braid/tensor/tensor.h"

namespace braid::nn {

// What tensor parallelism does to one module (torch's ParallelStyle, HF's tp_plan strings).
// The styles name the layer kinds of shard/tensor_parallel.h, which shard::parallelize swaps in.
enum class TensorParallelStyle : uint8_t {
  kColumnwise,      // a Linear split along its output features (ColumnParallelLinear)
  kRowwise,         // a Linear split along its input features, its input split already
                    // (RowParallelLinear): the partial products are summed over tp
  kVocabEmbedding,  // an Embedding split along its rows, the vocabulary padded
                    // (VocabParallelEmbedding)
  kVocabHead,       // the Linear giving the logits, split along the padded vocabulary; tied to
                    // the vocab embedding's local rows when the model ties them
  kHeads,           // an attention module (AttentionHeads) that keeps this rank's heads
  // Sequence parallelism only (ParallelPlan::sequence_parallel): the module works on this
  // rank's positions of the sequence.
  kSequenceNorm,     // a LayerNorm or RMSNorm (its weight gradient summed over tp)
  kSequenceDropout,  // a Dropout drawing the unsplit mask's elements for those positions
  kSequenceScatter,  // where the sequence is split: a Dropout keeps this rank's positions of its
                     // whole input; the vocab embedding (kVocabEmbedding) reduce-scatters its
                     // partial rows along the sequence instead of all-reducing them (a model
                     // without an embedding dropout, as Llama)
};
// "colwise", "rowwise", "vocab_embedding", "vocab_head", "heads", "sequence_norm",
// "sequence_dropout", "sequence_scatter".
std::string_view style_name(TensorParallelStyle style);

struct TensorParallelRule {
  // A dotted module path; "*" stands for any one name ("transformer.h.*.attn.c_attn"). A rule
  // that matches nothing in the tree it is applied to is skipped (a pipeline stage holds only
  // some blocks), so a plan serves the whole model and each of its stages.
  std::string path;
  TensorParallelStyle style = TensorParallelStyle::kColumnwise;
  // kColumnwise: the output features are this many equal blocks and each rank takes its part
  // of every block (GPT-2's packed q | k | v: 3).
  int64_t blocks = 1;
};

// How a model splits, with no model names in the code that reads it (shard::parallelize,
// shard::CausalLMPipeline, the Accelerator).
struct ParallelPlan {
  std::vector<TensorParallelRule> tensor_parallel;  // applied in order
  // Applied besides tensor_parallel under sequence parallelism (Megatron's): the modules
  // between the column / row pairs that then work on seq / tp positions. Empty: the family
  // has no sequence-parallel form, and asking for one is an error naming it.
  std::vector<TensorParallelRule> sequence_parallel;
  // Pipeline cut points: the model is an embedding part, the blocks of the module list at
  // this path, and a head part; a stage holds consecutive blocks (StageSpec).
  std::string blocks;
  // The tied embedding / head pair (module paths whose "weight" is one tensor, the embedding
  // owning it); both empty when the head has its own weight.
  std::string tied_embedding, tied_head;
  // Optional activation-size hint for pipeline partitioning and memory planning: bytes one
  // token keeps alive through a block's forward for its backward (0: unknown).
  int64_t activation_bytes_per_token = 0;
  bool tied() const { return !tied_embedding.empty(); }
};

// The part of a model one pipeline stage holds.
struct StageSpec {
  int64_t first_block = 0;  // blocks [first_block, end_block)
  int64_t end_block = 0;
  bool embedding = false;  // the stage's input is token ids
  bool head = false;       // the stage's output is logits
  friend bool operator==(const StageSpec&, const StageSpec&) = default;
};

// Implemented by an attention layer that tensor parallelism splits by heads (the kHeads style).
class AttentionHeads {
 public:
  virtual ~AttentionHeads() = default;
  // Keeps rank's share of the heads out of `parts` equal ones (query heads and, with grouped
  // keys and values, key / value heads alike). kInvalidArgument when a head count is not a
  // multiple of parts.
  virtual void keep_heads(int rank, int parts) = 0;
};

// A pipeline stage of a CausalLM: the model's layers for its spec, under the model's parameter
// names, so a model state dict loads into it (non-strict: it holds only its part). forward(ids
// [B, T]) or forward(h [B, T, d]) -> h or logits; backward returns the input's gradient
// (undefined for ids). A stage with the head but not a tied embedding holds the head's weight
// under the head's name: for a tied model a replica of the embedding that the pipeline keeps
// equal to the first stage's (docs/parallelism.md, "Tied weights").
class CausalLMStage : public Layer {
 public:
  using Layer::Layer;
  virtual const StageSpec& spec() const = 0;
  // The values the model's init_weights(gen) gives these parameters (a tied replica: the
  // embedding's), without advancing `gen` or the default generator. f32 parameters of the
  // whole (unsplit) shapes: initialize before tensor parallelism splits the stage.
  virtual void init_weights(const Generator& gen) = 0;
};

// ids [B, T] (i64 or i32) -> logits [B, T, vocab_size()].
class CausalLM : public Layer {
 public:
  using Layer::Layer;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t num_blocks() const = 0;
  // The longest sequence it takes (n_positions, max_position_embeddings).
  virtual int64_t max_positions() const = 0;
  // transformers' model_type: "gpt2", "llama".
  virtual std::string model_type() const = 0;
  virtual const ParallelPlan& parallel_plan() const = 0;
  // The family's initialization, drawn from `gen`.
  virtual void init_weights(Generator& gen) = 0;
  // What init_weights(gen) writes into elements [offset, offset + count) of the f32 parameter
  // `name` (row-major), computed for that range alone; `gen` is not advanced. Lets each rank
  // fill only its shards or slices of a model built on the meta device. kOutOfRange for an
  // unknown name or a range outside the parameter.
  virtual void init_weights_range(const Generator& gen, const std::string& name, int64_t offset,
                                  int64_t count, float* dst) const = 0;
  // A pipeline stage of this model (its configuration, fresh layers): spec's blocks must lie in
  // [0, num_blocks()) and the stage must hold something (kInvalidArgument).
  virtual std::shared_ptr<CausalLMStage> make_stage(const StageSpec& spec) const = 0;
  // transformers' config.json for this model (save_model writes it beside the weights).
  virtual std::string hf_config_json() const = 0;
  // Appends max_new_tokens tokens to ids [1, T] (the context cropped to the model's positions):
  // softmax(logits / temperature) over the top_k tokens (0: all) sampled with `gen`;
  // temperature 0 takes the argmax. Under NoGradGuard in eval mode, the training mode restored
  // afterwards. Returns [1, T + max_new_tokens] i64.
  virtual Tensor generate(const Tensor& ids, int64_t max_new_tokens, double temperature,
                          int64_t top_k, Generator& gen) = 0;
};

// The whole values of elements [offset, offset + count) of a parameter, by its name in the
// model (ShardingOptions::param_init's and TensorParallelOptions::init's signature).
using ParamInit =
    std::function<void(const std::string& name, int64_t offset, int64_t count, float* dst)>;
// reference->init_weights_range bound to `gen`'s seed and offset (the state init_weights would
// start from; the Philox stream is positional, so that is all a range's values depend on).
// `reference` keeps the whole (unsplit) shapes: a model built on the meta device (make_meta), not
// the one being split.
ParamInit weights_init(std::shared_ptr<const CausalLM> reference, const Generator& gen);

// A model built on the meta device (InitEmptyWeights: no memory) without advancing the default
// generator, which the layers' constructors draw from: a prototype for a pipeline or a
// reference for weights_init.
template <typename M, typename... Args>
std::shared_ptr<M> make_meta(Args&&... args) {
  Generator& dflt = default_generator(kCPU);
  const std::vector<uint8_t> state = dflt.get_state();
  std::shared_ptr<M> out;
  {
    InitEmptyWeights empty;
    out = std::make_shared<M>(std::forward<Args>(args)...);
  }
  dflt.set_state(state);
  return out;
}

}  // namespace braid::nn
