// LoggerType names and Trackers (Accelerate's init_trackers / log / get_tracker /
// end_training): which trackers run where, the folder layout, validation on every process,
// custom trackers, and errors that name the value.
#include "braid/accel/trackers.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "braid/core/error.h"
#include "braid/core/file_util.h"
#include "tracker_test_util.h"

namespace braid::accel {
namespace {

namespace fs = std::filesystem;
using test::catch_error;
using test::TempDir;

bool contains(const std::string& s, std::string_view part) {
  return s.find(part) != std::string::npos;
}

// ---- LoggerType -----------------------------------------------------------------------------

TEST(LoggerType, NamesAreAccelerates) {
  const std::vector<std::pair<LoggerType, std::string_view>> all = {
      {LoggerType::kAll, "all"},          {LoggerType::kTensorBoard, "tensorboard"},
      {LoggerType::kWandb, "wandb"},      {LoggerType::kTrackio, "trackio"},
      {LoggerType::kCometMl, "comet_ml"}, {LoggerType::kMlflow, "mlflow"},
      {LoggerType::kClearMl, "clearml"},  {LoggerType::kDvcLive, "dvclive"},
      {LoggerType::kSwanLab, "swanlab"},  {LoggerType::kJsonl, "jsonl"},
      {LoggerType::kCsv, "csv"},
  };
  for (const auto& [type, name] : all) {
    EXPECT_EQ(logger_type_name(type), name);
    EXPECT_EQ(parse_logger_type(name), type);
  }
  EXPECT_EQ(parse_logger_type("TensorBoard"), LoggerType::kTensorBoard);
  EXPECT_EQ(parse_logger_type("ALL"), LoggerType::kAll);
  EXPECT_EQ(available_trackers(), (std::vector<LoggerType>{LoggerType::kTensorBoard,
                                                           LoggerType::kJsonl, LoggerType::kCsv}));
  EXPECT_TRUE(logger_type_built(LoggerType::kCsv));
  EXPECT_FALSE(logger_type_built(LoggerType::kWandb));
}

TEST(LoggerType, UnknownNameIsNamed) {
  const Error e = catch_error([] { parse_logger_type("tensorbord"); });
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  EXPECT_TRUE(contains(e.message(), "unknown tracker 'tensorbord'")) << e.message();
  EXPECT_TRUE(contains(e.message(),
                       "all, tensorboard, wandb, trackio, comet_ml, mlflow, "
                       "clearml, dvclive, swanlab, jsonl, csv"))
      << e.message();
}

// ---- Trackers: which trackers run where -----------------------------------------------------

TEST(Trackers, MainProcessWritesUnderLoggingDirSlashProject) {
  TempDir dir("main");
  Trackers trackers;
  EXPECT_FALSE(trackers.initialized());
  trackers.init({.log_with = {LoggerType::kAll},
                 .logging_dir = dir.path() / "logs",
                 .project_name = "proj",
                 .config = HParams{{"lr", 0.5}},
                 .clock = [] { return 100.0; }});
  EXPECT_TRUE(trackers.initialized());
  EXPECT_EQ(trackers.names(), (std::vector<std::string>{"tensorboard", "jsonl", "csv"}));
  trackers.log({{"loss", 1.5}}, 1);
  trackers.log_text("note", "hi", 2);
  trackers.end_training();

  const fs::path run = dir.path() / "logs" / "proj";
  EXPECT_EQ(read_file(run / "metrics.jsonl"),
            "{\"step\":1,\"loss\":1.5,\"time\":100}\n{\"step\":2,\"note\":\"hi\",\"time\":100}\n");
  EXPECT_EQ(read_file(run / "metrics.csv"), "step,time,loss\n1,100,1.5\n");
  EXPECT_EQ(read_file(run / "hparams.json"), "{\n  \"lr\": 0.5\n}\n");
  EXPECT_EQ(read_file(run / "hparams.csv"), "key,value\nlr,0.5\n");
  auto& tb = dynamic_cast<TensorBoardTracker&>(trackers.get_tracker("tensorboard"));
  EXPECT_EQ(tb.event_file().parent_path(), run);
  // file_version, hparams, the scalar, the text.
  EXPECT_EQ(read_tfrecords(tb.event_file()).size(), 4u);
  const std::vector<std::string> entries = dir.entries();
  EXPECT_EQ(entries.size(), 7u);  // logs, logs/proj and five files: no temporary left
}

TEST(Trackers, NonMainProcessWritesNothing) {
  TempDir dir("nonmain");
  Trackers trackers;
  trackers.init({.log_with = {LoggerType::kTensorBoard, LoggerType::kJsonl, LoggerType::kCsv},
                 .logging_dir = dir.path() / "logs",
                 .project_name = "proj",
                 .config = HParams{{"lr", 0.5}},
                 .is_main_process = false});
  EXPECT_TRUE(trackers.names().empty());
  trackers.log({{"loss", 1.5}}, 1);
  trackers.log_text("note", "hi", 1);
  GeneralTracker& blank = trackers.get_tracker("tensorboard");  // Accelerate's blank tracker
  EXPECT_EQ(blank.name(), "blank");
  blank.log({{"loss", 1}}, 1);
  trackers.end_training();
  EXPECT_TRUE(dir.entries().empty());  // not even the folder

  // The arguments are still checked, so every rank fails alike.
  Trackers other;
  other.init({.log_with = {LoggerType::kJsonl},
              .logging_dir = dir.path(),
              .project_name = "p",
              .is_main_process = false});
  EXPECT_EQ(catch_error([&] { other.log({{"step", 1}}, 1); }).kind(), ErrorKind::kInvalidArgument);
  Trackers third;
  EXPECT_EQ(catch_error([&] {
              third.init({.log_with = {LoggerType::kMlflow},
                          .logging_dir = dir.path(),
                          .project_name = "p",
                          .is_main_process = false});
            }).kind(),
            ErrorKind::kNotSupported);
}

TEST(Trackers, UnbuiltTrackerIsNotSupported) {
  TempDir dir("wandb");
  Trackers trackers;
  const Error e = catch_error([&] {
    trackers.init({.log_with = {LoggerType::kJsonl, LoggerType::kWandb},
                   .logging_dir = dir.path() / "logs",
                   .project_name = "proj"});
  });
  EXPECT_EQ(e.kind(), ErrorKind::kNotSupported);
  EXPECT_TRUE(contains(e.message(), "tracker 'wandb' is not built in braid")) << e.message();
  EXPECT_TRUE(contains(e.message(), "available: tensorboard, jsonl, csv")) << e.message();
  EXPECT_FALSE(trackers.initialized());
  EXPECT_TRUE(dir.entries().empty());  // checked before anything is created
}

TEST(Trackers, DuplicatesCountOnce) {
  TempDir dir("dups");
  Trackers trackers;
  trackers.init({.log_with = {LoggerType::kCsv, LoggerType::kAll, LoggerType::kCsv},
                 .logging_dir = dir.path(),
                 .project_name = "p"});
  EXPECT_EQ(trackers.names(), (std::vector<std::string>{"csv", "tensorboard", "jsonl"}));
}

TEST(Trackers, ArgumentErrorsNameTheValue) {
  TempDir dir("args");
  struct Case {
    TrackersOptions options;
    std::string fragment;
  };
  std::vector<Case> cases;
  cases.push_back(
      {{.log_with = {LoggerType::kJsonl}, .logging_dir = dir.path()}, "project_name is empty"});
  cases.push_back(
      {{.log_with = {LoggerType::kJsonl}, .logging_dir = dir.path(), .project_name = "a/../../b"},
       "project_name 'a/../../b' has an empty, '.' or '..' component"});
  cases.push_back(
      {{.log_with = {LoggerType::kJsonl}, .logging_dir = dir.path(), .project_name = "/abs"},
       "project_name '/abs' is an absolute path"});
  cases.push_back({{.log_with = {LoggerType::kTensorBoard}, .project_name = "p"},
                   "logging with 'tensorboard' needs a logging_dir"});
  cases.push_back({{.log_with = {LoggerType::kJsonl},
                    .logging_dir = dir.path(),
                    .project_name = "p",
                    .config = HParams{{"a\tb", 1.0}}},
                   "hyperparameter name 'a\\x09b' holds a control character"});
  cases.push_back({{.log_with = {LoggerType::kJsonl},
                    .logging_dir = dir.path(),
                    .project_name = "p",
                    .config = HParams{{"name", "\xff"}}},
                   "hyperparameter 'name' (a string value) is not valid UTF-8"});
  for (Case& c : cases) {
    Trackers trackers;
    const Error e = catch_error([&] { trackers.init(std::move(c.options)); });
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_TRUE(contains(e.message(), c.fragment)) << e.message();
    EXPECT_FALSE(trackers.initialized());
  }
  EXPECT_TRUE(dir.entries().empty());
}

TEST(Trackers, CallOrderErrors) {
  TempDir dir("order");
  Trackers trackers;
  Error e = catch_error([&] { trackers.log({{"x", 1}}, 1); });
  EXPECT_TRUE(contains(e.message(), "Trackers::log before init")) << e.message();
  trackers.init({.log_with = {LoggerType::kJsonl}, .logging_dir = dir.path(), .project_name = "p"});
  e = catch_error([&] {
    trackers.init(
        {.log_with = {LoggerType::kJsonl}, .logging_dir = dir.path(), .project_name = "p"});
  });
  EXPECT_TRUE(contains(e.message(), "Trackers::init called twice")) << e.message();
  e = catch_error([&] { trackers.get_tracker("wandb"); });
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  EXPECT_TRUE(contains(e.message(), "no tracker named 'wandb'; this process runs: jsonl"))
      << e.message();
  trackers.end_training();
  trackers.end_training();  // idempotent
  e = catch_error([&] { trackers.log({{"x", 1}}, 1); });
  EXPECT_TRUE(contains(e.message(), "Trackers::log after end_training")) << e.message();
  // end_training closed the tracker itself too.
  e = catch_error([&] { trackers.get_tracker("jsonl").log({{"x", 1}}, 1); });
  EXPECT_TRUE(contains(e.message(), "jsonl tracker: log after finish()")) << e.message();
}

TEST(Trackers, BadKeyFailsBeforeAnyTrackerLogs) {
  TempDir dir("atomic_log");
  Trackers trackers;
  trackers.init({.log_with = {LoggerType::kJsonl, LoggerType::kCsv},
                 .logging_dir = dir.path(),
                 .project_name = "p"});
  const Error e = catch_error([&] { trackers.log({{"good", 1}, {"time", 2}}, 1); });
  EXPECT_TRUE(contains(e.message(), "log key 'time' is reserved")) << e.message();
  EXPECT_EQ(read_file(dir.path() / "p" / "metrics.jsonl"), "");
  EXPECT_EQ(read_file(dir.path() / "p" / "metrics.csv"), "step,time\n");
}

// ---- custom trackers ------------------------------------------------------------------------

class Recorder : public GeneralTracker {
 public:
  Recorder(std::string name, bool main_only, bool fail = false)
      : name_(std::move(name)), main_only_(main_only), fail_(fail) {}
  std::string name() const override { return name_; }
  bool main_process_only() const override { return main_only_; }
  void store_init_configuration(const HParams& config) override {
    calls.push_back("config " + std::to_string(config.size()));
  }
  void log(const Scalars& values, int64_t step) override {
    calls.push_back("log " + std::to_string(step));
    if (fail_) BRAID_FAIL(kIo, name_, " failed");
  }
  void log_text(std::string_view tag, std::string_view text, int64_t step) override {
    calls.push_back("text " + std::string(tag));
  }
  void finish() override { calls.push_back("finish"); }

