// `braid launch`'s command line and configuration file (launch_config.h): torchrun's options,
// accelerate launch's file keys, flags over file, one warning per disagreement.
#include "launch/launch_config.h"

#include <sched.h>
#include <unistd.h>

#include <charconv>
#include <iostream>
#include <sstream>

#include "braid/accel/config.h"
#include "braid/core/env_checks.h"
#include "braid/core/error.h"
#include "launch/supervisor.h"

namespace braid::launch {
namespace {

constexpr int kDefaultRdzvPort = 29400;  // torchrun's c10d endpoint default

std::optional<int> parse_int(const std::string& text) {
  int value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || text.empty()) return std::nullopt;
  return value;
}

// A setting from the command line: its value and how the user wrote it ("--nnodes 2"), for
// warnings.
template <typename T>
struct Given {
  T value;
  std::string text;
};

// The file's value for the warning: "num_machines: 2".
template <typename T>
std::string key_text(const char* key, const T& value) {
  std::ostringstream out;
  out << key << ": " << value;
  return out.str();
}

// Flag over file over default; one warning when flag and file disagree.
template <typename T>
T pick(const std::optional<Given<T>>& flag, const std::optional<T>& file, const char* key,
       const T& fallback, const std::string& file_name, std::vector<std::string>& warnings) {
  if (flag) {
    if (file && !(*file == flag->value)) {
      warnings.push_back(flag->text + " overrides " + key_text(key, *file) + " from " + file_name);
    }
    return flag->value;
  }
  return file ? *file : fallback;
}

int nproc_from_flag(const std::string& text, const MachineCounts& counts, std::string& shown) {
  if (std::optional<int> n = parse_int(text)) {
    shown = "--nproc-per-node " + text;
    return *n;  // validate() checks the range
  }
  int n = 0;
  if (text == "auto") {
    n = counts.gpus > 0 ? counts.gpus : counts.cpus;
  } else if (text == "cpu") {
    n = counts.cpus;
  } else if (text == "gpu") {
    BRAID_CHECK(counts.gpus > 0, kInvalidArgument,
                "--nproc-per-node gpu: no CUDA or HIP device is visible; expected a count, "
                "'auto' or 'cpu'");
    n = counts.gpus;
  } else {
    BRAID_FAIL(kInvalidArgument, "--nproc-per-node '", text,
               "': expected a count, 'auto' (GPUs, else CPUs), 'cpu' or 'gpu'");
  }
  shown = "--nproc-per-node " + text + " (" + std::to_string(n) + ")";
  return n;
}

}  // namespace

FileSettings read_file_settings(const std::filesystem::path& path) {
  std::error_code ec;
  BRAID_CHECK(std::filesystem::exists(path, ec), kIo, "--config-file '", path.string(),
              "': no such file; expected a YAML configuration file (docs/config.md)");
  // Absent keys keep these impossible values, so "absent" and "the default" differ.
  accel::AcceleratorConfig c;
  c.num_processes = -1;
  c.num_machines = 0;
  c.machine_rank = -1;
  accel::ConfigOptions options;
  options.any_extra_key = true;  // the program's own keys share the file
  try {
    accel::apply_config_file(c, path, options);
  } catch (const Error& e) {
    throw Error(e.kind(), "--config-file '" + path.string() + "': " + e.message());
  }
  FileSettings s;
  if (c.num_processes > 0) s.num_processes = c.num_processes;
  if (c.num_machines > 0) s.num_machines = c.num_machines;
  if (c.machine_rank >= 0) s.machine_rank = c.machine_rank;
  if (!c.main_process_ip.empty()) s.main_process_ip = c.main_process_ip;
  s.main_process_port = c.main_process_port;
  if (!c.gpu_ids.empty() && c.gpu_ids != "all") s.gpu_ids = c.gpu_ids;
  return s;
}

