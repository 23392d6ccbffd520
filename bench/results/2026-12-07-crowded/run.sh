#!/usr/bin/env bash
# Crowded groups stage (docs/performance.md, "Crowded groups stage"; docs/shm.md, "Kernel
# copy"): braid before and after the change, in the same job as OpenMPI and the limit program,
# at 6, 8 and 4 ranks on this machine's CPUs (2 vCPUs: 6 and 8 ranks are "crowded", more than
# twice the CPUs; 4 ranks are not, and their path did not change).
# Usage: run.sh BEFORE AFTER [out dir (this folder)]
#   BEFORE, AFTER: braid binaries (before: commit 308efe9; after: the commit that adds this)
set -euo pipefail
before=$1 after=$2
here=$(cd "$(dirname "$0")" && pwd)
out=${3:-$here}
mkdir -p "$out"
AB_RANKS="6 8 4" bash "$here/../../ab_mpirun.sh" "$before" "$after" 3 "$out/ab" -b 64K -e 16M \
  -f 4 -n 5 --repeats 3 -c 1 --op all_gather --op broadcast --op reduce_scatter --op all_reduce
python3 "$here/../../ab_summarize.py" "$out/ab" >"$out/summary.txt"
