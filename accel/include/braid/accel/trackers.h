// SPDX-License-Identifier: Apache-2.0
// Experiment trackers, after Hugging Face Accelerate's tracking.py (docs/trackers.md).
//
// braid builds three file trackers and no network clients:
//   tensorboard  an events.out.tfevents.* file that TensorBoard reads (hand-written TFRecord
//                and protobuf encoding: no TensorFlow, no protobuf library)
//   jsonl        metrics.jsonl, one JSON object per log call
//   csv          metrics.csv, one row per log call, a column per key
// Accelerate's other names (wandb, trackio, comet_ml, mlflow, clearml, dvclive, swanlab) parse,
// and asking for them gives kNotSupported naming the tracker and the ones braid has.
//
//   braid::accel::Trackers trackers;
//   trackers.init({.log_with = {LoggerType::kTensorBoard, LoggerType::kJsonl},
//                  .logging_dir = "runs", .project_name = "gpt-small",
//                  .config = braid::accel::HParams{{"lr", 3e-4}, {"batch", int64_t{32}}},
//                  .is_main_process = rank == 0});
//   trackers.log({{"loss", 2.31}, {"lr", 3e-4}}, step);   // runs/gpt-small/...
//   trackers.end_training();
//
// Only the main process writes; the others validate the same arguments (so every rank fails
// alike) and write nothing. Trackers are not thread-safe: log from one thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace braid::accel {

// ---- LoggerType -------------------------------------------------------------------------

// Accelerate's LoggerType (utils/dataclasses.py) plus braid's two file trackers.
enum class LoggerType : uint8_t {
  kAll,          // "all": every tracker braid has (tensorboard, jsonl, csv)
  kTensorBoard,  // "tensorboard"
  kWandb,        // "wandb"     (not built in braid)
  kTrackio,      // "trackio"   (not built)
  kCometMl,      // "comet_ml"  (not built)
  kMlflow,       // "mlflow"    (not built)
  kClearMl,      // "clearml"   (not built)
  kDvcLive,      // "dvclive"   (not built)
  kSwanLab,      // "swanlab"   (not built)
  kJsonl,        // "jsonl"     (braid)
  kCsv,          // "csv"       (braid)
};

// "all", "tensorboard", "wandb", "trackio", "comet_ml", "mlflow", "clearml", "dvclive",
// "swanlab", "jsonl", "csv": Accelerate's values, which are also each tracker's name().
std::string_view logger_type_name(LoggerType type);
// Parses one of the names above, ASCII case-insensitively ("TensorBoard" works). An unknown
// name throws kInvalidArgument naming it and listing the accepted names.
LoggerType parse_logger_type(std::string_view name);
// Whether this build can create the tracker (kAll counts as built).
bool logger_type_built(LoggerType type);
// Accelerate's get_available_trackers(): {kTensorBoard, kJsonl, kCsv}, what "all" means.
std::vector<LoggerType> available_trackers();

// ---- values ----------------------------------------------------------------------------

// One log call's scalars, by key. Keys follow check_log_key(); values may be any double,
// NaN and infinities included (each format's spelling is in docs/trackers.md).
using Scalars = std::map<std::string, double, std::less<>>;
// A hyperparameter: Accelerate accepts bool, int, float and str (None is left out).
using HParamValue = std::variant<bool, int64_t, double, std::string>;
using HParams = std::map<std::string, HParamValue, std::less<>>;
// Seconds since the Unix epoch, like Python's time.time(). Tests inject a fixed clock.
using WallClock = std::function<double()>;
double system_wall_time();

// The rules every tracker applies to a log key or hyperparameter name, so that a key one
// tracker takes is taken by all: non-empty, valid UTF-8, no control character (U+0000-U+001F,
// U+007F). `what` names the thing in the message ("log key", "hyperparameter name").
// Throws kInvalidArgument naming the key (escaped) and the rule it breaks.
void check_tracker_key(std::string_view key, std::string_view what = "log key");
// The log-key rules plus: not "step" or "time", which JSONL and CSV use for their own fields.
void check_log_key(std::string_view key);

// ---- GeneralTracker ------------------------------------------------------------------------

// Accelerate's GeneralTracker: the plug-in point for a tracker. Members marked (optional)
// have a default that does nothing. A tracker is created ready to log (Accelerate's start()
// happens in the constructor) and is used from one thread.
class GeneralTracker {
 public:
  virtual ~GeneralTracker();

