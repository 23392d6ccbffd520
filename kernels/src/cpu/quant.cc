// Quantization kernels in bitsandbytes' formats (braid/kernels/cpu_quant.h): code tables, the
// 4-bit and 8-bit block-wise quantizers and dequantizers, LLM.int8's row-wise int8 and its
// int8 GEMM with f32 outlier columns. The scalar reference, and the level table (quant_impl.h)
// through which gemm_i8_i32 and dequantize_4bit reach quant_avx2.cc / quant_avx512.cc. The
// comparison trees and the binary search are bitsandbytes' own (csrc/kernels.cu).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "braid/core/error.h"
#include "braid/core/thread_pool.h"
#include "braid/kernels/cpu.h"
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

// Note [gemm_4bit order]. The fused 4-bit GEMM sums each dot product in one fixed order that
// every level computes exactly: 16 lanes, lane l accumulating p = l, l + 16, l + 32, ... with a
// fused multiply-add (one rounding per step; the last partial vector padded with zeros, so a lane
// past k adds fma(0, 0, s)), then the lanes folded s[l] + s[l + 8], then + 4, + 2, + 1. AVX-512
// holds the 16 lanes in one register, AVX2 in two, the scalar level in an array with std::fma
// (correctly rounded, as vfmadd is). So every level, and every thread count, gives the same bits.
// Against dequantize-then-gemm() the products are the same (the dequantized weight has the same
// bits) but the summation order differs: each result is within (ceil(k / 16) + 4) * 2^-24 *
// sum |x_p * w_p| of the exact sum (first order), and so is gemm()'s within its own order's bound.
void gemm4_tile_scalar(const float* x, int64_t m, const float* w, int64_t r, int64_t k, float* y,
                       int64_t ldy) {
  for (int64_t i = 0; i < m; ++i) {
    const float* xr = x + i * k;
    for (int64_t j = 0; j < r; ++j) {
      const float* wr = w + j * k;
      float s[16] = {};
      for (int64_t p0 = 0; p0 < k; p0 += 16) {
        for (int l = 0; l < 16; ++l) {
          const int64_t p = p0 + l;
          s[l] = std::fma(p < k ? xr[p] : 0.0f, p < k ? wr[p] : 0.0f, s[l]);
        }
      }
      for (int width = 8; width >= 1; width /= 2) {
        for (int l = 0; l < width; ++l) s[l] = s[l] + s[l + width];
      }
      y[i * ldy + j] = s[0];
    }
  }
}

void gemm4_axpy_scalar(const float* dy, int64_t m, int64_t ldy, const float* w, int64_t r,
                       int64_t k, float* dx) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < r; ++j) {
      const float a = dy[i * ldy + j];
      const float* wr = w + j * k;
      float* d = dx + i * k;
      for (int64_t p = 0; p < k; ++p) d[p] = std::fma(a, wr[p], d[p]);
    }
  }
}

float row_absmax_scalar(const float* x, int64_t n, float threshold, bool* outlier) {
  float m = 0.0f;
  bool any = false;
  for (int64_t c = 0; c < n; ++c) {
    const float a = std::fabs(x[c]);
    if (threshold > 0 && a >= threshold) {
      any = true;
    } else {
      m = std::max(m, a);
    }
  }
  *outlier = any;
  return m;
}

void quant_row_i8_scalar(const float* x, int64_t n, float scale, int8_t* q) {
  for (int64_t c = 0; c < n; ++c) {
    const float v = std::clamp(std::nearbyint(x[c] * scale), -127.0f, 127.0f);
    q[c] = std::isnan(v) ? int8_t{0} : static_cast<int8_t>(v);
  }
}

// Elements [start, start + len) of a 4-bit tensor, dequantized: per block piece one table of the
// 16 products code[q] * absmax (the bits dequantize_4bit stores), then two outputs per byte; an
// odd start or end takes its lone nibble by itself.
void dequant4_range_scalar(const float* code, const uint8_t* packed, const float* absmax,
                           int64_t blocksize, int64_t start, int64_t len, float* y) {
  int64_t e = start;
  const int64_t end = start + len;
  while (e < end) {
    const int64_t b = e / blocksize;
    const int64_t stop = std::min(end, (b + 1) * blocksize);
    float scaled[16];
    for (int c = 0; c < 16; ++c) scaled[c] = code[c] * absmax[b];
    float* out = y + (e - start);
    int64_t i = e;
    if (i % 2 && i < stop) *out++ = scaled[packed[i++ / 2] & 0x0F];
    const int64_t n_pairs = (stop - i) / 2;
    dequant4_pairs_scalar(scaled, packed + i / 2, n_pairs, out);
    out += 2 * n_pairs;
    i += 2 * n_pairs;
    if (i < stop) *out = scaled[packed[i / 2] >> 4];
    e = stop;
  }
}