MachineCounts machine_counts() {
  MachineCounts counts;
  counts.gpus = device_count(DeviceType::kCUDA);
  if (counts.gpus == 0) counts.gpus = device_count(DeviceType::kHIP);
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) {
    counts.cpus = CPU_COUNT(&set);
  } else {  // more CPUs than a cpu_set_t holds
    counts.cpus = static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  }
  if (counts.cpus < 1) counts.cpus = 1;
  return counts;
}

std::pair<std::string, int> parse_rdzv_endpoint(const std::string& endpoint) {
  std::string host = endpoint, port_text;
  if (!endpoint.empty() && endpoint.front() == '[') {  // [IPv6]:PORT
    size_t close = endpoint.find(']');
    BRAID_CHECK(close != std::string::npos, kInvalidArgument, "--rdzv-endpoint '", endpoint,
                "': no ']' after an IPv6 address; expected [ADDRESS]:PORT");
    host = endpoint.substr(1, close - 1);
    std::string rest = endpoint.substr(close + 1);
    BRAID_CHECK(rest.empty() || rest.front() == ':', kInvalidArgument, "--rdzv-endpoint '",
                endpoint, "': expected [ADDRESS]:PORT");
    if (!rest.empty()) port_text = rest.substr(1);
  } else if (size_t colon = endpoint.rfind(':'); colon != std::string::npos) {
    host = endpoint.substr(0, colon);
    port_text = endpoint.substr(colon + 1);
  }
  int port = kDefaultRdzvPort;
  if (!port_text.empty() || endpoint.ends_with(':')) {
    std::optional<int> p = parse_int(port_text);
    BRAID_CHECK(p && *p >= 1 && *p <= 65535, kInvalidArgument, "--rdzv-endpoint '", endpoint,
                "': port '", port_text, "' is not a TCP port in [1, 65535]; expected HOST[:PORT]");
    port = *p;
  }
  BRAID_CHECK(!host.empty(), kInvalidArgument, "--rdzv-endpoint '", endpoint,
              "': no host; expected HOST[:PORT]");
  return {host, port};
}

