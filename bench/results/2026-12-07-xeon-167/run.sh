#!/usr/bin/env bash
# Issue 35's collective tables on one machine from single runs, after the 2026-12-07 changes
# (docs/performance.md, "Issue 35's collectives on the Xeon again"; family 6 model 167): braid /
# limit program / OpenMPI for the four collectives at 2, 4 and 8 ranks under one mpirun each.
# The training figures of the 2026-12-06 run (bench/results/2026-12-06-xeon-167) still stand:
# nothing they use changed.
# Usage: run.sh [out dir (this folder)] [build dir (build)]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here}
build=${2:-build}
mkdir -p "$out"
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
ops=(--op all_reduce --op all_gather --op reduce_scatter --op broadcast)
{
  grep -m1 "model name" /proc/cpuinfo
  grep -m1 "^model\s" /proc/cpuinfo
  echo "nproc $(nproc); load average $(cut -d' ' -f1-3 /proc/loadavg); $(date -u)"
  git rev-parse --short HEAD 2>/dev/null || true
} >"$out/machine.txt"
"${mpi[@]}" -np 2 "$build/bin/braid" bench -b 16 -e 64M -f 4 -n 20 --repeats 5 -c 1 "${ops[@]}" \
  --peer mpi --peer limit -J "$out/w2.json" >"$out/w2.txt" 2>&1
"${mpi[@]}" -np 4 "$build/bin/braid" bench -b 16 -e 16M -f 4 -n 20 --repeats 3 -c 1 "${ops[@]}" \
  --peer mpi --peer limit -J "$out/w4.json" >"$out/w4.txt" 2>&1
"${mpi[@]}" -np 8 "$build/bin/braid" bench -b 16 -e 16M -f 4 -n 20 --repeats 3 -c 1 "${ops[@]}" \
  --peer mpi --peer limit -J "$out/w8.json" >"$out/w8.txt" 2>&1
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg); $(date -u)" >>"$out/machine.txt"
