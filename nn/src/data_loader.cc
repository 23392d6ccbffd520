// DataLoader: one pass = a BatchSource chain built at begin() (docs/data.md).
//
//   local / shard, map-style   IndexSource (a plan of index batches) -> PrefetchSource
//   local / shard, iterable    StreamSource (over IterableShardStream when sharded) -> Prefetch
//   dispatch                   rank 0: IndexSource / StreamSource -> PrefetchSource -> Dispatch
//                              other ranks: DispatchSource only (they never touch the dataset)
//
// Every source says whether a batch is the pass's last when it hands it over, so
// end_of_dataloader is right while the caller holds that batch (Accelerate reads one ahead
// for the same reason). Collectives happen only in DispatchSource and the generator sync, both
// on the caller's thread.
#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "braid/comm/object.h"
#include "braid/comm/process_group.h"
#include "braid/core/error.h"
#include "braid/nn/data.h"
#include "braid/nn/data_shard.h"

namespace braid::nn {
namespace {

enum class Mode : uint8_t { kLocal, kShard, kDispatch };

struct Produced {
  Tree data;
  bool last = false;
  std::optional<int64_t> remainder;  // set by the dispatcher on the last batch
};

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual std::optional<Produced> next() = 0;
};

using Plan = std::vector<std::vector<int64_t>>;

void drop_front(Plan& plan, int64_t n) {
  const auto k =
      static_cast<std::ptrdiff_t>(std::min<int64_t>(n, static_cast<int64_t>(plan.size())));
  plan.erase(plan.begin(), plan.begin() + k);
}

// Batches of a map-style dataset from a precomputed plan of indices.
class IndexSource : public BatchSource {
 public:
  IndexSource(std::shared_ptr<Dataset> dataset, Plan plan, CollateFn collate)
      : dataset_(std::move(dataset)), plan_(std::move(plan)), collate_(std::move(collate)) {}

  std::optional<Produced> next() override {
    if (k_ >= plan_.size()) return std::nullopt;
    std::vector<Tree> samples;
    samples.reserve(plan_[k_].size());
    for (int64_t index : plan_[k_]) samples.push_back(dataset_->get(index));
    ++k_;
    return Produced{collate_(samples), k_ == plan_.size(), std::nullopt};
  }

 private:
  std::shared_ptr<Dataset> dataset_;
  Plan plan_;
  CollateFn collate_;
  size_t k_ = 0;
};

// Batches of a stream; reads one batch ahead to know the last; skips `skip` batches first
// (reading and discarding them, as Accelerate's DataLoaderShard does for iterables).
class StreamSource : public BatchSource {
 public:
  StreamSource(std::unique_ptr<SampleStream> stream, int64_t batch_size, bool drop_last,
               CollateFn collate, int64_t skip)
      : stream_(std::move(stream)),
        batch_size_(static_cast<size_t>(batch_size)),
        drop_last_(drop_last),
        collate_(std::move(collate)),
        skip_(skip) {}

  std::optional<Produced> next() override {
    if (!started_) {
      started_ = true;
      for (int64_t i = 0; i < skip_ && !pull().empty(); ++i) {
      }
      pending_ = pull();
    }
    if (pending_.empty()) return std::nullopt;
    std::vector<Tree> current = std::move(pending_);
    pending_ = pull();
    return Produced{collate_(current), pending_.empty(), std::nullopt};
  }

 private:
  // The next batch's samples; empty at the end (a short last one counts only without drop_last).
  std::vector<Tree> pull() {
    std::vector<Tree> group;
    while (!ended_ && group.size() < batch_size_) {
      std::optional<Tree> s = stream_->next();
      if (!s) {
        ended_ = true;
        break;
      }
      group.push_back(std::move(*s));
    }
    if (group.size() < batch_size_ && drop_last_) group.clear();
    return group;
  }

  std::unique_ptr<SampleStream> stream_;
  size_t batch_size_;
  bool drop_last_;
  CollateFn collate_;
  int64_t skip_;
  bool started_ = false, ended_ = false;
  std::vector<Tree> pending_;
};

// Runs another source on one background thread into a bounded queue. Order is kept (one
// worker); an exception from the worker is re-thrown by next() where it happened.
class PrefetchSource : public BatchSource {
 public:
  PrefetchSource(std::unique_ptr<BatchSource> inner, int depth, std::chrono::milliseconds timeout)
      : inner_(std::move(inner)), depth_(static_cast<size_t>(depth)), timeout_(timeout) {
    worker_ = std::thread([this] { run(); });
  }