ResolvedLaunch resolve_launch(const LaunchFlags& flags, const std::optional<FileSettings>& file,
                              const MachineCounts& counts) {
  ResolvedLaunch r;
  r.options = flags.base;
  const FileSettings f = file.value_or(FileSettings{});
  const std::string& name = flags.base.config_file;

  if (flags.rdzv_backend) {
    BRAID_CHECK(*flags.rdzv_backend == "c10d" || *flags.rdzv_backend == "static", kInvalidArgument,
                "--rdzv-backend '", *flags.rdzv_backend,
                "': braid launch serves its own store; expected c10d or static");
  }

  std::optional<Given<int>> nnodes, node_rank, port;
  std::optional<Given<std::string>> addr;
  if (flags.nnodes) nnodes = Given<int>{*flags.nnodes, "--nnodes " + std::to_string(*flags.nnodes)};
  if (flags.node_rank) {
    node_rank = Given<int>{*flags.node_rank, "--node-rank " + std::to_string(*flags.node_rank)};
  }
  if (flags.master_addr)
    addr = Given<std::string>{*flags.master_addr, "--master-addr " + *flags.master_addr};
  if (flags.master_port) {
    port = Given<int>{*flags.master_port, "--master-port " + std::to_string(*flags.master_port)};
  }
  if (flags.rdzv_endpoint) {
    auto [host, p] = parse_rdzv_endpoint(*flags.rdzv_endpoint);
    std::string text = "--rdzv-endpoint " + *flags.rdzv_endpoint;
    BRAID_CHECK(!addr || addr->value == host, kInvalidArgument, text, " disagrees with ",
                addr ? addr->text : "", "; expected one of them, or the same host");
    BRAID_CHECK(!port || port->value == p, kInvalidArgument, text, " disagrees with ",
                port ? port->text : "", "; expected one of them, or the same port");
    addr = Given<std::string>{host, text};
    port = Given<int>{p, text};
  }
  if (flags.standalone) {
    BRAID_CHECK(!nnodes || nnodes->value == 1, kInvalidArgument, "--standalone with ",
                nnodes ? nnodes->text : "",
                ": --standalone is one node; expected --nnodes 1 or no --nnodes");
    for (const std::string* conflict :
         {addr ? &addr->text : nullptr, port ? &port->text : nullptr}) {
      BRAID_CHECK(conflict == nullptr, kInvalidArgument, "--standalone with ",
                  conflict ? *conflict : "",
                  ": --standalone serves the store on loopback at a free port; expected one of "
                  "them");
    }
    nnodes = Given<int>{1, "--standalone"};
    addr = Given<std::string>{"127.0.0.1", "--standalone"};
    port = Given<int>{0, "--standalone"};
    if (!node_rank) node_rank = Given<int>{0, "--standalone"};
  }

  std::optional<int> file_nodes, file_rank, file_port;
  std::optional<std::string> file_addr;
  if (f.num_machines) file_nodes = static_cast<int>(*f.num_machines);
  if (f.machine_rank) file_rank = static_cast<int>(*f.machine_rank);
  if (f.main_process_port) file_port = static_cast<int>(*f.main_process_port);
  file_addr = f.main_process_ip;
  r.options.nnodes = pick(nnodes, file_nodes, "num_machines", 1, name, r.warnings);
  r.options.node_rank = pick(node_rank, file_rank, "machine_rank", 0, name, r.warnings);
  r.options.master_addr = pick(addr, file_addr, "main_process_ip", std::string(), name, r.warnings);
  r.options.master_port = pick(port, file_port, "main_process_port", 0, name, r.warnings);
  if (f.gpu_ids) r.options.visible_devices = *f.gpu_ids;

  // num_processes is the total over every machine (accelerate launch's meaning); the ranks on
  // this node are that over the nodes.
  std::optional<int> file_nproc;
  std::string file_nproc_text;
  if (f.num_processes) {
    int nodes = r.options.nnodes;
    BRAID_CHECK(flags.nproc_per_node || *f.num_processes % nodes == 0, kInvalidArgument,
                "num_processes: ", *f.num_processes, " in ", name, " does not divide over ", nodes,
                " node(s); expected a multiple of the number "
                "of nodes (the same number of ranks on every node)");
    file_nproc = static_cast<int>(*f.num_processes / nodes);
    file_nproc_text = key_text("num_processes", *f.num_processes);
    if (nodes > 1) {
      file_nproc_text +=
          " (" + std::to_string(*file_nproc) + " per node on " + std::to_string(nodes) + " nodes)";
    }
  }
  if (flags.nproc_per_node) {
    std::string shown;
    int n = nproc_from_flag(*flags.nproc_per_node, counts, shown);
    if (file_nproc && (*f.num_processes % r.options.nnodes != 0 || *file_nproc != n)) {
      r.warnings.push_back(shown + " overrides " + file_nproc_text + " from " + name);
    }
    r.options.nproc_per_node = n;
  } else {
    r.options.nproc_per_node = file_nproc.value_or(1);
  }
  return r;
}

int launch(const LaunchFlags& flags) {
  std::optional<FileSettings> file;
  if (!flags.base.config_file.empty()) file = read_file_settings(flags.base.config_file);
  // Blocked before anything that may start threads (a GPU runtime, for --nproc-per-node auto).
  SignalWatch signals;
  MachineCounts counts;
  if (flags.nproc_per_node && !parse_int(*flags.nproc_per_node)) counts = machine_counts();
  ResolvedLaunch r = resolve_launch(flags, file, counts);
  validate(r.options);
  for (const std::string& w : r.warnings) std::cerr << "braid launch: " << w << '\n';
  return run_job(r.options, signals);
}

}  // namespace braid::launch
