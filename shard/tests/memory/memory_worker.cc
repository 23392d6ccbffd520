// memory_worker: one rank of a multi-process check of the memory estimate (run_memory.sh):
// every rank trains the small GPT-2 (or Llama) of memory_test_util.h for two steps under
// braid launch, measures the second with its own process's allocator, and compares the peak
// with estimate_memory for this world size; exits 1 when they differ by more than 10% of the
// measured peak, or (without the communication thread) when what stays allocated between
// steps differs at all.
//
//   memory_worker <stage 0-3> [--llama] [--param-dtype bf16] [--reduce-dtype bf16]
//                 [--keep-after-forward]
//                 [--overlap] [--autocast bf16] [--checkpointing] [--micro-batches K]
//                 [--bucket-cap-mb X] [--not-deterministic] [--shard-group-size S]
#include <cstdio>
#include <string>

#include "braid/core/error.h"
#include "memory_test_util.h"

namespace {

using namespace braid;
using namespace braid::shard;

int run(int argc, char** argv) {
  BRAID_CHECK(argc >= 2, kInvalidArgument, "usage: memory_worker <stage 0-3> [options]");
  std::string name = std::string("stage ") + argv[1];
  for (int i = 2; i < argc; ++i) name += std::string(" ") + argv[i];
  memory_test::Case c = memory_test::make_case(name, zero_stage_from_int(std::stoll(argv[1])));
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--llama") {
      const memory_test::Case l =
          memory_test::make_case(name, c.sharding.stage, memory_test::Family::kLlama);
      c.family = l.family;
      c.name = l.name;
    } else if (a == "--param-dtype" && has_value) {
      c.sharding.precision.param_dtype = parse_dtype(argv[++i]);
    } else if (a == "--reduce-dtype" && has_value) {
      c.sharding.precision.reduce_dtype = parse_dtype(argv[++i]);
    } else if (a == "--keep-after-forward") {
      c.sharding.reshard_after_forward = false;
    } else if (a == "--overlap") {
      c.sharding.overlap = true;
    } else if (a == "--autocast" && has_value) {
      c.workload.autocast = parse_dtype(argv[++i]);
    } else if (a == "--checkpointing") {
      c.set_checkpointing(true);
    } else if (a == "--micro-batches" && has_value) {
      c.workload.micro_batches = std::stoll(argv[++i]);
    } else if (a == "--bucket-cap-mb" && has_value) {
      c.sharding.ddp.bucket_cap_mb = std::stod(argv[++i]);
    } else if (a == "--not-deterministic") {
      c.sharding.deterministic = false;
    } else if (a == "--shard-group-size" && has_value) {
      c.sharding.shard_group_size = std::stoll(argv[++i]);
    } else {
      BRAID_FAIL(kInvalidArgument, "memory_worker: unknown option ", a);
    }
  }
  auto pg = ProcessGroup::create({});
  const memory_test::Measured m = memory_test::measure(c, pg);
  const MemoryEstimate e = memory_test::predict(c, pg->size());
  std::printf("%s\n", memory_test::report(c, pg->size(), pg->rank(), m, e).c_str());
  std::fflush(stdout);
  const double err = memory_test::relative_error(m.peak, e.peak_bytes);
  BRAID_CHECK(err <= 0.10, kInvalidArgument, "rank ", pg->rank(), ": predicted peak ", e.peak_bytes,
              " is ", 100 * err, "% off the measured ", m.peak);
  BRAID_CHECK(c.sharding.overlap.value_or(true) || m.between_steps == e.between_steps,
              kInvalidArgument, "rank ", pg->rank(), ": ", m.between_steps,
              " bytes stay allocated between steps, predicted ", e.between_steps);
  pg->barrier();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "memory_worker: %s\n", e.what());
    return 1;
  }
}
