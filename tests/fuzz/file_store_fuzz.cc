// libFuzzer target: the FileStore log (comm/src/store_file.cc), read from a real file since that
// is the only way in. The input is the file: "BRAIDFS1" then set / delete records. A store opens
// on it (replaying the records, ignoring a torn tail) or refuses it with kCorruptData; an open
// store then appends (add, which parses the counter text, and set), and a second store opened on
// the file must replay the same keys. A counter that is not decimal text is kInvalidArgument.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "braid/comm/store.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace braid;
  using namespace std::chrono_literals;
  static const std::string path = (fuzz::temp_dir() / "store.log").string();
  fuzz::write_file(path, {data, size});
  std::optional<FileStore> store;
  if (!fuzz::parses({ErrorKind::kCorruptData}, [&] { store.emplace(path, 1ms); })) return 0;
  const int64_t before = store->num_keys();
  fuzz::check(before >= 0, "a key count is not negative");
  const bool had_counter = store->check({"counter"});
  fuzz::parses({ErrorKind::kInvalidArgument}, [&] { store->add("counter", 1); });
  store->set("fuzz-key", "v");
  const int64_t after = store->num_keys();
  fuzz::check(after >= before && after <= before + 2 - (had_counter ? 1 : 0),
              "appending adds at most the two keys written");
  FileStore replay(path, 1ms);
  fuzz::check(replay.num_keys() == after, "a second reader replays the same keys");
  fuzz::check(replay.get_string("fuzz-key") == "v", "a second reader sees the last set");
  return 0;
}
