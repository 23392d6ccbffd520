// Store's non-virtual front (argument checks shared by every implementation), the helpers in
// store_detail.h, InMemoryStore and PrefixStore.
#include "braid/comm/store.h"

#include <algorithm>
#include <charconv>
#include <condition_variable>
#include <map>
#include <mutex>

#include "braid/core/error.h"
#include "store_detail.h"

namespace braid {

namespace store_detail {

std::string format_keys(const std::vector<std::string>& keys) {
  constexpr size_t kShown = 16;
  std::string out = "[";
  for (size_t i = 0; i < keys.size() && i < kShown; ++i) {
    if (i > 0) out += ", ";
    out += keys[i];
  }
  if (keys.size() > kShown) out += ", ... (" + std::to_string(keys.size() - kShown) + " more)";
  return out + "]";
}

void throw_wait_timeout(std::string_view store, const std::vector<std::string>& missing,
                        const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  BRAID_FAIL(kTimeout, store, ": wait timed out after ", timeout.count(), " ms; missing keys ",
             format_keys(missing), " of ", format_keys(keys));
}

int64_t parse_counter(std::string_view key, std::span<const uint8_t> value) {
  std::string_view text(reinterpret_cast<const char*>(value.data()), value.size());
  int64_t parsed = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), parsed);
  BRAID_CHECK(!text.empty() && ec == std::errc() && end == text.data() + text.size(),
              kInvalidArgument, "store add(): key '", key, "' holds ", value.size(),
              " bytes that are not a base-10 int64 (", text.substr(0, 32),
              "); add() needs a key it created or one set to integer text");
  return parsed;
}

std::vector<uint8_t> format_counter(int64_t value) {
  std::string text = std::to_string(value);
  return {text.begin(), text.end()};
}

int64_t checked_add(std::string_view key, int64_t current, int64_t delta) {
  int64_t sum = 0;
  BRAID_CHECK(!__builtin_add_overflow(current, delta, &sum), kOutOfRange, "store add(): key '", key,
              "' holds ", current, "; adding ", delta, " overflows int64");
  return sum;
}

}  // namespace store_detail

namespace {

void check_key(std::string_view op, std::string_view key) {
  BRAID_CHECK(!key.empty(), kInvalidArgument, "store ", op, "(): the key is empty");
  BRAID_CHECK(key.size() <= Store::kMaxKeyBytes, kInvalidArgument, "store ", op, "(): key '",
              key.substr(0, 64), "...' is ", key.size(), " bytes; the limit is ",
              Store::kMaxKeyBytes);
}

void check_value(std::string_view op, std::string_view key, size_t size) {
  BRAID_CHECK(size <= Store::kMaxValueBytes, kInvalidArgument, "store ", op, "(): the value for '",
              key, "' is ", size, " bytes; the limit is ", Store::kMaxValueBytes);
}

void check_keys(std::string_view op, const std::vector<std::string>& keys) {
  BRAID_CHECK(keys.size() <= Store::kMaxKeysPerRequest, kInvalidArgument, "store ", op,
              "(): ", keys.size(), " keys in one call; the limit is ", Store::kMaxKeysPerRequest);
  for (const auto& key : keys) check_key(op, key);
}

void check_timeout(std::string_view op, std::chrono::milliseconds timeout) {
  BRAID_CHECK(timeout.count() >= 0, kInvalidArgument, "store ", op, "(): timeout ", timeout.count(),
              " ms is negative; expected >= 0");
}

}  // namespace

Store::Store(std::chrono::milliseconds timeout) : timeout_ms_(timeout.count()) {
  check_timeout("constructor", timeout);
}
Store::~Store() = default;

void Store::set_timeout(std::chrono::milliseconds timeout) {
  check_timeout("set_timeout", timeout);
  timeout_ms_ = timeout.count();
}

void Store::set(std::string_view key, std::span<const uint8_t> value) {
  check_key("set", key);
  check_value("set", key, value.size());
  do_set(key, value);
}
void Store::set(std::string_view key, std::string_view value) {
  set(key, store_detail::as_bytes(value));
}

std::vector<uint8_t> Store::get(std::string_view key) {
  return get(key, timeout());
}
std::vector<uint8_t> Store::get(std::string_view key, std::chrono::milliseconds timeout) {
  check_key("get", key);
  check_timeout("get", timeout);
  return do_get(key, timeout);
}
std::string Store::get_string(std::string_view key) {
  auto bytes = get(key);
  return {bytes.begin(), bytes.end()};
}

int64_t Store::add(std::string_view key, int64_t delta) {
  check_key("add", key);
  return do_add(key, delta);
}

std::vector<uint8_t> Store::compare_set(std::string_view key, std::span<const uint8_t> expected,
                                        std::span<const uint8_t> desired) {
  check_key("compare_set", key);
  check_value("compare_set", key, expected.size());
  check_value("compare_set", key, desired.size());
  return do_compare_set(key, expected, desired);
}
std::string Store::compare_set(std::string_view key, std::string_view expected,
                               std::string_view desired) {
  auto bytes = compare_set(key, store_detail::as_bytes(expected), store_detail::as_bytes(desired));
  return {bytes.begin(), bytes.end()};
}

bool Store::check(const std::vector<std::string>& keys) {
  check_keys("check", keys);
  return keys.empty() || do_check(keys);
}

void Store::wait(const std::vector<std::string>& keys) {
  wait(keys, timeout());
}
void Store::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  check_keys("wait", keys);
  check_timeout("wait", timeout);
  if (!keys.empty()) do_wait(keys, timeout);
}

bool Store::delete_key(std::string_view key) {
  check_key("delete_key", key);
  return do_delete_key(key);
}

