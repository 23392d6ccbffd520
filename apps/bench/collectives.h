// The one interface braid bench measures through: a library's six collectives on host
// buffers, plus the small helpers the sweep needs (barrier, a sum across ranks). braid's
// ProcessGroup implements it (braid_collectives.cc); a peer library (MPI) implements it in
// peers.cc, the one file that knows which peers this build has.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "braid/core/device.h"

namespace braid {
class Store;
}

namespace braid::bench {

// One call's buffers. Counts are elements per rank, as nccl-tests' "count" column: for
// all_gather each rank contributes `count`, reduce_scatter leaves `count` on each rank,
// all_to_all sends `count` to each peer. In place as braid's CollectiveDesc: send == recv,
// except all_gather (send = this rank's block of recv) and reduce_scatter (recv = this
// rank's block of send).
struct CallBuffers {
  const void* send = nullptr;
  void* recv = nullptr;
  int64_t count = 0;
  bool in_place = false;
};

class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual std::string name() const = 0;  // "braid shm", "mpi"
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Runs one collective and returns when this rank's part is complete; returns where the
  // result lies (for reduce_scatter in place libraries differ: braid leaves it at this rank's
  // block, MPI at the start of the buffer). Throws braid::Error on failure.
  virtual void* run(Op op, const CallBuffers& b, DType dtype, ReduceOp redop, int root) = 0;
  virtual void barrier() = 0;
  // Sum of `value` over all ranks, on every rank.
  virtual double sum_across(double value) = 0;
  // Empty when supported, else why not (the dtype or op has no equivalent).
  virtual std::string unsupported(Op op, DType dtype, ReduceOp redop) const = 0;
  // Where the buffers of run() must live: the host, or a GPU for a GPU backend (nccl), whose
  // buffers the sweep allocates there and checks through host copies (device_memory.h).
  virtual Device memory_device() const { return kCPU; }
  // -R 1: memory the library's collectives use without staging copies (braid: the backend's
  // allocate(), zero-copy on shm); nullptr where the library has none. Free with release().
  virtual void* allocate_shared(size_t bytes) { return nullptr; }
  virtual void release_shared(void* p) {}
};

// braid's ProcessGroup on `store` with the given backend; rank and size from the
// environment (detect_rank_info).
std::unique_ptr<Collectives> make_braid_collectives(std::shared_ptr<Store> store,
                                                    const std::string& backend);

// A library braid bench can compare with (--peer NAME). A session lives for the whole run:
// it initializes the library before braid's group exists (MPI_Init) and finalizes it last.
class PeerSession {
 public:
  virtual ~PeerSession() = default;
  // A store for braid's rendezvous when the environment provides none (the MPI peer builds
  // one over MPI, so plain `mpirun braid bench --peer mpi` works); null otherwise.
  virtual std::shared_ptr<Store> bootstrap_store() = 0;
  // Called once braid's store exists, before collectives(): a peer that needs a rendezvous of
  // its own (the limit program's segment name) makes it here.
  virtual void attach(const std::shared_ptr<Store>& store, int rank, int size) {}
  virtual Collectives& collectives() = 0;
};

// The names of the peers compiled into this build: "limit" (the bare shared-memory data path,
// limit_peer.cc), and "mpi" when BRAID_HAVE_MPI.
std::vector<std::string> available_peers();
// Starts peer `name`; throws kNotSupported naming the peer and the available ones.
std::unique_ptr<PeerSession> start_peer(const std::string& name);

}  // namespace braid::bench
