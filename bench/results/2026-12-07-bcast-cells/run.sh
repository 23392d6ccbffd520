#!/usr/bin/env bash
# Small broadcasts of up to 80 bytes in the cell, and data slots from slot 0 again once the
# receivers caught up (docs/performance.md, "Small broadcasts: fewer pages"; docs/shm.md,
# "Small broadcasts"): braid before and after, alternated, with OpenMPI and the limit program in
# the same job.
# Usage: run.sh BEFORE AFTER [out dir (this folder)]
#   BEFORE: commit 7e4c2bd; AFTER: commit 23d754b
set -euo pipefail
before=$1 after=$2
here=$(cd "$(dirname "$0")" && pwd)
out=${3:-$here}
ab=$here/../../ab_mpirun.sh
sum=$here/../../ab_summarize.py
# Warm: back-to-back broadcasts of 16 B-16 KiB at 2, 4 and 8 ranks.
bash "$ab" "$before" "$after" 4 "$out/warm" -b 16 -e 16K -f 2 -n 200 --repeats 3 -c 1 --op broadcast
# After seconds of other collectives: the broadcast sweep follows a whole all_reduce sweep.
AB_RANKS="2 4" bash "$ab" "$before" "$after" 2 "$out/sweep" -b 16 -e 64M -f 4 -n 20 --repeats 5 \
  -c 1 --op all_reduce --op broadcast
# The sizes that read slower warm, again: 2 ranks, 64 B-1 KiB, five rounds.
AB_RANKS="2" bash "$ab" "$before" "$after" 5 "$out/warm2" -b 64 -e 1K -f 2 -n 500 --repeats 3 -c 1 \
  --op broadcast
for x in warm sweep warm2; do python3 "$sum" "$out/$x" >"$out/summary_$x.txt"; done