  ~PrefetchSource() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }

  std::optional<Produced> next() override {
    std::unique_lock<std::mutex> lock(mu_);
    const bool ready =
        cv_.wait_for(lock, timeout_, [this] { return !queue_.empty() || finished_; });
    BRAID_CHECK(ready, kTimeout, "DataLoader: no batch from the prefetch thread within ",
                timeout_.count(), " ms (batch ", delivered_,
                " of the pass; raise DataLoaderOptions::timeout for slow datasets)");
    if (!queue_.empty()) {
      Produced p = std::move(queue_.front());
      queue_.pop_front();
      ++delivered_;
      cv_.notify_all();
      return p;
    }
    if (error_) std::rethrow_exception(error_);
    return std::nullopt;
  }

 private:
  void run() {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || queue_.size() < depth_; });
        if (stop_) return;
      }
      std::optional<Produced> p;
      std::exception_ptr error;
      try {
        p = inner_->next();
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (p) {
        queue_.push_back(std::move(*p));
      } else {
        error_ = error;
        finished_ = true;
      }
      cv_.notify_all();
      if (finished_) return;
    }
  }

  std::unique_ptr<BatchSource> inner_;
  size_t depth_;
  std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Produced> queue_;
  bool stop_ = false, finished_ = false;
  std::exception_ptr error_;
  int64_t delivered_ = 0;
  std::thread worker_;  // last: started after every member above exists
};

// DataLoaderDispatcher: rank 0 builds each global batch (`group` base batches concatenated,
// one when splitting), pads the last one with the first global batch's first N rows when its
// size is not a multiple of N, and broadcasts it with its metadata; every rank keeps its slice.
class DispatchSource : public BatchSource {
 public:
  DispatchSource(ProcessGroup& pg, const ShardSpec& spec, bool drop_last, int64_t discard,
                 std::unique_ptr<BatchSource> base, std::function<Tree()> first_loader)
      : pg_(pg),
        np_(spec.num_processes),
        rank_(spec.process_index),
        group_(spec.split_batches ? 1 : static_cast<size_t>(spec.num_processes)),
        drop_last_(drop_last),
        discard_(discard),
        base_(std::move(base)),
        first_loader_(std::move(first_loader)) {}

  std::optional<Produced> next() override {
    if (finished_) return std::nullopt;
    std::vector<Tree> msg;
    if (rank_ == 0) msg = produce();
    broadcast_object_list(pg_, msg, 0);
    BRAID_ASSERT(!msg.empty(), "dispatch: empty message from rank 0");
    const Tree& meta = msg[0];
    if (meta.at("stop").as_bool()) {
      finished_ = true;
      return std::nullopt;
    }
    const int64_t observed = meta.at("observed").as_int();
    const bool last = meta.at("last").as_bool();
    const int64_t per = observed / np_ + (meta.at("padded").as_bool() ? 1 : 0);
    finished_ = last;
    Produced p{slice_tensors(msg.at(1), rank_ * per, (rank_ + 1) * per), last, std::nullopt};
    if (last) p.remainder = observed;
    return p;
  }

 private:
  void fill(size_t k) {
    while (lookahead_.size() < k && !base_done_) {
      std::optional<Produced> b = base_->next();
      if (!b) {
        base_done_ = true;
      } else {
        lookahead_.push_back(std::move(b->data));
      }
    }
  }

  const Tree& first() {
    if (!first_) first_ = first_loader_();
    return *first_;
  }

