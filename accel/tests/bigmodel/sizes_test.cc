// compute_module_sizes, get_max_layer_size, calculate_maximum_sizes,
// get_module_children_bottom_up and extract_model_from_parallel against sizes worked out by hand
// (bigmodel_test_util.h) on a small GPT and on toy modules.
#include <gtest/gtest.h>

#include "bigmodel_test_util.h"
#include "braid/accel/big_model.h"
#include "braid/comm/process_group.h"
#include "braid/comm/store.h"
#include "braid/shard/fsdp.h"

namespace braid::accel {
namespace {

using testing::meta_gpt;
using testing::Toy;

TEST(ComputeModuleSizes, SmallGptByHand) {
  auto gpt = meta_gpt();  // sizes need no data
  const ModuleSizes s = compute_module_sizes(*gpt);
  EXPECT_EQ(s.at(""), 7808);
  EXPECT_EQ(s.at("transformer"), 7808);
  EXPECT_EQ(s.at("transformer.wte"), 512);
  EXPECT_EQ(s.at("transformer.wte.weight"), 512);
  EXPECT_EQ(s.at("transformer.wpe"), 256);
  EXPECT_EQ(s.at("transformer.h"), 6976);
  EXPECT_EQ(s.at("transformer.h.0"), 3488);
  EXPECT_EQ(s.at("transformer.h.1"), 3488);
  EXPECT_EQ(s.at("transformer.h.0.ln_1"), 64);
  EXPECT_EQ(s.at("transformer.h.0.attn"), 864 + 288);
  EXPECT_EQ(s.at("transformer.h.0.attn.c_attn"), 864);
  EXPECT_EQ(s.at("transformer.h.0.attn.c_attn.weight"), 768);
  EXPECT_EQ(s.at("transformer.h.0.attn.c_attn.bias"), 96);
  EXPECT_EQ(s.at("transformer.h.1.mlp"), 1152 + 1056);
  EXPECT_EQ(s.at("transformer.h.1.mlp.c_proj.weight"), 1024);
  EXPECT_EQ(s.at("transformer.ln_f"), 64);
  // Modules without tensors are listed with 0; the tied head's weight is counted under wte.
  EXPECT_EQ(s.at("transformer.drop"), 0);
  EXPECT_EQ(s.at("transformer.h.0.attn.attn_dropout"), 0);
  EXPECT_EQ(s.at("lm_head"), 0);
  EXPECT_EQ(s.count("lm_head.weight"), 0u);
  for (auto& [path, m] : gpt->named_modules()) EXPECT_EQ(s.count(path), 1u) << path;
}

TEST(ComputeModuleSizes, DtypeAndSpecialDtypes) {
  auto gpt = meta_gpt();
  // A narrower dtype halves every floating tensor; a wider one changes nothing (min of both).
  EXPECT_EQ(compute_module_sizes(*gpt, DType::kBF16).at(""), 3904);
  EXPECT_EQ(compute_module_sizes(*gpt, DType::kF64).at(""), 7808);
  EXPECT_EQ(compute_module_sizes(*gpt, DType::kF8E4M3).at("transformer.h.0"), 872);
  // A special dtype applies to its tensor whatever its width.
  const ModuleSizes s =
      compute_module_sizes(*gpt, DType::kBF16, {{"transformer.wte.weight", DType::kF64}});
  EXPECT_EQ(s.at("transformer.wte"), 1024);
  EXPECT_EQ(s.at(""), 3904 - 256 + 1024);
}

TEST(ComputeModuleSizes, BuffersAndIntegerTensors) {
  nn::Module root("Root");
  auto norm = root.register_module(
      "norm",
      std::make_shared<Toy>("Norm", std::vector<std::pair<std::string, int64_t>>{{"weight", 10}}));
  norm->register_buffer("running_mean", Tensor::zeros({10}));              // 40 bytes
  norm->register_buffer("steps", Tensor::zeros({3}, DType::kI64), false);  // 24, not persistent
  root.register_buffer("mask", Tensor::zeros({5}, DType::kBool));          // 5 (one byte each)

  const ModuleSizes all = compute_module_sizes(root);
  EXPECT_EQ(all.at(""), 40 + 40 + 24 + 5);
  EXPECT_EQ(all.at("norm"), 104);
  EXPECT_EQ(all.at("norm.steps"), 24);
  EXPECT_EQ(all.at("mask"), 5);
  // Integer and bool tensors keep their size under a dtype.
  const ModuleSizes half = compute_module_sizes(root, DType::kF16);
  EXPECT_EQ(half.at(""), 20 + 20 + 24 + 5);
  const ModuleSizes buffers = compute_module_sizes(root, {}, {}, /*buffers_only=*/true);
  EXPECT_EQ(buffers.at(""), 40 + 24 + 5);
  EXPECT_EQ(buffers.at("norm"), 64);
  EXPECT_EQ(buffers.count("norm.weight"), 0u);
}

TEST(MaxLayerSize, LeavesOrNoSplitBlocks) {
  auto gpt = meta_gpt();
  const MaximumSizes plain = calculate_maximum_sizes(*gpt);
  EXPECT_EQ(plain.total, 7808);
  EXPECT_EQ(plain.largest_layer.size, 1152);  // mlp.c_fc, in both blocks
  EXPECT_EQ(plain.largest_layer.names,
            (std::vector<std::string>{"transformer.h.0.mlp.c_fc", "transformer.h.1.mlp.c_fc"}));
  const MaximumSizes blocks = calculate_maximum_sizes(*gpt, {"GPT2Block"});
  EXPECT_EQ(blocks.largest_layer.size, 3488);
  EXPECT_EQ(blocks.largest_layer.names,
            (std::vector<std::string>{"transformer.h.0", "transformer.h.1"}));

  // Parameter entries count as layers of their own size.
  const ModuleSizes sizes = compute_module_sizes(*gpt);
  nn::Module& wte = gpt->get_submodule("transformer.wte");
  const LayerSize with_param =
      get_max_layer_size({{"transformer.wte.weight", nullptr},
                          {"transformer.ln_f", &gpt->get_submodule("transformer.ln_f")}},
                         sizes, {});
  EXPECT_EQ(with_param.size, 512);
  EXPECT_EQ(with_param.names, std::vector<std::string>{"transformer.wte.weight"});
  const LayerSize ties = get_max_layer_size(
      {{"transformer.wte", &wte}, {"a", nullptr}, {"lm_head", &gpt->get_submodule("lm_head")}},
      sizes, {});
  EXPECT_EQ(ties.size, 512);  // "a" is not in the sizes: 0
  EXPECT_TRUE(get_max_layer_size({}, sizes, {}).names.empty());
}

TEST(ModuleChildrenBottomUp, AccelerateOrder) {
  nn::Module root("Root");
  auto a = root.register_module("a", std::make_shared<nn::Module>("A"));
  a->register_module("x", std::make_shared<nn::Module>("X"));
  a->register_module("y", std::make_shared<nn::Module>("Y"));
  root.register_module("b", std::make_shared<nn::Module>("B"));
  std::vector<std::string> names;
  for (auto& [name, m] : get_module_children_bottom_up(root)) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"a.x", "a.y", "a", "b", ""}));
  EXPECT_EQ(get_module_children_bottom_up(root).back().second, &root);

  auto gpt = meta_gpt();
  const auto order = get_module_children_bottom_up(*gpt);
  EXPECT_EQ(order.size(), gpt->named_modules().size());
  // Every module comes after all of its descendants.
  for (size_t i = 0; i < order.size(); ++i) {
    for (size_t j = i + 1; j < order.size(); ++j) {
      const std::string& later = order[j].first;
      EXPECT_FALSE(!later.empty() && order[i].first.size() < later.size() &&
                   later.starts_with(order[i].first + "."))
          << later << " after its ancestor " << order[i].first;
    }
  }
}

TEST(ExtractModelFromParallel, LayerInsideShardedModel) {
  auto gpt = testing::real_gpt();
  EXPECT_EQ(&extract_model_from_parallel(static_cast<nn::Module&>(*gpt)), gpt.get());
  nn::Module plain("GPT2Model");
  testing::expect_error([&] { extract_model_from_parallel(plain); }, ErrorKind::kInvalidArgument,
                        "not an nn::Layer");

  ProcessGroupOptions opts;
  opts.backend = "shm";
  opts.store = std::make_shared<InMemoryStore>();
  opts.rank = 0;
  opts.size = 1;
  auto pg = ProcessGroup::create(opts);
  shard::ShardedModel sharded(gpt, pg);
  EXPECT_EQ(&extract_model_from_parallel(sharded), gpt.get());
}

}  // namespace
}  // namespace braid::accel
