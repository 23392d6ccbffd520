// `braid merge-weights CHECKPOINT OUT`: Accelerate's merge-weights for braid's sharded
// checkpoints (docs/sharding.md, "Checkpoints"). Reads every tensor of a folder written by
// save_sharded_checkpoint, whatever world size wrote it, and writes them whole as
// OUT/model.safetensors, or as model-0000i-of-0000N.safetensors plus
// model.safetensors.index.json beyond --max-shard-size. Prints the files written.
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "braid/accel/progress.h"
#include "braid/shard/checkpoint.h"
#include "commands.h"

namespace braid::cli {

namespace {

struct MergeOptions {
  std::string checkpoint;
  std::string out;
  std::string max_shard_size = "5GB";
  std::vector<std::string> names;
  bool quiet = false;
};

}  // namespace

void add_merge_weights_command(CLI::App& app) {
  auto o = std::make_shared<MergeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "merge-weights", "Merge a sharded checkpoint into model.safetensors (or shards + index)");
  cmd->add_option("checkpoint", o->checkpoint, "Sharded checkpoint folder (with index.json)")
      ->required();
  cmd->add_option("out", o->out, "Output folder (created if missing)")->required();
  cmd->add_option("--max-shard-size,--max_shard_size", o->max_shard_size,
                  "Largest output file before splitting: 5GB = 5*10^9, 5GiB = 5*2^30, or bytes")
      ->capture_default_str();
  cmd->add_option("--name", o->names,
                  "Keep only this tensor, or a prefix ending in '.' (e.g. model.); repeatable");
  cmd->add_flag("--quiet,-q", o->quiet, "No progress lines on stderr");
  cmd->callback([o] {
    // Progress on stderr (stdout lists the files written): about 20 lines for the whole merge.
    std::unique_ptr<accel::ProgressBar> bar;
    auto progress = [&](int64_t done, int64_t total) {
      if (!bar) {
        bar = std::make_unique<accel::ProgressBar>(accel::ProgressOptions{
            .desc = "merge-weights",
            .total = total,
            .every = std::max<int64_t>(1, total / 20),
            .unit = "tensors",
            .enabled = !o->quiet,
            .sink = [](const std::string& line) { std::cerr << line << '\n'
                                                            << std::flush; }});
      }
      bar->update(done - bar->count());
    };
    const auto files =
        shard::merge_weights(o->checkpoint, o->out, o->max_shard_size, o->names, progress);
    for (const std::filesystem::path& f : files) std::cout << f.string() << '\n';
  });
}

}  // namespace braid::cli
