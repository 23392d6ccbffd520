// SPDX-License-Identifier: Apache-2.0
// Components as plugins (docs/layout.md, "Components"): how libbraid.so finds the parts of
// braid that need an outside library (the mpi, ucx and nccl transports, the cuda runtime and
// kernels) without linking that library itself.
//
// A component is found through its extern "C" entry point. A program that links braid
// statically has the entry points it linked (weak references, resolved at link time) and
// never loads anything. libbraid.so holds the layers only; each component is a plugin beside
// it, libbraid_<component>.so, which its registry (comm/src/backend_registry.cc,
// core/src/runtime_registry.cc, kernels/src/table/table_registry.cc) loads with these
// functions the first time something of that component is asked for.
//
// For braid's own registries: not a general plugin interface.
#pragma once

#include <string>
#include <string_view>

namespace braid {

// The directory of the libbraid.so this code runs from (found with dladdr on this very code),
// or "" when braid is linked into the program statically (or as the per-layer shared
// libraries of BUILD_SHARED_LIBS): then no plugin is ever loaded, since a plugin carries no
// layers and would need libbraid.so's.
const std::string& shared_library_dir();

// <shared_library_dir()>/libbraid_<component>.so ("comm_mpi" -> ".../libbraid_comm_mpi.so"),
// or "" when braid is linked statically.
std::string component_plugin_path(std::string_view component);

// Whether the plugin file of `component` exists (it is not loaded): false when static.
bool component_plugin_present(std::string_view component);

// How a plugin's symbols are seen by what it loads in turn (Note [MPI's plugin is global] in
// comm/src/backend_registry.cc).
enum class PluginScope { kLocal, kGlobal };

struct PluginLoad {
  void* entry = nullptr;  // the plugin's extern "C" entry point; null when it did not load
  std::string path;       // the plugin file ("" when static)
  std::string error;      // why it did not load: names the file and dlerror()'s text; "" if it did
};

// Loads the plugin of `component` (dlopen RTLD_NOW, RTLD_LOCAL unless `scope` is kGlobal) and
// looks up `entry` in it. The first call per component does the work, whatever the threads;
// later calls return the same result, success or failure (a plugin is never unloaded). When
// braid is linked statically it loads nothing and says so in `error`. Calling the entry point
// is the caller's business (once).
const PluginLoad& load_component_plugin(std::string_view component, const char* entry,
                                        PluginScope scope = PluginScope::kLocal);

// Whether load_component_plugin(component, ...) has been called and succeeded.
bool component_plugin_loaded(std::string_view component);

}  // namespace braid
