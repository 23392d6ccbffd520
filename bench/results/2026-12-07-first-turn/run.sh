#!/usr/bin/env bash
# The staging rings' first turn (docs/performance.md, "The staging rings' first turn"): two
# braid binaries alternated, built before and after the change that maps every page a rank
# uses outside the arenas when it joins (d354b6e), at 2, 4 and 8 ranks under mpirun, with
# OpenMPI and the limit program in the same job. Short loops, as the issue's tables use: at
# -n 20 a 4-rank all_gather of 8 KiB a rank runs on the 2 MiB ring's first turn.
# Usage: run.sh BEFORE AFTER [rounds (2)] [out dir (this folder)]
set -euo pipefail
before=$1 after=$2 rounds=${3:-2}
here=$(cd "$(dirname "$0")" && pwd)
out=${4:-$here}
mkdir -p "$out"
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
ops=(--op all_reduce --op all_gather --op reduce_scatter --op broadcast)
{
  grep -m1 "model name" /proc/cpuinfo
  grep -m1 "^model\s" /proc/cpuinfo
  echo "nproc $(nproc); load average $(cut -d' ' -f1-3 /proc/loadavg); $(date -u)"
} >"$out/machine.txt"
for round in $(seq "$rounds"); do
  for np in 2 4 8; do
    for which in before after; do
      bin=$before
      [[ $which == after ]] && bin=$after
      "${mpi[@]}" -np "$np" "$bin" bench -b 4K -e 1M -f 2 -n 20 --repeats 3 -c 1 "${ops[@]}" \
        --peer mpi --peer limit >"$out/np${np}_${which}_r${round}.txt" 2>&1
    done
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg); $(date -u)" >>"$out/machine.txt"
