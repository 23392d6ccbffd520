// SPDX-License-Identifier: Apache-2.0
// Tensor parallelism (Megatron-LM's tensor_parallel; torch.distributed.tensor.parallel):
// layers whose weights are split over the ranks of a tp group, each with its forward's and
// backward's collectives written out; vocab-parallel cross-entropy; sequence parallelism;
// parallelize, which applies any model's nn::ParallelPlan (the whole model or a pipeline
// stage); and the plan (every split parameter's place in its global tensor) that sharded
// checkpoints and gradient clipping read (docs/parallelism.md, "Tensor parallelism").
//
//   DeviceMesh mesh(world, {2, 2}, {"dp", "tp"});
//   std::shared_ptr<nn::CausalLM> model = ...;            // any family: GPT, Llama
//   model->init_weights(gen);                             // the same whole model on every rank
//   auto plan = parallelize(*model, mesh, model->parallel_plan(), {.sequence_parallel = true});
//   ShardedModel sm(model, mesh.group("dp"), {.stage = ZeroStage::k1, .tensor_parallel = plan,
//                                           .checkpoint_group = mesh.world()});
//   VocabParallelCrossEntropy ce(mesh.group("tp"), {.vocab_size = model->vocab_size()});
//   ce.forward(sm.forward(ids), labels);                  // logits: this rank's vocab columns
//   sm.backward(ce.backward());
//
// Activations are batch-first, [batch, seq, features]. Under sequence parallelism a rank
// holds seq / tp consecutive positions of every sequence (dimension 1) outside the
// column-parallel / row-parallel pairs.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "braid/comm/process_group.h"
#include "braid/core/rng.h"
#include "braid/nn/causal_lm.h"
#include "braid/nn/layers.h"
#include "braid/nn/loss.h"
#include "braid/nn/module.h"
#include "braid/shard/device_mesh.h"
#include "braid/tensor/safetensors.h"
#include "braid/tensor/tensor.h"

