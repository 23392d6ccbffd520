#!/usr/bin/env bash
# The middle staging ring (docs/performance.md, "Idle pages and the middle staging ring";
# docs/shm.md, "Staging ring"): what idle pages cost on this machine, then braid before and
# after the change in the same job as OpenMPI and the limit program.
# Usage: run.sh BEFORE AFTER [out dir (this folder)] [build dir (build)]
#   BEFORE, AFTER: braid binaries (before: commit 7dc486d; after: commit 7e4c2bd)
set -euo pipefail
before=$1 after=$2
here=$(cd "$(dirname "$0")" && pwd)
out=${3:-$here}
build=${4:-build}
mkdir -p "$out"
# 1. The machine: the first touch of pages left idle, shared memory and transparent huge pages.
{
  for ms in 0 100 1000 3000; do "$build/bin/cacheline_probe" idle 2097152 "$ms"; done
  for ms in 100 1000 3000; do "$build/bin/cacheline_probe" idle 64000000 "$ms"; done
  "$build/bin/cacheline_probe" idle 64000000 3000 huge
} >"$out/idle.txt"
# 2. The case that showed it: a 2-rank reduce_scatter of 16 KiB in a whole sweep, alternately.
for round in 1 2 3 4; do
  for which in before after; do
    bin=$before
    [[ $which == after ]] && bin=$after
    "$bin" bench --nproc 2 -b 16 -e 64M -f 4 -n 20 --repeats 5 -c 1 --op all_gather \
      --op reduce_scatter >"$out/sweep_${which}_r${round}.txt" 2>&1
  done
done
grep -H -E "^ +16384 .* sum " "$out"/sweep_*.txt >"$out/sweep_16k.txt"
# 3. Every op of 1 KiB-1 MiB at 2, 4 and 8 ranks under mpirun, alternately.
bash "$(dirname "$0")/../../ab_mpirun.sh" "$before" "$after" 3 "$out/ab" -b 1K -e 1M -f 2 -n 50 \
  --repeats 3 -c 1 --op all_reduce --op all_gather --op reduce_scatter --op broadcast
python3 "$(dirname "$0")/../../ab_summarize.py" "$out/ab" >"$out/summary.txt"
# 4. A second look at 4 and 8 ranks (four rounds, every fourth size), where the first differed
#    in cells the change does not touch.
AB_RANKS="8 4" bash "$(dirname "$0")/../../ab_mpirun.sh" "$before" "$after" 4 "$out/ab_recheck" \
  -b 1K -e 1M -f 4 -n 50 --repeats 3 -c 1 --op all_reduce --op all_gather --op reduce_scatter
python3 "$(dirname "$0")/../../ab_summarize.py" "$out/ab_recheck" >"$out/summary_recheck.txt"
