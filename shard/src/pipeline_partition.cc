// Stage partitioning (pipeline.h): contiguous blocks per stage, balanced by parameter count
// (the largest stage as small as possible, then the spread) or uniform (Megatron's default),
// or given explicitly; a model's stages with the embedding first and the head last
// (docs/parallelism.md, "Partitioning").
#include <algorithm>
#include <limits>
#include <numeric>
#include <sstream>

#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "braid/shard/pipeline.h"

namespace braid::shard {
namespace {

std::string list_str(const std::vector<int64_t>& v) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < v.size(); ++i) out << (i ? ", " : "") << v[i];
  out << ']';
  return out.str();
}

// Whether stage k of S may hold no block: only the first or last with something else on it.
bool may_be_empty(int64_t k, int64_t S, int64_t first_extra, int64_t last_extra) {
  return (k == 0 && first_extra > 0) || (k == S - 1 && last_extra > 0);
}

void check_non_empty(const std::vector<int64_t>& counts, int64_t first_extra, int64_t last_extra,
                     const char* what) {
  const auto S = static_cast<int64_t>(counts.size());
  for (int64_t k = 0; k < S; ++k) {
    BRAID_CHECK(counts[static_cast<size_t>(k)] > 0 || may_be_empty(k, S, first_extra, last_extra),
                kInvalidArgument, "pipeline partition (", what, "): stage ", k,
                " gets no block and holds nothing else (blocks per stage ", list_str(counts),
                "); use fewer stages or more layers");
  }
}

// Parameters of a stage of `model` holding only `spec`'s embedding or head, counted on a stage
// built on the meta device (the default generator, which the layers' constructors draw from,
// is put back).
int64_t stage_parameters(const nn::CausalLM& model, const nn::StageSpec& spec) {
  Generator& dflt = default_generator(kCPU);
  const std::vector<uint8_t> state = dflt.get_state();
  int64_t n = 0;
  {
    nn::InitEmptyWeights empty;
    n = model.make_stage(spec)->num_parameters();
  }
  dflt.set_state(state);
  return n;
}

}  // namespace

std::vector<int64_t> balance_stages(const std::vector<int64_t>& block_params, int64_t first_extra,
                                    int64_t last_extra, int64_t num_stages,
                                    PartitionMethod method) {
  const int64_t S = num_stages, n = static_cast<int64_t>(block_params.size());
  BRAID_CHECK(S >= 1, kInvalidArgument, "pipeline partition: num_stages = ", S, " must be >= 1");
  BRAID_CHECK(first_extra >= 0 && last_extra >= 0, kInvalidArgument,
              "pipeline partition: negative extra parameters (", first_extra, ", ", last_extra,
              ")");
  if (method == PartitionMethod::kUniform) {
    std::vector<int64_t> counts(static_cast<size_t>(S), n / S);
    for (int64_t k = 0; k < n % S; ++k) ++counts[static_cast<size_t>(k)];
    check_non_empty(counts, first_extra, last_extra, "uniform");
    return counts;
  }
  // Dynamic programme over (stage, blocks used): the lexicographically smallest (largest stage
  // load, sum of squared loads). O(S n^2); n is a layer count.
  std::vector<int64_t> prefix(static_cast<size_t>(n + 1), 0);
  for (int64_t i = 0; i < n; ++i) {
    prefix[static_cast<size_t>(i + 1)] =
        prefix[static_cast<size_t>(i)] + block_params[static_cast<size_t>(i)];
  }
  struct Best {
    double max = std::numeric_limits<double>::infinity(), sq = 0;
    int64_t from = -1;
  };
  std::vector<std::vector<Best>> best(static_cast<size_t>(S),
                                      std::vector<Best>(static_cast<size_t>(n + 1)));
  for (int64_t k = 0; k < S; ++k) {
    const double extra =
        static_cast<double>((k == 0 ? first_extra : 0) + (k == S - 1 ? last_extra : 0));
    const int64_t min_blocks = may_be_empty(k, S, first_extra, last_extra) ? 0 : 1;
    for (int64_t j = 0; j <= n; ++j) {
      if (k == S - 1 && j != n) continue;
      Best& b = best[static_cast<size_t>(k)][static_cast<size_t>(j)];
      // Stage k takes blocks [i, j); the first stage starts at block 0.
      const int64_t last_i = k == 0 ? 0 : j - min_blocks;
      for (int64_t i = 0; i <= last_i && i + min_blocks <= j; ++i) {
        double prev_max = 0, prev_sq = 0;
        if (k > 0) {
          const Best& p = best[static_cast<size_t>(k - 1)][static_cast<size_t>(i)];
          if (p.from < 0) continue;
          prev_max = p.max, prev_sq = p.sq;
        }
        const double load = extra + static_cast<double>(prefix[static_cast<size_t>(j)] -
                                                        prefix[static_cast<size_t>(i)]);
        const double mx = std::max(prev_max, load), sq = prev_sq + load * load;
        if (mx < b.max || (mx == b.max && sq < b.sq)) b = Best{mx, sq, i};
      }
    }
  }
  BRAID_CHECK(best[static_cast<size_t>(S - 1)][static_cast<size_t>(n)].from >= 0, kInvalidArgument,
              "pipeline partition: ", n, " blocks cannot fill ", S,
              " stages with at least one block each (the first and last may hold only the "
              "embedding and the head)");
  std::vector<int64_t> counts(static_cast<size_t>(S));
  for (int64_t k = S - 1, j = n; k >= 0; --k) {
    const int64_t from = best[static_cast<size_t>(k)][static_cast<size_t>(j)].from;
    counts[static_cast<size_t>(k)] = j - from;
    j = from;
  }
  return counts;
}