namespace braid::shard {

class ShardedModel;  // fsdp.h

// ---- slices: where a rank's local tensor sits in the global one --------------------------

// Local indices [local_offset, local_offset + length) of the split dimension are the global
// indices [global_offset, global_offset + length).
struct SliceSegment {
  int64_t local_offset = 0;
  int64_t global_offset = 0;
  int64_t length = 0;
  friend bool operator==(const SliceSegment&, const SliceSegment&) = default;
};

// A local tensor equals the global one along every dimension but `dim`; along `dim` its
// indices map to global ones by `segments` (increasing local offsets); local indices in no
// segment are padding (vocabulary rows past vocab_size) and belong to no global element.
// Column-parallel c_attn has three segments: its part of q, of k and of v.
struct TensorSlice {
  Shape global_shape;
  int64_t dim = 0;
  std::vector<SliceSegment> segments;
  friend bool operator==(const TensorSlice&, const TensorSlice&) = default;
};

// Row-major elements [local_offset, local_offset + count) of the local tensor are elements
// [global_offset, global_offset + count) of the global tensor.
struct ElementRun {
  int64_t local_offset = 0;
  int64_t global_offset = 0;
  int64_t count = 0;
  friend bool operator==(const ElementRun&, const ElementRun&) = default;
};

// The global runs of the local elements [lo, hi) of a tensor of `local_shape` cut as `slice`
// says, in local order; padding elements are in none. A slice along dimension 0 gives one run
// per segment; along dimension k, one per segment and index of dimensions 0 .. k-1 (a
// column slice of a matrix: one run per row). kInvalidArgument when local_shape does not fit
// the slice (another rank, other dimensions, segments past either end).
std::vector<ElementRun> global_runs(const TensorSlice& slice, const Shape& local_shape, int64_t lo,
                                    int64_t hi);

// Rank r's part of a dimension of `size` elements split over `parts` ranks, padded to `padded`
// (a multiple of parts, >= size; 0: size rounded up to a multiple of parts). Each rank has
// padded / parts indices; in `blocks` > 1 equal blocks (q | k | v), its part of each block
// (then size % (blocks * parts) == 0 and padded == size). Local and global offsets as
// TensorSlice's segments; an empty segment is left out.
std::vector<SliceSegment> split_segments(int64_t size, int parts, int rank, int64_t padded = 0,
                                         int64_t blocks = 1);

// Megatron's vocab_size_with_padding (make_vocab_size_divisible_by): vocab_size rounded up to
// a multiple of divisible_by * tp_size.
int64_t pad_vocab_size(int64_t vocab_size, int64_t tp_size, int64_t divisible_by = 1);

// ---- layers ------------------------------------------------------------------------------

// Implemented by every parallel layer: the slices of its split parameters, by the names it
// registers them under. Its other parameters are the same on every rank of its group.
class TensorParallelLayer {
 public:
  virtual ~TensorParallelLayer() = default;
  virtual std::vector<std::pair<std::string, TensorSlice>> tp_slices() const = 0;
  virtual const std::shared_ptr<ProcessGroup>& tp_group() const = 0;
};

struct ColumnParallelOptions {
  nn::Bias bias = nn::Bias::kYes;
  nn::WeightLayout layout = nn::WeightLayout::kOutIn;
  DType dtype = DType::kF32;
  // All-gather the output features (and drop the padding): every rank gets [..., out]. Off:
  // each rank keeps its own features [..., out_features()] (what a RowParallelLinear takes;
  // out_features() is the local count, global_out_features() the whole).
  bool gather_output = false;
  // The input is this rank's part of the sequence ([B, T / tp, in], dimension 1): all-gather
  // it before the product, reduce-scatter the input gradient. Off: the input is the same on
  // every rank and its gradient is all-reduced.
  bool sequence_parallel = false;
  // The output features padded to this many (a multiple of tp >= out; 0: out rounded up to a
  // multiple of tp). Padding features have zero weights and bias (their outputs are zeros)
  // and are in no checkpoint.
  int64_t padded_out = 0;
  // The output features are this many equal blocks and each rank takes its part of every
  // block (GPT-2's packed q | k | v: 3). Requires out % (blocks * tp) == 0 and no padding.
  int64_t blocks = 1;
};

// y = x W^T + b with W split along the output features (Megatron's ColumnParallelLinear):
// rank r computes its out / tp features from the whole input. A Linear over the local
// features (either weight layout; kInOut is GPT-2's Conv1D), so its arithmetic is Linear's.
//   forward:  x (sequence_parallel: all_gather along dim 1) -> x W_r^T + b_r
//             (gather_output: all_gather along the features)
//   backward: the reverse: dx_r = dy_r W_r is a partial sum, all-reduced (sequence parallel:
//             reduce-scattered along dim 1); dW_r, db_r stay local.
// Initialized as this rank's part of nn::Linear(in, out, bias, layout, dtype, gen), so every
// rank passing the same generator state builds the parts of one whole Linear (null: the
// default generator, advanced as that whole Linear's draw advances it).
class ColumnParallelLinear : public nn::Linear, public TensorParallelLayer {
 public:
  ColumnParallelLinear(int64_t in_features, int64_t out_features, std::shared_ptr<ProcessGroup> tp,
                       ColumnParallelOptions options = {}, Generator* gen = nullptr);
  // This rank's part of a whole Linear: its weights copied; its layout, bias and dtype
  // replace those of `options`.
  static std::shared_ptr<ColumnParallelLinear> from_linear(nn::Linear& whole,
                                                           std::shared_ptr<ProcessGroup> tp,
                                                           ColumnParallelOptions options = {});
  int64_t global_out_features() const { return global_out_; }
  std::vector<std::pair<std::string, TensorSlice>> tp_slices() const override;
  const std::shared_ptr<ProcessGroup>& tp_group() const override { return tp_; }

 protected:
  Tensor forward_impl(const Tensor& x) override;
  Tensor backward_impl(const Tensor& grad_output) override;

