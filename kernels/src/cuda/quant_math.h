// The element code of the cuda quantization kernels (quant.cu), compiled for both sides (hd.h)
// so that braid_kernels_cuda_host_test runs these very functions on the host against
// cpu_quant.h at CpuIsa::kScalar, bit for bit: bitsandbytes' 4-bit comparison trees (dQuantizeNF4,
// dQuantizeFP4 in csrc/kernels.cu, the constants of kernels/src/cpu/quant.cc), the 8-bit
// dynamic-code search (dQuantize<0>), and LLM.int8's round-half-even to int8.
#pragma once

#include <cmath>
#include <cstdint>

#include "hd.h"

namespace braid::kernels::cuda::math {

// x already scaled to [-1, 1]; NaN falls through every '>' to code 0.
BRAID_HD inline uint8_t quantize_nf4(float x) {
  if (x > 0.03979014977812767f) {
    if (x > 0.3893125355243683f) {
      if (x > 0.6427869200706482f) return x > 0.8614784181118011f ? 0b1111 : 0b1110;
      return x > 0.5016634166240692f ? 0b1101 : 0b1100;
    }
    if (x > 0.2035212516784668f) return x > 0.2920137718319893f ? 0b1011 : 0b1010;
    return x > 0.1202552504837513f ? 0b1001 : 0b1000;
  }
  if (x > -0.33967943489551544f) {
    if (x > -0.13791173323988914f) return x > -0.045525018125772476f ? 0b0111 : 0b0110;
    return x > -0.23460740596055984f ? 0b0101 : 0b0100;
  }
  if (x > -0.6106329262256622f) return x > -0.4599952697753906f ? 0b0011 : 0b0010;
  return x > -0.8480964004993439f ? 0b0001 : 0b0000;
}

// Sign bit from x < 0, then a tree over |x| with the midpoints / 12.
BRAID_HD inline uint8_t quantize_fp4(float x) {
  const uint8_t sign = x < 0 ? 0b1000 : 0;
  x = fabsf(x);
  uint8_t q;
  if (x > 0.29166667f) {
    if (x > 0.583333f) {
      q = x > 0.8333333f ? 0b0011 : 0b0010;
    } else {
      q = x > 0.4166667f ? 0b0101 : 0b0100;
    }
  } else if (x > 0.0859375f) {
    q = x > 0.20833333f ? 0b0111 : 0b0110;
  } else {
    q = x > 0.00260417f ? 0b0001 : 0b0000;
  }
  return static_cast<uint8_t>(q + sign);
}

// dQuantize<0>: a 7-step binary search over the sorted 256-entry code, then the nearer neighbour.
BRAID_HD inline uint8_t quantize_dynamic(const float* code, float x) {
  int pivot = 127, upper_pivot = 255, lower_pivot = 0;
  float lower = -1.0f, upper = 1.0f;
  float val = code[pivot];
  for (int i = 64; i > 0; i >>= 1) {
    if (x > val) {
      lower_pivot = pivot;
      lower = val;
      pivot += i;
    } else {
      upper_pivot = pivot;
      upper = val;
      pivot -= i;
    }
    val = code[pivot];
  }
  if (upper_pivot == 255) upper = code[upper_pivot];
  if (lower_pivot == 0) lower = code[lower_pivot];
  if (x > val) {
    const float midpoint = (upper + val) * 0.5f;
    return static_cast<uint8_t>(x > midpoint ? upper_pivot : pivot);
  }
  const float midpoint = (lower + val) * 0.5f;
  return static_cast<uint8_t>(x < midpoint ? lower_pivot : pivot);
}

// clamp(round-half-even(x * scale), -127, 127); NaN gives 0 (the cpu's rule).
BRAID_HD inline int8_t quantize_int8(float x, float scale) {
  float v = rintf(x * scale);
  if (v != v) return 0;
  v = v < -127.0f ? -127.0f : (v > 127.0f ? 127.0f : v);
  return static_cast<int8_t>(v);
}

// Nibble e of a packed 4-bit array: element 2i in the high nibble of byte i.
BRAID_HD inline uint8_t nibble(const uint8_t* packed, int64_t e) {
  const uint8_t b = packed[e / 2];
  return e % 2 == 0 ? static_cast<uint8_t>(b >> 4) : static_cast<uint8_t>(b & 0x0F);
}

}  // namespace braid::kernels::cuda::math
