// The backend registry (backend.h): name -> factory. This is the one file that registers the
// compiled-in backends (STYLE.md rule 7); they are added on first use of the registry, so no
// static-initialization order matters and a program that never creates a group pays nothing.
//
// shm is part of braid::comm. The transports are components (comm/CMakeLists.txt): each
// defines an extern "C" entry point that registers its backends. A program linked statically
// references them weakly, so it registers exactly the transports it links. In libbraid.so
// (which holds no component) a transport is a plugin beside it, libbraid_comm_<name>.so,
// loaded the first time one of its backends is asked for (braid/core/plugin.h).
#include <algorithm>
#include <array>
#include <atomic>
#include <map>
#include <mutex>
#include <sstream>
#include <vector>

#include "braid/comm/backend.h"
#include "braid/core/config.h"
#include "braid/core/error.h"
#include "braid/core/plugin.h"
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

// Note [MPI's plugin is global]
// Open MPI opens its own components (mca_*.so) with dlopen. Before Open MPI 3.0 those did not
// link libmpi / libopen-pal and took their symbols from the global scope, so a libmpi brought
// in by an RTLD_LOCAL dlopen failed in MPI_Init ("mca_base_component_repository_open: unable
// to open mca_...: undefined symbol"; open-mpi/ompi#3705, fixed by #4140). Debian 12's Open MPI
// 4.1.4 initializes under RTLD_LOCAL (tried: libmpi.so.40 dlopen'd RTLD_LOCAL, MPI_Init under
// mpirun), but older or differently built MPIs do not, and mpi4py keeps re-opening libmpi
// RTLD_GLOBAL for the same reason. So the mpi plugin is loaded RTLD_GLOBAL, which gives libmpi
// the scope it has in a program linked to it. The plugin exports nothing but its entry point
// (bindings/c/plugin.map), so its own symbols interpose on nothing.

// A transport component: registered through its entry point when the program links it, or
// loaded from its plugin beside libbraid.so.
struct Component {
  const char* backends;    // what it registers, ", "-separated
  const char* name;        // "comm_ucx": target braid::comm_ucx, plugin libbraid_comm_ucx.so
  const char* entry_name;  // the extern "C" entry point, for dlsym
  bool built;
  void (*entry)();  // the weak reference: non-null when this program links the component
  PluginScope scope;
};
const Component kComponents[] = {
    {"ucx, hier", "comm_ucx", "braid_comm_register_ucx", BRAID_HAVE_UCX != 0,
     &braid_comm_register_ucx, PluginScope::kLocal},
    {"mpi", "comm_mpi", "braid_comm_register_mpi", BRAID_HAVE_MPI != 0, &braid_comm_register_mpi,
     PluginScope::kGlobal},  // Note [MPI's plugin is global]
    {"nccl", "comm_nccl", "braid_comm_register_nccl", BRAID_HAVE_NCCL != 0,
     &braid_comm_register_nccl, PluginScope::kLocal},
};
constexpr size_t kNumComponents = std::size(kComponents);

// The backends component `c` registers: {"ucx", "hier"}.
std::vector<std::string_view> backends_of(const Component& c) {
  std::vector<std::string_view> out;
  const std::string_view names = c.backends;
  for (size_t at = 0; at < names.size();) {
    const size_t end = std::min(names.find(", ", at), names.size());
    out.push_back(names.substr(at, end - at));
    at = end + 2;
  }
  return out;
}

