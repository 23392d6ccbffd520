// make_units and the flat layout: which parameters each wrap policy groups, tied weights,
// ignored modules, padding to the norm grid, and the errors.
#include "braid/shard/units.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "braid/core/error.h"
#include "braid/nn/gpt.h"

namespace braid::shard {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

nn::GPTConfig tiny() {
  nn::GPTConfig c;
  c.vocab_size = 11;
  c.n_positions = 8;
  c.n_embd = 8;
  c.n_layer = 2;
  c.n_head = 2;
  return c;
}

std::vector<std::string> unit_names(const std::vector<Unit>& units) {
  std::vector<std::string> out;
  for (auto& u : units) out.push_back(u.name);
  return out;
}

std::vector<std::string> param_names(const Unit& u) {
  std::vector<std::string> out;
  for (auto& p : u.params) out.push_back(p.name);
  return out;
}

TEST(ShardInfo, EqualPartsAndPaddingToTheNormGrid) {
  EXPECT_EQ(padded_numel(0, 4), 0);
  EXPECT_EQ(padded_numel(1, 1), kChunk);
  EXPECT_EQ(padded_numel(300, 2), 2 * 3 * kChunk);  // 300 -> 384
  const ShardInfo s = shard_info(384, 2, 1);
  EXPECT_EQ(s.offset, 192);
  EXPECT_EQ(s.count, 192);
  EXPECT_THAT([] { shard_info(10, 3, 0); },
              ::testing::ThrowsMessage<Error>(HasSubstr("do not split evenly")));
  EXPECT_THAT([] { shard_info(12, 3, 3); },
              ::testing::ThrowsMessage<Error>(HasSubstr("outside a world of 3")));
}

TEST(MakeUnits, TransformerBasedWrapsEachBlockAndTheRootTakesTheRest) {
  nn::GPT gpt(tiny());
  auto units = make_units(
      gpt, {.kind = WrapKind::kTransformerBased, .transformer_cls_names_to_wrap = {"GPT2Block"}},
      4);
  EXPECT_THAT(unit_names(units), ElementsAre("transformer.h.0", "transformer.h.1", ""));
  EXPECT_EQ(units[0].params.size(), 12u);
  EXPECT_EQ(units[0].params.front().name, "transformer.h.0.ln_1.weight");
  // The tied head is in the root once, under the embedding's name.
  EXPECT_THAT(param_names(units[2]),
              ElementsAre("transformer.wte.weight", "transformer.wpe.weight",
                          "transformer.ln_f.weight", "transformer.ln_f.bias"));
  int64_t total = 0;
  for (auto& u : units) {
    int64_t offset = 0;
    for (auto& p : u.params) {
      EXPECT_EQ(p.offset, offset) << p.name;
      offset += p.numel;
    }
    EXPECT_EQ(u.numel, offset);
    EXPECT_EQ(u.padded % (kChunk * 4), 0);
    EXPECT_GE(u.padded, u.numel);
    EXPECT_EQ(u.layer, &dynamic_cast<nn::Layer&>(gpt.get_submodule(u.name)));
    total += u.numel;
  }
  EXPECT_EQ(total, gpt.num_parameters());
}

TEST(MakeUnits, NoWrapIsOneUnitAndSizeBasedSkipsContainers) {
  nn::GPT gpt(tiny());
  auto one = make_units(gpt, {}, 2);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].numel, gpt.num_parameters());

  // d = 8: an MLP holds 288 + 264 = 552 >= 500 parameters and is wrapped; an attention (288)
  // and the rest of a block (320 with its norms) are not; "h" is a ModuleList and
  // "transformer" a plain Module, neither a Layer, so what is left (808) stays in the root.
  auto sized = make_units(gpt, {.kind = WrapKind::kSizeBased, .min_num_params = 500}, 2);
  EXPECT_THAT(unit_names(sized), ElementsAre("transformer.h.0.mlp", "transformer.h.1.mlp", ""));
  EXPECT_EQ(sized[0].numel, 552);
  EXPECT_EQ(sized.back().numel, gpt.num_parameters() - 2 * 552);
}

TEST(MakeUnits, IgnoredModulesAreLeftOutAndBadPoliciesAreErrors) {
  nn::GPT gpt(tiny());
  auto units = make_units(gpt,
                          {.kind = WrapKind::kTransformerBased,
                           .transformer_cls_names_to_wrap = {"GPT2Block"},
                           .ignored_modules = {"transformer.h.1"}},
                          1);
  EXPECT_THAT(unit_names(units), ElementsAre("transformer.h.0", ""));
  EXPECT_THROW(make_units(gpt, {.ignored_modules = {"transformer.nope"}}, 1), Error);
  EXPECT_THAT(
      [&] {
        make_units(
            gpt,
            {.kind = WrapKind::kTransformerBased, .transformer_cls_names_to_wrap = {"ModuleList"}},
            1);
      },
      ::testing::ThrowsMessage<Error>(HasSubstr("is not a Layer")));
  EXPECT_THAT([] { parse_wrap_kind("by_size"); },
              ::testing::ThrowsMessage<Error>(
                  HasSubstr("transformer_based_wrap, size_based_wrap, no_wrap")));
  EXPECT_EQ(parse_wrap_kind("size_based_wrap"), WrapKind::kSizeBased);
}

// A weight shared by two blocks goes to the root, which is gathered for the whole pass.
TEST(MakeUnits, AWeightTiedAcrossUnitsGoesToTheRoot) {
  nn::GPT gpt(tiny());
  auto& b0 = gpt.get_submodule("transformer.h.0.mlp.c_fc");
  auto& b1 = gpt.get_submodule("transformer.h.1.mlp.c_fc");
  b1.set_parameter("weight", b0.param("weight"));
  auto units = make_units(
      gpt, {.kind = WrapKind::kTransformerBased, .transformer_cls_names_to_wrap = {"GPT2Block"}},
      2);
  for (size_t u = 0; u + 1 < units.size(); ++u) {
    for (auto& p : units[u].params) EXPECT_NE(p.name, "transformer.h.0.mlp.c_fc.weight");
  }
  const auto root = param_names(units.back());
  EXPECT_NE(std::find(root.begin(), root.end(), "transformer.h.0.mlp.c_fc.weight"), root.end());
}

}  // namespace
}  // namespace braid::shard
