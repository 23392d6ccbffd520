// SPDX-License-Identifier: Apache-2.0
// Progress reporting for long work on the main process (Accelerate's
// tqdm(main_process_only=True); docs/accelerator.md, "Progress"): training steps, checkpoint
// saves and loads, merge-weights. One line per report, never a carriage-return redraw, so the
// output reads the same on a terminal, in a log file and through braid launch's `[rank N]`
// relay.
//
//   braid::accel::ProgressBar bar = acc.progress_bar({.desc = "train", .total = max_steps,
//                                                     .every = 50, .initial = resumed_step});
//   for (...) { ...; bar.update(1, {{"loss", loss}}); }
//   // train [####................] 120/600  loss 3.2100  1.9 it/s  0:01:03<0:04:12
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace braid::accel {

struct ProgressOptions {
  std::string desc{};
  int64_t total = 0;    // 0: unknown (no bar, no remaining time)
  int64_t every = 1;    // report every `every` updates, and at total
  int64_t initial = 0;  // where a resumed run starts (counted as done, not in the rate)
  std::string unit = "it";
  // Units per update for the rate (e.g. tokens per step: "tok/s"); 1: updates per second.
  double unit_scale = 1.0;
  bool enabled = true;  // false: nothing is reported (the other processes)
  // Where each line goes; empty: standard output, flushed.
  std::function<void(const std::string&)> sink{};
};

// One named task counting to `total`. Thread-compatible (one thread updates it).
class ProgressBar {
 public:
  explicit ProgressBar(ProgressOptions options);
  // Adds n; reports when the count crosses a multiple of `every` or reaches total. `postfix`:
  // values shown after the count (%.4f), e.g. {{"loss", 3.21}}.
  void update(int64_t n = 1, const std::vector<std::pair<std::string, double>>& postfix = {});
  int64_t count() const { return n_; }
  // The line a report would print now.
  std::string line(const std::vector<std::pair<std::string, double>>& postfix = {}) const;

 private:
  ProgressOptions o_;
  int64_t n_ = 0;
  std::chrono::steady_clock::time_point start_;
};

// "h:mm:ss" (or "m:ss" under an hour) for a duration in seconds; "?" when not finite.
std::string format_duration(double seconds);

}  // namespace braid::accel