  std::vector<Tree> produce() {
    const Tree stop = Tree::map({{"stop", true}});
    if (!started_) {
      started_ = true;
      std::vector<Tree> first_parts;  // iterables: the skipped head still pads the end
      for (int64_t i = 0; i < discard_; ++i) {
        std::optional<Produced> b = base_->next();
        if (!b) {
          base_done_ = true;
          break;
        }
        if (static_cast<size_t>(i) < group_) first_parts.push_back(std::move(b->data));
      }
      if (!first_parts.empty() && !drop_last_) {
        first_ = slice_tensors(concatenate(first_parts, 0), 0, np_);
      }
    }
    fill(group_);
    const size_t take = std::min(group_, lookahead_.size());
    if (take == 0 || (take < group_ && drop_last_)) return {stop};
    std::vector<Tree> parts(
        std::make_move_iterator(lookahead_.begin()),
        std::make_move_iterator(lookahead_.begin() + static_cast<std::ptrdiff_t>(take)));
    lookahead_.erase(lookahead_.begin(), lookahead_.begin() + static_cast<std::ptrdiff_t>(take));
    Tree batch = parts.size() == 1 ? std::move(parts[0]) : concatenate(parts, 0);
    const int64_t observed = find_batch_size(batch);
    if (!first_ && !first_loader_ && !drop_last_) first_ = slice_tensors(batch, 0, np_);
    // Last when no further global batch can be formed: one more base batch is enough unless
    // drop_last drops an incomplete group.
    const size_t need = (group_ > 1 && drop_last_) ? group_ : 1;
    fill(need);
    const bool last = lookahead_.size() < need;
    const bool padded = last && !drop_last_ && observed % np_ != 0;
    if (padded) batch = concatenate({batch, first()}, 0);
    Tree meta =
        Tree::map({{"stop", false}, {"observed", observed}, {"last", last}, {"padded", padded}});
    return {std::move(meta), std::move(batch)};
  }

  ProcessGroup& pg_;
  int64_t np_;
  int64_t rank_;
  size_t group_;
  bool drop_last_;
  int64_t discard_;
  std::unique_ptr<BatchSource> base_;  // rank 0 only
  std::function<Tree()> first_loader_;
  std::deque<Tree> lookahead_;
  std::optional<Tree> first_;
  bool started_ = false, base_done_ = false, finished_ = false;
};

}  // namespace

// ---- state -------------------------------------------------------------------------------

struct DataLoader::State {
  std::shared_ptr<Dataset> dataset;
  std::shared_ptr<IterableDataset> iterable;
  DataLoaderOptions options;
  std::shared_ptr<Sampler> sampler;
  Mode mode = Mode::kLocal;
  bool prepared = false;
  ProcessGroup* pg = nullptr;
  ShardSpec spec;
  bool sync_generator = false;
  bool non_blocking = false;  // no effect on CPU
  Device device = kCPU;
  int64_t skip = 0;
  // The epoch and the position in it, shared by a loader and every loader skip_first_batches
  // derives from it (prepare_data_loader starts a new one): whichever of them runs a pass
  // moves it, so the position of a resumed run is counted from the epoch's start.
  struct Progress {
    int64_t epoch = 0;
    int64_t batches = 0;        // taken in this epoch's pass on this rank, skipped ones included
    bool last_in_hand = false;  // the pass's last batch is out: the epoch is as good as done
  };
  std::shared_ptr<Progress> progress = std::make_shared<Progress>();
  bool end_of_dataloader = false;
  int64_t remainder = -1;

  CollateFn collate() const {
    return options.collate ? options.collate : CollateFn(&default_collate);
  }
};

struct DataLoader::Pass {
  std::shared_ptr<State> state;
  std::unique_ptr<BatchSource> source;
  Tree current;
  bool done = false;

  void advance() {
    BRAID_CHECK(!done, kOutOfRange, "DataLoader: advancing an iterator past the end of the pass");
    std::optional<Produced> p = source->next();
    if (!p) {
      done = true;
      current = Tree();
      source.reset();  // joins the prefetch thread
      ++state->progress->epoch;
      state->progress->batches = 0;
      state->progress->last_in_hand = false;
      return;
    }
    ++state->progress->batches;
    state->progress->last_in_hand = p->last;
    current = state->device == kCPU ? std::move(p->data) : send_to_device(p->data, state->device);
    state->end_of_dataloader = p->last;
    if (p->remainder) state->remainder = *p->remainder;
  }
};

