#include "braid/amp/precision.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "braid/core/error.h"

namespace braid::amp {
namespace {

using ::testing::HasSubstr;

TEST(PrecisionType, ParsesTheSeedsNamesAndRejectsOthers) {
  EXPECT_EQ(parse_precision_type("no"), PrecisionType::kNo);
  EXPECT_EQ(parse_precision_type("fp32"), PrecisionType::kNo);
  EXPECT_EQ(parse_precision_type("fp16"), PrecisionType::kFp16);
  EXPECT_EQ(parse_precision_type("bf16"), PrecisionType::kBf16);
  EXPECT_EQ(parse_precision_type("fp8"), PrecisionType::kFp8);
  for (auto t :
       {PrecisionType::kNo, PrecisionType::kFp16, PrecisionType::kBf16, PrecisionType::kFp8}) {
    EXPECT_EQ(parse_precision_type(precision_type_name(t)), t);
  }
  try {
    parse_precision_type("half");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_THAT(e.message(), HasSubstr("'half'"));
    EXPECT_THAT(e.message(), HasSubstr("\"bf16\""));
  }
}

TEST(PrecisionPolicy, MapsEachTypeToFsdpDtypes) {
  const auto no = PrecisionPolicy::from("no");
  EXPECT_EQ(no.param_dtype, DType::kF32);
  EXPECT_EQ(no.reduce_dtype, DType::kF32);
  EXPECT_FALSE(no.needs_grad_scaler());

  const auto fp16 = PrecisionPolicy::from("fp16");
  EXPECT_EQ(fp16.param_dtype, DType::kF16);
  EXPECT_EQ(fp16.compute_dtype, DType::kF16);
  EXPECT_EQ(fp16.reduce_dtype, DType::kF16);
  EXPECT_EQ(fp16.buffer_dtype, DType::kF16);
  EXPECT_EQ(fp16.master_dtype, DType::kF32);
  EXPECT_EQ(fp16.state_dtype, DType::kF32);
  EXPECT_TRUE(fp16.needs_grad_scaler());

  const auto bf16 = PrecisionPolicy::from("bf16");
  EXPECT_EQ(bf16.param_dtype, DType::kBF16);
  EXPECT_EQ(bf16.master_dtype, DType::kF32);
  EXPECT_FALSE(bf16.needs_grad_scaler());
  EXPECT_TRUE(bf16.needs_master_weights(DType::kBF16));
  EXPECT_FALSE(bf16.needs_master_weights(DType::kF32));

  const auto fp8 = PrecisionPolicy::from("fp8");
  EXPECT_EQ(fp8.param_dtype, DType::kBF16);
  EXPECT_EQ(fp8.reduce_dtype, DType::kBF16);
  EXPECT_FALSE(fp8.needs_grad_scaler());
}

TEST(PrecisionPolicy, KeepInFp32MatchesWholeNameComponents) {
  auto p = PrecisionPolicy::from("bf16");
  p.keep_in_fp32_modules = {"ln_f", "lm_head", "wo"};
  EXPECT_EQ(p.param_dtype_for("lm_head.weight"), DType::kF32);
  EXPECT_EQ(p.param_dtype_for("transformer.ln_f.bias"), DType::kF32);
  EXPECT_EQ(p.param_dtype_for("transformer.h.3.mlp.wo.weight"), DType::kF32);
  EXPECT_EQ(p.param_dtype_for("transformer.ln_foo.weight"), DType::kBF16);
  EXPECT_EQ(p.param_dtype_for("transformer.h.0.attn.c_attn.weight"), DType::kBF16);
  EXPECT_EQ(p.param_dtype_for("wox.weight"), DType::kBF16);
  EXPECT_EQ(p.param_dtype_for("ln_f"), DType::kF32);
  EXPECT_TRUE(p.keeps_in_fp32("lm_head.weight"));
  EXPECT_FALSE(p.keeps_in_fp32("transformer.h.0.attn.c_attn.weight"));
}

// Keeping only ever widens a narrower param_dtype to f32 (transformers keeps modules in f32
// under 16-bit dtypes only): f32 and f64 parameters are left as they are.
TEST(PrecisionPolicy, KeepInFp32NeverNarrowsAWideParamDtype) {
  auto p = PrecisionPolicy::from("no");
  p.keep_in_fp32_modules = {"ln_f"};
  EXPECT_FALSE(p.keeps_in_fp32("ln_f.weight"));
  EXPECT_EQ(p.param_dtype_for("ln_f.weight"), DType::kF32);
  p.param_dtype = DType::kF64;
  EXPECT_EQ(p.param_dtype_for("ln_f.weight"), DType::kF64);
  p.param_dtype = DType::kF16;
  EXPECT_EQ(p.param_dtype_for("ln_f.weight"), DType::kF32);
}

TEST(PrecisionPolicy, ComparesEveryField) {
  auto a = PrecisionPolicy::from("bf16"), b = a;
  EXPECT_EQ(a, b);
  b.keep_in_fp32_modules = {"ln_f"};
  EXPECT_NE(a, b);
  b = a;
  b.reduce_dtype = DType::kF32;
  EXPECT_NE(a, b);
}

// The one matcher (big-model loading uses it too; its own copy once kept
// "transformer.xln_f.weight" for the key "ln_f").
TEST(KeepInFp32, WholeRunsOfComponentsOnly) {
  EXPECT_FALSE(keep_in_fp32("transformer.xln_f.weight", {"ln_f"}));
  EXPECT_FALSE(keep_in_fp32("transformer.ln_fx.weight", {"ln_f"}));
  EXPECT_TRUE(keep_in_fp32("transformer.ln_f.weight", {"ln_f"}));
  EXPECT_TRUE(keep_in_fp32("transformer.h.0.mlp.c_fc.weight", {"h.0"}));
  EXPECT_FALSE(keep_in_fp32("transformer.h.01.mlp.c_fc.weight", {"h.0"}));
  EXPECT_FALSE(keep_in_fp32("lm_head.weight", {"", "ln_f"}));
  EXPECT_TRUE(keep_in_fp32("lm_head", {"lm_head"}));
}

}  // namespace
}  // namespace braid::amp
