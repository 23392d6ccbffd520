// parallelize (tensor_parallel.h): applies a model's ParallelPlan to a module tree (the whole
// model or one of its pipeline stages) in place, swapping each matched module for its
// parallel layer and keeping every name (docs/parallelism.md, "Any model").
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "braid/core/error.h"
#include "braid/shard/tensor_parallel.h"

namespace braid::shard {
namespace {

using Style = nn::TensorParallelStyle;

// "transformer.h.*.attn" against "transformer.h.3.attn": '*' is any one name.
bool path_matches(std::string_view pattern, std::string_view path) {
  while (true) {
    const size_t pe = pattern.find('.'), qe = path.find('.');
    const std::string_view ps = pattern.substr(0, pe), qs = path.substr(0, qe);
    if (ps != "*" && ps != qs) return false;
    if (pe == std::string_view::npos || qe == std::string_view::npos) {
      return pe == std::string_view::npos && qe == std::string_view::npos;
    }
    pattern.remove_prefix(pe + 1);
    path.remove_prefix(qe + 1);
  }
}

std::string join(const std::string& path, const std::string& name) {
  return path.empty() ? name : path + "." + name;
}

class Parallelizer {
 public:
  Parallelizer(nn::Module& root, std::shared_ptr<ProcessGroup> tp, const nn::ParallelPlan& plan,
               const TensorParallelOptions& options)
      : root_(root), tp_(std::move(tp)), plan_(plan), opt_(options) {}

  std::shared_ptr<TensorParallelPlan> run() {
    BRAID_CHECK(tp_ != nullptr && tp_->rank() >= 0, kInvalidArgument,
                "parallelize: the tensor-parallel group is null or does not hold this rank");
    for (auto& [path, m] : root_.named_modules()) {
      BRAID_CHECK(dynamic_cast<TensorParallelLayer*>(m) == nullptr, kInvalidArgument,
                  "parallelize: ", root_.type_name(), " is parallelized already ('", path,
                  "' is a ", m->type_name(), ")");
    }
    const bool sp = opt_.sequence_parallel;
    BRAID_CHECK(!sp || !plan_.sequence_parallel.empty(), kNotSupported,
                "parallelize: ", root_.type_name(),
                "'s plan has no sequence-parallel form; turn sequence parallelism off");
    std::vector<nn::TensorParallelRule> rules = plan_.tensor_parallel;
    if (sp) {
      rules.insert(rules.end(), plan_.sequence_parallel.begin(), plan_.sequence_parallel.end());
      // A vocab embedding where the sequence is split is built reduce-scattering (its
      // vocab_embedding rule comes first); its sequence_scatter rule then only checks that.
      for (const nn::TensorParallelRule& rule : plan_.sequence_parallel) {
        if (rule.style != Style::kSequenceScatter) continue;
        for (std::string& path : matches(rule.path)) scatter_paths_.insert(std::move(path));
      }
    }
    for (const nn::TensorParallelRule& rule : rules) {
      for (const std::string& path : matches(rule.path)) apply(rule, path);
    }
    // What no rule split is replicated: its whole values on every rank.
    materialize(root_, "");
    return std::make_shared<TensorParallelPlan>(root_, tp_, sp);
  }

 private:
  // The module paths of root's tree a rule's pattern names, in tree order.
  std::vector<std::string> matches(const std::string& pattern) {
    std::vector<std::string> out;
    for (auto& [path, m] : root_.named_modules()) {
      if (!path.empty() && path_matches(pattern, path)) out.push_back(path);
    }
    return out;
  }

  // Gives every meta parameter under `m` its whole values (opt_.init), just before `m` is
  // split: one module is whole at a time, so a model built on the meta device never is.
  void materialize(nn::Module& m, const std::string& path) {
    for (auto& [name, p] : m.named_parameters()) {
      if (!p.data().device().is_meta()) continue;
      std::string full = join(path, name);
      BRAID_CHECK(opt_.init != nullptr, kInvalidArgument, "parallelize: '", full,
                  "' is on the meta device: give TensorParallelOptions::init");
      // A pipeline stage's replica of a tied head takes the embedding's values.
      if (plan_.tied() && full == plan_.tied_head + ".weight")
        full = plan_.tied_embedding + ".weight";
      Tensor values = Tensor::empty(p.data().shape(), DType::kF32);
      opt_.init(full, 0, values.numel(), values.data<float>());
      p.data() = values.to(p.data().dtype());
    }
  }

  [[noreturn]] static void wrong_kind(nn::Module& m, const std::string& path,
                                      const nn::TensorParallelRule& rule) {
    BRAID_FAIL(kInvalidArgument, "parallelize: '", path, "' is a ", m.type_name(), "; the style '",
               nn::style_name(rule.style), "' (rule '", rule.path,
               "') applies to another kind of layer");
  }

  template <typename T>
  T& as(nn::Module& m, const std::string& path, const nn::TensorParallelRule& rule) {
    auto* t = dynamic_cast<T*>(&m);
    if (t == nullptr) wrong_kind(m, path, rule);
    return *t;
  }

