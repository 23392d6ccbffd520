// Environment helpers: PurgeAccelerateEnvironment, NUMA affinity through sched_setaffinity and
// the /sys topology (no libnuma or hwloc needed), and the seed's is_*_available checks.
#include "braid/accel/env_utils.h"

#include <sched.h>
#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>

#include "braid/comm/rank_info.h"
#include "braid/core/cpu_features.h"
#include "braid/core/device_runtime.h"
#include "braid/core/error.h"
#include "braid/core/file_util.h"
#include "braid/core/logging.h"

extern char** environ;

namespace braid::accel {

namespace fs = std::filesystem;

// ---- PurgeAccelerateEnvironment ----------------------------------------------------------

namespace {

bool has_prefix(std::string_view name, const std::vector<std::string>& prefixes) {
  return std::any_of(prefixes.begin(), prefixes.end(),
                     [&](const std::string& p) { return name.starts_with(p); });
}

std::vector<std::pair<std::string, std::string>> env_matching(
    const std::vector<std::string>& prefixes) {
  std::vector<std::pair<std::string, std::string>> out;
  for (char** e = environ; e && *e; ++e) {
    const std::string_view entry(*e);
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    if (has_prefix(entry.substr(0, eq), prefixes)) {
      out.emplace_back(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
    }
  }
  return out;
}

}  // namespace

PurgeAccelerateEnvironment::PurgeAccelerateEnvironment(std::vector<std::string> prefixes)
    : prefixes_(std::move(prefixes)), saved_(env_matching(prefixes_)) {
  for (const std::string& p : prefixes_) {
    BRAID_CHECK(!p.empty() && p.find('=') == std::string::npos, kInvalidArgument,
                "PurgeAccelerateEnvironment: prefix '", p, "' must be non-empty without '='");
  }
}

PurgeAccelerateEnvironment::~PurgeAccelerateEnvironment() {
  for (const auto& [name, value] : env_matching(prefixes_)) ::unsetenv(name.c_str());
  for (const auto& [name, value] : saved_) ::setenv(name.c_str(), value.c_str(), 1);
}

// ---- NUMA affinity -----------------------------------------------------------------------

namespace {

// "0-3,8-11\n" -> {0, 1, 2, 3, 8, 9, 10, 11}; "" -> {} (a node without CPUs).
std::vector<int> parse_cpulist(std::string_view text, const std::string& what) {
  std::vector<int> out;
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  size_t pos = 0;
  const auto number = [&](int& value) {
    const auto [end, ec] = std::from_chars(text.data() + pos, text.data() + text.size(), value);
    BRAID_CHECK(ec == std::errc() && value >= 0, kCorruptData, "cpu list '", what, "': '", text,
                "' is not a list of CPU numbers and ranges (e.g. 0-3,8-11)");
    pos = static_cast<size_t>(end - text.data());
  };
  while (pos < text.size()) {
    int first = 0, last = 0;
    number(first);
    last = first;
    if (pos < text.size() && text[pos] == '-') {
      ++pos;
      number(last);
    }
    BRAID_CHECK(last >= first && last - first < (1 << 20), kCorruptData, "cpu list '", what,
                "': bad range ", first, "-", last);
    for (int c = first; c <= last; ++c) out.push_back(c);
    if (pos < text.size()) {
      BRAID_CHECK(text[pos] == ',', kCorruptData, "cpu list '", what, "': '", text,
                  "' is not a list of CPU numbers and ranges (e.g. 0-3,8-11)");
      ++pos;
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<int> current_affinity() {
  std::vector<int> out;
  for (int ncpu = 1024; ncpu <= (1 << 16); ncpu *= 2) {
    cpu_set_t* set = CPU_ALLOC(ncpu);
    const size_t bytes = CPU_ALLOC_SIZE(ncpu);
    CPU_ZERO_S(bytes, set);
    if (::sched_getaffinity(0, bytes, set) == 0) {
      for (int c = 0; c < ncpu; ++c) {
        if (CPU_ISSET_S(c, bytes, set)) out.push_back(c);
      }
      CPU_FREE(set);
      return out;
    }
    const int err = errno;
    CPU_FREE(set);
    BRAID_CHECK(err == EINVAL, kIo, "sched_getaffinity: ", std::strerror(err));
  }
  BRAID_FAIL(kIo, "sched_getaffinity: more than 65536 CPUs");
}

}  // namespace

std::vector<NumaNode> numa_nodes(const fs::path& sysfs_node_dir) {
  std::vector<NumaNode> out;
  std::error_code ec;
  if (fs::is_directory(sysfs_node_dir, ec)) {
    for (const auto& entry : fs::directory_iterator(sysfs_node_dir)) {
      const std::string name = entry.path().filename().string();
      if (!name.starts_with("node") || name.size() == 4) continue;
      int id = -1;
      const auto [end, err] = std::from_chars(name.data() + 4, name.data() + name.size(), id);
      if (err != std::errc() || end != name.data() + name.size()) continue;
      const fs::path list = entry.path() / "cpulist";
      if (!fs::exists(list)) continue;
      NumaNode node{id, parse_cpulist(read_file(list), list.string())};
      if (!node.cpus.empty()) out.push_back(std::move(node));
    }
  }
  if (out.empty()) {
    const fs::path online = "/sys/devices/system/cpu/online";
    std::vector<int> cpus = fs::exists(online, ec)
                                ? parse_cpulist(read_file(online), online.string())
                                : current_affinity();
    out.push_back(NumaNode{0, std::move(cpus)});
  }
  std::sort(out.begin(), out.end(),
            [](const NumaNode& a, const NumaNode& b) { return a.id < b.id; });
  return out;
}

const NumaNode& numa_node_for(const std::vector<NumaNode>& nodes, int local_process_index,
                              int local_world_size) {
  BRAID_CHECK(!nodes.empty(), kInvalidArgument, "numa affinity: no NUMA node has CPUs");
  BRAID_CHECK(local_world_size >= 1, kInvalidArgument, "numa affinity: local world size ",
              local_world_size, " must be at least 1");
  BRAID_CHECK(local_process_index >= 0 && local_process_index < local_world_size, kInvalidArgument,
              "numa affinity: local process index ", local_process_index, " is not in [0, ",
              local_world_size, ") (", nodes.size(), " NUMA node", nodes.size() == 1 ? "" : "s",
              " with CPUs)");
  const auto node = static_cast<size_t>(static_cast<int64_t>(local_process_index) *
                                        static_cast<int64_t>(nodes.size()) / local_world_size);
  return nodes[node];
}

std::vector<int> override_numa_affinity(int local_process_index, std::optional<bool> verbose,
                                        std::optional<int> local_world_size) {
  const std::vector<NumaNode> nodes = numa_nodes();
  int size = static_cast<int>(nodes.size());
  if (local_world_size) {
    size = *local_world_size;
  } else if (const RankInfo info = detect_rank_info(); info.source != "single process") {
    size = info.local_world_size;
  }
  const NumaNode& node = numa_node_for(nodes, local_process_index, size);
  const int ncpu = node.cpus.back() + 1;
  cpu_set_t* set = CPU_ALLOC(ncpu);
  const size_t bytes = CPU_ALLOC_SIZE(ncpu);
  CPU_ZERO_S(bytes, set);
  for (int c : node.cpus) CPU_SET_S(c, bytes, set);
  const int rc = ::sched_setaffinity(0, bytes, set);
  const int err = errno;
  CPU_FREE(set);
  BRAID_CHECK(rc == 0, kIo, "sched_setaffinity to NUMA node ", node.id, " (", node.cpus.size(),
              " CPUs) for local process ", local_process_index, ": ", std::strerror(err));
  std::vector<int> now = current_affinity();
  if (verbose.value_or(get_env_bool("BRAID_DEBUG_MODE", false))) {
    std::ostringstream list;
    for (size_t i = 0; i < now.size(); ++i) list << (i ? "," : "") << now[i];
    BRAID_LOG(kInfo) << "assigning " << now.size() << " cpu cores of NUMA node " << node.id
                     << " to process " << local_process_index << ": " << list.str();
  }
  return now;
}

std::vector<int> set_numa_affinity(int local_process_index, std::optional<bool> verbose,
                                   std::optional<int> local_world_size) {
  static std::mutex mu;
  static std::map<int, std::vector<int>> done;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = done.find(local_process_index); it != done.end()) return it->second;
  std::vector<int> cpus = override_numa_affinity(local_process_index, verbose, local_world_size);
  done.emplace(local_process_index, cpus);
  return cpus;
}

// ---- environment checks ------------------------------------------------------------------

Bf16Support bf16_support() {
  return braid::is_bf16_available() ? Bf16Support::kNative : Bf16Support::kEmulated;
}

bool is_bf16_available(bool /*ignore_tpu*/) {
  const int n = device_count(DeviceType::kCUDA);
  if (n == 0) return true;  // CPU ranks: natively or through the f32 path
  for (int i = 0; i < n; ++i) {
    try {
      if (device_runtime(DeviceType::kCUDA).properties(i).compute_major >= 8) return true;
    } catch (const Error&) {
      // A device that cannot report its properties is not counted.
    }
  }
  return false;
}

bool is_npu_available(bool /*check_device*/) {
  return false;
}
bool is_mps_available() {
  return false;
}
bool is_torch_xla_available(bool /*check_is_tpu*/, bool /*check_is_gpu*/) {
  return false;
}
bool is_xpu_available(bool /*check_device*/) {
  return braid::is_xpu_available();
}

std::vector<BackendAvailability> accelerator_availability() {
  const auto gpu = [](std::string name, DeviceType type, bool built, const char* missing) {
    BackendAvailability b{std::move(name), device_count(type) > 0, ""};
    if (!b.available) {
      b.reason = built ? "the runtime is built but this process sees no device" : missing;
    }
    return b;
  };
  std::vector<BackendAvailability> out;
  out.push_back(gpu("cuda", DeviceType::kCUDA, is_runtime_built(DeviceType::kCUDA),
                    "not built: configure with -DBRAID_WITH_CUDA=ON where the CUDA toolkit is "
                    "installed"));
  out.push_back(gpu("hip", DeviceType::kHIP, is_runtime_built(DeviceType::kHIP),
                    "not built: configure with -DBRAID_WITH_HIP=ON where ROCm / HIP is installed"));
  out.push_back(gpu("xpu", DeviceType::kXPU, is_runtime_built(DeviceType::kXPU),
                    "braid has an xpu device slot but no SYCL runtime yet"));
  out.push_back({"npu", false, "braid has no Ascend NPU runtime (torch_npu / CANN)"});
  out.push_back({"mps", false, "braid has no Apple Metal runtime and builds for Linux"});
  out.push_back({"xla", false, "braid has no XLA / TPU runtime (torch_xla)"});
  return out;
}

}  // namespace braid::accel