 private:
  struct Uninit {};
  ColumnParallelLinear(int64_t in_features, int64_t out_features, std::shared_ptr<ProcessGroup> tp,
                       const ColumnParallelOptions& options, Uninit);
  void load_from(nn::Linear& whole);
  std::vector<SliceSegment> segments(int rank) const;
  std::shared_ptr<ProcessGroup> tp_;
  ColumnParallelOptions opt_;
  int64_t global_in_, global_out_;
};

struct RowParallelOptions {
  nn::Bias bias = nn::Bias::kYes;
  nn::WeightLayout layout = nn::WeightLayout::kOutIn;
  DType dtype = DType::kF32;
  // The input is already split along its features ([..., in / tp], a ColumnParallelLinear's
  // output). Off: the whole input comes in and each rank takes its features.
  bool input_is_parallel = true;
  // Reduce-scatter the output along the sequence (dim 1) instead of all-reducing it: each
  // rank gets [B, T / tp, out]. The bias is then added to a part of the sequence, so its
  // gradient is all-reduced over tp in backward.
  bool sequence_parallel = false;
};

// y = x W^T + b with W split along the input features (Megatron's RowParallelLinear): each
// rank multiplies its features, the partial products are summed over tp, then the bias (the
// same on every rank) is added once.
//   forward:  x_r W_r^T -> all_reduce (sequence_parallel: reduce_scatter along dim 1) -> + b
//   backward: dy (sequence_parallel: all_gather along dim 1) -> dx_r = dy W_r, dW_r local;
//             db = sum of dy (sequence_parallel: all-reduced over tp); input_is_parallel off:
//             dx all-gathered along the features.
class RowParallelLinear : public nn::Linear, public TensorParallelLayer {
 public:
  RowParallelLinear(int64_t in_features, int64_t out_features, std::shared_ptr<ProcessGroup> tp,
                    RowParallelOptions options = {}, Generator* gen = nullptr);
  static std::shared_ptr<RowParallelLinear> from_linear(nn::Linear& whole,
                                                        std::shared_ptr<ProcessGroup> tp,
                                                        RowParallelOptions options = {});
  int64_t global_in_features() const { return global_in_; }
  std::vector<std::pair<std::string, TensorSlice>> tp_slices() const override;
  const std::shared_ptr<ProcessGroup>& tp_group() const override { return tp_; }

 protected:
  Tensor forward_impl(const Tensor& x) override;
  Tensor backward_impl(const Tensor& grad_output) override;

 private:
  struct Uninit {};
  RowParallelLinear(int64_t in_features, int64_t out_features, std::shared_ptr<ProcessGroup> tp,
                    const RowParallelOptions& options, Uninit);
  void load_from(nn::Linear& whole);
  std::shared_ptr<ProcessGroup> tp_;
  RowParallelOptions opt_;
  int64_t global_in_;
};

struct VocabParallelOptions {
  DType dtype = DType::kF32;
  // Rows padded to this many (a multiple of tp >= num_embeddings; 0: num_embeddings rounded
  // up to a multiple of tp; pad_vocab_size gives Megatron's). Padding rows start at zero and
  // are never looked up.
  int64_t padded_num_embeddings = 0;
  // Reduce-scatter the output along the sequence (dim 1) instead of all-reducing it: each rank
  // gets [B, T / tp, dim], where sequence parallelism starts in a model with no dropout after
  // its embedding (Llama); backward all-gathers the gradient along the sequence. The ids are
  // whole [B, T] on every rank; T must be a multiple of tp.
  bool sequence_parallel = false;
};

// An Embedding whose rows (the vocabulary) are split over tp (Megatron's
// VocabParallelEmbedding): rank r holds rows [r V', (r + 1) V') of the padded table (V' =
// padded / tp; num_embeddings() is V', global_num_embeddings() the whole vocabulary). forward: ids
// in its range are looked up (shifted), the others give zero rows, and the partial outputs are
// all-reduced (sequence_parallel: reduce-scattered along dim 1); backward: each rank adds the
// gradient rows of its own ids (no collective; sequence_parallel: after an all_gather of the
// gradient along dim 1). Initialized as this rank's rows of nn::Embedding(num, dim, dtype, gen).
// from_embedding keeps the whole layer's padding_idx when this rank holds that row. ids outside
// [0, num_embeddings) throw kOutOfRange naming the id.
class VocabParallelEmbedding : public nn::Embedding, public TensorParallelLayer {
 public:
  VocabParallelEmbedding(int64_t num_embeddings, int64_t dim, std::shared_ptr<ProcessGroup> tp,
                         VocabParallelOptions options = {}, Generator* gen = nullptr);
  static std::shared_ptr<VocabParallelEmbedding> from_embedding(nn::Embedding& whole,
                                                                std::shared_ptr<ProcessGroup> tp,
                                                                VocabParallelOptions options = {});
  int64_t global_num_embeddings() const { return global_num_; }
  int64_t vocab_start() const { return vocab_start_; }  // this rank's first row
  bool sequence_parallel() const { return sequence_parallel_; }
  std::vector<std::pair<std::string, TensorSlice>> tp_slices() const override;
  const std::shared_ptr<ProcessGroup>& tp_group() const override { return tp_; }

