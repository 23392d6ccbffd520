// SPDX-License-Identifier: Apache-2.0
// Checks of shapes that come from outside (files, other ranks) before a tensor is made of them:
// shape_numel (tensor.h) bounds the element count; strides_fit bounds the strides, which a
// shape with no elements can still overflow ([0, 2^40, 2^40, 2^40]). contiguous_strides
// throws kInvalidArgument for such a shape; parsers check strides_fit first and report
// kCorruptData naming the field (docs/fuzzing.md, "Bugs found").
#pragma once

#include "braid/tensor/tensor.h"

namespace braid {

// Whether the row-major strides of `shape` fit int64: the product of its dimensions, zeros
// counted as 1, is at most 2^63 - 1.
bool strides_fit(const Shape& shape);

}  // namespace braid
