#!/usr/bin/env bash
# Times braid's pipeline schedules (GPipe, 1F1B, interleaved 1F1B with v = 2) on 4 ranks and on
# 2 ranks of `braid launch` (bench/pipeline_bench.cc: the model, what is measured, the one-process
# reference), one intra-op thread per rank. Prints rank 0's tables: step time, every rank's
# measured bubble, the theory and the model clock fed with the measured chunk times
# (docs/performance.md, "Pipeline schedules"). Builds nothing.
# Usage: bench/run_pipeline.sh [build dir (build)] [steps (5)] [warmup (2)] [micro-batches (8)]
set -euo pipefail
build=${1:-build}
steps=${2:-5}
warmup=${3:-2}
M=${4:-8}
bin="$build/bin/braid_bench_pipeline"
braid="$build/bin/braid"
for f in "$bin" "$braid"; do
  [[ -x "$f" ]] || { echo "run_pipeline.sh: $f not found (build braid_bench_pipeline and braid_cli)" >&2; exit 1; }
done
export BRAID_NUM_THREADS=1
echo "# $(nproc) CPUs; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for n in 4 2; do
  echo "## $n ranks"
  "$braid" launch --nproc-per-node "$n" "$bin" "$steps" "$warmup" "$M" | grep "^\[rank 0\]" |
    sed 's/^\[rank 0\] //'
done
