#!/usr/bin/env bash
# Small broadcasts read by reference (docs/performance.md, "Small broadcasts by reference";
# Note [Small broadcast by reference] in comm/src/shm_broadcast.cc): BEFORE and AFTER
# alternated under mpirun at 3, 4 and 8 ranks, OpenMPI and the limit program in each job.
#   huge/    -e 4M: the bench's buffers are 4 MiB blocks of braid's cpu allocator, on huge pages
#   pages4k/ -e 1M: 1 MiB buffers on 4 KiB pages, where nothing changes
# Usage: run.sh BEFORE AFTER (braid binaries)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
before=$1 after=$2
export AB_RANKS="3 4 8"
args=(-f 2 -n 20 --repeats 3 -c 1 --op broadcast)
bash "$root/bench/ab_mpirun.sh" "$before" "$after" 4 "$here/huge" -b 64K -e 4M "${args[@]}"
bash "$root/bench/ab_mpirun.sh" "$before" "$after" 2 "$here/pages4k" -b 64K -e 1M "${args[@]}"
for d in huge pages4k; do python3 "$root/bench/ab_summarize.py" "$here/$d" >"$here/$d/summary.txt"; done
