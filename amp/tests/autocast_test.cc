#include "braid/amp/autocast.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>

#include <thread>

#include "braid/core/error.h"
#include "braid/tensor/ops.h"

namespace braid::amp {
namespace {

TEST(Autocast, OffByDefaultAndScopesNest) {
  EXPECT_FALSE(autocast_enabled());
  EXPECT_EQ(autocast_dtype(OpCategory::kMatmul, DType::kF32), DType::kF32);
  {
    AutocastScope outer(DType::kBF16);
    EXPECT_TRUE(autocast_enabled());
    EXPECT_EQ(autocast_low_dtype(), DType::kBF16);
    {
      AutocastScope inner(DType::kF16);
      EXPECT_EQ(autocast_dtype(OpCategory::kMatmul, DType::kF32), DType::kF16);
      {
        AutocastScope off(DType::kF16, {.enabled = false, .cache_enabled = {}});
        EXPECT_FALSE(autocast_enabled());
        EXPECT_EQ(autocast_dtype(OpCategory::kMatmul, DType::kF32), DType::kF32);
      }
      EXPECT_TRUE(autocast_enabled());
    }
    EXPECT_EQ(autocast_low_dtype(), DType::kBF16);
  }
  EXPECT_FALSE(autocast_enabled());
}

TEST(Autocast, CategoriesFollowTorchsLists) {
  AutocastScope s(DType::kBF16);
  EXPECT_EQ(autocast_dtype(OpCategory::kMatmul, DType::kF32), DType::kBF16);
  EXPECT_EQ(autocast_dtype(OpCategory::kMatmul, DType::kF16), DType::kBF16);
  EXPECT_EQ(autocast_dtype(OpCategory::kFp32, DType::kBF16), DType::kF32);
  EXPECT_EQ(autocast_dtype(OpCategory::kFp32, DType::kF32), DType::kF32);
  EXPECT_EQ(autocast_dtype(OpCategory::kPassThrough, DType::kBF16), DType::kBF16);
  EXPECT_EQ(autocast_dtype(OpCategory::kPromote, DType::kF32), DType::kF32);
  // Non-float and f64 inputs are never cast (torch leaves them alone).
  EXPECT_EQ(autocast_dtype(OpCategory::kMatmul, DType::kI64), DType::kI64);
  EXPECT_EQ(autocast_dtype(OpCategory::kMatmul, DType::kF64), DType::kF64);
}

TEST(Autocast, StateIsPerThread) {
  AutocastScope s(DType::kBF16);
  bool other = true;
  std::thread t([&] { other = autocast_enabled(); });
  t.join();
  EXPECT_FALSE(other);
  EXPECT_TRUE(autocast_enabled());
}

TEST(Autocast, RejectsNonLowDtypes) {
  EXPECT_THROW(AutocastScope(DType::kF32), Error);
  EXPECT_THROW(AutocastScope(DType::kI32), Error);
  EXPECT_NO_THROW(AutocastScope(DType::kF32, {.enabled = false, .cache_enabled = {}}));
}

TEST(Autocast, CastCacheLivesUntilTheOutermostScopeEnds) {
  Tensor w = Tensor::from_vector({1.0, 2.5, -3.0, 1.0 / 3.0}, {2, 2});
  Tensor first, again;
  {
    AutocastScope s(DType::kBF16);
    first = autocast_cast(w, OpCategory::kMatmul);
    EXPECT_EQ(first.dtype(), DType::kBF16);
    {
      AutocastScope inner(DType::kBF16);
      again = autocast_cast(w, OpCategory::kMatmul);
    }
    EXPECT_TRUE(again.shares_storage(first));  // cached
    // A different view of the same storage is cast on its own.
    Tensor row = autocast_cast(w.select(0, 1), OpCategory::kMatmul);
    EXPECT_EQ(row.to_vector(), (std::vector<double>{-3.0, 0.333984375}));
    // kFp32 leaves an f32 tensor as it is.
    EXPECT_TRUE(autocast_cast(w, OpCategory::kFp32).shares_storage(w));
  }
  {
    AutocastScope s(DType::kBF16);
    Tensor fresh = autocast_cast(w, OpCategory::kMatmul);
    EXPECT_FALSE(fresh.shares_storage(first));  // the cache was dropped
    EXPECT_TRUE(equal(fresh, first));
  }
  {
    AutocastScope s(DType::kBF16, {.enabled = true, .cache_enabled = false});
    Tensor a = autocast_cast(w, OpCategory::kMatmul);
    Tensor b = autocast_cast(w, OpCategory::kMatmul);
    EXPECT_FALSE(a.shares_storage(b));
  }
}

// As torch's cached_casts: the cache holds its sources weakly. A released source (a ZeRO-3
// unit after its forward) is freed, and a new tensor that the allocator places at the freed
// address is cast afresh, not served the old cast.
TEST(Autocast, CastCacheDoesNotKeepSourcesAlive) {
  AutocastScope s(DType::kBF16);
  std::weak_ptr<Storage> released;
  {
    Tensor w = Tensor::full({64, 64}, 1.0, DType::kF32);
    Tensor cast = autocast_cast(w, OpCategory::kMatmul);
    EXPECT_EQ(cast.to_vector()[0], 1.0);
    released = w.storage();
  }
  EXPECT_TRUE(released.expired());  // the cache did not keep the f32 storage
  // Same size again: the caching allocator hands out the freed block; if the storage object
  // lands at the same address, the expired reference tells them apart. Either way the cast
  // must be of the new values.
  for (int i = 0; i < 8; ++i) {
    Tensor w2 = Tensor::full({64, 64}, 2.0 + i, DType::kF32);
    Tensor cast2 = autocast_cast(w2, OpCategory::kMatmul);
    ASSERT_EQ(cast2.to_vector()[0], 2.0 + i) << "iteration " << i;
  }
}

TEST(Autocast, MixedPrecisionContextManagerFollowsTheSeed) {
  {
    auto s = get_mixed_precision_context_manager(true, PrecisionType::kFp16);
    EXPECT_EQ(autocast_low_dtype(), DType::kF16);
  }
  {
    auto s = get_mixed_precision_context_manager(true, PrecisionType::kFp8);
    EXPECT_EQ(autocast_low_dtype(), DType::kBF16);
  }
  {
    AutocastScope outer(DType::kBF16);
    // native_amp false: a null context that leaves the outer scope in force.
    auto s = get_mixed_precision_context_manager(false, PrecisionType::kFp16);
    EXPECT_TRUE(autocast_enabled());
    EXPECT_EQ(autocast_low_dtype(), DType::kBF16);
  }
  {
    auto s = get_mixed_precision_context_manager(true, PrecisionType::kNo);
    EXPECT_FALSE(autocast_enabled());
  }
  EXPECT_FALSE(autocast_enabled());
}

// PrecisionPolicy::autocast follows compute_dtype: the param dtype does not matter (DDP keeps
// f32 parameters under bf16 autocast), and an f32 compute dtype gives a scope that changes
// nothing.
TEST(Autocast, PolicyAutocastFollowsTheComputeDtype) {
  {
    PrecisionPolicy p = PrecisionPolicy::from(PrecisionType::kBf16);
    p.param_dtype = DType::kF32;
    auto s = p.autocast();
    EXPECT_TRUE(autocast_enabled());
    EXPECT_EQ(autocast_low_dtype(), DType::kBF16);
  }
  {
    auto s = PrecisionPolicy::from(PrecisionType::kFp16).autocast({.cache_enabled = false});
    EXPECT_EQ(autocast_low_dtype(), DType::kF16);
  }
  {
    PrecisionPolicy p = PrecisionPolicy::from(PrecisionType::kNo);
    p.param_dtype = DType::kBF16;  // stored narrower, computed as stored: no autocast
    auto s = p.autocast();
    EXPECT_FALSE(autocast_enabled());
  }
  {
    auto s = PrecisionPolicy::from(PrecisionType::kBf16)
                 .autocast({.enabled = false, .cache_enabled = {}});
    EXPECT_FALSE(autocast_enabled());
  }
  EXPECT_FALSE(autocast_enabled());
}

TEST(Autocast, ConvertOutputsToFp32ConvertsEveryLowPrecisionLeaf) {
  auto fwd = [](const Tree& in) {
    return Tree::map({{"logits", in.tensor().to(DType::kBF16)},
                      {"aux", Tree::list({in.tensor().to(DType::kF16), Tree(int64_t{3})})},
                      {"ids", Tensor::arange(3)}});
  };
  auto wrapped = convert_outputs_to_fp32(fwd);
  Tree out = wrapped(Tree(Tensor::from_vector({0.5, 1.5}, {2})));
  EXPECT_EQ(out.at("logits").tensor().dtype(), DType::kF32);
  EXPECT_EQ(out.at("aux").at(0).tensor().dtype(), DType::kF32);
  EXPECT_EQ(out.at("aux").at(1).as_int(), 3);
  EXPECT_EQ(out.at("ids").tensor().dtype(), DType::kI64);
  EXPECT_EQ(out.at("logits").tensor().to_vector(), (std::vector<double>{0.5, 1.5}));
  EXPECT_THROW(convert_outputs_to_fp32(nullptr), Error);
}

}  // namespace
}  // namespace braid::amp