  // The name get_tracker() finds it by: logger_type_name() for braid's trackers.
  virtual std::string name() const = 0;
  // Accelerate's main_process_only: Trackers::init keeps a tracker with `false` on every
  // process (custom trackers only; braid's own write on the main process alone).
  virtual bool main_process_only() const { return true; }
  // Stores the run's configuration (Accelerate's store_init_configuration). (optional)
  virtual void store_init_configuration(const HParams& config) {}
  // Logs one set of scalars at `step`. The file trackers make it durable against a crash of
  // the process before returning (written to the OS, no user-space buffer).
  virtual void log(const Scalars& values, int64_t step) = 0;
  // Logs text under a tag (Accelerate logs str values with add_text). (optional: a tracker
  // with no place for text, like csv, ignores it)
  virtual void log_text(std::string_view tag, std::string_view text, int64_t step) {}
  // Flushes to stable storage and closes (Accelerate's finish). Idempotent; logging after it
  // throws kInvalidArgument. (optional)
  virtual void finish() {}
};

// ---- braid's trackers ------------------------------------------------------------------

// metrics.jsonl in `dir` (created if missing; an existing file is appended to, so a resumed
// run keeps its history). One line per log call:
//   {"step":10,"loss":2.5,"lr":0.0003,"time":1700000000.25}
// keys in sorted order between "step" and "time"; log_text writes {"step":..,"<tag>":"text",
// "time":..}. store_init_configuration replaces hparams.json (atomically) with the config as
// an indented JSON object.
class JsonlTracker final : public GeneralTracker {
 public:
  static constexpr std::string_view kMetricsFile = "metrics.jsonl";
  static constexpr std::string_view kConfigFile = "hparams.json";

  // Throws kIo naming the path when the folder or the file cannot be created or opened.
  explicit JsonlTracker(std::filesystem::path dir, WallClock clock = {});
  ~JsonlTracker() override;

  std::string name() const override { return "jsonl"; }
  void store_init_configuration(const HParams& config) override;
  void log(const Scalars& values, int64_t step) override;
  void log_text(std::string_view tag, std::string_view text, int64_t step) override;
  void finish() override;

  std::filesystem::path path() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// metrics.csv in `dir`: a header `step,time,<key>,...` with every key seen so far in the order
// first seen (the keys new in one call in sorted order), then one row per log call with empty
// cells for keys the call did not have. When a call brings a new key the whole file is
// rewritten atomically with the longer header (old rows gain empty cells), so the file is a
// rectangular CSV at every moment. An existing metrics.csv written by braid is continued.
// Text is not logged (log_text does nothing). store_init_configuration replaces hparams.csv
// (atomically): `key,value` rows.
class CsvTracker final : public GeneralTracker {
 public:
  static constexpr std::string_view kMetricsFile = "metrics.csv";
  static constexpr std::string_view kConfigFile = "hparams.csv";

  // Throws kIo as JsonlTracker does; kCorruptData naming the file when an existing
  // metrics.csv does not start with a `step,time` header.
  explicit CsvTracker(std::filesystem::path dir, WallClock clock = {});
  ~CsvTracker() override;

  std::string name() const override { return "csv"; }
  void store_init_configuration(const HParams& config) override;
  void log(const Scalars& values, int64_t step) override;
  void finish() override;

  std::filesystem::path path() const;
  // The columns after step and time, in file order.
  const std::vector<std::string>& columns() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct TensorBoardOptions {
  // Appended to the event file's name, as SummaryWriter's filename_suffix.
  std::string filename_suffix{};
  WallClock clock{};  // empty: system_wall_time
};

// A TensorBoard event file in `log_dir`, as torch's SummaryWriter(log_dir) writes it:
// events.out.tfevents.<%010d seconds>.<host>.<pid>.<n><suffix>, n counting the writers of
// this process from 0. The first record is Event{wall_time, file_version "brain.Event:2"};
// each log call is one Event{wall_time, step, summary} with one Summary.Value{tag,
// simple_value} per key (float32, as TensorBoard stores scalars). log_text writes the text
// plugin's string tensor; store_init_configuration writes the hparams plugin's
// session_start_info, which TensorBoard's HPARAMS tab shows (Accelerate's add_hparams).
class TensorBoardTracker final : public GeneralTracker {
 public:
  // Throws kIo naming the path when the folder or the file cannot be created.
  explicit TensorBoardTracker(std::filesystem::path log_dir, TensorBoardOptions options = {});
  ~TensorBoardTracker() override;

