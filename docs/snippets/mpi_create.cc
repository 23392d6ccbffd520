// docs/mpi.md: a group on the mpi backend. ctest runs it under mpirun (tests/multiproc/run_mpi.sh
// sets the store variables) when MPI is built; exits 1 unless an all_reduce over it is right.
#include "check_world.h"

int main() {
  // [snippet]
  braid::ProcessGroupOptions options;
  options.backend = "mpi";                         // ranks from OMPI_COMM_WORLD_* / PMI / Slurm
  auto pg = braid::ProcessGroup::create(options);  // store from MASTER_ADDR / MASTER_PORT
  // [end snippet]
  return check_world(*pg, "mpi");
}
