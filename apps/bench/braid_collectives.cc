// Collectives on braid's ProcessGroup: raw buffers through ProcessGroup::run (the embedding
// path), blocking calls. The shm backend waits on its futex path; nothing here spins.
#include <memory>

#include "bench/collectives.h"
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
  }
  return CollectiveKind::kAllReduce;
}

class BraidCollectives final : public Collectives {
 public:
  BraidCollectives(std::shared_ptr<Store> store, const std::string& backend) : backend_(backend) {
    ProcessGroupOptions o;
    o.backend = backend;
    o.store = std::move(store);
    pg_ = ProcessGroup::create(o);
  }
  std::string name() const override { return "braid " + backend_; }
  int rank() const override { return pg_->rank(); }
  int size() const override { return pg_->size(); }

  void* run(Op op, const CallBuffers& b, DType dtype, ReduceOp redop, int root) override {
    CollectiveDesc d;
    d.kind = kind_of(op);
    d.send = b.send;
    d.recv = b.recv;
    d.count = b.count;
    d.dtype = dtype;
    d.op = redop;
    d.root = root;
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
    pg_->run(d)->wait();
    return value;
  }

  std::string unsupported(Op, DType, ReduceOp) const override { return {}; }

  void* allocate_shared(size_t bytes) override { return pg_->backend().allocate(bytes); }
  void release_shared(void* p) override { pg_->backend().release(p); }

 private:
  std::shared_ptr<ProcessGroup> pg_;
  std::string backend_;
};

}  // namespace

std::unique_ptr<Collectives> make_braid_collectives(std::shared_ptr<Store> store,
                                                    const std::string& backend) {
  return std::make_unique<BraidCollectives>(std::move(store), backend);
}

}  // namespace braid::bench