std::vector<nn::StageSpec> partition_stages(const nn::CausalLM& model, int64_t num_stages,
                                            const std::vector<int64_t>& blocks_per_stage,
                                            PartitionMethod method) {
  const int64_t S = num_stages, n = model.num_blocks();
  BRAID_CHECK(S >= 1, kInvalidArgument, "partition_stages: num_stages = ", S, " must be >= 1");
  const int64_t first_extra = stage_parameters(model, {.embedding = true});
  const int64_t last_extra =
      stage_parameters(model, {.first_block = n, .end_block = n, .head = true});
  std::vector<int64_t> counts = blocks_per_stage;
  if (counts.empty()) {
    const nn::Module& blocks = model.get_submodule(model.parallel_plan().blocks);
    std::vector<int64_t> block_params;
    for (auto& [name, block] : blocks.named_children())
      block_params.push_back(block->num_parameters());
    BRAID_CHECK(static_cast<int64_t>(block_params.size()) == n, kInvalidArgument,
                "partition_stages: '", model.parallel_plan().blocks, "' of ", model.type_name(),
                " holds ", block_params.size(), " blocks; num_blocks() says ", n);
    counts = balance_stages(block_params, first_extra, last_extra, S, method);
  } else {
    BRAID_CHECK(static_cast<int64_t>(counts.size()) == S, kInvalidArgument,
                "partition_stages: blocks_per_stage ", list_str(counts), " has ", counts.size(),
                " entries; expected one per stage (", S, ")");
    BRAID_CHECK(std::all_of(counts.begin(), counts.end(), [](int64_t c) { return c >= 0; }) &&
                    std::accumulate(counts.begin(), counts.end(), int64_t{0}) == n,
                kInvalidArgument, "partition_stages: blocks_per_stage ", list_str(counts),
                " must be counts >= 0 summing to the model's ", n, " blocks");
    check_non_empty(counts, first_extra, last_extra, "blocks_per_stage");
  }
  std::vector<nn::StageSpec> specs;
  int64_t first = 0;
  for (int64_t k = 0; k < S; ++k) {
    const int64_t end = first + counts[static_cast<size_t>(k)];
    specs.push_back(
        {.first_block = first, .end_block = end, .embedding = k == 0, .head = k == S - 1});
    first = end;
  }
  return specs;
}

}  // namespace braid::shard
