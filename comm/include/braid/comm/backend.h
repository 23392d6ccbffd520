// SPDX-License-Identifier: Apache-2.0
// Backend: the plug-in point under ProcessGroup (design.md, "ProcessGroup / Backend").
// A backend serves one group of processes; the front has already validated the call
// (shapes, counts, dtypes, root, peer), resolved its timeout and given it a sequence number
// and signature. Capabilities are data (STYLE.md rule 1), not methods that throw.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "braid/comm/types.h"

namespace braid {

class Store;

struct BackendCapabilities {
  std::vector<DeviceType> devices;          // memory types it reads and writes
  std::vector<DType> dtypes;                // element types of every collective
  std::vector<CollectiveKind> collectives;  // what it implements
  bool point_to_point = false;              // send / recv
  bool can_allocate_shared = false;         // allocate() hands out zero-copy buffers
  // run() finishes the call before it returns, and any thread may call it (one call at a time
  // per group): the front then runs AsyncOp::kYes calls on the group's own communication
  // thread, so that they overlap the caller's work (docs/comm.md, "Async calls"). A backend
  // with progress of its own (a GPU stream) leaves it false and returns its pending Work.
  bool runs_on_any_thread = false;
};

// How a backend is created for a group.
struct BackendContext {
  std::shared_ptr<Store> store;   // already prefixed for this group
  int rank = 0;                   // rank in the group
  int size = 1;                   // group size
  std::vector<int> global_ranks;  // group rank -> world rank (for error messages)
  std::string job_id;             // first 12 chars of BRAID_STORE_TOKEN, "local" when unset
  std::chrono::milliseconds timeout{0};
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual const BackendCapabilities& capabilities() const = 0;

  // Starts the collective; may complete before returning. Errors discovered while running
  // (peer lost, timeout, cross-rank signature mismatch) surface through the Work.
  virtual std::shared_ptr<Work> run(const CollectiveDesc& desc) = 0;

  // (optional) Memory that collectives on this backend read and write without an extra copy
  // (shm: inside the shared segment). Returns nullptr when unsupported; free with release().
  virtual void* allocate(size_t bytes) { return nullptr; }
  virtual void release(void* ptr) {}
};

using BackendFactory = std::function<std::unique_ptr<Backend>(const BackendContext&)>;

// Registry by name ("shm", "ucx", "hier", "mpi", "nccl"). comm/src/backend_registry.cc is the
// one file that registers the compiled-in backends. In libbraid.so a transport is a plugin,
// loaded by the first create_backend() of one of its backends; backend_names() lists the
// backends of a plugin whose file is there without loading it (docs/layout.md, "Plugins of
// libbraid.so").
void register_backend(std::string name, BackendFactory factory);
std::unique_ptr<Backend> create_backend(std::string_view name, const BackendContext& context);
std::vector<std::string> backend_names();

// The communication part of `braid env`'s report: the backends of this build and the libraries
// they run on as loaded in this process ("ucx: 1.13.1 (built against 1.13; <path>)", "mpi: Open
// MPI v4.1.4, ..."), one "name: text" line each; in libbraid.so, each transport's plugin and
// whether it is loaded. Loads no transport and starts no MPI.
std::string communication_report();

}  // namespace braid