namespace {

void check_options(const DataLoaderOptions& o) {
  BRAID_CHECK(o.batch_size > 0, kInvalidArgument, "DataLoader: batch_size ", o.batch_size,
              " must be positive");
  BRAID_CHECK(o.prefetch >= 0, kInvalidArgument, "DataLoader: prefetch ", o.prefetch,
              " must be >= 0");
  BRAID_CHECK(o.timeout.count() > 0, kInvalidArgument, "DataLoader: timeout ", o.timeout.count(),
              " ms must be positive");
}

std::unique_ptr<BatchSource> prefetched(const DataLoaderOptions& o,
                                        std::unique_ptr<BatchSource> source) {
  if (o.prefetch == 0) return source;
  return std::make_unique<PrefetchSource>(std::move(source), o.prefetch, o.timeout);
}

}  // namespace

DataLoader::DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options)
    : s_(std::make_shared<State>()) {
  BRAID_CHECK(dataset != nullptr, kInvalidArgument, "DataLoader: the dataset is null");
  check_options(options);
  const int64_t n = dataset->size();
  if (options.sampler) {
    BRAID_CHECK(options.sampler->size() == n, kInvalidArgument, "DataLoader: the sampler has ",
                options.sampler->size(), " indices, the dataset ", n, " samples");
    s_->sampler = options.sampler;
  } else if (options.shuffle) {
    s_->sampler = std::make_shared<RandomSampler>(n, options.seed);
  } else {
    s_->sampler = std::make_shared<SequentialSampler>(n);
  }
  s_->dataset = std::move(dataset);
  s_->options = std::move(options);
}

DataLoader::DataLoader(std::shared_ptr<IterableDataset> dataset, DataLoaderOptions options)
    : s_(std::make_shared<State>()) {
  BRAID_CHECK(dataset != nullptr, kInvalidArgument, "DataLoader: the dataset is null");
  check_options(options);
  BRAID_CHECK(!options.shuffle && !options.sampler, kInvalidArgument,
              "DataLoader: an IterableDataset takes no shuffle or sampler (it orders itself)");
  s_->iterable = std::move(dataset);
  s_->options = std::move(options);
}

DataLoader::DataLoader(std::shared_ptr<State> state) : s_(std::move(state)) {}
DataLoader::DataLoader(DataLoader&&) noexcept = default;
DataLoader& DataLoader::operator=(DataLoader&&) noexcept = default;
DataLoader::~DataLoader() = default;

// ---- a pass ------------------------------------------------------------------------------

namespace {

void sync_generator(ProcessGroup& pg, Generator& gen) {
  // Accelerate's synchronize_rng_states(["generator"]): rank 0's state everywhere.
  std::vector<uint8_t> bytes = gen.get_state();
  Tensor t = Tensor::empty({static_cast<int64_t>(bytes.size())}, DType::kU8);
  std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  pg.broadcast(t, 0);
  gen.set_state(std::span<const uint8_t>(t.data<uint8_t>(), bytes.size()));
}

}  // namespace