  std::string name() const override { return "tensorboard"; }
  void store_init_configuration(const HParams& config) override;
  void log(const Scalars& values, int64_t step) override;
  void log_text(std::string_view tag, std::string_view text, int64_t step) override;
  void finish() override;

  const std::filesystem::path& event_file() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---- TFRecord framing (public so that tests and tools can check event files) -------------

// CRC32C (Castagnoli, reflected polynomial 0x82F63B78): crc32c("123456789") == 0xE3069283.
// `crc` continues a previous call (0 to start).
uint32_t crc32c(std::string_view bytes, uint32_t crc = 0);
// TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t masked_crc32c(std::string_view bytes);
// One record: uint64 length (little endian), masked CRC of those 8 bytes, the data, masked
// CRC of the data.
std::string tfrecord_frame(std::string_view data);
// Every record's data in a TFRecord file. Throws kIo when the file cannot be read, and
// kCorruptData naming the file, the record's offset and the fault (truncated, length or data
// checksum mismatch).
std::vector<std::string> read_tfrecords(const std::filesystem::path& file);

// ---- Trackers: Accelerator.init_trackers / log / end_training ------------------------------

struct TrackersOptions {
  // Accelerator(log_with=...): braid names or kAll; duplicates count once. kWandb etc.
  // throw kNotSupported.
  std::vector<LoggerType> log_with{};
  // ProjectConfiguration.logging_dir: required (non-empty) when log_with is not empty.
  std::filesystem::path logging_dir{};
  // init_trackers(project_name): the run's folder under logging_dir (TensorBoard's run name).
  // A relative path without empty, "." or ".." components.
  std::string project_name{};
  // init_trackers(config=...): stored by every tracker when set (Accelerate's None = unset).
  std::optional<HParams> config{};
  // Accelerate's state.is_main_process: only the main process creates files.
  bool is_main_process = true;
  // Custom trackers (Accelerate accepts GeneralTracker instances in log_with), created by the
  // caller on every process; on the others only those with main_process_only() == false stay.
  std::vector<std::shared_ptr<GeneralTracker>> custom{};
  // For TensorBoard's file name and every record's time. Empty: system_wall_time.
  WallClock clock{};
};

// The tracker list an Accelerator holds. Every call validates its arguments on every process
// before any tracker runs, so a bad key fails on all ranks and a partial log never happens.
class Trackers {
 public:
  Trackers();
  // Without end_training, braid's trackers still close their files (their destructors);
  // custom trackers get no finish().
  ~Trackers();
  Trackers(const Trackers&) = delete;
  Trackers& operator=(const Trackers&) = delete;

  // Accelerator.init_trackers: creates the trackers of log_with under
  // logging_dir/project_name (main process only), then stores the config in each.
  // Throws kInvalidArgument for a second init, an empty project_name or logging_dir, a bad
  // config key; kNotSupported naming a tracker braid does not build and listing those it has;
  // kIo from the file system. On a throw no tracker is kept.
  void init(TrackersOptions options);
  bool initialized() const;

  // Accelerator.log: every tracker logs `values` at `step`. kInvalidArgument before init or
  // after end_training, or for a bad key (check_log_key). When one tracker throws, the others
  // still log; the first error is rethrown.
  void log(const Scalars& values, int64_t step);
  // Accelerate logs str values as text: every tracker's log_text.
  void log_text(std::string_view tag, std::string_view text, int64_t step);

  // Accelerator.get_tracker: the tracker with that name(). On a process that keeps no
  // tracker (not the main one), a blank tracker that ignores every call, as Accelerate
  // returns. Otherwise kInvalidArgument naming `name` and the trackers there are.
  GeneralTracker& get_tracker(std::string_view name);
  // The names of the trackers this process runs, in log_with order then custom ones.
  std::vector<std::string> names() const;

  // Accelerator.end_training: finish() on every tracker (all of them, the first error
  // rethrown). Idempotent.
  void end_training();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace braid::accel
