// Generator draws, state bytes and the process-wide default generators (core/rng.h).
// Which stream words each draw reads is fixed by docs/rng.md; a GPU kernel must follow the
// same table, so any change here is a change of the documented mapping (and the version).
#include "braid/core/rng.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <numbers>
#include <unordered_map>
#include <utility>

#include "braid/core/environment.h"
#include "braid/core/error.h"

namespace braid {
namespace {

constexpr char kStateMagic[4] = {'B', 'R', 'N', 'G'};

// Calls fn(item, words) for items [0, n), item i reading the kWords stream words
// starting at offset + i * kWords. offset is a multiple of 4, so items never straddle blocks.
template <int kWords, typename Fn>
void for_each_item(uint64_t seed, uint64_t offset, int64_t n, Fn&& fn) {
  static_assert(kWords == 1 || kWords == 2 || kWords == 4);
  constexpr int64_t kPerBlock = 4 / kWords;
  const PhiloxKey key = philox_key(seed);
  uint64_t block = offset / 4;
  for (int64_t first = 0; first < n; first += kPerBlock, ++block) {
    const PhiloxCounter w = philox4x32_10(philox_counter(block), key);
    const int64_t last = std::min(n, first + kPerBlock);
    for (int64_t i = first; i < last; ++i) fn(i, &w[static_cast<size_t>(i - first) * kWords]);
  }
}

uint64_t join64(const uint32_t* w) {
  return uint64_t{w[0]} | (uint64_t{w[1]} << 32);
}

// [0, 1) from the top 24 bits of a word / the top 53 bits of two words.
float unit_f32(uint32_t w) {
  return static_cast<float>(w >> 8) * 0x1.0p-24f;
}
double unit_f64(const uint32_t* w) {
  return static_cast<double>(join64(w) >> 11) * 0x1.0p-53;
}

// Box-Muller in double: u1 in (0, 1] (so the log is finite), u2 in [0, 1).
std::pair<double, double> box_muller(double u1, double u2) {
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double theta = 2.0 * std::numbers::pi * u2;
  return {r * std::cos(theta), r * std::sin(theta)};
}

void check_fill(const void* out, int64_t n, const char* what) {
  BRAID_CHECK(n >= 0, kInvalidArgument, what, ": element count ", n, " must be >= 0");
  BRAID_CHECK(out != nullptr || n == 0, kInvalidArgument, what, ": output pointer is null for ", n,
              " elements");
}

template <typename T>
void check_normal_args(T mean, T std, const char* what) {
  BRAID_CHECK(std::isfinite(mean), kInvalidArgument, what, ": mean ", mean, " must be finite");
  BRAID_CHECK(std::isfinite(std) && std >= 0, kInvalidArgument, what, ": std ", std,
              " must be finite and >= 0");
}

uint64_t checked_range(int64_t low, int64_t high, const char* what) {
  BRAID_CHECK(low < high, kInvalidArgument, what, ": empty range [", low, ", ", high,
              "): low must be < high");
  return static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
}

void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t get_le(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

}  // namespace

// ---- stream position ---------------------------------------------------------------------

void Generator::manual_seed(uint64_t seed) {
  std::lock_guard lock(mu_);
  seed_ = seed;
  offset_ = 0;
}

uint64_t Generator::seed() const {
  std::lock_guard lock(mu_);
  return seed_;
}

uint64_t Generator::offset() const {
  std::lock_guard lock(mu_);
  return offset_;
}

void Generator::set_offset(uint64_t offset) {
  BRAID_CHECK(offset % 4 == 0, kInvalidArgument, "Generator::set_offset: offset ", offset,
              " must be a multiple of 4 (a whole Philox block)");
  std::lock_guard lock(mu_);
  offset_ = offset;
}

Generator::Range Generator::reserve(uint64_t items, uint64_t words_per_item, const char* what) {
  std::lock_guard lock(mu_);
  const uint64_t room = std::numeric_limits<uint64_t>::max() - offset_ - 3;
  BRAID_CHECK(items <= room / words_per_item, kOutOfRange, what, ": ", items,
              " elements at offset ", offset_, " would run past the end of the 2^64-word stream");
  const Range range{seed_, offset_};
  offset_ += (items * words_per_item + 3) / 4 * 4;
  return range;
}

// ---- draws -------------------------------------------------------------------------------

void Generator::fill_uniform(float* out, int64_t n) {
  check_fill(out, n, "Generator::fill_uniform(f32)");
  const Range r = reserve(n, 1, "Generator::fill_uniform(f32)");
  for_each_item<1>(r.seed, r.offset, n,
                   [&](int64_t i, const uint32_t* w) { out[i] = unit_f32(w[0]); });
}

void Generator::fill_uniform(double* out, int64_t n) {
  check_fill(out, n, "Generator::fill_uniform(f64)");
  const Range r = reserve(n, 2, "Generator::fill_uniform(f64)");
  for_each_item<2>(r.seed, r.offset, n,
                   [&](int64_t i, const uint32_t* w) { out[i] = unit_f64(w); });
}

void Generator::fill_normal(float* out, int64_t n, float mean, float std) {
  check_fill(out, n, "Generator::fill_normal(f32)");
  check_normal_args(mean, std, "Generator::fill_normal(f32)");
  const int64_t pairs = (n + 1) / 2;
  const Range r = reserve(pairs, 2, "Generator::fill_normal(f32)");
  for_each_item<2>(r.seed, r.offset, pairs, [&](int64_t j, const uint32_t* w) {
    const double u1 = (static_cast<double>(w[0] >> 8) + 1.0) * 0x1.0p-24;
    const auto [z0, z1] = box_muller(u1, unit_f32(w[1]));
    out[2 * j] = static_cast<float>(mean + std * z0);
    if (2 * j + 1 < n) out[2 * j + 1] = static_cast<float>(mean + std * z1);
  });
}

void Generator::fill_normal(double* out, int64_t n, double mean, double std) {
  check_fill(out, n, "Generator::fill_normal(f64)");
  check_normal_args(mean, std, "Generator::fill_normal(f64)");
  const int64_t pairs = (n + 1) / 2;
  const Range r = reserve(pairs, 4, "Generator::fill_normal(f64)");
  for_each_item<4>(r.seed, r.offset, pairs, [&](int64_t j, const uint32_t* w) {
    const double u1 = (static_cast<double>(join64(w) >> 11) + 1.0) * 0x1.0p-53;
    const auto [z0, z1] = box_muller(u1, unit_f64(w + 2));
    out[2 * j] = mean + std * z0;
    if (2 * j + 1 < n) out[2 * j + 1] = mean + std * z1;
  });
}

void Generator::fill_randint(int64_t* out, int64_t n, int64_t low, int64_t high) {
  check_fill(out, n, "Generator::fill_randint");
  const uint64_t range = checked_range(low, high, "Generator::fill_randint");
  const Range r = reserve(n, 2, "Generator::fill_randint");
  for_each_item<2>(r.seed, r.offset, n, [&](int64_t i, const uint32_t* w) {
    out[i] = static_cast<int64_t>(static_cast<uint64_t>(low) + join64(w) % range);
  });
}

// Sorting by random 64-bit keys (ties broken by index) rather than Fisher-Yates: every key
// is independent of the others, so a GPU computes them in parallel and sorts the same way.
void Generator::fill_randperm(int64_t* out, int64_t n) {
  check_fill(out, n, "Generator::fill_randperm");
  const Range r = reserve(n, 2, "Generator::fill_randperm");
  std::vector<std::pair<uint64_t, int64_t>> keyed(static_cast<size_t>(n));
  for_each_item<2>(r.seed, r.offset, n, [&](int64_t i, const uint32_t* w) {
    keyed[i] = {join64(w), i};
  });
  std::sort(keyed.begin(), keyed.end());
  for (int64_t i = 0; i < n; ++i) out[i] = keyed[i].second;
}

float Generator::uniform() {
  float v;
  fill_uniform(&v, 1);
  return v;
}

double Generator::uniform_double() {
  double v;
  fill_uniform(&v, 1);
  return v;
}

float Generator::normal(float mean, float std) {
  float v;
  fill_normal(&v, 1, mean, std);
  return v;
}

double Generator::normal_double(double mean, double std) {
  double v;
  fill_normal(&v, 1, mean, std);
  return v;
}

int64_t Generator::randint(int64_t low, int64_t high) {
  int64_t v;
  fill_randint(&v, 1, low, high);
  return v;
}

std::vector<int64_t> Generator::randperm(int64_t n) {
  BRAID_CHECK(n >= 0, kInvalidArgument, "Generator::randperm: n ", n, " must be >= 0");
  std::vector<int64_t> perm(static_cast<size_t>(n));
  fill_randperm(perm.data(), n);
  return perm;
}

// ---- state -------------------------------------------------------------------------------

std::vector<uint8_t> Generator::get_state() const {
  std::vector<uint8_t> bytes(kStateBytes);
  std::memcpy(bytes.data(), kStateMagic, 4);
  put_u32(bytes.data() + 4, kStateVersion);
  std::lock_guard lock(mu_);
  put_u64(bytes.data() + 8, seed_);
  put_u64(bytes.data() + 16, offset_);
  return bytes;
}

void Generator::set_state(std::span<const uint8_t> bytes) {
  BRAID_CHECK(bytes.size() == kStateBytes, kCorruptData, "Generator::set_state: state is ",
              bytes.size(), " bytes, expected ", kStateBytes);
  BRAID_CHECK(std::memcmp(bytes.data(), kStateMagic, 4) == 0, kCorruptData,
              "Generator::set_state: state does not start with \"BRNG\"");
  const uint64_t version = get_le(bytes.data() + 4, 4);
  BRAID_CHECK(version == kStateVersion, kCorruptData, "Generator::set_state: state version ",
              version, ", expected ", kStateVersion);
  const uint64_t offset = get_le(bytes.data() + 16, 8);
  BRAID_CHECK(offset % 4 == 0, kCorruptData, "Generator::set_state: offset ", offset,
              " is not a multiple of 4");
  std::lock_guard lock(mu_);
  seed_ = get_le(bytes.data() + 8, 8);
  offset_ = offset;
}

// ---- process-wide ------------------------------------------------------------------------

namespace {

struct DefaultGenerators {
  std::mutex mu;
  uint64_t seed = 0;  // of the last set_seed; new generators start from it
  std::unordered_map<Device, std::unique_ptr<Generator>> by_device;
};

DefaultGenerators& defaults() {
  static DefaultGenerators* d = new DefaultGenerators;  // never destroyed: see rng.h
  return *d;
}

std::atomic<bool> g_deterministic{false};

// Accelerate's process index: RANK as torchrun sets it, 0 when unset.
uint64_t process_index() {
  const int64_t rank = get_env_int("RANK", 0);
  BRAID_CHECK(rank >= 0, kInvalidArgument,
              "set_seed(device_specific): environment variable RANK=", rank, " must be >= 0");
  return static_cast<uint64_t>(rank);
}

}  // namespace

Generator& default_generator(Device device) {
  BRAID_CHECK(device.index >= 0, kInvalidArgument, "default_generator: device ", device,
              " has a negative index");
  DefaultGenerators& d = defaults();
  std::lock_guard lock(d.mu);
  auto& slot = d.by_device[device];
  if (!slot) slot = std::make_unique<Generator>(d.seed);
  return *slot;
}

void set_seed(uint64_t seed, bool device_specific, bool deterministic) {
  if (device_specific) seed += process_index();  // wraps modulo 2^64, like any seed
  DefaultGenerators& d = defaults();
  {
    std::lock_guard lock(d.mu);
    d.seed = seed;
    for (auto& [device, gen] : d.by_device) gen->manual_seed(seed);
  }
  if (deterministic) set_deterministic_algorithms(true);
}

bool deterministic_algorithms() {
  return g_deterministic.load(std::memory_order_relaxed);
}
void set_deterministic_algorithms(bool on) {
  g_deterministic.store(on, std::memory_order_relaxed);
}

}  // namespace braid
