#!/usr/bin/env bash
# The middle ring's last 2 KiB (docs/performance.md, "The middle ring's last 2 KiB"; docs/shm.md,
# "Staging ring"): braid before and after the middle ring grew from 256 to 264 KiB, alternately
# under mpirun with OpenMPI and the limit program, at 3, 5 and 6 ranks, where a reduce_scatter
# of 64 KiB in all stages steps of a little over 64 KiB.
# Usage: run.sh BEFORE AFTER [out dir (this folder)]
#   BEFORE, AFTER: braid binaries (before: commit 6e81928; after: commit e231344)
set -euo pipefail
before=$1 after=$2
here=$(cd "$(dirname "$0")" && pwd)
out=${3:-$here}
mkdir -p "$out"
AB_RANKS="3 5 6" bash "$here/../../ab_mpirun.sh" "$before" "$after" 3 "$out/ab" -b 16K -e 16M \
  -f 4 -n 10 --repeats 3 -c 1 --op reduce_scatter --op all_gather --op all_reduce
python3 "$here/../../ab_summarize.py" "$out/ab" >"$out/summary.txt"
