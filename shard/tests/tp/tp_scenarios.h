// Layer-level checks of tensor parallelism (docs/parallelism.md, "Tests"), shared by
// braid_shard_tp_test (ranks as threads) and tp_worker (ranks as processes under
// `braid launch`): every parallel layer against the unsplit nn layer built from the same
// generator state, in f64, forward output, input gradient and every parameter gradient (this
// rank's slice of the whole layer's), for both weight layouts and every option. The sums run
// in another order than the whole layer's, so values agree to rounding (1e-12 of the largest).
#pragma once

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "braid/comm/process_group.h"
#include "braid/core/rng.h"
#include "braid/nn/layers.h"
#include "braid/nn/loss.h"
#include "braid/shard/tensor_parallel.h"
#include "braid/tensor/ops.h"

namespace braid::shard::tp_testing {

struct Failures {
  std::vector<std::string> lines;
  int64_t checks = 0;
  // max |got - want| <= tol * max(1e-30, max |want|); shapes must agree.
  void close(const std::string& what, const Tensor& got, const Tensor& want, double tol = 1e-12) {
    ++checks;
    if (!got.defined() || !want.defined() || got.shape() != want.shape()) {
      lines.push_back(what + ": shape " + (got.defined() ? shape_str(got.shape()) : "undefined") +
                      ", expected " + (want.defined() ? shape_str(want.shape()) : "undefined"));
      return;
    }
    const Tensor a = got.to(DType::kF64), b = want.to(DType::kF64);
    const double scale = std::max(1e-30, b.numel() ? amax(abs(b)).item() : 0.0);
    const double diff = a.numel() ? amax(abs(sub(a, b))).item() : 0.0;
    if (!(diff <= tol * scale)) {
      lines.push_back(what + ": max difference " + std::to_string(diff) + " of max " +
                      std::to_string(scale) + " (tolerance " + std::to_string(tol) + ")");
    }
  }
  void equal(const std::string& what, bool ok) {
    ++checks;
    if (!ok) lines.push_back(what);
  }
};

inline Tensor random(const Shape& shape, uint64_t seed) {
  Generator g(seed);
  return Tensor::randn(shape, DType::kF64, &g);
}

// The local part of a global tensor along `dim` (tp_detail's split, written out here).
inline Tensor part(const Tensor& t, int dim, const ProcessGroup& tp) {
  const int d = dim < 0 ? dim + t.dim() : dim;
  const int64_t k = t.size(d) / tp.size();
  return t.narrow(d, tp.rank() * k, k).contiguous();
}

// `global`'s indices of this rank along `dim` (zeros at padding indices).
inline Tensor local_of(const Tensor& global, int dim, const std::vector<SliceSegment>& segs,
                       int64_t local_len) {
  const int d = dim < 0 ? dim + global.dim() : dim;
  Shape shape = global.shape();
  shape[static_cast<size_t>(d)] = local_len;
  Tensor out = Tensor::zeros(shape, global.dtype());
  for (const auto& s : segs) {
    out.narrow(d, s.local_offset, s.length).copy_(global.narrow(d, s.global_offset, s.length));
  }
  return out;
}

inline std::string tag(const char* layer, nn::WeightLayout layout,
                       std::initializer_list<bool> flags, const char* names) {
  std::string s =
      std::string(layer) + (layout == nn::WeightLayout::kOutIn ? " [out,in]" : " [in,out]");
  s += " ";
  s += names;
  for (bool f : flags) s += f ? "1" : "0";
  return s;
}

inline void check_column(const std::shared_ptr<ProcessGroup>& tp, Failures& f) {
  const int parts = tp->size();
  const int64_t in = 6, seq = 4 * parts;
  for (auto layout : {nn::WeightLayout::kOutIn, nn::WeightLayout::kInOut}) {
    for (int64_t blocks : {int64_t{1}, int64_t{3}}) {
      // Blocks: every block splits evenly; one block: out leaves padding on the last ranks.
      const int64_t out = blocks == 3 ? 3 * 2 * parts : 4 * parts + 1;
      for (bool bias : {true, false}) {
        for (bool gather : {false, true}) {
          for (bool sp : {false, true}) {
            const std::string what =
                tag("ColumnParallelLinear", layout, {bias, gather, sp}, "bias/gather/sp ") +
                " blocks " + std::to_string(blocks);
            const nn::Bias b = bias ? nn::Bias::kYes : nn::Bias::kNo;
            Generator g1(11), g2(11);
            nn::Linear whole(in, out, b, layout, DType::kF64, &g1);
            ColumnParallelLinear col(in, out, tp,
                                     {.bias = b,
                                      .layout = layout,
                                      .dtype = DType::kF64,
                                      .gather_output = gather,
                                      .sequence_parallel = sp,
                                      .blocks = blocks},
                                     &g2);
            const Tensor x = random({2, seq, in}, 1), dy = random({2, seq, out}, 2);
            const Tensor y = whole.forward(x), dx = whole.backward(dy);
            const auto segs = split_segments(out, parts, tp->rank(), 0, blocks);
            const int64_t local = col.out_features();
            const Tensor y_tp = col.forward(sp ? part(x, 1, *tp) : x);
            f.close(what + ": output", y_tp, gather ? y : local_of(y, -1, segs, local));
            // Padding features get no gradient from a consumer that ignores them.
            const Tensor dx_tp = col.backward(gather ? dy : local_of(dy, -1, segs, local));
            f.close(what + ": input gradient", dx_tp, sp ? part(dx, 1, *tp) : dx);
            const int wdim = layout == nn::WeightLayout::kOutIn ? 0 : 1;
            f.close(what + ": weight gradient", col.weight().grad(),
                    local_of(whole.weight().grad(), wdim, segs, local));
            f.close(what + ": weight", col.weight().data(),
                    local_of(whole.weight().data(), wdim, segs, local), 0.0);
            if (bias) {
              f.close(what + ": bias gradient", col.bias().grad(),
                      local_of(whole.bias().grad(), 0, segs, local));
            }
          }
        }
      }
    }
  }
}

inline void check_row(const std::shared_ptr<ProcessGroup>& tp, Failures& f) {
  const int parts = tp->size();
  const int64_t in = 4 * parts, out = 5, seq = 2 * parts;
  for (auto layout : {nn::WeightLayout::kOutIn, nn::WeightLayout::kInOut}) {
    for (bool bias : {true, false}) {
      for (bool parallel_in : {true, false}) {
        for (bool sp : {false, true}) {
          const std::string what =
              tag("RowParallelLinear", layout, {bias, parallel_in, sp}, "bias/parallel_in/sp ");
          const nn::Bias b = bias ? nn::Bias::kYes : nn::Bias::kNo;
          Generator g1(12), g2(12);
          nn::Linear whole(in, out, b, layout, DType::kF64, &g1);
          RowParallelLinear row(in, out, tp,
                                {.bias = b,
                                 .layout = layout,
                                 .dtype = DType::kF64,
                                 .input_is_parallel = parallel_in,
                                 .sequence_parallel = sp},
                                &g2);
          const Tensor x = random({3, seq, in}, 3), dy = random({3, seq, out}, 4);
          const Tensor y = whole.forward(x), dx = whole.backward(dy);
          const Tensor y_tp = row.forward(parallel_in ? part(x, -1, *tp) : x);
          f.close(what + ": output", y_tp, sp ? part(y, 1, *tp) : y);
          const Tensor dx_tp = row.backward(sp ? part(dy, 1, *tp) : dy);
          f.close(what + ": input gradient", dx_tp, parallel_in ? part(dx, -1, *tp) : dx);
          const int wdim = layout == nn::WeightLayout::kOutIn ? 1 : 0;
          f.close(what + ": weight gradient", row.weight().grad(),
                  part(whole.weight().grad(), wdim, *tp));
          if (bias) f.close(what + ": bias gradient", row.bias().grad(), whole.bias().grad());
        }
      }
    }
  }
}

inline void check_embedding(const std::shared_ptr<ProcessGroup>& tp, Failures& f) {
  const int64_t vocab = 37, dim = 5, seq = 3 * tp->size();
  for (bool sp : {false, true}) {
    // padding_idx: in the first rank's rows, in the last real row (next to the padding).
    for (int64_t pad : {int64_t{-1}, int64_t{2}, vocab - 1}) {
      const std::string what = std::string("VocabParallelEmbedding sp ") + (sp ? "1" : "0") +
                               " padding_idx " + std::to_string(pad);
      Generator g1(13), g2(13), ids_gen(5);
      nn::Embedding whole(vocab, dim, DType::kF64, &g1);
      if (pad >= 0) whole.set_padding_idx(pad);
      Generator unused(0);
      nn::Embedding copy(vocab, dim, DType::kF64, &unused);
      copy.weight().data().copy_(whole.weight().data());
      if (pad >= 0) copy.set_padding_idx(pad);
      // Built from a generator (no padding_idx) and taken from a whole layer (its padding_idx).
      VocabParallelEmbedding drawn(vocab, dim, tp, {.dtype = DType::kF64, .sequence_parallel = sp},
                                   &g2);
      auto emb = VocabParallelEmbedding::from_embedding(copy, tp, {.sequence_parallel = sp});
      f.close(what + ": weight from a generator", drawn.weight().data(), emb->weight().data(), 0.0);
      Tensor ids = Tensor::empty({3, seq}, DType::kI64);
      ids_gen.fill_randint(ids.data<int64_t>(), ids.numel(), 0, vocab);
      ids.data<int64_t>()[0] = vocab - 1;
      ids.data<int64_t>()[4] = ids.data<int64_t>()[seq + 1] = pad >= 0 ? pad : 0;
      const Tensor dy = random({3, seq, dim}, 6);
      const Tensor y = whole.forward(ids);
      whole.backward(dy);
      f.close(what + ": output", emb->forward(ids), sp ? part(y, 1, *tp) : y);
      emb->backward(sp ? part(dy, 1, *tp) : dy);
      const auto segs = split_segments(vocab, tp->size(), tp->rank());
      f.close(what + ": weight gradient", emb->weight().grad(),
              local_of(whole.weight().grad(), 0, segs, emb->num_embeddings()));
      f.close(what + ": weight", emb->weight().data(),
              local_of(whole.weight().data(), 0, segs, emb->num_embeddings()), 0.0);
    }
  }
  VocabParallelEmbedding emb(vocab, dim, tp, {.dtype = DType::kF64});
  bool threw = false;
  try {
    Tensor bad = Tensor::full({1, 1}, vocab, DType::kI64);
    emb.forward(bad);
  } catch (const Error& e) {
    threw = e.kind() == ErrorKind::kOutOfRange;
  }
  f.equal("VocabParallelEmbedding: an id >= vocab is kOutOfRange", threw);
}

inline void check_cross_entropy(const std::shared_ptr<ProcessGroup>& tp, Failures& f) {
  const int64_t vocab = 37, parts = tp->size();
  const int64_t local = (vocab + parts - 1) / parts;
  const Tensor z = random({2, 6, vocab}, 7);
  Tensor targets = Tensor::empty({2, 6}, DType::kI64);
  Generator tg(8);
  tg.fill_randint(targets.data<int64_t>(), targets.numel(), 0, vocab);
  targets.data<int64_t>()[3] = -100;  // ignored
  targets.data<int64_t>()[5] = vocab - 1;
  // This rank's columns, the padding filled with values the loss must not see.
  Tensor z_tp = Tensor::full({2, 6, local}, 1e3, DType::kF64);
  const auto segs = split_segments(vocab, static_cast<int>(parts), tp->rank());
  for (const auto& s : segs)
    z_tp.narrow(2, 0, s.length).copy_(z.narrow(2, s.global_offset, s.length));
  for (auto reduction : {nn::Reduction::kMean, nn::Reduction::kSum, nn::Reduction::kNone}) {
    for (double ls : {0.0, 0.1}) {
      const std::string what = "VocabParallelCrossEntropy reduction " +
                               std::to_string(static_cast<int>(reduction)) + " ls " +
                               std::to_string(ls);
      nn::CrossEntropyLoss ce({.reduction = reduction, .label_smoothing = ls});
      VocabParallelCrossEntropy vce(
          tp, {.reduction = reduction, .label_smoothing = ls, .vocab_size = vocab});
      const Tensor loss = ce.forward(z, targets), loss_tp = vce.forward(z_tp, targets);
      f.close(what + ": loss", loss_tp, loss);
      const Tensor g = reduction == nn::Reduction::kNone ? random({2, 6}, 9) : Tensor();
      const Tensor dz = ce.backward(g), dz_tp = vce.backward(g);
      f.close(what + ": logits gradient", dz_tp, local_of(dz, 2, segs, local));
    }
  }
}

inline void check_sequence_parallel(const std::shared_ptr<ProcessGroup>& tp, Failures& f) {
  const int64_t seq = 3 * tp->size(), dim = 6;
  {
    nn::LayerNorm whole(dim, 1e-5, nn::Bias::kYes, DType::kF64);
    SequenceParallelLayerNorm ln(dim, 1e-5, nn::Bias::kYes, DType::kF64, tp);
    for (auto* m : {static_cast<nn::LayerNorm*>(&whole), static_cast<nn::LayerNorm*>(&ln)}) {
      m->weight().data().copy_(random({dim}, 20));
      m->bias().data().copy_(random({dim}, 21));
    }
    const Tensor x = random({2, seq, dim}, 22), dy = random({2, seq, dim}, 23);
    const Tensor y = whole.forward(x), dx = whole.backward(dy);
    // Two passes: the second gradient adds to the first, as accumulate_grad does.
    for (int pass = 0; pass < 2; ++pass) {
      f.close("SequenceParallelLayerNorm: output", ln.forward(part(x, 1, *tp)), part(y, 1, *tp));
      f.close("SequenceParallelLayerNorm: input gradient", ln.backward(part(dy, 1, *tp)),
              part(dx, 1, *tp));
    }
    f.close("SequenceParallelLayerNorm: weight gradient", ln.weight().grad(),
            scale(whole.weight().grad(), 2.0));
    f.close("SequenceParallelLayerNorm: bias gradient", ln.bias().grad(),
            scale(whole.bias().grad(), 2.0));
  }
  for (auto mode : {nn::RmsNormWeight::kFused, nn::RmsNormWeight::kAfterCast}) {
    const std::string what = std::string("SequenceParallelRMSNorm ") +
                             (mode == nn::RmsNormWeight::kFused ? "fused" : "after cast");
    nn::RMSNorm whole(dim, 1e-6, DType::kF64, mode);
    SequenceParallelRMSNorm rms(dim, 1e-6, DType::kF64, mode, tp);
    whole.weight().data().copy_(random({dim}, 24));
    rms.weight().data().copy_(random({dim}, 24));
    const Tensor x = random({2, seq, dim}, 25), dy = random({2, seq, dim}, 26);
    const Tensor y = whole.forward(x), dx = whole.backward(dy);
    for (int pass = 0; pass < 2; ++pass) {
      f.close(what + ": output", rms.forward(part(x, 1, *tp)), part(y, 1, *tp));
      f.close(what + ": input gradient", rms.backward(part(dy, 1, *tp)), part(dx, 1, *tp));
    }
    f.close(what + ": weight gradient", rms.weight().grad(), scale(whole.weight().grad(), 2.0));
  }
  for (bool scatter : {false, true}) {
    const std::string what =
        std::string("SequenceParallelDropout scatter ") + (scatter ? "1" : "0");
    Generator g1(30), g2(30);
    g1.set_offset(8);  // draws starting past a block boundary of the stream
    g2.set_offset(8);
    nn::Dropout whole(0.3, &g1);
    SequenceParallelDropout drop(0.3, tp, scatter, &g2);
    const Tensor x = random({3, seq, dim - 1}, 31), dy = random({3, seq, dim - 1}, 32);
    const Tensor y = whole.forward(x), dx = whole.backward(dy);
    f.close(what + ": output (the same mask)", drop.forward(scatter ? x : part(x, 1, *tp)),
            part(y, 1, *tp), 0.0);
    f.close(what + ": input gradient", drop.backward(part(dy, 1, *tp)),
            scatter ? dx : part(dx, 1, *tp), 0.0);
    f.equal(what + ": the generator advances as the whole tensor's draw",
            g1.offset() == g2.offset());
  }
}

inline void check_all_layers(const std::shared_ptr<ProcessGroup>& tp, Failures& f) {
  check_column(tp, f);
  check_row(tp, f);
  check_embedding(tp, f);
  check_cross_entropy(tp, f);
  check_sequence_parallel(tp, f);
}

}  // namespace braid::shard::tp_testing
