// mesh_worker: the checks of mesh_scenarios.h on real processes under `braid launch`
// (run_mesh.sh). Every rank builds the mesh over the world, checks its layout, groups and
// flattened groups, distribute_tensor / full_tensor round trips and redistribute, and prints
// one line; any failure makes it exit 1.
//
//   mesh_worker 3 | 2x2 | 2x2x2     a mesh of that shape over all WORLD_SIZE ranks
//   mesh_worker mismatch            the last rank names its dimension differently: every rank
//                                   must get the same error (exit 0 when each one did)
#include <cstdio>
#include <string>
#include <vector>

#include "braid/comm/process_group.h"
#include "braid/core/error.h"
#include "mesh_scenarios.h"

namespace {

using namespace braid;
using namespace braid::shard;
using mesh_testing::Failures;
using mesh_testing::Placements;

std::vector<int64_t> parse_shape(const std::string& text) {
  std::vector<int64_t> shape;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t x = text.find('x', at);
    shape.push_back(std::stoll(text.substr(at, x == std::string::npos ? x : x - at)));
    if (x == std::string::npos) break;
    at = x + 1;
  }
  return shape;
}

int run(const std::shared_ptr<ProcessGroup>& world, const std::vector<int64_t>& shape) {
  const std::vector<std::vector<std::string>> names = {
      {"dp"}, {"dp_replicate", "dp_shard"}, {"dp", "tp", "pp"}};
  BRAID_CHECK(shape.size() >= 1 && shape.size() <= 3, kInvalidArgument,
              "mesh_worker: 1 to 3 mesh dimensions");
  DeviceMesh mesh(world, shape, names[shape.size() - 1]);
  Failures f;
  mesh_testing::check_layout(mesh, f);
  mesh_testing::check_flatten(mesh, f);
  const int nd = mesh.ndim();
  const Placements& options = nd == 1 ? mesh_testing::all_options() : mesh_testing::basic_options();
  const auto lists = mesh_testing::all_lists(nd, options);
  const Shape global = nd == 1 ? Shape{4, 5} : nd == 2 ? Shape{3, 5} : Shape{5, 3};
  mesh_testing::check_round_trips(mesh, global, lists, f);
  mesh_testing::check_redistribute(mesh, global, mesh_testing::pairs_of(lists, nd == 3 ? 16 : 1),
                                   f);
  if (nd > 1) mesh_testing::check_redistribute(mesh, global, mesh_testing::special_pairs(nd), f);
  if (!f.lines.empty()) {
    for (const std::string& line : f.lines) {
      std::fprintf(stderr, "mesh_worker rank %d: FAIL %s\n", world->rank(), line.c_str());
    }
    return 1;
  }
  std::printf("mesh_worker rank %d: %s OK (%lld checks)\n", world->rank(), mesh.str().c_str(),
              static_cast<long long>(f.checks));
  return 0;
}

int mismatch(const std::shared_ptr<ProcessGroup>& world) {
  const std::string name = world->rank() == world->size() - 1 ? "tp" : "dp";
  try {
    DeviceMesh mesh(world, {world->size()}, {name});
  } catch (const Error& e) {
    const bool ok = e.kind() == ErrorKind::kInvalidArgument &&
                    e.message().find("<- differs from rank 0") != std::string::npos;
    std::printf("mesh_worker rank %d: %s error: %s\n", world->rank(), ok ? "expected" : "WRONG",
                e.message().c_str());
    return ok ? 0 : 1;
  }
  std::printf("mesh_worker rank %d: FAIL no error for different names\n", world->rank());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: mesh_worker 3|2x2|2x2x2|mismatch\n");
    return 2;
  }
  try {
    auto world = ProcessGroup::create({});
    const std::string mode = argv[1];
    return mode == "mismatch" ? mismatch(world) : run(world, parse_shape(mode));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mesh_worker: %s\n", e.what());
    return 1;
  }
}
