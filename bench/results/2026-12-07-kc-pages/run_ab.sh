#!/usr/bin/env bash
# Before / after the decline of the kernel copy on 4 KiB pages (docs/shm.md, "Kernel copy";
# docs/performance.md, "The kernel copy on 4 KiB pages"): BEFORE built at fc1a3b4, AFTER at the
# commit that made it. ab_pages4k/: the bench's buffers on 4 KiB pages (BRAID_CPU_HUGEPAGES=0),
# 3 alternating rounds; ab_huge/: on huge pages, 2 rounds; 2 and 4 ranks each.
# Usage: run_ab.sh BEFORE AFTER [out dir (this folder)]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${3:-$here}
ab="$here/../../ab_mpirun.sh"
args=(-b 4M -e 64M -f 2 -n 5 --repeats 3 -c 1 --op all_reduce --op reduce_scatter)
BRAID_CPU_HUGEPAGES=0 AB_RANKS="2 4" bash "$ab" "$1" "$2" 3 "$out/ab_pages4k" "${args[@]}"
AB_RANKS="2 4" bash "$ab" "$1" "$2" 2 "$out/ab_huge" "${args[@]}"
for x in ab_pages4k ab_huge; do
  python3 "$here/../../ab_summarize.py" "$out/$x" >"$out/$x/summary.txt"
done
