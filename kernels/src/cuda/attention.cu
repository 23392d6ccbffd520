// causal_attention_forward / _backward of the cuda kernel table (cpu.h, "attention"): a
// straightforward version that follows the cpu's reference path (CpuIsa::kScalar,
// kernels/src/cpu/attention.cc) operation for operation, not a tuned one.
//
// Forward: one block per query row (b, h, i). Thread j computes score j as one sequential dot
// product over head_dim (the cpu's order; -fmad=false keeps each product rounded), the row is
// scaled and rounded where torch's autocast rounds (attention_rows.h), softmax runs over the
// causal prefix with max and sum folded by a fixed tree (Note [Fixed reduction trees]), P is
// rounded to the storage dtype and dropped out with the Philox words cpu.h numbers, and
// thread c computes out[i, c] = sum_j P'[j] v[j, c] in order j = 0 .. i.
//
// Backward (Note [Attention recompute] of the cpu, as two kernels): per query row, the same
// code recomputes P and P' bit for bit, then dP' = dout v^T, dS (torch's roundings), and
// dq[i] = dS k in order; dS and P' rows go to a stream-ordered workspace [heads, T, T]. A second
// kernel, one block per key row j, sums dk[j] = sum_{i >= j} dS[i, j] q[i] and dv[j] =
// sum_{i >= j} P'[i, j] dout[i] in increasing i, the cpu's order, without atomics. Heads go
// through in chunks so that the workspace stays under 1 GiB (at least one head).
//
// Against the cpu reference the results differ only through expf (2 ulp in CUDA, the cpu's is
// within 1) and the tree-folded softmax sums and softmax-gradient dot: the same bits on every
// run. Rows live in shared memory: (3 T + 2 head_dim) values of the compute dtype per block in
// backward, T + head_dim in forward; past 48 KiB the kernel opts in to the device's maximum
// (227 KiB on H100, so T up to about 19000 for f32 backward), above it kNotSupported.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "braid/core/error.h"
#include "cast_math.h"
#include "launch.h"
#include "optim_math.h"
#include "table_ops.h"