// One table per level; a level without its own entry keeps the narrower one's.
const QuantTable& quant_table() {
  static const IsaTable<const QuantTable*> tables = [] {
    static QuantTable scalar_t{gemm_i8_scalar,     dequant4_pairs_scalar, dequant4_range_scalar,
                               gemm4_tile_scalar,  gemm4_axpy_scalar,     row_absmax_scalar,
                               quant_row_i8_scalar};
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

bool is_gemm4_dtype(DType d) {
  return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16;
}

}  // namespace

int64_t gemm_4bit_tile_rows(int64_t k) {
  // About 24 KiB of f32 per tile, so that the tile stays in L1 (48 KiB on recent x86 cores)
  // while every row of x passes over it; a multiple of the 4 rows the SIMD inner block takes,
  // between 4 and 256 rows.
  const int64_t rows = (6144 / std::max<int64_t>(k, 1)) / 4 * 4;
  return std::clamp<int64_t>(rows, 4, 256);
}

// Note [gemm_4bit on AMX]. At the amx level, a bf16 x of at least kGemm4AmxRows rows with k a
// multiple of 32 (and y bf16 or f32) takes another path, the one bitsandbytes' matmul_4bit takes
// for a bf16 input: the weight is dequantized (the f32 bits dequantize_4bit gives) and rounded to
// bf16, then multiplied on AMX tiles with f32 accumulation, k in tiles of 32 in order (each pair's
// two products added first; denormals flushed, as TDPBF16PS does). Tiles of 32 rows of W are
// dequantized one at a time into a per-thread buffer, so W is still never materialized. The bits
// differ from the other levels' (the weight's rounding and the order), are the same for any thread
// count, and each result is within (k / 32 + 2) * 2^-24 * sum |x_p bf16(w_p)| of the exact sum of
// the rounded products, plus y's own rounding. Fewer rows (a few tokens of generation) keep the
// fused f32 path, where the dequantization, not the products, is the cost.
constexpr int64_t kGemm4AmxRows = 32;

namespace {

void gemm_4bit_amx(const QuantTable& t, const float* code, const uint8_t* packed,
                   const float* absmax, int64_t blocksize, int64_t m, int64_t n, int64_t k,
                   const void* x, void* y, DType y_dtype) {
  const int64_t tiles = (n + 31) / 32;
  const int64_t pieces = std::min<int64_t>(tiles, get_num_threads());
  const bool y_bf16 = y_dtype == DType::kBF16;
  const size_t y_size = y_bf16 ? 2 : 4;
  parallel_for(pieces, [&](int64_t piece) {
    const int64_t first = tiles * piece / pieces, last = tiles * (piece + 1) / pieces;
    const std::unique_ptr<float[]> w(new float[static_cast<size_t>(32 * k)]);
    const std::unique_ptr<uint16_t[]> scratch(new uint16_t[static_cast<size_t>(96 * k)]);
    avx512bf16::gemm4_amx_begin();
    for (int64_t tile = first; tile < last; ++tile) {
      const int64_t j0 = tile * 32;
      const int64_t r = std::min<int64_t>(32, n - j0);
      t.dequant4_range(code, packed, absmax, blocksize, j0 * k, r * k, w.get());
      avx512bf16::gemm4_tile_amx(static_cast<const uint16_t*>(x), m, w.get(), r, k,
                                 static_cast<char*>(y) + j0 * y_size, n, y_bf16, scratch.get());
    }
    avx512bf16::gemm4_amx_end();
  });
}

}  // namespace

void gemm_4bit(const float* code, const uint8_t* packed, const float* absmax, int64_t blocksize,
               int64_t m, int64_t n, int64_t k, const void* x, DType x_dtype, void* y,
               DType y_dtype) {
  BRAID_CHECK(m >= 0 && n >= 0 && k >= 0, kInvalidArgument, "gemm_4bit: negative size (m ", m,
              ", n ", n, ", k ", k, ")");
  BRAID_CHECK(blocksize > 0 && blocksize % 2 == 0, kInvalidArgument, "gemm_4bit: blocksize ",
              blocksize, " must be positive and even");
  BRAID_CHECK(is_gemm4_dtype(x_dtype) && is_gemm4_dtype(y_dtype), kNotSupported,
              "gemm_4bit: dtypes x ", x_dtype, ", y ", y_dtype, " (expected f32, bf16 or f16)");
  if (m * n == 0) return;
  BRAID_CHECK(y && (k == 0 || (code && packed && absmax && x)), kInvalidArgument,
              "gemm_4bit: null pointer");
  // The level is read here, on the calling thread (ScopedCpuIsa is per thread), for every piece.
  const QuantTable& t = quant_table();
  if (cpu_dispatch_isa() == CpuIsa::kAmx && x_dtype == DType::kBF16 &&
      (y_dtype == DType::kBF16 || y_dtype == DType::kF32) && m >= kGemm4AmxRows && k > 0 &&
      k % 32 == 0) {
    gemm_4bit_amx(t, code, packed, absmax, blocksize, m, n, k, x, y, y_dtype);
    return;
  }
  std::vector<float> x32;
  const float* xf = static_cast<const float*>(x);
  if (x_dtype != DType::kF32 && k > 0) {
    x32.resize(static_cast<size_t>(m * k));
    cast(x, x_dtype, x32.data(), DType::kF32, m * k);
    xf = x32.data();
  }
  std::vector<float> y32;
  float* yf = static_cast<float*>(y);
  if (y_dtype != DType::kF32) {
    y32.resize(static_cast<size_t>(m * n));
    yf = y32.data();
  }
  const int64_t rows = gemm_4bit_tile_rows(k);
  const int64_t tiles = (n + rows - 1) / rows;
  // The tiles are split into one contiguous run per thread; each run dequantizes its tiles one
  // by one into its own buffer and multiplies them. Tiles write disjoint columns of y, each
  // computed exactly as on one thread.
  const int64_t pieces = std::min<int64_t>(tiles, get_num_threads());
  parallel_for(pieces, [&](int64_t piece) {
    const int64_t first = tiles * piece / pieces, last = tiles * (piece + 1) / pieces;
    const std::unique_ptr<float[]> w(
        new float[static_cast<size_t>(std::max<int64_t>(rows * k, 1))]);
    for (int64_t tile = first; tile < last; ++tile) {
      const int64_t j0 = tile * rows;
      const int64_t r = std::min(rows, n - j0);
      t.dequant4_range(code, packed, absmax, blocksize, j0 * k, r * k, w.get());
      t.gemm4_tile(xf, m, w.get(), r, k, yf + j0, n);
    }
  });
  if (y_dtype != DType::kF32) cast(yf, DType::kF32, y, y_dtype, m * n);
}

void gemm_4bit_nn(const float* code, const uint8_t* packed, const float* absmax, int64_t blocksize,
                  int64_t m, int64_t n, int64_t k, const void* x, DType x_dtype, void* y,
                  DType y_dtype) {
  BRAID_CHECK(m >= 0 && n >= 0 && k >= 0, kInvalidArgument, "gemm_4bit_nn: negative size (m ", m,
              ", n ", n, ", k ", k, ")");
  BRAID_CHECK(blocksize > 0 && blocksize % 2 == 0, kInvalidArgument, "gemm_4bit_nn: blocksize ",
              blocksize, " must be positive and even");
  BRAID_CHECK(is_gemm4_dtype(x_dtype) && is_gemm4_dtype(y_dtype), kNotSupported,
              "gemm_4bit_nn: dtypes x ", x_dtype, ", y ", y_dtype, " (expected f32, bf16 or f16)");
  if (m * k == 0) return;
  BRAID_CHECK(y && (n == 0 || (code && packed && absmax && x)), kInvalidArgument,
              "gemm_4bit_nn: null pointer");
  const QuantTable& t = quant_table();
  std::vector<float> x32;
  const float* xf = static_cast<const float*>(x);
  if (x_dtype != DType::kF32 && n > 0) {
    x32.resize(static_cast<size_t>(m * n));
    cast(x, x_dtype, x32.data(), DType::kF32, m * n);
    xf = x32.data();
  }
  std::vector<float> y32;
  float* yf = static_cast<float*>(y);
  if (y_dtype != DType::kF32) {
    y32.resize(static_cast<size_t>(m * k));
    yf = y32.data();
  }
  std::fill(yf, yf + m * k, 0.0f);
  // W's rows j in order, tile by tile: y[i, :] accumulates x[i, j] * W[j, :] with one fma per
  // step, so every element is the same sequential sum at every level. Threads take runs of rows
  // of x (each dequantizes every tile itself: the same bits, more dequantization work).
  const int64_t rows = gemm_4bit_tile_rows(k);
  const int64_t tiles = (n + rows - 1) / rows;
  const int64_t pieces = std::min<int64_t>(m, get_num_threads());
  parallel_for(pieces, [&](int64_t piece) {
    const int64_t i0 = m * piece / pieces, i1 = m * (piece + 1) / pieces;
    const std::unique_ptr<float[]> w(
        new float[static_cast<size_t>(std::max<int64_t>(rows * k, 1))]);
    for (int64_t tile = 0; tile < tiles; ++tile) {
      const int64_t j0 = tile * rows;
      const int64_t r = std::min(rows, n - j0);
      t.dequant4_range(code, packed, absmax, blocksize, j0 * k, r * k, w.get());
      t.gemm4_axpy(xf + i0 * n + j0, i1 - i0, n, w.get(), r, k, yf + i0 * k);
    }
  });
  if (y_dtype != DType::kF32) cast(yf, DType::kF32, y, y_dtype, m * k);
}

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
  if (n > 0) quant_table().dequant4_range(code, packed, absmax, blocksize, 0, n, y);
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
  const QuantTable& t = quant_table();
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    bool any = false;
    const float m = t.row_absmax(xr, cols, decompose ? threshold : 0.0f, &any);
    if (any) {
      for (int64_t c = 0; c < cols; ++c) {
        if (std::fabs(xr[c]) >= threshold) outlier[c] = 1;
      }
    }
    absmax[r] = m;
    const float scale = m > 0 ? 127.0f / m : 0.0f;
    t.quant_row_i8(xr, cols, scale, q + r * cols);
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