DataLoader::Iterator DataLoader::begin() {
  State& s = *s_;
  const DataLoaderOptions& o = s.options;
  s.end_of_dataloader = false;
  s.remainder = -1;
  if (!o.drop_last && s.mode != Mode::kDispatch) {
    if (std::optional<int64_t> len = total_dataset_length())
      s.remainder = *len % total_batch_size();
  }
  set_epoch(s.progress->epoch);
  s.progress->batches = s.skip;
  s.progress->last_in_hand = false;
  if (s.sync_generator) sync_generator(*s.pg, *s.sampler->generator());

  const CollateFn collate = s.collate();
  const int np = s.spec.num_processes;
  std::unique_ptr<BatchSource> source;
  if (s.mode == Mode::kDispatch) {
    const int64_t group = s.spec.split_batches ? 1 : np;
    std::unique_ptr<BatchSource> base;
    std::function<Tree()> first_loader;
    int64_t discard = 0;
    if (s.spec.process_index == 0) {
      if (s.dataset) {
        Plan plan = batch_indices(s.sampler->order(), o.batch_size, o.drop_last);
        if (s.skip > 0) {
          // Skipped at the index level; the first global batch is read only if it pads the end.
          Plan head(plan.begin(),
                    plan.begin() +
                        std::min<std::ptrdiff_t>(group, static_cast<std::ptrdiff_t>(plan.size())));
          first_loader = [dataset = s.dataset, head, collate, np] {
            IndexSource src(dataset, head, collate);
            std::vector<Tree> parts;
            while (std::optional<Produced> p = src.next()) parts.push_back(std::move(p->data));
            return slice_tensors(concatenate(parts, 0), 0, np);
          };
          drop_front(plan, s.skip * group);
        }
        base = prefetched(o, std::make_unique<IndexSource>(s.dataset, std::move(plan), collate));
      } else {
        base = prefetched(o, std::make_unique<StreamSource>(s.iterable->stream(), o.batch_size,
                                                            o.drop_last, collate, 0));
        discard = s.skip * group;
      }
    }
    source = std::make_unique<DispatchSource>(*s.pg, s.spec, o.drop_last, discard, std::move(base),
                                              std::move(first_loader));
  } else if (s.dataset) {
    Plan plan = batch_indices(s.sampler->order(), o.batch_size, o.drop_last);
    if (s.mode == Mode::kShard) plan = shard_batches(plan, o.batch_size, o.drop_last, s.spec);
    drop_front(plan, s.skip);
    source = prefetched(o, std::make_unique<IndexSource>(s.dataset, std::move(plan), collate));
  } else {
    std::unique_ptr<SampleStream> stream = s.iterable->stream();
    int64_t batch_size = o.batch_size;
    if (s.mode == Mode::kShard) {
      stream = std::make_unique<IterableShardStream>(std::move(stream), o.batch_size, o.drop_last,
                                                     s.spec);
      if (s.spec.split_batches) batch_size /= np;
    }
    source = prefetched(o, std::make_unique<StreamSource>(std::move(stream), batch_size,
                                                          o.drop_last, collate, s.skip));
  }
  auto pass = std::make_shared<Pass>();
  pass->state = s_;
  pass->source = std::move(source);
  pass->advance();
  return Iterator(std::move(pass));
}

const Tree& DataLoader::Iterator::operator*() const {
  BRAID_CHECK(pass_ && !pass_->done, kOutOfRange,
              "DataLoader: dereferencing an iterator at the end of the pass");
  return pass_->current;
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  BRAID_CHECK(pass_ != nullptr, kOutOfRange, "DataLoader: advancing an empty iterator");
  pass_->advance();
  return *this;
}

bool DataLoader::Iterator::operator==(std::default_sentinel_t) const {
  return !pass_ || pass_->done;
}

// ---- queries -----------------------------------------------------------------------------

int64_t DataLoader::size() const {
  const State& s = *s_;
  const DataLoaderOptions& o = s.options;
  const int64_t np = s.spec.num_processes;
  int64_t len = 0;
  if (s.dataset) {
    const int64_t base = num_batches(s.sampler->size(), o.batch_size, o.drop_last);
    switch (s.mode) {
      case Mode::kLocal:
        len = base;
        break;
      case Mode::kShard:
        len = sharded_length(base, o.drop_last, s.spec);
        break;
      case Mode::kDispatch:
        len = s.spec.split_batches ? base : o.drop_last ? base / np : (base + np - 1) / np;
        break;
    }
  } else {
    const std::optional<int64_t> n = s.iterable->size();
    BRAID_CHECK(n.has_value(), kNotSupported,
                "DataLoader::size: the IterableDataset does not know its size");
    const int64_t global = total_batch_size();
    if (s.mode == Mode::kLocal) {
      len = num_batches(*n, o.batch_size, o.drop_last);
    } else if (s.mode == Mode::kShard) {
      len = o.drop_last ? *n / global : (*n + global - 1) / global;
    } else {
      const int64_t base = num_batches(*n, o.batch_size, o.drop_last);
      len = s.spec.split_batches ? base : o.drop_last ? base / np : (base + np - 1) / np;
    }
  }
  return std::max<int64_t>(0, len - s.skip);
}

void DataLoader::set_epoch(int64_t epoch) {
  State& s = *s_;
  s.progress->epoch = epoch;
  if (s.sampler && s.sampler->takes_epoch()) {
    s.sampler->set_epoch(epoch);
  } else if (s.dataset) {
    s.dataset->set_epoch(epoch);
  } else if (s.iterable) {
    s.iterable->set_epoch(epoch);
  }
}

