// Loading a component's plugin beside libbraid.so (braid/core/plugin.h; docs/layout.md,
// "Components"). The one place that calls dlopen for braid's components: the three registries
// (backends, device runtimes, kernel tables) ask here.
#include "braid/core/plugin.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

namespace braid {
namespace {

// Whether `file` names libbraid.so itself (libbraid.so, libbraid.so.0, libbraid.so.0.1.0), not
// one of the per-layer libraries (libbraid_core.so) nor a program.
bool is_libbraid(std::string_view file) {
  const size_t slash = file.rfind('/');
  const std::string_view name = slash == std::string_view::npos ? file : file.substr(slash + 1);
  return name.starts_with("libbraid.so");
}

std::string find_shared_library_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&shared_library_dir), &info) == 0 ||
      info.dli_fname == nullptr || !is_libbraid(info.dli_fname)) {
    return "";
  }
  // The loader records the path it found, which is relative when the search path was
  // (LD_LIBRARY_PATH=lib): made absolute, so that a later chdir does not lose the plugins.
  char* real = realpath(info.dli_fname, nullptr);
  std::string file = real != nullptr ? real : info.dli_fname;
  std::free(real);
  const size_t slash = file.rfind('/');
  return slash == std::string::npos ? std::string(".") : file.substr(0, slash);
}

struct Plugins {
  // Recursive: a plugin's static initializers, run by dlopen under this lock, may ask for
  // another component (none does today) without deadlocking.
  std::recursive_mutex mu;
  // One entry per component asked for; std::map keeps the references it hands out valid.
  std::map<std::string, std::unique_ptr<PluginLoad>, std::less<>> loads;
};

Plugins& plugins() {
  static Plugins* p = new Plugins;  // never destroyed: plugins are never unloaded either
  return *p;
}

PluginLoad load(std::string_view component, const char* entry, PluginScope scope) {
  PluginLoad result;
  result.path = component_plugin_path(component);
  if (result.path.empty()) {
    result.error = "braid is linked statically into this program, which loads no plugin";
    return result;
  }
  const int flags = RTLD_NOW | (scope == PluginScope::kGlobal ? RTLD_GLOBAL : RTLD_LOCAL);
  void* handle = dlopen(result.path.c_str(), flags);
  if (handle == nullptr) {
    const char* why = dlerror();
    result.error = why != nullptr ? why : "dlopen failed";
    return result;
  }
  dlerror();  // clear, so that a null symbol is told apart from a failure
  void* symbol = dlsym(handle, entry);
  if (symbol == nullptr) {
    const char* why = dlerror();
    result.error =
        std::string("it has no entry point ") + entry + (why ? std::string(": ") + why : "");
    // Not dlclose'd: a half-usable plugin stays loaded rather than unmapped under anyone.
    return result;
  }
  result.entry = symbol;
  return result;
}

}  // namespace

const std::string& shared_library_dir() {
  static const std::string dir = find_shared_library_dir();
  return dir;
}

namespace {
// Found when the library is loaded, before the program can change its working directory.
[[maybe_unused]] const std::string& dir_at_load = shared_library_dir();
}  // namespace

std::string component_plugin_path(std::string_view component) {
  const std::string& dir = shared_library_dir();
  if (dir.empty()) return "";
  return dir + "/libbraid_" + std::string(component) + ".so";
}

bool component_plugin_present(std::string_view component) {
  const std::string path = component_plugin_path(component);
  return !path.empty() && access(path.c_str(), R_OK) == 0;
}

const PluginLoad& load_component_plugin(std::string_view component, const char* entry,
                                        PluginScope scope) {
  Plugins& p = plugins();
  // Held while loading: a second thread asking for the same (or another) plugin waits for the
  // first load instead of loading twice. The entry point is called by the caller, after this
  // returns and outside this lock.
  std::lock_guard<std::recursive_mutex> lock(p.mu);
  auto it = p.loads.find(component);
  if (it == p.loads.end()) {
    auto loaded = std::make_unique<PluginLoad>(load(component, entry, scope));
    it = p.loads.emplace(std::string(component), std::move(loaded)).first;
  }
  return *it->second;
}

bool component_plugin_loaded(std::string_view component) {
  Plugins& p = plugins();
  std::lock_guard<std::recursive_mutex> lock(p.mu);
  auto it = p.loads.find(component);
  return it != p.loads.end() && it->second->entry != nullptr;
}

}  // namespace braid
