#!/usr/bin/env bash
# Crowded groups stage (docs/performance.md, "Crowded groups stage"; docs/shm.md, "Kernel
# copy"): braid before and after the change, in the same job as OpenMPI and the limit program,
# at 6, 8 and 4 ranks on this machine's CPUs (2 vCPUs: 6 and 8 ranks are "crowded", more than
# twice the CPUs; 4 ranks are not, and their path did not change).
# First, what showed it (3 and 5 ranks were run later, to place the boundary): the BEFORE
# binary with the kernel copy on (its default; "before" in toggle/ and summary_toggle.txt) and
# off (BRAID_SHM_KERNEL_COPY_BYTES=0; "after"), alternately.
# Usage: run.sh BEFORE AFTER [out dir (this folder)]
#   BEFORE, AFTER: braid binaries (before: commit 308efe9; after: commit ad6dd13)
set -euo pipefail
before=$1 after=$2
here=$(cd "$(dirname "$0")" && pwd)
out=${3:-$here}
mkdir -p "$out/toggle"
for round in 1 2 3; do
  for np in 3 4 5 6 8; do
    for which in before after; do
      kc=()
      [[ $which == after ]] && kc=(BRAID_SHM_KERNEL_COPY_BYTES=0)
      env "${kc[@]}" "$before" bench --nproc "$np" -b 64K -e 16M -f 4 -n 5 --repeats 3 -c 0 \
        --op all_gather --op broadcast --op reduce_scatter --op all_reduce \
        >"$out/toggle/np${np}_${which}_r${round}.txt" 2>&1
    done
  done
done
python3 "$here/../../ab_summarize.py" "$out/toggle" | cut -d'|' -f1-4 >"$out/summary_toggle.txt"
AB_RANKS="6 8 4" bash "$here/../../ab_mpirun.sh" "$before" "$after" 3 "$out/ab" -b 64K -e 16M \
  -f 4 -n 5 --repeats 3 -c 1 --op all_gather --op broadcast --op reduce_scatter --op all_reduce
python3 "$here/../../ab_summarize.py" "$out/ab" >"$out/summary.txt"