  // sequence_norm: the norm's sequence-parallel counterpart, holding the same parameter handles.
  std::shared_ptr<nn::Module> sequence_norm(nn::Module& m, const std::string& path,
                                            const nn::TensorParallelRule& rule) {
    if (auto* ln = dynamic_cast<nn::LayerNorm*>(&m)) {
      auto out = std::make_shared<SequenceParallelLayerNorm>(
          ln->dim(), ln->eps(), ln->has_bias() ? nn::Bias::kYes : nn::Bias::kNo,
          ln->weight().data().dtype(), tp_);
      out->set_parameter("weight", ln->weight());
      if (ln->has_bias()) out->set_parameter("bias", ln->bias());
      return out;
    }
    auto& rms = as<nn::RMSNorm>(m, path, rule);
    auto out = std::make_shared<SequenceParallelRMSNorm>(
        rms.dim(), rms.eps(), rms.weight().data().dtype(), rms.weight_mode(), tp_);
    out->set_parameter("weight", rms.weight());
    return out;
  }

  void apply(const nn::TensorParallelRule& rule, const std::string& path) {
    const size_t dot = path.rfind('.');
    nn::Module& parent =
        dot == std::string::npos ? root_ : root_.get_submodule(path.substr(0, dot));
    const std::string name = dot == std::string::npos ? path : path.substr(dot + 1);
    nn::Module& m = *parent.child(name);
    materialize(m, path);
    const bool sp = opt_.sequence_parallel;
    const int parts = tp_->size();
    switch (rule.style) {
      case Style::kColumnwise:
        parent.replace_module(name, ColumnParallelLinear::from_linear(
                                        as<nn::Linear>(m, path, rule), tp_,
                                        {.sequence_parallel = sp, .blocks = rule.blocks}));
        return;
      case Style::kRowwise:
        parent.replace_module(name, RowParallelLinear::from_linear(
                                        as<nn::Linear>(m, path, rule), tp_,
                                        {.input_is_parallel = true, .sequence_parallel = sp}));
        return;
      case Style::kHeads:
        as<nn::AttentionHeads>(m, path, rule).keep_heads(tp_->rank(), parts);
        return;
      case Style::kVocabEmbedding: {
        auto& emb = as<nn::Embedding>(m, path, rule);
        const int64_t padded = pad_vocab_size(emb.num_embeddings(), parts, opt_.vocab_divisible_by);
        auto out = VocabParallelEmbedding::from_embedding(
            emb, tp_,
            {.padded_num_embeddings = padded, .sequence_parallel = scatter_paths_.contains(path)});
        parent.replace_module(name, out);
        embeddings_[path] = out;
        return;
      }
      case Style::kVocabHead: {
        auto& lin = as<nn::Linear>(m, path, rule);
        const int64_t padded = pad_vocab_size(lin.out_features(), parts, opt_.vocab_divisible_by);
        auto head = ColumnParallelLinear::from_linear(
            lin, tp_, {.sequence_parallel = sp, .padded_out = padded});
        // Tied, as in the model, when the tree holds the embedding too (the whole model, or a
        // one-stage pipeline); otherwise the weight is the pipeline's replica of the embedding,
        // split as the embedding is, so tp rank r's replica is rank r's rows of it.
        if (plan_.tied() && path == plan_.tied_head) {
          auto it = embeddings_.find(plan_.tied_embedding);
          if (it != embeddings_.end()) head->set_parameter("weight", it->second->weight());
        }
        parent.replace_module(name, head);
        return;
      }
      case Style::kSequenceNorm:
        parent.replace_module(name, sequence_norm(m, path, rule));
        return;
      case Style::kSequenceScatter:
        // The vocab embedding was built reduce-scattering by its vocab_embedding rule.
        if (auto* emb = dynamic_cast<VocabParallelEmbedding*>(&m)) {
          BRAID_CHECK(emb->sequence_parallel(), kInternal, "parallelize: '", path,
                      "' was split without its sequence scatter");
          return;
        }
        BRAID_CHECK(dynamic_cast<nn::Embedding*>(&m) == nullptr, kInvalidArgument, "parallelize: '",
                    path, "' is an Embedding without a vocab_embedding rule; ",
                    "the style 'sequence_scatter' (rule '", rule.path,
                    "') splits the sequence at a vocab-parallel embedding or a Dropout");
        [[fallthrough]];
      case Style::kSequenceDropout:
        parent.replace_module(name, std::make_shared<SequenceParallelDropout>(
                                        as<nn::Dropout>(m, path, rule).p(), tp_,
                                        /*scatter_input=*/rule.style == Style::kSequenceScatter));
        return;
    }
  }

  nn::Module& root_;
  std::shared_ptr<ProcessGroup> tp_;
  const nn::ParallelPlan& plan_;
  const TensorParallelOptions& opt_;
  std::map<std::string, std::shared_ptr<VocabParallelEmbedding>> embeddings_;
  std::set<std::string> scatter_paths_;  // sequence_scatter's modules (under sp)
};

}  // namespace

std::shared_ptr<TensorParallelPlan> parallelize(nn::Module& root, std::shared_ptr<ProcessGroup> tp,
                                                const nn::ParallelPlan& plan,
                                                TensorParallelOptions options) {
  return Parallelizer(root, std::move(tp), plan, options).run();
}

std::shared_ptr<TensorParallelPlan> parallelize(nn::Module& root, DeviceMesh& mesh,
                                                const nn::ParallelPlan& plan,
                                                TensorParallelOptions options) {
  return parallelize(root, mesh.group("tp"), plan, std::move(options));
}

}  // namespace braid::shard
