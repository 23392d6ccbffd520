// docs/trackers.md's example: TensorBoard and JSON Lines trackers on the main process. ctest
// runs it under braid launch --nproc-per-node 2; the main process exits 1 unless
// runs/gpt-small/ holds the events file, hparams.json and one metrics.jsonl line per call.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "braid/accel/accelerator.h"
#include "braid/nn/optim.h"

// [snippet]
#include "braid/accel/trackers.h"
using namespace braid::accel;

int main() {
  // [end snippet]
  Accelerator acc;
  braid::nn::Parameter w(braid::Tensor::zeros({4}));
  braid::nn::SGD opt({w}, {.lr = 3e-4});
  braid::nn::LRScheduler sched(opt, braid::nn::SchedulerType::kLinear, {.num_training_steps = 10});
  const int64_t steps = 5;
  auto train_step = [&, step = 0]() mutable {  // stands for forward, backward and the steps
    sched.step();
    return 1.0 / ++step;
  };
  // [snippet]
  Trackers trackers;
  trackers.init({.log_with = {LoggerType::kTensorBoard, LoggerType::kJsonl},
                 .logging_dir = "runs",        // ProjectConfiguration.logging_dir
                 .project_name = "gpt-small",  // init_trackers(project_name)
                 .config = HParams{{"lr", 3e-4}, {"batch_size", 32}, {"model", "gpt2"}},
                 .is_main_process = acc.is_main_process()});
  for (int64_t step = 0; step < steps; ++step) {
    double loss = train_step();
    trackers.log({{"train/loss", loss}, {"lr", sched.get_last_lr()[0]}}, step);
  }
  std::string generated = "sample text";
  trackers.log_text("samples", generated, steps);  // Accelerate logs str values as text
  trackers.end_training();
  // [end snippet]

  acc.wait_for_everyone();
  if (!acc.is_main_process()) return 0;
  const std::filesystem::path run = "runs/gpt-small";
  int lines = 0, events = 0;
  std::ifstream metrics(run / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) ++lines;
  for (const auto& e : std::filesystem::directory_iterator(run)) {
    events += e.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  }
  const bool ok =
      lines == steps + 1 && events == 1 && std::filesystem::exists(run / "hparams.json");
  if (!ok) std::fprintf(stderr, "FAIL: %d metrics lines, %d event files\n", lines, events);
  return ok ? 0 : 1;
}
