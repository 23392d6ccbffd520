// Rank discovery from launcher variables (rank_info.h). Each launcher family is one small
// reader that fills the raw values; one validation pass then checks them all the same way,
// so every error names the variable that carried the bad value.
#include "braid/comm/rank_info.h"

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "braid/core/environment.h"
#include "braid/core/error.h"

namespace braid {
namespace {

// A value together with the variable it came from, so errors can name it.
struct Field {
  int value = 0;
  std::string name;  // empty: a default, not read from the environment
};

// Parses one integer variable through the core getter (which names the variable on a
// malformed value) and checks it fits an int and is not negative.
std::optional<Field> read_int(std::string_view name) {
  std::optional<std::string> text = get_env_string(name);
  if (!text || text->find_first_not_of(" \t") == std::string::npos) return std::nullopt;
  int64_t value = get_env_int(name, 0);
  BRAID_CHECK(value >= 0 && value <= INT32_MAX, kInvalidArgument, "environment variable ", name,
              "='", *text, "' is out of range: expected an integer in [0, ", INT32_MAX, "]");
  return Field{static_cast<int>(value), std::string(name)};
}

// The first of `names` that is set, or nullopt.
std::optional<Field> read_first(std::initializer_list<std::string_view> names) {
  for (std::string_view name : names) {
    if (std::optional<Field> f = read_int(name)) return f;
  }
  return std::nullopt;
}

// A launcher sets a rank and its size together; one without the other is a broken setup.
Field require(const std::optional<Field>& field, std::string_view name, std::string_view other) {
  BRAID_CHECK(field.has_value(), kInvalidArgument, "environment variable ", other, " is set but ",
              name, " is not: expected both (rank discovery, docs/launch.md)");
  return *field;
}

struct RawInfo {
  Field rank, world, local_rank, local_world, group_rank;
  std::string source;
  bool mpi_launcher = false;
};

// Defaults when a launcher does not say: one node holding every rank, or, when only the
// local size is known, nodes filled in rank order.
void fill_defaults(RawInfo& raw, const std::optional<Field>& local_rank,
                   const std::optional<Field>& local_world,
                   const std::optional<Field>& group_rank) {
  raw.local_rank = local_rank ? *local_rank : raw.rank;
  raw.local_world = local_world ? *local_world : raw.world;
  if (group_rank) {
    raw.group_rank = *group_rank;
  } else if (raw.local_world.value > 0) {
    raw.group_rank = Field{raw.rank.value / raw.local_world.value, {}};
  }
}

RawInfo read_torchrun() {
  RawInfo raw;
  std::optional<Field> rank = read_int("RANK"), world = read_int("WORLD_SIZE");
  raw.rank = require(rank, "RANK", "WORLD_SIZE");
  raw.world = require(world, "WORLD_SIZE", "RANK");
  fill_defaults(raw, read_int("LOCAL_RANK"), read_int("LOCAL_WORLD_SIZE"), read_int("GROUP_RANK"));
  raw.source = get_env_bool("BRAID_STORE_SERVED_BY_LAUNCHER", false) ? "braid launch" : "torchrun";
  return raw;
}

RawInfo read_openmpi() {
  RawInfo raw;
  std::optional<Field> rank = read_int("OMPI_COMM_WORLD_RANK");
  std::optional<Field> world = read_int("OMPI_COMM_WORLD_SIZE");
  raw.rank = require(rank, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE");
  raw.world = require(world, "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK");
  fill_defaults(raw, read_int("OMPI_COMM_WORLD_LOCAL_RANK"), read_int("OMPI_COMM_WORLD_LOCAL_SIZE"),
                std::nullopt);
  raw.source = "openmpi";
  raw.mpi_launcher = true;
  return raw;
}

RawInfo read_pmi() {
  RawInfo raw;
  std::optional<Field> rank = read_int("PMI_RANK"), world = read_int("PMI_SIZE");
  raw.rank = require(rank, "PMI_RANK", "PMI_SIZE");
  raw.world = require(world, "PMI_SIZE", "PMI_RANK");
  fill_defaults(raw, read_first({"MPI_LOCALRANKID", "PMI_LOCAL_RANK"}),
                read_first({"MPI_LOCALNRANKS", "PMI_LOCAL_SIZE"}), std::nullopt);
  raw.source = "pmi";
  raw.mpi_launcher = true;
  return raw;
}

// Slurm writes tasks per node compressed: "2(x3),1" means nodes 0-2 run 2 tasks, node 3 one.
// Returns the count for `node`, or nullopt when the list does not reach that node.
std::optional<int> slurm_tasks_on_node(std::string_view name, const std::string& text, int node) {
  auto bad = [&](std::string_view why) {
    BRAID_FAIL(kInvalidArgument, "environment variable ", name, "='", text, "' does not parse (",
               why, "): expected a list like '2(x3),1'");
  };
  size_t pos = 0;
  int first_node = 0;
  while (pos < text.size()) {
    size_t end = text.find(',', pos);
    std::string item = text.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    pos = end == std::string::npos ? text.size() : end + 1;
    int count = 0, repeat = 1;
    size_t used = 0;
    try {
      count = std::stoi(item, &used);
      if (used < item.size()) {
        if (item.compare(used, 2, "(x") != 0 || item.back() != ')') bad("item '" + item + "'");
        size_t used_repeat = 0;
        std::string inner = item.substr(used + 2, item.size() - used - 3);
        repeat = std::stoi(inner, &used_repeat);
        if (used_repeat != inner.size()) bad("item '" + item + "'");
      }
    } catch (const std::logic_error&) {
      bad("item '" + item + "'");
    }
    if (count < 1 || repeat < 1) bad("item '" + item + "'");
    if (node < first_node + repeat) return count;
    first_node += repeat;
  }
  return std::nullopt;
}

RawInfo read_slurm() {
  RawInfo raw;
  std::optional<Field> rank = read_int("SLURM_PROCID");
  std::optional<Field> world = read_first({"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"});
  raw.rank = require(rank, "SLURM_PROCID", "SLURM_NTASKS");
  raw.world = require(world, "SLURM_NTASKS", "SLURM_PROCID");
  std::optional<Field> node = read_int("SLURM_NODEID");
  std::optional<Field> local_world;
  for (std::string_view name : {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
    std::optional<std::string> text = get_env_string(name);
    if (!text || text->empty()) continue;
    if (std::optional<int> n = slurm_tasks_on_node(name, *text, node ? node->value : 0)) {
      local_world = Field{*n, std::string(name)};
    }
    break;
  }
  if (!local_world) local_world = read_int("SLURM_NTASKS_PER_NODE");
  fill_defaults(raw, read_int("SLURM_LOCALID"), local_world, node);
  raw.source = "slurm";
  const std::string mpi_type = get_env_string("SLURM_MPI_TYPE", "");  // srun --mpi=<plugin>
  raw.mpi_launcher = !mpi_type.empty() && mpi_type != "none";
  return raw;
}

bool any_set(std::initializer_list<std::string_view> names) {
  for (std::string_view name : names) {
    std::optional<std::string> v = get_env_string(name);
    if (v && !v->empty()) return true;
  }
  return false;
}

// A field's name for messages: the variable, or "(derived)" when it was not read.
std::string label(const Field& f) {
  return f.name.empty() ? std::string("(derived)") : f.name;
}

void validate(const RawInfo& raw) {
  BRAID_CHECK(raw.world.value >= 1, kInvalidArgument, "environment variable ", label(raw.world),
              "=", raw.world.value, " (", raw.source, "): expected a world size of at least 1");
  BRAID_CHECK(raw.rank.value < raw.world.value, kInvalidArgument, "environment variable ",
              label(raw.rank), "=", raw.rank.value, " is not below ", label(raw.world), "=",
              raw.world.value, " (", raw.source, "): expected a rank in [0, world size)");
  BRAID_CHECK(raw.local_world.value >= 1 && raw.local_world.value <= raw.world.value,
              kInvalidArgument, "environment variable ", label(raw.local_world), "=",
              raw.local_world.value, " (", raw.source, "): expected a local world size in [1, ",
              raw.world.value, "]");
  BRAID_CHECK(raw.local_rank.value < raw.local_world.value, kInvalidArgument,
              "environment variable ", label(raw.local_rank), "=", raw.local_rank.value,
              " is not below ", label(raw.local_world), "=", raw.local_world.value, " (",
              raw.source, "): expected a local rank in [0, local world size)");
  BRAID_CHECK(raw.local_rank.value <= raw.rank.value, kInvalidArgument, "environment variable ",
              label(raw.local_rank), "=", raw.local_rank.value, " is above ", label(raw.rank), "=",
              raw.rank.value, " (", raw.source, "): a local rank cannot exceed the global rank");
}

}  // namespace

RankInfo detect_rank_info() {
  RawInfo raw;
  if (any_set({"RANK", "WORLD_SIZE"})) {
    raw = read_torchrun();
  } else if (any_set({"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"})) {
    raw = read_openmpi();
  } else if (any_set({"PMI_RANK", "PMI_SIZE"})) {
    raw = read_pmi();
  } else if (any_set({"SLURM_PROCID"})) {
    raw = read_slurm();
  } else {
    raw = RawInfo{{0, {}}, {1, {}}, {0, {}}, {1, {}}, {0, {}}, "single process"};
  }
  validate(raw);

  RankInfo info;
  info.rank = raw.rank.value;
  info.world_size = raw.world.value;
  info.local_rank = raw.local_rank.value;
  info.local_world_size = raw.local_world.value;
  info.group_rank = raw.group_rank.value;
  info.source = raw.source;
  info.mpi_launcher = raw.mpi_launcher;
  std::string addr = get_env_string("MASTER_ADDR", "");
  if (!addr.empty()) info.master_addr = addr;
  int64_t port = get_env_int("MASTER_PORT", info.master_port);
  BRAID_CHECK(port >= 1 && port <= 65535, kInvalidArgument,
              "environment variable MASTER_PORT=", port, ": expected a TCP port in [1, 65535]");
  info.master_port = static_cast<int>(port);
  return info;
}

int default_device_index(int local_rank, int device_count) {
  BRAID_CHECK(device_count > 0, kNotSupported, "no GPU is visible to this process (device count ",
              device_count, "); expected at least one for local rank ", local_rank);
  if (local_rank < device_count) return local_rank;
  if (device_count == 1) return 0;  // one device per rank (CUDA_VISIBLE_DEVICES per rank)
  BRAID_FAIL(kNotSupported, "local rank ", local_rank,
             " (LOCAL_RANK) has no GPU of its own: ", device_count,
             " are visible to this process; expected LOCAL_RANK below the device ",
             "count, or exactly one visible device per rank");
}

}  // namespace braid
