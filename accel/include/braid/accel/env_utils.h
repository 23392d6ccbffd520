// SPDX-License-Identifier: Apache-2.0
// Environment helpers of the seed ("Environment checks", "Environment manipulation"; Accelerate's
// utils/environment.py and utils/imports.py): scopes that patch, clear or purge environment
// variables, NUMA affinity for the processes of one node, and what this build and machine can
// run (docs/big-model.md, "Environment helpers").
//
//   {
//     braid::accel::PatchEnvironment env{{"braid_log_level", "debug"}, {"world_size", 4}};
//     ...  // BRAID_LOG_LEVEL=debug, WORLD_SIZE=4
//   }      // both back to what they were (or unset)
//   std::vector<int> cpus = braid::accel::set_numa_affinity(info.local_rank);
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "braid/core/env_checks.h"
#include "braid/core/environment.h"

namespace braid::accel {

// ---- changing the environment ------------------------------------------------------------

// The seed's patch_environment and clear_environment are braid's core scopes (one
// implementation): keys upper-cased, values as Python's str(), everything restored on exit.
using braid::ClearEnvironment;
using braid::EnvValue;
using braid::PatchEnvironment;

// The seed's purge_accelerate_environment, as a scope: on exit every variable whose name starts
// with one of `prefixes` is put back as it was on entry — set ones restored, new ones removed,
// removed ones set again. The default prefixes are Accelerate's ("ACCELERATE_") and braid's own
// configuration ("BRAID_"); launcher variables (RANK, WORLD_SIZE, ...) are left alone, as in
// Accelerate. Use it around a test body or a call that may set configuration variables.
class PurgeAccelerateEnvironment {
 public:
  explicit PurgeAccelerateEnvironment(std::vector<std::string> prefixes = {"ACCELERATE_",
                                                                           "BRAID_"});
  ~PurgeAccelerateEnvironment();
  PurgeAccelerateEnvironment(const PurgeAccelerateEnvironment&) = delete;
  PurgeAccelerateEnvironment& operator=(const PurgeAccelerateEnvironment&) = delete;

 private:
  std::vector<std::string> prefixes_;
  std::vector<std::pair<std::string, std::string>> saved_;
};

// ---- NUMA affinity -----------------------------------------------------------------------

struct NumaNode {
  int id = 0;
  std::vector<int> cpus;  // sorted
};

// The NUMA nodes that have CPUs, read from `<sysfs_node_dir>/node<N>/cpulist`. Without that
// folder (a kernel without NUMA) one node 0 holding the online CPUs
// (/sys/devices/system/cpu/online, else the CPUs this process may run on). kCorruptData naming
// the file for a cpulist that does not parse.
std::vector<NumaNode> numa_nodes(
    const std::filesystem::path& sysfs_node_dir = "/sys/devices/system/node");

// The node process `local_process_index` of `local_world_size` is bound to: consecutive indices
// share a node, and the processes are spread evenly (node = index * nodes / local_world_size).
// kInvalidArgument when the index is not in [0, local_world_size) or the size is < 1.
const NumaNode& numa_node_for(const std::vector<NumaNode>& nodes, int local_process_index,
                              int local_world_size);

// The seed's override_numa_affinity: binds this process (sched_setaffinity) to the CPUs of its
// node and returns the CPUs it may run on afterwards. local_world_size: the launcher's
// (detect_rank_info) when one started the job, else the number of nodes — so a single process
// picks a node by index, and an index past the last node is an error. verbose (default
// BRAID_DEBUG_MODE, Accelerate's ACCELERATE_DEBUG_MODE) logs the assignment at info level.
// On a GPU rank Accelerate asks NVML for the GPU's CPUs; braid binds by node index (the GPU's
// own node is not read yet). kIo naming the errno text when the OS refuses the mask.
std::vector<int> override_numa_affinity(int local_process_index,
                                        std::optional<bool> verbose = std::nullopt,
                                        std::optional<int> local_world_size = std::nullopt);
// The seed's set_numa_affinity: override_numa_affinity once per index per process; later calls
// with the same index return the first call's CPUs without touching the affinity again.
std::vector<int> set_numa_affinity(int local_process_index,
                                   std::optional<bool> verbose = std::nullopt,
                                   std::optional<int> local_world_size = std::nullopt);

// ---- environment checks ------------------------------------------------------------------

// How bf16 runs here. kNative: the CPU has AVX512_BF16 or a cuda device has compute capability
// 8.0+ (braid::is_bf16_available()). kEmulated: bf16 storage with f32 arithmetic, the path
// braid's CPU kernels take on every other x86-64 CPU (same results, slower).
enum class Bf16Support : uint8_t { kNative, kEmulated };
Bf16Support bf16_support();

// The seed's is_bf16_available, with Accelerate's meaning: bf16 mixed precision can run. On the
// CPU it always can (natively or emulated), as torch's CPU bf16 always can; on a machine whose
// GPUs all lack bf16 (compute capability < 8) it is false. ignore_tpu: no TPU in braid.
bool is_bf16_available(bool ignore_tpu = false);

// Accelerators braid has no runtime for: always false. The reason says why and what would be
// needed (unavailable_reason).
bool is_npu_available(bool check_device = false);  // Ascend NPU (torch_npu)
bool is_mps_available();                           // Apple Metal
bool is_torch_xla_available(bool check_is_tpu = false, bool check_is_gpu = false);  // TPU / XLA
// Intel XPU: braid's xpu slot (core/device.h) — false until a SYCL runtime is built.
bool is_xpu_available(bool check_device = false);

struct BackendAvailability {
  std::string name;  // "cuda", "hip", "xpu", "npu", "mps", "xla"
  bool available = false;
  std::string reason;  // empty when available
};
// Every accelerator name Accelerate checks, with braid's answer and why.
std::vector<BackendAvailability> accelerator_availability();

}  // namespace braid::accel
