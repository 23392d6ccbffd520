// The backend registry (backend.h): name -> factory. This is the one file that registers the
// compiled-in backends (STYLE.md rule 7); they are added on first use of the registry, so no
// static-initialization order matters and a program that never creates a group pays nothing.
#include <algorithm>
#include <map>
#include <mutex>
#include <sstream>

#include "braid/comm/backend.h"
#include "braid/core/config.h"
#include "braid/core/error.h"
#include "shm_backend.h"
#if BRAID_HAVE_MPI
#include "mpi_backend.h"
#endif
#if BRAID_HAVE_NCCL
#include "nccl_backend.h"
#endif
#if BRAID_HAVE_UCX
#include "hier_backend.h"
#include "p2p_collectives.h"
#include "ucx_transport.h"
#endif

namespace braid {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, BackendFactory, std::less<>> factories;
};

// True on the thread running register_builtin_backends, whose register_backend() calls must
// not re-enter the std::call_once that runs it.
thread_local bool registering_builtins = false;

void register_builtin_backends() {
  struct Scope {
    Scope() { registering_builtins = true; }
    ~Scope() { registering_builtins = false; }
  } scope;
  // Backends compiled into this build register here, one line each.
  register_shm_backend();
#if BRAID_HAVE_MPI
  register_mpi_backend();
#endif
#if BRAID_HAVE_NCCL
  register_nccl_backend();
#endif
#if BRAID_HAVE_UCX
  register_backend("ucx", [](const BackendContext& ctx) {
    return p2p::make_p2p_backend("ucx", ctx, make_ucx_transport(ctx));
  });
  register_backend("hier", [](const BackendContext& ctx) {
    return make_hier_backend(ctx, [](const BackendContext& c) { return make_ucx_transport(c); });
  });
#endif
}

Registry& registry() {
  static Registry r;
  static std::once_flag builtins;
  if (!registering_builtins) std::call_once(builtins, register_builtin_backends);
  return r;
}

std::string joined_names(const Registry& r) {
  std::ostringstream out;
  bool first = true;
  for (const auto& [name, factory] : r.factories) {
    out << (first ? "" : ", ") << '\'' << name << '\'';
    first = false;
  }
  return first ? std::string("none") : out.str();
}

}  // namespace

void register_backend(std::string name, BackendFactory factory) {
  BRAID_CHECK(!name.empty(), kInvalidArgument, "register_backend: the backend name is empty");
  BRAID_CHECK(static_cast<bool>(factory), kInvalidArgument, "register_backend('", name,
              "'): the factory is empty");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  BRAID_CHECK(r.factories.find(name) == r.factories.end(), kInvalidArgument,
              "register_backend: a backend named '", name, "' is already registered");
  r.factories.emplace(std::move(name), std::move(factory));
}

std::unique_ptr<Backend> create_backend(std::string_view name, const BackendContext& context) {
  Registry& r = registry();
  BackendFactory factory;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.factories.find(name);
    BRAID_CHECK(it != r.factories.end(), kInvalidArgument, "create_backend: no backend named '",
                name, "' in this build; available: ", joined_names(r));
    factory = it->second;
  }
  // Outside the lock: a factory may rendezvous through the store for a long time.
  std::unique_ptr<Backend> backend = factory(context);
  BRAID_CHECK(backend != nullptr, kInternal, "backend factory '", name, "' returned null");
  return backend;
}

std::vector<std::string> backend_names() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names;
  for (const auto& entry : r.factories) names.push_back(entry.first);
  return names;
}

std::string communication_report() {
  std::ostringstream out;
  out << "comm backends:";
  for (const std::string& name : backend_names()) out << ' ' << name;
  out << "\n";
#if BRAID_HAVE_UCX
  out << "ucx: " << ucx_library_version() << "\n";
#endif
#if BRAID_HAVE_MPI
  out << "mpi: " << mpi_library_version() << "\n";
#endif
#if BRAID_HAVE_NCCL
  out << "nccl: " << nccl_library_version() << "\n";
#endif
  return out.str();
}

}  // namespace braid
