// PrecisionType names and the policies of each (docs/mixed-precision.md, "Which dtype where").
#include "braid/amp/precision.h"

#include "braid/core/error.h"

namespace braid::amp {

PrecisionType parse_precision_type(std::string_view name) {
  if (name == "no" || name == "fp32") return PrecisionType::kNo;
  if (name == "fp16") return PrecisionType::kFp16;
  if (name == "bf16") return PrecisionType::kBf16;
  if (name == "fp8") return PrecisionType::kFp8;
  BRAID_FAIL(kInvalidArgument, "mixed precision '", name,
             "': expected one of \"no\", \"fp16\", \"bf16\", \"fp8\"");
}

std::string_view precision_type_name(PrecisionType type) {
  switch (type) {
    case PrecisionType::kNo:
      return "no";
    case PrecisionType::kFp16:
      return "fp16";
    case PrecisionType::kBf16:
      return "bf16";
    case PrecisionType::kFp8:
      return "fp8";
  }
  return "?";
}

PrecisionPolicy PrecisionPolicy::from(PrecisionType type) {
  PrecisionPolicy p;
  p.type = type;
  DType low = DType::kF32;
  if (type == PrecisionType::kFp16) low = DType::kF16;
  if (type == PrecisionType::kBf16 || type == PrecisionType::kFp8) low = DType::kBF16;
  p.param_dtype = p.compute_dtype = p.reduce_dtype = p.buffer_dtype = low;
  p.master_dtype = p.state_dtype = DType::kF32;
  return p;
}

bool keep_in_fp32(std::string_view name, const std::vector<std::string>& modules) {
  for (const std::string& m : modules) {
    if (m.empty()) continue;
    // A whole dotted component must match: "ln_f" keeps "ln_f.weight" and
    // "transformer.ln_f.bias", not "ln_foo.weight" nor "transformer.xln_f.weight".
    size_t pos = 0;
    while ((pos = name.find(m, pos)) != std::string_view::npos) {
      const bool starts = pos == 0 || name[pos - 1] == '.';
      const size_t end = pos + m.size();
      const bool ends = end == name.size() || name[end] == '.';
      if (starts && ends) return true;
      ++pos;
    }
  }
  return false;
}

bool PrecisionPolicy::keeps_in_fp32(std::string_view name) const {
  return dtype_size(param_dtype) < dtype_size(DType::kF32) &&
         keep_in_fp32(name, keep_in_fp32_modules);
}

DType PrecisionPolicy::param_dtype_for(std::string_view name) const {
  return keeps_in_fp32(name) ? DType::kF32 : param_dtype;
}

}  // namespace braid::amp
