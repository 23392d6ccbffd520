// SPDX-License-Identifier: Apache-2.0
// Tensors whose storage the group's backend allocates (Backend::allocate), so collectives on
// them can skip the staging copy: on shm, a collective whose buffers all lie in such tensors
// reads the peers' data in place (docs/shm.md, "Zero-copy buffers").
#pragma once

#include <memory>

#include "braid/comm/process_group.h"
#include "braid/tensor/tensor.h"

namespace braid {

// An uninitialized contiguous cpu tensor in `group`'s shared memory. The tensor keeps the
// group alive (its deleter returns the block with Backend::release), so it may outlive the
// caller's handle. Falls back to Tensor::empty when the backend cannot allocate (capability
// can_allocate_shared false, or allocate() returning nullptr); collectives on either kind of
// tensor give the same bits. A full arena is an error (kOutOfMemory naming the sizes), not a
// silent fallback. Throws kInvalidArgument for a null group or a rank outside the group.
Tensor empty_shared(const std::shared_ptr<ProcessGroup>& group, Shape shape,
                    DType dtype = DType::kF32);

}  // namespace braid
