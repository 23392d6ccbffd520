// Quantization kernels in bitsandbytes' formats (braid/kernels/cpu_quant.h): code tables, the
// 4-bit and 8-bit block-wise quantizers and dequantizers, LLM.int8's row-wise int8 and its
// int8 GEMM with f32 outlier columns. The scalar reference, and the level table (quant_impl.h)
// through which gemm_i8_i32 and dequantize_4bit reach quant_avx2.cc / quant_avx512.cc. The
// comparison trees and the binary search are bitsandbytes' own (csrc/kernels.cu).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "braid/core/error.h"
#include "braid/kernels/cpu_quant.h"
#include "isa_dispatch.h"
#include "quant_impl.h"

namespace braid::kernels::cpu {
namespace {

// bitsandbytes/functional.py get_4bit_type("nf4"): the NF4 values as f32.
constexpr std::array<float, 16> kNf4 = {-1.0f,
                                        -0.6961928009986877f,
                                        -0.5250730514526367f,
                                        -0.39491748809814453f,
                                        -0.28444138169288635f,
                                        -0.18477343022823334f,
                                        -0.09105003625154495f,
                                        0.0f,
                                        0.07958029955625534f,
                                        0.16093020141124725f,
                                        0.24611230194568634f,
                                        0.33791524171829224f,
                                        0.44070982933044434f,
                                        0.5626170039176941f,
                                        0.7229568362236023f,
                                        1.0f};

std::array<float, 16> make_fp4() {
  // get_4bit_type("fp4"): the E2M1 values as bitsandbytes lays them out, then
  // data.div_(data.abs().max()) in f32. Entry 8 is +0: the Python list's "-0" is the integer 0.
  constexpr float raw[16] = {0.0f, 0.0625f,  8.0f,  12.0f,  4.0f,  6.0f,  2.0f,  3.0f,
                             0.0f, -0.0625f, -8.0f, -12.0f, -4.0f, -6.0f, -2.0f, -3.0f};
  std::array<float, 16> out{};
  for (int i = 0; i < 16; ++i) out[i] = raw[i] / 12.0f;
  return out;
}

// torch.linspace(start, end, steps, dtype=float32) as ATen's scalar loop computes it.
std::vector<float> linspace_f32(float start, float end, int64_t steps) {
  std::vector<float> out(static_cast<size_t>(steps));
  const float step = (end - start) / static_cast<float>(steps - 1);
  const int64_t halfway = steps / 2;
  for (int64_t i = 0; i < steps; ++i) {
    out[i] = i < halfway ? start + step * static_cast<float>(i)
                         : end - step * static_cast<float>(steps - i - 1);
  }
  return out;
}

std::array<float, 256> make_dynamic_signed() {
  // create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8): for exponent i in
  // 0..6, 2^i fraction means of linspace(0.1, 1, 2^i + 1), scaled by +-10^(i - 6); plus 0 and
  // 1; sorted. (additional_items is 0 for these arguments.)
  std::vector<float> data;
  for (int i = 0; i < 7; ++i) {
    const std::vector<float> b = linspace_f32(0.1f, 1.0f, (int64_t{1} << i) + 1);
    const float scale = static_cast<float>(std::pow(10.0, i - 6));
    for (size_t j = 0; j + 1 < b.size(); ++j) {
      const float mean = (b[j] + b[j + 1]) / 2.0f;
      data.push_back(scale * mean);
      data.push_back(-scale * mean);
    }
  }
  data.push_back(0.0f);
  data.push_back(1.0f);
  std::sort(data.begin(), data.end());
  std::array<float, 256> out{};
  std::copy(data.begin(), data.end(), out.begin());
  return out;
}

// dQuantizeNF4: x already scaled to [-1, 1]; NaN falls through every '>' to code 0.
uint8_t quantize_nf4(float x) {
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

// dQuantizeFP4: sign bit from x < 0, then a tree over |x| with the midpoints / 12.
uint8_t quantize_fp4(float x) {
  const uint8_t sign = x < 0 ? 0b1000 : 0;
  x = std::fabs(x);
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

// dQuantize<0>: binary search over the sorted 256-entry code, then the nearer neighbour.
uint8_t quantize_dynamic(const float* code, float x) {
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

float block_absmax(const float* x, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

void check_block(const char* op, const void* a, const void* b, const void* c, int64_t n,
                 int64_t blocksize) {
  BRAID_CHECK(n >= 0, kInvalidArgument, op, ": count ", n, " is negative");
  BRAID_CHECK(blocksize > 0 && blocksize % 2 == 0, kInvalidArgument, op, ": blocksize ", blocksize,
              " must be positive and even");
  BRAID_CHECK(n == 0 || (a && b && c), kInvalidArgument, op, ": null pointer with count ", n);
}

void gemm_i8_scalar(const int8_t* a, const int8_t* b, int64_t m, int64_t n, int64_t k, int32_t* c) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const int8_t* ar = a + i * k;
      const int8_t* br = b + j * k;
      int32_t acc = 0;
      for (int64_t p = 0; p < k; ++p) acc += int32_t{ar[p]} * int32_t{br[p]};
      c[i * n + j] = acc;
    }
  }
}

void dequant4_pairs_scalar(const float* scaled16, const uint8_t* packed, int64_t pairs, float* y) {
  for (int64_t j = 0; j < pairs; ++j) {
    y[2 * j] = scaled16[packed[j] >> 4];
    y[2 * j + 1] = scaled16[packed[j] & 0x0F];
  }
}

// One table per level; a level without its own entry keeps the narrower one's.
const QuantTable& quant_table() {
  static const IsaTable<const QuantTable*> tables = [] {
    static QuantTable scalar_t{gemm_i8_scalar, dequant4_pairs_scalar};
    static QuantTable avx2_t = scalar_t;
    static QuantTable avx512_t;
    IsaTable<const QuantTable*> t;
    t.scalar = &scalar_t;
    if (cpu_supports(CpuIsa::kAvx2)) {
      avx2::fill_quant_table(avx2_t);
      t.avx2 = &avx2_t;
    }
    if (cpu_supports(CpuIsa::kAvx512)) {
      avx512_t = avx2_t;
      avx512::fill_quant_table(avx512_t);
      t.avx512 = &avx512_t;
    }
    return t;
  }();
  return *tables.get();
}

}  // namespace

const float* quant4_code(Quant4Type type) {
  static const std::array<float, 16> fp4 = make_fp4();
  return type == Quant4Type::kNf4 ? kNf4.data() : fp4.data();
}

const float* dynamic_code_signed() {
  static const std::array<float, 256> code = make_dynamic_signed();
  return code.data();
}

void quantize_4bit(Quant4Type type, const float* x, int64_t n, int64_t blocksize, uint8_t* packed,
                   float* absmax) {
  check_block("quantize_4bit", x, packed, absmax, n, blocksize);
  auto quant = type == Quant4Type::kNf4 ? quantize_nf4 : quantize_fp4;
  if (n > 0) std::memset(packed, 0, static_cast<size_t>((n + 1) / 2));  // null when n == 0
  for (int64_t b0 = 0; b0 < n; b0 += blocksize) {
    const int64_t len = std::min(blocksize, n - b0);
    const float m = block_absmax(x + b0, len);
    absmax[b0 / blocksize] = m;
    const float inv = 1.0f / m;  // as the CUDA kernel: multiply by the reciprocal
    for (int64_t i = b0; i < b0 + len; ++i) {
      const uint8_t q = quant(x[i] * inv);
      packed[i / 2] |= static_cast<uint8_t>(i % 2 == 0 ? q << 4 : q);
    }
  }
}

void dequantize_4bit(const float* code, const uint8_t* packed, const float* absmax, int64_t n,
                     int64_t blocksize, float* y) {
  check_block("dequantize_4bit", packed, absmax, y, n, blocksize);
  BRAID_CHECK(n == 0 || code, kInvalidArgument, "dequantize_4bit: null code table");
  // Blocks are even-sized, so a block starts on a byte: per block, one absmax and a table of
  // the 16 products, then two outputs per byte (the same code[q] * absmax, so the same bits).
  const Dequant4PairsFn dequant4 = quant_table().dequant4_pairs;
  for (int64_t b0 = 0; b0 < n; b0 += blocksize) {
    const int64_t len = std::min(blocksize, n - b0);
    const float a = absmax[b0 / blocksize];
    float scaled[16];
    for (int c = 0; c < 16; ++c) scaled[c] = code[c] * a;
    const uint8_t* p = packed + b0 / 2;
    float* out = y + b0;
    dequant4(scaled, p, len / 2, out);
    if (len % 2) out[len - 1] = scaled[p[len / 2] >> 4];
  }
}

void quantize_blockwise_8bit(const float* code, const float* x, int64_t n, int64_t blocksize,
                             uint8_t* q, float* absmax) {
  check_block("quantize_blockwise_8bit", x, q, absmax, n, blocksize);
  BRAID_CHECK(n == 0 || code, kInvalidArgument, "quantize_blockwise_8bit: null code table");
  for (int64_t b0 = 0; b0 < n; b0 += blocksize) {
    const int64_t len = std::min(blocksize, n - b0);
    const float m = block_absmax(x + b0, len);
    absmax[b0 / blocksize] = m;
    const float inv = 1.0f / m;
    for (int64_t i = b0; i < b0 + len; ++i) q[i] = quantize_dynamic(code, x[i] * inv);
  }
}

void dequantize_blockwise_8bit(const float* code, const uint8_t* q, const float* absmax, int64_t n,
                               int64_t blocksize, float* y) {
  check_block("dequantize_blockwise_8bit", q, absmax, y, n, blocksize);
  BRAID_CHECK(n == 0 || code, kInvalidArgument, "dequantize_blockwise_8bit: null code table");
  for (int64_t i = 0; i < n; ++i) y[i] = code[q[i]] * absmax[i / blocksize];
}

int64_t quantize_int8_rows(const float* x, int64_t rows, int64_t cols, float threshold, int8_t* q,
                           float* absmax, int64_t* outlier_cols) {
  BRAID_CHECK(rows >= 0 && cols >= 0, kInvalidArgument, "quantize_int8_rows: negative size (rows ",
              rows, ", cols ", cols, ")");
  BRAID_CHECK(threshold >= 0, kInvalidArgument, "quantize_int8_rows: threshold ", threshold,
              " is negative (0 turns outliers off)");
  BRAID_CHECK(rows * cols == 0 || (x && q && absmax), kInvalidArgument,
              "quantize_int8_rows: null pointer");
  const bool decompose = threshold > 0;
  BRAID_CHECK(!decompose || rows * cols == 0 || outlier_cols, kInvalidArgument,
              "quantize_int8_rows: threshold ", threshold, " needs an outlier_cols buffer");
  std::vector<char> outlier(static_cast<size_t>(cols), 0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float m = 0.0f;
    for (int64_t c = 0; c < cols; ++c) {
      const float a = std::fabs(xr[c]);
      if (decompose && a >= threshold) {
        outlier[c] = 1;
      } else {
        m = std::max(m, a);
      }
    }
    absmax[r] = m;
    const float scale = m > 0 ? 127.0f / m : 0.0f;
    for (int64_t c = 0; c < cols; ++c) {
      const float v = std::clamp(std::nearbyint(xr[c] * scale), -127.0f, 127.0f);
      q[r * cols + c] = static_cast<int8_t>(v);
    }
  }
  int64_t count = 0;
  for (int64_t c = 0; c < cols; ++c) {
    if (!outlier[c]) continue;
    outlier_cols[count++] = c;
    for (int64_t r = 0; r < rows; ++r) q[r * cols + c] = 0;
  }
  return count;
}

void gemm_i8_i32(const int8_t* a, const int8_t* b, int64_t m, int64_t n, int64_t k, int32_t* c) {
  BRAID_CHECK(m >= 0 && n >= 0 && k >= 0, kInvalidArgument, "gemm_i8_i32: negative size (m ", m,
              ", n ", n, ", k ", k, ")");
  BRAID_CHECK(k < 133000, kNotSupported, "gemm_i8_i32: k ", k,
              " could overflow the int32 accumulator (expected k < 133000)");
  BRAID_CHECK(m * n == 0 || (a && b && c), kInvalidArgument, "gemm_i8_i32: null pointer");
  if (m * n == 0) return;
  quant_table().gemm_i8(a, b, m, n, k, c);
}

int64_t int8_linear(const float* x, int64_t m, int64_t k, const int8_t* cb, const float* scb,
                    int64_t n, float threshold, float* y) {
  BRAID_CHECK(m >= 0 && n >= 0 && k >= 0, kInvalidArgument, "int8_linear: negative size (m ", m,
              ", n ", n, ", k ", k, ")");
  std::vector<int8_t> qx(static_cast<size_t>(m * k));
  std::vector<float> sx(static_cast<size_t>(m));
  std::vector<int64_t> outliers(static_cast<size_t>(k));
  const int64_t n_out =
      quantize_int8_rows(x, m, k, threshold, qx.data(), sx.data(), outliers.data());
  std::vector<int32_t> acc(static_cast<size_t>(m * n));
  gemm_i8_i32(qx.data(), cb, m, n, k, acc.data());
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      float v = static_cast<float>(acc[i * n + j]) * (sx[i] * scb[j]) * 6.200124e-05f;
      // The outlier part in f32 against the dequantized weight columns.
      for (int64_t o = 0; o < n_out; ++o) {
        const int64_t c = outliers[o];
        v += x[i * k + c] * (static_cast<float>(cb[j * k + c]) * scb[j] / 127.0f);
      }
      y[i * n + j] = v;
    }
  }
  return n_out;
}

}  // namespace braid::kernels::cpu
