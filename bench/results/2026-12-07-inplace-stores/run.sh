#!/usr/bin/env bash
# In-place two-shot all_reduce with ordinary stores where every rank has a CPU (docs/shm.md,
# "Algorithms"; docs/performance.md, "In-place two-shot all_reduce: ordinary stores"): BEFORE
# built at 4631be4, AFTER at the commit that made the change; staged (the kernel copy off), 2
# ranks, 4 alternating rounds with OpenMPI and the limit program in each job.
# Usage: run.sh BEFORE AFTER [out dir (this folder)]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${3:-$here}
BRAID_SHM_KERNEL_COPY_BYTES=0 AB_RANKS=2 bash "$here/../../ab_mpirun.sh" "$1" "$2" 4 "$out" \
  -b 4M -e 64M -f 2 -n 5 --repeats 3 -c 1 --op all_reduce
python3 "$here/../../ab_summarize.py" "$out" >"$out/summary.txt"
