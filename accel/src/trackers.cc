// LoggerType names, the key rules every tracker applies, and Trackers: Accelerate's
// init_trackers / log / get_tracker / end_training over a list of GeneralTrackers
// (docs/trackers.md). The trackers themselves are in trackers_files.cc (jsonl, csv) and
// trackers_tensorboard.cc.
#include "braid/accel/trackers.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <exception>
#include <set>
#include <utility>

#include "braid/core/error.h"
#include "trackers_internal.h"

namespace braid::accel {

namespace {

struct NamedType {
  LoggerType type;
  std::string_view name;
  bool built;
};

constexpr std::array<NamedType, 11> kLoggerTypes = {{
    {LoggerType::kAll, "all", true},
    {LoggerType::kTensorBoard, "tensorboard", true},
    {LoggerType::kWandb, "wandb", false},
    {LoggerType::kTrackio, "trackio", false},
    {LoggerType::kCometMl, "comet_ml", false},
    {LoggerType::kMlflow, "mlflow", false},
    {LoggerType::kClearMl, "clearml", false},
    {LoggerType::kDvcLive, "dvclive", false},
    {LoggerType::kSwanLab, "swanlab", false},
    {LoggerType::kJsonl, "jsonl", true},
    {LoggerType::kCsv, "csv", true},
}};

const NamedType& entry(LoggerType type) {
  for (const NamedType& e : kLoggerTypes) {
    if (e.type == type) return e;
  }
  BRAID_FAIL(kInvalidArgument, "LoggerType value ", static_cast<int>(type), " is not a tracker");
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

std::string built_names() {
  std::string out;
  for (LoggerType t : available_trackers()) {
    if (!out.empty()) out += ", ";
    out += logger_type_name(t);
  }
  return out;
}

// `key` for an error message: control bytes, and every byte >= 0x80 when the text is not
// valid UTF-8, as \xNN; the rest as it is.
std::string printable(std::string_view key) {
  const bool utf8 = detail::valid_utf8(key);
  std::string out = "'";
  for (char c : key) {
    const auto b = static_cast<unsigned char>(c);
    if (b < 0x20 || b == 0x7f || (!utf8 && b >= 0x80)) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[b >> 4];
      out += kHex[b & 15];
    } else {
      out += c;
    }
  }
  return out + "'";
}

// A blank tracker, what get_tracker returns where no tracker runs (Accelerate's
// GeneralTracker(_blank=True)).
class BlankTracker final : public GeneralTracker {
 public:
  std::string name() const override { return "blank"; }
  void log(const Scalars&, int64_t) override {}
};

void check_project_name(std::string_view project_name) {
  BRAID_CHECK(!project_name.empty(), kInvalidArgument,
              "init_trackers: project_name is empty; it names the run's folder under "
              "logging_dir");
  const std::filesystem::path p(project_name);
  BRAID_CHECK(p.is_relative() && !p.has_root_path(), kInvalidArgument,
              "init_trackers: project_name '", project_name,
              "' is an absolute path; expected a folder name relative to logging_dir");
  size_t begin = 0;
  while (begin <= project_name.size()) {
    size_t end = project_name.find('/', begin);
    if (end == std::string_view::npos) end = project_name.size();
    const std::string_view part = project_name.substr(begin, end - begin);
    BRAID_CHECK(!part.empty() && part != "." && part != "..", kInvalidArgument,
                "init_trackers: project_name '", project_name,
                "' has an empty, '.' or '..' component; expected a folder name like "
                "'my-run' or 'group/my-run'");
    begin = end + 1;
  }
  BRAID_CHECK(project_name.find('\0') == std::string_view::npos, kInvalidArgument,
              "init_trackers: project_name holds a NUL byte");
}

}  // namespace

// ---- LoggerType ---------------------------------------------------------------------------

std::string_view logger_type_name(LoggerType type) {
  return entry(type).name;
}

LoggerType parse_logger_type(std::string_view name) {
  for (const NamedType& e : kLoggerTypes) {
    if (iequals(e.name, name)) return e.type;
  }
  std::string all;
  for (const NamedType& e : kLoggerTypes) {
    if (!all.empty()) all += ", ";
    all += e.name;
  }
  BRAID_FAIL(kInvalidArgument, "unknown tracker ", printable(name), "; expected one of ", all);
}

bool logger_type_built(LoggerType type) {
  return entry(type).built;
}

std::vector<LoggerType> available_trackers() {
  return {LoggerType::kTensorBoard, LoggerType::kJsonl, LoggerType::kCsv};
}

double system_wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// ---- keys ---------------------------------------------------------------------------------

void check_tracker_key(std::string_view key, std::string_view what) {
  BRAID_CHECK(!key.empty(), kInvalidArgument, what, " is empty; expected a non-empty name");
  BRAID_CHECK(detail::valid_utf8(key), kInvalidArgument, what, " ", printable(key),
              " is not valid UTF-8; expected UTF-8 text (TensorBoard tags and JSON need it)");
  for (char c : key) {
    const auto b = static_cast<unsigned char>(c);
    BRAID_CHECK(b >= 0x20 && b != 0x7f, kInvalidArgument, what, " ", printable(key),
                " holds a control character; expected printable text");
  }
}

void check_log_key(std::string_view key) {
  check_tracker_key(key, "log key");
  BRAID_CHECK(key != "step" && key != "time", kInvalidArgument, "log key '", key,
              "' is reserved: the jsonl and csv trackers write their own \"step\" and "
              "\"time\" fields; rename it (e.g. 'train/",
              key, "')");
}

GeneralTracker::~GeneralTracker() = default;

// ---- Trackers -----------------------------------------------------------------------------

struct Trackers::Impl {
  enum class State : uint8_t { kNew, kRunning, kEnded };
  State state = State::kNew;
  std::vector<std::shared_ptr<GeneralTracker>> trackers;
  BlankTracker blank;