bool provides(const Component& c, std::string_view name) {
  const std::vector<std::string_view> names = backends_of(c);
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Whether component `c` comes as a plugin: built, not linked into this program, and braid
// runs from libbraid.so.
bool is_plugin(const Component& c) {
  return c.built && c.entry == nullptr && !shared_library_dir().empty();
}

// Each plugin is loaded, and its entry point called, once per process.
enum class PluginState : int { kNotTried, kLoaded, kFailed };
struct PluginSlots {
  std::array<std::once_flag, kNumComponents> once;
  std::array<std::atomic<PluginState>, kNumComponents> state{};
};
PluginSlots& plugin_slots() {
  static PluginSlots slots;
  return slots;
}

// Loads component i's plugin and registers its backends (outside the registry's lock: the
// entry point calls register_backend).
void load_plugin(size_t i) {
  PluginSlots& slots = plugin_slots();
  std::call_once(slots.once[i], [&] {
    const Component& c = kComponents[i];
    const PluginLoad& load = load_component_plugin(c.name, c.entry_name, c.scope);
    if (load.entry == nullptr) {
      slots.state[i].store(PluginState::kFailed);
      return;
    }
    reinterpret_cast<void (*)()>(load.entry)();
    slots.state[i].store(PluginState::kLoaded);
  });
}

PluginState plugin_state(size_t i) {
  return plugin_slots().state[i].load();
}

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

// Why `name` is missing when it is a transport of this build that this program does not have:
// not linked (static), or its plugin did not load (libbraid.so); else "".
std::string unlinked_hint(std::string_view name) {
  for (size_t i = 0; i < kNumComponents; ++i) {
    const Component& c = kComponents[i];
    if (!c.built || c.entry != nullptr || !provides(c, name)) continue;
    if (is_plugin(c)) {
      const PluginLoad& load = load_component_plugin(c.name, c.entry_name, c.scope);
      return std::string("; the '") + std::string(name) + "' backend is built but its plugin " +
             load.path + " could not be loaded: " + load.error +
             " (docs/layout.md, \"Components\")";
    }
    return std::string("; the '") + std::string(name) +
           "' backend is built but this program does not link its component: link braid::" +
           c.name + " (braid::braid links every component; docs/layout.md, \"Components\")";
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

namespace {

// The factory of `name`, or an empty one when no backend of that name is registered.
BackendFactory find_factory(Registry& r, std::string_view name) {
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.factories.find(name);
  return it == r.factories.end() ? BackendFactory() : it->second;
}

}  // namespace

std::unique_ptr<Backend> create_backend(std::string_view name, const BackendContext& context) {
  Registry& r = registry();
  BackendFactory factory = find_factory(r, name);
  if (!factory) {
    // A transport in a plugin is loaded on the first ask for one of its backends.
    for (size_t i = 0; i < kNumComponents; ++i) {
      if (is_plugin(kComponents[i]) && provides(kComponents[i], name)) load_plugin(i);
    }
    factory = find_factory(r, name);
  }
  if (!factory) {
    std::string available;
    {
      std::lock_guard<std::mutex> lock(r.mu);
      available = joined_names(r);
    }
    BRAID_FAIL(kInvalidArgument, "create_backend: no backend named '", name,
               "' in this program; available: ", available, unlinked_hint(name));
  }
  // Outside the lock: a factory may rendezvous through the store for a long time.
  std::unique_ptr<Backend> backend = factory(context);
  BRAID_CHECK(backend != nullptr, kInternal, "backend factory '", name, "' returned null");
  return backend;
}

std::vector<std::string> backend_names() {
  Registry& r = registry();
  std::vector<std::string> names;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    for (const auto& entry : r.factories) names.push_back(entry.first);
  }
  // A plugin not loaded yet is listed by its backends when its file is there; it is loaded
  // when one of them is created. One that failed to load is not listed.
  for (size_t i = 0; i < kNumComponents; ++i) {
    const Component& c = kComponents[i];
    if (!is_plugin(c) || plugin_state(i) != PluginState::kNotTried) continue;
    if (!component_plugin_present(c.name)) continue;
    for (std::string_view name : backends_of(c)) names.emplace_back(name);
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
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
  for (size_t i = 0; i < kNumComponents; ++i) {
    const Component& c = kComponents[i];
    if (!c.built || c.entry != nullptr) continue;
    if (!is_plugin(c)) {
      out << c.backends << ": built, not linked into this program (braid::" << c.name << ")\n";
      continue;
    }
    // Loads nothing: a plugin not asked for yet stays unloaded.
    const std::string path = component_plugin_path(c.name);
    out << c.backends << ": plugin " << path;
    switch (plugin_state(i)) {
      case PluginState::kLoaded:
        out << " (loaded)\n";
        break;
      case PluginState::kFailed:
        out << " (failed to load: " << load_component_plugin(c.name, c.entry_name, c.scope).error
            << ")\n";
        break;
      case PluginState::kNotTried:
        out << (component_plugin_present(c.name) ? " (not loaded yet)\n" : " (missing)\n");
        break;
    }
  }
  return out.str();
}

}  // namespace braid
