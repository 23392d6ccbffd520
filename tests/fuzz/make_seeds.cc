// Writes the seed corpora of tests/fuzz/corpus/ from braid's own writers, so that every seed is
// a valid input of today's format (docs/fuzzing.md, "Corpora"): make_seeds <corpus-folder>.
// Files that are copies (the Accelerate YAML files, ds_zero2.json) come from the test data the
// parsers' unit tests use. Run it again after a format change and commit what changes.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "braid/accel/config.h"
#include "braid/amp/grad_scaler.h"
#include "braid/comm/object.h"
#include "braid/comm/store.h"
#include "braid/core/file_util.h"
#include "braid/nn/gpt.h"
#include "braid/nn/lr_scheduler.h"
#include "braid/nn/optim.h"
#include "braid/tensor/safetensors.h"
#include "checkpoint_internal.h"
#include "tcp_store_wire.h"

namespace fs = std::filesystem;
using namespace braid;

namespace {

fs::path out_root;

void put(const std::string& target, const std::string& name, const std::string& bytes) {
  const fs::path dir = out_root / target;
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary) << bytes;
}
void put(const std::string& target, const std::string& name, const std::vector<uint8_t>& b) {
  put(target, name, std::string(b.begin(), b.end()));
}

std::string le32(uint32_t n) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = static_cast<char>(n >> (8 * i));
  return s;
}

// A .safetensors file as save_safetensors writes it.
std::string safetensors_bytes(const NamedTensors& tensors, const StringMap& metadata = {}) {
  const fs::path tmp = fs::temp_directory_path() / "braid_make_seeds.safetensors";
  save_safetensors(tmp, tensors, metadata);
  std::string bytes = read_file(tmp);
  fs::remove(tmp);
  return bytes;
}

Tensor vec(std::vector<double> v, Shape shape, DType dtype) {
  return Tensor::from_vector(v, shape).to(dtype);
}

void safetensors() {
  put("safetensors_header", "f32_bf16_meta.safetensors",
      safetensors_bytes({{"w", vec({1, 2, 3, 4, 5, 6}, {2, 3}, DType::kF32)},
                         {"b", vec({0.5, -1}, {2}, DType::kBF16)}},
                        {{"format", "pt"}}));
  put("safetensors_header", "ints_bool_scalar.safetensors",
      safetensors_bytes({{"i", vec({1, -2, 3}, {3}, DType::kI64)},
                         {"m", vec({1, 0, 1, 1}, {2, 2}, DType::kBool)},
                         {"s", vec({7}, {}, DType::kU8)},
                         {"e", Tensor::empty({0, 4}, DType::kF16)}}));
  put("safetensors_header", "fp8.safetensors",
      safetensors_bytes({{"a", vec({1, 2, 3}, {3}, DType::kF8E4M3)},
                         {"b", vec({-1, 0.25}, {1, 2}, DType::kF8E5M2)},
                         {"c", vec({4, 5}, {2}, DType::kI16)}}));
}

void safetensors_index() {
  const fs::path tmp = fs::temp_directory_path() / "braid_make_seeds_sharded";
  fs::remove_all(tmp);
  save_sharded(tmp,
               {{"a", vec({1, 2, 3, 4}, {4}, DType::kF32)},
                {"b", vec({1, 2, 3, 4}, {2, 2}, DType::kF32)},
                {"c", vec({1, 2}, {2}, DType::kF64)}},
               uint64_t{16});
  const std::string index_text = read_file(tmp / "model.safetensors.index.json");
  put("safetensors_index", "save_sharded.json", index_text);
  // safetensors_sharded: the index, then one shard; the target writes it under every name.
  const std::string one_shard = safetensors_bytes({{"a", vec({1, 2, 3, 4}, {4}, DType::kF32)},
                                                   {"b", vec({1, 2, 3, 4}, {2, 2}, DType::kF32)},
                                                   {"c", vec({1, 2}, {2}, DType::kF64)}});
  put("safetensors_sharded", "three_tensors.bin",
      le32(static_cast<uint32_t>(index_text.size())) + index_text + one_shard);
  fs::remove_all(tmp);
  put("safetensors_index", "nested_names.json",
      format_safetensors_index({12345,
                                {{"model.layers.0.attn.q_proj.weight", "a/b.safetensors"},
                                 {"lm_head.weight", "model-00002-of-00002.safetensors"}}}));
  put("safetensors_index", "size.txt", std::string("5GiB"));
}

