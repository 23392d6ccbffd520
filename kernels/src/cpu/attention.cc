// causal_attention_forward / _backward (cpu.h, "attention"): argument checks, the split of
// (batch, head) pairs over threads, and the per-head work. Two per-head paths:
//   - the reference (CpuIsa::kScalar): whole rows, plain loops, every sum in index order;
//   - the blocked path (SIMD levels): query rows in blocks of kRowBlock; each block only
//     meets the keys 0 .. (last row of the block), so the upper triangle is skipped except
//     for the part of the diagonal block above the diagonal; the products go through gemm()
//     on small dense per-head copies of q, k, v (cache resident: 3 T x head_dim tiles).
// Both share the row operations (scaling, softmax, dropout, the softmax gradient) in
// attention_rows.h, so they differ only by the order of the matmul sums.
//
// Note [Attention recompute]: forward keeps nothing but its output. Backward recomputes each
// row block's scores with the same gemm() call on the same data and the same row code, so its
// probabilities are the forward's bit for bit; this costs one more (T x T/2 x head_dim) product
// and saves the B x n_head x T x T probabilities torch keeps (8 MB a layer for batch 8, T 256,
// 4 heads; 400 MB for GPT-2 small at T 1024).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "attention_impl.h"
#include "attention_rows.h"
#include "braid/core/error.h"
#include "braid/core/thread_pool.h"
#include "braid/kernels/cpu.h"
#include "cast_kernels.h"

