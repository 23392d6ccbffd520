// The backend registry (backend.h): name -> factory. This is the one file that registers the
// compiled-in backends (STYLE.md rule 7); they are added on first use of the registry, so no
// static-initialization order matters and a program that never creates a group pays nothing.
//
// shm is part of braid::comm. The transports are components (comm/CMakeLists.txt): each
// defines an extern "C" entry point that registers its backends, referenced here weakly, so
// a program registers exactly the transports it links.
#include <algorithm>
#include <map>
#include <mutex>
#include <sstream>

#include "braid/comm/backend.h"
#include "braid/core/config.h"
#include "braid/core/error.h"
#include "meta_backend.h"
#include "shm_backend.h"

// The components' entry points (ucx_register.cc, mpi_backend.cc, nccl_backend.cc) and
// version strings: null unless the component is linked.
extern "C" {
[[gnu::weak]] void braid_comm_register_ucx();
[[gnu::weak]] void braid_comm_register_mpi();
[[gnu::weak]] void braid_comm_register_nccl();
}

namespace braid {

[[gnu::weak]] std::string ucx_library_version();
[[gnu::weak]] std::string mpi_library_version();
[[gnu::weak]] std::string nccl_library_version();

namespace {

// A transport the build has but this program did not link: named in create_backend's error.
struct Component {
  const char* backends;  // what it registers
  const char* target;
  bool built;
  void (*entry)();
};
const Component kComponents[] = {
    {"ucx, hier", "braid::comm_ucx", BRAID_HAVE_UCX != 0, &braid_comm_register_ucx},
    {"mpi", "braid::comm_mpi", BRAID_HAVE_MPI != 0, &braid_comm_register_mpi},
    {"nccl", "braid::comm_nccl", BRAID_HAVE_NCCL != 0, &braid_comm_register_nccl},
};

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
  // shm and meta always; each linked transport component through its entry point.
  register_shm_backend();
  register_meta_backend();
  for (const Component& c : kComponents) {
    if (c.entry != nullptr) c.entry();
  }
}

// " (the ucx backend is built but this program does not link braid::comm_ucx ...)" when
// `name` is a transport of this build that was not linked, else "".
std::string unlinked_hint(std::string_view name) {
  for (const Component& c : kComponents) {
    if (!c.built || c.entry != nullptr) continue;
    const std::string_view names = c.backends;
    for (size_t at = 0; at < names.size();) {
      const size_t end = std::min(names.find(", ", at), names.size());
      if (names.substr(at, end - at) == name) {
        return std::string("; the '") + std::string(name) +
               "' backend is built but this program does not link its component: link " + c.target +
               " (braid::braid links every component; docs/layout.md, \"Components\")";
      }
      at = end + 2;
    }
  }
  return "";
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
                name, "' in this program; available: ", joined_names(r), unlinked_hint(name));
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
  if (&ucx_library_version != nullptr) out << "ucx: " << ucx_library_version() << "\n";
  if (&mpi_library_version != nullptr) out << "mpi: " << mpi_library_version() << "\n";
  if (&nccl_library_version != nullptr) out << "nccl: " << nccl_library_version() << "\n";
  for (const Component& c : kComponents) {
    if (c.built && c.entry == nullptr) {
      out << c.backends << ": built, not linked into this program (" << c.target << ")\n";
    }
  }
  return out.str();
}

}  // namespace braid