  std::vector<std::string> calls;

 private:
  std::string name_;
  bool main_only_;
  bool fail_;
};

TEST(Trackers, CustomTrackersFollowMainProcessOnly) {
  auto everywhere = std::make_shared<Recorder>("everywhere", false);
  auto main_only = std::make_shared<Recorder>("main_only", true);
  Trackers trackers;
  trackers.init({.project_name = "p",
                 .config = HParams{{"a", 1.0}, {"b", 2.0}},
                 .is_main_process = false,
                 .custom = {everywhere, main_only}});
  EXPECT_EQ(trackers.names(), (std::vector<std::string>{"everywhere"}));
  trackers.log({{"x", 1}}, 5);
  trackers.log_text("t", "x", 6);
  EXPECT_EQ(&trackers.get_tracker("everywhere"), everywhere.get());
  trackers.end_training();
  EXPECT_EQ(everywhere->calls, (std::vector<std::string>{"config 2", "log 5", "text t", "finish"}));
  EXPECT_TRUE(main_only->calls.empty());
}

TEST(Trackers, OneFailingTrackerDoesNotStopTheOthers) {
  auto bad = std::make_shared<Recorder>("bad", true, /*fail=*/true);
  auto good = std::make_shared<Recorder>("good", true);
  Trackers trackers;
  trackers.init({.project_name = "p", .custom = {bad, good}});
  const Error e = catch_error([&] { trackers.log({{"x", 1}}, 1); });
  EXPECT_EQ(e.kind(), ErrorKind::kIo);
  EXPECT_EQ(e.message(), "bad failed");
  EXPECT_EQ(good->calls, (std::vector<std::string>{"log 1"}));
}

TEST(Trackers, CustomNamesMustBeUnique) {
  TempDir dir("custom_names");
  Trackers trackers;
  const Error e = catch_error([&] {
    trackers.init({.log_with = {LoggerType::kCsv},
                   .logging_dir = dir.path(),
                   .project_name = "p",
                   .custom = {std::make_shared<Recorder>("csv", true)}});
  });
  EXPECT_TRUE(contains(e.message(), "two trackers are named 'csv'")) << e.message();
  EXPECT_TRUE(dir.entries().empty());
}

}  // namespace
}  // namespace braid::accel
