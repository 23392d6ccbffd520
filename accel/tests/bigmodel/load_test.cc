// load_checkpoint_in_model into a GPT built on the meta device, from a safetensors file, a
// transformers-style sharded index and a braid sharded checkpoint, with modules mapped to disk
// and loaded back: the result equals a GPT loaded directly with load_state_dict. Also the offload
// folder format, set_module_tensor_to_device, load_state_dict and save / load.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "bigmodel_test_util.h"
#include "braid/accel/big_model.h"
#include "braid/accel/env_utils.h"
#include "braid/comm/process_group.h"
#include "braid/comm/store.h"
#include "braid/core/file_util.h"
#include "braid/nn/gpt.h"
#include "braid/shard/checkpoint.h"

namespace braid::accel {
namespace {

namespace fs = std::filesystem;
using testing::expect_error;
using testing::expect_same_tensors;
using testing::meta_gpt;
using testing::real_gpt;
using testing::TempDir;

// The reference: a GPT built normally and loaded with Module::load_state_dict.
NamedTensors direct_load(const fs::path& checkpoint) {
  auto gpt = std::make_shared<nn::GPT>(testing::small_gpt_config());
  gpt->load_state_dict(load_safetensors(checkpoint));
  return gpt->state_dict();
}

// Tensors as transformers writes them: the tied lm_head.weight left out.
NamedTensors hf_state(const nn::GPT& gpt) {
  NamedTensors out;
  for (auto& [name, t] : gpt.state_dict()) {
    if (name != "lm_head.weight") out.emplace_back(name, t);
  }
  return out;
}

bool all_on_cpu(nn::Module& m) {
  for (auto& [name, t] : m.state_dict()) {
    if (!t.device().is_cpu()) return false;
  }
  return true;
}

TEST(LoadCheckpointInModel, SafetensorsFileIntoMetaModel) {
  TempDir dir;
  auto source = real_gpt();
  save_safetensors(dir.path() / "model.safetensors", hf_state(*source), {{"format", "pt"}});

  auto gpt = meta_gpt();
  const LoadCheckpointResult r = load_checkpoint_in_model(*gpt, dir.path() / "model.safetensors");
  EXPECT_TRUE(r.missing_keys.empty());  // lm_head.weight is present through its tie
  EXPECT_TRUE(r.unexpected_keys.empty());
  EXPECT_TRUE(r.offloaded.empty());
  ASSERT_TRUE(all_on_cpu(*gpt));
  expect_same_tensors(gpt->state_dict(), direct_load(dir.path()));
  EXPECT_TRUE(gpt->get_submodule("lm_head").param("weight").is(
      gpt->get_submodule("transformer.wte").param("weight")));
  // The folder finds model.safetensors itself.
  auto again = meta_gpt();
  load_checkpoint_in_model(*again, dir.path());
  expect_same_tensors(again->state_dict(), gpt->state_dict());
}

TEST(LoadCheckpointInModel, DiskOffloadAndLoadBack) {
  TempDir dir;
  auto source = real_gpt(11);
  save_safetensors(dir.path() / "model.safetensors", source->state_dict());
  auto gpt = meta_gpt();
  // cpu 5000 with GPT2Block kept whole: the blocks and ln_f spill to disk (device_map_test).
  const DeviceMap map = infer_auto_device_map(*gpt, MaxMemory{{"cpu", 5000}, {"disk", 0}},
                                              {.no_split_module_classes = {"GPT2Block"}});
  ASSERT_EQ(device_for(map, "transformer.h.0.attn.c_attn.weight"), "disk");
  ASSERT_EQ(device_for(map, "transformer.wte.weight"), "cpu");

  const fs::path offload = dir.path() / "offload";
  const LoadCheckpointResult r = load_checkpoint_in_model(
      *gpt, dir.path() / "model.safetensors", {.device_map = map, .offload_folder = offload});
  // Disk modules stay on meta; their tensors are files with an index entry each.
  for (auto& [name, t] : gpt->state_dict()) {
    SCOPED_TRACE(name);
    const bool on_disk = device_for(map, name) == "disk";
    EXPECT_EQ(t.device().is_meta(), on_disk);
    EXPECT_EQ(r.offloaded.count(name), on_disk ? 1u : 0u);
    if (on_disk) {
      EXPECT_TRUE(fs::exists(offload / (name + ".dat")));
      EXPECT_EQ(fs::file_size(offload / (name + ".dat")), t.nbytes());
    }
  }
  EXPECT_EQ(r.offloaded.size(), 2u * 12u + 2u);  // 12 tensors per block, ln_f's two
  const OffloadIndex index = load_offload_index(offload);
  EXPECT_EQ(index.size(), r.offloaded.size());
  const auto json = nlohmann::json::parse(read_file(offload / "index.json"));
  EXPECT_EQ(json["transformer.h.1.mlp.c_fc.weight"]["dtype"], "float32");
  EXPECT_EQ(json["transformer.h.1.mlp.c_fc.weight"]["shape"], (std::vector<int64_t>{8, 32}));

  load_offloaded_weights(*gpt, index, offload);
  ASSERT_TRUE(all_on_cpu(*gpt));
  expect_same_tensors(gpt->state_dict(), direct_load(dir.path() / "model.safetensors"));
}

TEST(LoadCheckpointInModel, ShardedIndexWithDiskModules) {
  TempDir dir;
  auto source = real_gpt(5);
  const fs::path ckpt = dir.path() / "ckpt";
  const ShardedSaveResult saved = save_sharded(ckpt, hf_state(*source), 2000);
  ASSERT_GT(saved.files.size(), 2u);
  const NamedTensors expected = direct_load(ckpt);

  for (const fs::path& where : {ckpt, saved.index}) {
    SCOPED_TRACE(where.string());
    auto gpt = meta_gpt();
    const DeviceMap map{{"transformer.h.1", "disk"}, {"transformer.ln_f", "disk"}, {"", "cpu"}};
    const fs::path offload = dir.path() / ("off-" + where.filename().string());
    load_checkpoint_in_model(*gpt, where, {.device_map = map, .offload_folder = offload});
    EXPECT_TRUE(gpt->get_submodule("transformer.h.1.attn.c_attn")
                    .param("weight")
                    .data()
                    .device()
                    .is_meta());
    EXPECT_TRUE(
        gpt->get_submodule("transformer.h.0.attn.c_attn").param("weight").data().device().is_cpu());
    load_offloaded_weights(*gpt, load_offload_index(offload), offload);
    expect_same_tensors(gpt->state_dict(), expected);
  }
}

TEST(LoadCheckpointInModel, BraidShardedCheckpoint) {
  TempDir dir;
  auto source = real_gpt(9);
  std::vector<shard::Piece> pieces;
  for (auto& [name, t] : hf_state(*source)) {
    pieces.push_back({name, t.shape(), 0, t.contiguous().flatten()});
  }
  ProcessGroupOptions opts;
  opts.backend = "shm";
  opts.store = std::make_shared<InMemoryStore>();
  opts.rank = 0;
  opts.size = 1;
  auto pg = ProcessGroup::create(opts);
  const fs::path ckpt = dir.path() / "braid-ckpt";
  shard::save_sharded_checkpoint(ckpt, pieces, *pg, {{"step", "3"}});
  save_safetensors(dir.path() / "ref.safetensors", hf_state(*source));
  const NamedTensors expected = direct_load(dir.path() / "ref.safetensors");

  for (const fs::path& where : {ckpt, ckpt / "index.json"}) {
    SCOPED_TRACE(where.string());
    auto gpt = meta_gpt();
    const fs::path offload = dir.path() / ("off-" + where.filename().string());
    load_checkpoint_in_model(*gpt, where,
                             {.device_map = {{"transformer.h.0", "disk"}, {"", "cpu"}},
                              .offload_folder = offload,
                              .offload_state_dict = true});
    EXPECT_TRUE(gpt->get_submodule("transformer.h.0.ln_1").param("bias").data().device().is_meta());
    load_offloaded_weights(*gpt, load_offload_index(offload), offload);
    expect_same_tensors(gpt->state_dict(), expected);
  }
}

TEST(LoadCheckpointInModel, DtypeAndKeepInFp32) {
  TempDir dir;
  auto source = real_gpt(3);
  save_safetensors(dir.path() / "m.safetensors", source->state_dict());
  auto gpt = meta_gpt();
  load_checkpoint_in_model(*gpt, dir.path() / "m.safetensors",
                           {.device_map = {{"", "cpu"}, {"transformer.h.1", "disk"}},
                            .offload_folder = dir.path() / "off",
                            .dtype = DType::kBF16,
                            .keep_in_fp32_modules = {"ln_f", "c_fc"}});
  load_offloaded_weights(*gpt, load_offload_index(dir.path() / "off"), dir.path() / "off");
  const NamedTensors want = source->state_dict();
  const NamedTensors got = gpt->state_dict();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const std::string& name = got[i].first;
    SCOPED_TRACE(name);
    const bool fp32 =
        name.find("ln_f.") != std::string::npos || name.find("c_fc.") != std::string::npos;
    EXPECT_EQ(got[i].second.dtype(), fp32 ? DType::kF32 : DType::kBF16);
    EXPECT_EQ(got[i].second.to_vector(), want[i].second.to(got[i].second.dtype()).to_vector());
  }
  EXPECT_EQ(load_offload_index(dir.path() / "off").at("transformer.h.1.attn.c_proj.weight").dtype,
            DType::kBF16);
}

TEST(LoadCheckpointInModel, ChecksEverythingBeforeLoading) {
  TempDir dir;
  auto source = real_gpt();
  NamedTensors state = hf_state(*source);
  const auto untouched = [](nn::Module& m) {
    for (auto& [name, t] : m.state_dict()) {
      if (!t.device().is_meta()) return false;
    }
    return true;
  };

  // Missing key (strict) and unexpected key.
  NamedTensors partial(state.begin() + 1, state.end());
  partial.emplace_back("extra.weight", Tensor::zeros({2}));
  save_safetensors(dir.path() / "partial.safetensors", partial);
  auto gpt = meta_gpt();
  expect_error(
      [&] { load_checkpoint_in_model(*gpt, dir.path() / "partial.safetensors", {.strict = true}); },
      ErrorKind::kInvalidArgument, "missing keys [lm_head.weight, transformer.wte.weight]");
  EXPECT_TRUE(untouched(*gpt));
  const LoadCheckpointResult r = load_checkpoint_in_model(*gpt, dir.path() / "partial.safetensors");
  EXPECT_EQ(r.missing_keys, (std::vector<std::string>{"lm_head.weight", "transformer.wte.weight"}));
  EXPECT_EQ(r.unexpected_keys, std::vector<std::string>{"extra.weight"});
  EXPECT_TRUE(gpt->get_submodule("transformer.wte").param("weight").data().device().is_meta());

  // A wrong shape.
  NamedTensors wrong = state;
  wrong[1].second = Tensor::zeros({3, 3});
  save_safetensors(dir.path() / "wrong.safetensors", wrong);
  auto g2 = meta_gpt();
  expect_error([&] { load_checkpoint_in_model(*g2, dir.path() / "wrong.safetensors"); },
               ErrorKind::kInvalidArgument, "has shape [3, 3] but the model's has shape");
  EXPECT_TRUE(untouched(*g2));

  save_safetensors(dir.path() / "model.safetensors", state);
  // A tensor without a device, disk without a folder, a GPU this build has not.
  expect_error(
      [&] {
        load_checkpoint_in_model(*g2, dir.path(),
                                 {.device_map = {{"lm_head", "cpu"}, {"transformer.wte", "cpu"}}});
      },
      ErrorKind::kInvalidArgument, "gives no device for 'transformer.h.0.attn.c_attn.bias'");
  expect_error(
      [&] {
        load_checkpoint_in_model(*g2, dir.path(), {.device_map = {{"", "disk"}}});
      },
      ErrorKind::kInvalidArgument, "offload_folder");
  expect_error(
      [&] {
        load_checkpoint_in_model(*g2, dir.path(), {.device_map = {{"", "cuda:0"}}});
      },
      ErrorKind::kNotSupported, "cuda:0");
  EXPECT_TRUE(untouched(*g2));

  // Pickle, a missing path, two indexes in one folder.
  std::ofstream(dir.path() / "pytorch_model.bin") << "not pickle";
  expect_error([&] { load_checkpoint_in_model(*g2, dir.path() / "pytorch_model.bin"); },
               ErrorKind::kNotSupported, "pickle");
  expect_error([&] { load_checkpoint_in_model(*g2, dir.path() / "nope"); }, ErrorKind::kIo,
               "does not exist");
  const fs::path two = dir.path() / "two";
  fs::create_directories(two);
  std::ofstream(two / "a.index.json") << "{}";
  std::ofstream(two / "b.index.json") << "{}";
  expect_error([&] { load_checkpoint_in_model(*g2, two); }, ErrorKind::kInvalidArgument,
               "delete the irrelevant ones");
  const fs::path only_bin = dir.path() / "only-bin";
  fs::create_directories(only_bin);
  std::ofstream(only_bin / "pytorch_model.bin") << "x";
  expect_error([&] { load_checkpoint_in_model(*g2, only_bin); }, ErrorKind::kNotSupported,
               "pickle");
  EXPECT_TRUE(untouched(*g2));
}

TEST(Offload, FilesRoundTrip) {
  TempDir dir;
  const NamedTensors state{
      {"w", Tensor::randn({3, 5})},
      {"h", Tensor::randn({4}).to(DType::kBF16)},
      {"ids", Tensor::arange(6).reshape({2, 3})},
      {"scalar", Tensor::full({}, 2.5)},
      {"empty", Tensor::zeros({0, 4})},
      {"flags", Tensor::from_vector({1, 0, 1}, {3}, DType::kBool)},
  };
  offload_state_dict(dir.path() / "sd", state);
  const OffloadIndex index = load_offload_index(dir.path() / "sd");
  ASSERT_EQ(index.size(), state.size());
  for (const auto& [name, t] : state) {
    SCOPED_TRACE(name);
    const Tensor back = load_offloaded_weight(dir.path() / "sd" / (name + ".dat"), index.at(name));
    expect_same_tensors({{name, back}}, {{name, t}});
  }
  const auto json = nlohmann::json::parse(read_file(dir.path() / "sd" / "index.json"));
  EXPECT_EQ(json["h"]["dtype"], "bfloat16");
  EXPECT_EQ(json["ids"]["dtype"], "int64");
  EXPECT_EQ(json["scalar"]["shape"], nlohmann::json::array());

  // index.json merges with what is there.
  OffloadIndex more;
  offload_weight(Tensor::ones({2}), "extra", dir.path() / "sd", &more);
  save_offload_index(more, dir.path() / "sd");
  EXPECT_EQ(load_offload_index(dir.path() / "sd").size(), state.size() + 1);

  // Truncated file, bad index, bad names.
  write_file_atomic(dir.path() / "sd" / "w.dat", "short");
  expect_error([&] { load_offloaded_weight(dir.path() / "sd" / "w.dat", index.at("w")); },
               ErrorKind::kCorruptData, "holds 5 bytes");
  write_file_atomic(dir.path() / "sd" / "index.json",
                    R"({"w": {"dtype": "complex64", "shape": [1]}})");
  expect_error([&] { load_offload_index(dir.path() / "sd"); }, ErrorKind::kCorruptData,
               "complex64");
  expect_error([&] { offload_weight(Tensor::ones({1}), "a/b", dir.path(), nullptr); },
               ErrorKind::kInvalidArgument, "'a/b'");
  expect_error([&] { offload_weight(Tensor::empty({1}, DType::kF32, kMeta), "m", dir.path()); },
               ErrorKind::kInvalidArgument, "meta");
  EXPECT_TRUE(load_offload_index(dir.path() / "absent").empty());
}

TEST(SetModuleTensorToDevice, KeepsHandlesAndConverts) {
  auto gpt = meta_gpt();
  const std::string wte = "transformer.wte.weight";
  expect_error([&] { set_module_tensor_to_device(*gpt, wte, kCPU); }, ErrorKind::kInvalidArgument,
               "is on the meta device");
  expect_error(
      [&] {
        set_module_tensor_to_device(*gpt, wte, kCPU, Tensor::zeros({2, 2}));
      },
      ErrorKind::kInvalidArgument, "shape [2, 2]");
  expect_error([&] { set_module_tensor_to_device(*gpt, "transformer.wte.bias", kCPU); },
               ErrorKind::kInvalidArgument, "no parameter or buffer named 'bias'");
  expect_error([&] { set_module_tensor_to_device(*gpt, "transformer.nope.w", kCPU); },
               ErrorKind::kInvalidArgument, "no module 'transformer.nope'");

  // A value in another dtype is converted to the parameter's; the tied head sees it.
  const Tensor value = Tensor::randn({16, 8}, DType::kF64);
  set_module_tensor_to_device(*gpt, wte, kCPU, value);
  const Tensor& head = gpt->get_submodule("lm_head").param("weight").data();
  EXPECT_EQ(head.dtype(), DType::kF32);
  EXPECT_TRUE(head.device().is_cpu());
  EXPECT_EQ(head.to_vector(), value.to(DType::kF32).to_vector());
  // With a dtype, the value takes it; back to meta with a dtype keeps only the metadata.
  set_module_tensor_to_device(*gpt, wte, kCPU, value, DType::kBF16);
  EXPECT_EQ(head.dtype(), DType::kBF16);
  set_module_tensor_to_device(*gpt, wte, kMeta, Tensor(), DType::kF16);
  EXPECT_TRUE(head.device().is_meta());
  EXPECT_EQ(head.dtype(), DType::kF16);

  // Buffers too; integer values keep their dtype when a dtype is given.
  nn::Module m("M");
  m.register_buffer("steps", Tensor::zeros({2}, DType::kI64));
  set_module_tensor_to_device(m, "steps", kCPU, Tensor::arange(2, DType::kI32), DType::kBF16);
  EXPECT_EQ(m.buffer("steps").dtype(), DType::kI32);
  set_module_tensor_to_device(m, "steps", kMeta);
  EXPECT_TRUE(m.buffer("steps").device().is_meta());
}

TEST(LoadStateDict, SafetensorsWithDeviceMap) {
  TempDir dir;
  const NamedTensors state{{"a.w", Tensor::randn({2, 2})}, {"b.w", Tensor::randn({3})}};
  save_safetensors(dir.path() / "s.safetensors", state, {{"format", "pt"}});
  expect_same_tensors(load_state_dict(dir.path() / "s.safetensors"), state);
  const NamedTensors mapped =
      load_state_dict(dir.path() / "s.safetensors", {{"a", "disk"}, {"b", "meta"}});
  EXPECT_TRUE(mapped[0].second.device().is_cpu());  // disk entries load on the CPU
  EXPECT_TRUE(mapped[1].second.device().is_meta());
  expect_error(
      [&] {
        load_state_dict(dir.path() / "s.safetensors", {{"a", "cuda:0"}});
      },
      ErrorKind::kNotSupported, "");

  save_safetensors(dir.path() / "tf.safetensors", state, {{"format", "tf"}});
  expect_error([&] { load_state_dict(dir.path() / "tf.safetensors"); }, ErrorKind::kInvalidArgument,
               "format 'tf'");
  expect_error([&] { load_state_dict(dir.path() / "x.bin"); }, ErrorKind::kNotSupported, "pickle");
}

TEST(SaveLoad, MainProcessWritesSafetensors) {
  TempDir dir;
  const NamedTensors state{{"w", Tensor::randn({4})}};
  {
    ClearEnvironment clean;  // a single process: rank 0
    EXPECT_TRUE(save(state, dir.path() / "a.safetensors"));
  }
  const SafetensorsFile f = SafetensorsFile::open(dir.path() / "a.safetensors");
  EXPECT_EQ(f.metadata().at("format"), "pt");
  expect_same_tensors(load(dir.path() / "a.safetensors"), state);
  const NamedTensors meta = load(dir.path() / "a.safetensors", kMeta);
  EXPECT_TRUE(meta[0].second.device().is_meta());
  {
    PatchEnvironment env{
        {"RANK", 1}, {"WORLD_SIZE", 2}, {"LOCAL_RANK", 0}, {"LOCAL_WORLD_SIZE", 1}};
    EXPECT_FALSE(save(state, dir.path() / "b.safetensors"));
    EXPECT_FALSE(fs::exists(dir.path() / "b.safetensors"));
    EXPECT_TRUE(save(state, dir.path() / "c.safetensors", {.save_on_each_node = true}));
    EXPECT_TRUE(fs::exists(dir.path() / "c.safetensors"));
  }
}

}  // namespace
}  // namespace braid::accel
