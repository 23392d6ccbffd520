// Job setup for `braid launch` (job.h): option checks, the token, per-rank variables,
// program lookup and shared-memory cleanup.
#include "launch/job.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <sstream>
#include <system_error>

#include "braid/comm/tcp_store.h"
#include "braid/core/environment.h"
#include "braid/core/error.h"

namespace braid::launch {
namespace {

constexpr size_t kShmTokenChars = 12;
constexpr int kMaxProcPerNode = 4096;
constexpr double kMaxGraceSeconds = 3600.0;
constexpr int kMaxRestarts = 1000000;

std::string seconds_text(double seconds) {
  std::ostringstream out;
  out << std::setprecision(15) << seconds;
  return out.str();
}

bool valid_token_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

}  // namespace

void validate(const LaunchOptions& o) {
  BRAID_CHECK(o.nproc_per_node >= 1 && o.nproc_per_node <= kMaxProcPerNode, kInvalidArgument,
              "--nproc-per-node ", o.nproc_per_node, ": expected a count in [1, ", kMaxProcPerNode,
              "]");
  BRAID_CHECK(o.nnodes >= 1, kInvalidArgument, "--nnodes ", o.nnodes, ": expected at least 1 node");
  BRAID_CHECK(o.node_rank >= 0 && o.node_rank < o.nnodes, kInvalidArgument, "--node-rank ",
              o.node_rank, ": expected a node index in [0, --nnodes ", o.nnodes, ")");
  BRAID_CHECK(o.master_port >= 0 && o.master_port <= 65535, kInvalidArgument, "--master-port ",
              o.master_port, ": expected a TCP port in [1, 65535], or 0 to pick a free one");
  if (o.nnodes > 1) {
    BRAID_CHECK(!o.master_addr.empty() && o.master_port != 0, kInvalidArgument, "--nnodes ",
                o.nnodes, " needs --master-addr and a non-zero --master-port (given: '",
                o.master_addr, "', ", o.master_port, "): every node must find node 0's store");
  }
  if (o.timeout_s) {
    BRAID_CHECK(std::isfinite(*o.timeout_s) && *o.timeout_s > 0, kInvalidArgument, "--timeout ",
                *o.timeout_s, ": expected a positive number of seconds");
  }
  BRAID_CHECK(std::isfinite(o.grace_period_s) && o.grace_period_s >= 0 &&
                  o.grace_period_s <= kMaxGraceSeconds,
              kInvalidArgument, "--grace-period ", o.grace_period_s, ": expected seconds in [0, ",
              kMaxGraceSeconds, "]");
  BRAID_CHECK(o.max_restarts >= 0 && o.max_restarts <= kMaxRestarts, kInvalidArgument,
              "--max-restarts ", o.max_restarts, ": expected a count in [0, ", kMaxRestarts, "]");
  // Note [Restarts on one node]: each node's launcher would restart its own ranks on its own,
  // with nothing to make the nodes agree on the attempt (torchrun's elastic agent has a
  // rendezvous round for that), so a restart is only offered where one launcher holds every rank.
  BRAID_CHECK(o.max_restarts == 0 || o.nnodes == 1, kInvalidArgument, "--max-restarts ",
              o.max_restarts, " with --nnodes ", o.nnodes,
              ": restarts are built for one node only; expected --max-restarts 0 or --nnodes 1");
  BRAID_CHECK(
      !o.command.empty() && !o.command.front().empty(), kInvalidArgument,
      "braid launch: no program given: expected 'braid launch [options] program [args...]'");
}

std::string job_token_for(const LaunchOptions& options) {
  if (options.nnodes == 1) return generate_store_token();
  std::string token = get_env_string("BRAID_STORE_TOKEN", "");
  BRAID_CHECK(!token.empty(), kInvalidArgument, "--nnodes ", options.nnodes,
              " needs BRAID_STORE_TOKEN set to the same value on every node "
              "(e.g. export BRAID_STORE_TOKEN=$(head -c16 /dev/urandom | xxd -p))");
  BRAID_CHECK(
      token.size() >= kShmTokenChars && std::all_of(token.begin(), token.end(), valid_token_char),
      kInvalidArgument, "BRAID_STORE_TOKEN='", token, "': expected at least ", kShmTokenChars,
      " characters from [A-Za-z0-9_-]");
  return token;
}

std::string shm_prefix(std::string_view token) {
  return "braid-" + std::string(token.substr(0, kShmTokenChars)) + "-";
}

std::vector<std::string> remove_job_shm(std::string_view token, const std::filesystem::path& dir) {
  BRAID_CHECK(token.size() >= kShmTokenChars, kInvalidArgument, "job token '", token,
              "': expected at least ", kShmTokenChars, " characters");
  std::string prefix = shm_prefix(token);
  std::vector<std::string> removed;
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) return removed;  // no /dev/shm: nothing of ours can be there
  for (const auto& entry : it) {
    std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    if (std::filesystem::remove(entry.path(), ec)) removed.push_back(name);
  }
  std::sort(removed.begin(), removed.end());
  return removed;
}