int64_t DataLoader::epoch() const {
  return s_->progress->epoch;
}

DataLoaderPosition DataLoader::position() const {
  const State::Progress& p = *s_->progress;
  if (p.last_in_hand) return {p.epoch + 1, 0};
  return {p.epoch, p.batches};
}

std::function<DataLoaderPosition()> DataLoader::position_reader() const {
  return [progress = std::shared_ptr<const State::Progress>(s_->progress)]() -> DataLoaderPosition {
    if (progress->last_in_hand) return {progress->epoch + 1, 0};
    return {progress->epoch, progress->batches};
  };
}
bool DataLoader::end_of_dataloader() const {
  return s_->end_of_dataloader;
}
int64_t DataLoader::remainder() const {
  return s_->remainder;
}

int64_t DataLoader::total_batch_size() const {
  const State& s = *s_;
  if (s.mode == Mode::kLocal || s.spec.split_batches) return s.options.batch_size;
  return s.options.batch_size * s.spec.num_processes;
}

std::optional<int64_t> DataLoader::total_dataset_length() const {
  return s_->dataset ? std::optional<int64_t>(s_->dataset->size()) : s_->iterable->size();
}

const DataLoaderOptions& DataLoader::options() const {
  return s_->options;
}
const std::shared_ptr<Sampler>& DataLoader::sampler() const {
  return s_->sampler;
}
int DataLoader::num_processes() const {
  return s_->spec.num_processes;
}
int DataLoader::process_index() const {
  return s_->spec.process_index;
}
bool DataLoader::prepared() const {
  return s_->prepared;
}
bool DataLoader::dispatches() const {
  return s_->mode == Mode::kDispatch;
}
int64_t DataLoader::skip_batches() const {
  return s_->skip;
}

// ---- prepare / skip ----------------------------------------------------------------------

DataLoader prepare_data_loader(const DataLoader& loader, ProcessGroup& pg,
                               const DataLoaderConfiguration& config, Device device) {
  const DataLoader::State& src = *loader.s_;
  BRAID_CHECK(!src.prepared, kInvalidArgument,
              "prepare_data_loader: the loader is prepared already");
  const int np = pg.size();
  const int rank = pg.rank();
  BRAID_CHECK(rank >= 0, kInvalidArgument,
              "prepare_data_loader: this process is not a member of the group");
  const int64_t bs = src.options.batch_size;
  BRAID_CHECK(!config.split_batches || bs % np == 0, kInvalidArgument,
              "prepare_data_loader: to use split_batches the batch size (", bs,
              ") must be a multiple of the number of processes (", np, ")");

  auto s = std::make_shared<DataLoader::State>(src);
  s->prepared = true;
  s->pg = &pg;
  s->device = device;
  s->non_blocking = config.non_blocking;
  s->spec = ShardSpec{np, rank, config.split_batches, config.even_batches};
  s->progress = std::make_shared<DataLoader::State::Progress>();
  s->end_of_dataloader = false;
  s->remainder = -1;
  if (config.use_seedable_sampler && dynamic_cast<RandomSampler*>(s->sampler.get()) != nullptr) {
    s->sampler = std::make_shared<SeedableRandomSampler>(s->sampler->size(), config.data_seed);
  }
  const bool dispatch = config.dispatch_batches.value_or(s->iterable != nullptr);
  if (dispatch) {
    s->mode = Mode::kDispatch;
  } else if (np > 1) {
    s->mode = Mode::kShard;
    s->sync_generator = s->sampler && s->sampler->generator() != nullptr;
  } else {
    s->mode = Mode::kLocal;
  }
  return DataLoader(std::move(s));
}

DataLoader skip_first_batches(const DataLoader& loader, int64_t n) {
  BRAID_CHECK(n >= 0, kInvalidArgument, "skip_first_batches: ", n, " batches is negative");
  auto s = std::make_shared<DataLoader::State>(*loader.s_);
  s->skip += n;  // skipping a skipping loader adds up, as nested SkipBatchSamplers do
  s->end_of_dataloader = false;
  s->remainder = -1;
  return DataLoader(std::move(s));
}

}  // namespace braid::nn
