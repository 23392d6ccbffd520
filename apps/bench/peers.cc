// The peers braid bench can compare with (--peer), registered here and only here: this is
// the one file that branches on BRAID_HAVE_MPI and the only one that includes <mpi.h>
// (STYLE.md, "feature flags in one place"). The MPI peer measures MPI_Allreduce,
// MPI_Allgather, MPI_Reduce_scatter_block, MPI_Bcast, MPI_Reduce, MPI_Alltoall and MPI_Scatter on
// the same buffers, and bootstraps braid's store over MPI so plain `mpirun braid bench --peer mpi`
// needs no MASTER_PORT / BRAID_STORE_TOKEN.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "bench/collectives.h"
#include "bench/limit_peer.h"
#include "braid/core/config.h"
#include "braid/core/error.h"

#if BRAID_HAVE_MPI
// The C API only: OpenMPI's and MPICH's mpi.h otherwise pull in the removed C++ bindings.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include "braid/comm/tcp_store.h"
#include "braid/core/environment.h"
#endif

namespace braid::bench {

#if BRAID_HAVE_MPI
namespace {

void mpi_check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  BRAID_FAIL(kIo, "--peer mpi: ", what, " failed: ", std::string(text, len));
}

// MPI has no half, bfloat16 or fp8 datatypes (MPI-4.0 has none either).
MPI_Datatype mpi_type(DType d) {
  switch (d) {
    case DType::kF64:
      return MPI_DOUBLE;
    case DType::kF32:
      return MPI_FLOAT;
    case DType::kI64:
      return MPI_INT64_T;
    case DType::kI32:
      return MPI_INT32_T;
    case DType::kI16:
      return MPI_INT16_T;
    case DType::kI8:
      return MPI_INT8_T;
    case DType::kU8:
      return MPI_UINT8_T;
    default:
      return MPI_DATATYPE_NULL;
  }
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return MPI_SUM;
    case ReduceOp::kProd:
      return MPI_PROD;
    case ReduceOp::kMin:
      return MPI_MIN;
    case ReduceOp::kMax:
      return MPI_MAX;
    default:
      return MPI_OP_NULL;
  }
}

class MpiCollectives final : public Collectives {
 public:
  MpiCollectives() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  std::string name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::string unsupported(Op op, DType dtype, ReduceOp redop) const override {
    if (mpi_type(dtype) == MPI_DATATYPE_NULL) {
      return "MPI has no datatype for " + std::string(nccl_type_name(dtype));
    }
    if (op_reduces(op) && mpi_op(redop) == MPI_OP_NULL) {
      return "MPI has no reduction op " + std::string(reduce_op_name(redop));
    }
    return {};
  }

  void* run(Op op, const CallBuffers& b, DType dtype, ReduceOp redop, int root) override {
    const MPI_Datatype t = mpi_type(dtype);
    const int n = static_cast<int>(b.count);
    BRAID_CHECK(b.count <= INT32_MAX, kNotSupported, "--peer mpi: count ", b.count,
                " exceeds MPI's int counts");
    const void* send = b.in_place ? MPI_IN_PLACE : b.send;
    switch (op) {
      case Op::kAllReduce:
        mpi_check(MPI_Allreduce(send, b.recv, n, t, mpi_op(redop), MPI_COMM_WORLD),
                  "MPI_Allreduce");
        return b.recv;
      case Op::kAllGather:
        mpi_check(MPI_Allgather(send, n, t, b.recv, n, t, MPI_COMM_WORLD), "MPI_Allgather");
        return b.recv;
      case Op::kReduceScatter: {
        // In place MPI reads the input from the receive buffer and leaves the result at its
        // start; braid's in-place form has recv inside send (this rank's block).
        void* recv = b.in_place ? const_cast<void*>(b.send) : b.recv;
        mpi_check(MPI_Reduce_scatter_block(send, recv, n, t, mpi_op(redop), MPI_COMM_WORLD),
                  "MPI_Reduce_scatter_block");
        return recv;
      }
      case Op::kBroadcast:
        // MPI_Bcast has one buffer; out of place the root first copies its input into it,
        // as NCCL's out-of-place broadcast does on the device.
        if (!b.in_place && rank_ == root && b.count > 0) {
          int size = 0;
          MPI_Type_size(t, &size);
          std::memcpy(b.recv, b.send, static_cast<size_t>(b.count) * size);
        }
        mpi_check(MPI_Bcast(b.recv, n, t, root, MPI_COMM_WORLD), "MPI_Bcast");
        return b.recv;
      case Op::kReduce:
        // Only the root may pass MPI_IN_PLACE.
        mpi_check(MPI_Reduce(b.in_place && rank_ != root ? b.send : send, b.recv, n, t,
                             mpi_op(redop), root, MPI_COMM_WORLD),
                  "MPI_Reduce");
        return b.recv;
      case Op::kAllToAll:
        mpi_check(MPI_Alltoall(send, n, t, b.recv, n, t, MPI_COMM_WORLD), "MPI_Alltoall");
        return b.recv;
      case Op::kScatter:
        // In place only the root passes MPI_IN_PLACE (as its recv): its block stays in its send
        // buffer, where braid's in-place recv points.
        mpi_check(MPI_Scatter(b.send, n, t, b.in_place && rank_ == root ? MPI_IN_PLACE : b.recv, n,
                              t, root, MPI_COMM_WORLD),
                  "MPI_Scatter");
        return b.recv;
    }
    return b.recv;
  }

