#!/usr/bin/env bash
# Small reduces (docs/performance.md, "Small reduces"): BEFORE (every reduce through the step
# protocol) and AFTER (reduces of up to the small-reduce limit through the broadcast cells)
# alternated under mpirun at 2, 4 and 8 ranks, with OpenMPI and the limit program in each job,
# three rounds, then the medians.
# Usage: run.sh BEFORE AFTER (two braid binaries)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
bash "$root/bench/ab_mpirun.sh" "$1" "$2" 3 "$here/ab" -b 16 -e 16M -f 4 -n 20 --repeats 3 -c 1 \
  --iters-small 1000 --op reduce
python3 "$root/bench/ab_summarize.py" "$here/ab" >"$here/summary.txt"
