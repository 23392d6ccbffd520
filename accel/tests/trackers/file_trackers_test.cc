// The jsonl and csv trackers: exact file contents with a fixed clock, NaN and infinities,
// escaping and quoting, the CSV header rewrite when keys appear, continuing existing files,
// hparams files, and errors naming the value.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "braid/accel/trackers.h"
#include "braid/core/error.h"
#include "braid/core/file_util.h"
#include "tracker_test_util.h"

namespace braid::accel {
namespace {

namespace fs = std::filesystem;
using test::catch_error;
using test::TempDir;

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

WallClock fixed_clock(double t) {
  return [t] { return t; };
}

void append_plain(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::app) << bytes;
}

// ---- jsonl ----------------------------------------------------------------------------------

TEST(JsonlTracker, OneObjectPerLogCall) {
  TempDir dir("jsonl");
  JsonlTracker t(dir.path() / "run", fixed_clock(1700000000.25));
  EXPECT_EQ(t.path(), dir.path() / "run" / "metrics.jsonl");
  t.log({{"loss", 2.5}, {"lr", 0.0003}}, 10);
  t.log({{"eval/acc", 1.0}, {"big", 1e21}, {"tiny", -1.5e-7}}, -1);
  t.log({}, 11);  // nothing to log: no line
  // Every line is in the file as soon as log returns (no user-space buffer).
  EXPECT_EQ(
      read_file(t.path()),
      "{\"step\":10,\"loss\":2.5,\"lr\":0.0003,\"time\":1700000000.25}\n"
      "{\"step\":-1,\"big\":1e+21,\"eval/acc\":1,\"tiny\":-1.5e-07,\"time\":1700000000.25}\n");
  t.finish();
}

TEST(JsonlTracker, NonFiniteValuesAreStrings) {
  TempDir dir("jsonl_nan");
  JsonlTracker t(dir.path(), fixed_clock(1.5));
  t.log({{"a", kNan}, {"b", kInf}, {"c", -kInf}, {"d", -0.0}}, 0);
  EXPECT_EQ(read_file(t.path()),
            "{\"step\":0,\"a\":\"NaN\",\"b\":\"Infinity\",\"c\":\"-Infinity\",\"d\":-0,"
            "\"time\":1.5}\n");
}

TEST(JsonlTracker, EscapesKeysAndText) {
  TempDir dir("jsonl_esc");
  JsonlTracker t(dir.path(), fixed_clock(2));
  t.log({{"q\"uote\\", 1}, {"損失", 2}}, 1);
  t.log_text("note", "line 1\nline \"2\"\t\x01", 2);
  EXPECT_EQ(read_file(t.path()),
            "{\"step\":1,\"q\\\"uote\\\\\":1,\"損失\":2,\"time\":2}\n"
            "{\"step\":2,\"note\":\"line 1\\nline \\\"2\\\"\\t\\u0001\",\"time\":2}\n");
}

TEST(JsonlTracker, AppendsToAnExistingFile) {
  TempDir dir("jsonl_append");
  {
    JsonlTracker t(dir.path(), fixed_clock(1));
    t.log({{"x", 1}}, 1);
  }
  append_plain(dir.path() / "metrics.jsonl", "{\"step\":2,\"x\"");  // cut short by a crash
  JsonlTracker t(dir.path(), fixed_clock(1));
  t.log({{"x", 3}}, 3);
  EXPECT_EQ(
      read_file(t.path()),
      "{\"step\":1,\"x\":1,\"time\":1}\n{\"step\":2,\"x\"\n{\"step\":3,\"x\":3,\"time\":1}\n");
}

TEST(JsonlTracker, ConfigIsAnIndentedJsonFile) {
  TempDir dir("jsonl_cfg");
  JsonlTracker t(dir.path(), fixed_clock(1));
  t.store_init_configuration({{"lr", 0.001},
                              {"name", "gpt \"small\""},
                              {"shuffle", false},
                              {"steps", int64_t{9007199254740993}},
                              {"clip", kInf}});
  EXPECT_EQ(read_file(dir.path() / "hparams.json"),
            "{\n  \"clip\": \"Infinity\",\n  \"lr\": 0.001,\n  \"name\": \"gpt \\\"small\\\"\",\n"
            "  \"shuffle\": false,\n  \"steps\": 9007199254740993\n}\n");
  t.store_init_configuration({});
  EXPECT_EQ(read_file(dir.path() / "hparams.json"), "{}\n");
}

TEST(JsonlTracker, FinishClosesAndLaterCallsFail) {
  TempDir dir("jsonl_finish");
  JsonlTracker t(dir.path());
  t.finish();
  t.finish();
  const Error e = catch_error([&] { t.log({{"x", 1}}, 1); });
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(e.message().find("jsonl tracker: log after finish()"), std::string::npos)
      << e.message();
  EXPECT_EQ(catch_error([&] { t.store_init_configuration({}); }).kind(),
            ErrorKind::kInvalidArgument);
}

// ---- csv ------------------------------------------------------------------------------------

TEST(CsvTracker, NewKeysRewriteTheHeader) {
  TempDir dir("csv");
  CsvTracker t(dir.path() / "run", fixed_clock(1700000000.25));
  const fs::path p = dir.path() / "run" / "metrics.csv";
  EXPECT_EQ(t.path(), p);
  EXPECT_EQ(read_file(p), "step,time\n");
  t.log({{"loss", 1.5}}, 1);
  EXPECT_EQ(read_file(p), "step,time,loss\n1,1700000000.25,1.5\n");
  t.log({{"loss", 1.25}, {"lr", 0.1}, {"acc", 0.5}}, 2);  // two new keys, in sorted order
  t.log({{"lr", 0.05}}, 3);
  EXPECT_EQ(read_file(p),
            "step,time,loss,acc,lr\n"
            "1,1700000000.25,1.5,,\n"
            "2,1700000000.25,1.25,0.5,0.1\n"
            "3,1700000000.25,,,0.05\n");
  EXPECT_EQ(t.columns(), (std::vector<std::string>{"loss", "acc", "lr"}));
  // No temporary file is left beside it.
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"run", "run/metrics.csv"}));
}

