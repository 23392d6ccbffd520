// Collectives on braid's ProcessGroup: raw buffers through ProcessGroup::run (the embedding
// path), blocking calls. The shm backend waits on its futex path; nothing here spins. A GPU
// backend (nccl) gets device buffers (memory_device) and its blocking calls wait for the GPU.
#include <memory>

#include "bench/collectives.h"
#include "bench/device_memory.h"
#include "braid/comm/process_group.h"
#include "braid/core/error.h"

namespace braid::bench {
namespace {

CollectiveKind kind_of(Op op) {
  switch (op) {
    case Op::kAllReduce:
      return CollectiveKind::kAllReduce;
    case Op::kAllGather:
      return CollectiveKind::kAllGather;
    case Op::kReduceScatter:
      return CollectiveKind::kReduceScatter;
    case Op::kBroadcast:
      return CollectiveKind::kBroadcast;
    case Op::kReduce:
      return CollectiveKind::kReduce;
    case Op::kAllToAll:
      return CollectiveKind::kAllToAll;
    case Op::kScatter:
      return CollectiveKind::kScatter;
  }
  return CollectiveKind::kAllReduce;
}

class BraidCollectives final : public Collectives {
 public:
  BraidCollectives(std::shared_ptr<Store> store, const std::string& backend)
      : backend_(backend), device_(memory_device_of(backend)) {
    ProcessGroupOptions o;
    o.backend = backend;
    o.store = std::move(store);
    pg_ = ProcessGroup::create(o);
    if (!device_.is_host()) scratch_ = device_allocate(device_, sizeof(double));
  }
  ~BraidCollectives() override {
    if (scratch_ != nullptr) device_free(device_, scratch_);
  }
  Device memory_device() const override { return device_; }
  std::string name() const override { return "braid " + backend_; }
  int rank() const override { return pg_->rank(); }
  int size() const override { return pg_->size(); }

  void* run(Op op, const CallBuffers& b, DType dtype, ReduceOp redop, int root) override {
    // One descriptor for every call, as an embedder making many small calls keeps one: a
    // fresh one is 200 zeroed bytes a call (docs/performance.md, "Per-call cost").
    CollectiveDesc& d = desc_;
    d.kind = kind_of(op);
    d.send = b.send;
    d.recv = b.recv;
    d.count = b.count;
    d.dtype = dtype;
    d.op = redop;
    d.root = root;
    d.device = device_;
    pg_->run(d)->wait();
    return b.recv;
  }

  void barrier() override { pg_->barrier()->wait(); }

  double sum_across(double value) override {
    CollectiveDesc d;
    d.kind = CollectiveKind::kAllReduce;
    d.send = &value;
    d.recv = &value;
    d.count = 1;
    d.dtype = DType::kF64;
    d.device = device_;
    if (scratch_ != nullptr) {  // a GPU backend reduces device memory
      copy_to_device(device_, scratch_, &value, sizeof value);
      d.send = d.recv = scratch_;
      pg_->run(d)->wait();
      copy_to_host(device_, &value, scratch_, sizeof value);
      return value;
    }
    pg_->run(d)->wait();
    return value;
  }

  std::string unsupported(Op, DType, ReduceOp) const override { return {}; }

  void* allocate_shared(size_t bytes) override { return pg_->backend().allocate(bytes); }
  void release_shared(void* p) override { pg_->backend().release(p); }

 private:
  std::string backend_;
  Device device_;
  std::shared_ptr<ProcessGroup> pg_;
  CollectiveDesc desc_;      // run()'s; the fields it does not set keep their defaults
  void* scratch_ = nullptr;  // one f64 on device_ for sum_across, when that is a GPU
};

}  // namespace

std::unique_ptr<Collectives> make_braid_collectives(std::shared_ptr<Store> store,
                                                    const std::string& backend) {
  return std::make_unique<BraidCollectives>(std::move(store), backend);
}

}  // namespace braid::bench
