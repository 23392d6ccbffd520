// copy_strided() / copy_to_strided(): gathers and scatters checked element by element against
// index arithmetic, for transposed, broadcast, sliced, 0-d and empty views; bad input.
// copy_nontemporal(): byte-exact against the source at every alignment and length around the
// 64-byte lines it streams, without touching a byte outside the destination.
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "braid/kernels/cpu.h"
#include "kernel_test_util.h"

namespace braid::kernels::cpu {
namespace {

using testing::expect_error;

TEST(CopyStrided, TransposedGather) {
  std::vector<int32_t> src(12);
  std::iota(src.begin(), src.end(), 0);                  // a 3 x 4 row-major matrix
  const int64_t shape[2] = {4, 3}, strides[2] = {1, 4};  // its transpose
  std::vector<int32_t> dst(12, -1);
  copy_strided(src.data(), 4, 2, shape, strides, dst.data());
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_EQ(dst[i * 3 + j], j * 4 + i);
}

TEST(CopyStrided, BroadcastAndSlice) {
  std::vector<double> src = {1.5, 2.5, 3.5, 4.5, 5.5, 6.5};
  const int64_t shape[3] = {2, 3, 2}, strides[3] = {0, 2, 1};  // row broadcast of a 3 x 2
  std::vector<double> dst(12);
  copy_strided(src.data(), 8, 3, shape, strides, dst.data());
  for (int r = 0; r < 2; ++r)
    for (int k = 0; k < 6; ++k) EXPECT_EQ(dst[r * 6 + k], src[k]);
  const int64_t every_other = 2, three = 3;  // src[0], src[2], src[4]
  std::vector<double> d3(3);
  copy_strided(src.data(), 8, 1, &three, &every_other, d3.data());
  EXPECT_EQ(d3, (std::vector<double>{1.5, 3.5, 5.5}));
}

TEST(CopyStrided, ScalarAndEmpty) {
  const uint16_t v = 0xbeef;
  uint16_t out = 0;
  copy_strided(&v, 2, 0, nullptr, nullptr, &out);
  EXPECT_EQ(out, 0xbeef);
  const int64_t shape[2] = {5, 0}, strides[2] = {1, 1};
  copy_strided(nullptr, 2, 2, shape, strides, nullptr);  // nothing touched
}

TEST(CopyToStrided, ScatterIsTheInverseOfGather) {
  std::vector<float> dense(24);
  std::iota(dense.begin(), dense.end(), 100.0f);
  const int64_t shape[3] = {2, 3, 4}, strides[3] = {1, 8, 2};  // a permuted, gapped layout
  std::vector<float> strided(32, -1.0f), back(24);
  copy_to_strided(dense.data(), 4, 3, shape, strided.data(), strides);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) EXPECT_EQ(strided[i + 8 * j + 2 * k], dense[(i * 3 + j) * 4 + k]);
  EXPECT_EQ(strided[31], -1.0f);  // gaps untouched
  copy_strided(strided.data(), 4, 3, shape, strides, back.data());
  EXPECT_EQ(back, dense);
}

TEST(CopyStrided, BadInput) {
  const int64_t n = 1, s = 1;
  int8_t a = 0, b = 0;
  expect_error([&] { copy_strided(&a, 0, 1, &n, &s, &b); }, ErrorKind::kInvalidArgument,
               {"copy_strided", "element size", "0"});
  expect_error([&] { copy_to_strided(&a, -4, 1, &n, &b, &s); }, ErrorKind::kInvalidArgument,
               {"copy_to_strided", "-4"});
}

TEST(CopyNontemporal, EveryAlignmentAndLengthAroundTheLineSize) {
  std::vector<uint8_t> src(4096 + 256);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 131 + 7);
  for (int64_t dst_off : {0, 1, 15, 16, 63}) {
    for (int64_t src_off : {0, 3, 64}) {
      for (int64_t len : {0, 1, 63, 64, 65, 127, 128, 200, 4000}) {
        std::vector<uint8_t> dst(4096 + 256, 0xEE);
        copy_nontemporal(dst.data() + dst_off, src.data() + src_off, len);
        for (int64_t i = 0; i < static_cast<int64_t>(dst.size()); ++i) {
          const bool inside = i >= dst_off && i < dst_off + len;
          const uint8_t want = inside ? src[i - dst_off + src_off] : 0xEE;
          ASSERT_EQ(dst[i], want) << "dst_off " << dst_off << " src_off " << src_off << " len "
                                  << len << " byte " << i;
        }
      }
    }
  }
}

TEST(CopyNontemporal, NegativeLengthIsInvalid) {
  uint8_t a[4] = {}, b[4] = {};
  expect_error([&] { copy_nontemporal(a, b, -1); }, ErrorKind::kInvalidArgument,
               {"copy_nontemporal", "-1"});
}

}  // namespace
}  // namespace braid::kernels::cpu
