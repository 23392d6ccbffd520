// One rank of a sharded-checkpoint job under `braid launch` (run_checkpoint.sh), or a lone
// process checking a merged folder (apps/tests/merge_weights_cli_test.sh):
//   checkpoint_worker save FOLDER SEED [KILL_RANK KILL_STAGE]
//     saves make_model(SEED) cut FSDP-style over the group; KILL_RANK SIGKILLs itself when
//     the save reaches KILL_STAGE (checkpoint_internal.h, set_save_hook).
//   checkpoint_worker verify FOLDER SEED WRITER_WORLD
//     every rank of any world size checks the folder: the writer's world size and metadata,
//     its own FSDP cut of every tensor (resharding) and 40 random ranges per tensor, read in
//     the stored dtype (bytes equal) and as f64 (equal to the reference cast).
//   checkpoint_worker check-merged FOLDER SEED
//     load_safetensors(FOLDER) equals make_model(SEED), tensor for tensor and byte for byte.
// Exit status 0 when every check passed; 1 with a message on stderr otherwise.
#include <signal.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include "braid/comm/process_group.h"
#include "braid/core/error.h"
#include "braid/kernels/table.h"
#include "braid/shard/checkpoint.h"
#include "checkpoint_internal.h"
#include "checkpoint_test_util.h"

namespace {

using namespace braid;
using namespace braid::shard;

struct Failure {
  std::string message;
};

void check(bool ok, const std::string& message) {
  if (!ok) throw Failure{message};
}

void check_range(const ShardedCheckpoint& ckpt, const std::string& name, const Tensor& want,
                 int64_t lo, int64_t hi) {
  const std::string where = name + " [" + std::to_string(lo) + ", " + std::to_string(hi) + ")";
  if (hi <= lo) {  // an empty range reads nothing (and memcpy / memcmp may not see null)
    ckpt.read_range(name, lo, 0, nullptr, want.dtype());
    return;
  }
  const Tensor flat = want.contiguous().reshape({want.numel()});
  const size_t es = want.element_size();
  std::vector<std::byte> got((hi - lo) * es), ref((hi - lo) * es);
  ckpt.read_range(name, lo, hi - lo, got.data(), want.dtype());
  std::memcpy(ref.data(), static_cast<const std::byte*>(flat.data_ptr()) + lo * es, ref.size());
  check(got == ref, where + ": bytes differ from the saved tensor");
  std::vector<double> as_f64(hi - lo), ref_f64(hi - lo);
  ckpt.read_range(name, lo, hi - lo, as_f64.data(), DType::kF64);
  kernels::kernels_for(kCPU).cast(Stream{kCPU}, ref.data(), want.dtype(), ref_f64.data(),
                                  DType::kF64, hi - lo, kernels::CastMode::kDefault);
  check(std::memcmp(as_f64.data(), ref_f64.data(), as_f64.size() * 8) == 0,
        where + ": f64 values differ");
}

int save(ProcessGroup& pg, const std::string& folder, int seed, int kill_rank,
         const std::string& kill_stage) {
  if (kill_rank >= 0) {
    shard::detail::set_save_hook([=](std::string_view stage, int rank) {
      if (rank == kill_rank && stage == kill_stage) {
        std::fprintf(stderr, "rank %d: SIGKILL at stage %s\n", rank, kill_stage.c_str());
        ::raise(SIGKILL);
      }
    });
  }
  const NamedTensors model = shard::testing::make_model(seed);
  save_sharded_checkpoint(folder, shard::testing::cut(model, pg.rank(), pg.size()), pg,
                          {{"seed", std::to_string(seed)}, {"world", std::to_string(pg.size())}});
  return 0;
}

int verify(ProcessGroup& pg, const std::string& folder, int seed, int writer_world) {
  const ShardedCheckpoint ckpt(folder);
  check(ckpt.world_size() == writer_world, "world_size " + std::to_string(ckpt.world_size()) +
                                               ", expected " + std::to_string(writer_world));
  check(ckpt.metadata().at("seed") == std::to_string(seed), "metadata seed differs");
  const NamedTensors model = shard::testing::make_model(seed);
  check(ckpt.names().size() == model.size(), "tensor count differs");
  // This rank's share under the reader's world size.
  for (const Piece& p : shard::testing::cut(model, pg.rank(), pg.size())) {
    for (const auto& [name, t] : model) {
      if (name == p.name && p.data.numel() > 0) {
        check_range(ckpt, name, t, p.offset, p.offset + p.data.numel());
      }
    }
  }
  std::mt19937_64 rng(static_cast<uint64_t>(seed) * 1000 + pg.rank());
  for (const auto& [name, t] : model) {
    check(ckpt.shape(name) == t.shape() && ckpt.dtype(name) == t.dtype(), name + ": metadata");
    for (int k = 0; k < 40 && t.numel() > 0; ++k) {
      int64_t a = static_cast<int64_t>(rng() % (t.numel() + 1));
      int64_t b = static_cast<int64_t>(rng() % (t.numel() + 1));
      if (a > b) std::swap(a, b);
      check_range(ckpt, name, t, a, b);
    }
    check(shard::testing::same_bytes(ckpt.read(name), t), name + ": read() differs");
  }
  pg.barrier();
  return 0;
}

int check_merged(const std::string& folder, int seed) {
  const NamedTensors merged = load_safetensors(folder);
  const NamedTensors model = shard::testing::make_model(seed);
  check(merged.size() == model.size(), "merged holds " + std::to_string(merged.size()) +
                                           " tensors, expected " + std::to_string(model.size()));
  for (const auto& [name, t] : model) {
    bool found = false;
    for (const auto& [mname, m] : merged) {
      if (mname == name) {
        found = true;
        check(shard::testing::same_bytes(m, t), name + ": merged tensor differs");
      }
    }
    check(found, name + ": missing from the merged folder");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "check-merged" && argc == 4) return check_merged(argv[2], std::stoi(argv[3]));
    if (mode == "save" && (argc == 4 || argc == 6)) {
      auto pg = ProcessGroup::create({});
      return save(*pg, argv[2], std::stoi(argv[3]), argc == 6 ? std::stoi(argv[4]) : -1,
                  argc == 6 ? argv[5] : "");
    }
    if (mode == "verify" && argc == 5) {
      auto pg = ProcessGroup::create({});
      return verify(*pg, argv[2], std::stoi(argv[3]), std::stoi(argv[4]));
    }
    std::fprintf(stderr,
                 "usage: checkpoint_worker save FOLDER SEED [KILL_RANK KILL_STAGE]\n"
                 "       checkpoint_worker verify FOLDER SEED WRITER_WORLD\n"
                 "       checkpoint_worker check-merged FOLDER SEED\n");
    return 2;
  } catch (const Failure& f) {
    std::fprintf(stderr, "checkpoint_worker: check failed: %s\n", f.message.c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "checkpoint_worker: error: %s\n", e.what());
    return 1;
  }
}
