// Rank discovery: each launcher's variables in a cleared environment, the discovery order
// when several are present, the derived defaults, and every kind of bad value.
#include "braid/comm/rank_info.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "braid/core/environment.h"
#include "braid/core/error.h"

namespace braid {
namespace {

using ::testing::HasSubstr;

// Runs detect_rank_info expecting kInvalidArgument and returns the message.
std::string detect_error() {
  try {
    detect_rank_info();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
    return e.message();
  }
  ADD_FAILURE() << "detect_rank_info did not throw";
  return {};
}

TEST(RankInfo, SingleProcessWhenNothingIsSet) {
  ClearEnvironment clear;
  RankInfo info = detect_rank_info();
  EXPECT_EQ(info.rank, 0);
  EXPECT_EQ(info.world_size, 1);
  EXPECT_EQ(info.local_rank, 0);
  EXPECT_EQ(info.local_world_size, 1);
  EXPECT_EQ(info.group_rank, 0);
  EXPECT_EQ(info.source, "single process");
  EXPECT_EQ(info.master_addr, "127.0.0.1");
  EXPECT_EQ(info.master_port, 29500);
}

TEST(RankInfo, TorchrunVariables) {
  ClearEnvironment clear;
  PatchEnvironment env{
      {"RANK", 5},       {"WORLD_SIZE", 8},        {"LOCAL_RANK", 1},     {"LOCAL_WORLD_SIZE", 4},
      {"GROUP_RANK", 1}, {"MASTER_ADDR", "node0"}, {"MASTER_PORT", 29555}};
  RankInfo info = detect_rank_info();
  EXPECT_EQ(info.rank, 5);
  EXPECT_EQ(info.world_size, 8);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_world_size, 4);
  EXPECT_EQ(info.group_rank, 1);
  EXPECT_EQ(info.master_addr, "node0");
  EXPECT_EQ(info.master_port, 29555);
  EXPECT_EQ(info.source, "torchrun");
}

TEST(RankInfo, BraidLaunchIsNamedAsTheSource) {
  ClearEnvironment clear;
  PatchEnvironment env{{"RANK", 0}, {"WORLD_SIZE", 2}, {"BRAID_STORE_SERVED_BY_LAUNCHER", 1}};
  EXPECT_EQ(detect_rank_info().source, "braid launch");
}

TEST(RankInfo, TorchrunDefaultsToOneNode) {
  ClearEnvironment clear;
  PatchEnvironment env{{"RANK", 3}, {"WORLD_SIZE", 4}};
  RankInfo info = detect_rank_info();
  EXPECT_EQ(info.local_rank, 3);
  EXPECT_EQ(info.local_world_size, 4);
  EXPECT_EQ(info.group_rank, 0);
}

TEST(RankInfo, GroupRankDerivedFromLocalWorldSize) {
  ClearEnvironment clear;
  PatchEnvironment env{{"RANK", 7}, {"WORLD_SIZE", 8}, {"LOCAL_RANK", 1}, {"LOCAL_WORLD_SIZE", 2}};
  EXPECT_EQ(detect_rank_info().group_rank, 3);
}

TEST(RankInfo, OpenMpiVariables) {
  ClearEnvironment clear;
  PatchEnvironment env{{"OMPI_COMM_WORLD_RANK", 3},
                       {"OMPI_COMM_WORLD_SIZE", 6},
                       {"OMPI_COMM_WORLD_LOCAL_RANK", 0},
                       {"OMPI_COMM_WORLD_LOCAL_SIZE", 3}};
  RankInfo info = detect_rank_info();
  EXPECT_EQ(info.rank, 3);
  EXPECT_EQ(info.world_size, 6);
  EXPECT_EQ(info.local_rank, 0);
  EXPECT_EQ(info.local_world_size, 3);
  EXPECT_EQ(info.group_rank, 1);
  EXPECT_EQ(info.source, "openmpi");
  EXPECT_TRUE(info.mpi_launcher);
}

TEST(RankInfo, PmiVariablesWithHydraLocalRank) {
  ClearEnvironment clear;
  PatchEnvironment env{
      {"PMI_RANK", 2}, {"PMI_SIZE", 4}, {"MPI_LOCALRANKID", 0}, {"MPI_LOCALNRANKS", 2}};
  RankInfo info = detect_rank_info();
  EXPECT_EQ(info.rank, 2);
  EXPECT_EQ(info.world_size, 4);
  EXPECT_EQ(info.local_rank, 0);
  EXPECT_EQ(info.local_world_size, 2);
  EXPECT_EQ(info.group_rank, 1);
  EXPECT_EQ(info.source, "pmi");
  EXPECT_TRUE(info.mpi_launcher);
}

TEST(RankInfo, PmiVariablesWithCrayLocalRank) {
  ClearEnvironment clear;
  PatchEnvironment env{
      {"PMI_RANK", 5}, {"PMI_SIZE", 6}, {"PMI_LOCAL_RANK", 2}, {"PMI_LOCAL_SIZE", 3}};
  RankInfo info = detect_rank_info();
  EXPECT_EQ(info.local_rank, 2);
  EXPECT_EQ(info.local_world_size, 3);
  EXPECT_EQ(info.group_rank, 1);
}

TEST(RankInfo, SlurmVariables) {
  ClearEnvironment clear;
  PatchEnvironment env{{"SLURM_PROCID", 6},
                       {"SLURM_NTASKS", 7},
                       {"SLURM_LOCALID", 0},
                       {"SLURM_NODEID", 3},
                       {"SLURM_TASKS_PER_NODE", "2(x3),1"}};
  RankInfo info = detect_rank_info();
  EXPECT_EQ(info.rank, 6);
  EXPECT_EQ(info.world_size, 7);
  EXPECT_EQ(info.local_rank, 0);
  EXPECT_EQ(info.local_world_size, 1);  // node 3 is the ",1" after three nodes of 2
  EXPECT_EQ(info.group_rank, 3);
  EXPECT_EQ(info.source, "slurm");
  EXPECT_FALSE(info.mpi_launcher);
}

// srun --mpi=<plugin> sets SLURM_MPI_TYPE in every task ("pmix", "pmi2", ...; "none" without
// one): the job is then an MPI job, whose default backend on several nodes is mpi.
TEST(RankInfo, SlurmWithAnMpiPluginIsAnMpiJob) {
  for (const auto& [type, mpi] :
       {std::pair<const char*, bool>{"pmix", true}, {"pmi2", true}, {"none", false}, {"", false}}) {
    ClearEnvironment clear;
    PatchEnvironment env{{"SLURM_PROCID", 1}, {"SLURM_NTASKS", 4}, {"SLURM_MPI_TYPE", type}};
    RankInfo info = detect_rank_info();
    EXPECT_EQ(info.source, "slurm") << type;
    EXPECT_EQ(info.mpi_launcher, mpi) << "SLURM_MPI_TYPE=" << type;
  }
}

TEST(RankInfo, SlurmStepVariablesWinOverJobVariables) {
  ClearEnvironment clear;
  PatchEnvironment env{{"SLURM_PROCID", 1},
                       {"SLURM_NTASKS", 16},
                       {"SLURM_STEP_NUM_TASKS", 4},
                       {"SLURM_LOCALID", 1},
                       {"SLURM_NODEID", 0},
                       {"SLURM_TASKS_PER_NODE", "8(x2)"},
                       {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"}};
  RankInfo info = detect_rank_info();
  EXPECT_EQ(info.world_size, 4);
  EXPECT_EQ(info.local_world_size, 2);
}

TEST(RankInfo, SlurmBadTasksPerNodeNamesTheVariable) {
  ClearEnvironment clear;
  PatchEnvironment env{{"SLURM_PROCID", 0}, {"SLURM_NTASKS", 2}, {"SLURM_TASKS_PER_NODE", "2(y3)"}};
  std::string msg = detect_error();
  EXPECT_THAT(msg, HasSubstr("SLURM_TASKS_PER_NODE"));
  EXPECT_THAT(msg, HasSubstr("2(y3)"));
}

TEST(RankInfo, OrderTorchrunBeforeMpiBeforePmiBeforeSlurm) {
  ClearEnvironment clear;
  PatchEnvironment slurm{{"SLURM_PROCID", 1}, {"SLURM_NTASKS", 2}};
  EXPECT_EQ(detect_rank_info().source, "slurm");
  {
    PatchEnvironment pmi{{"PMI_RANK", 2}, {"PMI_SIZE", 3}};
    EXPECT_EQ(detect_rank_info().source, "pmi");
    {
      PatchEnvironment ompi{{"OMPI_COMM_WORLD_RANK", 3}, {"OMPI_COMM_WORLD_SIZE", 4}};
      EXPECT_EQ(detect_rank_info().source, "openmpi");
      PatchEnvironment torchrun{{"RANK", 4}, {"WORLD_SIZE", 5}};
      RankInfo info = detect_rank_info();
      EXPECT_EQ(info.source, "torchrun");
      EXPECT_EQ(info.rank, 4);
    }
  }
}

TEST(RankInfo, RankNotBelowWorldSizeNamesBoth) {
  ClearEnvironment clear;
  PatchEnvironment env{{"RANK", 4}, {"WORLD_SIZE", 4}};
  std::string msg = detect_error();
  EXPECT_THAT(msg, HasSubstr("RANK=4"));
  EXPECT_THAT(msg, HasSubstr("WORLD_SIZE=4"));
}

TEST(RankInfo, NegativeValueNamesTheVariable) {
  ClearEnvironment clear;
  PatchEnvironment env{{"OMPI_COMM_WORLD_RANK", -1}, {"OMPI_COMM_WORLD_SIZE", 2}};
  std::string msg = detect_error();
  EXPECT_THAT(msg, HasSubstr("OMPI_COMM_WORLD_RANK"));
  EXPECT_THAT(msg, HasSubstr("-1"));
}

TEST(RankInfo, NonNumericValueNamesTheVariable) {
  ClearEnvironment clear;
  PatchEnvironment env{{"RANK", 0}, {"WORLD_SIZE", "four"}};
  std::string msg = detect_error();
  EXPECT_THAT(msg, HasSubstr("WORLD_SIZE"));
  EXPECT_THAT(msg, HasSubstr("four"));
}

TEST(RankInfo, ZeroWorldSizeIsRejected) {
  ClearEnvironment clear;
  PatchEnvironment env{{"PMI_RANK", 0}, {"PMI_SIZE", 0}};
  EXPECT_THAT(detect_error(), HasSubstr("PMI_SIZE"));
}

TEST(RankInfo, LocalRankNotBelowLocalSize) {
  ClearEnvironment clear;
  PatchEnvironment env{{"RANK", 3}, {"WORLD_SIZE", 4}, {"LOCAL_RANK", 2}, {"LOCAL_WORLD_SIZE", 2}};
  std::string msg = detect_error();
  EXPECT_THAT(msg, HasSubstr("LOCAL_RANK=2"));
  EXPECT_THAT(msg, HasSubstr("LOCAL_WORLD_SIZE=2"));
}

TEST(RankInfo, LocalWorldSizeAboveWorldSize) {
  ClearEnvironment clear;
  PatchEnvironment env{{"SLURM_PROCID", 0}, {"SLURM_NTASKS", 2}, {"SLURM_NTASKS_PER_NODE", 4}};
  EXPECT_THAT(detect_error(), HasSubstr("SLURM_NTASKS_PER_NODE=4"));
}

TEST(RankInfo, RankWithoutSizeNamesTheMissingVariable) {
  ClearEnvironment clear;
  {
    PatchEnvironment env{{"RANK", 1}};
    EXPECT_THAT(detect_error(), HasSubstr("WORLD_SIZE"));
  }
  {
    PatchEnvironment env{{"PMI_SIZE", 2}};
    EXPECT_THAT(detect_error(), HasSubstr("PMI_RANK"));
  }
}

TEST(RankInfo, BadMasterPortNamesTheVariable) {
  ClearEnvironment clear;
  {
    PatchEnvironment env{{"MASTER_PORT", 70000}};
    std::string msg = detect_error();
    EXPECT_THAT(msg, HasSubstr("MASTER_PORT"));
    EXPECT_THAT(msg, HasSubstr("70000"));
  }
  {
    PatchEnvironment env{{"MASTER_PORT", "http"}};
    EXPECT_THAT(detect_error(), HasSubstr("MASTER_PORT"));
  }
}

}  // namespace
}  // namespace braid
