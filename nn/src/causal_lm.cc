// The names of the tensor-parallel styles (causal_lm.h), for error messages and docs.
#include "braid/nn/causal_lm.h"

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

}  // namespace braid::nn