int64_t Store::num_keys() {
  return do_num_keys();
}

// ---------------------------------------------------------------------------------------------
// InMemoryStore: one map under one mutex; every change notifies one condition variable, and
// waiters re-check their keys (stores hold few waiters, so one shared condition is enough).

struct InMemoryStore::State {
  std::mutex mutex;
  std::condition_variable changed;
  std::map<std::string, std::vector<uint8_t>, std::less<>> data;

  std::vector<std::string> missing(const std::vector<std::string>& keys) const {
    std::vector<std::string> out;
    for (const auto& key : keys) {
      if (!data.contains(key)) out.push_back(key);
    }
    return out;
  }
  // Waits until `keys` all exist; called with `lock` held.
  void wait_locked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                   std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    bool ok = changed.wait_until(lock, deadline, [&] { return missing(keys).empty(); });
    if (!ok) store_detail::throw_wait_timeout("InMemoryStore", missing(keys), keys, timeout);
  }
};

InMemoryStore::InMemoryStore(std::chrono::milliseconds timeout)
    : Store(timeout), state_(std::make_unique<State>()) {}
InMemoryStore::~InMemoryStore() = default;

void InMemoryStore::do_set(std::string_view key, std::span<const uint8_t> value) {
  {
    std::lock_guard lock(state_->mutex);
    state_->data.insert_or_assign(std::string(key),
                                  std::vector<uint8_t>(value.begin(), value.end()));
  }
  state_->changed.notify_all();
}

std::vector<uint8_t> InMemoryStore::do_get(std::string_view key,
                                           std::chrono::milliseconds timeout) {
  std::unique_lock lock(state_->mutex);
  state_->wait_locked(lock, {std::string(key)}, timeout);
  return state_->data.find(key)->second;
}

int64_t InMemoryStore::do_add(std::string_view key, int64_t delta) {
  int64_t next = 0;
  {
    std::lock_guard lock(state_->mutex);
    auto it = state_->data.find(key);
    int64_t current = it == state_->data.end() ? 0 : store_detail::parse_counter(key, it->second);
    next = store_detail::checked_add(key, current, delta);
    state_->data.insert_or_assign(std::string(key), store_detail::format_counter(next));
  }
  state_->changed.notify_all();
  return next;
}

std::vector<uint8_t> InMemoryStore::do_compare_set(std::string_view key,
                                                   std::span<const uint8_t> expected,
                                                   std::span<const uint8_t> desired) {
  std::vector<uint8_t> result;
  {
    std::lock_guard lock(state_->mutex);
    auto it = state_->data.find(key);
    bool swap =
        it == state_->data.end() ? expected.empty() : std::ranges::equal(it->second, expected);
    if (!swap) return it == state_->data.end() ? std::vector<uint8_t>{} : it->second;
    result.assign(desired.begin(), desired.end());
    state_->data.insert_or_assign(std::string(key), result);
  }
  state_->changed.notify_all();
  return result;
}

bool InMemoryStore::do_check(const std::vector<std::string>& keys) {
  std::lock_guard lock(state_->mutex);
  return state_->missing(keys).empty();
}

void InMemoryStore::do_wait(const std::vector<std::string>& keys,
                            std::chrono::milliseconds timeout) {
  std::unique_lock lock(state_->mutex);
  state_->wait_locked(lock, keys, timeout);
}

bool InMemoryStore::do_delete_key(std::string_view key) {
  std::lock_guard lock(state_->mutex);
  auto it = state_->data.find(key);
  if (it == state_->data.end()) return false;
  state_->data.erase(it);
  return true;
}

int64_t InMemoryStore::do_num_keys() {
  std::lock_guard lock(state_->mutex);
  return static_cast<int64_t>(state_->data.size());
}

// ---------------------------------------------------------------------------------------------
// PrefixStore

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> store)
    : Store(store ? store->timeout() : kDefaultTimeout),
      prefix_(std::move(prefix)),
      store_(std::move(store)) {
  BRAID_CHECK(store_ != nullptr, kInvalidArgument, "PrefixStore('", prefix_,
              "'): the underlying store is null");
  BRAID_CHECK(!prefix_.empty(), kInvalidArgument, "PrefixStore: the prefix is empty");
}
PrefixStore::~PrefixStore() = default;

std::string PrefixStore::full_key(std::string_view key) const {
  std::string out;
  out.reserve(prefix_.size() + 1 + key.size());
  out.append(prefix_).append("/").append(key);
  return out;
}

std::vector<std::string> PrefixStore::full_keys(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& key : keys) out.push_back(full_key(key));
  return out;
}

void PrefixStore::do_set(std::string_view key, std::span<const uint8_t> value) {
  store_->set(full_key(key), value);
}
std::vector<uint8_t> PrefixStore::do_get(std::string_view key, std::chrono::milliseconds timeout) {
  return store_->get(full_key(key), timeout);
}
int64_t PrefixStore::do_add(std::string_view key, int64_t delta) {
  return store_->add(full_key(key), delta);
}
std::vector<uint8_t> PrefixStore::do_compare_set(std::string_view key,
                                                 std::span<const uint8_t> expected,
                                                 std::span<const uint8_t> desired) {
  return store_->compare_set(full_key(key), expected, desired);
}
bool PrefixStore::do_check(const std::vector<std::string>& keys) {
  return store_->check(full_keys(keys));
}
void PrefixStore::do_wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  store_->wait(full_keys(keys), timeout);
}
bool PrefixStore::do_delete_key(std::string_view key) {
  return store_->delete_key(full_key(key));
}
int64_t PrefixStore::do_num_keys() {
  return store_->num_keys();
}

}  // namespace braid
