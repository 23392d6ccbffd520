// SPDX-License-Identifier: Apache-2.0
// Rank discovery: who this process is in the job, read from the variables the launcher that
// started it sets. `braid launch` and torchrun set the same variables (RANK, WORLD_SIZE, ...);
// mpirun (OpenMPI), PMI-based launchers (MPICH Hydra, Intel MPI, Cray) and Slurm's srun set
// their own. The order, the variables read and the defaults are listed in docs/launch.md
// ("Rank discovery"); the process group's init reads this when no ranks are given in code.
#pragma once

#include <string>

namespace braid {

struct RankInfo {
  int rank = 0;              // global rank, in [0, world_size)
  int world_size = 1;        // number of ranks in the job
  int local_rank = 0;        // rank among the ranks on this node, in [0, local_world_size)
  int local_world_size = 1;  // number of ranks on this node
  int group_rank = 0;        // index of this node (torchrun's GROUP_RANK)
  std::string master_addr = "127.0.0.1";  // where the rendezvous store listens (MASTER_ADDR)
  int master_port = 29500;                // its port (MASTER_PORT; torchrun's default)
  // Which launcher the values came from: "braid launch", "torchrun", "openmpi", "pmi",
  // "slurm" or "single process".
  std::string source = "single process";
  // Whether the launcher started the ranks as an MPI job: mpirun (OpenMPI), a PMI launcher, or
  // srun with an MPI plugin (SLURM_MPI_TYPE set to anything but "none", as `srun --mpi=pmix`
  // sets it). The default backend on several nodes is then "mpi" (docs/comm.md).
  bool mpi_launcher = false;
};

// Reads the environment, first match wins:
//   1. braid launch / torchrun: RANK or WORLD_SIZE set
//   2. OpenMPI: OMPI_COMM_WORLD_RANK or OMPI_COMM_WORLD_SIZE set
//   3. PMI: PMI_RANK or PMI_SIZE set
//   4. Slurm: SLURM_PROCID set
//   5. otherwise a single process, rank 0 of 1.
// MASTER_ADDR / MASTER_PORT are read for every source.
//
// Throws kInvalidArgument naming the variable and its value when a value is not a base-10
// integer, is negative, when a rank is not below its size (RANK >= WORLD_SIZE, a local rank
// >= the local size, a local size > the world size), or when a launcher's rank is set
// without its size (or the reverse).
//
//   RankInfo me = detect_rank_info();
//   if (me.rank == 0) log_info("world of ", me.world_size, " from ", me.source);
RankInfo detect_rank_info();

// The GPU a rank uses by default (docs/comm.md, "nccl"), given how many devices of the type
// this process sees: LOCAL_RANK (`local_rank`) when it is below `device_count`; 0 when a single
// device is visible (the launcher gave each rank its own, CUDA_VISIBLE_DEVICES per rank).
// Throws kNotSupported naming both numbers otherwise (device_count 0 included), so two ranks
// never silently share a device. The nccl backend and `braid bench` both choose through it.
int default_device_index(int local_rank, int device_count);

}  // namespace braid
