// The pieces GPT and Llama share (causal_lm_util.h): id checks, initialization by rule and its
// positional range form, stage initialization, sampling, Hugging Face folders.
#include "causal_lm_util.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "braid/core/error.h"
#include "braid/core/file_util.h"
#include "braid/tensor/ops.h"

namespace braid::nn::detail {

// ---- token ids -------------------------------------------------------------------------------

void check_ids_shape(const Tensor& ids, const char* who) {
  BRAID_CHECK(ids.defined(), kInvalidArgument, who, ": ids are undefined");
  BRAID_CHECK(ids.dtype() == DType::kI64 || ids.dtype() == DType::kI32, kInvalidArgument, who,
              ": ids must be i64 or i32 token ids, got dtype ", ids.dtype());
  BRAID_CHECK(ids.dim() == 2, kInvalidArgument, who, ": ids must be [batch, seq], got shape ",
              shape_str(ids.shape()));
}

void check_id_values(const Tensor& ids, int64_t vocab, const char* who) {
  // Checked on the host (one small copy from a GPU; meta ids have no values), so a bad id is
  // this message rather than a device fault.
  if (ids.device().is_meta()) return;
  const Tensor ih = ids.contiguous().to(kCPU);
  const int64_t seq = std::max<int64_t>(ids.size(1), 1);
  for (int64_t i = 0; i < ih.numel(); ++i) {
    const int64_t id = ih.dtype() == DType::kI64 ? ih.data<int64_t>()[i] : ih.data<int32_t>()[i];
    BRAID_CHECK(id >= 0 && id < vocab, kOutOfRange, who, ": token id ", id, " at [", i / seq, ", ",
                i % seq, "] is outside [0, vocab_size ", vocab, ")");
  }
}

// ---- initialization --------------------------------------------------------------------------

void init_by_rule(Module& m, Generator& gen, const InitRule& rule) {
  for (auto& [name, p] : m.named_parameters()) {
    Tensor& data = p.data();
    const InitDraw d = rule(name);
    if (d.kind == InitDraw::kZeros) {
      data.zero_();
    } else if (d.kind == InitDraw::kOnes) {
      data.fill_(1);
    } else {
      const DType draw = data.dtype() == DType::kF64 ? DType::kF64 : DType::kF32;
      data.copy_(scale(Tensor::randn(data.shape(), draw, &gen), d.std));
    }
  }
}

void init_range_by_rule(const Module& m, const Generator& gen, const std::string& name,
                        int64_t offset, int64_t count, float* dst, const InitRule& rule,
                        const char* who) {
  uint64_t words = gen.offset();  // where the next drawn parameter's normals start
  for (auto& [pname, p] : m.named_parameters()) {
    const int64_t n = p.data().numel();
    const InitDraw d = rule(pname);
    const bool drawn = d.kind == InitDraw::kNormal;
    if (pname != name) {
      if (drawn) words += (2 * static_cast<uint64_t>((n + 1) / 2) + 3) / 4 * 4;
      continue;
    }
    BRAID_CHECK(offset >= 0 && count >= 0 && offset + count <= n, kOutOfRange, who,
                "::init_weights_range: elements [", offset, ", ", offset + count, ") of '", name,
                "' (", n, " elements)");
    BRAID_CHECK(p.data().dtype() == DType::kF32, kInvalidArgument, who, "::init_weights_range: '",
                name, "' is ", dtype_name(p.data().dtype()), ", expected f32");
    if (!drawn) {
      std::fill(dst, dst + count, d.kind == InitDraw::kZeros ? 0.0f : 1.0f);
      return;
    }
    if (count == 0) return;
    // Element i uses words 2 (i / 2) and 2 (i / 2) + 1 of the draw; start at a multiple of 4
    // words (a whole Philox block), i.e. at element offset rounded down to a multiple of 4.
    const int64_t first = offset / 4 * 4;
    Generator local(gen.seed());
    local.set_offset(words + static_cast<uint64_t>(first));
    Tensor values = scale(Tensor::randn({offset + count - first}, DType::kF32, &local), d.std);
    std::copy_n(values.data<float>() + (offset - first), count, dst);
    return;
  }
  BRAID_FAIL(kOutOfRange, who, "::init_weights_range: no parameter '", name, "'");
}

std::shared_ptr<CausalLM> build_on_meta(const std::function<std::shared_ptr<CausalLM>()>& make) {
  Generator& dflt = default_generator(kCPU);
  const std::vector<uint8_t> state = dflt.get_state();
  std::shared_ptr<CausalLM> whole;
  {
    InitEmptyWeights empty;
    whole = make();
  }
  dflt.set_state(state);
  return whole;
}

void init_stage_from_whole(Module& stage, const CausalLM& whole, const Generator& gen,
                           std::string_view replica, std::string_view source, const char* who) {
  for (auto& [name, p] : stage.named_parameters()) {
    Tensor& data = p.data();
    BRAID_CHECK(data.dtype() == DType::kF32 && data.device() == kCPU && data.is_contiguous(),
                kInvalidArgument, who, "::init_weights: '", name,
                "' must be a contiguous f32 cpu tensor, got ", data.dtype(), " on ",
                data.device().str());
    const std::string from = !replica.empty() && name == replica ? std::string(source) : name;
    whole.init_weights_range(gen, from, 0, data.numel(), data.data<float>());
  }
}

// ---- sampling --------------------------------------------------------------------------------

namespace {

// The next token from the last position's logits (docs/nn.md, "GPT", generate).
int64_t sample_next(std::vector<double> last, const GenerateOptions& opt, Generator& gen) {
  if (opt.temperature == 0.0) {
    return std::max_element(last.begin(), last.end()) - last.begin();  // first maximum
  }
  const int64_t v = opt.vocab;
  for (double& x : last) x /= opt.temperature;
  if (opt.top_k > 0 && opt.top_k < v) {
    // Keep the top_k largest logits (ties with the k-th kept, as torch's
    // logits < topk(...)[-1] masking).
    std::vector<double> sorted = last;
    std::nth_element(sorted.begin(), sorted.begin() + (opt.top_k - 1), sorted.end(),
                     std::greater<double>());
    const double kth = sorted[static_cast<size_t>(opt.top_k - 1)];
    for (double& x : last) {
      if (x < kth) x = -std::numeric_limits<double>::infinity();
    }
  }
  const double m = *std::max_element(last.begin(), last.end());
  double total = 0;
  for (double& x : last) total += (x = std::exp(x - m));
  // Inverse CDF of one uniform draw, in index order.
  const double u = gen.uniform_double() * total;
  double acc = 0;
  int64_t next = v - 1;
  for (int64_t i = 0; i < v; ++i) {
    acc += last[static_cast<size_t>(i)];
    if (u < acc) {
      next = i;
      break;
    }
  }
  while (last[static_cast<size_t>(next)] == 0.0 && next > 0) --next;  // never a masked id
  return next;
}

}  // namespace

Tensor generate_tokens(Layer& model, const Tensor& ids, const GenerateOptions& opt, Generator& gen,
                       const char* who) {
  BRAID_CHECK(ids.defined() && ids.dim() == 2 && ids.size(0) == 1, kInvalidArgument, who,
              "::generate: ids must be [1, T], got ",
              ids.defined() ? shape_str(ids.shape()) : std::string("undefined"));
  BRAID_CHECK(ids.dtype() == DType::kI64 || ids.dtype() == DType::kI32, kInvalidArgument, who,
              "::generate: ids must be i64 or i32, got dtype ", ids.dtype());
  BRAID_CHECK(ids.size(1) > 0, kInvalidArgument, who,
              "::generate: ids must hold at least one token");
  BRAID_CHECK(opt.max_new_tokens >= 0, kInvalidArgument, who,
              "::generate: max_new_tokens = ", opt.max_new_tokens, " must be >= 0");
  BRAID_CHECK(opt.temperature >= 0.0 && std::isfinite(opt.temperature), kInvalidArgument, who,
              "::generate: temperature = ", opt.temperature, " must be finite and >= 0");
  BRAID_CHECK(opt.top_k >= 0, kInvalidArgument, who, "::generate: top_k = ", opt.top_k,
              " must be >= 0");
  const bool was_training = model.is_training();
  model.eval();
  struct RestoreMode {
    Layer& model;
    bool training;
    ~RestoreMode() { model.train(training); }
  } restore{model, was_training};
  NoGradGuard no_grad;

  std::vector<double> tokens = ids.to_vector();
  for (int64_t step = 0; step < opt.max_new_tokens; ++step) {
    const auto len = static_cast<int64_t>(tokens.size());
    const int64_t ctx_len = std::min(len, opt.context);
    const std::vector<double> window(tokens.end() - ctx_len, tokens.end());
    const Tensor logits = model.forward(Tensor::from_vector(window, {1, ctx_len}, DType::kI64));
    tokens.push_back(
        static_cast<double>(sample_next(logits.select(1, ctx_len - 1).to_vector(), opt, gen)));
  }
  return Tensor::from_vector(tokens, {1, static_cast<int64_t>(tokens.size())}, DType::kI64);
}

// ---- Hugging Face folders --------------------------------------------------------------------

void write_hf_folder(const std::filesystem::path& folder, const std::string& config_json,
                     const NamedTensors& tensors, std::string_view max_shard_size) {
  std::filesystem::create_directories(folder);
  write_file_atomic(folder / "config.json", config_json);
  save_sharded(folder, tensors, max_shard_size, {{"format", "pt"}});
}

std::string read_hf_config(const std::filesystem::path& folder, const char* who) {
  const auto config_path = folder / "config.json";
  BRAID_CHECK(std::filesystem::exists(config_path), kIo, who, ": ", folder.string(),
              " has no config.json");
  return read_file(config_path);
}

}  // namespace braid::nn::detail
