// Samplers, batching, collation and Accelerate's sharding rules (docs/data.md).
#include <algorithm>
#include <string>

#include "braid/core/error.h"
#include "braid/nn/data.h"
#include "braid/nn/data_shard.h"

namespace braid::nn {

// ---- samplers ----------------------------------------------------------------------------

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  BRAID_CHECK(n >= 0, kInvalidArgument, "SequentialSampler: size ", n, " is negative");
}

std::vector<int64_t> SequentialSampler::order() {
  std::vector<int64_t> out(static_cast<size_t>(n_));
  for (int64_t i = 0; i < n_; ++i) out[static_cast<size_t>(i)] = i;
  return out;
}

namespace {
uint64_t draw_seed() {
  // 64 bits from the default generator, as torch's RandomSampler draws its seed.
  const auto hi = static_cast<uint64_t>(default_generator().randint(0, int64_t{1} << 32));
  const auto lo = static_cast<uint64_t>(default_generator().randint(0, int64_t{1} << 32));
  return (hi << 32) | lo;
}
}  // namespace

RandomSampler::RandomSampler(int64_t n, std::optional<uint64_t> seed)
    : n_(n), gen_(seed ? *seed : draw_seed()) {
  BRAID_CHECK(n >= 0, kInvalidArgument, "RandomSampler: size ", n, " is negative");
}

std::vector<int64_t> RandomSampler::order() {
  return gen_.randperm(n_);
}

SeedableRandomSampler::SeedableRandomSampler(int64_t n, std::optional<uint64_t> data_seed)
    : n_(n), initial_seed_(data_seed ? *data_seed : default_generator().seed()) {
  BRAID_CHECK(n >= 0, kInvalidArgument, "SeedableRandomSampler: size ", n, " is negative");
}

std::vector<int64_t> SeedableRandomSampler::order() {
  Generator gen(initial_seed_ + static_cast<uint64_t>(epoch_));
  std::vector<int64_t> out = gen.randperm(n_);
  ++epoch_;  // Accelerate advances the epoch once a pass is drawn
  return out;
}

std::vector<std::vector<int64_t>> batch_indices(const std::vector<int64_t>& order,
                                                int64_t batch_size, bool drop_last) {
  BRAID_CHECK(batch_size > 0, kInvalidArgument, "batch_size ", batch_size, " must be positive");
  std::vector<std::vector<int64_t>> out;
  const auto bs = static_cast<size_t>(batch_size);
  for (size_t start = 0; start < order.size(); start += bs) {
    const size_t stop = std::min(order.size(), start + bs);
    if (stop - start < bs && drop_last) break;
    out.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(start),
                     order.begin() + static_cast<std::ptrdiff_t>(stop));
  }
  return out;
}

int64_t num_batches(int64_t n, int64_t batch_size, bool drop_last) {
  BRAID_CHECK(batch_size > 0, kInvalidArgument, "batch_size ", batch_size, " must be positive");
  return drop_last ? n / batch_size : (n + batch_size - 1) / batch_size;
}

// ---- BatchSamplerShard -------------------------------------------------------------------