shard::detail::CheckpointIndex checkpoint_index() {
  using namespace shard::detail;
  CheckpointIndex a;
  a.world_size = 2;
  a.metadata = {{"step", "100"}};
  a.files = {{rank_file_name(0, 2), {120, 0xdeadbeef}}, {rank_file_name(1, 2), {96, 0x1}}};
  a.tensors["w"] = {DType::kF32,
                    {2, 3},
                    6,
                    {{rank_file_name(0, 2), "w@0", 0, 4}, {rank_file_name(1, 2), "w@4", 4, 2}}};
  a.tensors["b"] = {DType::kBF16, {3}, 3, {{rank_file_name(1, 2), "b@0", 0, 3}}};
  a.tensors["e"] = {DType::kF16, {0, 5}, 0, {}};
  a.tensors["s"] = {DType::kI64, {}, 1, {{rank_file_name(0, 2), "s@0", 0, 1}}};
  put("checkpoint_index", "two_ranks.json", format_checkpoint_index(a));
  return a;
}

void checkpoint_read() {
  using namespace shard::detail;
  // One rank file holding every piece of a world-size-1 save.
  CheckpointIndex idx;
  const std::string file = rank_file_name(0, 1);
  idx.files = {{file, {0, 0}}};  // the fuzz target sets size and CRC
  idx.tensors["w"] = {DType::kF32, {2, 3}, 6, {{file, "w@0", 0, 4}, {file, "w@4", 4, 2}}};
  idx.tensors["b"] = {DType::kBF16, {3}, 3, {{file, "b@0", 0, 3}}};
  idx.tensors["m"] = {DType::kBool, {2}, 2, {{file, "m@0", 0, 2}}};
  const std::string rank = safetensors_bytes({{"w@0", vec({1, 2, 3, 4}, {4}, DType::kF32)},
                                              {"w@4", vec({5, 6}, {2}, DType::kF32)},
                                              {"b@0", vec({1, 2, 3}, {3}, DType::kBF16)},
                                              {"m@0", vec({1, 0}, {2}, DType::kBool)}});
  const std::string text = format_checkpoint_index(idx);
  put("checkpoint_read", "one_rank.bin", le32(static_cast<uint32_t>(text.size())) + text + rank);
}

void configs(const fs::path& src) {
  const fs::path data = src / "accel/tests/config/data";
  for (const char* name :
       {"accelerate_fsdp.yaml", "accelerate_fsdp2.yaml", "accelerate_deepspeed.yaml",
        "accelerate_0_12_fsdp.yaml", "accelerate_fp8.yaml", "accelerate_multi_cpu.yaml",
        "accelerate_megatron.yaml"}) {
    put("config_yaml", name, read_file(data / name));
  }
  // The fuzz target's folder holds ds_config.json: a file naming it reaches the JSON reader.
  std::string ds = read_file(data / "accelerate_deepspeed_json.yaml");
  ds.replace(ds.find("ds_zero2.json"), 13, "ds_config.json");
  put("config_yaml", "accelerate_deepspeed_json.yaml", ds);
  put("config_yaml", "to_yaml_default.yaml", accel::to_yaml(accel::AcceleratorConfig{}));
  put("config_deepspeed", "ds_zero2.json", read_file(data / "ds_zero2.json"));
  put("config_deepspeed", "zero3_nvme.json",
      std::string(R"({"zero_optimization": {"stage": 3, "mics_shard_size": -1,)"
                  R"( "offload_param": {"device": "nvme", "nvme_path": "/nvme"},)"
                  R"( "stage3_gather_16bit_weights_on_model_save": true},)"
                  R"( "gradient_clipping": 1.0, "fp16": {"enabled": "auto"}})"));
}