 protected:
  Tensor forward_impl(const Tensor& ids) override;
  Tensor backward_impl(const Tensor& grad_output) override;

 private:
  struct Uninit {};
  VocabParallelEmbedding(int64_t num_embeddings, int64_t dim, std::shared_ptr<ProcessGroup> tp,
                         const VocabParallelOptions& options, Uninit);
  void load_from(nn::Embedding& whole);
  std::shared_ptr<ProcessGroup> tp_;
  int64_t global_num_, vocab_start_, padded_;
  bool sequence_parallel_;
};

// A LayerNorm in the sequence-parallel region: each rank normalizes its part of the sequence
// with the same (replicated) weight and bias, so each rank's weight / bias gradient is a
// partial sum over its tokens; backward all-reduces the gradient of this pass over tp before
// adding it (Megatron all-reduces the sequence_parallel parameters' gradients after the
// backward; here each pass does, so an outer ShardedModel sees whole gradients).
class SequenceParallelLayerNorm : public nn::LayerNorm, public TensorParallelLayer {
 public:
  SequenceParallelLayerNorm(int64_t dim, double eps, nn::Bias bias, DType dtype,
                            std::shared_ptr<ProcessGroup> tp);
  std::vector<std::pair<std::string, TensorSlice>> tp_slices() const override { return {}; }
  const std::shared_ptr<ProcessGroup>& tp_group() const override { return tp_; }

 protected:
  Tensor backward_impl(const Tensor& grad_output) override;

 private:
  std::shared_ptr<ProcessGroup> tp_;
};

// The RMSNorm counterpart (Llama's input_layernorm, post_attention_layernorm, model.norm): each
// rank normalizes its positions with the replicated weight; backward all-reduces this pass's
// weight gradient over tp before adding it, as SequenceParallelLayerNorm.
class SequenceParallelRMSNorm : public nn::RMSNorm, public TensorParallelLayer {
 public:
  SequenceParallelRMSNorm(int64_t dim, double eps, DType dtype, nn::RmsNormWeight weight_mode,
                          std::shared_ptr<ProcessGroup> tp);
  std::vector<std::pair<std::string, TensorSlice>> tp_slices() const override { return {}; }
  const std::shared_ptr<ProcessGroup>& tp_group() const override { return tp_; }

 protected:
  Tensor backward_impl(const Tensor& grad_output) override;

 private:
  std::shared_ptr<ProcessGroup> tp_;
};

// Dropout on this rank's part of the sequence ([B, T / tp, ...], dimension 1), drawing the
// mask the unsplit nn::Dropout draws for those elements: element (b, t, i) of the whole tensor
// keeps when word (b T + t) * inner + i of the generator's draw is >= p, and the generator
// advances by the whole tensor's draw on every rank (docs/parallelism.md). scatter_input: the
// input is the whole tensor, the same on every rank, and this layer keeps this rank's part
// (Megatron's scatter_to_sequence_parallel_region; backward all-gathers the gradient).
class SequenceParallelDropout : public nn::Dropout, public TensorParallelLayer {
 public:
  SequenceParallelDropout(double p, std::shared_ptr<ProcessGroup> tp, bool scatter_input = false,
                          Generator* gen = nullptr);
  std::vector<std::pair<std::string, TensorSlice>> tp_slices() const override { return {}; }
  const std::shared_ptr<ProcessGroup>& tp_group() const override { return tp_; }

 protected:
  Tensor forward_impl(const Tensor& x) override;
  Tensor backward_impl(const Tensor& grad_output) override;