namespace {

using Batch = std::vector<int64_t>;

void append(Batch& to, const Batch& from, size_t begin, size_t end) {
  end = std::min(end, from.size());
  if (begin < end) {
    to.insert(to.end(), from.begin() + static_cast<std::ptrdiff_t>(begin),
              from.begin() + static_cast<std::ptrdiff_t>(end));
  }
}

// Every rank takes the same slice of each full batch; the last short batch is completed from
// the first batch (even) or split as far as it goes.
std::vector<Batch> shard_split(const std::vector<Batch>& batches, size_t bs, bool drop_last,
                               const ShardSpec& spec) {
  const size_t per = bs / static_cast<size_t>(spec.num_processes);
  const size_t lo = per * static_cast<size_t>(spec.process_index), hi = lo + per;
  std::vector<Batch> out;
  for (const Batch& b : batches) {
    if (b.size() == bs) append(out.emplace_back(), b, lo, hi);
  }
  if (drop_last || batches.empty() || batches.front().empty() || batches.back().size() >= bs) {
    return out;
  }
  const Batch& last = batches.back();
  if (!spec.even_batches) {
    if (last.size() > lo) append(out.emplace_back(), last, lo, hi);
    return out;
  }
  Batch initial = batches.front();
  while (initial.size() < bs) initial.insert(initial.end(), initial.begin(), initial.end());
  Batch padded = last;
  append(padded, initial, 0, initial.size());
  append(out.emplace_back(), padded, lo, hi);
  return out;
}

// Batches are dealt round-robin; a round is only yielded once its last batch is full. The
// incomplete last round is completed with indices from the start of the order (even), or
// yielded as it is.
std::vector<Batch> shard_deal(const std::vector<Batch>& batches, size_t bs, bool drop_last,
                              const ShardSpec& spec) {
  const auto np = static_cast<size_t>(spec.num_processes);
  const auto rank = static_cast<size_t>(spec.process_index);
  std::vector<Batch> out;
  Batch initial, to_yield;
  for (size_t idx = 0; idx < batches.size(); ++idx) {
    const Batch& b = batches[idx];
    if (!drop_last && idx < np) append(initial, b, 0, b.size());
    if (idx % np == rank) to_yield = b;
    if (idx % np == np - 1 && b.size() == bs) {
      out.push_back(std::move(to_yield));
      to_yield.clear();
    }
  }
  if (drop_last || initial.empty()) return out;
  if (!spec.even_batches) {
    if (!to_yield.empty()) out.push_back(std::move(to_yield));
    return out;
  }
  if (to_yield.size() == bs) out.push_back(to_yield);
  while (initial.size() < np * bs) initial.insert(initial.end(), initial.begin(), initial.end());
  // Continue the round after the last batch seen: complete it, then give the ranks that had
  // no batch in this round one each, taken from `initial` in order.
  size_t idx = batches.size() - 1;
  Batch cur = batches.back();
  if (cur.size() == bs) {
    cur.clear();
    ++idx;
  }
  size_t cycle = 0;
  while (idx % np != 0 || !cur.empty()) {
    const size_t end = cycle + bs - cur.size();
    append(cur, initial, cycle, end);
    if (idx % np == rank) out.push_back(cur);
    cycle = end;
    cur.clear();
    ++idx;
  }
  return out;
}

void check_spec(const ShardSpec& spec, int64_t batch_size, const char* what) {
  BRAID_CHECK(spec.num_processes >= 1, kInvalidArgument, what, ": num_processes ",
              spec.num_processes, " must be at least 1");
  BRAID_CHECK(spec.process_index >= 0 && spec.process_index < spec.num_processes, kOutOfRange, what,
              ": process_index ", spec.process_index, " is outside [0, ", spec.num_processes, ")");
  BRAID_CHECK(batch_size > 0, kInvalidArgument, what, ": batch_size ", batch_size,
              " must be positive");
  BRAID_CHECK(!spec.split_batches || batch_size % spec.num_processes == 0, kInvalidArgument, what,
              ": with split_batches the batch size (", batch_size,
              ") must be a multiple of the number of processes (", spec.num_processes, ")");
}

}  // namespace

std::vector<std::vector<int64_t>> shard_batches(const std::vector<std::vector<int64_t>>& batches,
                                                int64_t batch_size, bool drop_last,
                                                const ShardSpec& spec) {
  check_spec(spec, batch_size, "shard_batches");
  const auto bs = static_cast<size_t>(batch_size);
  return spec.split_batches ? shard_split(batches, bs, drop_last, spec)
                            : shard_deal(batches, bs, drop_last, spec);
}

int64_t sharded_length(int64_t num_batches, bool drop_last, const ShardSpec& spec) {
  if (spec.split_batches) return num_batches;
  const int64_t np = spec.num_processes;
  const int64_t whole = num_batches / np;
  if (num_batches % np == 0 || drop_last) return whole;
  if (spec.even_batches) return whole + 1;
  return spec.process_index < num_batches % np ? whole + 1 : whole;
}

// ---- IterableDatasetShard ----------------------------------------------------------------

IterableShardStream::IterableShardStream(std::unique_ptr<SampleStream> inner, int64_t batch_size,
                                         bool drop_last, const ShardSpec& spec)
    : inner_(std::move(inner)), drop_last_(drop_last) {
  check_spec(spec, batch_size, "IterableShardStream");
  real_batch_size_ = spec.split_batches ? batch_size : batch_size * spec.num_processes;
  const int64_t per = spec.split_batches ? batch_size / spec.num_processes : batch_size;
  begin_ = per * spec.process_index;
  end_ = begin_ + per;
  pos_ = static_cast<size_t>(end_);
}

bool IterableShardStream::refill() {
  if (done_) return false;
  buffer_.clear();
  const auto real = static_cast<size_t>(real_batch_size_);
  while (buffer_.size() < real) {
    std::optional<Tree> s = inner_->next();
    if (!s) break;
    buffer_.push_back(std::move(*s));
  }
  if (buffer_.size() == real) {
    if (first_batch_.empty()) first_batch_ = buffer_;
    return true;
  }
  done_ = true;
  if (drop_last_ || buffer_.empty()) return false;
  if (first_batch_.empty()) first_batch_ = buffer_;
  while (buffer_.size() < real)
    buffer_.insert(buffer_.end(), first_batch_.begin(), first_batch_.end());
  return true;
}

