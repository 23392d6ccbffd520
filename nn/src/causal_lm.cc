// The names of the tensor-parallel styles (causal_lm.h), for error messages and docs.
#include "braid/nn/causal_lm.h"

#include <utility>

#include "braid/core/error.h"

namespace braid::nn {

std::string_view style_name(TensorParallelStyle style) {
  switch (style) {
    case TensorParallelStyle::kColumnwise:
      return "colwise";
    case TensorParallelStyle::kRowwise:
      return "rowwise";
    case TensorParallelStyle::kVocabEmbedding:
      return "vocab_embedding";
    case TensorParallelStyle::kVocabHead:
      return "vocab_head";
    case TensorParallelStyle::kHeads:
      return "heads";
    case TensorParallelStyle::kSequenceNorm:
      return "sequence_norm";
    case TensorParallelStyle::kSequenceDropout:
      return "sequence_dropout";
    case TensorParallelStyle::kSequenceScatter:
      return "sequence_scatter";
  }
  return "unknown";
}

ParamInit weights_init(std::shared_ptr<const CausalLM> reference, const Generator& gen) {
  BRAID_CHECK(reference != nullptr, kInvalidArgument, "weights_init: no reference model");
  // init_weights_range reads the generator's seed and offset only (the Philox stream is
  // positional): keep those, as a Generator is not copyable.
  return [reference = std::move(reference), seed = gen.seed(), at = gen.offset()](
             const std::string& name, int64_t offset, int64_t count, float* dst) {
    Generator g(seed);
    g.set_offset(at);
    reference->init_weights_range(g, name, offset, count, dst);
  };
}

}  // namespace braid::nn
