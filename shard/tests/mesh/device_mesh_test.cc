// DeviceMesh and placements (docs/device-mesh.md): torch.chunk splits, nested local pieces
// and the argument errors in one process; layouts, dimension and flattened groups,
// distribute_tensor / full_tensor round trips and redistribute between placements on 1-d
// (3 ranks), 2x2 (4 ranks) and 2x2x2 (8 ranks) meshes with ranks as threads on an in-memory
// store (comm/tests/comm_test_util.h). The same checks run on real processes under
// `braid launch` through mesh_worker.cc.
#include <gtest/gtest.h>

#include "braid/comm/store.h"
#include "braid/core/error.h"
#include "braid/shard/device_mesh.h"
#include "comm_test_util.h"
#include "mesh_scenarios.h"

namespace braid::shard {
namespace {

using mesh_testing::Failures;
using mesh_testing::Placements;

template <typename Fn>
void expect_error(Fn&& fn, ErrorKind kind, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an error of kind " << to_string(kind);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.message();
    for (const auto& p : parts) {
      EXPECT_NE(e.message().find(p), std::string::npos) << "'" << p << "' not in: " << e.message();
    }
  }
}

std::shared_ptr<ProcessGroup> solo() {
  return braid::testing::make_group(0, 1, std::make_shared<InMemoryStore>());
}

// Runs `fn(world)` on `n` thread ranks and fails the test with every rank's error.
void on_ranks(int n, const std::function<void(std::shared_ptr<ProcessGroup>)>& fn) {
  auto result = braid::testing::run_threads(n, [&](int rank, int size, auto store) {
    fn(braid::testing::make_group(rank, size, store));
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

// ---- one process ----

TEST(ShardRange, SplitsLikeTorchChunk) {
  // torch.chunk(torch.arange(L), n): pieces of ceil(L / n), trailing ones short or missing.
  const std::vector<std::tuple<int64_t, int64_t, std::vector<std::pair<int64_t, int64_t>>>> cases =
      {
          {5, 4, {{0, 2}, {2, 2}, {4, 1}, {5, 0}}},
          {4, 3, {{0, 2}, {2, 2}, {4, 0}}},
          {6, 4, {{0, 2}, {2, 2}, {4, 2}, {6, 0}}},
          {3, 5, {{0, 1}, {1, 1}, {2, 1}, {3, 0}, {3, 0}}},
          {7, 1, {{0, 7}}},
          {0, 3, {{0, 0}, {0, 0}, {0, 0}}},
          {8, 2, {{0, 4}, {4, 4}}},
      };
  for (const auto& [size, n, pieces] : cases) {
    for (int64_t k = 0; k < n; ++k) {
      const ShardInfo r = shard_range(size, n, k);
      EXPECT_EQ(r.offset, pieces[k].first) << size << " in " << n << ", piece " << k;
      EXPECT_EQ(r.count, pieces[k].second) << size << " in " << n << ", piece " << k;
    }
  }
  // Every split tiles the dimension in order, no piece longer than the first.
  for (int64_t size = 0; size <= 20; ++size) {
    for (int64_t n = 1; n <= 9; ++n) {
      int64_t at = 0;
      for (int64_t k = 0; k < n; ++k) {
        const ShardInfo r = shard_range(size, n, k);
        EXPECT_EQ(r.offset, at);
        EXPECT_LE(r.count, shard_range(size, n, 0).count);
        at = r.end();
      }
      EXPECT_EQ(at, size) << size << " in " << n;
    }
  }
}

TEST(ShardRange, RejectsBadArguments) {
  expect_error([] { shard_range(-1, 2, 0); }, ErrorKind::kInvalidArgument, {"-1", "negative"});
  expect_error([] { shard_range(4, 0, 0); }, ErrorKind::kInvalidArgument, {"0 chunks"});
  expect_error([] { shard_range(4, 2, 2); }, ErrorKind::kOutOfRange, {"chunk 2", "[0, 2)"});
  expect_error([] { shard_range(4, 2, -1); }, ErrorKind::kOutOfRange, {"chunk -1"});
}

TEST(LocalPiece, NestsShardsInMeshOrder) {
  const Shape g = {3, 5};
  const std::vector<int64_t> mesh = {2, 2};
  struct Case {
    Placements p;
    std::vector<int64_t> coordinate;
    Shape shape;
    std::vector<int64_t> offset;
  };
  const std::vector<Case> cases = {
      // 3 rows in 2 (2, 1), then each in 2 again: (1, 1) and (1, 0).
      {{Shard{0}, Shard{0}}, {0, 0}, {1, 5}, {0, 0}},
      {{Shard{0}, Shard{0}}, {0, 1}, {1, 5}, {1, 0}},
      {{Shard{0}, Shard{0}}, {1, 0}, {1, 5}, {2, 0}},
      {{Shard{0}, Shard{0}}, {1, 1}, {0, 5}, {3, 0}},
      {{Shard{0}, Shard{1}}, {1, 1}, {1, 2}, {2, 3}},
      {{Shard{1}, Shard{0}}, {0, 1}, {1, 3}, {2, 0}},
      {{Shard{-1}, Shard{1}}, {1, 0}, {3, 1}, {0, 3}},
      {{Replicate{}, Partial{}}, {1, 1}, {3, 5}, {0, 0}},
      {{Partial{ReduceOp::kMax}, Shard{1}}, {1, 1}, {3, 2}, {0, 3}},
  };
  for (const Case& c : cases) {
    const LocalPiece piece = local_piece(g, mesh, c.p, c.coordinate);
    EXPECT_EQ(piece.shape, c.shape)
        << placements_str(c.p) << " at " << c.coordinate[0] << "," << c.coordinate[1];
    EXPECT_EQ(piece.offset, c.offset)
        << placements_str(c.p) << " at " << c.coordinate[0] << "," << c.coordinate[1];
  }
}

TEST(LocalPiece, RejectsBadPlacements) {
  const Shape g = {3, 5};
  expect_error(
      [&] {
        local_piece(g, {2, 2}, {Shard{0}}, {0, 0});
      },
      ErrorKind::kInvalidArgument,
      {"1 placements [Shard(0)]", "2 dimensions", "one placement per mesh dimension"});
  expect_error([&] { local_piece(g, {2}, {Shard{2}}, {0}); }, ErrorKind::kOutOfRange,
               {"Shard(2)", "2-d tensor", "[3, 5]", "[-2, 2)"});
  expect_error([&] { local_piece(g, {2}, {Shard{-3}}, {0}); }, ErrorKind::kOutOfRange,
               {"Shard(-3)"});
  expect_error([&] { local_piece(g, {2}, {Partial{ReduceOp::kPremulSum}}, {0}); },
               ErrorKind::kInvalidArgument, {"Partial(premul_sum)", "sum, avg, prod, min or max"});
  expect_error(
      [&] {
        local_piece(g, {2, 2}, {Partial{ReduceOp::kSum}, Partial{ReduceOp::kMax}}, {0, 0});
      },
      ErrorKind::kInvalidArgument, {"mixes Partial(sum) and Partial(max)"});
  expect_error(
      [&] {
        local_piece(g, {2, 2}, {Shard{0}, Shard{1}}, {0, 2});
      },
      ErrorKind::kOutOfRange, {"coordinate [0, 2]", "[2, 2]"});
  expect_error(
      [&] {
        local_piece(g, {2, 2}, {Shard{0}, Shard{1}}, {0});
      },
      ErrorKind::kInvalidArgument, {"coordinate [0]", "1 components"});
  // sum and avg commute: allowed together.
  EXPECT_EQ(
      local_piece(g, {2, 2}, {Partial{ReduceOp::kSum}, Partial{ReduceOp::kAvg}}, {1, 1}).shape, g);
}

TEST(Placements, PrintLikeTorch) {
  EXPECT_EQ(placements_str({Shard{0}, Replicate{}, Partial{}, Partial{ReduceOp::kMax}}),
            "[Shard(0), Replicate(), Partial(sum), Partial(max)]");
  EXPECT_EQ(placement_str(Shard{-1}), "Shard(-1)");
}

TEST(DeviceMesh, OneRank) {
  auto world = solo();
  DeviceMesh m1(world, {1}, {"dp"});
  EXPECT_EQ(m1.group("dp"), world);
  EXPECT_EQ(m1.str(), "DeviceMesh(dp=1)");
  DeviceMesh m3(world, {1, 1, 1}, {"dp", "tp", "pp"});
  EXPECT_EQ(m3.ndim(), 3);
  EXPECT_EQ(m3.coordinate(), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(m3.numel(), 1);
  EXPECT_EQ(m3.group("tp"), world);
  EXPECT_EQ(m3.flatten({"dp", "pp"}), world);
  EXPECT_EQ(m3.group("dp_pp"), world);
  EXPECT_EQ(m3.str(), "DeviceMesh(dp=1, tp=1, pp=1)");
  // Every redistribution on a one-rank mesh is local and exact.
  Failures f;
  const auto lists = mesh_testing::all_lists(3, mesh_testing::all_options());
  mesh_testing::check_round_trips(m3, {2, 3}, lists, f);
  mesh_testing::check_redistribute(m3, {2, 3}, mesh_testing::pairs_of(lists, 61), f);
  f.throw_if_any();
}

TEST(DeviceMesh, RejectsBadShapesAndNames) {
  auto world = solo();
  expect_error(
      [&] {
        DeviceMesh(world, {2, 2}, {"a", "b"});
      },
      ErrorKind::kInvalidArgument, {"shape [2, 2] holds 4 ranks", "world group has 1"});
  expect_error(
      [&] {
        DeviceMesh(world, {1, 1}, {"a"});
      },
      ErrorKind::kInvalidArgument, {"2 dimensions but 1 names", "[a]"});
  expect_error(
      [&] {
        DeviceMesh(world, {1, 1}, {"a", "a"});
      },
      ErrorKind::kInvalidArgument, {"'a' is used by dimensions 0 and 1", "unique"});
  expect_error(
      [&] {
        DeviceMesh(world, {1, 1}, {"a", ""});
      },
      ErrorKind::kInvalidArgument, {"dimension 1 is empty"});
  expect_error(
      [&] {
        DeviceMesh(world, {1, 0}, {"a", "b"});
      },
      ErrorKind::kInvalidArgument, {"'b' has size 0", "at least 1"});
  expect_error([&] { DeviceMesh(world, {}, {}); }, ErrorKind::kInvalidArgument, {"no dimensions"});
  expect_error([&] { DeviceMesh(nullptr, {1}, {"a"}); }, ErrorKind::kInvalidArgument, {"null"});
}

TEST(DeviceMesh, RejectsUnknownDimensionsAndBadFlattens) {
  DeviceMesh mesh(solo(), {1, 1, 1}, {"dp", "tp", "pp"});
  expect_error([&] { mesh.size("ep"); }, ErrorKind::kInvalidArgument,
               {"'ep'", "[dp, tp, pp]", "DeviceMesh(dp=1, tp=1, pp=1)"});
  expect_error([&] { mesh.group("ep"); }, ErrorKind::kInvalidArgument, {"'ep'", "[dp, tp, pp]"});
  expect_error([&] { mesh.local_rank("ep"); }, ErrorKind::kInvalidArgument, {"'ep'"});
  expect_error([&] { mesh.dim_index("ep"); }, ErrorKind::kInvalidArgument,
               {"no dimension named 'ep'", "[dp, tp, pp]"});
  expect_error(
      [&] {
        mesh.group(std::vector<std::string>{"dp", "tp"});
      },
      ErrorKind::kInvalidArgument, {"[dp, tp]", "flatten("});
  expect_error(
      [&] {
        mesh.flatten({"tp", "dp"});
      },
      ErrorKind::kInvalidArgument, {"mesh order [dp, tp, pp]"});
  expect_error([&] { mesh.flatten({"dp", "dp"}); }, ErrorKind::kInvalidArgument, {"mesh order"});
  expect_error(
      [&] {
        mesh.flatten({"dp", "tp"}, "pp");
      },
      ErrorKind::kInvalidArgument, {"'pp' is a mesh dimension"});
  expect_error([&] { mesh.flatten({}); }, ErrorKind::kInvalidArgument, {"empty"});
  mesh.flatten({"dp", "tp"}, "dp_tp");
  expect_error(
      [&] {
        mesh.flatten({"tp", "pp"}, "dp_tp");
      },
      ErrorKind::kInvalidArgument, {"'dp_tp' was already given"});
  expect_error([&] { mesh.size("nope"); }, ErrorKind::kInvalidArgument, {"dp_tp (flattened)"});
  EXPECT_EQ(mesh.size("dp_tp"), 1);
  EXPECT_EQ(mesh.group("dp"), mesh.flatten({"dp"}));  // one dimension: its own group
  expect_error(
      [&] {
        mesh.rank_at({0, 0});
      },
      ErrorKind::kInvalidArgument, {"coordinate [0, 0] has 2 components", "expected 3"});
  expect_error(
      [&] {
        mesh.rank_at({0, 1, 0});
      },
      ErrorKind::kOutOfRange, {"coordinate [0, 1, 0]", "'tp' of size 1"});
  expect_error([&] { mesh.coordinate_of(1); }, ErrorKind::kOutOfRange, {"rank 1", "[0, 1)"});
}

TEST(Placements, RejectBadArgumentsOnAMesh) {
  DeviceMesh mesh(solo(), {1, 1}, {"dp", "tp"});
  const Tensor x = mesh_testing::iota({3, 5});
  expect_error([&] { distribute_tensor(x, mesh, {Shard{0}}); }, ErrorKind::kInvalidArgument,
               {"distribute_tensor", "1 placements", "2 dimensions"});
  expect_error(
      [&] {
        distribute_tensor(x, mesh, {Shard{0}, Shard{2}});
      },
      ErrorKind::kOutOfRange, {"distribute_tensor", "Shard(2) on mesh dimension 'tp'", "[3, 5]"});
  expect_error(
      [&] {
        distribute_tensor(Tensor(), mesh, {Shard{0}, Shard{1}});
      },
      ErrorKind::kInvalidArgument, {"undefined"});
  expect_error(
      [&] {
        full_tensor(x, mesh, {Shard{0}, Replicate{}}, {6, 5});
      },
      ErrorKind::kInvalidArgument,
      {"full_tensor", "local tensor has shape [3, 5]", "global shape [6, 5]",
       "piece of shape [6, 5]"});
  expect_error(
      [&] {
        redistribute(x, mesh, {Shard{0}, Replicate{}}, {Replicate{}}, {3, 5});
      },
      ErrorKind::kInvalidArgument, {"redistribute: `to`", "1 placements"});
  expect_error(
      [&] {
        redistribute(x, mesh, {Partial{ReduceOp::kMin}, Partial{ReduceOp::kAvg}},
                     {Replicate{}, Replicate{}}, {3, 5});
      },
      ErrorKind::kInvalidArgument, {"redistribute: `from`", "mixes Partial(min) and Partial(avg)"});
  // A result never aliases its input.
  const Tensor local = distribute_tensor(x, mesh, {Replicate{}, Replicate{}});
  EXPECT_FALSE(local.shares_storage(x));
}

// ---- several ranks (threads) ----

TEST(DeviceMesh2x2, LayoutGroupsAndFlatten) {
  on_ranks(4, [](std::shared_ptr<ProcessGroup> world) {
    DeviceMesh mesh(world, {2, 2}, {"dp_replicate", "dp_shard"});
    Failures f;
    mesh_testing::check_layout(mesh, f);
    mesh_testing::check_flatten(mesh, f);
    // flatten with the default name, over the whole mesh: the world, by row-major index.
    DeviceMesh again(world, {2, 2}, {"dp_replicate", "dp_shard"});
    auto dp = again.flatten({"dp_replicate", "dp_shard"});
    f.expect(dp == world, "flattening every dimension gives the world group itself");
    f.expect(again.local_rank("dp_replicate_dp_shard") == world->rank(), "default flat name");
    // One dimension under a new name: an alias of its group.
    f.expect(again.flatten({"dp_shard"}, "fsdp") == again.group("dp_shard"), "alias group");
    f.expect(again.local_rank("fsdp") == world->rank() % 2, "alias local_rank");
    f.expect(again.size("fsdp") == 2, "alias size");
    f.throw_if_any();
  });
}

TEST(DeviceMesh2x2x2, LayoutGroupsAndFlatten) {
  on_ranks(8, [](std::shared_ptr<ProcessGroup> world) {
    DeviceMesh mesh(world, {2, 2, 2}, {"dp", "tp", "pp"});
    Failures f;
    mesh_testing::check_layout(mesh, f);
    mesh_testing::check_flatten(mesh, f);
    f.throw_if_any();
  });
}

TEST(DeviceMesh1d, UsesTheWorldGroupAndRedistributesEveryPair) {
  on_ranks(3, [](std::shared_ptr<ProcessGroup> world) {
    DeviceMesh mesh(world, {3}, {"dp"});
    Failures f;
    f.expect(mesh.group("dp") == world, "a 1-d mesh's group is the world group");
    mesh_testing::check_layout(mesh, f);
    // 4 rows in 3: 2, 2, 0 (an empty piece); 5 columns: 2, 2, 1.
    const auto lists = mesh_testing::all_lists(1, mesh_testing::all_options());
    mesh_testing::check_round_trips(mesh, {4, 5}, lists, f);
    mesh_testing::check_redistribute(mesh, {4, 5}, mesh_testing::pairs_of(lists), f);
    // 0-d and empty tensors.
    mesh_testing::check_round_trips(mesh, {}, {{Replicate{}}, {Partial{}}}, f);
    mesh_testing::check_redistribute(mesh, {}, {{{Partial{}}, {Replicate{}}}}, f);
    mesh_testing::check_round_trips(mesh, {0, 2}, {{Shard{0}}, {Shard{1}}}, f);
    mesh_testing::check_redistribute(mesh, {0, 2}, {{{Shard{0}}, {Shard{1}}}}, f);
    f.throw_if_any();
  });
}

TEST(DeviceMesh2x2, DistributeAndFullTensorRoundTrip) {
  on_ranks(4, [](std::shared_ptr<ProcessGroup> world) {
    DeviceMesh mesh(world, {2, 2}, {"dp", "tp"});
    Failures f;
    const auto lists = mesh_testing::all_lists(2, mesh_testing::basic_options());
    for (const Shape& shape : {Shape{3, 5}, Shape{5, 7}, Shape{4, 4}}) {
      mesh_testing::check_round_trips(mesh, shape, lists, f);
    }
    f.throw_if_any();
  });
}

TEST(DeviceMesh2x2, RedistributeEveryPair) {
  on_ranks(4, [](std::shared_ptr<ProcessGroup> world) {
    DeviceMesh mesh(world, {2, 2}, {"dp", "tp"});
    Failures f;
    const auto lists = mesh_testing::all_lists(2, mesh_testing::basic_options());
    mesh_testing::check_redistribute(mesh, {3, 5}, mesh_testing::pairs_of(lists), f);
    mesh_testing::check_redistribute(mesh, {3, 5}, mesh_testing::special_pairs(2), f);
    mesh_testing::check_redistribute(mesh, {5, 7}, mesh_testing::special_pairs(2), f);
    f.throw_if_any();
  });
}

TEST(DeviceMesh2x2x2, DistributeAndFullTensorRoundTrip) {
  on_ranks(8, [](std::shared_ptr<ProcessGroup> world) {
    DeviceMesh mesh(world, {2, 2, 2}, {"dp", "tp", "pp"});
    Failures f;
    // 5 rows over three Shard(0): 3, 2 -> 2, 1, 1, 1 -> 1, 1, 1, 0, 1, 0, 1, 0.
    mesh_testing::check_round_trips(mesh, {5, 3},
                                    mesh_testing::all_lists(3, mesh_testing::basic_options()), f);
    f.throw_if_any();
  });
}

TEST(DeviceMesh2x2x2, RedistributeSample) {
  on_ranks(8, [](std::shared_ptr<ProcessGroup> world) {
    DeviceMesh mesh(world, {2, 2, 2}, {"dp", "tp", "pp"});
    Failures f;
    const auto lists = mesh_testing::all_lists(3, mesh_testing::basic_options());
    mesh_testing::check_redistribute(mesh, {5, 3}, mesh_testing::pairs_of(lists, 16), f);
    mesh_testing::check_redistribute(mesh, {5, 3}, mesh_testing::special_pairs(3), f);
    f.throw_if_any();
  });
}

TEST(DeviceMesh, OverASubgroup) {
  on_ranks(4, [](std::shared_ptr<ProcessGroup> world) {
    auto sub = world->new_group({1, 2, 3});
    if (world->rank() == 0) {
      expect_error(
          [&] {
            DeviceMesh(sub, {1, 3}, {"a", "b"});
          },
          ErrorKind::kInvalidArgument, {"not a member"});
      return;
    }
    DeviceMesh mesh(sub, {1, 3}, {"a", "b"});
    Failures f;
    f.expect(mesh.coordinate() == std::vector<int64_t>{0, sub->rank()}, "coordinate");
    f.expect(mesh.group("b") == sub, "group(b) is the subgroup itself");
    f.expect(mesh.group("a")->size() == 1, "group(a) has one rank");
    f.expect(mesh.group("a")->global_ranks() == std::vector<int>{world->rank()}, "group(a)");
    const auto lists = mesh_testing::all_lists(2, mesh_testing::basic_options());
    mesh_testing::check_round_trips(mesh, {4, 5}, lists, f);
    f.throw_if_any();
  });
}

TEST(DeviceMesh, DifferentArgumentsFailOnEveryRank) {
  auto result = braid::testing::run_threads(3, [](int rank, int size, auto store) {
    auto world = braid::testing::make_group(rank, size, store);
    const std::string name = rank == 2 ? "tp" : "dp";
    expect_error([&] { DeviceMesh(world, {3}, {name}); }, ErrorKind::kInvalidArgument,
                 {"every rank must pass the same shape and names", "rank 0: DeviceMesh(dp=3)",
                  "rank 2: DeviceMesh(tp=3)   <- differs from rank 0"});
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

}  // namespace
}  // namespace braid::shard
