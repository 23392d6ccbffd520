// Store exchanges of the ProcessGroup front: every member publishes a small text value and
// reads everyone's. Group creation and new_group use it to check that all ranks asked for the
// same thing; BRAID_DEBUG_MODE uses it before every collective (docs/comm.md, "Debug mode").
// These are slow paths (a few store round trips), never on a collective's data path.
#include <cmath>
#include <sstream>

#include "braid/core/environment.h"
#include "braid/core/error.h"
#include "process_group_impl.h"

namespace braid {

std::string int_list_str(const std::vector<int>& values) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < values.size(); ++i) out << (i ? ", " : "") << values[i];
  out << ']';
  return out.str();
}

std::vector<std::string> exchange_values(Store& store, const std::string& key,
                                         const std::string& value, int rank,
                                         const std::vector<int>& global_ranks,
                                         std::chrono::milliseconds timeout,
                                         const std::string& what) {
  const int size = static_cast<int>(global_ranks.size());
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(key + "/" + std::to_string(r));
  store.set(keys[rank], value);
  try {
    store.wait(keys, timeout);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kTimeout) throw;
    std::vector<int> missing;
    for (int r = 0; r < size; ++r) {
      if (!store.check({keys[r]})) missing.push_back(global_ranks[r]);
    }
    BRAID_FAIL(kTimeout, what, ": world ranks ", int_list_str(missing),
               " did not arrive within the timeout of ", timeout.count(), " ms");
  }
  std::vector<std::string> values;
  for (const auto& k : keys) values.push_back(store.get_string(k));
  // The last of the members to read removes the keys, so a long job does not grow the store.
  if (store.add(key + "/read", 1) == size) {
    for (const auto& k : keys) store.delete_key(k);
    store.delete_key(key + "/read");
  }
  return values;
}

void require_same(const std::vector<std::string>& values, const std::vector<int>& global_ranks,
                  const std::string& what, const std::string& topic) {
  bool same = true;
  for (const auto& v : values) same = same && v == values[0];
  if (same) return;
  std::ostringstream report;
  report << what << ": ranks disagree on " << topic << ":";
  for (size_t r = 0; r < values.size(); ++r) {
    report << "\n  rank " << r << " (world rank " << global_ranks[r] << "): " << values[r]
           << (values[r] == values[0] ? "" : "   <- differs from rank 0");
  }
  BRAID_FAIL(kInvalidArgument, report.str());
}

std::chrono::milliseconds resolve_group_timeout(std::optional<std::chrono::milliseconds> option) {
  if (option) {
    BRAID_CHECK(option->count() > 0, kInvalidArgument,
                "ProcessGroupOptions.timeout must be > 0 ms, got ", option->count(), " ms");
    return *option;
  }
  const double seconds = get_env_double("BRAID_TIMEOUT", 300.0);
  BRAID_CHECK(seconds > 0 && seconds < 1e9, kInvalidArgument, "BRAID_TIMEOUT=", seconds,
              ": expected a number of seconds > 0 (and below 1e9)");
  return std::chrono::milliseconds(std::max<int64_t>(1, std::llround(seconds * 1000.0)));
}

void ProcessGroup::Impl::debug_check(const CollectiveDesc& desc, const CallRecord& rec) const {
  if (!debug_mode || !rec.check_across_ranks || size == 1) return;
  std::ostringstream what;
  what << collective_name(desc.kind) << " #" << desc.seq << " on " << describe()
       << " (BRAID_DEBUG_MODE check)";
  const std::string key = "debug/" + std::to_string(desc.seq);
  auto values = exchange_values(*store, key, call_text(desc, rec), rank, global_ranks, desc.timeout,
                                what.str());
  require_same(values, global_ranks, what.str(), "the call");
}

}  // namespace braid
