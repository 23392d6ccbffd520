// TensorBoardTracker: TensorBoard event files written by hand, without TensorFlow or a
// protobuf library (docs/trackers.md, "TensorBoard").
//
// An event file is a sequence of TFRecords, each holding one serialized tensorboard.Event
// (tensorboard/compat/proto/event.proto). The messages are encoded here in the protobuf wire
// format exactly as protobuf's own serializer would (fields in number order, proto3 defaults
// left out, oneof members always written), so that parsing a record and serializing it again
// gives the same bytes; the interop test checks that.
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "braid/accel/trackers.h"
#include "braid/core/crc32c.h"
#include "braid/core/error.h"
#include "braid/core/file_util.h"
#include "trackers_internal.h"

namespace braid::accel {

namespace fs = std::filesystem;

// ---- CRC32C and TFRecord framing ------------------------------------------------------------

namespace {

void put_le(std::string& out, uint64_t v, int nbytes) {
  for (int i = 0; i < nbytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

uint64_t get_le(std::string_view in, int nbytes) {
  uint64_t v = 0;
  for (int i = 0; i < nbytes; ++i) v |= uint64_t{static_cast<unsigned char>(in[i])} << (8 * i);
  return v;
}

}  // namespace

uint32_t crc32c(std::string_view bytes, uint32_t crc) {
  return braid::crc32c(bytes, crc);  // core/crc32c.h
}

uint32_t masked_crc32c(std::string_view bytes) {
  const uint32_t crc = crc32c(bytes);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string tfrecord_frame(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  put_le(out, data.size(), 8);
  put_le(out, masked_crc32c(out), 4);
  out += data;
  put_le(out, masked_crc32c(data), 4);
  return out;
}

std::vector<std::string> read_tfrecords(const fs::path& file) {
  const std::string bytes = read_file(file);
  const std::string_view all(bytes);
  std::vector<std::string> records;
  size_t at = 0;
  while (at < all.size()) {
    BRAID_CHECK(all.size() - at >= 12, kCorruptData, file, ": the record at offset ", at,
                " is truncated: ", all.size() - at, " bytes left, a header takes 12");
    const uint64_t length = get_le(all.substr(at), 8);
    BRAID_CHECK(get_le(all.substr(at + 8), 4) == masked_crc32c(all.substr(at, 8)), kCorruptData,
                file, ": the record at offset ", at, " has a bad length checksum");
    BRAID_CHECK(length <= all.size() - at - 12 && all.size() - at - 12 - length >= 4, kCorruptData,
                file, ": the record at offset ", at, " declares ", length,
                " bytes but the file ends first");
    const std::string_view data = all.substr(at + 12, length);
    BRAID_CHECK(get_le(all.substr(at + 12 + length), 4) == masked_crc32c(data), kCorruptData, file,
                ": the record at offset ", at, " has a bad data checksum");
    records.emplace_back(data);
    at += 12 + length + 4;
  }
  return records;
}

// ---- protobuf wire format -------------------------------------------------------------------

namespace {

// Appends fields of one message. Nested messages are built in their own Proto and added
// with message(). Callers add fields in field-number order, as protobuf serializes them.
class Proto {
 public:
  void varint_field(int field, uint64_t v) {
    key(field, 0);
    varint(v);
  }
  void int64_field(int field, int64_t v) { varint_field(field, static_cast<uint64_t>(v)); }
  void double_field(int field, double v) {
    key(field, 1);
    uint64_t bits;
    std::memcpy(&bits, &v, 8);
    put_le(out_, bits, 8);
  }
  void float_field(int field, float v) {
    key(field, 5);
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    put_le(out_, bits, 4);
  }
  void bytes_field(int field, std::string_view v) {
    key(field, 2);
    varint(v.size());
    out_ += v;
  }
  void message(int field, const Proto& m) { bytes_field(field, m.out_); }

  // proto3 implicit presence: a field at its default value is not written.
  void double_if_set(int field, double v) {
    uint64_t bits;
    std::memcpy(&bits, &v, 8);
    if (bits != 0) double_field(field, v);
  }
  void int64_if_set(int field, int64_t v) {
    if (v != 0) int64_field(field, v);
  }

  const std::string& bytes() const { return out_; }

 private:
  void key(int field, int wire_type) { varint((static_cast<uint64_t>(field) << 3) | wire_type); }
  void varint(uint64_t v) {
    while (v >= 0x80) {
      out_ += static_cast<char>((v & 0x7f) | 0x80);
      v >>= 7;
    }
    out_ += static_cast<char>(v);
  }

  std::string out_;
};

// Field numbers: tensorboard/compat/proto/{event,summary,tensor,tensor_shape}.proto,
// tensorboard/plugins/hparams/plugin_data.proto, google/protobuf/struct.proto.
namespace event {
constexpr int kWallTime = 1, kStep = 2, kFileVersion = 3, kSummary = 5;
}
namespace summary {
constexpr int kValue = 1;                                              // Summary
constexpr int kTag = 1, kSimpleValue = 2, kTensor = 8, kMetadata = 9;  // Summary.Value
constexpr int kPluginData = 1;                                         // SummaryMetadata
constexpr int kPluginName = 1, kContent = 2;                           // SummaryMetadata.PluginData
}  // namespace summary
namespace tensor {
constexpr int kDtype = 1, kShape = 2, kStringVal = 8;  // TensorProto
constexpr int kDim = 2;                                // TensorShapeProto
constexpr int kDimSize = 1;                            // TensorShapeProto.Dim
constexpr uint64_t kDtFloat = 1, kDtString = 7;        // DataType
}  // namespace tensor
namespace hparams {
constexpr int kSessionStartInfo = 3;                // HParamsPluginData (version 1 = 0, left out)
constexpr int kHParams = 1, kStartTime = 5;         // SessionStartInfo
constexpr int kMapKey = 1, kMapValue = 2;           // map entry
constexpr int kNumber = 2, kString = 3, kBool = 4;  // google.protobuf.Value
constexpr std::string_view kTag = "_hparams_/session_start_info";
}  // namespace hparams

Proto plugin_metadata(std::string_view plugin_name, std::string_view content) {
  Proto data;
  data.bytes_field(summary::kPluginName, plugin_name);
  if (!content.empty()) data.bytes_field(summary::kContent, content);
  Proto metadata;
  metadata.message(summary::kPluginData, data);
  return metadata;
}

// One framed Event{wall_time, step, summary}.
std::string event_record(double wall_time, int64_t step, const Proto& summary_message) {
  Proto e;
  e.double_if_set(event::kWallTime, wall_time);
  e.int64_if_set(event::kStep, step);
  e.message(event::kSummary, summary_message);
  return tfrecord_frame(e.bytes());
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

std::atomic<int> g_writer_count{0};  // SummaryWriter's _global_uid: writers of this process

}  // namespace

// ---- TensorBoardTracker ---------------------------------------------------------------------

struct TensorBoardTracker::Impl {
  fs::path file_path;
  detail::AppendFile file;
  WallClock clock;
  bool finished = false;
};

TensorBoardTracker::TensorBoardTracker(fs::path log_dir, TensorBoardOptions options)
    : impl_(std::make_unique<Impl>()) {
  std::error_code ec;
  fs::create_directories(log_dir, ec);
  BRAID_CHECK(!ec, kIo, "create the tensorboard folder ", log_dir, ": ", ec.message());
  impl_->clock = detail::clock_or_default(std::move(options.clock));
  const double now = impl_->clock();
  // "events.out.tfevents.%010d.%s.%s.%s" % (time.time(), host, pid, uid) + suffix
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%010lld", static_cast<long long>(now));
  const std::string name = "events.out.tfevents." + std::string(seconds) + "." + host_name() + "." +
                           std::to_string(::getpid()) + "." +
                           std::to_string(g_writer_count.fetch_add(1)) + options.filename_suffix;
  impl_->file_path = log_dir / name;
  impl_->file = detail::AppendFile(impl_->file_path, detail::OpenMode::kExclusive);

  Proto first;
  first.double_if_set(event::kWallTime, now);
  first.bytes_field(event::kFileVersion, "brain.Event:2");
  impl_->file.append(tfrecord_frame(first.bytes()));
}

TensorBoardTracker::~TensorBoardTracker() = default;

const fs::path& TensorBoardTracker::event_file() const {
  return impl_->file_path;
}

void TensorBoardTracker::log(const Scalars& values, int64_t step) {
  detail::check_not_finished(impl_->finished, "tensorboard", "log");
  for (const auto& kv : values) check_log_key(kv.first);
  if (values.empty()) return;
  Proto s;
  for (const auto& [key, value] : values) {
    Proto v;
    v.bytes_field(summary::kTag, key);
    v.float_field(summary::kSimpleValue, static_cast<float>(value));
    s.message(summary::kValue, v);
  }
  impl_->file.append(event_record(impl_->clock(), step, s));
}

void TensorBoardTracker::log_text(std::string_view tag, std::string_view text, int64_t step) {
  detail::check_not_finished(impl_->finished, "tensorboard", "log_text");
  check_log_key(tag);
  detail::check_utf8(text, "text logged under '" + std::string(tag) + "'");
  // As SummaryWriter.add_text: a DT_STRING tensor of shape [1], text plugin metadata.
  Proto dim;
  dim.varint_field(tensor::kDimSize, 1);
  Proto shape;
  shape.message(tensor::kDim, dim);
  Proto t;
  t.varint_field(tensor::kDtype, tensor::kDtString);
  t.message(tensor::kShape, shape);
  t.bytes_field(tensor::kStringVal, text);
  Proto v;
  v.bytes_field(summary::kTag, tag);
  v.message(summary::kTensor, t);
  v.message(summary::kMetadata, plugin_metadata("text", ""));
  Proto s;
  s.message(summary::kValue, v);
  impl_->file.append(event_record(impl_->clock(), step, s));
}

void TensorBoardTracker::store_init_configuration(const HParams& config) {
  detail::check_not_finished(impl_->finished, "tensorboard", "store_init_configuration");
  detail::check_hparams(config);
  const double now = impl_->clock();
  // HParamsPluginData{session_start_info{hparams, start_time_secs}}, as the hparams plugin's
  // own summary writer (tensorboard.plugins.hparams.summary) builds it.
  Proto info;
  for (const auto& [key, value] : config) {
    Proto v;
    std::visit(
        [&v](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, bool>) {
            v.varint_field(hparams::kBool, x ? 1 : 0);
          } else if constexpr (std::is_same_v<T, std::string>) {
            v.bytes_field(hparams::kString, x);
          } else {
            v.double_field(hparams::kNumber, static_cast<double>(x));
          }
        },
        value);
    Proto entry;
    entry.bytes_field(hparams::kMapKey, key);
    entry.message(hparams::kMapValue, v);
    info.message(hparams::kHParams, entry);
  }
  info.double_if_set(hparams::kStartTime, now);
  Proto content;
  content.message(hparams::kSessionStartInfo, info);

  // The plugin's NULL_TENSOR: DT_FLOAT of shape [0].
  Proto dim;
  Proto shape;
  shape.message(tensor::kDim, dim);
  Proto null_tensor;
  null_tensor.varint_field(tensor::kDtype, tensor::kDtFloat);
  null_tensor.message(tensor::kShape, shape);

  Proto v;
  v.bytes_field(summary::kTag, hparams::kTag);
  v.message(summary::kTensor, null_tensor);
  v.message(summary::kMetadata, plugin_metadata("hparams", content.bytes()));
  Proto s;
  s.message(summary::kValue, v);
  impl_->file.append(event_record(now, 0, s));
}

void TensorBoardTracker::finish() {
  impl_->finished = true;
  impl_->file.close();
}

}  // namespace braid::accel