namespace braid::kernels::cuda::table_ops {
namespace {

using math::Bits;
using math::Compute;

constexpr int kAttnThreads = 128;
constexpr int64_t kWorkspaceBudget = int64_t{1} << 30;

// attention_rows.h's RowParams, computed on the host exactly as the cpu computes them.
template <typename Acc>
struct AttnParams {
  int64_t seq, n_head, head_dim, c;  // c = n_head * head_dim
  Acc divisor, recip;
  bool recip_exact, dropout;
  double p;
  Acc keep_scale;
  uint64_t seed, offset;
};

// x rounded to D and widened back (the identity for f32 / f64).
template <DType D, typename Acc>
__device__ inline Acc rnd(Acc x) {
  if constexpr (D == DType::kF16) {
    return math::f16_to_f32(math::f32_to_f16(x));
  } else if constexpr (D == DType::kBF16) {
    return math::bf16_to_f32(math::f32_to_bf16(x));
  } else {
    return x;
  }
}

template <DType D, typename Acc>
Acc host_rnd(Acc x) {
  if constexpr (D == DType::kF16) return math::f16_to_f32(math::f32_to_f16(x));
  if constexpr (D == DType::kBF16) return math::bf16_to_f32(math::f32_to_bf16(x));
  return x;
}

template <DType D>
AttnParams<Compute<D>> attn_params(const AttentionArgs& a) {
  using Acc = Compute<D>;
  AttnParams<Acc> ap{};
  ap.seq = a.seq;
  ap.n_head = a.n_head;
  ap.head_dim = a.head_dim;
  ap.c = a.n_head * a.head_dim;
  ap.divisor = host_rnd<D>(static_cast<Acc>(std::sqrt(static_cast<double>(a.head_dim))));
  int exponent = 0;
  ap.recip_exact = std::frexp(ap.divisor, &exponent) == Acc(0.5);
  ap.recip = Acc(1) / ap.divisor;
  ap.dropout = a.dropout_p > 0.0;
  ap.p = a.dropout_p;
  ap.keep_scale = static_cast<Acc>(1.0 / (1.0 - a.dropout_p));
  ap.seed = a.dropout_seed;
  ap.offset = a.dropout_offset;
  return ap;
}

// Dropout of entry j of row i of head bh: x -> keep ? rnd(x * keep_scale) : 0 (cpu.h's words).
template <DType D, typename Acc>
__device__ inline Acc dropout(const AttnParams<Acc>& ap, int64_t bh, int64_t i, int64_t j, Acc x) {
  const uint64_t word =
      ap.offset + static_cast<uint64_t>((bh * ap.seq + i) * ap.seq) + static_cast<uint64_t>(j);
  const math::PhiloxWords w = math::philox_block(ap.seed, word / 4);
  const float u = static_cast<float>(w.w[word % 4] >> 8) * 0x1.0p-24f;
  return static_cast<double>(u) >= ap.p ? rnd<D>(x * ap.keep_scale) : Acc(0);
}

template <DType D, typename Acc>
__device__ inline Acc scale_score(const AttnParams<Acc>& ap, Acc s) {
  return ap.recip_exact ? rnd<D>(rnd<D>(s) * ap.recip) : rnd<D>(rnd<D>(s) / ap.divisor);
}

template <typename Acc>
__device__ inline Acc exp_acc(Acc x) {
  if constexpr (sizeof(Acc) == 4) {
    return expf(x);
  } else {
    return exp(x);
  }
}

// Row i of head bh: p32[j] = softmax of the scaled scores, pd[j] = P' (rounded, dropped out),
// j <= i. q: the query row (smem); base: qkv of this (b, h). Ends with a barrier.
template <DType D, typename Acc>
__device__ void row_probs(const AttnParams<Acc>& ap, int64_t bh, int64_t i, const Acc* q,
                          const Bits<D>* base, Acc* p32, Acc* pd, Acc* red) {
  const int64_t len = i + 1, hd = ap.head_dim, ld = 3 * ap.c;
  Acc m = -INFINITY;
  for (int64_t j = threadIdx.x; j < len; j += kAttnThreads) {
    const Bits<D>* kr = base + ap.c + j * ld;
    Acc acc = 0;
    for (int64_t c = 0; c < hd; ++c) acc += q[c] * math::load<D>(kr, c);
    const Acc s = scale_score<D>(ap, acc);
    p32[j] = s;
    m = detail::max_nan(m, s);
  }
  m = detail::block_fold<kAttnThreads>(m, red, [](Acc a, Acc b) { return detail::max_nan(a, b); });
  Acc sum = 0;
  for (int64_t j = threadIdx.x; j < len; j += kAttnThreads) {
    const Acc e = exp_acc(p32[j] - m);
    p32[j] = e;
    sum += e;
  }
  sum = detail::block_fold<kAttnThreads>(sum, red, [](Acc a, Acc b) { return a + b; });
  for (int64_t j = threadIdx.x; j < len; j += kAttnThreads) {
    const Acc p = p32[j] / sum;
    p32[j] = p;
    const Acc r = rnd<D>(p);
    pd[j] = ap.dropout ? dropout<D>(ap, bh, i, j, r) : r;
  }
  __syncthreads();
}

// Loads hd values of row `src` (dtype D) into smem as Acc.
template <DType D, typename Acc>
__device__ inline void load_row(const Bits<D>* src, int64_t hd, Acc* dst) {
  for (int64_t c = threadIdx.x; c < hd; c += kAttnThreads) dst[c] = math::load<D>(src, c);
}

template <DType D>
__global__ void __launch_bounds__(kAttnThreads)
    attn_forward_kernel(AttnParams<Compute<D>> ap, int64_t rows, const Bits<D>* qkv, Bits<D>* out) {
  using Acc = Compute<D>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ Acc red[kAttnThreads];
  const int64_t t_len = ap.seq, hd = ap.head_dim, ld = 3 * ap.c;
  Acc* q = reinterpret_cast<Acc*>(smem_raw);
  Acc* pd = q + hd;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t bh = row / t_len, i = row % t_len;
    const int64_t b = bh / ap.n_head, h = bh % ap.n_head;
    const Bits<D>* base = qkv + b * t_len * ld + h * hd;
    load_row<D>(base + i * ld, hd, q);
    __syncthreads();
    row_probs<D>(ap, bh, i, q, base, pd, pd, red);  // P overwritten by P' in place
    Bits<D>* o = out + (b * t_len + i) * ap.c + h * hd;
    for (int64_t c = threadIdx.x; c < hd; c += kAttnThreads) {
      Acc acc = 0;
      for (int64_t j = 0; j <= i; ++j) acc += pd[j] * math::load<D>(base + 2 * ap.c + j * ld, c);
      math::store<D>(o, c, acc);
    }
    __syncthreads();
  }
}

// Per query row: dq, and the dS / P' rows into the workspace (rows of this chunk of heads).
template <DType D>
__global__ void __launch_bounds__(kAttnThreads)
    attn_backward_rows_kernel(AttnParams<Compute<D>> ap, int64_t bh0, int64_t rows,
                              const Bits<D>* qkv, const Bits<D>* dout, Bits<D>* dqkv,
                              Compute<D>* ws_ds, Compute<D>* ws_pd) {
  using Acc = Compute<D>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ Acc red[kAttnThreads];
  const int64_t t_len = ap.seq, hd = ap.head_dim, ld = 3 * ap.c;
  Acc* q = reinterpret_cast<Acc*>(smem_raw);
  Acc* dor = q + hd;
  Acc* p32 = dor + hd;
  Acc* pd = p32 + t_len;
  Acc* dp = pd + t_len;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t bh = bh0 + row / t_len, i = row % t_len;
    const int64_t b = bh / ap.n_head, h = bh % ap.n_head;
    const Bits<D>* base = qkv + b * t_len * ld + h * hd;
    load_row<D>(base + i * ld, hd, q);
    load_row<D>(dout + (b * t_len + i) * ap.c + h * hd, hd, dor);
    __syncthreads();
    row_probs<D>(ap, bh, i, q, base, p32, pd, red);
    Acc dot = 0;
    for (int64_t j = threadIdx.x; j <= i; j += kAttnThreads) {
      const Bits<D>* vr = base + 2 * ap.c + j * ld;
      Acc acc = 0;
      for (int64_t c = 0; c < hd; ++c) acc += dor[c] * math::load<D>(vr, c);
      acc = rnd<D>(acc);
      if (ap.dropout) acc = dropout<D>(ap, bh, i, j, acc);
      dp[j] = acc;
      dot += acc * p32[j];
    }
    dot = detail::block_fold<kAttnThreads>(dot, red, [](Acc a, Acc b) { return a + b; });
    Acc* ds_row = ws_ds + row * t_len;
    Acc* pd_row = ws_pd + row * t_len;
    for (int64_t j = threadIdx.x; j <= i; j += kAttnThreads) {
      const Acc g = rnd<D>(p32[j] * (dp[j] - dot));
      const Acc ds = ap.recip_exact ? rnd<D>(g * ap.recip) : rnd<D>(g / ap.divisor);
      dp[j] = ds;
      ds_row[j] = ds;
      pd_row[j] = pd[j];
    }
    __syncthreads();
    Bits<D>* dq = dqkv + b * t_len * ld + i * ld + h * hd;
    for (int64_t c = threadIdx.x; c < hd; c += kAttnThreads) {
      Acc acc = 0;
      for (int64_t j = 0; j <= i; ++j) acc += dp[j] * math::load<D>(base + ap.c + j * ld, c);
      math::store<D>(dq, c, acc);
    }
    __syncthreads();
  }
}