TEST(CsvTracker, QuotesKeysAndSpellsNonFiniteValues) {
  TempDir dir("csv_quote");
  CsvTracker t(dir.path(), fixed_clock(3));
  t.log({{"a,b", kNan}, {"say \"hi\"", kInf}, {"c", -kInf}}, 7);
  EXPECT_EQ(read_file(t.path()), "step,time,\"a,b\",c,\"say \"\"hi\"\"\"\n7,3,nan,-inf,inf\n");
}

TEST(CsvTracker, ContinuesAFileItWrote) {
  TempDir dir("csv_continue");
  {
    CsvTracker t(dir.path(), fixed_clock(1));
    t.log({{"a,b", 1}, {"z", 2}}, 1);
  }
  append_plain(dir.path() / "metrics.csv", "2,1,5");  // a row cut short
  CsvTracker t(dir.path(), fixed_clock(1));
  EXPECT_EQ(t.columns(), (std::vector<std::string>{"a,b", "z"}));
  t.log({{"z", 3}}, 3);
  t.log({{"new", 4}}, 4);
  EXPECT_EQ(read_file(t.path()), "step,time,\"a,b\",z,new\n1,1,1,2,\n2,1,5,\n3,1,,3,\n4,1,,,4\n");
}

TEST(CsvTracker, RefusesAFileWithAnotherHeader) {
  TempDir dir("csv_foreign");
  write_file_atomic(dir.path() / "metrics.csv", "epoch,loss\n1,2\n");
  const Error e = catch_error([&] { CsvTracker t(dir.path()); });
  EXPECT_EQ(e.kind(), ErrorKind::kCorruptData);
  EXPECT_NE(e.message().find("metrics.csv"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("found 'epoch,loss'"), std::string::npos) << e.message();
  EXPECT_EQ(read_file(dir.path() / "metrics.csv"), "epoch,loss\n1,2\n");  // untouched
}

TEST(CsvTracker, TextIsNotLogged) {
  TempDir dir("csv_text");
  CsvTracker t(dir.path(), fixed_clock(1));
  t.log_text("note", "hello", 1);
  EXPECT_EQ(read_file(t.path()), "step,time\n");
}

TEST(CsvTracker, ConfigIsAKeyValueFile) {
  TempDir dir("csv_cfg");
  CsvTracker t(dir.path(), fixed_clock(1));
  t.store_init_configuration(
      {{"lr", 0.001}, {"name", "a,\"b\"\nc"}, {"on", true}, {"steps", int64_t{-3}}});
  EXPECT_EQ(read_file(dir.path() / "hparams.csv"),
            "key,value\nlr,0.001\nname,\"a,\"\"b\"\"\nc\"\non,true\nsteps,-3\n");
}

TEST(CsvTracker, FinishClosesAndLaterCallsFail) {
  TempDir dir("csv_finish");
  CsvTracker t(dir.path());
  t.finish();
  t.finish();
  const Error e = catch_error([&] { t.log({{"x", 1}}, 1); });
  EXPECT_NE(e.message().find("csv tracker: log after finish()"), std::string::npos) << e.message();
}

// ---- keys shared by every tracker -----------------------------------------------------------

TEST(TrackerKeys, BadKeysAreRefusedByEveryTracker) {
  TempDir dir("keys");
  JsonlTracker jsonl(dir.path(), fixed_clock(1));
  CsvTracker csv(dir.path(), fixed_clock(1));
  TensorBoardTracker tb(dir.path(), {.clock = fixed_clock(1)});
  struct Case {
    std::string key;
    std::string fragment;
  };
  const Case cases[] = {
      {"", "log key is empty"},
      {"step", "log key 'step' is reserved"},
      {"time", "log key 'time' is reserved"},
      {"a\nb", "log key 'a\\x0ab' holds a control character"},
      {"del\x7f", "log key 'del\\x7f' holds a control character"},
      {"bad\xff", "log key 'bad\\xff' is not valid UTF-8"},
      {"\xc0\xaf", "is not valid UTF-8"},      // overlong '/'
      {"\xed\xa0\x80", "is not valid UTF-8"},  // a surrogate
  };
  for (GeneralTracker* t : std::initializer_list<GeneralTracker*>{&jsonl, &csv, &tb}) {
    for (const Case& c : cases) {
      const Error e = catch_error([&] { t->log({{"ok", 1}, {c.key, 1}}, 1); });
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << t->name();
      EXPECT_NE(e.message().find(c.fragment), std::string::npos)
          << t->name() << ": " << e.message();
    }
    const Error e = catch_error([&] { t->store_init_configuration({{"", 1.0}}); });
    EXPECT_NE(e.message().find("hyperparameter name is empty"), std::string::npos) << e.message();
  }
  // Nothing was written by the refused calls.
  EXPECT_EQ(read_file(jsonl.path()), "");
  EXPECT_EQ(read_file(csv.path()), "step,time\n");
  tb.finish();
  EXPECT_EQ(read_tfrecords(tb.event_file()).size(), 1u);
  // "step" and "time" are fine as hyperparameter names, and any UTF-8 as a key.
  jsonl.store_init_configuration({{"step", int64_t{1}}});
  jsonl.log({{"損失/train", 1}}, 1);
}

TEST(HParamValue, ConvertsAsExpected) {
  const HParams h = {{"s", "text"}, {"i", 3}, {"d", 2.5}, {"f", 1.5f}, {"b", true}};
  EXPECT_TRUE(std::holds_alternative<std::string>(h.at("s")));
  EXPECT_TRUE(std::holds_alternative<int64_t>(h.at("i")));
  EXPECT_TRUE(std::holds_alternative<double>(h.at("d")));
  EXPECT_TRUE(std::holds_alternative<double>(h.at("f")));
  EXPECT_TRUE(std::holds_alternative<bool>(h.at("b")));
}

}  // namespace
}  // namespace braid::accel
