// Writes one run with every braid tracker (Trackers, LoggerType::kAll) into <dir>/run and
// prints, as JSON on stdout, what it logged: check_tensorboard.py reads the files back with
// tensorboard's own readers, Python's json and csv modules, and compares.
//
//   braid_tracker_interop_tool <dir>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "braid/accel/trackers.h"
#include "braid/core/error.h"

namespace {

using braid::accel::HParams;
using braid::accel::LoggerType;
using braid::accel::Scalars;
using braid::accel::Trackers;

nlohmann::json number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <dir>\n", argv[0]);
    return 2;
  }
  try {
    const HParams config = {{"lr", 0.001},
                            {"batch_size", int64_t{32}},
                            {"model", "gpt-small"},
                            {"shuffle", true},
                            {"ratio", 0.25}};
    Trackers trackers;
    trackers.init({.log_with = {LoggerType::kAll},
                   .logging_dir = argv[1],
                   .project_name = "run",
                   .config = config});

    nlohmann::json scalars = nlohmann::json::array();
    nlohmann::json texts = nlohmann::json::array();
    auto log = [&](const Scalars& values, int64_t step) {
      trackers.log(values, step);
      nlohmann::json row = {{"step", step}};
      for (const auto& [k, v] : values) row["values"][k] = number(v);
      scalars.push_back(row);
    };
    auto log_text = [&](const std::string& tag, const std::string& text, int64_t step) {
      trackers.log_text(tag, text, step);
      texts.push_back({{"tag", tag}, {"text", text}, {"step", step}});
    };

    for (int64_t step = 0; step < 5; ++step) {
      Scalars values = {{"train/loss", 2.0 / static_cast<double>(step + 1) + 0.1},
                        {"lr", 0.001 * static_cast<double>(step + 1)}};
      if (step % 2 == 0 && step > 0) values["eval/acc"] = 0.5 + 0.1 * static_cast<double>(step);
      log(values, step);
      if (step == 1) log_text("notes", "hello **markdown**\nline 2 \"quoted\" ✓", step);
    }
    const double inf = std::numeric_limits<double>::infinity();
    log({{"special/nan", std::numeric_limits<double>::quiet_NaN()},
         {"special/inf", inf},
         {"special/neginf", -inf},
         {"special/big", 1e300},
         {"special/tiny", 1e-45},
         {"special/third", 1.0 / 3.0}},
        5);
    log({{"neg_step", -1.5}}, -3);
    log({{"large_step", 7.0}}, int64_t{1} << 40);
    log({{"损失/训练", 1.25}, {"a,b \"c\"", 2.5}}, 6);
    trackers.end_training();

    nlohmann::json cfg;
    for (const auto& [k, v] : config) {
      std::visit([&cfg, &k](const auto& x) { cfg[k] = x; }, v);
    }
    std::cout << nlohmann::json{{"run", std::string(argv[1]) + "/run"},
                                {"config", cfg},
                                {"scalars", scalars},
                                {"texts", texts}}
                     .dump(1)
              << "\n";
    return 0;
  } catch (const braid::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
