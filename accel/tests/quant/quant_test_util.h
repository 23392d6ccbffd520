// Helpers the quantization tests share (accel/tests/quant/ and accel/tests/quant_large/).
#pragma once

#include <cstring>
#include <string>

#include "braid/accel/quantization.h"
#include "braid/tensor/tensor.h"

namespace braid::accel::quant_testing {

// The configuration of a mode by its name in the tests: "int8" (LLM.int8), "nf4", "nf4-dq" (NF4
// with double quantization) or "fp4"; f32 compute.
inline BnbQuantizationConfig bnb_mode(const std::string& name) {
  BnbQuantizationConfig c;
  c.load_in_8bit = name == "int8";
  c.load_in_4bit = !c.load_in_8bit;
  c.bnb_4bit_quant_type = name == "fp4" ? "fp4" : "nf4";
  c.bnb_4bit_use_double_quant = name == "nf4-dq";
  c.bnb_4bit_compute_dtype = "fp32";
  return c;
}

// Same shape, dtype and bytes.
inline bool bitwise(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

}  // namespace braid::accel::quant_testing