  void check_running(std::string_view call) const {
    BRAID_CHECK(state != State::kNew, kInvalidArgument, "Trackers::", call,
                " before init: call init (Accelerator::init_trackers) first");
    BRAID_CHECK(state != State::kEnded, kInvalidArgument, "Trackers::", call,
                " after end_training");
  }

  // Runs `f` on every tracker; the first exception is rethrown after all have run.
  template <typename F>
  void for_each(F&& f) {
    std::exception_ptr first;
    for (const auto& t : trackers) {
      try {
        f(*t);
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    if (first) std::rethrow_exception(first);
  }
};

Trackers::Trackers() : impl_(std::make_unique<Impl>()) {}
Trackers::~Trackers() = default;

void Trackers::init(TrackersOptions options) {
  BRAID_CHECK(impl_->state == Impl::State::kNew, kInvalidArgument,
              "Trackers::init called twice; one init_trackers per Accelerator");

  // Resolve log_with: "all" expands, duplicates count once, unbuilt names fail.
  std::vector<LoggerType> types;
  for (LoggerType t : options.log_with) {
    const NamedType& e = entry(t);
    BRAID_CHECK(e.built, kNotSupported, "tracker '", e.name,
                "' is not built in braid (it has no network tracker clients); available: ",
                built_names(), " (\"all\" means all of them)");
    const std::vector<LoggerType> add =
        t == LoggerType::kAll ? available_trackers() : std::vector<LoggerType>{t};
    for (LoggerType a : add) {
      if (std::find(types.begin(), types.end(), a) == types.end()) types.push_back(a);
    }
  }
  check_project_name(options.project_name);
  BRAID_CHECK(types.empty() || !options.logging_dir.empty(), kInvalidArgument,
              "init_trackers: logging with '", logger_type_name(types.front()),
              "' needs a logging_dir (ProjectConfiguration.logging_dir); it is empty");
  if (options.config) detail::check_hparams(*options.config);

  std::set<std::string, std::less<>> names;
  for (LoggerType t : types) names.emplace(logger_type_name(t));
  for (const auto& c : options.custom) {
    BRAID_CHECK(c != nullptr, kInvalidArgument, "init_trackers: a custom tracker is null");
    const std::string n = c->name();
    BRAID_CHECK(names.insert(n).second, kInvalidArgument, "init_trackers: two trackers are named '",
                n, "'; get_tracker finds trackers by name, so names must be unique");
  }

  std::vector<std::shared_ptr<GeneralTracker>> made;
  if (options.is_main_process) {
    const std::filesystem::path dir = options.logging_dir / options.project_name;
    const WallClock clock = detail::clock_or_default(options.clock);
    for (LoggerType t : types) {
      switch (t) {
        case LoggerType::kTensorBoard:
          made.push_back(std::make_shared<TensorBoardTracker>(dir, TensorBoardOptions{{}, clock}));
          break;
        case LoggerType::kJsonl:
          made.push_back(std::make_shared<JsonlTracker>(dir, clock));
          break;
        case LoggerType::kCsv:
          made.push_back(std::make_shared<CsvTracker>(dir, clock));
          break;
        default:
          BRAID_ASSERT(false, "unexpected tracker ", logger_type_name(t));
      }
    }
  }
  for (const auto& c : options.custom) {
    if (options.is_main_process || !c->main_process_only()) made.push_back(c);
  }
  if (options.config) {
    for (const auto& t : made) t->store_init_configuration(*options.config);
  }
  impl_->trackers = std::move(made);
  impl_->state = Impl::State::kRunning;
}

bool Trackers::initialized() const {
  return impl_->state != Impl::State::kNew;
}

void Trackers::log(const Scalars& values, int64_t step) {
  impl_->check_running("log");
  for (const auto& kv : values) check_log_key(kv.first);
  impl_->for_each([&](GeneralTracker& t) { t.log(values, step); });
}

void Trackers::log_text(std::string_view tag, std::string_view text, int64_t step) {
  impl_->check_running("log_text");
  check_log_key(tag);
  detail::check_utf8(text, "text logged under '" + std::string(tag) + "'");
  impl_->for_each([&](GeneralTracker& t) { t.log_text(tag, text, step); });
}

GeneralTracker& Trackers::get_tracker(std::string_view name) {
  if (impl_->trackers.empty()) return impl_->blank;
  for (const auto& t : impl_->trackers) {
    if (t->name() == name) return *t;
  }
  std::string have;
  for (const std::string& n : names()) have += (have.empty() ? "" : ", ") + n;
  BRAID_FAIL(kInvalidArgument, "get_tracker: no tracker named ", printable(name),
             "; this process runs: ", have);
}

std::vector<std::string> Trackers::names() const {
  std::vector<std::string> out;
  for (const auto& t : impl_->trackers) out.push_back(t->name());
  return out;
}

void Trackers::end_training() {
  if (impl_->state == Impl::State::kEnded) return;
  impl_->state = Impl::State::kEnded;
  impl_->for_each([](GeneralTracker& t) { t.finish(); });
}

}  // namespace braid::accel
