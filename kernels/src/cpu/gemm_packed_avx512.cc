// A packed AVX-512 f32 GEMM in the Goto / BLIS shape, for the sizes where Eigen's kernel
// leaves about a third of the FMA throughput unused (docs/performance.md):
//   for each nc-wide block of B columns, for each kc-deep slice of k:
//     pack B[kc x nc] into kNr-column micro-panels (zero padded)
//     for each mc-tall block of A rows: pack A[mc x kc] into kMr-row micro-panels
//       for each B micro-panel (stays in L1), for each A micro-panel (streams from L2):
//         the kMr x kNr micro-kernel: 24 ZMM accumulators, one FMA per (row, 16 columns, k)
// Partial tiles are computed whole on the zero padding and only their valid part is stored.
// The k order inside one C element is fixed (kc slices in order, p in order within a slice),
// so results do not depend on the thread or run; they differ from the scalar reference by
// rounding only (tested with a tolerance proportional to k).
#include <immintrin.h>

#include <cstdlib>
#include <cstring>

#include "gemm_impl.h"
#include "gemm_packed_tile.h"

namespace braid::kernels::cpu::avx512 {
namespace {

constexpr int64_t kMr = kTileRows, kNr = kTileCols;
constexpr int64_t kKc = 384, kMc = 144, kNc = 2048;

thread_local PackScratch t_apack, t_bpack;

float a_at(const GemmCore<float>& g, int64_t i, int64_t p) {
  return g.trans_a ? g.a[p * g.lda + i] : g.a[i * g.lda + p];
}

// A rows [i0, i0 + mc) x k [p0, p0 + kc) into micro-panels: panel r holds, for each p, kMr
// consecutive row values.
void pack_a(const GemmCore<float>& g, int64_t i0, int64_t mc, int64_t p0, int64_t kc, float* dst) {
  for (int64_t r = 0; r < mc; r += kMr) {
    const int64_t rows = mc - r < kMr ? mc - r : kMr;
    for (int64_t p = 0; p < kc; ++p) {
      float* d = dst + r * kc + p * kMr;
      int64_t i = 0;
      for (; i < rows; ++i) d[i] = a_at(g, i0 + r + i, p0 + p);
      for (; i < kMr; ++i) d[i] = 0.0f;
    }
  }
}

// B k [p0, p0 + kc) x columns [j0, j0 + nc) into micro-panels of kNr columns per p.
void pack_b(const GemmCore<float>& g, int64_t p0, int64_t kc, int64_t j0, int64_t nc, float* dst) {
  for (int64_t c = 0; c < nc; c += kNr) {
    const int64_t cols = nc - c < kNr ? nc - c : kNr;
    float* panel = dst + c * kc;
    for (int64_t p = 0; p < kc; ++p) {
      float* d = panel + p * kNr;
      if (!g.trans_b) {
        std::memcpy(d, g.b + (p0 + p) * g.ldb + j0 + c, static_cast<size_t>(cols) * sizeof(float));
      } else {
        for (int64_t j = 0; j < cols; ++j) d[j] = g.b[(j0 + c + j) * g.ldb + p0 + p];
      }
      for (int64_t j = cols; j < kNr; ++j) d[j] = 0.0f;
    }
  }
}

// acc = A panel x B panel over kc; then C tile (rows x cols valid) = alpha acc + beta C on the
// first k slice, C += alpha acc on later ones.
void micro_kernel(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int64_t rows,
                  int64_t cols, float alpha, float beta, bool first) {
  __m512 acc[kMr][2];
#pragma GCC unroll 12
  for (int i = 0; i < kMr; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t p = 0; p < kc; ++p) {
    const __m512 b0 = _mm512_load_ps(b + p * kNr);
    const __m512 b1 = _mm512_load_ps(b + p * kNr + 16);
    const float* ap = a + p * kMr;
#pragma GCC unroll 12
    for (int i = 0; i < kMr; ++i) {
      const __m512 ai = _mm512_set1_ps(ap[i]);
      acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
    }
  }
  store_tile(acc, c, ldc, rows, cols, alpha, beta, first);
}

}  // namespace

void sgemm_packed(const GemmCore<float>& g) {
  const int64_t nc_max = g.n < kNc ? (g.n + kNr - 1) / kNr * kNr : kNc;
  const int64_t kc_max = g.k < kKc ? g.k : kKc;
  const int64_t mc_max = g.m < kMc ? (g.m + kMr - 1) / kMr * kMr : kMc;
  float* const bpack = t_bpack.get<float>(kc_max * nc_max);
  float* const apack = t_apack.get<float>(kc_max * mc_max);
  for (int64_t j0 = 0; j0 < g.n; j0 += kNc) {
    const int64_t nc = g.n - j0 < kNc ? g.n - j0 : kNc;
    for (int64_t p0 = 0; p0 < g.k; p0 += kKc) {
      const int64_t kc = g.k - p0 < kKc ? g.k - p0 : kKc;
      pack_b(g, p0, kc, j0, nc, bpack);
      for (int64_t i0 = 0; i0 < g.m; i0 += kMc) {
        const int64_t mc = g.m - i0 < kMc ? g.m - i0 : kMc;
        pack_a(g, i0, mc, p0, kc, apack);
        for (int64_t jr = 0; jr < nc; jr += kNr) {
          for (int64_t ir = 0; ir < mc; ir += kMr) {
            micro_kernel(kc, apack + ir * kc, bpack + jr * kc, g.c + (i0 + ir) * g.ldc + j0 + jr,
                         g.ldc, mc - ir < kMr ? mc - ir : kMr, nc - jr < kNr ? nc - jr : kNr,
                         g.alpha, g.beta, p0 == 0);
          }
        }
      }
    }
  }
}

}  // namespace braid::kernels::cpu::avx512