// Per key row j: dk[j] and dv[j], summed over query rows i = j .. T-1 in order.
template <DType D>
__global__ void __launch_bounds__(kAttnThreads)
    attn_backward_cols_kernel(AttnParams<Compute<D>> ap, int64_t bh0, int64_t rows,
                              const Bits<D>* qkv, const Bits<D>* dout, Bits<D>* dqkv,
                              const Compute<D>* ws_ds, const Compute<D>* ws_pd) {
  using Acc = Compute<D>;
  const int64_t t_len = ap.seq, hd = ap.head_dim, ld = 3 * ap.c;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t local = row / t_len, j = row % t_len;
    const int64_t bh = bh0 + local;
    const int64_t b = bh / ap.n_head, h = bh % ap.n_head;
    const Bits<D>* qbase = qkv + b * t_len * ld + h * hd;
    const Bits<D>* dobase = dout + b * t_len * ap.c + h * hd;
    for (int64_t c = threadIdx.x; c < hd; c += kAttnThreads) {
      Acc dk = 0, dv = 0;
      for (int64_t i = j; i < t_len; ++i) {
        const int64_t w = (local * t_len + i) * t_len + j;
        dk += ws_ds[w] * math::load<D>(qbase + i * ld, c);
        dv += ws_pd[w] * math::load<D>(dobase + i * ap.c, c);
      }
      Bits<D>* dst = dqkv + b * t_len * ld + j * ld + h * hd;
      math::store<D>(dst + ap.c, c, dk);
      math::store<D>(dst + 2 * ap.c, c, dv);
    }
  }
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