namespace braid::kernels::cpu {
namespace {

constexpr int64_t kRowBlock = 32;

// The per-head buffers, reused across heads by one thread.
template <typename Acc>
struct Workspace {
  std::vector<Acc> q, k, v, dout, dq, dk, dv;  // T x head_dim each (dense)
  std::vector<Acc> kt, vt;                     // head_dim x T (k, v transposed)
  std::vector<Acc> s, p32, pd, dp;             // row block x T
  void resize(int64_t t, int64_t hd, int64_t rows, bool backward) {
    const auto th = static_cast<size_t>(t * hd), rt = static_cast<size_t>(rows * t);
    for (auto* b : {&q, &k, &v, &kt, &vt}) b->resize(th);
    for (auto* b : {&s, &p32, &pd}) b->resize(rt);
    dq.resize(th);  // forward's output rows too
    if (backward) {
      for (auto* b : {&dout, &dk, &dv}) b->resize(th);
      dp.resize(rt);
    }
  }
};

struct HeadIndex {
  int64_t b, h;
};

// ---- the reference: one row at a time ----------------------------------------------------

template <typename T, typename Acc>
void forward_head_ref(const RowParams<Acc>& rp, HeadIndex hi, Workspace<Acc>& ws, Acc* out_rows) {
  const int64_t t_len = rp.seq, hd = rp.head_dim;
  Acc* s = ws.s.data();
  Acc* p32 = ws.p32.data();
  Acc* pd = ws.pd.data();
  for (int64_t i = 0; i < t_len; ++i) {
    const int64_t len = i + 1;
    for (int64_t j = 0; j < len; ++j) {
      Acc acc = 0;
      for (int64_t c = 0; c < hd; ++c) acc += ws.q[i * hd + c] * ws.k[j * hd + c];
      s[j] = acc;
    }
    forward_row<T>(rp, hi.b, hi.h, i, len, len, s, p32, pd);
    for (int64_t c = 0; c < hd; ++c) {
      Acc acc = 0;
      for (int64_t j = 0; j < len; ++j) acc += pd[j] * ws.v[j * hd + c];
      out_rows[i * hd + c] = acc;
    }
  }
}

template <typename T, typename Acc>
void backward_head_ref(const RowParams<Acc>& rp, HeadIndex hi, Workspace<Acc>& ws) {
  const int64_t t_len = rp.seq, hd = rp.head_dim;
  Acc* s = ws.s.data();
  Acc* p32 = ws.p32.data();
  Acc* pd = ws.pd.data();
  Acc* dp = ws.dp.data();
  std::fill(ws.dk.begin(), ws.dk.end(), Acc(0));
  std::fill(ws.dv.begin(), ws.dv.end(), Acc(0));
  for (int64_t i = 0; i < t_len; ++i) {
    const int64_t len = i + 1;
    for (int64_t j = 0; j < len; ++j) {
      Acc acc = 0;
      for (int64_t c = 0; c < hd; ++c) acc += ws.q[i * hd + c] * ws.k[j * hd + c];
      s[j] = acc;
    }
    forward_row<T>(rp, hi.b, hi.h, i, len, len, s, p32, pd);
    for (int64_t j = 0; j < len; ++j) {
      Acc acc = 0;
      for (int64_t c = 0; c < hd; ++c) acc += ws.dout[i * hd + c] * ws.v[j * hd + c];
      dp[j] = acc;
    }
    backward_row<T>(rp, hi.b, hi.h, i, len, len, p32, dp);
    for (int64_t c = 0; c < hd; ++c) {
      Acc acc = 0;
      for (int64_t j = 0; j < len; ++j) acc += dp[j] * ws.k[j * hd + c];
      ws.dq[i * hd + c] = acc;
    }
    for (int64_t j = 0; j < len; ++j) {
      for (int64_t c = 0; c < hd; ++c) {
        ws.dk[j * hd + c] += dp[j] * ws.q[i * hd + c];
        ws.dv[j * hd + c] += pd[j] * ws.dout[i * hd + c];
      }
    }
  }
}

// ---- the blocked path ----------------------------------------------------------------------

constexpr IsaTable<AttnMatmulFn> kAttnMatmul{scalar::attn_matmul, avx2::attn_matmul,
                                             avx512::attn_matmul, nullptr};

// C[m, n] (+)= op(A)[m, k] B[k, n] on dense row-major buffers (B never transposed: k and v
// are also kept transposed, kt / vt). f32: attn_matmul (attention_impl.h); f64: gemm().
template <typename Acc>
void mm(Trans ta, int64_t m, int64_t n, int64_t k, const Acc* a, int64_t lda, const Acc* b,
        int64_t ldb, bool accumulate, Acc* c, int64_t ldc) {
  if constexpr (std::is_same_v<Acc, float>) {
    const bool t = ta == Trans::kYes;
    kAttnMatmul.get()(AttnMatmul{m, n, k, a, t ? 1 : lda, t ? lda : 1, b, ldb, c, ldc, accumulate});
  } else {
    GemmArgs g;
    g.trans_a = ta;
    g.m = m;
    g.n = n;
    g.k = k;
    g.beta = accumulate ? 1.0 : 0.0;
    g.a = a;
    g.lda = lda;
    g.b = b;
    g.ldb = ldb;
    g.c = c;
    g.ldc = ldc;
    g.ab_dtype = g.c_dtype = DType::kF64;
    gemm(g);
  }
}

template <typename T, typename Acc>
void forward_head_blocked(const RowParams<Acc>& rp, HeadIndex hi, Workspace<Acc>& ws,
                          Acc* out_rows) {
  const int64_t t_len = rp.seq, hd = rp.head_dim;
  for (int64_t i0 = 0; i0 < t_len; i0 += kRowBlock) {
    const int64_t rows = std::min(kRowBlock, t_len - i0), n = i0 + rows;
    // Scores of this block against keys 0 .. n-1: [rows, n], row stride n.
    mm<Acc>(Trans::kNo, rows, n, hd, ws.q.data() + i0 * hd, hd, ws.kt.data(), t_len, false,
            ws.s.data(), n);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = i0 + r;
      forward_row<T>(rp, hi.b, hi.h, i, i + 1, n, ws.s.data() + r * n, ws.p32.data() + r * n,
                     ws.pd.data() + r * n);
    }
    mm<Acc>(Trans::kNo, rows, hd, n, ws.pd.data(), n, ws.v.data(), hd, false, out_rows + i0 * hd,
            hd);
  }
}

template <typename T, typename Acc>
void backward_head_blocked(const RowParams<Acc>& rp, HeadIndex hi, Workspace<Acc>& ws) {
  const int64_t t_len = rp.seq, hd = rp.head_dim;
  std::fill(ws.dk.begin(), ws.dk.end(), Acc(0));
  std::fill(ws.dv.begin(), ws.dv.end(), Acc(0));
  for (int64_t i0 = 0; i0 < t_len; i0 += kRowBlock) {
    const int64_t rows = std::min(kRowBlock, t_len - i0), n = i0 + rows;
    const Acc* q_blk = ws.q.data() + i0 * hd;
    const Acc* do_blk = ws.dout.data() + i0 * hd;
    // Note [Attention recompute]: the forward's exact calls.
    mm<Acc>(Trans::kNo, rows, n, hd, q_blk, hd, ws.kt.data(), t_len, false, ws.s.data(), n);
    for (int64_t r = 0; r < rows; ++r) {
      forward_row<T>(rp, hi.b, hi.h, i0 + r, i0 + r + 1, n, ws.s.data() + r * n,
                     ws.p32.data() + r * n, ws.pd.data() + r * n);
    }
    // dv[0:n] += P'^T dout_blk;  dP' = dout_blk v[0:n]^T.
    mm<Acc>(Trans::kYes, n, hd, rows, ws.pd.data(), n, do_blk, hd, true, ws.dv.data(), hd);
    mm<Acc>(Trans::kNo, rows, n, hd, do_blk, hd, ws.vt.data(), t_len, false, ws.dp.data(), n);
    for (int64_t r = 0; r < rows; ++r) {
      backward_row<T>(rp, hi.b, hi.h, i0 + r, i0 + r + 1, n, ws.p32.data() + r * n,
                      ws.dp.data() + r * n);
    }
    // dq_blk = dS k[0:n];  dk[0:n] += dS^T q_blk.
    mm<Acc>(Trans::kNo, rows, hd, n, ws.dp.data(), n, ws.k.data(), hd, false,
            ws.dq.data() + i0 * hd, hd);
    mm<Acc>(Trans::kYes, n, hd, rows, ws.dp.data(), n, q_blk, hd, true, ws.dk.data(), hd);
  }
}

// ---- the tile path (bf16, head_dim a multiple of 32, the kAmx and kAvx512Bf16 levels) -----
//
// The blocked path's loop with its products on AMX tiles (AttnAmxMatmul, attention_impl.h).
// Every operand of attention's products is a bf16 value (q, k, v, dout as stored; P' and dS
// rounded by the row code), so the tiles multiply exactly what the f32 path multiplies and
// only the summation order differs (docs/reductions-and-gemm.md, "Attention on AMX tiles").
// Sizes are padded with zeros to whole 32s: tp = T rounded up, np = a block's key count
// rounded up. The head's operands are copied once per head as bf16 bits, in the layouts the
// tiles read (row-major A; B in k-pairs):
//   S = q_blk k^T           A qa [tp][hd]          B kbt: pairs of k's columns [hd/2][tp][2]
//   out = P' v              A pa [32][np]          B vb: pairs of v's rows [tp/2][hd][2]
//   dv^T += dout_blk^T P'   A dt: dout^T [hd][tp]  B pp: pairs of P' rows [16][np][2]
//   dP' = dout_blk v^T      A da [tp][hd]          B vbt [hd/2][tp][2]
//   dq = dS k               A pa (dS)              B kb [tp/2][hd][2]
//   dk^T += q_blk^T dS      A qt: q^T [hd][tp]     B pp (dS)
// dv and dk are accumulated transposed (so that the block's operand is a row pair layout, not
// a transpose) and stored transposed back at the end.

constexpr int64_t kAmxTile = 32;

int64_t round_up32(int64_t v) {
  return (v + kAmxTile - 1) / kAmxTile * kAmxTile;
}

struct AmxWorkspace {
  std::vector<uint16_t> qa, kbt, vb, qt, kb, vbt, da, dt, rows;  // per head
  std::vector<uint16_t> pa, pp;                                  // per block
  std::vector<float> s, p32, pd, dp;                             // [32][np]
  std::vector<float> out, dq, dkt, dvt;                          // [tp][hd] / [hd][tp]
  void resize(int64_t tp, int64_t hd, bool backward) {
    const auto th = static_cast<size_t>(tp * hd), rt = static_cast<size_t>(kAmxTile * tp);
    for (auto* b : {&qa, &kbt, &vb, &rows}) b->resize(th);
    for (auto* b : {&s, &p32, &pd}) b->resize(rt);
    pa.resize(rt);
    out.resize(th);
    if (!backward) return;
    for (auto* b : {&qt, &kb, &vbt, &da, &dt}) b->resize(th);
    pp.resize(rt);
    dp.resize(rt);
    for (auto* b : {&dq, &dkt, &dvt}) b->assign(th, 0.0f);
  }
};

// dst [hd][tp] = src [tp][hd] transposed (16-bit words): its row pairs (a word holds two rows'
// elements) transposed as 32-bit words. scratch: tp * hd.
void amx_transpose(const uint16_t* src, int64_t tp, int64_t hd, uint16_t* scratch, uint16_t* dst) {
  avx512bf16::attn_row_pairs(src, tp, hd, scratch);
  avx512bf16::attn_transpose32(reinterpret_cast<const uint32_t*>(scratch), tp / 2, hd, hd,
                               reinterpret_cast<uint32_t*>(dst), tp / 2);
}

// Pairs of columns: dst [hd/2][tp][2] from src [tp][hd], i.e. src as [tp][hd/2] 32-bit words
// transposed.
void amx_column_pairs(const uint16_t* src, int64_t tp, int64_t hd, uint16_t* dst) {
  avx512bf16::attn_transpose32(reinterpret_cast<const uint32_t*>(src), tp, hd / 2, hd / 2,
                               reinterpret_cast<uint32_t*>(dst), tp);
}

// On AMX tiles at the amx level, in vdpbf16ps chains at the avx512bf16 level (the caller's
// ScopedCpuIsa).
void amx_mm(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, const uint16_t* b,
            int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  const AttnAmxMatmul g{m, n, k, a, lda, b, ldb, c, ldc, accumulate};
  if (cpu_dispatch_isa() == CpuIsa::kAmx) {
    avx512bf16::attn_matmul_amx(g);
  } else {
    avx512bf16::attn_matmul_dpbf16(g);
  }
}

// Scores and probabilities of the block's rows (rows <= 32, keys [0, n), row stride np).
void amx_block_probs(const RowParams<float>& rp, HeadIndex hi, AmxWorkspace& ws, int64_t hd,
                     int64_t tp, int64_t i0, int64_t rows, int64_t n, int64_t np) {
  amx_mm(kAmxTile, np, hd, ws.qa.data() + i0 * hd, hd, ws.kbt.data(), 2 * tp, ws.s.data(), np,
         false);
  for (int64_t r = 0; r < rows; ++r) {
    forward_row<bfloat16>(rp, hi.b, hi.h, i0 + r, i0 + r + 1, n, ws.s.data() + r * np,
                          ws.p32.data() + r * np, ws.pd.data() + r * np);
  }
}

// A = the block's rows of x [32][np] as bf16 bits (pa) and their row pairs (pp; backward).
void amx_block_operands(AmxWorkspace& ws, const float* x, int64_t rows, int64_t n, int64_t np,
                        bool pairs) {
  for (int64_t r = 0; r < kAmxTile; ++r) {
    avx512bf16::attn_bf16_bits(x + r * np, r < rows ? n : 0, np, ws.pa.data() + r * np);
  }
  if (!pairs) return;
  for (int64_t q = 0; q < kAmxTile / 2; ++q) {
    const int64_t r = 2 * q;
    avx512bf16::attn_bf16_pairs(r < rows ? x + r * np : nullptr,
                                r + 1 < rows ? x + (r + 1) * np : nullptr, n, np,
                                ws.pp.data() + q * 2 * np);
  }
}

void forward_head_amx(const RowParams<float>& rp, HeadIndex hi, AmxWorkspace& ws, int64_t t_len,
                      int64_t hd) {
  const int64_t tp = round_up32(t_len);
  for (int64_t i0 = 0; i0 < t_len; i0 += kAmxTile) {
    const int64_t rows = std::min(kAmxTile, t_len - i0), n = i0 + rows, np = round_up32(n);
    amx_block_probs(rp, hi, ws, hd, tp, i0, rows, n, np);
    amx_block_operands(ws, ws.pd.data(), rows, n, np, false);
    amx_mm(kAmxTile, hd, np, ws.pa.data(), np, ws.vb.data(), 2 * hd, ws.out.data() + i0 * hd, hd,
           false);
  }
}

void backward_head_amx(const RowParams<float>& rp, HeadIndex hi, AmxWorkspace& ws, int64_t t_len,
                       int64_t hd) {
  const int64_t tp = round_up32(t_len);
  for (int64_t i0 = 0; i0 < t_len; i0 += kAmxTile) {
    const int64_t rows = std::min(kAmxTile, t_len - i0), n = i0 + rows, np = round_up32(n);
    // Note [Attention recompute]: the forward's exact calls.
    amx_block_probs(rp, hi, ws, hd, tp, i0, rows, n, np);
    amx_block_operands(ws, ws.pd.data(), rows, n, np, true);
    // dv^T[:, 0:np] += dout_blk^T P';  dP' = dout_blk v^T.
    amx_mm(hd, np, kAmxTile, ws.dt.data() + i0, tp, ws.pp.data(), 2 * np, ws.dvt.data(), tp, true);
    amx_mm(kAmxTile, np, hd, ws.da.data() + i0 * hd, hd, ws.vbt.data(), 2 * tp, ws.dp.data(), np,
           false);
    for (int64_t r = 0; r < rows; ++r) {
      backward_row<bfloat16>(rp, hi.b, hi.h, i0 + r, i0 + r + 1, n, ws.p32.data() + r * np,
                             ws.dp.data() + r * np);
    }
    // dq_blk = dS k;  dk^T[:, 0:np] += q_blk^T dS.
    amx_block_operands(ws, ws.dp.data(), rows, n, np, true);
    amx_mm(kAmxTile, hd, np, ws.pa.data(), np, ws.kb.data(), 2 * hd, ws.dq.data() + i0 * hd, hd,
           false);
    amx_mm(hd, np, kAmxTile, ws.qt.data() + i0, tp, ws.pp.data(), 2 * np, ws.dkt.data(), tp, true);
  }
}

// ---- per-head loads and stores -------------------------------------------------------------

// f16 / bf16 tiles convert a row at a time through the level's cast kernels (cast_kernels.h:
// bit-identical to to_acc / from_acc); the scalar loops cost more than the products here.
template <typename T>
constexpr bool kCastRows = kLowPrecision<T>;

// dst (rows x hd, dense) = src rows of stride ld starting at src.
template <typename T, typename Acc>
void load_tile(const T* src, int64_t ld, int64_t rows, int64_t hd, Acc* dst) {
  if constexpr (kCastRows<T> && std::is_same_v<Acc, float>) {
    const CastFn cast_row =
        hot_cast_fn(std::is_same_v<T, bfloat16> ? kCastBF16ToF32 : kCastF16ToF32);
    // The rows are strided (3 C apart in qkv) and each is read once: ask for a few ahead.
    constexpr int64_t kAhead = 8;
    for (int64_t t = 0; t < rows; ++t) {
      if (t + kAhead < rows) {
        const T* next = src + (t + kAhead) * ld;
        for (int64_t c = 0; c < hd; c += 64 / int64_t{sizeof(T)}) __builtin_prefetch(next + c);
      }
      cast_row(src + t * ld, dst + t * hd, hd);
    }
    return;
  }
  for (int64_t t = 0; t < rows; ++t) {
    const T* row = src + t * ld;
    Acc* d = dst + t * hd;
    for (int64_t c = 0; c < hd; ++c) d[c] = to_acc<Acc>(row[c]);
  }
}

// dst (hd x rows, dense) = src (rows x hd, dense) transposed, in 8 x 8 blocks.
template <typename Acc>
void transpose_tile(const Acc* src, int64_t rows, int64_t hd, Acc* dst) {
  constexpr int64_t kB = 8;
  for (int64_t t0 = 0; t0 < rows; t0 += kB) {
    const int64_t t1 = std::min(rows, t0 + kB);
    for (int64_t c0 = 0; c0 < hd; c0 += kB) {
      const int64_t c1 = std::min(hd, c0 + kB);
      for (int64_t c = c0; c < c1; ++c) {
        for (int64_t t = t0; t < t1; ++t) dst[c * rows + t] = src[t * hd + c];
      }
    }
  }
}

template <typename T, typename Acc>
void store_tile(const Acc* src, int64_t rows, int64_t hd, T* dst, int64_t ld) {
  if constexpr (kCastRows<T> && std::is_same_v<Acc, float>) {
    const CastFn cast_row =
        hot_cast_fn(std::is_same_v<T, bfloat16> ? kCastF32ToBF16 : kCastF32ToF16);
    for (int64_t t = 0; t < rows; ++t) cast_row(src + t * hd, dst + t * ld, hd);
    return;
  }
  for (int64_t t = 0; t < rows; ++t) {
    const Acc* s = src + t * hd;
    T* d = dst + t * ld;
    for (int64_t c = 0; c < hd; ++c) d[c] = from_acc<T>(s[c]);
  }
}

template <typename T>
struct Job {
  const AttentionArgs* args;
  const T* qkv;
  const T* dout;  // backward only
  T* out;         // forward: [B, T, C]; backward: dqkv [B, T, 3C]
  bool backward;
};

// This thread's buffers, reused across heads and calls (grown, never shrunk).
template <typename Acc>
Workspace<Acc>& thread_workspace() {
  thread_local Workspace<Acc> ws;
  return ws;
}

// Head bh of the flattened (b, h) index.
template <typename T>
void run_head(const Job<T>& job, int64_t bh, bool reference) {
  using Acc = AccOf<T>;
  const AttentionArgs& a = *job.args;
  const int64_t t_len = a.seq, hd = a.head_dim, c = a.n_head * hd;
  const RowParams<Acc> rp = make_row_params<T, Acc>(a);
  Workspace<Acc>& ws = thread_workspace<Acc>();
  ws.resize(t_len, hd, reference ? 1 : std::min(kRowBlock, t_len), job.backward);
  const HeadIndex hi{bh / a.n_head, bh % a.n_head};
  const T* base = job.qkv + hi.b * t_len * 3 * c + hi.h * hd;
  load_tile(base, 3 * c, t_len, hd, ws.q.data());
  load_tile(base + c, 3 * c, t_len, hd, ws.k.data());
  load_tile(base + 2 * c, 3 * c, t_len, hd, ws.v.data());
  if (!reference) {
    transpose_tile(ws.k.data(), t_len, hd, ws.kt.data());
    if (job.backward) transpose_tile(ws.v.data(), t_len, hd, ws.vt.data());
  }
  if (!job.backward) {
    Acc* out_rows = ws.dq.data();  // forward does not use dq
    if (reference) {
      forward_head_ref<T>(rp, hi, ws, out_rows);
    } else {
      forward_head_blocked<T>(rp, hi, ws, out_rows);
    }
    store_tile(out_rows, t_len, hd, job.out + hi.b * t_len * c + hi.h * hd, c);
    return;
  }
  load_tile(job.dout + hi.b * t_len * c + hi.h * hd, c, t_len, hd, ws.dout.data());
  if (reference) {
    backward_head_ref<T>(rp, hi, ws);
  } else {
    backward_head_blocked<T>(rp, hi, ws);
  }
  T* dbase = job.out + hi.b * t_len * 3 * c + hi.h * hd;
  store_tile(ws.dq.data(), t_len, hd, dbase, 3 * c);
  store_tile(ws.dk.data(), t_len, hd, dbase + c, 3 * c);
  store_tile(ws.dv.data(), t_len, hd, dbase + 2 * c, 3 * c);
}

// Head bh on the amx path (bf16, head_dim % 32 == 0): the operands copied as bf16 bits into
// the tiles' layouts, the products on tiles, the results stored as the blocked path stores
// them.
void run_head_amx(const Job<bfloat16>& job, int64_t bh) {
  const AttentionArgs& a = *job.args;
  const int64_t t_len = a.seq, hd = a.head_dim, c = a.n_head * hd, tp = round_up32(t_len);
  RowParams<float> rp = make_row_params<bfloat16, float>(a);
  rp.dot = avx512bf16::attn_dot;
  thread_local AmxWorkspace ws;
  ws.resize(tp, hd, job.backward);
  const HeadIndex hi{bh / a.n_head, bh % a.n_head};
  const auto* base = reinterpret_cast<const uint16_t*>(job.qkv) + hi.b * t_len * 3 * c + hi.h * hd;
  avx512bf16::attn_copy_rows(base, 3 * c, t_len, tp, hd, ws.qa.data());
  avx512bf16::attn_copy_rows(base + c, 3 * c, t_len, tp, hd, ws.rows.data());  // k
  amx_column_pairs(ws.rows.data(), tp, hd, ws.kbt.data());
  if (job.backward) avx512bf16::attn_row_pairs(ws.rows.data(), tp, hd, ws.kb.data());
  avx512bf16::attn_copy_rows(base + 2 * c, 3 * c, t_len, tp, hd, ws.rows.data());  // v
  avx512bf16::attn_row_pairs(ws.rows.data(), tp, hd, ws.vb.data());
  const bool tiles = cpu_dispatch_isa() == CpuIsa::kAmx;  // else vdpbf16ps (amx_mm)
  if (!job.backward) {
    if (tiles) avx512bf16::attn_amx_begin();
    forward_head_amx(rp, hi, ws, t_len, hd);
    if (tiles) avx512bf16::attn_amx_end();
    store_tile(ws.out.data(), t_len, hd, job.out + hi.b * t_len * c + hi.h * hd, c);
    return;
  }
  amx_column_pairs(ws.rows.data(), tp, hd, ws.vbt.data());
  amx_transpose(ws.qa.data(), tp, hd, ws.rows.data(), ws.qt.data());
  avx512bf16::attn_copy_rows(
      reinterpret_cast<const uint16_t*>(job.dout) + hi.b * t_len * c + hi.h * hd, c, t_len, tp, hd,
      ws.da.data());
  amx_transpose(ws.da.data(), tp, hd, ws.rows.data(), ws.dt.data());
  if (tiles) avx512bf16::attn_amx_begin();
  backward_head_amx(rp, hi, ws, t_len, hd);
  if (tiles) avx512bf16::attn_amx_end();
  bfloat16* dbase = job.out + hi.b * t_len * 3 * c + hi.h * hd;
  store_tile(ws.dq.data(), t_len, hd, dbase, 3 * c);
  for (auto [acc, offset] : {std::pair{&ws.dkt, c}, std::pair{&ws.dvt, 2 * c}}) {
    avx512bf16::attn_transpose32(reinterpret_cast<const uint32_t*>(acc->data()), hd, tp, tp,
                                 reinterpret_cast<uint32_t*>(ws.out.data()), hd);
    store_tile(ws.out.data(), t_len, hd, dbase + offset, 3 * c);
  }
}

// The heads go to braid's intra-op threads (core/thread_pool.h), each at the caller's SIMD
// level. A head is computed by the same code on whichever thread takes it, so the bits do not
// depend on the thread count.
template <typename T>
void run(const Job<T>& job) {
  const AttentionArgs& a = *job.args;
  const CpuIsa isa = cpu_dispatch_isa();
  const bool reference = isa == CpuIsa::kScalar;
  if constexpr (std::is_same_v<T, bfloat16>) {
    // The tile path: AMX tiles, or vdpbf16ps where the CPU has AVX512_BF16 but no AMX (its
    // f32 fma chains were 12.7% of the tiny GPT's bf16 step on a Zen 4).
    if ((isa == CpuIsa::kAmx || isa == CpuIsa::kAvx512Bf16) && a.head_dim % kAmxTile == 0) {
      parallel_for(a.batch * a.n_head, [&](int64_t bh) {
        ScopedCpuIsa level(isa);
        run_head_amx(job, bh);
      });
      return;
    }
  }
  parallel_for(a.batch * a.n_head, [&](int64_t bh) {
    ScopedCpuIsa level(isa);
    run_head(job, bh, reference);
  });
}

void check_args(const AttentionArgs& a, const char* name, const void* p0, const void* p1,
                const void* p2) {
  BRAID_CHECK(a.batch >= 0 && a.seq >= 0 && a.n_head >= 0 && a.head_dim >= 0, kInvalidArgument,
              name, ": sizes must be >= 0 (batch ", a.batch, ", seq ", a.seq, ", n_head ", a.n_head,
              ", head_dim ", a.head_dim, ")");
  BRAID_CHECK(a.dtype == DType::kF64 || a.dtype == DType::kF32 || a.dtype == DType::kF16 ||
                  a.dtype == DType::kBF16,
              kNotSupported, name, ": dtype ", a.dtype,
              " is not supported; expected f64, f32, f16 or bf16");
  BRAID_CHECK(a.dropout_p >= 0.0 && a.dropout_p < 1.0, kInvalidArgument, name, ": dropout_p ",
              a.dropout_p, " must be in [0, 1)");
  BRAID_CHECK(a.dropout_offset % 4 == 0, kInvalidArgument, name, ": dropout_offset ",
              a.dropout_offset, " must be a multiple of 4 (a whole Philox block)");
  const bool empty = a.batch == 0 || a.seq == 0 || a.n_head == 0 || a.head_dim == 0;
  BRAID_CHECK(empty || (p0 != nullptr && p1 != nullptr && p2 != nullptr), kInvalidArgument, name,
              ": null pointer for [batch ", a.batch, ", seq ", a.seq, ", n_head ", a.n_head,
              ", head_dim ", a.head_dim, "]");
}

template <typename Fn>
void by_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF64:
      return fn(double{});
    case DType::kF32:
      return fn(float{});
    case DType::kF16:
      return fn(half{});
    case DType::kBF16:
      return fn(bfloat16{});
    default:
      BRAID_ASSERT(false, "dtype checked before dispatch");
  }
}

}  // namespace

