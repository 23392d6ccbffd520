// SPDX-License-Identifier: Apache-2.0
// File and folder names of a checkpoint, the same strings Hugging Face Accelerate (the
// seed) and transformers use (accelerate/utils/constants.py), so a folder braid writes is
// laid out the way their users expect and braid finds what they wrote. docs/files.md.
#pragma once

#include <string_view>

namespace braid {

// Stems: Accelerate appends "_<i>" for the i-th model / optimizer / scheduler, ".bin" or
// ".safetensors", and "_<rank>.pkl" for random states.
inline constexpr std::string_view kModelName = "pytorch_model";
inline constexpr std::string_view kOptimizerName = "optimizer";
inline constexpr std::string_view kRngStateName = "random_states";
inline constexpr std::string_view kSchedulerName = "scheduler";
inline constexpr std::string_view kScalerName = "scaler.pt";

// Whole-model weights: the pickle name (read by PyTorch users' tools) and the safetensors
// name braid writes, each with the name of its sharded index.
inline constexpr std::string_view kWeightsName = "pytorch_model.bin";
inline constexpr std::string_view kSafeWeightsName = "model.safetensors";
inline constexpr std::string_view kWeightsIndexName = "pytorch_model.bin.index.json";
inline constexpr std::string_view kSafeWeightsIndexName = "model.safetensors.index.json";

}  // namespace braid
