#!/usr/bin/env bash
# The call key in the step line (docs/performance.md, "The call key in the step line"): BEFORE
# (the call's fields in the step line, messages of up to 16 bytes in it, the call published
# before the write) and AFTER (a key of the call in their place, messages of up to 48 bytes in
# it, the key written last) alternated under mpirun at 2, 4 and 8 ranks, with OpenMPI and the
# limit program in each job, three rounds, then the medians: small messages (ab/), and larger
# ones, which only the order of the stores could change (ab_large/).
# Usage: run.sh BEFORE AFTER (two braid binaries)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
bash "$root/bench/ab_mpirun.sh" "$1" "$2" 3 "$here/ab" -b 16 -e 4K -f 2 -n 20 --repeats 3 -c 1 \
  --iters-small 1000 --op all_reduce --op reduce_scatter --op all_gather --op all_to_all
python3 "$root/bench/ab_summarize.py" "$here/ab" >"$here/summary.txt"
bash "$root/bench/ab_mpirun.sh" "$1" "$2" 3 "$here/ab_large" -b 64K -e 16M -f 4 -n 20 --repeats 3 \
  -c 1 --op all_reduce --op reduce_scatter --op all_gather
python3 "$root/bench/ab_summarize.py" "$here/ab_large" >"$here/summary_large.txt"
