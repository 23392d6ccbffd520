// ShardedModel's sharded checkpoints: each rank writes, of every parameter and of its optimizer
// state, the run of elements its shard covers, under the parameter's own name; a load reads
// whatever ranges the current layout needs, so a checkpoint of any world size and stage loads
// into any other (docs/sharding.md, "Checkpoints of a ShardedModel").
#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "braid/core/error.h"
#include "braid/core/logging.h"
#include "braid/core/rng.h"
#include "braid/shard/checkpoint.h"
#include "braid/shard/tensor_parallel.h"
#include "ddp.h"
#include "fsdp_impl.h"

namespace braid::shard {
namespace {

constexpr const char* kOptimizerPrefix = "optimizer.";
constexpr const char* kOptimizerJson = "braid.optimizer";
constexpr const char* kSchedulerJson = "braid.scheduler";
constexpr const char* kScalerJson = "braid.scaler";
constexpr const char* kRngPrefix = "braid.rng.";  // + rank: hex of Generator::get_state()

std::string to_hex(const std::vector<uint8_t>& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (uint8_t b : bytes) {
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

std::vector<uint8_t> from_hex(const std::string& hex, const std::string& key) {
  const auto nibble = [&](char c) -> uint8_t {
    if (c >= '0' && c <= '9') return static_cast<uint8_t>(c - '0');
    if (c >= 'a' && c <= 'f') return static_cast<uint8_t>(c - 'a' + 10);
    BRAID_FAIL(kCorruptData, "checkpoint metadata '", key, "' is not lowercase hex");
  };
  BRAID_CHECK(hex.size() % 2 == 0, kCorruptData, "checkpoint metadata '", key,
              "' has an odd number of hex digits");
  std::vector<uint8_t> out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<uint8_t>(nibble(hex[2 * i]) << 4 | nibble(hex[2 * i + 1]));
  }
  return out;
}

// The part of parameter `up` inside this rank's shard: [lo, hi) in the unit's flat buffer.
struct Run {
  int64_t lo = 0, hi = 0;
  bool empty() const { return hi <= lo; }
};
Run run_of(const UnitParam& up, const ShardInfo& shard) {
  return {std::max(up.offset, shard.offset), std::min(up.offset + up.numel, shard.end())};
}

// Local elements [lo, hi) of `up` as runs of the tensor the checkpoint holds under its name:
// with tensor parallelism the global tensor (this rank's slice mapped into it), else `up`.
std::vector<ElementRun> runs_of(const TensorParallelPlan* plan, const UnitParam& up, int64_t lo,
                                int64_t hi) {
  if (plan != nullptr) return plan->runs(up.param, up.shape, lo, hi);
  if (hi <= lo) return {};
  return {{lo, lo, hi - lo}};
}
Shape global_shape_of(const TensorParallelPlan* plan, const UnitParam& up) {
  return plan != nullptr ? plan->global_shape(up.param, up.shape) : up.shape;
}

// "state.<i>.<name>" -> (i, name)
bool parse_state_key(const std::string& key, int64_t* index, std::string* name) {
  if (key.rfind("state.", 0) != 0) return false;
  const size_t dot = key.find('.', 6);
  if (dot == std::string::npos) return false;
  *index = std::stoll(key.substr(6, dot - 6));
  *name = key.substr(dot + 1);
  return true;
}

}  // namespace

ProcessGroup& ShardedModel::Impl::checkpoint_group() const {
  const TensorParallelPlan* plan = options.tensor_parallel.get();
  BRAID_CHECK(options.checkpoint_group != nullptr || plan == nullptr || plan->size() == 1,
              kInvalidArgument, "ShardedModel checkpoints: with tensor parallelism over ",
              plan ? plan->size() : 1,
              " ranks give ShardingOptions::checkpoint_group (every rank of the dp x tp mesh, e.g. "
              "mesh.world())");
  return options.checkpoint_group ? *options.checkpoint_group : *pg;
}

void ShardedModel::append_checkpoint_pieces(std::vector<Piece>& pieces,
                                            const nn::OptimizerState* st, size_t first_param) {
  impl_->drain();
  const TensorParallelPlan* plan = options_.tensor_parallel.get();
  const bool stage0 = !spec_.shard_optimizer_state;
  std::vector<Piece> mine;
  // Local elements [lo, hi) of `up`, whose element lo is element `at` of the 1-D `source`.
  // Under tensor parallelism a replicated parameter is written by tp rank 0 alone.
  const auto emit = [&](const std::string& prefix, const UnitParam& up, int64_t lo, int64_t hi,
                        const Tensor& source, int64_t at) {
    if (plan != nullptr && !plan->writes(up.param)) return;
    for (const ElementRun& run : runs_of(plan, up, lo, hi)) {
      mine.push_back(Piece{prefix + up.name, global_shape_of(plan, up), run.global_offset,
                           source.narrow(0, at + run.local_offset - lo, run.count).contiguous()});
    }
  };
  // Unit u's values as this rank's shard [count] of its flat buffer.
  const auto add_pieces = [&](const std::string& prefix, size_t u, const Tensor& shard) {
    const UnitState& s = impl_->states[u];
    for (const auto& up : s.unit->params) {
      const Run r = run_of(up, s.shard);
      if (!r.empty())
        emit(prefix, up, r.lo - up.offset, r.hi - up.offset, shard, r.lo - s.shard.offset);
    }
  };
  for (size_t u = 0; u < impl_->states.size(); ++u) {
    const UnitState& s = impl_->states[u];
    if (stage0) {
      for (const auto& up : s.unit->params) {
        const Run r = run_of(up, s.shard);
        if (r.empty()) continue;
        emit("", up, r.lo - up.offset, r.hi - up.offset,
             impl_->ddp->target(up).data().reshape({up.numel}), r.lo - up.offset);
      }
    } else {
      UnitState& st_u = impl_->states[u];
      add_pieces("", u, impl_->master_shard(st_u));
      if (impl_->param_store && !st_u.shard_param.defined()) {
        impl_->param_store->release(impl_->shard_key(st_u));
      }
    }
  }
  if (st != nullptr) {
    // Optimizer parameter first_param + i: unit i's shard (stages 1-3) or the i-th model
    // parameter (stage 0, in unit order: stage0_params).
    std::vector<std::pair<size_t, const UnitParam*>> stage0_index;
    for (size_t u = 0; u < impl_->states.size(); ++u) {
      for (const auto& up : impl_->states[u].unit->params) stage0_index.emplace_back(u, &up);
    }
    const size_t count = stage0 ? stage0_index.size() : impl_->states.size();
    for (const auto& [key, t] : st->tensors) {
      int64_t index = 0;
      std::string name;
      BRAID_CHECK(parse_state_key(key, &index, &name), kInternal, "unexpected optimizer key ", key);
      if (index < static_cast<int64_t>(first_param) ||
          index >= static_cast<int64_t>(first_param + count)) {
        continue;  // another model's parameter (a pipeline's other chunk)
      }
      const auto i = static_cast<size_t>(index) - first_param;
      const std::string prefix = std::string(kOptimizerPrefix) + name + ".";
      if (stage0) {
        const auto [u, up] = stage0_index.at(i);
        const Run r = run_of(*up, impl_->states[u].shard);
        if (r.empty()) continue;
        emit(prefix, *up, r.lo - up->offset, r.hi - up->offset, t.reshape({up->numel}),
             r.lo - up->offset);
      } else {
        add_pieces(prefix, i, t);
      }
    }
  }
  // HSDP: every replica holds the same shards; the first replica writes them.
  if (impl_->replicas && impl_->replicas->rank() != 0) mine.clear();
  for (auto& p : mine) pieces.push_back(std::move(p));
}

void ShardedModel::set_parked(bool parked) {
  if (!impl_->param_store || impl_->states.empty()) return;
  for (auto& s : impl_->states) {
    if (parked) {
      impl_->park(s, /*changed=*/false);
    } else {
      impl_->unpark(s);
    }
  }
}

bool ShardedModel::parked() const {
  return impl_->param_store && !impl_->states.empty() &&
         !impl_->states.front().shard_param.defined();
}

void ShardedModel::save_checkpoint(const std::filesystem::path& folder,
                                   const nn::Optimizer* optimizer, const StringMap& metadata,
                                   const TrainingState& extra) {
  save_checkpoint({this}, folder, optimizer, metadata, extra);
}

void ShardedModel::save_checkpoint(const std::vector<ShardedModel*>& models,
                                   const std::filesystem::path& folder,
                                   const nn::Optimizer* optimizer, const StringMap& metadata,
                                   const TrainingState& extra) {
  BRAID_CHECK(!models.empty(), kInvalidArgument, "ShardedModel::save_checkpoint: no models");
  for (ShardedModel* m : models) m->impl_->drain();
  ProcessGroup& group = models.front()->impl_->checkpoint_group();
  StringMap meta = metadata;
  std::optional<nn::OptimizerState> st;
  if (optimizer != nullptr) {
    BRAID_CHECK(optimizer->param_groups().size() == 1, kInvalidArgument,
                "ShardedModel::save_checkpoint: the optimizer must have one parameter group, it "
                "has ",
                optimizer->param_groups().size());
    // The optimizer reads its parameters' shapes: offloaded master shards come in for it.
    std::vector<bool> was_parked;
    for (ShardedModel* m : models) {
      was_parked.push_back(m->parked());
      m->set_parked(false);
    }
    st = optimizer->state_dict();
    for (size_t i = 0; i < models.size(); ++i) {
      if (was_parked[i]) models[i]->set_parked(true);
    }
    meta[kOptimizerJson] = st->json;
  }
  std::vector<Piece> pieces;
  size_t first = 0;
  for (ShardedModel* m : models) {
    m->append_checkpoint_pieces(pieces, st ? &*st : nullptr, first);
    first += m->optimizer_parameters().size();
  }
  if (st) {
    BRAID_CHECK(first == optimizer->param_groups()[0].params.size(), kInvalidArgument,
                "ShardedModel::save_checkpoint: the optimizer has ",
                optimizer->param_groups()[0].params.size(),
                " parameters, the models' optimizer_parameters() ", first,
                "; expected the optimizer built on them (in order)");
  }
  if (extra.scheduler != nullptr) meta[kSchedulerJson] = extra.scheduler->state_json();
  if (extra.scaler != nullptr) meta[kScalerJson] = extra.scaler->state_json();
  if (extra.rng_states) {
    // Every rank's generator state, gathered (fixed size) so rank 0 can write them all.
    const std::vector<uint8_t> mine = default_generator(kCPU).get_state();
    Tensor local = Tensor::empty({static_cast<int64_t>(mine.size())}, DType::kU8);
    std::copy(mine.begin(), mine.end(), local.data<uint8_t>());
    const int world = group.size();
    Tensor all = Tensor::empty({static_cast<int64_t>(mine.size()) * world}, DType::kU8);
    group.all_gather_into(all, local);
    for (int r = 0; r < world; ++r) {
      const uint8_t* p = all.data<uint8_t>() + r * static_cast<int64_t>(mine.size());
      meta[kRngPrefix + std::to_string(r)] = to_hex(std::vector<uint8_t>(p, p + mine.size()));
    }
  }
  save_sharded_checkpoint(folder, pieces, group, meta);
}

void ShardedModel::load_parameters(const ShardedCheckpoint& ckpt,
                                   const std::filesystem::path& folder) {
  impl_->drain();            // nothing may read the shards while they are replaced
  impl_->drop_prefetches();  // gathers of the old values
  const bool stage0 = !spec_.shard_optimizer_state;
  for (auto& s : impl_->states) {
    if (stage0) {
      Tensor whole = read_unit(ckpt, folder, "", s, true);
      for (auto& up : s.unit->params) {
        nn::Parameter target = impl_->ddp->target(up);
        target.data().copy_(whole.narrow(0, up.offset, up.numel).view(up.shape));
        if (target.id() != up.param.id()) up.param.data().copy_(target.data());  // param_dtype
      }
      continue;
    }
    const bool parked_unit = impl_->param_store && !s.shard_param.defined();
    impl_->unpark(s);
    s.shard_param.copy_(read_unit(ckpt, folder, "", s, false));
    if (parked_unit) impl_->park(s, /*changed=*/true);
    if (!spec_.shard_parameters) impl_->gather_into_flat(s);
  }
}

// The flat values of a unit for names "<prefix><param name>": [count] of this rank's shard,
// or [padded] whole (stage 0), zeros in the padding.
Tensor ShardedModel::read_unit(const ShardedCheckpoint& ckpt, const std::filesystem::path& folder,
                               const std::string& prefix, const UnitState& s, bool whole) const {
  const TensorParallelPlan* plan = options_.tensor_parallel.get();
  const ShardInfo range = whole ? ShardInfo{0, s.unit->padded} : s.shard;
  Tensor out = Tensor::zeros({range.count}, DType::kF32);
  for (const auto& up : s.unit->params) {
    const Run r = run_of(up, range);
    if (r.empty()) continue;
    const std::string name = prefix + up.name;
    BRAID_CHECK(ckpt.contains(name), kInvalidArgument,
                "ShardedModel::load_checkpoint: ", folder.string(), " has no tensor '", name, "'");
    const Shape shape = global_shape_of(plan, up);
    BRAID_CHECK(ckpt.shape(name) == shape, kInvalidArgument, "ShardedModel::load_checkpoint: '",
                name, "' has shape ", shape_str(ckpt.shape(name)), " in ", folder.string(),
                ", the model has ", shape_str(shape));
    // Tensor parallelism: this rank's slice, run by run (padding rows stay zero).
    const int64_t lo = r.lo - up.offset;
    for (const ElementRun& run : runs_of(plan, up, lo, r.hi - up.offset)) {
      ckpt.read_range(name, run.global_offset, run.count,
                      out.data<float>() + (r.lo - range.offset) + (run.local_offset - lo),
                      DType::kF32);
    }
  }
  return out;
}

void ShardedModel::append_optimizer_state(const ShardedCheckpoint& ckpt,
                                          const std::filesystem::path& folder,
                                          const std::set<std::string>& state_names,
                                          size_t first_param, nn::OptimizerState& st) const {
  const bool stage0 = !spec_.shard_optimizer_state;
  size_t index = first_param;
  for (auto& s : impl_->states) {
    for (const auto& name : state_names) {
      const std::string prefix = std::string(kOptimizerPrefix) + name + ".";
      if (stage0) {
        Tensor whole = read_unit(ckpt, folder, prefix, s, true);
        size_t i = index;
        for (auto& up : s.unit->params) {
          st.tensors.emplace_back("state." + std::to_string(i++) + "." + name,
                                  whole.narrow(0, up.offset, up.numel).view(up.shape).clone());
        }
      } else {
        st.tensors.emplace_back("state." + std::to_string(index) + "." + name,
                                read_unit(ckpt, folder, prefix, s, false));
      }
    }
    index += stage0 ? s.unit->params.size() : 1;
  }
}

void ShardedModel::load_checkpoint(const std::filesystem::path& folder, nn::Optimizer* optimizer,
                                   const TrainingState& extra) {
  load_checkpoint({this}, folder, optimizer, extra);
}

void ShardedModel::load_checkpoint(const std::vector<ShardedModel*>& models,
                                   const std::filesystem::path& folder, nn::Optimizer* optimizer,
                                   const TrainingState& extra) {
  BRAID_CHECK(!models.empty(), kInvalidArgument, "ShardedModel::load_checkpoint: no models");
  for (ShardedModel* m : models) {
    m->impl_->drain();
    m->impl_->drop_prefetches();
    m->impl_->checkpoint_group();  // checks that one is given where tensor parallelism needs it
  }
  ShardedCheckpoint ckpt(folder);
  models.front()->load_training_state(ckpt, folder, extra);
  for (ShardedModel* m : models) m->load_parameters(ckpt, folder);
  if (optimizer == nullptr) return;

  const auto it = ckpt.metadata().find(kOptimizerJson);
  BRAID_CHECK(it != ckpt.metadata().end(), kInvalidArgument,
              "ShardedModel::load_checkpoint: ", folder.string(), " holds no optimizer state");
  BRAID_CHECK(optimizer->param_groups().size() == 1, kInvalidArgument,
              "ShardedModel::load_checkpoint: the optimizer must have one parameter group");
  std::set<std::string> state_names;
  for (const auto& name : ckpt.names()) {
    if (name.rfind(kOptimizerPrefix, 0) != 0) continue;
    const size_t dot = name.find('.', std::string(kOptimizerPrefix).size());
    if (dot != std::string::npos) {
      state_names.insert(name.substr(std::string(kOptimizerPrefix).size(),
                                     dot - std::string(kOptimizerPrefix).size()));
    }
  }
  // The saved optimizer's JSON is read from a file: anything the JSON library throws on it
  // (not JSON, a field missing or of another type) is corrupt data, not a bug.
  nn::OptimizerState st;
  try {
    nlohmann::json saved = nlohmann::json::parse(it->second);
    // The saved optimizer's scalars, re-laid for this layout: every parameter has taken the same
    // number of steps (one group, every parameter stepped each step).
    const auto& steps = saved.at("step");
    for (const auto& v : steps) {  // integers only: get<int64_t> of a float can be UB
      BRAID_CHECK(v.is_number_integer(), kCorruptData,
                  "ShardedModel::load_checkpoint: ", folder.string(),
                  "/index.json: the optimizer state (metadata \"", kOptimizerJson, "\") has step ",
                  v.dump(), ", expected an integer");
    }
    const int64_t step = steps.empty() ? 0 : steps.at(0).get<int64_t>();
    for (const auto& v : steps) {
      BRAID_CHECK(v.get<int64_t>() == step, kInvalidArgument,
                  "ShardedModel::load_checkpoint: the saved parameters took different numbers of "
                  "optimizer steps; only a uniform step count can be resharded");
    }
    const auto params = optimizer->param_groups()[0].params;
    size_t total = 0;
    for (ShardedModel* m : models) total += m->optimizer_parameters().size();
    BRAID_CHECK(total == params.size(), kInvalidArgument,
                "ShardedModel::load_checkpoint: the optimizer is not the one built on "
                "optimizer_parameters()");
    nlohmann::json group = saved.at("param_groups").at(0);
    group["params"] = nlohmann::json::array();
    nlohmann::json new_steps = nlohmann::json::array();
    for (size_t i = 0; i < params.size(); ++i) {
      group["params"].push_back(i);
      new_steps.push_back(step);
    }
    saved["param_groups"] = nlohmann::json::array({group});
    saved["step"] = new_steps;
    st.json = saved.dump();
  } catch (const nlohmann::json::exception& e) {
    BRAID_FAIL(kCorruptData, "ShardedModel::load_checkpoint: ", folder.string(), "/index.json",
               ": the optimizer state (metadata \"", kOptimizerJson,
               "\") is not what save_checkpoint writes: ", e.what());
  }
  size_t first = 0;
  for (ShardedModel* m : models) {
    m->append_optimizer_state(ckpt, folder, state_names, first, st);
    first += m->optimizer_parameters().size();
  }
  // The optimizer checks its parameters' shapes: offloaded master shards come in for it.
  std::vector<bool> was_parked;
  for (ShardedModel* m : models) {
    was_parked.push_back(m->parked());
    m->set_parked(false);
  }
  optimizer->load_state_dict(st);
  for (size_t i = 0; i < models.size(); ++i) {
    if (was_parked[i]) models[i]->set_parked(true);
  }
}

void ShardedModel::load_training_state(const ShardedCheckpoint& ckpt,
                                       const std::filesystem::path& folder,
                                       const TrainingState& extra) {
  const StringMap& meta = ckpt.metadata();
  const auto need = [&](const char* key, const char* what) -> const std::string& {
    auto it = meta.find(key);
    BRAID_CHECK(it != meta.end(), kInvalidArgument,
                "ShardedModel::load_checkpoint: ", folder.string(), " holds no ", what,
                " state (was it saved with one?)");
    return it->second;
  };
  if (extra.scheduler != nullptr)
    extra.scheduler->load_state_json(need(kSchedulerJson, "scheduler"));
  if (extra.scaler != nullptr) extra.scaler->load_state_json(need(kScalerJson, "GradScaler"));
  if (!extra.rng_states) return;
  ProcessGroup& group = impl_->checkpoint_group();
  const std::string key = kRngPrefix + std::to_string(group.rank());
  auto it = meta.find(key);
  if (ckpt.world_size() != group.size() || it == meta.end()) {
    if (meta.count(kRngPrefix + std::string("0"))) {
      BRAID_LOG(kWarning) << "load_checkpoint: " << folder.string() << " was saved by "
                          << ckpt.world_size() << " ranks, this run has " << group.size()
                          << ": RNG states are not restored";
    }
    return;
  }
  default_generator(kCPU).set_state(from_hex(it->second, key));
}

}  // namespace braid::shard