std::vector<std::pair<std::string, std::string>> rank_environment(const LaunchOptions& options,
                                                                  const JobSetup& job,
                                                                  int local_rank) {
  int world = options.nproc_per_node * options.nnodes;
  int rank = options.node_rank * options.nproc_per_node + local_rank;
  std::vector<std::pair<std::string, std::string>> env{
      {"BRAID_STORE_TOKEN", job.token},
      {"GROUP_RANK", std::to_string(options.node_rank)},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(options.nproc_per_node)},
      {"MASTER_ADDR", job.master_addr},
      {"MASTER_PORT", std::to_string(job.master_port)},
      {"RANK", std::to_string(rank)},
      {"WORLD_SIZE", std::to_string(world)},
      {"BRAID_RESTART_COUNT", std::to_string(job.restart_count)},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(job.restart_count)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(options.max_restarts)},
  };
  if (job.store_served) env.emplace_back("BRAID_STORE_SERVED_BY_LAUNCHER", "1");
  if (options.timeout_s) env.emplace_back("BRAID_TIMEOUT", seconds_text(*options.timeout_s));
  if (!options.config_file.empty()) env.emplace_back("BRAID_CONFIG_FILE", options.config_file);
  if (!options.rdzv_id.empty()) env.emplace_back("TORCHELASTIC_RUN_ID", options.rdzv_id);
  if (!options.visible_devices.empty()) {
    env.emplace_back("CUDA_VISIBLE_DEVICES", options.visible_devices);
  }
  std::sort(env.begin(), env.end());
  return env;
}

std::vector<std::string> merge_environment(
    const std::vector<std::string>& base,
    const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::vector<std::string> merged;
  for (const std::string& entry : base) {
    std::string_view name = std::string_view(entry).substr(0, entry.find('='));
    bool replaced = std::any_of(overrides.begin(), overrides.end(),
                                [&](const auto& kv) { return kv.first == name; });
    if (!replaced) merged.push_back(entry);
  }
  for (const auto& [name, value] : overrides) merged.push_back(name + "=" + value);
  return merged;
}

std::string resolve_program(const std::string& program) {
  if (program.find('/') != std::string::npos) {
    BRAID_CHECK(::access(program.c_str(), X_OK) == 0, kInvalidArgument, "program '", program,
                "' cannot be executed: ", std::strerror(errno));
    return program;
  }
  std::string path = get_env_string("PATH", "/usr/local/bin:/usr/bin:/bin");
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t end = path.find(':', pos);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(pos, end - pos);
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0 && !std::filesystem::is_directory(candidate)) {
      return candidate;
    }
    pos = end + 1;
  }
  BRAID_FAIL(kInvalidArgument, "program '", program, "' was not found in PATH ('", path,
             "'): expected an executable name or a path");
}

}  // namespace braid::launch
