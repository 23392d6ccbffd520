// TensorBoard event files byte for byte: CRC32C against the RFC 3720 / TFRecord vectors, the
// TFRecord framing and its reader's corruption errors, and a whole event file compared with
// records that Python's protobuf serializer and tensorboard's masked_crc32c produced for the
// same events (the generator is in the comment above kExpectedRecords).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "braid/accel/trackers.h"
#include "braid/core/error.h"
#include "braid/core/file_util.h"
#include "tracker_test_util.h"

namespace braid::accel {
namespace {

namespace fs = std::filesystem;
using test::catch_error;
using test::from_hex;
using test::TempDir;

TEST(Crc32c, KnownVectors) {
  EXPECT_EQ(crc32c(""), 0u);
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  // RFC 3720 B.4.
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string up, down;
  for (int i = 0; i < 32; ++i) {
    up += static_cast<char>(i);
    down += static_cast<char>(31 - i);
  }
  EXPECT_EQ(crc32c(up), 0x46DD794Eu);
  EXPECT_EQ(crc32c(down), 0x113FDB5Cu);
  // Continuing a previous call gives the checksum of the concatenation.
  EXPECT_EQ(crc32c("6789", crc32c("12345")), 0xE3069283u);
}

TEST(Crc32c, MaskedAsTensorBoardComputesIt) {
  // tensorboard.compat.tensorflow_stub.pywrap_tensorflow.masked_crc32c
  EXPECT_EQ(masked_crc32c(""), 0xa282ead8u);
  EXPECT_EQ(masked_crc32c("123456789"), 0xc78ab0e5u);
}

TEST(TfRecord, FrameBytes) {
  EXPECT_EQ(tfrecord_frame("abc"), from_hex("0300000000000000b099490e6162636e57f121"));
  EXPECT_EQ(tfrecord_frame(""), from_hex("000000000000000029039807d8ea82a2"));
}

TEST(TfRecord, ReadBackAndCorruption) {
  TempDir dir("tfrecord");
  const fs::path p = dir.path() / "r.tfrecord";
  const std::string good = tfrecord_frame("abc") + tfrecord_frame("") + tfrecord_frame("hello");
  write_file_atomic(p, good);
  EXPECT_EQ(read_tfrecords(p), (std::vector<std::string>{"abc", "", "hello"}));

  std::string bad = good;
  bad[13] ^= 1;  // a data byte of the first record
  write_file_atomic(p, bad);
  Error e = catch_error([&] { read_tfrecords(p); });
  EXPECT_EQ(e.kind(), ErrorKind::kCorruptData);
  EXPECT_NE(e.message().find("offset 0 has a bad data checksum"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("r.tfrecord"), std::string::npos) << e.message();

  bad = good;
  bad[19 + 2] ^= 1;  // the second record's length
  write_file_atomic(p, bad);
  e = catch_error([&] { read_tfrecords(p); });
  EXPECT_EQ(e.kind(), ErrorKind::kCorruptData);
  EXPECT_NE(e.message().find("offset 19 has a bad length checksum"), std::string::npos)
      << e.message();

  write_file_atomic(p, good.substr(0, good.size() - 1));
  e = catch_error([&] { read_tfrecords(p); });
  EXPECT_EQ(e.kind(), ErrorKind::kCorruptData);
  EXPECT_NE(e.message().find("offset 35 declares 5 bytes but the file ends first"),
            std::string::npos)
      << e.message();

  write_file_atomic(p, good + "1234567");
  e = catch_error([&] { read_tfrecords(p); });
  EXPECT_NE(e.message().find("7 bytes left, a header takes 12"), std::string::npos) << e.message();
}

// Generated with Python's protobuf (SerializeToString(deterministic=True)) from
// tensorboard.compat.proto and tensorboard.plugins.hparams.plugin_data_pb2, t = 1700000000.5:
//   Event(wall_time=t, file_version="brain.Event:2")
//   Event(wall_time=t, step=3, summary: acc 1.0, loss 0.5)
//   Event(wall_time=t, step=-2, summary: x 0.1 (float32))
//   Event(wall_time=t, step=0, summary: zero 0.0)
//   Event(wall_time=t, step=4, summary: note, text plugin, DT_STRING [1] 'hi "there"\n')
//   Event(wall_time=t, summary: _hparams_/session_start_info, hparams plugin content
//         HParamsPluginData(session_start_info(hparams {lr: 0.001, name: "gpt", on: true,
//         steps: 100}, start_time_secs=t)), tensor = hparams metadata.NULL_TENSOR)
const char* const kExpectedRecords[] = {
    "0900002040fc54d9411a0d627261696e2e4576656e743a32",
    "0900002040fc54d94110032a190a0a0a03616363150000803f0a0b0a046c6f7373150000003f",
    "0900002040fc54d94110feffffffffffffffff012a0a0a080a017815cdcccc3d",
    "0900002040fc54d9412a0d0a0b0a047a65726f1500000000",
    "0900002040fc54d94110042a290a270a046e6f746542150807120412020801420b686920227468657265220a4a08"
    "0a060a0474657874",
    "0900002040fc54d9412a80010a7e0a1c5f68706172616d735f2f73657373696f6e5f73746172745f696e666f4206"
    "0801120212004a560a540a0768706172616d7312491a470a0f0a026c72120911fca9f1d24d62503f0a0d0a046e61"
    "6d6512051a036770740a080a026f6e120220010a120a05737465707312091100000000000059402900002040fc54"
    "d941",
};

TEST(TensorBoardTracker, FileMatchesProtobufByteForByte) {
  TempDir dir("tb_bytes");
  TensorBoardTracker tb(dir.path() / "run", {.clock = [] { return 1700000000.5; }});
  tb.log({{"loss", 0.5}, {"acc", 1.0}}, 3);
  tb.log({{"x", 0.1}}, -2);
  tb.log({{"zero", 0.0}}, 0);
  tb.log({}, 7);  // nothing to log: no record
  tb.log_text("note", "hi \"there\"\n", 4);
  tb.store_init_configuration(
      {{"lr", 0.001}, {"name", "gpt"}, {"on", true}, {"steps", int64_t{100}}});
  tb.finish();

  std::string expected_file;
  std::vector<std::string> expected;
  for (const char* hex : kExpectedRecords) {
    expected.push_back(from_hex(hex));
    expected_file += tfrecord_frame(expected.back());
  }
  const std::vector<std::string> records = read_tfrecords(tb.event_file());
  ASSERT_EQ(records.size(), expected.size());
  for (size_t i = 0; i < records.size(); ++i) {
    EXPECT_EQ(test::to_hex(records[i]), test::to_hex(expected[i])) << "record " << i;
  }
  EXPECT_EQ(read_file(tb.event_file()), expected_file);
}

TEST(TensorBoardTracker, FileNameAsSummaryWriter) {
  TempDir dir("tb_name");
  TensorBoardTracker a(dir.path(), {.clock = [] { return 1700000123.9; }});
  TensorBoardTracker b(dir.path(), {.filename_suffix = ".v2", .clock = [] { return 5.0; }});
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::string middle = ".";
  middle += host;
  middle += '.';
  middle += std::to_string(::getpid());
  middle += '.';
  // events.out.tfevents.<%010d time>.<host>.<pid>.<n><suffix>, n counting writers
  const std::string a_prefix = "events.out.tfevents.1700000123" + middle;
  const std::string b_prefix = "events.out.tfevents.0000000005" + middle;
  const std::string an = a.event_file().filename().string();
  const std::string bn = b.event_file().filename().string();
  ASSERT_EQ(an.substr(0, a_prefix.size()), a_prefix) << an;
  ASSERT_EQ(bn.substr(0, b_prefix.size()), b_prefix) << bn;
  ASSERT_EQ(bn.substr(bn.size() - 3), ".v2") << bn;
  const std::string a_n = an.substr(a_prefix.size());
  const std::string b_n = bn.substr(b_prefix.size(), bn.size() - 3 - b_prefix.size());
  ASSERT_FALSE(a_n.empty());
  ASSERT_EQ(a_n.find_first_not_of("0123456789"), std::string::npos) << an;
  EXPECT_EQ(b_n, std::to_string(std::stoi(a_n) + 1));  // one counter per process
  EXPECT_EQ(a.event_file().parent_path(), dir.path());
}

TEST(TensorBoardTracker, NonFiniteValuesKeepTheirBits) {
  TempDir dir("tb_nan");
  TensorBoardTracker tb(dir.path(), {.clock = [] { return 1.0; }});
  tb.log({{"a", std::numeric_limits<double>::quiet_NaN()},
          {"b", std::numeric_limits<double>::infinity()},
          {"c", -std::numeric_limits<double>::infinity()},
          {"d", 1e300}},  // past float32: +inf
         1);
  tb.finish();
  const std::string r = read_tfrecords(tb.event_file()).at(1);
  // simple_value is fixed32 (tag 0x15) right after each one-letter tag.
  EXPECT_NE(r.find(from_hex("0a016115") + from_hex("0000c07f")), std::string::npos);
  EXPECT_NE(r.find(from_hex("0a016215") + from_hex("0000807f")), std::string::npos);
  EXPECT_NE(r.find(from_hex("0a016315") + from_hex("000080ff")), std::string::npos);
  EXPECT_NE(r.find(from_hex("0a016415") + from_hex("0000807f")), std::string::npos);
}

TEST(TensorBoardTracker, FinishClosesAndLaterCallsFail) {
  TempDir dir("tb_finish");
  TensorBoardTracker tb(dir.path());
  tb.log({{"loss", 1.0}}, 1);
  tb.finish();
  tb.finish();  // idempotent
  const Error e = catch_error([&] { tb.log({{"loss", 1.0}}, 2); });
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(e.message().find("tensorboard tracker: log after finish()"), std::string::npos)
      << e.message();
  EXPECT_EQ(read_tfrecords(tb.event_file()).size(), 2u);
}

TEST(TensorBoardTracker, BadTagsAndTextAreRefused) {
  TempDir dir("tb_bad");
  TensorBoardTracker tb(dir.path());
  EXPECT_EQ(catch_error([&] { tb.log({{"a\xff", 1.0}}, 1); }).kind(), ErrorKind::kInvalidArgument);
  EXPECT_EQ(catch_error([&] { tb.log_text("t", "bad \xc3", 1); }).kind(),
            ErrorKind::kInvalidArgument);
  tb.finish();
  EXPECT_EQ(read_tfrecords(tb.event_file()).size(), 1u);  // the file_version event only
}

TEST(TensorBoardTracker, UnwritableFolderIsAnIoError) {
  TempDir dir("tb_io");
  write_file_atomic(dir.path() / "file", "x");
  const Error e = catch_error([&] { TensorBoardTracker tb(dir.path() / "file" / "run"); });
  EXPECT_EQ(e.kind(), ErrorKind::kIo);
  EXPECT_NE(e.message().find("file/run"), std::string::npos) << e.message();
}

}  // namespace
}  // namespace braid::accel