  void barrier() override { mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

  double sum_across(double value) override {
    double out = 0;
    mpi_check(MPI_Allreduce(&value, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
    return out;
  }

 private:
  int rank_ = 0;
  int size_ = 1;
};

class MpiSession final : public PeerSession {
 public:
  MpiSession() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      mpi_check(MPI_Init(nullptr, nullptr), "MPI_Init");
      owns_mpi_ = true;
    }
    collectives_ = std::make_unique<MpiCollectives>();
  }
  ~MpiSession() override {
    if (std::uncaught_exceptions() > unwinding_) {
      // An error is leaving the run: a barrier (or MPI_Finalize) would wait, without a
      // deadline, for ranks that may be stuck in the call that failed here. Leave without
      // them; mpirun ends the job when this rank exits non-zero.
      server_.reset();
      return;
    }
    // Every rank is done with braid's store before rank 0 stops serving it.
    MPI_Barrier(MPI_COMM_WORLD);
    server_.reset();
    collectives_.reset();
    if (owns_mpi_) MPI_Finalize();
  }

  // Rank 0 serves a TCP store and broadcasts its address, port and token. The address is rank
  // 0's MASTER_ADDR when set (mpirun -x MASTER_ADDR=<node 0's address>: ranks on other nodes
  // must reach it), else loopback (one node).
  std::shared_ptr<Store> bootstrap_store() override {
    char host[256] = {};
    char token[64] = {};
    int port = 0;
    if (collectives_->rank() == 0) {
      std::string h = get_env_string("MASTER_ADDR", "127.0.0.1");
      if (h.empty()) h = "127.0.0.1";
      BRAID_CHECK(h.size() < sizeof host, kInvalidArgument, "MASTER_ADDR='", h,
                  "': expected a host name or address shorter than ", sizeof host, " bytes");
      std::string t = generate_store_token();
      server_ = std::make_unique<TcpStoreServer>(h, 0, t);
      port = server_->port();
      std::snprintf(host, sizeof host, "%s", h.c_str());
      std::snprintf(token, sizeof token, "%s", t.c_str());
    }
    mpi_check(MPI_Bcast(host, sizeof host, MPI_CHAR, 0, MPI_COMM_WORLD), "MPI_Bcast (store host)");
    mpi_check(MPI_Bcast(&port, 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Bcast (store port)");
    mpi_check(MPI_Bcast(token, sizeof token, MPI_CHAR, 0, MPI_COMM_WORLD),
              "MPI_Bcast (store token)");
    return std::make_shared<TcpStore>(host, static_cast<uint16_t>(port), token);
  }

  Collectives& collectives() override { return *collectives_; }

 private:
  bool owns_mpi_ = false;
  // Exceptions already in flight when the session began (normally none).
  const int unwinding_ = std::uncaught_exceptions();
  std::unique_ptr<TcpStoreServer> server_;
  std::unique_ptr<MpiCollectives> collectives_;
};

}  // namespace
#endif  // BRAID_HAVE_MPI

std::vector<std::string> available_peers() {
  std::vector<std::string> names = {"limit"};
#if BRAID_HAVE_MPI
  names.emplace_back("mpi");
#endif
  return names;
}

std::unique_ptr<PeerSession> start_peer(const std::string& name) {
  if (name == "limit") return start_limit_peer();
#if BRAID_HAVE_MPI
  if (name == "mpi") return std::make_unique<MpiSession>();
#endif
  std::string have;
  for (const std::string& p : available_peers()) have += (have.empty() ? "" : ", ") + p;
  BRAID_FAIL(
      kNotSupported, "--peer '", name, "': this build has ",
      have.empty() ? std::string("no peer libraries (configure with MPI found)") : "only: " + have);
}

}  // namespace braid::bench
