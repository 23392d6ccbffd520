// The hierarchical backend (docs/hier.md): the staged fold it relies on against the one-pass
// fold, node identities, and the conformance suite on simulated nodes
// (BRAID_HIER_RANKS_PER_NODE), where the world runs the hierarchical algorithms and the
// suite's subgroups (not node-regular) the point-to-point ones.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "../src/fold.h"
#include "../src/hier_backend.h"
#include "braid/comm/rank_info.h"
#include "braid/core/config.h"
#include "braid/core/environment.h"
#include "braid/core/error.h"
#include "braid/core/float_types.h"
#include "braid/tensor/tensor.h"
#include "comm_test_util.h"
#include "conformance/registry.h"

namespace braid {
namespace {

#if BRAID_HAVE_UCX
const bool kHierConformance = [] {
  conformance::ConformanceBackend b;
  b.name = "hier_2pernode";  // 2 x 2 and 3 x 2 (a middle node); 5 ranks: not regular
  b.backend = "hier";
  b.sizes = {4, 5, 6};
  b.env = {{"BRAID_HIER_RANKS_PER_NODE", "2"}};
  conformance::register_backend_for_conformance(b);
  b.name = "hier_3pernode_tiny_pieces";  // shards of unequal sizes, chains of many pieces
  b.sizes = {6};
  b.env = {{"BRAID_HIER_RANKS_PER_NODE", "3"}, {"BRAID_HIER_PIECE_BYTES", "40"}};
  conformance::register_backend_for_conformance(b);
  b.name = "hier_one_node";  // one node: the shm backend alone
  b.sizes = {3};
  b.env = {{"BRAID_HIER_RANKS_PER_NODE", "8"}};
  return conformance::register_backend_for_conformance(b);
}();

// Every rank of a 2 x 2 job (simulated nodes) runs `fn` on the hier world group.
testing::RunResult on_two_nodes(const std::function<void(ProcessGroup&)>& fn) {
  return testing::run_processes(
      4,
      [&](int rank, int size, std::shared_ptr<Store> store) {
        ::setenv("BRAID_HIER_RANKS_PER_NODE", "2", 1);
        auto pg = testing::make_group(rank, size, store, "hier", std::chrono::milliseconds(20000));
        fn(*pg);
      },
      testing::StoreKind::kTcp);
}

// Runs `call`, which must throw a braid Error of `kind` whose message has every needle.
void expect_error(ErrorKind kind, const std::vector<std::string>& needles,
                  const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    if (e.kind() != kind) throw;
    for (const auto& n : needles) {
      if (std::string(e.what()).find(n) == std::string::npos) throw;
    }
    return;
  }
  throw std::runtime_error("no error");
}

TEST(HierBackend, DifferentCollectivesOnTheTwoNodesAreAMismatchOnEveryRank) {
  auto r = on_two_nodes([](ProcessGroup& pg) {
    Tensor t = Tensor::ones({64}, DType::kF32);
    pg.all_reduce(t);  // agree once
    expect_error(ErrorKind::kInvalidArgument, {"hier: collective mismatch", "all_reduce f32 x 64"},
                 [&] {
                   if (pg.rank() < 2) {
                     pg.all_reduce(t);
                   } else {
                     Tensor out = Tensor::empty({256}, DType::kF32);
                     pg.all_gather_into(out, t);
                   }
                 });
  });
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(HierBackend, ANodeThatDiesIsAPeerLostOnTheOther) {
  auto r = on_two_nodes([](ProcessGroup& pg) {
    Tensor t = Tensor::ones({1 << 16}, DType::kF32);
    pg.all_reduce(t);
    if (pg.rank() >= 2) raise(SIGKILL);  // all of node 1
    expect_error(ErrorKind::kPeerLost, {"hier", "all_reduce"}, [&] { pg.all_reduce(t); });
  });
  EXPECT_EQ(r.message_of(0), "");
  EXPECT_EQ(r.message_of(1), "");
  EXPECT_NE(r.message_of(2), "");
  EXPECT_NE(r.message_of(3), "");
}
#endif  // BRAID_HAVE_UCX

// Inputs of rank r: values spread over several binades with ties, so the order of the fold
// shows in the bits.
std::vector<uint8_t> inputs_for(DType dtype, int r, int64_t count) {
  std::mt19937 gen(1234 + r);
  std::uniform_real_distribution<double> dist(-3.0, 3.0);
  std::vector<double> v(count);
  for (auto& x : v) x = dist(gen) * (1 << (gen() % 12));
  std::vector<uint8_t> out(count * dtype_size(dtype));
  for (int64_t i = 0; i < count; ++i) {
    if (dtype == DType::kF32) {
      const float f = static_cast<float>(v[i]);
      std::memcpy(out.data() + i * 4, &f, 4);
    } else if (dtype == DType::kBF16) {
      const uint16_t h = fp::f32_to_bf16_bits(static_cast<float>(v[i]));
      std::memcpy(out.data() + i * 2, &h, 2);
    } else if (dtype == DType::kF16) {
      const uint16_t h = fp::f32_to_f16_bits(static_cast<float>(v[i]));
      std::memcpy(out.data() + i * 2, &h, 2);
    } else {
      const int32_t k = static_cast<int32_t>(v[i] * 1000);
      std::memcpy(out.data() + i * 4, &k, 4);
    }
  }
  return out;
}

TEST(FoldStage, StagesGiveTheBitsOfOneFold) {
  constexpr int n = 5;
  constexpr int64_t count = 9000;  // more than one of the Folder's 4096-element blocks
  const std::vector<std::vector<int>> splits = {{5}, {2, 1, 2}, {1, 1, 1, 1, 1}, {4, 1}};
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32}) {
    for (ReduceOp op :
         {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kPremulSum, ReduceOp::kMax, ReduceOp::kProd}) {
      if (op == ReduceOp::kPremulSum && dtype == DType::kI32) continue;
      std::vector<std::vector<uint8_t>> in;
      std::vector<const void*> ptrs;
      for (int r = 0; r < n; ++r) in.push_back(inputs_for(dtype, r, count));
      for (auto& b : in) ptrs.push_back(b.data());
      const std::vector<double> factors = {0.75, 1.05, 1.35, 1.65, 1.95};
      std::vector<uint8_t> want(count * dtype_size(dtype));
      Folder(dtype, op, factors, n).fold(ptrs.data(), n, count, want.data());
      const size_t aes = dtype_size(accumulation_dtype(dtype));
      for (const auto& split : splits) {
        Folder folder(dtype, op, factors, n);
        std::vector<uint8_t> carry, next(count * aes), got(count * dtype_size(dtype));
        int first = 0;
        for (int part : split) {
          const bool last = first + part == n;
          folder.fold_stage(ptrs.data() + first, first, part, first ? carry.data() : nullptr, count,
                            last ? got.data() : next.data());
          carry = next;
          first += part;
        }
        EXPECT_EQ(got, want) << dtype << " " << reduce_op_name(op) << " in " << split.size()
                             << " stages";
      }
    }
  }
}