std::optional<Tree> IterableShardStream::next() {
  if (pos_ >= static_cast<size_t>(end_)) {
    if (!refill()) return std::nullopt;
    pos_ = static_cast<size_t>(begin_);
  }
  return buffer_[pos_++];
}

// ---- collation ---------------------------------------------------------------------------

namespace {

Tree collate_at(const std::vector<const Tree*>& samples, const std::string& where);

Tensor stack(const std::vector<const Tree*>& samples, const std::string& where) {
  const Tensor& first = samples[0]->tensor();
  Shape shape = first.shape();
  shape.insert(shape.begin(), static_cast<int64_t>(samples.size()));
  Tensor out = Tensor::empty(shape, first.dtype(), first.device());
  for (size_t i = 0; i < samples.size(); ++i) {
    const Tensor& t = samples[i]->tensor();
    BRAID_CHECK(
        t.dtype() == first.dtype() && t.shape() == first.shape() && t.device() == first.device(),
        kInvalidArgument, "default_collate: ", where, "sample ", i, " is a ", dtype_name(t.dtype()),
        " tensor of shape ", shape_str(t.shape()), ", sample 0 a ", dtype_name(first.dtype()),
        " tensor of shape ", shape_str(first.shape()),
        " (stacking needs equal dtype, shape and device)");
    out.select(0, static_cast<int64_t>(i)).copy_(t);
  }
  return out;
}

Tree collate_at(const std::vector<const Tree*>& samples, const std::string& where) {
  const Tree::Kind kind = samples[0]->kind();
  for (size_t i = 1; i < samples.size(); ++i) {
    BRAID_CHECK(samples[i]->kind() == kind, kInvalidArgument, "default_collate: ", where, "sample ",
                i, " is a ", tree_kind_name(samples[i]->kind()), ", sample 0 a ",
                tree_kind_name(kind));
  }
  const auto n = static_cast<int64_t>(samples.size());
  switch (kind) {
    case Tree::Kind::kTensor:
      return stack(samples, where);
    case Tree::Kind::kInt: {
      Tensor out = Tensor::empty({n}, DType::kI64);
      for (int64_t i = 0; i < n; ++i) out.data<int64_t>()[i] = samples[i]->as_int();
      return out;
    }
    case Tree::Kind::kDouble: {
      Tensor out = Tensor::empty({n}, DType::kF64);
      for (int64_t i = 0; i < n; ++i) out.data<double>()[i] = samples[i]->as_double();
      return out;
    }
    case Tree::Kind::kBool: {
      std::vector<double> v;
      for (const Tree* s : samples) v.push_back(s->as_bool() ? 1.0 : 0.0);
      return Tensor::from_vector(v, {n}, DType::kBool);
    }
    case Tree::Kind::kString: {
      Tree::List out;
      for (const Tree* s : samples) out.emplace_back(s->as_string());
      return out;
    }
    case Tree::Kind::kMap: {
      Tree::Map out;
      for (const auto& [key, value] : samples[0]->map()) {
        std::vector<const Tree*> column;
        for (size_t i = 0; i < samples.size(); ++i) {
          BRAID_CHECK(samples[i]->contains(key), kInvalidArgument, "default_collate: ", where,
                      "sample ", i, " has no key \"", key, "\" (sample 0 has it)");
          column.push_back(&samples[i]->at(key));
        }
        out.emplace_back(key, collate_at(column, where + "key \"" + key + "\": "));
      }
      return out;
    }
    case Tree::Kind::kList: {
      const size_t len = samples[0]->size();
      Tree::List out;
      for (size_t pos = 0; pos < len; ++pos) {
        std::vector<const Tree*> column;
        for (size_t i = 0; i < samples.size(); ++i) {
          BRAID_CHECK(samples[i]->size() == len, kInvalidArgument, "default_collate: ", where,
                      "sample ", i, " is a list of ", samples[i]->size(), " items, sample 0 of ",
                      len, " (lists must have equal lengths)");
          column.push_back(&samples[i]->at(pos));
        }
        out.push_back(collate_at(column, where + "item " + std::to_string(pos) + ": "));
      }
      return out;
    }
    case Tree::Kind::kNone:
      break;
  }
  BRAID_CHECK(false, kInvalidArgument, "default_collate: ", where,
              "cannot collate none (expected tensors, numbers, strings, lists or maps)");
  return {};
}

}  // namespace

Tree default_collate(const std::vector<Tree>& samples) {
  BRAID_CHECK(!samples.empty(), kInvalidArgument, "default_collate: no samples");
  std::vector<const Tree*> ptrs;
  ptrs.reserve(samples.size());
  for (const Tree& s : samples) ptrs.push_back(&s);
  return collate_at(ptrs, "");
}

}  // namespace braid::nn
