// SPDX-License-Identifier: Apache-2.0
// The causal-LM families braid implements, by transformers' model_type, for tools that take
// any of them (`braid estimate-memory`): a config.json text in, an nn::CausalLM out.
//
//   nn::InitEmptyWeights empty;  // shapes only
//   std::shared_ptr<nn::CausalLM> m = nn::causal_lm_from_hf_config(json_text);
//   std::string block = nn::block_type_name(*m);  // "GPT2Block", "LlamaDecoderLayer"
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "braid/nn/causal_lm.h"

namespace braid::nn {

// transformers' model_type of each family: {"gpt2", "llama"}.
std::vector<std::string> causal_lm_model_types();

// The model a config.json describes (its "model_type" chooses the family: GPT2LMHeadModel's
// "gpt2", LlamaForCausalLM's "llama"), built with the caller's InitEmptyWeights state.
// kInvalidArgument naming the model_type and the supported ones otherwise; the family's own
// reader checks the fields.
std::shared_ptr<CausalLM> causal_lm_from_hf_config(const std::string& json_text);

// The config.json of a few published checkpoints, by their Hub name or a short alias, for use
// without the files (no network): "gpt2" (also "openai-community/gpt2"), "gpt2-medium",
// "gpt2-large", "gpt2-xl", "meta-llama/Llama-2-7b-hf" ("llama-2-7b"), "meta-llama/Llama-2-13b-hf"
// ("llama-2-13b"), "TinyLlama/TinyLlama-1.1B-Chat-v1.0" ("tinyllama"). Empty when unknown.
std::string causal_lm_preset_config(const std::string& name);
std::vector<std::string> causal_lm_preset_names();

// The module type of the model's blocks (the list at parallel_plan().blocks): the class a
// transformer-based wrap policy names.
std::string block_type_name(const CausalLM& model);

}  // namespace braid::nn