namespace scalar {
namespace {
void scale_bf16(float* s, int64_t len, float recip) {
  for (int64_t j = 0; j < len; ++j) s[j] = rnd_bf16(rnd_bf16(s[j]) * recip);
}
void round_bf16(const float* x, float* out, int64_t len) {
  for (int64_t j = 0; j < len; ++j) out[j] = rnd_bf16(x[j]);
}
void grad_bf16(const float* p, float* dp, int64_t len, float dot, float recip) {
  for (int64_t j = 0; j < len; ++j) dp[j] = rnd_bf16(rnd_bf16(p[j] * (dp[j] - dot)) * recip);
}
}  // namespace

// The loops of attention_rows.h (AttnRowsBf16, attention_impl.h).
const AttnRowsBf16 kAttnRowsBf16{scale_bf16, round_bf16, grad_bf16};

// The same fma chain per element as the SIMD levels (attention_impl.h).
void attn_matmul(const AttnMatmul& g) {
  for (int64_t i = 0; i < g.m; ++i) {
    for (int64_t j = 0; j < g.n; ++j) {
      float acc = g.accumulate ? g.c[i * g.ldc + j] : 0.0f;
      for (int64_t p = 0; p < g.k; ++p) {
        acc = std::fma(g.a[i * g.a_rs + p * g.a_cs], g.b[p * g.ldb + j], acc);
      }
      g.c[i * g.ldc + j] = acc;
    }
  }
}
}  // namespace scalar

void causal_attention_forward(const AttentionArgs& args, const void* qkv, void* out) {
  check_args(args, "causal_attention_forward", qkv, out, qkv);
  if (args.batch == 0 || args.seq == 0 || args.n_head == 0 || args.head_dim == 0) return;
  by_dtype(args.dtype, [&](auto tag) {
    using T = decltype(tag);
    run(Job<T>{&args, static_cast<const T*>(qkv), nullptr, static_cast<T*>(out), false});
  });
}

void causal_attention_backward(const AttentionArgs& args, const void* qkv, const void* dout,
                               void* dqkv) {
  check_args(args, "causal_attention_backward", qkv, dout, dqkv);
  if (args.batch == 0 || args.seq == 0 || args.n_head == 0 || args.head_dim == 0) return;
  by_dtype(args.dtype, [&](auto tag) {
    using T = decltype(tag);
    run(Job<T>{&args, static_cast<const T*>(qkv), static_cast<const T*>(dout),
               static_cast<T*>(dqkv), true});
  });
}

}  // namespace braid::kernels::cpu
