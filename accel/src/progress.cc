// ProgressBar (progress.h): one line per report, tqdm's fields.
#include "braid/accel/progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>

#include "braid/core/error.h"

namespace braid::accel {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<long long>(seconds + 0.5);
  char buf[48];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, (s / 60) % 60, s % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%lld:%02lld", s / 60, s % 60);
  }
  return buf;
}

ProgressBar::ProgressBar(ProgressOptions options)
    : o_(std::move(options)), n_(o_.initial), start_(std::chrono::steady_clock::now()) {
  BRAID_CHECK(o_.total >= 0, kInvalidArgument, "ProgressBar: total ", o_.total, " is negative");
  BRAID_CHECK(o_.every >= 1, kInvalidArgument, "ProgressBar: every must be >= 1, got ", o_.every);
  BRAID_CHECK(o_.initial >= 0 && (o_.total == 0 || o_.initial <= o_.total), kInvalidArgument,
              "ProgressBar: initial ", o_.initial, " is outside [0, ", o_.total, "]");
  BRAID_CHECK(o_.unit_scale > 0, kInvalidArgument, "ProgressBar: unit_scale must be positive");
}

std::string ProgressBar::line(const std::vector<std::pair<std::string, double>>& postfix) const {
  std::string out = o_.desc;
  if (o_.total > 0) {
    constexpr int kWidth = 20;
    const int done = static_cast<int>(kWidth * std::min(n_, o_.total) / o_.total);
    out += (out.empty() ? "[" : " [") + std::string(static_cast<size_t>(done), '#') +
           std::string(static_cast<size_t>(kWidth - done), '.') + "] " + std::to_string(n_) + "/" +
           std::to_string(o_.total);
  } else {
    out += (out.empty() ? "" : " ") + std::to_string(n_);
  }
  char buf[96];
  for (const auto& [name, value] : postfix) {
    std::snprintf(buf, sizeof buf, "  %s %.4f", name.c_str(), value);
    out += buf;
  }
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const int64_t run = n_ - o_.initial;  // done in this run
  if (run > 0 && elapsed > 0) {
    const double rate = double(run) * o_.unit_scale / elapsed;
    std::snprintf(buf, sizeof buf, "  %.*f %s/s", rate < 10 ? 2 : 0, rate, o_.unit.c_str());
    out += buf;
    out += "  " + format_duration(elapsed);
    if (o_.total > 0) {
      out += "<" + format_duration(double(o_.total - n_) * elapsed / double(run));
    }
  }
  return out;
}

void ProgressBar::update(int64_t n, const std::vector<std::pair<std::string, double>>& postfix) {
  BRAID_CHECK(n >= 0, kInvalidArgument, "ProgressBar::update: ", n, " is negative");
  const int64_t before = n_;
  n_ += n;
  if (!o_.enabled || n == 0) return;
  if (o_.total > 0 && before >= o_.total) return;  // reported at total already
  const bool crossed = n_ / o_.every != before / o_.every;
  const bool at_end = o_.total > 0 && n_ >= o_.total && before < o_.total;
  if (!crossed && !at_end) return;
  const std::string text = line(postfix);
  if (o_.sink) {
    o_.sink(text);
  } else {
    std::cout << text << '\n' << std::flush;
  }
}

}  // namespace braid::accel