// Lets `kernel` use `bytes` of dynamic shared memory (opting in past 48 KiB), or throws.
template <typename Kernel>
void allow_smem(const char* name, Kernel kernel, size_t bytes, const AttentionArgs& a) {
  if (bytes <= 48 * 1024) return;
  int dev = 0, max_optin = 0;
  BRAID_CUDA_CHECK(name, cudaGetDevice(&dev));
  BRAID_CUDA_CHECK(
      name, cudaDeviceGetAttribute(&max_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  BRAID_CHECK(bytes <= static_cast<size_t>(max_optin), kNotSupported, name, ": seq ", a.seq,
              " and head_dim ", a.head_dim, " need ", bytes,
              " bytes of shared memory per block; this GPU allows ", max_optin);
  BRAID_CUDA_CHECK(name, cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(bytes)));
}

unsigned grid_for(int64_t rows) {
  return static_cast<unsigned>(std::min<int64_t>(rows, int64_t{1} << 30));
}

template <DType D>
void forward_typed(const AttentionArgs& a, const void* qkv, void* out, cudaStream_t st) {
  using Acc = Compute<D>;
  constexpr const char* kName = "causal_attention_forward";
  const size_t smem = static_cast<size_t>(a.seq + a.head_dim) * sizeof(Acc);
  allow_smem(kName, attn_forward_kernel<D>, smem, a);
  const int64_t rows = a.batch * a.n_head * a.seq;
  attn_forward_kernel<D><<<grid_for(rows), kAttnThreads, smem, st>>>(
      attn_params<D>(a), rows, static_cast<const Bits<D>*>(qkv), static_cast<Bits<D>*>(out));
  detail::check_launch(kName);
}

template <DType D>
void backward_typed(const AttentionArgs& a, const void* qkv, const void* dout, void* dqkv,
                    cudaStream_t st) {
  using Acc = Compute<D>;
  constexpr const char* kName = "causal_attention_backward";
  const size_t smem = static_cast<size_t>(3 * a.seq + 2 * a.head_dim) * sizeof(Acc);
  allow_smem(kName, attn_backward_rows_kernel<D>, smem, a);
  const int64_t head_bytes = 2 * a.seq * a.seq * static_cast<int64_t>(sizeof(Acc));
  const int64_t heads = a.batch * a.n_head;
  const int64_t chunk = std::clamp<int64_t>(kWorkspaceBudget / head_bytes, 1, heads);
  detail::StreamBuffer ws(kName, static_cast<size_t>(chunk * head_bytes), st);
  Acc* ws_ds = static_cast<Acc*>(ws.get());
  Acc* ws_pd = ws_ds + chunk * a.seq * a.seq;
  const AttnParams<Acc> ap = attn_params<D>(a);
  const auto* pq = static_cast<const Bits<D>*>(qkv);
  const auto* pdo = static_cast<const Bits<D>*>(dout);
  auto* pdq = static_cast<Bits<D>*>(dqkv);
  for (int64_t bh0 = 0; bh0 < heads; bh0 += chunk) {
    const int64_t rows = std::min(chunk, heads - bh0) * a.seq;
    attn_backward_rows_kernel<D>
        <<<grid_for(rows), kAttnThreads, smem, st>>>(ap, bh0, rows, pq, pdo, pdq, ws_ds, ws_pd);
    detail::check_launch(kName);
    attn_backward_cols_kernel<D>
        <<<grid_for(rows), kAttnThreads, 0, st>>>(ap, bh0, rows, pq, pdo, pdq, ws_ds, ws_pd);
    detail::check_launch(kName);
  }
  ws.release(kName);
}

}  // namespace

void causal_attention_forward(Stream s, const AttentionArgs& args, const void* qkv, void* out) {
  check_args(args, "causal_attention_forward", qkv, out, qkv);
  if (args.batch == 0 || args.seq == 0 || args.n_head == 0 || args.head_dim == 0) return;
  detail::visit_float(args.dtype, [&](auto tag) {
    forward_typed<decltype(tag)::value>(args, qkv, out, detail::stream_of(s));
  });
}

void causal_attention_backward(Stream s, const AttentionArgs& args, const void* qkv,
                               const void* dout, void* dqkv) {
  check_args(args, "causal_attention_backward", qkv, dout, dqkv);
  if (args.batch == 0 || args.seq == 0 || args.n_head == 0 || args.head_dim == 0) return;
  detail::visit_float(args.dtype, [&](auto tag) {
    backward_typed<decltype(tag)::value>(args, qkv, dout, dqkv, detail::stream_of(s));
  });
}

}  // namespace braid::kernels::cuda::table_ops