bool built(const std::string& name) {
  const auto names = backend_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

RankInfo layout(int world, int local, const char* source, bool mpi_launcher = false) {
  RankInfo info;
  info.world_size = world;
  info.local_world_size = local;
  info.source = source;
  info.mpi_launcher = mpi_launcher;
  return info;
}

TEST(ChooseBackend, ANamedBackendIsTakenAsGiven) {
  PatchEnvironment env{{"BRAID_BACKEND", "ucx"}};
  EXPECT_EQ(choose_backend("mpi", layout(8, 4, "braid launch")), "mpi");
  EXPECT_EQ(choose_backend("shm", layout(8, 4, "braid launch")), "shm");
}

TEST(ChooseBackend, AutoTakesBraidBackendFirst) {
  PatchEnvironment env{{"BRAID_BACKEND", "ucx"}};
  EXPECT_EQ(choose_backend("auto", layout(4, 4, "braid launch")), "ucx");
}

TEST(ChooseBackend, AutoOnOneNodeIsShm) {
  PatchEnvironment env(EnvPatch{{"BRAID_BACKEND", std::nullopt}});
  EXPECT_EQ(choose_backend("auto", layout(4, 4, "braid launch")), "shm");
  EXPECT_EQ(choose_backend("auto", layout(1, 1, "single process")), "shm");
  EXPECT_EQ(choose_backend("auto", layout(3, 3, "openmpi")), "shm");
}

TEST(ChooseBackend, AutoOnSeveralNodesPrefersMpiUnderMpirunElseHier) {
  PatchEnvironment env{{"BRAID_BACKEND", "auto"}};
  const std::string launched = built("hier") ? "hier" : built("mpi") ? "mpi" : "";
  const std::string mpirun = built("mpi") ? "mpi" : launched;
  // srun: "slurm"; srun --mpi=pmix: "slurm" with mpi_launcher set (SLURM_MPI_TYPE=pmix).
  struct Case {
    const char* source;
    bool mpi_launcher;
    std::string want;
  };
  for (const auto& [source, mpi_launcher, want] :
       {Case{"braid launch", false, launched}, Case{"openmpi", true, mpirun},
        Case{"slurm", false, launched}, Case{"slurm", true, mpirun}}) {
    if (want.empty()) {
      try {
        choose_backend("auto", layout(4, 2, source, mpi_launcher));
        ADD_FAILURE() << "no error without a backend between nodes";
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kNotSupported);
        EXPECT_NE(std::string(e.what()).find("several nodes"), std::string::npos) << e.what();
      }
    } else {
      EXPECT_EQ(choose_backend("auto", layout(4, 2, source, mpi_launcher)), want)
          << source << (mpi_launcher ? " started for MPI" : "");
    }
  }
}

TEST(NodeIdentity, SimulatedNodesFollowTheWorldRank) {
  PatchEnvironment per{{"BRAID_HIER_RANKS_PER_NODE", "3"}};
  EXPECT_EQ(node_identity(0), node_identity(2));
  EXPECT_NE(node_identity(2), node_identity(3));
  EXPECT_EQ(node_identity(3), node_identity(5));
}

TEST(NodeIdentity, LauncherNodeRankSeparatesNodesOnOneHost) {
  PatchEnvironment per(EnvPatch{{"BRAID_HIER_RANKS_PER_NODE", std::nullopt}});
  PatchEnvironment g0{{"GROUP_RANK", "0"}};
  const std::string a = node_identity(0);
  PatchEnvironment g1{{"GROUP_RANK", "1"}};
  EXPECT_NE(a, node_identity(0));
  EXPECT_NE(a.find("node rank 0"), std::string::npos) << a;
}

TEST(NodeIdentity, WithoutALauncherTheNetworkNamespaceCounts) {
  PatchEnvironment per(EnvPatch{{"BRAID_HIER_RANKS_PER_NODE", std::nullopt}});
  PatchEnvironment g(EnvPatch{{"GROUP_RANK", std::nullopt}});
  EXPECT_NE(node_identity(0).find("net:["), std::string::npos) << node_identity(0);
}

TEST(NodeIdentity, BadRanksPerNodeNamesTheVariable) {
  for (const char* bad : {"x", "0", "-2", "3k"}) {
    PatchEnvironment per{{"BRAID_HIER_RANKS_PER_NODE", bad}};
    try {
      node_identity(0);
      ADD_FAILURE() << "no error for " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("BRAID_HIER_RANKS_PER_NODE"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace braid
