// Checkpoint kill soak (docs/faults.md, "Kill soak"): a rank of a small data-parallel training
// job that saves a sharded checkpoint after every step, and the check run after the job was
// killed mid-save.
//
//   ckpt_soak_worker train FOLDER RECORDS [WATCH_RANK]
//     under braid launch: prints "job <prefix> pid <pid>" first; replicated parameters (f32, plus a
//     bf16 copy and the step as i64) trained by SGD on per-rank targets, gradients averaged by
//     all_reduce. Before saving step S, rank 0 writes every tensor to RECORDS/step-S.safetensors
//     (atomically); then every rank saves its FSDP-style cut with save_sharded_checkpoint(FOLDER,
//     metadata step = S) and rank 0 prints "saved S". Runs until killed. WATCH_RANK (the rank the
//     driver will kill) prints "stage <name> S" at the start of each save ("begin"), at each stage
//     of save_sharded_checkpoint's test hook, and when it returns ("end"): the driver reports where
//     the kill landed.
//   ckpt_soak_worker check FOLDER RECORDS LAST_SAVED
//     a plain process: FOLDER must load; its step S must be LAST_SAVED (the last "saved"
//     line) or LAST_SAVED + 1 (the kill came after the publish, before the print); every tensor
//     must equal RECORDS/step-S.safetensors bit for bit. Prints "step S matches its record".
//
// Exit status 0 when the check passed; 1 with a message on stderr otherwise; 2 for usage.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "braid/comm/process_group.h"
#include "braid/core/error.h"
#include "braid/shard/checkpoint.h"
#include "braid/tensor/safetensors.h"
#include "checkpoint_internal.h"
#include "checkpoint_test_util.h"

namespace {

using namespace braid;
namespace fs = std::filesystem;

// 2^19 + 2^16 + ... elements: a save writes a few MiB, so it takes most of a step's time and
// a kill at a random moment usually lands inside one.
constexpr int64_t kRows = 512;
constexpr int64_t kCols = 1024;

struct Model {
  Tensor w = Tensor::empty({kRows, kCols});
  Tensor b = Tensor::empty({kCols});
  int64_t step = 0;

  NamedTensors tensors() const {
    return {{"b", b},
            {"step", Tensor::from_vector({double(step)}, {}, DType::kI64)},
            {"w", w},
            {"w.bf16", w.to(DType::kBF16)}};
  }
};

// Deterministic on every rank: the same seed gives the same bits (promise 3).
Model init_model() {
  Model m;
  float* w = m.w.data<float>();
  for (int64_t i = 0; i < m.w.numel(); ++i) w[i] = float(std::sin(0.001 * double(i)));
  float* b = m.b.data<float>();
  for (int64_t i = 0; i < m.b.numel(); ++i) b[i] = 0.0f;
  return m;
}

// One SGD step towards rank-dependent targets; the averaged gradient is the same on every rank.
void train_step(ProcessGroup& pg, Model& m) {
  const int r = pg.rank();
  Tensor grad = Tensor::empty({m.w.numel() + m.b.numel()});
  float* g = grad.data<float>();
  const float* w = m.w.data<float>();
  const float* b = m.b.data<float>();
  const int64_t nw = m.w.numel();
  for (int64_t i = 0; i < nw; ++i) g[i] = w[i] - float((i + r + m.step) % 17) / 16.0f;
  for (int64_t i = 0; i < m.b.numel(); ++i) g[nw + i] = b[i] - float(r + 1);
  pg.all_reduce(grad);
  const float lr = 0.1f / float(pg.size());
  float* wm = m.w.data<float>();
  float* bm = m.b.data<float>();
  for (int64_t i = 0; i < nw; ++i) wm[i] -= lr * g[i];
  for (int64_t i = 0; i < m.b.numel(); ++i) bm[i] -= lr * g[nw + i];
  ++m.step;
}

fs::path record_path(const fs::path& records, int64_t step) {
  return records / ("step-" + std::to_string(step) + ".safetensors");
}

void stage(const char* name, int64_t step) {
  std::printf("stage %s %lld\n", name, static_cast<long long>(step));
  std::fflush(stdout);
}

int train(const fs::path& folder, const fs::path& records, int watch_rank) {
  // The driver's handle on the process and on /dev/shm (as soak_worker.cc).
  const char* token = std::getenv("BRAID_STORE_TOKEN");
  std::printf("job %.12s pid %d\n", token ? token : "none", int(getpid()));
  std::fflush(stdout);
  auto pg = ProcessGroup::create({});
  const bool watched = pg->rank() == watch_rank;
  int64_t saving = 0;
  if (watched) {
    shard::detail::set_save_hook(
        [&](std::string_view name, int) { stage(std::string(name).c_str(), saving); });
  }
  Model m = init_model();
  if (pg->rank() == 0) fs::create_directories(records);
  std::printf("ready\n");
  std::fflush(stdout);
  while (true) {
    train_step(*pg, m);
    const NamedTensors named = m.tensors();
    // Recorded before the save starts, so whatever step the folder holds has its record.
    saving = m.step;
    if (watched) stage("begin", m.step);
    if (pg->rank() == 0) save_safetensors(record_path(records, m.step), named);
    shard::save_sharded_checkpoint(folder, shard::testing::cut(named, pg->rank(), pg->size()), *pg,
                                   {{"step", std::to_string(m.step)}});
    if (watched) stage("end", m.step);
    if (pg->rank() == 0) {
      std::printf("saved %lld\n", static_cast<long long>(m.step));
      std::fflush(stdout);
      // The folder now holds this step or a later one: older records are not needed.
      fs::remove(record_path(records, m.step - 1));
    }
  }
}

int check(const fs::path& folder, const fs::path& records, int64_t last_saved) {
  const shard::ShardedCheckpoint ckpt(folder);
  const int64_t step = std::stoll(ckpt.metadata().at("step"));
  if (step != last_saved && step != last_saved + 1) {
    std::fprintf(stderr, "the checkpoint holds step %lld, expected %lld or %lld\n",
                 static_cast<long long>(step), static_cast<long long>(last_saved),
                 static_cast<long long>(last_saved + 1));
    return 1;
  }
  const NamedTensors record = load_safetensors(record_path(records, step));
  if (ckpt.names().size() != record.size()) {
    std::fprintf(stderr, "the checkpoint holds %zu tensors, the record %zu\n", ckpt.names().size(),
                 record.size());
    return 1;
  }
  for (const auto& [name, want] : record) {
    if (!ckpt.contains(name) || !shard::testing::same_bytes(ckpt.read(name), want)) {
      std::fprintf(stderr, "tensor '%s' of step %lld differs from its record\n", name.c_str(),
                   static_cast<long long>(step));
      return 1;
    }
  }
  std::printf("step %lld matches its record\n", static_cast<long long>(step));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "train" && (argc == 4 || argc == 5)) {
      return train(argv[2], argv[3], argc == 5 ? std::stoi(argv[4]) : -1);
    }
    if (mode == "check" && argc == 5) return check(argv[2], argv[3], std::stoll(argv[4]));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr,
               "usage: ckpt_soak_worker train FOLDER RECORDS [WATCH_RANK]\n"
               "       ckpt_soak_worker check FOLDER RECORDS LAST_SAVED\n");
  return 2;
}
