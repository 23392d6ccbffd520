// empty_shared: a Tensor over a block of the group backend's shared memory, released through
// the backend when the last view goes away (the deleter holds the group, so the mapping
// outlives the tensor). Falls back to ordinary cpu memory where the backend cannot allocate.
#include "braid/comm/shared_tensor.h"

#include "braid/core/error.h"

namespace braid {
namespace {

struct SharedRelease {
  std::shared_ptr<ProcessGroup> group;
  void operator()(void* ptr) const { group->backend().release(ptr); }
};

}  // namespace

Tensor empty_shared(const std::shared_ptr<ProcessGroup>& group, Shape shape, DType dtype) {
  BRAID_CHECK(group != nullptr, kInvalidArgument,
              "empty_shared: group is null (expected a ProcessGroup)");
  BRAID_CHECK(group->rank() >= 0, kInvalidArgument,
              "empty_shared: this process is not a member of the group (rank -1; expected a "
              "group this rank belongs to)");
  Backend& backend = group->backend();
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  void* ptr = backend.capabilities().can_allocate_shared ? backend.allocate(bytes) : nullptr;
  if (ptr == nullptr) return Tensor::empty(std::move(shape), dtype);
  try {
    return Tensor::from_blob(ptr, std::move(shape), dtype, kCPU, SharedRelease{group});
  } catch (...) {
    backend.release(ptr);
    throw;
  }
}

}  // namespace braid