 private:
  std::shared_ptr<ProcessGroup> tp_;
  bool scatter_input_;
  Generator* gen_;
};

// ---- loss ----------------------------------------------------------------------------------

struct VocabParallelCrossEntropyOptions {
  int64_t ignore_index = -100;
  nn::Reduction reduction = nn::Reduction::kMean;
  double label_smoothing = 0.0;  // in [0, 1]
  // The true vocabulary: columns of global index >= vocab_size (padding) take no part.
  // 0: every column of every rank (local columns x tp).
  int64_t vocab_size = 0;
};

// nn::CrossEntropyLoss over logits split along the vocabulary (Megatron's
// vocab_parallel_cross_entropy): rank r holds columns [r V', (r + 1) V') of [..., V]. Per row:
// the max (all_reduce max), then sum exp(z - max), the target's logit (on the rank that holds
// it) and, with label smoothing, sum z, in one all_reduce (sum) of three numbers per row; f64
// arithmetic. The same loss on every rank; backward gives this rank's columns of
// softmax - onehot (times the reduction's scale). The targets are the same on every rank.
class VocabParallelCrossEntropy : public nn::Module {
 public:
  VocabParallelCrossEntropy(std::shared_ptr<ProcessGroup> tp,
                            VocabParallelCrossEntropyOptions options = {});
  // logits [..., V'] (any float dtype), targets [...] i64 / i32. Collective over tp.
  Tensor forward(const Tensor& logits, const Tensor& targets);
  Tensor backward(const Tensor& grad_loss = {});  // d loss / d logits, [..., V'], logits' dtype

 private:
  std::shared_ptr<ProcessGroup> tp_;
  VocabParallelCrossEntropyOptions opt_;
};

// ---- the plan: every split parameter's slice, by parameter ---------------------------------

// The TP slices of a model's parameters, keyed by Parameter::id(): what ShardedModel's
// checkpoints (ShardingOptions::tensor_parallel) and the clipping below read. Built from the
// TensorParallelLayers in a module tree; a parameter in none of them is replicated over tp.
class TensorParallelPlan {
 public:
  // Collects tp_slices() of every TensorParallelLayer in root's tree; a parameter shared by
  // two layers (GPT's tied head) must have the same slice in both (kInvalidArgument).
  TensorParallelPlan(nn::Module& root, std::shared_ptr<ProcessGroup> tp,
                     bool sequence_parallel = false);
  const std::shared_ptr<ProcessGroup>& group() const { return tp_; }
  int rank() const { return tp_->rank(); }
  int size() const { return tp_->size(); }
  bool sequence_parallel() const { return sequence_parallel_; }

  // p's slice; null when p is replicated (the same on every tp rank).
  const TensorSlice* slice(const nn::Parameter& p) const;
  // Whether this rank writes p into a checkpoint: p's slice, or tp rank 0 for replicated ones.
  bool writes(const nn::Parameter& p) const;
  // p's global shape (local_shape for replicated parameters).
  Shape global_shape(const nn::Parameter& p, const Shape& local_shape) const;
  // Local elements [lo, hi) of p as runs of its global tensor (global_runs; one identity run
  // for a replicated parameter).
  std::vector<ElementRun> runs(const nn::Parameter& p, const Shape& local_shape, int64_t lo,
                               int64_t hi) const;
  size_t num_split() const { return entries_.size(); }

