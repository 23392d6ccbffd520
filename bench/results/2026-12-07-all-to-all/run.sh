#!/usr/bin/env bash
# all_to_all through the kernel copy (docs/performance.md, "all_to_all reads its peers' blocks
# in place"): BEFORE and AFTER alternated under mpirun at 2, 4 and 8 ranks with OpenMPI in each
# job (the limit program has no all_to_all and says so), three rounds, then the medians.
# Usage: run.sh BEFORE AFTER (two braid binaries)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
bash "$root/bench/ab_mpirun.sh" "$1" "$2" 3 "$here/ab" -b 1K -e 16M -f 4 -n 20 --repeats 3 -c 1 \
  --iters-small 1000 --op all_to_all
python3 "$root/bench/ab_summarize.py" "$here/ab" >"$here/summary.txt"