void store_wire() {
  using tcp_wire::Command;
  using tcp_wire::Status;
  using W = tcp_wire::Writer;
  auto b = [](Command c) { return W(static_cast<uint8_t>(c)); };
  const std::vector<std::vector<uint8_t>> frames = {
      b(Command::kHello).u32(1).bytes("0123456789abcdef").finish(),
      b(Command::kSet).bytes("k").bytes("v").finish(),
      b(Command::kGet).u64(1000).bytes("k").finish(),
      b(Command::kAdd).bytes("n").i64(-3).finish(),
      b(Command::kCompareSet).bytes("k").bytes("v").bytes("w").finish(),
      [&] {
        auto w = b(Command::kCheck);
        w.u32(2).bytes("a").bytes("b");
        return w.finish();
      }(),
      [&] {
        auto w = b(Command::kWait);
        w.u64(5).u32(1).bytes("a");
        return w.finish();
      }(),
      b(Command::kDelete).bytes("k").finish(),
      b(Command::kNumKeys).finish(),
  };
  std::string stream;
  for (const auto& f : frames) stream.append(f.begin(), f.end());
  put("store_wire", "requests.bin", stream);
  put("store_wire", "set.bin", frames[1]);
  auto s = [](Status st) { return W(static_cast<uint8_t>(st)); };
  std::string replies;
  for (const auto& f :
       {s(Status::kOk).finish(), s(Status::kOk).bytes("value").finish(),
        s(Status::kOk).i64(42).finish(), s(Status::kTimeout).u32(1).bytes("b").finish(),
        s(Status::kBadToken).bytes("no").finish(),
        s(Status::kFailed)
            .u8(static_cast<uint8_t>(ErrorKind::kInvalidArgument))
            .bytes("x")
            .finish()}) {
    replies.append(f.begin(), f.end());
  }
  put("store_wire", "replies.bin", replies);
}

void file_store() {
  const fs::path tmp = fs::temp_directory_path() / "braid_make_seeds.store";
  fs::remove(tmp);
  {
    FileStore store(tmp.string());
    store.set("a", "1");
    store.add("counter", 5);
    store.set("b", "xyz");
    store.delete_key("a");
  }
  std::string log = read_file(tmp);
  fs::remove(tmp);
  put("file_store", "set_add_delete.log", log);
  put("file_store", "torn_tail.log", log + std::string("\x01\x05\x00\x00\x00", 5));
}

void object_format() {
  const Tree tree = Tree::map({
      {"lr", 0.1},
      {"steps", int64_t{100}},
      {"name", "gpt"},
      {"flag", true},
      {"none", Tree()},
      {"list", Tree::list({1, 2.5, "x", Tree::list({})})},
      {"w", vec({1, 2, 3, 4, 5, 6}, {2, 3}, DType::kF32)},
      {"m", vec({1, 0}, {2}, DType::kBool)},
      {"h", vec({0.5}, {1}, DType::kBF16)},
  });
  put("object_format", "map.bin", serialize_tree(tree));
  put("object_format", "int.bin", serialize_tree(Tree(int64_t{-7})));
}

void training_state() {
  nn::AdamW adamw({nn::Parameter(vec({1, 2, 3, 4, 5, 6}, {2, 3}, DType::kF32)),
                   nn::Parameter(vec({1, 2, 3}, {3}, DType::kF32))},
                  nn::OptimizerOptions{});
  nn::LRScheduler scheduler(adamw, nn::SchedulerType::kLinear, {10, 100});
  scheduler.step();
  amp::GradScaler scaler;
  put("training_state", "gpt_config.json", std::string(1, '\0') + nn::GPTConfig{}.to_hf_json());
  put("training_state", "optimizer.json", std::string(1, '\1') + adamw.state_dict().json);
  put("training_state", "scheduler.json", std::string(1, '\2') + scheduler.state_json());
  put("training_state", "scaler.json", std::string(1, '\3') + scaler.state_json());
}

void c_api() {
  put("c_api", "unique_id.bin",
      std::string(1, '\0') + "braid-uid-1 127.0.0.1 29500 0123456789abcdef0123456789abcdef");
  put("c_api", "load.bin",
      std::string(1, '\1') + safetensors_bytes({{"x", vec({1, 2}, {2}, DType::kF32)}}));
  put("c_api", "max_shard_size.bin", std::string(1, '\2') + "500MB");
  put("c_api", "dlpack_dtype.bin", std::string("\3\2\x20\x01\x00", 5));  // float32 x1
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: make_seeds <corpus-folder> <braid-source-folder>\n";
    return 2;
  }
  out_root = argv[1];
  safetensors();
  safetensors_index();
  checkpoint_index();
  checkpoint_read();
  configs(argv[2]);
  store_wire();
  file_store();
  object_format();
  training_state();
  c_api();
  std::cout << "seeds written to " << out_root << "\n";
  return 0;
}