 private:
  struct Entry {
    nn::Parameter param;  // held, so its id() names it for the plan's lifetime
    TensorSlice slice;
  };
  std::shared_ptr<ProcessGroup> tp_;
  bool sequence_parallel_;
  std::map<const void*, Entry> entries_;
};

// ---- applying a model's plan ---------------------------------------------------------------

struct TensorParallelOptions {
  // Megatron's sequence parallelism: the plan's sequence_parallel rules apply too (norms and
  // dropouts work on seq / tp positions; T must be a multiple of tp).
  bool sequence_parallel = false;
  // Megatron's make_vocab_size_divisible_by: the vocab embedding's rows (and the head's
  // logits) are padded to pad_vocab_size(vocab, tp, vocab_divisible_by).
  int64_t vocab_divisible_by = 1;
  // For a model built under nn::InitEmptyWeights (parameters on the meta device): the whole
  // values of elements [offset, offset + count) of a parameter by its name in the model
  // (CausalLM::init_weights_range bound to a generator), called for each module just before it
  // is split, so one module at a time is whole. Empty: the parameters must hold values.
  std::function<void(const std::string& name, int64_t offset, int64_t count, float* dst)> init{};
};

// Splits a module tree over the ranks of `tp` in place, as `plan` says (every rank of tp calls
// it on the same whole tree; names, and so checkpoints, stay the model's). `root` is a whole
// model or one of its pipeline stages (nn::CausalLM::make_stage): rules that match nothing in
// it are skipped. Per matched module, by style (nn::TensorParallelStyle):
//   colwise          ColumnParallelLinear (rule.blocks: this rank's part of each block)
//   rowwise          RowParallelLinear (input parallel)
//   heads            nn::AttentionHeads::keep_heads(rank, tp)
//   vocab_embedding  VocabParallelEmbedding, rows padded to pad_vocab_size
//   vocab_head       ColumnParallelLinear over the padded vocabulary (logits [B, T, V'] for
//                    VocabParallelCrossEntropy); tied to the vocab embedding's local rows when
//                    the plan ties them and the tree holds both (list the embedding's rule
//                    first); otherwise, for a tied plan, the weight is the pipeline's replica of
//                    the embedding split as the embedding is, so tp rank r's replica is rank
//                    r's rows of the first stage's
//   with sequence_parallel, the plan's sequence rules: sequence_norm SequenceParallelLayerNorm
//   or SequenceParallelRMSNorm (same handles), sequence_dropout SequenceParallelDropout,
//   sequence_scatter a scattering SequenceParallelDropout, or on the vocab embedding its
//   reduce-scatter along the sequence (VocabParallelOptions::sequence_parallel); and the
//   column / row layers gather / reduce-scatter along the sequence.
// Each parameter keeps its values (the rank's slice of them), so a model initialized whole on
// every rank is split into the parts of that one initialization. kInvalidArgument naming the
// module: a style on the wrong kind of layer, a head count not divisible by tp, an already
// parallel tree; kNotSupported naming the model: sequence parallelism for a plan without
// sequence rules.
// Returns the slices for ShardingOptions::tensor_parallel and the clipping below. Afterwards
// the model's init_weights_range and generate() see local shapes: initialize before.
std::shared_ptr<TensorParallelPlan> parallelize(nn::Module& root, std::shared_ptr<ProcessGroup> tp,
                                                const nn::ParallelPlan& plan,
                                                TensorParallelOptions options = {});
// The same over the mesh's "tp" dimension.
std::shared_ptr<TensorParallelPlan> parallelize(nn::Module& root, DeviceMesh& mesh,
                                                const nn::ParallelPlan& plan,
                                                TensorParallelOptions options = {});

// The global tensor of a split parameter from every tp rank's local one (`slice`: the local
// tensor's place, TensorParallelPlan::slice): each rank writes its runs into zeros and the sum
// over tp assembles the whole (x + 0 is x: exact; padding dropped). Collective over tp.
Tensor gather_global(const Tensor& local, const TensorSlice& slice, ProcessGroup& tp);

// A ShardedModel's whole state dict over a TP-split model: full_state_dict() (collective over
// its group) with every split parameter gathered over the plan's group (gather_global), so
// every rank of the dp x tp mesh holds the unsplit model under its state_dict() names.
NamedTensors tensor_parallel_full_state_dict(ShardedModel& sm, const TensorParallelPlan& plan);

// ---- clipping ------------------------------------------------------------------------------

// The 2-norm of the whole (unsplit) model's gradient from every rank's local gradients:
// squares summed in f64 per parameter, split parameters' sums all-gathered over tp and added
// in rank order, replicated ones counted once. Every tp rank gets the same number.
// Undefined gradients are skipped.
double grad_norm(const std::vector<nn::Parameter>& params, const TensorParallelPlan& plan);
// Scales every gradient by min(1, max_norm / (norm + 1e-6)) (torch's clip_grad_norm_) and
// returns the norm; a non-finite norm is returned and nothing is scaled. Collective over tp.
double clip_grad_norm_(const std::vector<nn::Parameter>& params, const TensorParallelPlan& plan,
                       double max_norm);
// DP x TP: the norm of the whole model's reduced gradient of a ShardedModel over a TP-split
// model (after finish_gradients), counting each element once: sums per rank split into split
// and replicated elements, gathered over the shard group, the split ones then over tp.
// ShardedModel::clip_grad_norm_ calls this when ShardingOptions::tensor_parallel is set.
double clip_grad_norm_(ShardedModel& sm, const TensorParallelPlan& plan, double max_norm);

}  // namespace braid::shard
